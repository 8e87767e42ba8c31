"""retrieve() as a researcher with their own retriever sees it: a resumed run equals an uninterrupted one, and a
broken plug-in is named with the questions it failed on."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.retrievers import retrieve
from berds.types import Hit, Passage, Question

QUESTIONS = [Question(f"q{i}", f"question {i}", ("a", "b")) for i in range(4)]


class Untitled:
    """Passages read without a title field (as a BERDS jsonl without 'title' gives them); can fail on a call."""

    name = "untitled"

    def __init__(self, *, fail_on_call: int = 0):
        self.fail_on_call, self.calls, self.log = fail_on_call, 0, []

    def search(self, questions, *, k):
        self.calls += 1
        self.log.append([q.id for q in questions])
        if self.calls == self.fail_on_call:
            raise RuntimeError("stopped")
        return [[Hit(Passage(f"{q.id}-d{r}", f"text {r}", title_field=False), float(k - r)) for r in range(k)]
                for q in questions]


def test_a_resumed_run_keeps_passages_without_a_title_field_as_an_uninterrupted_run_does(tmp_path):
    retrieve(Untitled(), QUESTIONS, k=2, out=tmp_path / "whole", batch_size=2, progress=False)
    with pytest.raises(RuntimeError, match="stopped"):
        retrieve(Untitled(fail_on_call=2), QUESTIONS, k=2, out=tmp_path / "resumed", batch_size=2, progress=False)
    run = retrieve(Untitled(), QUESTIONS, k=2, out=tmp_path / "resumed", batch_size=2, progress=False)
    assert run.manifest["timing"]["resumed"] == 2
    for name in ("run.ctxs.jsonl", "run.trec"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_an_exception_from_a_plugin_keeps_its_traceback_and_names_the_plugin_the_questions_and_what_is_kept(tmp_path):
    with pytest.raises(RuntimeError, match="stopped") as caught:
        retrieve(Untitled(fail_on_call=2), QUESTIONS, k=2, out=tmp_path / "run", batch_size=2, progress=False)
    note = caught.value.__notes__[-1]
    assert "retriever 'untitled'" in note and f"{__name__}:Untitled" in note
    assert "'q2', 'q3'" in note and "'q0'" not in note  # the batch it failed on, not the one before
    assert f"the 2 questions finished before are kept in {tmp_path / 'run' / '.partial.jsonl'}" in note


def test_the_summary_shows_a_long_run_folder_whole_within_80_columns(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    out = tmp_path / ("a-folder-name-long-enough-to-need-more-than-one-line-of-the-summary-table-" * 2) / "run"
    result = CliRunner().invoke(app, ["retrieve", "-r", f"{__name__}:Untitled", "--questions", "demo", "--k", "2",
                                      "--out", str(out)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80
    cells = "".join(line.split("│")[2].strip() for line in lines if line.count("│") == 3 and "questions" not in line
                    and line.split("│")[1].strip() in ("run folder", ""))
    assert str(out) in cells, result.output


class SpacedIds:
    name = "spaced"

    def __init__(self):
        self.calls = 0

    def search(self, questions, *, k):
        self.calls += 1
        return [[Hit(Passage("doc-1" if q.id == "q0" else "doc 1", "text"), 1.0)] for q in questions]


def test_a_passage_id_holding_whitespace_is_refused_at_the_batch_that_returned_it_naming_the_question(tmp_path):
    from berds.testing import check_retriever

    retriever = SpacedIds()
    with pytest.raises(BerdsError, match=r"retriever 'spaced' broke the retriever contract: question 'q1': "
                                         r"passage id 'doc 1' holds whitespace"):
        retrieve(retriever, QUESTIONS, k=2, out=tmp_path / "run", batch_size=2, progress=False)
    assert retriever.calls == 1  # not after searching every question
    report = check_retriever(SpacedIds())
    assert any("holds whitespace" in c.detail for c in report.failures), report.summary()


class Hangs:
    name = "hangs"
    release = None  # a threading.Event the test sets, so the left-behind search thread ends with the test

    def search(self, questions, *, k):
        Hangs.release.wait(30)
        return [[] for _ in questions]

    def close(self):
        raise AssertionError("closed while its search was still running")


def test_check_retriever_reports_a_search_that_does_not_return_instead_of_hanging():
    import threading
    import time

    from berds.testing import check_retriever

    Hangs.release = threading.Event()
    started = time.perf_counter()
    try:
        report = check_retriever(f"{__name__}:Hangs", timeout=0.3)
    finally:
        Hangs.release.set()
    assert time.perf_counter() - started < 10
    assert not report.ok and report.failures[-1].name == "time"
    assert "did not return within 0.3 s" in report.failures[-1].detail
    assert "close" not in [c.name for c in report.checks]


def test_the_manifest_records_the_question_file_and_limit_and_no_split_that_was_not_applied(tmp_path, monkeypatch):
    import json

    questions = tmp_path / "mine.jsonl"
    questions.write_text("".join(json.dumps({"id": f"m{i}", "question": f"question {i}"}) + "\n" for i in range(3)))
    monkeypatch.chdir(tmp_path)
    run = retrieve(Untitled(), "mine.jsonl", split="dev", limit=2, k=1, progress=False)
    recorded = run.manifest["question_set"]
    assert recorded["split"] is None  # a file is read whole: "dev" was not applied
    assert recorded["path"] == str(questions.resolve()) and recorded["limit"] == 2 and recorded["count"] == 2
    questions.write_text(questions.read_text().replace("question 1", "question one"))
    again = retrieve(Untitled(), "mine.jsonl", split="dev", limit=2, k=1, progress=False).manifest["question_set"]
    assert again["ids_sha256"] == recorded["ids_sha256"] and again["texts_sha256"] != recorded["texts_sha256"]


def test_a_refused_expanded_retrieve_into_a_finished_run_keeps_that_runs_perspectives(tmp_path):
    import json

    from typer.testing import CliRunner

    from berds.cli import app

    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": f"m{i}", "question": f"question {i}"}) + "\n"
                                              for i in range(2)))
    (tmp_path / "exp.jsonl").write_text("".join(json.dumps(
        {"id": f"m{i}", "question": f"question {i}", "expansions": [{"name": "a", "text": "one"}]}) + "\n"
        for i in range(2)))
    args = ["retrieve", "-r", f"{__name__}:Untitled", "--questions", str(tmp_path / "q.jsonl"), "--k", "2", "-q",
            "--expand", "file", "--expansions", str(tmp_path / "exp.jsonl"), "--out", str(tmp_path / "run")]
    assert CliRunner().invoke(app, args).exit_code == 0
    recorded = (tmp_path / "run" / "expansions.jsonl").read_text()
    refused = CliRunner().invoke(app, args)  # no --overwrite: refused, and the finished run is left whole
    assert refused.exit_code != 0 and "already holds a run" in str(refused.exception)
    assert (tmp_path / "run" / "expansions.jsonl").read_text() == recorded
    assert CliRunner().invoke(app, args + ["--overwrite"]).exit_code == 0
    assert (tmp_path / "run" / "expansions.jsonl").read_text() == recorded
    # replaced by a run without expansion: the old perspectives are not left to describe it
    assert CliRunner().invoke(app, args[:args.index("--expand")] + args[-2:] + ["--overwrite"]).exit_code == 0
    assert not (tmp_path / "run" / "expansions.jsonl").exists()


def test_work_resumed_after_a_line_cut_off_by_a_kill_survives_a_second_interruption(tmp_path):
    out, partial = tmp_path / "run", tmp_path / "run" / ".partial.jsonl"
    with pytest.raises(RuntimeError):
        retrieve(Untitled(fail_on_call=2), QUESTIONS, k=2, out=out, batch_size=1, progress=False)
    partial.write_text(partial.read_text() + '{"qid": "q1", "hi')  # killed while writing q1's line
    with pytest.raises(RuntimeError):  # the second session finishes q1, then stops too
        retrieve(Untitled(fail_on_call=2), QUESTIONS, k=2, out=out, batch_size=1, progress=False)
    third = Untitled()
    retrieve(third, QUESTIONS, k=2, out=out, batch_size=1, progress=False)
    assert third.log == [["q2"], ["q3"]]  # q1 was kept, not glued onto the cut-off line and lost
    retrieve(Untitled(), QUESTIONS, k=2, out=tmp_path / "whole", batch_size=1, progress=False)
    assert (out / "run.ctxs.jsonl").read_bytes() == (tmp_path / "whole" / "run.ctxs.jsonl").read_bytes()


def test_a_second_retrieve_into_a_folder_another_is_writing_is_refused_before_touching_its_partial_file(tmp_path):
    from berds.errors import InputError
    from berds.io import lock_folder

    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        retrieve(Untitled(fail_on_call=2), QUESTIONS, k=2, out=out, batch_size=2, progress=False)
    before = (out / ".partial.jsonl").read_bytes()
    held = lock_folder(out, what="berds retrieve")  # as the first retrieve, still running, holds it
    try:
        with pytest.raises(InputError, match="another berds retrieve is writing into this folder"):
            retrieve(Untitled(), QUESTIONS, k=1, out=out, batch_size=2, progress=False)  # other settings
    finally:
        import os

        os.close(held)
    assert (out / ".partial.jsonl").read_bytes() == before
    with pytest.raises(BerdsError, match="cannot import module"):
        retrieve("no_such_module_here:R", QUESTIONS, k=1, out=tmp_path / "typo", progress=False)
    assert not (tmp_path / "typo").exists()


class NumberedCorpus(Untitled):
    name = "numbered"

    def provenance(self):
        return {"corpus": {"path": "somewhere", "passages": 3, "fingerprint": 12345678901234}}


def test_a_corpus_fingerprint_that_is_not_a_string_is_refused_before_the_run_is_written(tmp_path):
    with pytest.raises(BerdsError, match=r"provenance\(\)\['corpus'\]\['fingerprint'\] must be a string, got int"):
        retrieve(NumberedCorpus(), QUESTIONS, k=1, out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
