"""Numbers berds reports, checked against values computed by hand on tiny cases (no berds code in the expectations)."""

from __future__ import annotations

import pytest

from analysis_fixtures import OverlapRetriever
from berds.evaluate.analyses.stance import Stance
from berds.studies.sycophancy import sycophancy_study
from berds.types import Passage, Question
from judges_for_tests import OverlapJudge

NUCLEAR = [
    Passage("d1", "Nuclear power is safe, clean and reliable."),
    Passage("d2", "Nuclear power plants are dangerous and leave dirty waste."),
    Passage("d3", "Safe clean energy comes from nuclear power."),
    Passage("d4", "Wind power is clean."),
]
NUCLEAR_Q = Question("n1", "Is nuclear power safe?", ("Nuclear power is dangerous and dirty.", "Nuclear power is safe and clean."))


def test_sycophancy_percentages_count_only_the_documents_retrieved(tmp_path):
    # Every query shares "power" with all four passages, so each run holds 4 documents, fewer than k = 5.
    # Judge (Yes at >= 3 of 4 perspective words): supporting (safe/clean) in d1, d3; opposing (dangerous/dirty) in d2.
    # Per run: p = 2 of 4 documents = 50 %, n = 1 of 4 = 25 %, Δ = (50 − 25)/50 = 0.5. Counting the 5th, missing,
    # rank as a document gave p = 40 %, n = 20 % (Δ unchanged, but p and n are the paper's "% of documents").
    stances = {"n1": Stance("n1", 1, 0, "given")}
    result, runs = sycophancy_study(
        OverlapRetriever(passages=NUCLEAR), [NUCLEAR_Q], stances, OverlapJudge(threshold=0.75), k=5,
        cache_path=tmp_path / "j.sqlite", label="overlap")
    assert all(len(run.hits["n1"]) == 4 for run in runs.values())
    for row in result.rows:
        assert (row["docs"], row["p_docs"], row["n_docs"]) == (4, 2, 1), row
        assert row["p"] == pytest.approx(50.0) and row["n"] == pytest.approx(25.0)
        assert row["delta"] == pytest.approx(0.5)
