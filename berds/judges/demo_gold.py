"""``demo-gold``: the demo data's labels by construction, as a judge (exact, but only for the demo corpus)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from berds.errors import BerdsError
from berds.io import iter_jsonl
from berds.questions import DEMO_DIR, read_questions
from berds.types import JudgePair, Verdict


class DemoGoldJudge:
    """Labels by construction for the demo data: a perfect judge, but only for demo passages.

    A passage written for one question supports the perspectives listed in ``labels.jsonl`` and nothing
    else; passages written for other questions and the off-topic fillers support none of its perspectives.
    """

    prompt_version = "demo-labels-v1"

    def __repr__(self) -> str:
        return f"DemoGoldJudge(id={self.id!r})"

    def __init__(self, *, demo_dir: str | Path = DEMO_DIR, title_position: str = "after"):
        from berds.corpora.docstore import load_passages_jsonl

        demo_dir = Path(demo_dir)
        questions = {q.id: q for q in read_questions(demo_dir / "questions.jsonl", dataset="demo")}
        passages = {p.id: p for p in load_passages_jsonl(demo_dir / "corpus.jsonl")}
        self._texts = {p.judge_text(title_position) for p in passages.values()}
        self._support: set[tuple[str, str]] = set()
        for line, rec in iter_jsonl(demo_dir / "labels.jsonl"):
            q, p = questions[rec["question_id"]], passages[rec["passage_id"]]
            for i in rec["supports"]:
                self._support.add((q.perspectives[i], p.judge_text(title_position)))
        self.id = f"demo-gold|{title_position}"

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        out = []
        for pair in pairs:
            if pair.passage not in self._texts:
                raise BerdsError(
                    f"the demo-gold judge only knows the demo corpus; passage {pair.passage[:60]!r}... is not in it"
                )
            label = (pair.perspective, pair.passage) in self._support
            out.append(Verdict(label=label, p_yes=float(label), raw="Yes" if label else "No"))
        return out
