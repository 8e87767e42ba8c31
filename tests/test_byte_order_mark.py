"""A UTF-8 byte-order mark at the start of a jsonl (Windows editors write one) is read past, as RFC 8259 allows;
it was refused as malformed JSON on line 1 in question sets, run files and corpus shards."""

from __future__ import annotations

import json

import pytest

from berds.errors import InputError
from berds.io import iter_jsonl
from berds.questions import load_questions
from berds.runs import load_run

BOM = b"\xef\xbb\xbf"


def test_questions_run_and_jsonl_files_with_a_byte_order_mark_are_read(tmp_path):
    question = {"id": "q1", "question": "Should cities build bike lanes?", "perspectives": ["Yes, safer.", "No, costly."]}
    questions = tmp_path / "questions.jsonl"
    questions.write_bytes(BOM + json.dumps(question).encode() + b"\n")
    assert [q.id for q in load_questions(questions)] == ["q1"]

    run = tmp_path / "run.jsonl"
    record = {**question, "ctxs": [{"id": "p1", "text": "Bike lanes are safer.", "title": "", "score": 1.0}]}
    run.write_bytes(BOM + json.dumps(record).encode() + b"\n")
    assert [h.passage.id for h in load_run(run).hits["q1"]] == ["p1"]

    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(BOM + b'{"a": 1}\n' + BOM + b'{"b": 2}\n')
    lines = iter_jsonl(plain)
    assert next(lines) == (1, {"a": 1})
    with pytest.raises(InputError, match="line 2"):  # only the file's start may carry the mark
        next(lines)
