"""An interrupted judging keeps every batch the judge finished answering: the judge's own batches are smaller
than the cache's commit batches, and a Ctrl-C in a later one must not take the earlier ones with it."""

import signal
import subprocess
import sys

import pytest

from berds.evaluate.cache import JudgementCache
from berds.evaluate.evaluation import evaluate_run
from berds.runs import save_run
from conftest import berds_cmd, make_run, subprocess_env
from judges_for_tests import OverlapJudge


class InterruptedJudge(OverlapJudge):
    """Answers its first ``answer`` batches, then raises ``KeyboardInterrupt`` (a Ctrl-C mid-batch)."""

    def __init__(self, *, answer: int, **kw):
        super().__init__(**kw)
        self.answer, self.answered = answer, []

    def judge(self, pairs):
        if len(self.answered) == self.answer:
            raise KeyboardInterrupt
        verdicts = super().judge(pairs)
        self.answered.append(list(pairs))
        return verdicts


def test_a_ctrl_c_in_a_later_judge_batch_keeps_the_batches_answered_before_it(tmp_path):
    run = make_run(n_questions=3, depth=10)
    cache = JudgementCache(tmp_path / "c.sqlite")
    # the judge answers 4 pairs a call, judging is cut in slices of 32: the interrupt lands in the third call
    # of the first slice
    judge = InterruptedJudge(answer=2, batch_size=4)
    with pytest.raises(KeyboardInterrupt):
        evaluate_run(run, judge, ks=(10,), cache=cache, batch_size=32, progress=False)
    answered = [p for batch in judge.answered for p in batch]
    assert len(answered) == 8
    assert cache.count(judge.id) == 8
    assert all(v is not None for v in cache.get_many(judge.id, judge.prompt_version, answered))

    # run again: only the pairs not answered before are judged
    again = InterruptedJudge(answer=10**6, batch_size=4)
    result = evaluate_run(run, again, ks=(10,), cache=cache, progress=False)
    assert result.stats.cached == 8 and result.stats.judged == result.stats.pairs - 8
    assert result.per_question == evaluate_run(run, OverlapJudge(), ks=(10,), progress=False).per_question
