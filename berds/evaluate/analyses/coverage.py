"""Corpus/retriever coverage (the study's Table 6): MRecall over the union of several runs' top ``depth``.

If every retriever (or corpus) contributes its top 100, how many questions have all their perspectives
somewhere in the pool? For question ``q`` with ``m`` perspectives and runs ``R``::

    covered_R(i) = OR_{r in R} any_{j < depth} S_r[i, j]          (perspective i found by some run)
    MRecall_union = mean_q 1[ sum_i covered_R(i) >= min(m, depth) ]

A perspective counts as covered when any passage of any run supports it, so passages that appear in
several runs (or the same passage id meaning different things in different corpora) need no matching.
Each run's own MRecall@depth is reported beside the union's, with the share of perspectives covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.evaluate.analyses.common import Supports, pct, same_questions

UNION = "union"


def covered_perspectives(matrices: Sequence[np.ndarray], depth: int) -> np.ndarray:
    """Booleans per perspective: supported by a top-``depth`` passage of at least one matrix."""
    rows = [np.asarray(m, dtype=bool)[:, :depth].any(axis=1) for m in matrices]
    if len({r.shape for r in rows}) != 1:
        raise BerdsError("runs disagree on the number of perspectives of a question")
    return np.logical_or.reduce(rows)


@dataclass
class CoverageResult:
    KIND = "coverage"
    depth: int
    rows: list[dict[str, Any]]  # {"run", "questions", "mrecall", "perspective_recall"}; last row = union
    judge: str | None = None  # the judge id that judged the runs (None: a file from an earlier berds)

    def to_json(self) -> dict[str, Any]:
        return {"depth": self.depth, "judge": self.judge, "rows": self.rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CoverageResult":
        return cls(int(data["depth"]), list(data["rows"]), data.get("judge"))

    def table(self) -> tuple[str, list[str], list[list[str]]]:
        header = ["run", "questions", f"MRecall@{self.depth} %", "perspectives covered %"]
        body = [[r["run"], str(r["questions"]), pct(r["mrecall"]), pct(r["perspective_recall"])] for r in self.rows]
        return f"Coverage of the union of the top {self.depth} passages", header, body


def coverage(supports: Mapping[str, Supports], depth: int = 100, judge: str | None = None) -> CoverageResult:
    """Each run's coverage at ``depth`` and their union's (``supports[label][qid]`` = support matrix)."""
    if depth < 1:
        raise BerdsError(f"depth must be at least 1, got {depth}")
    if not supports:
        raise BerdsError("give at least one run")
    labels = list(supports)
    qids = same_questions(labels, [supports[l] for l in labels])
    # (one run is its own union: a second row of the same figures said "union of 1 runs")
    groups = [(label, [label]) for label in labels] + ([(UNION, labels)] if len(labels) > 1 else [])
    rows = []
    for name, members in groups:
        complete, share = [], []
        for qid in qids:
            covered = covered_perspectives([supports[m][qid] for m in members], depth)
            complete.append(float(covered.sum() >= min(covered.size, depth)))
            share.append(float(covered.mean()) if covered.size else 1.0)
        rows.append({"run": name if name != UNION else f"union of {len(labels)} runs", "questions": len(qids),
                     "mrecall": float(np.mean(complete)) if qids else float("nan"),
                     "perspective_recall": float(np.mean(share)) if qids else float("nan")})
    return CoverageResult(depth, rows, judge)


def analyze_coverage(run_paths: Sequence[str], judge: str | Any, *, depth: int = 100,
                     judge_options: Mapping[str, Any] | None = None, cache_path: str | None = None,
                     allow_short: bool = False, allow_unparsed: bool = False, progress: bool = False) -> CoverageResult:
    """``berds analyze coverage``: judge the top ``depth`` of each run and measure the union's coverage."""
    from berds.evaluate.analyses.common import check_same_question_per_id, judge_runs, run_labels
    from berds.runs import load_run

    runs = [load_run(p, allow_empty=allow_short) for p in run_paths]
    labels = run_labels(runs, run_paths)
    check_same_question_per_id(runs, labels, ordered=True)  # (the union is taken question by question, row by row)
    same_questions(labels, [r.questions for r in runs])  # before judging, which can take hours
    results = judge_runs(runs, judge, depth, judge_options=judge_options, cache_path=cache_path,
                         allow_short=allow_short, allow_unparsed=allow_unparsed, progress=progress,
                         depth_option="--depth")
    return coverage({lab: res.support for lab, res in zip(labels, results)}, depth, results[0].judge_id)
