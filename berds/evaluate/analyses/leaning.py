"""Leaning of retrieval results (the study's Fig. 2): does the top k cover the supporting perspective,
the opposing one, both, or neither?

For each two-perspective question with a known stance (``berds.evaluate.analyses.stance``) and the
judged top-k passages of a run (support matrix ``S``)::

    sup = any_{j<k} S[supporting, j]        opp = any_{j<k} S[opposing, j]
    category = "both" if sup and opp, "supporting only" if sup, "opposing only" if opp, else "neither"

A run's leaning is the share of questions in each category. Questions without a known stance are left
out and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.evaluate.analyses.common import Supports, pct
from berds.evaluate.analyses.stance import Stance

CATEGORIES = ("supporting only", "opposing only", "both", "neither")


def leaning_category(support: np.ndarray, stance: Stance, k: int) -> str:
    """The category of one question (see module docstring)."""
    if not stance.known:
        raise ValueError(f"question {stance.qid!r} has no known stance")
    top = np.asarray(support, dtype=bool)[:, :k]
    sup = bool(top[stance.supporting].any())
    opp = bool(top[stance.opposing].any())
    if sup and opp:
        return "both"
    if sup:
        return "supporting only"
    if opp:
        return "opposing only"
    return "neither"


@dataclass
class LeaningResult:
    """Per run: questions in each category (counts), and which category every question fell in."""

    KIND = "leaning"
    k: int
    rows: list[dict[str, Any]]
    per_question: dict[str, dict[str, str]] = field(default_factory=dict)
    judge: str | None = None  # the judge id that judged the runs (None: a file from an earlier berds)

    def shares(self, label: str) -> dict[str, float]:
        return row_shares(next(r for r in self.rows if r["run"] == label))

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "judge": self.judge, "rows": self.rows, "per_question": self.per_question}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LeaningResult":
        return cls(int(data["k"]), list(data["rows"]), dict(data.get("per_question", {})), data.get("judge"))

    def table(self) -> tuple[str, list[str], list[list[str]]]:
        header = ["run", "questions", *[f"{c} %" for c in CATEGORIES], "no stance"]
        body = []
        for row in self.rows:
            shares = row_shares(row)  # by row: two rows may carry one run name
            body.append([row["run"], str(row["questions"]), *[pct(shares[c]) for c in CATEGORIES],
                         str(row["no_stance"])])
        return f"Leaning of the top {self.k} (share of two-perspective questions)", header, body


def row_shares(row: Mapping[str, Any]) -> dict[str, float]:
    """The share of a row's questions in each category."""
    total = row["questions"]
    return {c: (row[c] / total if total else float("nan")) for c in CATEGORIES}


def leaning(supports: Mapping[str, Supports], stances: Mapping[str, Stance], k: int,
            judge: str | None = None) -> LeaningResult:
    """Leaning of each run (``supports[label][qid]`` = support matrix) at depth ``k``."""
    if k < 1:
        raise BerdsError(f"k must be at least 1, got {k}")
    rows, per_question = [], {}
    for label, support in supports.items():
        counts = {c: 0 for c in CATEGORIES}
        cats: dict[str, str] = {}
        no_stance = 0
        for qid, matrix in support.items():
            stance = stances.get(qid)
            if stance is None or not stance.known or matrix.shape[0] != 2:
                no_stance += 1
                continue
            cat = leaning_category(matrix, stance, k)
            counts[cat] += 1
            cats[qid] = cat
        rows.append({"run": label, "questions": sum(counts.values()), **counts, "no_stance": no_stance})
        per_question[label] = cats
    if all(r["questions"] == 0 for r in rows):
        raise BerdsError("no question has two perspectives and a known stance — check the stances file "
                         "(`berds analyze stance`) belongs to these runs' questions")
    return LeaningResult(k, rows, per_question, judge)


def analyze_leaning(
    run_paths: Sequence[str],
    judge: str | Any,
    *,
    stances: str | None = None,
    stance_llm: str | Any = None,
    llm_options: Mapping[str, Any] | None = None,
    k: int = 5,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | None = None,
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
) -> LeaningResult:
    """``berds analyze leaning``: judge the top k of each run and count the leaning categories."""
    from berds.evaluate.analyses.common import check_same_question_per_id, judge_runs, run_labels
    from berds.evaluate.analyses.stance import resolve_stances
    from berds.runs import load_run

    runs = [load_run(p, allow_empty=allow_short) for p in run_paths]
    labels = run_labels(runs, run_paths)
    # a stance is a perspective's position: runs must agree on each question and on its perspectives' order
    check_same_question_per_id(runs, labels, ordered=True,
                               why="a stance names a perspective by its position, so one of them would be misread")
    questions = {qid: q for r in runs for qid, q in r.questions.items()}
    stance_map = resolve_stances(list(questions.values()), stances=stances, llm=stance_llm, llm_options=llm_options,
                                 progress=progress)
    results = judge_runs(runs, judge, k, judge_options=judge_options, cache_path=cache_path, allow_short=allow_short,
                         allow_unparsed=allow_unparsed, progress=progress)
    return leaning({lab: res.support for lab, res in zip(labels, results)}, stance_map, k, results[0].judge_id)
