"""PyTerrier pipelines for the tests: pure-Python pt.Transformers (no Java) over the demo corpus.

``overlap`` ranks the demo passages by the words they share with the query (docno = berds passage id);
``overlap_with_text`` adds their text as PyTerrier's ``text``/``title`` columns; ``stranger`` returns a docno no
store holds; ``no_ranking`` returns the topics unchanged (not a ranking).
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pyterrier as pt

from berds.questions import DEMO_DIR

WORD = re.compile(r"[a-z]+")


def _demo_passages():
    with open(DEMO_DIR / "corpus.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Overlap(pt.Transformer):
    """Word overlap between the query and each passage (title + text), the top 20 per query."""

    def __init__(self, with_text: bool = False, extra_docno: str | None = None):
        self.passages = _demo_passages()
        self.words = [set(WORD.findall((p.get("title", "") + " " + p["text"]).lower())) for p in self.passages]
        self.with_text, self.extra_docno = with_text, extra_docno

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        rows = []
        for qid, query in zip(topics["qid"], topics["query"]):
            q = set(WORD.findall(query.lower()))
            scored = sorted(((len(q & w), p["id"], p) for w, p in zip(self.words, self.passages)),
                            key=lambda t: (-t[0], t[1]))[:20]
            for rank, (score, docno, p) in enumerate(scored):
                row = {"qid": qid, "query": query, "docno": docno, "score": float(score), "rank": rank}
                if self.with_text:
                    row.update(text=p["text"], title=p.get("title", ""))
                rows.append(row)
            if self.extra_docno:
                rows.append({"qid": qid, "query": query, "docno": self.extra_docno, "score": 99.0, "rank": 0})
        return pd.DataFrame(rows)


class NoRanking(pt.Transformer):
    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        return topics


overlap = Overlap()
stranger = Overlap(extra_docno="not-in-the-store")
no_ranking = NoRanking()


def overlap_with_text():  # a factory of no arguments is accepted too
    return Overlap(with_text=True)
