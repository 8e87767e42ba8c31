"""The prediction-powered estimators (berds/trust/ppi.py): hand cases, equality with ppi_py, and coverage on
simulated judges whose errors are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.trust.ppi import Estimate, combine_strata, labels_only_estimate, ppi_estimate

ppi_py = pytest.importorskip("ppi_py")


def test_finite_population_hand_case():
    # N = 6 questions, judged [1,0,0,1,0,1]; questions 0, 1, 2 labelled with human values [1,1,0]
    y, yhat, yall = [1, 1, 0], [1, 0, 0], [1, 0, 0, 1, 0, 1]
    e = ppi_estimate(y, yhat, yall)
    # judged mean 0.5 + mean(human - judged) = mean([0, 1, 0]) = 1/3
    assert e.value == pytest.approx(0.5 + 1 / 3)
    # s^2 of [0, 1, 0] with n-1 = 1/3; SE^2 = (1 - 3/6) * (1/3) / 3 = 1/18; t with 2 df
    assert e.se == pytest.approx(math.sqrt(1 / 18))
    half = 4.302652729911275 * math.sqrt(1 / 18)  # scipy.stats.t.ppf(0.975, 2)
    assert 0.5 + 1 / 3 - half < 0 and 0.5 + 1 / 3 + half > 1
    assert (e.low, e.high) == (0.0, 1.0)  # (clipped to the metric's range)
    assert (e.n, e.N, e.df) == (3, 6, 2)
    only = labels_only_estimate(y, 6)
    assert only.value == pytest.approx(2 / 3)
    assert only.se == pytest.approx(math.sqrt(0.5 * (1 / 3) / 3))


def test_every_question_labelled_is_exact():
    y = [1, 0, 1, 1]
    e = ppi_estimate(y, [0, 0, 1, 0], [0, 0, 1, 0])
    assert e.value == pytest.approx(0.75) and e.low == e.high == pytest.approx(0.75) and e.width == 0
    assert labels_only_estimate(y, 4).width == 0


def test_too_few_labels():
    assert ppi_estimate([], [], [0.5, 1.0]).value is None
    one = ppi_estimate([1.0], [0.0], [0.0, 0.0, 1.0])
    # judged 1/3 + a correction of 1 = 4/3: clipped to the metric's range, the raw value kept
    assert one.value == 1.0 and one.unclipped == pytest.approx(4 / 3) and one.low is None
    assert one.text() == "100.0 [n<2]" and one.to_json()["unclipped"] == pytest.approx(4 / 3)
    high = ppi_estimate([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.9] * 7 + [0.0] * 3)  # 0.63 + 1 = 1.63
    assert high.value == high.low == high.high == 1.0 and high.unclipped == pytest.approx(1.63)
    with pytest.raises(BerdsError, match="population"):
        ppi_estimate([1, 0], [1, 0], [1, 0, 1], population="everyone")
    with pytest.raises(BerdsError, match="ppi-lambda"):
        ppi_estimate([1, 0], [1, 0], [1, 0, 1], lam="0.5")


@pytest.fixture
def fixed_data():
    rng = np.random.default_rng(7)
    N, n = 120, 40
    y = (rng.random(N) < 0.6).astype(float)
    yhat = np.where(rng.random(N) < 0.75, y, 1 - y)
    mask = np.zeros(N, dtype=bool)
    mask[rng.choice(N, n, replace=False)] = True
    return y, yhat, mask


def test_superpopulation_equals_ppi_py(fixed_data):
    y, yhat, mask = fixed_data
    e = ppi_estimate(y[mask], yhat[mask], yhat, labelled=mask, population="superpopulation")
    # ppi_py: Y, Yhat on the labelled questions, Yhat_unlabeled on the N - n others, plain PPI (lam=1)
    low, high = ppi_py.ppi_mean_ci(y[mask], yhat[mask], yhat[~mask], alpha=0.05, lam=1)
    assert e.value == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y[mask], yhat[mask], yhat[~mask], lam=1)[0]))
    assert (e.low, e.high) == pytest.approx((float(low[0]), float(high[0])))
    tuned = ppi_estimate(y[mask], yhat[mask], yhat, labelled=mask, population="superpopulation", lam="tuned")
    low, high = ppi_py.ppi_mean_ci(y[mask], yhat[mask], yhat[~mask], alpha=0.05)  # ppi_py's own PPI++ λ
    assert (tuned.low, tuned.high) == pytest.approx((float(low[0]), float(high[0])))
    assert 0 <= tuned.lam <= 1 and tuned.lam != 1
    only = labels_only_estimate(y[mask], len(y), population="superpopulation")
    assert (only.low, only.high) == pytest.approx(tuple(map(float, ppi_py.classical_mean_ci(y[mask], alpha=0.05))))


def test_questions_point_estimate_equals_ppi_py(fixed_data):
    """The default's point estimate is ppi_py's with Yhat_unlabeled = all N judged values (the labelled ones
    included); its interval is the rectifier's part of ppi_py's, with the finite-population correction."""
    y, yhat, mask = fixed_data
    e = ppi_estimate(y[mask], yhat[mask], yhat)
    assert e.value == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y[mask], yhat[mask], yhat, lam=1)[0]))
    n, N = mask.sum(), len(y)
    rectifier = np.std(y[mask] - yhat[mask], ddof=1) / math.sqrt(n)
    assert e.se == pytest.approx(math.sqrt(1 - n / N) * rectifier)
    # PPI++ here is the regression estimator: λ = Cov(Y, Ŷ) / Var(Ŷ) on the labelled questions
    tuned = ppi_estimate(y[mask], yhat[mask], yhat, lam="tuned")
    lam = np.cov(y[mask], yhat[mask])[0, 1] / np.var(yhat[mask], ddof=1)
    assert tuned.lam == pytest.approx(lam)
    assert tuned.value == pytest.approx(lam * yhat.mean() + (y[mask] - lam * yhat[mask]).mean())
    assert tuned.se <= e.se + 1e-12


def test_macro_combines_strata():
    a = Estimate(0.5, 0.4, 0.6, 0.04, 10, 20, df=9)
    b = Estimate(0.7, 0.6, 0.8, 0.03, 10, 30, df=9)
    m = combine_strata([a, b])
    assert m.value == pytest.approx(0.6) and (m.n, m.N) == (20, 50)
    assert m.se == pytest.approx(math.sqrt(0.04 ** 2 + 0.03 ** 2) / 2)
    v1, v2 = (0.04 / 2) ** 2, (0.03 / 2) ** 2
    assert m.df == pytest.approx((v1 + v2) ** 2 / (v1 ** 2 / 9 + v2 ** 2 / 9))
    assert combine_strata([a, Estimate(0.7, None, None, None, 1, 30)]).low is None


# ---------------------------------------------------------------------------------------------------------------
# Simulated judges with known errors: 1,000 question sets, MRecall@5 from 2 perspectives x 5 passages


S, N, n, M, K = 1000, 200, 80, 2, 5


def mrecall(support: np.ndarray) -> np.ndarray:
    """MRecall@K of each question of (sets, questions, perspectives, passages) support arrays."""
    return (support.any(axis=3).sum(axis=2) >= min(M, K)).astype(float)


@pytest.fixture(scope="module")
def simulated():
    rng = np.random.default_rng(30)
    human = rng.random((S, N, M, K)) < 0.3
    judges = {
        "towards Yes": human | (rng.random(human.shape) < 0.25),   # adds false supports
        "towards No": human & (rng.random(human.shape) < 0.5),     # misses half the supports
        "random": human ^ (rng.random(human.shape) < 0.15),        # flips 15% of the pairs
    }
    samples = np.array([rng.choice(N, n, replace=False) for _ in range(S)])
    return mrecall(human), {name: mrecall(j) for name, j in judges.items()}, samples


@pytest.mark.parametrize("judge", ["towards Yes", "towards No", "random"])
def test_interval_covers_the_truth(simulated, judge):
    y, judged, samples = simulated
    yhat = judged[judge]
    covered = judged_covered = 0
    for s in range(S):
        mask = np.zeros(N, dtype=bool)
        mask[samples[s]] = True
        truth = y[s].mean()  # the human MRecall of this set of N questions
        e = ppi_estimate(y[s, mask], yhat[s, mask], yhat[s])
        covered += e.low <= truth <= e.high
        # the judged mean with a normal interval over its questions: what a table without labels would claim
        judged_covered += abs(yhat[s].mean() - truth) <= 1.96 * yhat[s].std(ddof=1) / math.sqrt(N)
    # (printed for docs/corrected-estimates.md: pytest -s tests/test_ppi.py -k covers)
    print(f"\n{judge}: PPI covers the truth in {covered / S:.3f} of {S}; the judged mean's interval in "
          f"{judged_covered / S:.3f}; judged mean {yhat.mean():.3f}, human mean {y.mean():.3f}")
    assert 0.93 <= covered / S <= 0.97, (judge, covered / S)
    assert judged_covered / S < 0.2, (judge, judged_covered / S)


def test_superpopulation_interval_covers(simulated):
    y, judged, samples = simulated
    truth = (1 - 0.7 ** K) ** M  # P(both perspectives covered) in the generating model
    covered = 0
    for s in range(S):
        mask = np.zeros(N, dtype=bool)
        mask[samples[s]] = True
        e = ppi_estimate(y[s, mask], judged["towards No"][s, mask], judged["towards No"][s], labelled=mask,
                         population="superpopulation")
        covered += e.low <= truth <= e.high
    print(f"\nsuperpopulation, towards No: covers {truth:.4f} in {covered / S:.3f} of {S}")
    assert 0.93 <= covered / S <= 0.97
