"""Helpers for tests/test_engine.py that Ray workers import too (tests/ goes on the workers' PYTHONPATH).

* ``make_tiny_bert`` — a random-weight 2-layer BERT with a word-level vocabulary, saved to a folder
  (a real model for real encoders and the embedded judge, small enough for a test);
* ``write_test_head`` — a hand-set logistic head for ``EmbeddedJudge`` (its real file format);
* ``CrashOnceJudge`` — the embedded judge, except that the first worker to find the crash flag file
  claims it and dies (``os._exit``) in the middle of a batch — never the test process itself;
* small functions for ``Recipe.function``: doubling numbers, raising a user error, dying every time, hanging
  (once, or every time).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

WORDS = (
    "the a of to and is are in on for not bike lanes make streets safer hurt local shops sugar taxes reduce "
    "obesity burden poor families fund health programs phones distract students from learning help emergencies "
    "evidence shows many places unrelated passage number about gardening weather both sides agree others note doc"
).split()


def make_tiny_bert(path: str | os.PathLike, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a random-weight BERT (``hidden``-d, ``layers`` layers) and its WordPiece tokenizer to ``path``."""
    import torch
    import transformers

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS)) + list(chars + ".,;:!?'-")
             + ["##" + c for c in chars])
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(str(path))
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(str(path))
    return path


def write_test_head(path: str | os.PathLike) -> Path:
    """A valid embedded-judge head with hand-set weights (identity standardisation)."""
    import json

    import numpy as np

    from berds.judges.embedded import FEATURE_NAMES, JudgeHead

    n = len(FEATURE_NAMES)
    coef = np.zeros(n)
    weights = {"cos_passage": 2.0, "cos_best_segment": 3.0, "stance_passage": 4.0, "lex_recall": 3.0, "lex_best_segment": 1.0}
    for name, w in weights.items():
        coef[FEATURE_NAMES.index(name)] = w
    head = JudgeHead(tuple(FEATURE_NAMES), np.zeros(n), np.ones(n), coef, -6.0, 0.5)
    path = Path(path)
    path.write_text(json.dumps(head.to_json()), encoding="utf-8")
    return path


class CrashOnceJudge:
    """``EmbeddedJudge`` with a small pair batch (``batch_size``: ``evaluate_run`` judges ``4 * batch_size``
    pairs per batch) whose worker can die once, mid-job: with ``crash_flag``, the first ``judge()`` call
    in a process other than ``owner_pid`` that manages to rename the flag file away exits at once."""

    def __init__(self, *, crash_flag: str | None = None, owner_pid: int = 0, batch_size: int = 2, **options: Any):
        from berds.judges.embedded import EmbeddedJudge

        self.inner = EmbeddedJudge(**{"version": "v1", **options})  # v1: the tiny test head
        self.id, self.prompt_version = self.inner.id, self.inner.prompt_version
        self.crash_flag, self.owner_pid = crash_flag, int(owner_pid)
        self.batch_size = batch_size

    def judge(self, pairs: Sequence[Any]) -> list[Any]:
        if self.crash_flag and os.getpid() != self.owner_pid:
            try:
                os.rename(self.crash_flag, self.crash_flag + ".taken")  # atomic: exactly one worker wins
            except FileNotFoundError:
                pass
            else:
                os._exit(17)
        return self.inner.judge(pairs)


def double_all(batch: Sequence[int], *, plus: int = 0) -> list[int]:
    return [2 * x + plus for x in batch]


def raise_input_error(batch: Any) -> Any:
    from berds.errors import InputError

    raise InputError("expected a number", path="numbers.jsonl", line=7, fix="fix line 7")


def exit_every_time(batch: Any) -> Any:
    os._exit(3)


def hang_once(batch: Sequence[int], *, flag: str) -> list[int]:
    """Doubles, except that the first worker to claim ``flag`` (rename it away) hangs on that batch."""
    import time

    try:
        os.rename(flag, flag + ".taken")
    except FileNotFoundError:
        return double_all(batch)
    time.sleep(3600)
    return []


def hang_every_time(batch: Any) -> Any:
    import time

    time.sleep(3600)


class CountingDoubler:
    """Counts how many times it was built (class attribute), to check engines build once per recipe."""

    builds = 0

    def __init__(self, *, plus: int = 0):
        CountingDoubler.builds += 1
        self.plus = plus

    def run(self, batch: Sequence[int]) -> list[int]:
        return double_all(batch, plus=self.plus)
