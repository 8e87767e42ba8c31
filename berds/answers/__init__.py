"""Answer-level metrics for contentious questions: DebateQA's P.D. and D.A. (``berds answers eval``).

``evaluate_answers(["answers.jsonl"], "transformers:gpt2", questions="debateqa.jsonl", metrics=("pd", "da"))``;
see ``berds.answers.evaluation`` and docs/answers.md.
"""

from berds.answers.evaluation import (
    Answer,
    AnswerEvalOptions,
    AnswerEvalResult,
    dispute_awareness,
    evaluate_answers,
    length_adjust,
    parse_da_reply,
    perspective_diversity,
    read_answers,
)

__all__ = ["Answer", "AnswerEvalOptions", "AnswerEvalResult", "dispute_awareness", "evaluate_answers",
           "length_adjust", "parse_da_reply", "perspective_diversity", "read_answers"]
