"""Options and inputs the judge-trust commands, the embedded judge and berds' home refuse in one line (found by an
adversarial probe: each used to give a zero-width interval, a vacuous verdict, a silently saved threshold, invalid
JSON or a traceback)."""

from __future__ import annotations

import json
import subprocess

import pytest

from berds.errors import BerdsError, InputError
from berds.trust.labels import LabelledPair, read_labelled_pairs, write_labelled_pairs
from berds.types import Verdict
from conftest import berds_cmd, subprocess_env


class YesJudge:
    id, prompt_version, name = "yes-to-all", "v1", "yes"

    def judge(self, pairs):
        return [Verdict(True, 1.0, "Yes") for _ in pairs]


def labelled(tmp_path, *, questions: int, labels=lambda q, i: (q + i) % 3 == 0):
    rows = [LabelledPair(f"question {q}?", f"{q}-{i}", f"document {q} {i}", f"perspective {i}", labels(q, i))
            for q in range(questions) for i in range(4)]
    path = tmp_path / f"pairs-{questions}.tsv"
    write_labelled_pairs(path, rows)
    return read_labelled_pairs(path)


def test_question_resampling_needs_two_questions_and_the_bootstrap_is_bounded(tmp_path):
    from berds.trust.validate import validate

    with pytest.raises(BerdsError, match="--resample questions needs pairs of at least 2 questions; .* has 1"):
        validate(labelled(tmp_path, questions=1), [YesJudge()], resample="questions", progress=False)
    assert validate(labelled(tmp_path, questions=2), [YesJudge()], n_boot=50, resample="questions", progress=False)
    with pytest.raises(BerdsError, match="--bootstrap must be between 0 and 100,000"):
        validate(labelled(tmp_path, questions=2), [YesJudge()], n_boot=100_000_000, progress=False)


def test_calibration_refuses_one_class_and_absurd_bins_and_a_folder_as_its_store(tmp_path):
    from berds.judges.threshold import CalibrationStore
    from berds.trust.calibration import calibrate

    with pytest.raises(BerdsError, match="every pair is labelled 1 — a threshold can only be calibrated on pairs of both"):
        calibrate(labelled(tmp_path, questions=2, labels=lambda q, i: True), YesJudge(), progress=False)
    with pytest.raises(BerdsError, match="--bins must be between 2 and 1000"):
        calibrate(labelled(tmp_path, questions=2), YesJudge(), n_bins=10_000_000, progress=False)
    with pytest.raises(InputError, match="is a folder, but the calibration store is a JSON file"):
        CalibrationStore(tmp_path)


def test_audit_alpha_is_a_significance_level(tmp_path):
    from berds.trust.audit import audit

    with pytest.raises(BerdsError, match="--alpha must be between 0 and 1"):
        audit(labelled(tmp_path, questions=2), YesJudge(), alpha=2.0, progress=False)


def test_validate_out_is_strict_json_when_kappa_is_undefined(tmp_path):
    # one class in the file: κ is NaN, which json writes as the non-JSON token NaN
    path = tmp_path / "one-class.tsv"
    write_labelled_pairs(path, [LabelledPair("q?", f"d{i}", f"doc {i}", "p", False) for i in range(6)])
    out = tmp_path / "report.json"
    env = subprocess_env()
    done = subprocess.run(berds_cmd("judge", "validate", "--labels", str(path), "--judge", "judges_for_tests:OverlapJudge",
                                    "--out", str(out), "--no-cache"), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in --out JSON"))
    assert "NaN" not in text


@pytest.mark.parametrize("options, message", [({"batch_size": "abc"}, "batch_size must be a whole number"),
                                              ({"batch_size": 0}, "batch_size must be a whole number"),
                                              ({"device": "nosuch"}, "unknown device 'nosuch'")])
def test_the_embedded_judge_refuses_bad_options_before_loading_anything(options, message):
    from berds.judges.embedded import EmbeddedJudge

    with pytest.raises(BerdsError, match=message):
        EmbeddedJudge(version="v1", **options)


def test_a_file_as_berds_home_is_refused_by_name(tmp_path, monkeypatch):
    from berds.evaluate.cache import JudgementCache

    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("BERDS_HOME", str(home))
    with pytest.raises(InputError, match="is a file, but berds' home \\(BERDS_HOME\\) must be a folder"):
        JudgementCache()


ROW = {"label": "bm25", "query": "supporting", "p": 60.0, "n": 35.0, "p_docs": 12, "n_docs": 7, "docs": 20,
       "delta": 5 / 12, "questions": 4}


@pytest.mark.parametrize("rows, message", [
    ([], "has no rows"),
    ([{k: v for k, v in ROW.items() if k != "docs"}], "'docs' must be whole numbers >= 0, got docs=None"),
    ([{**ROW, "docs": "two"}], "'docs' must be whole numbers >= 0, got docs='two'"),
    ([{**ROW, "p_docs": 25}], "p_docs=25 and n_docs=7 must be among its docs=20 judged documents"),
    ([{**ROW, "docs": 0, "p_docs": 0, "n_docs": 0}], "must be among its docs=0 judged documents"),
])
def test_stance_correct_checks_every_row_of_the_result_before_judging(tmp_path, rows, message):
    from berds.trust.stance_corrected import correct_sycophancy_file

    saved = tmp_path / "syco.json"
    saved.write_text(json.dumps({"analysis": "sycophancy", "version": 1, "k": 5, "rows": rows}))
    class NeverJudge(YesJudge):
        def judge(self, pairs):
            raise AssertionError("judged before the rows were checked")

    with pytest.raises(InputError, match=message) as info:
        correct_sycophancy_file(str(saved), "unused.tsv", NeverJudge(), progress=False)
    assert str(saved) in str(info.value)


def test_a_database_of_another_program_is_not_taken_for_a_judgement_cache(tmp_path):
    import sqlite3

    from berds.evaluate.cache import JudgementCache

    other = tmp_path / "app.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(BerdsError, match="an SQLite database of another program \\(tables users\\)"):
        JudgementCache(other)
    assert {r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")} == {"users"}
    JudgementCache(tmp_path / "new.sqlite").close()  # a new file, and berds' own, still open
    JudgementCache(tmp_path / "new.sqlite").close()


def test_an_unknown_version_of_a_catalogue_judge_is_named_as_such():
    # "embedded:v99" looked like module:attr and failed with "cannot import module 'embedded'"
    from berds.errors import UnknownNameError
    from berds.judges.catalogue import check_judge_name

    with pytest.raises(UnknownNameError, match="unknown judge 'embedded:v99'. Did you mean 'embedded:v1'"):
        check_judge_name("embedded:v99")
    check_judge_name("embedded:v1")
    check_judge_name("judges_for_tests:OverlapJudge")  # module:attr plug-ins still resolve


def test_pairs_listed_twice_are_counted_and_named(tmp_path):
    # the study's own dev file repeats 6 pairs: every row counts (as in the study), and the commands say so
    rows = [LabelledPair("q?", "a", "doc a", "p", True), LabelledPair("q?", "b", "doc b", "p", False),
            LabelledPair("q?", "a2", "doc a", "p", False),  # line 4: line 2's pair, labelled the other way
            LabelledPair("q2?", "b2", "doc b", "p", False)]  # line 5: line 3's pair again, same label
    path = tmp_path / "twice.tsv"
    write_labelled_pairs(path, rows)
    pairs = read_labelled_pairs(path)
    assert pairs.repeats() == {"repeated_rows": 2, "conflicting_pairs": 1, "example_lines": [2, 4]}
    assert read_labelled_pairs(write_labelled_pairs(tmp_path / "once.tsv", rows[:2]) and tmp_path / "once.tsv"
                               ).repeats_note() is None
    out = tmp_path / "report.json"
    done = subprocess.run(berds_cmd("judge", "validate", "--labels", str(path), "--judge", "judges_for_tests:OverlapJudge",
                                    "--out", str(out), "--no-cache", "--bootstrap", "0"),
                          capture_output=True, text=True, env=subprocess_env(COLUMNS="200"))
    assert done.returncode == 0, done.stderr
    assert "lists 2 row(s) whose (perspective, document) pair appears on an earlier line, 1 of them labelled both 0 " \
           "and 1 (e.g. lines 2, 4)" in " ".join(done.stdout.split())  # (rich wraps the line)
    report = json.loads(out.read_text())
    assert report["labels"]["n"] == 4 and report["labels"]["repeats"]["conflicting_pairs"] == 1


def _stance_labelled(tmp_path):
    rows = [LabelledPair(f"q{q}?", f"{q}-{i}-{s}", f"document {q} {i}", f"perspective {s}", (q + i + len(s)) % 2 == 0,
                         stance=s) for q in range(2) for i in range(3) for s in ("support", "oppose")]
    path = tmp_path / "stance.tsv"
    write_labelled_pairs(path, rows)
    return path


@pytest.mark.parametrize("options, message", [({"seed": -1}, "--seed must be a whole number >= 0, got -1"),
                                              ({"n_boot": 10**8}, "--bootstrap must be between 0 and 100,000"),
                                              ({"n_boot": -1}, "--bootstrap must be between 0 and 100,000")])
def test_bootstrap_seed_and_size_are_checked_before_any_judging(tmp_path, options, message):
    # a negative seed was a numpy traceback; stance-correct ran 10**8 resamples in a Python loop
    from berds.trust.stance_corrected import correct_sycophancy_file, stance_corrected_sycophancy
    from berds.trust.validate import validate

    class NeverJudge(YesJudge):
        def judge(self, pairs):
            raise AssertionError("judged before the options were checked")

    with pytest.raises(BerdsError, match=message):
        validate(labelled(tmp_path, questions=2), [NeverJudge()], progress=False, **options)
    saved = tmp_path / "syco.json"
    saved.write_text(json.dumps({"analysis": "sycophancy", "version": 1, "k": 5, "rows": [ROW]}))
    with pytest.raises(BerdsError, match=message):
        correct_sycophancy_file(str(saved), str(_stance_labelled(tmp_path)), NeverJudge(), progress=False, **options)
    with pytest.raises(BerdsError, match=message):
        stance_corrected_sycophancy({"k": 5, "rows": [ROW]}, read_labelled_pairs(_stance_labelled(tmp_path)),
                                    [True] * 12, **options)


def test_a_negative_seed_is_one_line_on_the_command_line(tmp_path):
    path = tmp_path / "pairs.tsv"
    write_labelled_pairs(path, [LabelledPair("q?", f"d{i}", f"doc {i}", "p", i % 2 == 0) for i in range(4)])
    done = subprocess.run(berds_cmd("judge", "validate", "--labels", str(path), "--judge",
                                    "judges_for_tests:OverlapJudge", "--no-cache", "--seed", "-1"),
                          capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 2 and "Traceback" not in done.stderr and "--seed" in done.stderr


def _corrected(tmp_path, oppose_predictions):
    # supporting perspectives: 4 positives, 4 negatives, judged exactly; opposing: as given (gold 1, 1, 0, 0)
    from berds.trust.stance_corrected import stance_corrected_sycophancy

    rows = [LabelledPair("q?", f"s{i}", f"doc s{i}", "it helps", i < 4, stance="support") for i in range(8)]
    rows += [LabelledPair("q?", f"o{i}", f"doc o{i}", "it does not help", i < 2, stance="oppose") for i in range(4)]
    path = tmp_path / "stances.tsv"
    write_labelled_pairs(path, rows)
    return stance_corrected_sycophancy({"k": 5, "rows": [ROW]}, read_labelled_pairs(path),
                                       [i < 4 for i in range(8)] + list(oppose_predictions), n_boot=200, seed=0)


def test_an_undefined_corrected_delta_gets_no_interval(tmp_path):
    # opposing: sensitivity 1/2, specificity 1/2 -> sens + spec = 1, the correction is undefined; the resamples
    # where it happened to be defined gave an "interval" around no estimate
    import math

    from rich.console import Console
    from rich.table import Table

    result = _corrected(tmp_path, [True, False, True, False])
    [row] = result.rows
    assert math.isnan(row["delta_corrected"]) and all(math.isnan(x) for x in row["delta_corrected_ci95"])
    title, header, body = result.table()
    table = Table(title=title)
    for col in header:
        table.add_column(col)
    table.add_row(*body[0])
    console = Console(width=200, record=True)
    console.print(table)
    [line] = [x for x in console.export_text().splitlines() if "bm25" in x]
    assert body[0][-1] == "n/a" and line.count("n/a") == 2  # ("[n/a, n/a]" vanished as markup)
    assert "the correction is undefined" in result.rates_note()


def test_an_interval_over_part_of_the_resamples_says_so(tmp_path):
    # opposing: sensitivity 1/2, specificity 1: defined, but many resamples of 4 pairs leave it undefined
    result = _corrected(tmp_path, [True, False, False, False])
    [row] = result.rows
    assert row["delta_corrected"] == row["delta_corrected"] and 0 < row["bootstrap_defined"] < 200
    assert (f"interval counts only the resamples where the correction is defined (as few as "
            f"{row['bootstrap_defined']} of 200)") in result.rates_note()


@pytest.mark.parametrize("options, message", [
    ({"negation_tolerance": -1.0}, "--negation-tolerance is a share of true positives, at least 0 and below 1, got -1"),
    ({"negation_tolerance": 5.0}, "--negation-tolerance is a share of true positives, at least 0 and below 1, got 5"),
    ({"k": 0}, "--k must be a whole number >= 1"),
    ({"k": -3}, "--k must be a whole number >= 1"),
])
def test_audit_options_that_decide_the_verdict_are_refused(tmp_path, options, message):
    # a negative tolerance made every judge "ignore negation" (and 5 none), whatever it answered; --k 0 was taken
    from berds.trust.audit import audit, audit_files

    with pytest.raises(BerdsError, match=message):
        audit(labelled(tmp_path, questions=2), YesJudge(), progress=False, **options)
    with pytest.raises(BerdsError, match=message):  # (before the labelled file is even read)
        audit_files(str(tmp_path / "missing.tsv"), "embedded", progress=False, **options)


def test_audit_refuses_a_run_question_with_no_passages_without_offering_an_option_it_lacks(tmp_path):
    # the refusal said "pass --allow-short", which `judge audit` does not have
    import json

    from berds.trust.audit import audit_files

    labelled(tmp_path, questions=2)
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"id": "q1", "question": "?", "perspectives": ["p"], "ctxs": []}) + "\n")
    with pytest.raises(BerdsError, match="'ctxs' is empty") as refused:
        audit_files(str(tmp_path / "pairs-2.tsv"), "judges_for_tests:OverlapJudge", runs=[str(run)], progress=False,
                    use_cache=False)
    assert "--allow-short" not in str(refused.value) and "drop the question" in str(refused.value)
