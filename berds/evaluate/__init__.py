"""Judging and metrics: perspective judges, the judgement cache, MRecall@k / Precision@k, analyses."""

from berds.evaluate.cache import JudgementCache
from berds.evaluate.evaluation import EvalResult, LazyJudge, evaluate_run, metrics_table, write_eval_outputs
from berds.evaluate.judge import JUDGES, Judge, LLMJudge, load_judge
from berds.evaluate.metrics import mrecall_at_k, precision_at_k

__all__ = [
    "JudgementCache", "EvalResult", "LazyJudge", "evaluate_run", "metrics_table", "write_eval_outputs",
    "JUDGES", "Judge", "LLMJudge", "load_judge", "mrecall_at_k", "precision_at_k",
]
