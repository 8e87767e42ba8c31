"""Passages needed to cover every perspective (the study's Table 17).

For a question, ``docs needed`` is the smallest depth ``d`` such that the top ``d`` passages together
support every perspective (``berds.evaluate.metrics.docs_needed``), or *not covered* when even the top
``depth`` (100) do not. Per run (and per dataset of the run) the table reports::

    covered  = share of questions covered within depth
    mean / median of docs needed, over the covered questions only
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.evaluate.analyses.common import Supports, pct
from berds.evaluate.metrics import docs_needed


def docs_needed_summary(needed: Sequence[int | None]) -> dict[str, Any]:
    """Counts and statistics for a list of per-question docs-needed values (None = not covered)."""
    covered = [n for n in needed if n is not None]
    return {
        "questions": len(needed),
        "covered": len(covered),
        "covered_share": len(covered) / len(needed) if needed else float("nan"),
        "mean": float(np.mean(covered)) if covered else None,
        "median": float(np.median(covered)) if covered else None,
    }


@dataclass
class DocsNeededResult:
    KIND = "docs-needed"
    depth: int
    rows: list[dict[str, Any]]  # {"run", "dataset", "questions", "covered", "covered_share", "mean", "median"}
    per_question: dict[str, dict[str, int | None]] = field(default_factory=dict)
    judge: str | None = None  # the judge id that judged the runs (None: a file from an earlier berds)

    def to_json(self) -> dict[str, Any]:
        return {"depth": self.depth, "judge": self.judge, "rows": self.rows, "per_question": self.per_question}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DocsNeededResult":
        return cls(int(data["depth"]), list(data["rows"]), dict(data.get("per_question", {})), data.get("judge"))

    def table(self) -> tuple[str, list[str], list[list[str]]]:
        header = ["run", "set", "questions", f"covered within {self.depth} %", "mean docs needed", "median docs needed"]
        body = [[r["run"], r["dataset"], str(r["questions"]), pct(r["covered_share"]),
                 "n/a" if r["mean"] is None else f"{r['mean']:.1f}",
                 "n/a" if r["median"] is None else f"{r['median']:g}"] for r in self.rows]
        return f"Passages needed to cover all perspectives (depth {self.depth})", header, body


def docs_needed_analysis(supports: Mapping[str, Supports], depth: int = 100,
                         datasets: Mapping[str, Any] | None = None, judge: str | None = None) -> DocsNeededResult:
    """Per run: docs needed for every question, summarised overall and per dataset (``datasets``: qid -> name,
    or run label -> {qid -> name} where runs of different question sets share ids)."""
    if depth < 1:
        raise BerdsError(f"depth must be at least 1, got {depth}")
    all_datasets = datasets or {}
    rows, per_question = [], {}
    for label, support in supports.items():
        by_run = all_datasets.get(label)
        datasets = by_run if isinstance(by_run, Mapping) else all_datasets
        needed = {qid: docs_needed(np.asarray(m, dtype=bool)[:, :depth]) for qid, m in support.items()}
        per_question[label] = needed
        rows.append({"run": label, "dataset": "all", **docs_needed_summary(list(needed.values()))})
        names = sorted({datasets.get(q) or "-" for q in needed})
        if len(names) > 1:
            for name in names:
                rows.append({"run": label, "dataset": name,
                             **docs_needed_summary([n for q, n in needed.items() if (datasets.get(q) or "-") == name])})
    return DocsNeededResult(depth, rows, per_question, judge)


def analyze_docs_needed(run_paths: Sequence[str], judge: str | Any, *, depth: int = 100,
                        judge_options: Mapping[str, Any] | None = None, cache_path: str | None = None,
                        allow_short: bool = False, allow_unparsed: bool = False, progress: bool = False) -> DocsNeededResult:
    """``berds analyze docs-needed``: judge the top ``depth`` of each run and find the covering prefix."""
    from berds.evaluate.analyses.common import judge_runs, run_labels
    from berds.runs import load_run

    runs = [load_run(p, allow_empty=allow_short) for p in run_paths]
    results = judge_runs(runs, judge, depth, judge_options=judge_options, cache_path=cache_path,
                         allow_short=allow_short, allow_unparsed=allow_unparsed, progress=progress,
                         depth_option="--depth")
    labels = run_labels(runs, run_paths)
    datasets = {lab: {qid: q.dataset for qid, q in r.questions.items()} for lab, r in zip(labels, runs)}
    return docs_needed_analysis({lab: res.support for lab, res in zip(labels, results)}, depth, datasets,
                                results[0].judge_id)
