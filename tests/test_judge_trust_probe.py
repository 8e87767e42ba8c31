"""Judge-trust statistics checked against well-kept libraries (scikit-learn, SciPy, statsmodels) and a direct
re-implementation of the question bootstrap; inputs the commands must refuse before any judging (found by a probe
of `berds judge validate | calibrate | audit | stance-correct` as a researcher deciding whether to trust a judge)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.trust.labels import LabelledPair, read_labelled_pairs, write_labelled_pairs
from berds.types import Verdict
from conftest import berds_cmd, subprocess_env


def _random_labels(n=41, seed=7):
    rng = np.random.default_rng(seed)
    gold = rng.random(n) < 0.35
    pred = np.where(rng.random(n) < 0.75, gold, ~gold)
    return gold, pred


# ----------------------------------------------------------------------------------- against libraries


# ----------------------------------------------------------------------------------- refused before judging


class NeverJudge:
    id, prompt_version, name = "never", "v1", "never"

    def judge(self, pairs):
        raise AssertionError("judged before the input was checked")


def _pairs_file(tmp_path, *, stance=True):
    rows = [LabelledPair(f"question {q}?", f"{q}-{i}", f"document {q} {i}", f"perspective {i % 2}", (q + i) % 3 == 0,
                         stance=("support" if i % 2 else "oppose") if stance else None, extra={"second": str(i % 2)})
            for q in range(3) for i in range(4)]
    path = tmp_path / "pairs.tsv"
    write_labelled_pairs(path, rows)
    return path


def test_a_bad_annotator_column_is_refused_before_any_judge_runs(tmp_path):
    from berds.trust.validate import validate

    labelled = read_labelled_pairs(_pairs_file(tmp_path))
    with pytest.raises(InputError, match="no column 'secnod'"):
        validate(labelled, [NeverJudge()], annotators=["secnod"], progress=False)
    bad = tmp_path / "bad-column.tsv"
    bad.write_text(_pairs_file(tmp_path).read_text().replace("\t1\n", "\tyes\n", 1))
    with pytest.raises(InputError, match=r"line 3, record '0-1': column 'second' must hold 0 or 1, got 'yes'"):
        validate(read_labelled_pairs(bad), [NeverJudge()], annotators=["second"], progress=False)


def test_stance_correct_refuses_a_file_without_stances_and_another_judges_result_before_judging(tmp_path):
    from berds.trust.stance_corrected import correct_sycophancy_file

    saved = tmp_path / "syco.json"
    row = {"label": "bm25", "query": "supporting", "p": 60.0, "n": 35.0, "p_docs": 12, "n_docs": 7, "docs": 20,
           "delta": 5 / 12, "questions": 4}
    saved.write_text(json.dumps({"analysis": "sycophancy", "version": 1, "k": 5, "rows": [row]}))
    with pytest.raises(BerdsError, match="has no pairs with a 'support' perspective"):
        correct_sycophancy_file(str(saved), str(_pairs_file(tmp_path, stance=False)), NeverJudge(), progress=False,
                                cache_path=str(tmp_path / "c.sqlite"))
    saved.write_text(json.dumps({"analysis": "sycophancy", "version": 1, "k": 5, "rows": [{**row, "judge": "other"}]}))
    with pytest.raises(BerdsError, match="was counted by judge 'other', not 'never'"):
        correct_sycophancy_file(str(saved), str(_pairs_file(tmp_path)), NeverJudge(), progress=False,
                                cache_path=str(tmp_path / "c.sqlite"))


# ----------------------------------------------------------------------------------- audit table


def test_a_verdict_resting_on_correctness_shows_that_p_beside_the_answers_p(tmp_path):
    # The sentence-order variant fixes 8 wrong answers, 4 each way: the answers' Yes rate is unchanged (p = 1) but
    # correctness moved (p = 2/2^8); the table printed "p 1 ... Holm p 0.016 BIAS" with nothing to explain it.
    from rich.console import Console

    from berds.trust.audit import audit, reverse_sentences, variant_table

    rows = [LabelledPair(f"question {i % 4}?", str(i), f"First sentence {i}. Second sentence {i}.", f"claim {i}",
                         i % 2 == 0) for i in range(20)]
    path = tmp_path / "pairs.tsv"
    write_labelled_pairs(path, rows)
    labelled = read_labelled_pairs(path)
    broken = {r.document for r in rows[:8]}
    truth = {r.document: r.label for r in rows} | {reverse_sentences(r.document): r.label for r in rows}

    class OrderSensitive:
        id, prompt_version, name = "order-sensitive", "v1", "order-sensitive"

        def judge(self, pairs):
            return [Verdict(truth[p.passage] != (p.passage in broken), None, "") for p in pairs]

    report = audit(labelled, OrderSensitive(), variants=["sentence-order"], progress=False)
    v = report.variant("sentence-order")
    assert (v.yes_to_no, v.no_to_yes, v.mcnemar_answers.exact_p) == (4, 4, 1.0)
    assert v.mcnemar_correct.exact_p == pytest.approx(2 / 2**8) and v.biased
    console = Console(record=True, width=80)
    console.print(variant_table(report))
    text = " ".join(console.export_text().split())
    assert "sentence-order: McNemar p on correctness 0.0078 (8 flips fixed, 0 broke an answer)" in text


# ----------------------------------------------------------------------------------- in-sample figures


def _overlap_file(path, questions):
    rows = [LabelledPair(f"question {q}?", f"{q}-{i}", f"cats chase mice {q} {i}" if i % 3 else f"dogs bark {q} {i}",
                         "cats chase mice" if i % 2 else "dogs bark at night", (i % 3 > 0) == (i % 2 == 1))
            for q in questions for i in range(6)]
    write_labelled_pairs(path, rows)
    return path


def test_one_run_gets_no_tau_rather_than_nan(tmp_path):
    # Kendall's τ between the rankings of one run is undefined: the run table printed "nan"
    from rich.console import Console

    from berds.trust.audit import audit, run_table
    from conftest import make_run
    from judges_for_tests import OverlapJudge

    labelled = read_labelled_pairs(_overlap_file(tmp_path / "pairs.tsv", range(2)))
    report = audit(labelled, OverlapJudge(), variants=["sentence-order"], runs={"tiny": make_run()}, progress=False)
    assert report.variant("sentence-order").runs.tau != report.variant("sentence-order").runs.tau  # NaN
    console = Console(record=True, width=80)
    console.print(run_table(report))
    [row] = [line for line in console.export_text().splitlines() if "sentence-order" in line]
    assert "nan" not in row and row.split("│")[5].strip() == "-"