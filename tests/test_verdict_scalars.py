"""A plug-in judge scoring with torch answers with torch's 0-d values (``probs[i] > 0.5``, ``probs[i]``): berds
took them as a bool and a number and cached them, until Verdict's checks ended such a judge in an AttributeError
('torch.dtype' object has no attribute 'kind') or refused a P(Yes) of tensor(0.7) as not a probability."""

from __future__ import annotations

import numpy as np
import pytest

from berds.evaluate.cache import JudgementCache
from berds.evaluate.judging import judge_missing
from berds.types import JudgePair, Verdict

torch = pytest.importorskip("torch")


class TorchJudge:
    """A plug-in judge whose scores are a torch tensor."""

    id = "torch-plugin-v1"
    prompt_version = "none"

    def judge(self, pairs):
        probs = torch.tensor([0.9 if "yes" in p.passage else 0.2 for p in pairs])
        return [Verdict(label=probs[i] > 0.5, p_yes=probs[i], raw="") for i in range(len(pairs))]


def test_torch_and_numpy_zero_d_values_are_a_label_and_a_probability(tmp_path):
    pairs = [JudgePair("p", "yes text"), JudgePair("p", "other text")]
    with JudgementCache(tmp_path / "cache.sqlite") as cache:
        verdicts = judge_missing(TorchJudge(), pairs, cache=cache, progress=False)
        again = cache.get_many(TorchJudge.id, TorchJudge.prompt_version, pairs)
    for got in (verdicts[("p", "yes text")], again[0]):
        assert got.label is True and got.p_yes == pytest.approx(0.9)
    for got in (verdicts[("p", "other text")], again[1]):
        assert got.label is False and got.p_yes == pytest.approx(0.2)
    assert Verdict(np.array(True), np.array(0.25)) == Verdict(True, 0.25)
    assert Verdict(torch.tensor(1), torch.tensor(0.5, dtype=torch.bfloat16)) == Verdict(True, 0.5)


@pytest.mark.parametrize("label, p_yes", [
    (torch.tensor(0.7), None), (torch.tensor([True]), None), ("No", None), (True, torch.tensor(1.5)),
    (True, torch.tensor(True)),
])
def test_other_tensors_are_still_refused(label, p_yes):
    with pytest.raises(ValueError, match="Verdict"):
        Verdict(label, p_yes)
