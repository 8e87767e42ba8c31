"""Numbers berds reports, checked against values computed by hand on tiny cases (no berds code in the expectations)."""

from __future__ import annotations

import pytest

from analysis_fixtures import NUCLEAR, NUCLEAR_Q, OverlapRetriever
from berds.evaluate.analyses.stance import Stance
from berds.studies.sycophancy import sycophancy_study
from judges_for_tests import OverlapJudge

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


def _write_run(path, ctxs_by_question):
    import json

    with open(path, "w", encoding="utf-8") as f:
        for qid, ctxs in ctxs_by_question.items():
            f.write(json.dumps({"id": qid, "question": f"Question {qid}?", "perspectives": ["apples are red", "pears are green"],
                                "ctxs": [{"id": f"{path.stem}-{qid}-{j}", "text": t} for j, t in enumerate(ctxs)]}) + "\n")
    return path


def test_compare_allow_short_scores_an_empty_question_as_zero(tmp_path):
    from berds.evaluate.compare import compare_paths

    # judge: Yes when >= half of the perspective's content words occur ("apples red" / "pears green")
    base = _write_run(tmp_path / "base.jsonl", {"q1": ["apples red", "pears green"], "q2": ["apples red", "nothing"]})
    other = _write_run(tmp_path / "other.jsonl", {"q1": ["pears green", "apples red"], "q2": []})
    result = compare_paths([base, other], OverlapJudge(), ks=(2,), allow_short=True, cache_path=tmp_path / "j.sqlite",
                           n_resamples=100)
    # base: q1 covers both (MRecall 1, Precision 1), q2 one of two (0, 1/2); other: q1 (1, 1), q2 no passage (0, 0)
    found = {c.metric: (c.baseline_mean, c.run_mean, c.difference) for c in result.comparisons}
    assert found["mrecall@2"] == pytest.approx((0.5, 0.5, 0.0))
    assert found["precision@2"] == pytest.approx((0.75, 0.5, -0.25))
