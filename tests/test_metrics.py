"""MRecall@k / Precision@k on hand-computed cases."""

import numpy as np
import pytest

from berds.evaluate.metrics import (aggregate, docs_needed, mrecall_at_k, perspectives_covered, precision_at_k,
                                   question_metrics)

T, F = True, False


def test_m_less_than_k_all_covered():
    # 2 perspectives, 5 passages: p0 supported at rank 2, p1 at rank 5.
    s = np.array([[F, T, F, F, F], [F, F, F, F, T]])
    assert mrecall_at_k(s, 5) == 1.0
    assert mrecall_at_k(s, 4) == 0.0          # p1 only appears at rank 5
    assert precision_at_k(s, 5) == pytest.approx(2 / 5)
    assert precision_at_k(s, 2) == pytest.approx(1 / 2)


def test_m_equals_k():
    s = np.array([[T, F], [F, T]])
    assert mrecall_at_k(s, 2) == 1.0
    assert precision_at_k(s, 2) == 1.0
    s2 = np.array([[T, T], [F, F]])
    assert mrecall_at_k(s2, 2) == 0.0
    assert precision_at_k(s2, 2) == 1.0


def test_m_greater_than_k_needs_k_covered():
    # 4 perspectives, k = 2: scores 1 when at least 2 distinct perspectives are covered in the top 2.
    s = np.array([[T, F, F], [F, T, F], [F, F, F], [F, F, F]])
    assert mrecall_at_k(s, 2) == 1.0
    s_same = np.array([[T, T, F], [F, F, T], [F, F, F], [F, F, F]])
    assert mrecall_at_k(s_same, 2) == 0.0     # two passages, one perspective
    assert mrecall_at_k(s_same, 3) == 0.0     # 2 covered < min(4, 3)
    # k = 1 with 2 perspectives: any supported top-1 passage is enough
    assert mrecall_at_k(np.array([[F, T], [T, F]]), 1) == 1.0


def test_zero_supported():
    s = np.zeros((3, 10), dtype=bool)
    assert mrecall_at_k(s, 5) == 0.0
    assert precision_at_k(s, 5) == 0.0
    assert docs_needed(s) is None


def test_one_passage_supporting_both_counts_once_in_precision():
    s = np.array([[T, F, F], [T, F, F]])
    assert precision_at_k(s, 3) == pytest.approx(1 / 3)
    assert mrecall_at_k(s, 3) == 1.0
    assert perspectives_covered(s, 1) == 2


def test_precision_denominator_is_k_for_short_lists():
    s = np.array([[T, T], [F, F]])
    assert precision_at_k(s, 5) == pytest.approx(2 / 5)


def test_docs_needed():
    s = np.array([[F, F, T, F], [T, F, F, F]])
    assert docs_needed(s) == 3


def test_bad_k_and_shape():
    with pytest.raises(ValueError):
        mrecall_at_k(np.zeros((2, 3), bool), 0)
    with pytest.raises(ValueError):
        precision_at_k(np.zeros(3, bool), 1)


def test_question_metrics_equal_the_one_metric_functions():
    # question_metrics computes every k in one pass; it must agree with the definitions above everywhere,
    # including m > k, k past the judged depth, no perspectives and no passages
    rng = np.random.default_rng(3)
    shapes = [(m, n) for m in (0, 1, 2, 4, 7) for n in (0, 1, 3, 5, 10, 12)]
    for m, n in shapes:
        for density in (0.0, 0.1, 0.5, 1.0):
            s = rng.random((m, n)) < density
            ks = (1, 2, 3, 5, 10, 20)
            expected = {}
            for k in ks:
                expected[f"mrecall@{k}"] = mrecall_at_k(s, k)
                expected[f"precision@{k}"] = precision_at_k(s, k)
            assert question_metrics(s, ks) == expected, (m, n, density)
    with pytest.raises(ValueError):
        question_metrics(np.zeros((2, 3), bool), (5, 0))
    with pytest.raises(ValueError):
        question_metrics(np.zeros(3, bool), (1,))


def test_aggregate_micro_and_macro():
    per_q = {"a1": {"m": 1.0}, "a2": {"m": 0.0}, "k1": {"m": 1.0}}
    out = aggregate(per_q, {"a1": "arguana", "a2": "arguana", "k1": "kialo"})
    assert out["all"]["m"] == pytest.approx(2 / 3)
    assert out["arguana"]["m"] == 0.5 and out["kialo"]["m"] == 1.0
    assert out["macro"]["m"] == pytest.approx(0.75)
    single = aggregate({"x": {"m": 1.0}}, {"x": ""})
    assert set(single) == {"all"}


def test_stacked_metrics_are_each_matrixs_own():
    from berds.evaluate.metrics import mrecall_at_k, precision_at_k, stacked_metrics

    rng = np.random.default_rng(0)
    for m, n in ((2, 5), (4, 3), (7, 10)):  # m <= k, m > k, and a passage list shorter than k
        stack = rng.random((50, m, n)) < 0.3
        for k in (1, 3, 5, 10):
            mrecall, precision = stacked_metrics(stack, k)
            assert list(mrecall) == [mrecall_at_k(s, k) for s in stack]
            assert list(precision) == [precision_at_k(s, k) for s in stack]
