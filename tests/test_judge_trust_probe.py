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


# ----------------------------------------------------------------------------------- in-sample figures


def _overlap_file(path, questions):
    rows = [LabelledPair(f"question {q}?", f"{q}-{i}", f"cats chase mice {q} {i}" if i % 3 else f"dogs bark {q} {i}",
                         "cats chase mice" if i % 2 else "dogs bark at night", (i % 3 > 0) == (i % 2 == 1))
            for q in questions for i in range(6)]
    write_labelled_pairs(path, rows)
    return path