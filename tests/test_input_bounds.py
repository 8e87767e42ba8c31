"""What one input file may hold is bounded (issue 33, item 5): a jsonl line (BERDS_MAX_LINE_BYTES), a whole-file
JSON (BERDS_MAX_JSON_BYTES), a passage's or question's text (BERDS_MAX_TEXT_CHARS), and nesting — each with a
one-line error naming the file (and line), never a RecursionError traceback or gigabytes of memory."""

from __future__ import annotations

import json

import pytest

from berds.errors import InputError
from berds.types import Passage

DEEP = "[" * 100_000 + "]" * 100_000
QUESTION = {"id": "q1", "question": "Should cities build bike lanes?", "perspectives": ["Yes.", "No."]}
CTX = {"id": "d1", "title": "T", "text": "bike lanes", "score": 1.0}


def _jsonl(path, *lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_deeply_nested_json_is_a_one_line_error_in_every_input_file(tmp_path):
    from berds.corpora.web import iter_jsonl_documents
    from berds.indexes.base import read_index_meta
    from berds.questions import read_questions
    from berds.runs import read_ctxs_jsonl

    nested = json.dumps({**QUESTION, "extra": "X"}).replace('"X"', DEEP)
    cases = [
        (lambda: read_questions(_jsonl(tmp_path / "q.jsonl", json.dumps(QUESTION), nested)), "q.jsonl, line 2"),
        (lambda: read_ctxs_jsonl(_jsonl(tmp_path / "run.jsonl", nested.replace('"extra"', '"ctxs": [], "x"'))),
         "run.jsonl, line 1"),
        (lambda: list(iter_jsonl_documents([_jsonl(tmp_path / "c.jsonl", '{"id": "a", "text": %s}' % DEEP)])),
         "c.jsonl, line 1"),
        (lambda: read_index_meta(tmp_path / "idx"), "meta.json"),
    ]
    from berds.evaluate.qrels import read_judgements

    judged = json.dumps({"qid": "q1", "docid": "d1", "rank": 1, "perspective": 0, "label": 1})
    cases.append((lambda: read_judgements(_jsonl(tmp_path / "judgements.jsonl", judged, '{"qid": %s}' % DEEP)),
                  "judgements.jsonl, line 2"))
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "meta.json").write_text('{"kind": %s}' % DEEP, encoding="utf-8")
    for read, where in cases:
        with pytest.raises(InputError, match=rf"{where}.*nested too deeply") as info:
            read()
        assert "\n" not in str(info.value)


def test_a_line_over_the_limit_is_refused_without_reading_it_and_the_limit_can_be_raised(tmp_path, monkeypatch):
    from berds.questions import read_questions

    big = dict(QUESTION, id="q2", question="word " * 400)
    path = _jsonl(tmp_path / "q.jsonl", json.dumps(QUESTION), json.dumps(big))
    monkeypatch.setenv("BERDS_MAX_LINE_BYTES", "1000")
    with pytest.raises(InputError, match=r"q.jsonl, line 2: line is over 1,000 bytes long .*BERDS_MAX_LINE_BYTES=N"):
        read_questions(path)
    monkeypatch.setenv("BERDS_MAX_LINE_BYTES", "4000")
    assert [q.id for q in read_questions(path)] == ["q1", "q2"]
    monkeypatch.setenv("BERDS_MAX_LINE_BYTES", "lots")
    with pytest.raises(Exception, match="BERDS_MAX_LINE_BYTES='lots' must be a positive whole number"):
        read_questions(path)


def test_texts_over_the_limit_are_refused_in_questions_runs_and_stores(tmp_path, monkeypatch):
    from berds.corpora.docstore import write_passage_store
    from berds.questions import read_questions
    from berds.runs import read_ctxs_jsonl

    monkeypatch.setenv("BERDS_MAX_TEXT_CHARS", "500")
    long = "x" * 501
    with pytest.raises(InputError, match=r"q.jsonl, line 1, record 'q1': the question is 501 characters long, over the "
                                         r"limit of 500 .*BERDS_MAX_TEXT_CHARS=N"):
        read_questions(_jsonl(tmp_path / "q.jsonl", json.dumps(dict(QUESTION, question=long))))
    with pytest.raises(InputError, match=r"perspective 1 is 501 characters"):
        read_questions(_jsonl(tmp_path / "q.jsonl", json.dumps(dict(QUESTION, perspectives=["a", long]))))
    run = dict(QUESTION, ctxs=[CTX, dict(CTX, id="d2", text=long)])
    with pytest.raises(InputError, match=r"run.jsonl, line 1, record 'q1 ctxs\[1\]': the passage's text is 501 characters"):
        read_ctxs_jsonl(_jsonl(tmp_path / "run.jsonl", json.dumps(run)))
    with pytest.raises(InputError, match=r"passage 'd2' has 501 characters of text, over the limit of 500"):
        write_passage_store([Passage("d1", "short"), Passage("d2", long)], tmp_path / "s")
    monkeypatch.setenv("BERDS_MAX_TEXT_CHARS", "600")
    assert len(read_ctxs_jsonl(tmp_path / "run.jsonl").hits["q1"]) == 2


def test_a_json_file_over_its_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from berds.io import read_json

    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"kind": "run", "pad": "x" * 5000}), encoding="utf-8")
    monkeypatch.setenv("BERDS_MAX_JSON_BYTES", "4096")
    with pytest.raises(InputError, match=r"manifest.json: is 5,0\d\d bytes, over the limit of 4,096 .*BERDS_MAX_JSON_BYTES"):
        read_json(path)


def test_an_llm_reply_nested_too_deeply_is_no_list_of_perspectives():
    from berds.retrievers.expansion import _decode_at

    assert _decode_at(DEEP, 0) is None  # (a RecursionError traceback before)
