"""What the judge-trust commands say beside their tables: the judge warning (every command that judges prints it,
as CONTRIBUTING asks; the four `berds judge` commands printed none), a note when the labelled file holds one class,
and no empty brackets with --bootstrap 0 (found by an audit of the judge claims)."""

from __future__ import annotations

import json
import subprocess

import pytest

from berds.trust.labels import LabelledPair, read_labelled_pairs, write_labelled_pairs
from berds.types import Verdict
from conftest import berds_cmd, subprocess_env
from judges_for_tests import OverlapJudge


class RetrainedEmbedded(OverlapJudge):
    """Stands for an embedded judge with other weights: the warning names it as not the shipped judge."""

    def __init__(self, **options):
        super().__init__(**options)
        self.id = "embedded:v2-minilm-l6-test+stance-0000000000"


JUDGE = "test_trust_command_notes:RetrainedEmbedded"
ROW = {"label": "bm25", "query": "supporting", "p": 60.0, "n": 35.0, "p_docs": 12, "n_docs": 7, "docs": 20,
       "delta": 5 / 12, "questions": 4}


def labelled_file(tmp_path, labels=lambda q, i: (q + i) % 3 == 0):
    rows = [LabelledPair(f"question {q}?", f"{q}-{i}", f"cats chase mice {q} {i}" if i % 2 else f"dogs bark {q}",
                         "cats chase mice" if i % 2 else "cats do not chase mice", labels(q, i),
                         stance="support" if i % 2 else "oppose") for q in range(3) for i in range(6)]
    path = tmp_path / "pairs.tsv"
    write_labelled_pairs(path, rows)
    return path


def command(tmp_path, name):
    labels = str(labelled_file(tmp_path))
    if name == "validate":
        return ["judge", "validate", "--labels", labels, "--judge", JUDGE, "--no-cache", "--bootstrap", "50"]
    if name == "audit":
        return ["judge", "audit", "--labels", labels, "--judge", JUDGE, "--no-cache"]
    if name == "calibrate":
        return ["judge", "calibrate", "--labels", labels, "--judge", JUDGE, "--no-cache", "--no-save"]
    saved = tmp_path / "syco.json"
    saved.write_text(json.dumps({"analysis": "sycophancy", "version": 1, "k": 5, "rows": [ROW]}))
    return ["judge", "stance-correct", "--sycophancy", str(saved), "--labels", labels, "--judge", JUDGE,
            "--cache", str(tmp_path / "c.sqlite"), "--bootstrap", "50"]


@pytest.mark.parametrize("name", ["validate", "audit", "calibrate", "stance-correct"])
def test_every_judge_trust_command_prints_the_judge_warning(tmp_path, name):
    done = subprocess.run(berds_cmd(*command(tmp_path, name), "-q"), capture_output=True, text=True, timeout=120,
                          env=subprocess_env(COLUMNS="300", BERDS_HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())  # (the warning wraps at the console width, 300 columns or not)
    assert "warning: judge embedded: NOT validated" in said
    assert "is for the shipped judge, not this one (other weights than the shipped ones)" in said


def _report(tmp_path, labels, n_boot=50):
    from berds.trust.validate import validate

    return validate(read_labelled_pairs(labelled_file(tmp_path, labels)), [OverlapJudge()], n_boot=n_boot,
                    progress=False)


def test_a_one_class_file_is_named_with_the_measures_that_say_nothing(tmp_path):
    from berds.trust.validate import one_class_note

    none = one_class_note(_report(tmp_path, lambda q, i: False))
    assert none.startswith(f"note: every pair in {tmp_path / 'pairs.tsv'} is labelled 0: precision, recall and F1")
    assert "labelled 1: precision is 100" in one_class_note(_report(tmp_path, lambda q, i: True))
    assert one_class_note(_report(tmp_path, lambda q, i: i == 1)) is None


def test_no_bootstrap_prints_values_without_empty_brackets(tmp_path):
    from rich.console import Console

    from berds.trust.validate import markdown_table, validity_table

    report = _report(tmp_path, lambda q, i: i % 2 == 1, n_boot=0)
    console = Console(width=80, record=True)
    console.print(validity_table(report))
    text = console.export_text() + markdown_table(report)
    assert "[-, -]" not in text and "[nan" not in text
    with_intervals = Console(width=80, record=True)
    with_intervals.print(validity_table(_report(tmp_path, lambda q, i: i % 2 == 1)))
    assert with_intervals.export_text().count("[") >= 6


def test_an_annotator_column_named_like_a_judge_gets_no_judge_warning(tmp_path):
    rows = [LabelledPair("q?", f"d{i}", f"doc {i}", "p", i % 2 == 0, extra={"embedded": str(i % 3 % 2)})
            for i in range(6)]
    write_labelled_pairs(tmp_path / "two.tsv", rows)
    done = subprocess.run(berds_cmd("judge", "validate", "--labels", str(tmp_path / "two.tsv"), "--column", "embedded",
                                    "--bootstrap", "0"), capture_output=True, text=True, timeout=120,
                          env=subprocess_env(COLUMNS="300", BERDS_HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stderr
    assert "column:embedded" in done.stdout and "warning" not in done.stderr


@pytest.mark.parametrize("questions, note", [(3, "only 10 distinct resamples: no interval is reliable"),
                                             (12, None)])
def test_a_question_bootstrap_over_few_questions_says_its_interval_is_unreliable(tmp_path, questions, note):
    # the untouched dev pairs have 3 questions: 10 distinct resamples, an "interval" the table gave with no word
    from rich.console import Console

    from berds.trust.validate import validate, validity_table

    rows = [LabelledPair(f"q{q}?", f"{q}-{i}", f"cats chase mice {q} {i}", "cats chase mice", i % 2 == 0)
            for q in range(questions) for i in range(4)]
    write_labelled_pairs(tmp_path / "q.tsv", rows)
    report = validate(read_labelled_pairs(tmp_path / "q.tsv"), [OverlapJudge()], n_boot=50, resample="questions",
                      progress=False)
    console = Console(width=300, record=True)
    console.print(validity_table(report))
    text = " ".join(console.export_text().split())
    assert f"resampling the {questions} questions" in text
    assert (note in text) if note else ("no interval is reliable" not in text)


def test_a_judge_that_never_says_yes_is_named_beside_its_zero_precision(tmp_path):
    # a freshly trained tiny judge answered No to all 650 demo pairs; the table showed precision 0.0 [0.0, 0.0]
    # as if measured, with nothing saying it was 0 of 0
    from berds.trust.validate import one_answer_notes, validate

    class NeverYes(OverlapJudge):
        def judge(self, pairs):
            return [Verdict(label=False, p_yes=0.0, raw="No") for _ in pairs]

    pairs = read_labelled_pairs(labelled_file(tmp_path, lambda q, i: i == 1))
    report = validate(pairs, [NeverYes(), OverlapJudge()], n_boot=0, progress=False)
    notes = one_answer_notes(report)
    assert len(notes) == 1 and notes[0].startswith(f"note: {report.judges[0].name} answered No to all ")
    assert "precision (0 of 0) is shown as 0" in notes[0]
    assert one_answer_notes(_report(tmp_path, lambda q, i: i == 1)) == []
