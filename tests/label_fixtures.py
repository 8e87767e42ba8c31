"""Tiny evaluated runs and labelling tasks for the `berds label` tests (judged by the cheap overlap test judge)."""

from __future__ import annotations

from pathlib import Path

from berds.evaluate.evaluation import evaluate_paths
from berds.runs import save_run
from conftest import make_run

JUDGE = "judges_for_tests:OverlapJudge"


def evaluated_run(folder: Path, *, n_questions: int = 4, depth: int = 6, name: str = "tiny",
                  judge: str = JUDGE, judge_options: dict | None = None) -> Path:
    """A run folder judged to depth 5 by ``judge``; its evaluation is in ``folder/eval/JUDGE``."""
    save_run(make_run(n_questions=n_questions, depth=depth, name=name), folder)
    evaluate_paths([folder], judge, ks=(5,), progress=False, use_cache=False, judge_options=judge_options or {})
    return folder
