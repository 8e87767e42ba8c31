"""The honest judge card (issue 30): the warning quotes the independent 20-question figure, not the withdrawn
3-question one; `judge validate` prints the AUC of P(Yes), computed from ranks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from berds.judges.validation import EMBEDDED_V2_CARD, judge_warning
from berds.trust.validate import rank_auc

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "berds" / "data" / "demo" / "labelled_pairs.tsv"


def test_rank_auc_hand_cases():
    # positives 0.9, 0.4 against negatives 0.5, 0.1: 3 of the 4 (positive, negative) pairs ordered right
    assert rank_auc([1, 1, 0, 0], [0.9, 0.4, 0.5, 0.1]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts one half: (0.5 + 1 + 0 + 1) / 4
    assert rank_auc([1, 1, 0, 0], [0.5, 0.4, 0.5, 0.1]) == pytest.approx(0.625)
    assert rank_auc([1, 0], [0.2, 0.8]) == 0.0 and rank_auc([1, 0], [0.8, 0.2]) == 1.0
    assert np.isnan(rank_auc([1, 1], [0.2, 0.8]))        # one class only
    assert np.isnan(rank_auc([1, 0], [0.2, float("nan")]))  # a missing P(Yes)
    # against the pairwise definition on random data with ties
    rng = np.random.default_rng(1)
    g = rng.random(200) < 0.3
    x = rng.integers(0, 10, 200).astype(float)
    pos, neg = x[g], x[~g]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size)
    assert rank_auc(g, x) == pytest.approx(pairwise)


def test_judge_validate_prints_auc():
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, ["judge", "validate", "--labels", str(LABELS), "--judge",
                                      "judges_for_tests:OverlapJudge", "--no-cache"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "AUC of P(Yes)" in result.output


def test_the_warning_quotes_the_independent_held_out_figure():
    card = json.loads(EMBEDDED_V2_CARD.read_text())["validation"]
    assert (card["f1"], card["interval_95"], card["pairs"], card["questions"]) == (31.1, [15.5, 45.1], 379, 20)
    warning = judge_warning("embedded")
    assert "F1 31.1 [15.5, 45.1] on 379 human-labelled pairs of 20 questions" in warning
    assert "answering Yes to every pair gives F1 28.9" in warning and "AUC 0.69" in warning
    assert "smoke tests" in warning and "--labels" in warning
    calibrated = judge_warning("calibrated:embedded")
    assert "F1 37.0 [22.2, 49.0]" in calibrated


@pytest.mark.parametrize("stale", ["F1 54.5", "54.5 [", "κ 0.42", "0.419 [0.10"])
def test_the_withdrawn_three_question_figures_are_gone(stale):
    """The figures measured on 3 questions did not hold on 20 unseen ones: no page, card or warning states them."""
    places = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), EMBEDDED_V2_CARD,
              *sorted((ROOT / "berds").rglob("*.py"))]
    found = [str(p.relative_to(ROOT)) for p in places if stale in p.read_text(encoding="utf-8")]
    assert not found, f"{stale!r} still in {found}"
