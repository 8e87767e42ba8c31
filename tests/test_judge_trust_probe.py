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


def test_metrics_and_tests_equal_sklearn_scipy_and_statsmodels():
    from scipy import stats
    from sklearn import metrics as skm
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
    from statsmodels.stats.multitest import multipletests

    from berds.trust.audit import fisher_exact, holm_adjust, kendall_tau_b
    from berds.trust.validate import classification_metrics, mcnemar, mcnemar_paired

    gold, pred = _random_labels()
    m = classification_metrics(gold, pred)
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(gold, pred))
    assert m["precision"] == pytest.approx(skm.precision_score(gold, pred))
    assert m["recall"] == pytest.approx(skm.recall_score(gold, pred))
    assert m["f1"] == pytest.approx(skm.f1_score(gold, pred))
    assert m["kappa"] == pytest.approx(skm.cohen_kappa_score(gold, pred))
    for b, c in [(1, 9), (7, 3), (0, 4), (12, 12), (40, 61)]:
        ours = mcnemar(b, c)
        exact = sm_mcnemar([[5, b], [c, 5]], exact=True)
        chi2 = sm_mcnemar([[5, b], [c, 5]], exact=False, correction=True)
        assert ours.exact_p == pytest.approx(exact.pvalue, rel=1e-9)
        if b == c:  # statsmodels squares |b - c| - 1 = -1; berds, like R's mcnemar.test, applies no correction
            assert ours.chi2 == 0.0 and ours.chi2_p == 1.0
            continue
        assert ours.chi2 == pytest.approx(chi2.statistic) and ours.chi2_p == pytest.approx(chi2.pvalue, rel=1e-9)
    other = np.roll(pred, 3)
    paired = mcnemar_paired(pred == gold, other == gold)
    table = [[int(((pred == gold) & (other == gold)).sum()), paired.b],
             [paired.c, int(((pred != gold) & (other != gold)).sum())]]
    assert paired.exact_p == pytest.approx(sm_mcnemar(table, exact=True).pvalue, rel=1e-9)
    for table in ([[3, 9], [8, 2]], [[0, 5], [6, 1]], [[12, 1], [4, 9]], [[1, 0], [0, 1]]):
        assert fisher_exact(*table[0], *table[1]) == pytest.approx(stats.fisher_exact(table).pvalue, rel=1e-9)
    p_values = [0.01, 0.04, 0.03, 0.2, 0.5, 0.012]
    assert holm_adjust(p_values) == pytest.approx(list(multipletests(p_values, method="holm")[1]))
    x, y = [0.5, 0.58, 0.5, 0.3, 0.72], [0.4, 0.6, 0.55, 0.3, 0.6]
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)


def test_calibration_numbers_equal_sklearn():
    from sklearn import metrics as skm
    from sklearn.calibration import calibration_curve

    from berds.trust.calibration import (brier_score, choose_threshold, expected_calibration_error,
                                         reliability_table, roc_auc)

    rng = np.random.default_rng(3)
    # scores off the bin edges (sklearn puts an edge value in the lower bin, berds in the upper one)
    p = np.round(rng.random(60) * 0.98 + 0.005, 4)
    p[np.isclose(p * 10 % 1, 0)] += 0.001
    gold = rng.random(60) < p
    bins = [b for b in reliability_table(p, gold, n_bins=5) if b.count]
    observed, mean_p = calibration_curve(gold, p, n_bins=5, strategy="uniform")
    assert [b.observed for b in bins] == pytest.approx(list(observed))
    assert [b.mean_p for b in bins] == pytest.approx(list(mean_p))
    counts = np.histogram(p, bins=np.linspace(0, 1, 6))[0]
    ece = sum(n / p.size * abs(o - q) for n, o, q in zip(counts[counts > 0], observed, mean_p))
    assert expected_calibration_error(p, gold, n_bins=5) == pytest.approx(ece)
    assert brier_score(p, gold) == pytest.approx(skm.brier_score_loss(gold, p))
    tied = np.round(p, 1)  # many ties: each counts half
    assert roc_auc(p, gold) == pytest.approx(skm.roc_auc_score(gold, p))
    assert roc_auc(tied, gold) == pytest.approx(skm.roc_auc_score(gold, tied))
    assert roc_auc(p, np.ones(60)) != roc_auc(p, np.ones(60))  # one class: undefined
    # the best F1 / Youden J over all cuts (label = P(Yes) >= t) is the one sklearn's curves reach
    precision, recall, _ = skm.precision_recall_curve(gold, p)
    with np.errstate(invalid="ignore", divide="ignore"):
        best_f1 = np.nanmax(2 * precision * recall / (precision + recall))
    assert choose_threshold(p, gold, objective="f1").value == pytest.approx(best_f1)
    fpr, tpr, _ = skm.roc_curve(gold, p)
    assert choose_threshold(p, gold, objective="youden").value == pytest.approx(np.max(tpr - fpr))
    t = choose_threshold(p, gold, objective="accuracy")
    assert t.value == pytest.approx(skm.accuracy_score(gold, p >= t.threshold))


def test_question_bootstrap_equals_resampling_whole_questions_directly():
    from berds.trust.validate import METRIC_NAMES, bootstrap_intervals, classification_metrics

    gold, pred = _random_labels(n=30, seed=11)
    questions = [f"q{i % 7}" for i in range(30)]
    ours = bootstrap_intervals(gold, pred, n_boot=200, seed=5, groups=questions)
    # the same draws by hand: 7 questions (sorted), each drawn question brings all its pairs
    names = sorted(set(questions))
    members = [[i for i, q in enumerate(questions) if q == name] for name in names]
    drawn = np.random.default_rng(5).integers(0, len(names), size=(200, len(names)))
    samples = {k: [] for k in METRIC_NAMES}
    for row in drawn:
        idx = [i for g in row for i in members[g]]
        for k, v in classification_metrics(gold[idx], pred[idx]).items():
            samples[k].append(v)
    for k in METRIC_NAMES:
        values = np.array(samples[k])
        values = values[~np.isnan(values)]
        assert ours[k] == pytest.approx((np.percentile(values, 2.5), np.percentile(values, 97.5))), k
    # seeded: the same seed gives the same intervals, another seed others
    assert bootstrap_intervals(gold, pred, n_boot=200, seed=5, groups=questions) == ours
    assert bootstrap_intervals(gold, pred, n_boot=200, seed=6, groups=questions) != ours
    by_pairs = bootstrap_intervals(gold, pred, n_boot=200, seed=5)
    direct = np.random.default_rng(5).integers(0, 30, size=(200, 30))
    acc = [(gold[row] == pred[row]).mean() for row in direct]
    assert by_pairs["accuracy"] == pytest.approx((np.percentile(acc, 2.5), np.percentile(acc, 97.5)))


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
    for own in ("stance", "label"):  # the file has them, as its own columns: not "no column 'stance'"
        with pytest.raises(InputError, match=f"--column '{own}' is one of the file's own columns"):
            validate(labelled, [NeverJudge()], annotators=[own], progress=False)
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


def test_validating_a_calibrated_judge_on_its_own_dev_pairs_says_the_figures_are_in_sample(tmp_path):
    # `judge calibrate --labels dev.tsv` then `judge validate --labels dev.tsv --judge calibrated:X` printed the
    # tuned threshold's figures on the very pairs it was chosen on, as if they measured the judge
    from berds.judges.threshold import CalibrationStore
    from berds.trust.calibration import calibrate
    from berds.trust.validate import in_sample_notes, validate_files
    from judges_for_tests import OverlapJudge

    dev = _overlap_file(tmp_path / "dev.tsv", range(3))
    store = CalibrationStore(tmp_path / "calibration.json")
    calibrate(read_labelled_pairs(dev), OverlapJudge(), store=store, progress=False)
    mixed = _overlap_file(tmp_path / "mixed.tsv", range(2, 5))  # one question of the dev file, two new ones
    fresh = _overlap_file(tmp_path / "fresh.tsv", range(5, 8))
    name, options = "calibrated:judges_for_tests:OverlapJudge", {"calibration": str(store.path)}
    reports = {p.stem: validate_files(str(p), [name], judge_options=options, use_cache=False, n_boot=0, progress=False)
               for p in (dev, mixed, fresh)}
    assert reports["dev"].judges[0].tuned_on == {"dev": str(dev), "pairs_in_dev": 18, "questions_in_dev": 3}
    assert reports["mixed"].judges[0].tuned_on == {"dev": str(dev), "pairs_in_dev": 6, "questions_in_dev": 1}
    assert reports["fresh"].judges[0].tuned_on is None and in_sample_notes(reports["fresh"]) == []
    [note] = in_sample_notes(reports["mixed"])
    assert (f"threshold was chosen on {dev}, which holds 6 of these 18 pairs and 1 of their 3 questions: its figures "
            "here are in-sample") in note
    assert reports["dev"].to_json()["judges"][0]["threshold_tuned_on"]["pairs_in_dev"] == 18


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


def test_cli_calibrate_prints_what_its_json_holds_within_80_columns(tmp_path):
    dev, held = _overlap_file(tmp_path / "dev.tsv", range(3)), _overlap_file(tmp_path / "held.tsv", range(3, 6))
    out = tmp_path / "cal.json"
    done = subprocess.run(berds_cmd("judge", "calibrate", "--labels", str(dev), "--holdout", str(held), "--judge",
                                    "judges_for_tests:OverlapJudge", "--no-save", "--no-cache", "--out", str(out), "-q"),
                          capture_output=True, text=True, timeout=120, env=subprocess_env(COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    said = " ".join(done.stdout.split())
    result = json.loads(out.read_text())
    assert f"ECE {result['ece']:.3f}, MCE {result['mce']:.3f}, Brier {result['brier']:.3f}, AUC {result['auc']:.3f}" in said
    assert f"ECE {result['holdout']['ece']:.3f} (18 with P(Yes)), AUC {result['holdout']['auc']:.3f}" in said
    assert f"threshold {result['threshold']:.4f} chosen for f1" in said
    dev_row = " ".join(f"{100 * result['dev_metrics_at_threshold'][k]:.1f}"
                       for k in ("accuracy", "precision", "recall", "f1", "positive_share"))
    assert f"dev │ threshold │ {dev_row.replace(' ', ' │ ')} │" in said


# ----------------------------------------------------------------------------------- the labelled file


HEADER = "question\tid\tdocument\tperspective\tlabel"


@pytest.mark.parametrize("data, message", [
    ((HEADER + "\r\nq\t1\td\tp\t1\r\nq\t2\td2\tp\t2\r\n").encode(), r"line 3, record '2': label must be 0 or 1, got '2'"),
    (b"\xef\xbb\xbf" + (HEADER + "\r\nq\t1\td\tp\r\n").encode(), r"line 2: expected 5 tab-separated fields"),
    (b"\xef\xbb\xbf", r"the file is empty"),
    (b"\n \n", r"the file is empty"),
    # Excel's "Unicode Text" is UTF-16: the fix named latin1
    ((HEADER + "\nq\t1\td\tp\t1\n").encode("utf-16"), r"line 1: UTF-16 text, expected UTF-8 — .*iconv -f utf-16 -t utf-8"),
], ids=["crlf-bad-label", "bom-crlf-short-row", "bom-only", "blank-lines", "utf-16"])
def test_crlf_bom_empty_and_utf16_files_get_one_line_naming_file_and_line(tmp_path, data, message):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(data)
    with pytest.raises(InputError, match=message) as info:
        read_labelled_pairs(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_a_crlf_file_with_a_byte_order_mark_reads_as_its_lf_twin(tmp_path):
    body = HEADER + "\nq\t1\t\"two\nlines\"\tp\t1\nq\t2\td\tp\t0\n"
    (tmp_path / "lf.tsv").write_text(body, encoding="utf-8")
    (tmp_path / "crlf.tsv").write_bytes(b"\xef\xbb\xbf" + body.replace("\n", "\r\n").encode())
    lf, crlf = read_labelled_pairs(tmp_path / "lf.tsv"), read_labelled_pairs(tmp_path / "crlf.tsv")
    assert [(p.line, p.label, p.perspective) for p in crlf] == [(p.line, p.label, p.perspective) for p in lf]
    assert crlf.pairs[0].document.replace("\r\n", "\n") == lf.pairs[0].document


@pytest.mark.parametrize("command", ["validate", "audit"])
def test_cli_names_in_sample_figures_of_a_calibrated_judge(tmp_path, command):
    from berds.judges.threshold import CalibrationStore
    from berds.trust.calibration import calibrate
    from judges_for_tests import OverlapJudge

    dev = _overlap_file(tmp_path / "dev.tsv", range(3))
    store = CalibrationStore(tmp_path / "calibration.json")
    calibrate(read_labelled_pairs(dev), OverlapJudge(), store=store, progress=False)
    out = tmp_path / "report.json"
    done = subprocess.run(berds_cmd("judge", command, "--labels", str(dev), "--judge",
                                    "calibrated:judges_for_tests:OverlapJudge", "-o", f"calibration={store.path}",
                                    "--no-cache", "-q", "--out", str(out)),
                          capture_output=True, text=True, timeout=120, env=subprocess_env(COLUMNS="300"))
    assert done.returncode == 0, done.stderr
    assert f"threshold was chosen on {dev}, which holds 18 of these 18 pairs" in done.stdout
    assert "in-sample" in done.stdout
    report = json.loads(out.read_text())
    tuned = report["judges"][0]["threshold_tuned_on"] if command == "validate" else report["threshold_tuned_on"]
    assert tuned == {"dev": str(dev), "pairs_in_dev": 18, "questions_in_dev": 3}


def test_a_variant_named_twice_is_run_and_adjusted_for_once(tmp_path):
    # `--variant sentence-order --variant sentence-order` gave two rows and Holm's m = 2: a doubled p-value
    from berds.trust.audit import audit
    from judges_for_tests import OverlapJudge

    labelled = read_labelled_pairs(_overlap_file(tmp_path / "pairs.tsv", range(2)))
    once = audit(labelled, OverlapJudge(), variants=["sentence-order", "negation"], progress=False)
    twice = audit(labelled, OverlapJudge(), variants=["sentence-order", "negation", "sentence-order"], progress=False)
    assert [v.name for v in twice.variants] == ["sentence-order", "negation"]
    assert twice.to_json() == once.to_json()
