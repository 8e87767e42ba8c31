"""Evaluation: runs -> (perspective, passage) pairs -> cached verdicts -> MRecall@k / Precision@k, analyses, reports.

Judges live in ``berds.judges``; the tools that check a judge (validate, audit, calibrate) in ``berds.trust``.
"""

from berds.evaluate.cache import JudgementCache
from berds.evaluate.evaluation import EvalOptions, EvalResult, evaluate_paths, evaluate_run, metrics_table, write_eval_outputs
from berds.evaluate.metrics import mrecall_at_k, precision_at_k
from berds.judges import JUDGES, Judge, LazyJudge, LLMJudge, load_judge

__all__ = [
    "JudgementCache", "EvalOptions", "EvalResult", "LazyJudge", "evaluate_paths", "evaluate_run", "metrics_table",
    "write_eval_outputs", "JUDGES", "Judge", "LLMJudge", "load_judge", "mrecall_at_k", "precision_at_k",
]
