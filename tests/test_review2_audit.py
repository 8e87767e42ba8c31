"""``berds judge audit`` with runs: a run whose questions carry no gold perspectives is refused under the run's own
name, whatever the progress setting (each variant's judging bar is named "<variant> <run>", and that display name
reached the error as if it were the run's), and before any pair is judged."""

from __future__ import annotations

import pytest

from berds.errors import InputError
from berds.trust.audit import audit
from berds.trust.labels import read_labelled_pairs
from berds.types import Question, Run
from judge_trust_fixtures import write_demo_subset
from judges_for_tests import OverlapJudge
from test_audit import make_runs


class CountingJudge(OverlapJudge):
    judged = 0

    def judge(self, pairs, *args, **kwargs):
        CountingJudge.judged += len(pairs)
        return super().judge(pairs, *args, **kwargs)


@pytest.mark.parametrize("progress", [True, False])
def test_a_run_without_gold_is_refused_by_its_own_name_before_judging(tmp_path, progress):
    labelled = read_labelled_pairs(write_demo_subset(tmp_path / "pairs.tsv"))
    run = make_runs(labelled)["diverse"]
    bare = Run({qid: Question(q.id, q.text, ()) for qid, q in run.questions.items()}, run.hits, name="diverse")
    CountingJudge.judged = 0
    with pytest.raises(InputError) as e:
        audit(labelled, CountingJudge(), variants=["sentence-order"], runs={"diverse": bare}, k=5, progress=progress)
    assert str(e.value).startswith("diverse, record ") and "no gold perspectives" in str(e.value), str(e.value)
    assert CountingJudge.judged == 0
