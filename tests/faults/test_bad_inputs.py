"""Bad input is refused with an error naming the file, the line and what is wrong (issue 15, item 6).

One table: each case writes a file (or damages one file of a valid run folder), loads it the way berds
does, and names the text the error must hold. Add a case here whenever a new kind of bad input turns up.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from berds.errors import InputError
from berds.runs import load_run, save_run
from conftest import berds_cmd, make_run, subprocess_env

Q = {"question": "Should phones be banned in schools?", "perspectives": ["yes: distraction", "no: emergencies"]}


def ctx(i, **over):
    return {"id": f"d{i}", "title": f"T{i}", "text": f"passage number {i}", "score": 10.0 - i, **over}


def lines(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def questions_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def ctxs_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def run_folder_with_trec(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], Path]:
    """A valid run folder (3 questions x 6 passages) whose run.trec lines are then edited."""

    def make(tmp_path: Path) -> Path:
        folder = save_run(make_run(n_questions=3, depth=6), tmp_path / "run")
        trec = folder / "run.trec"
        trec.write_text("".join(edit(trec.read_text().splitlines(keepends=True))))
        return trec

    return make


def read_questions_from(path: Path):
    from berds.questions import read_questions

    return read_questions(path)


def read_corpus_jsonl(path: Path):
    from berds.corpora.web import iter_jsonl_documents

    return list(iter_jsonl_documents([path]))


def load_folder_of(trec: Path):
    return load_run(trec.parent)


# (case id, writes the file -> its path, loads it, text the error must contain, line it must name or None)
CASES = [
    ("question id is a dict", lambda t: questions_file(t, lines({"id": {"a": 1}, **Q})), read_questions_from,
     "question 'id' must be a string or an integer, got dict", 1),
    ("question id is a list", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": [ctx(0)]}, {"id": [2], **Q, "ctxs": [ctx(0)]})),
     load_run, "question 'id' must be a string or an integer, got list", 2),
    ("question id is a bool", lambda t: questions_file(t, lines({"id": True, **Q})), read_questions_from,
     "got bool", 1),
    ("question id is a float", lambda t: questions_file(t, lines({"id": 3.5, **Q})), read_questions_from,
     "got float", 1),
    ("passage id is a dict", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": [ctx(0, id={"x": 1})]})), load_run,
     "passage 'id' must be a string or an integer, got dict", 1),
    ("passage text is a number", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": [ctx(0), ctx(1, text=42)]})), load_run,
     "record 'q1 ctxs[1]': passage has no 'text' string", 1),
    ("corpus text is a number", lambda t: ctxs_file(t, lines({"id": "a", "text": "fine"}, {"id": "b", "text": 42})),
     read_corpus_jsonl, "field 'text' must be a string, got int", 2),
    ("same passage twice in one ranking", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": [ctx(0), ctx(1), ctx(0)]})),
     load_run, "passage 'd0' is listed twice in this question's ctxs (positions 0 and 2)", 1),
    ("same text twice without ids", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": [
        {"title": "A", "text": "same words"}, {"title": "B", "text": "other"}, {"title": "A", "text": "same words"}]})),
     load_run, "is listed twice", 1),
    ("ctxs is not a list", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": {"0": ctx(0)}})), load_run,
     "'ctxs' must be a list of passages", 1),
    ("score is not a number", lambda t: ctxs_file(t, lines({"id": "q1", **Q, "ctxs": [ctx(0, score="high")]})), load_run,
     "score 'high' is not a number", 1),
    ("duplicate question id", lambda t: questions_file(t, lines({"id": "q1", **Q}, {"id": "q1", **Q})), read_questions_from,
     "duplicate question id (first seen on line 1)", 2),
    ("perspectives empty", lambda t: questions_file(t, lines({"id": "q1", "question": "?", "perspectives": []})),
     read_questions_from, "'perspectives' must be a non-empty list", 1),
    ("malformed JSON", lambda t: questions_file(t, lines({"id": "q1", **Q}, '{"id": "q2", "question": ')),
     read_questions_from, "malformed JSON", 2),
    ("not UTF-8", lambda t: (questions_file(t, ""), (t / "questions.jsonl").write_bytes(
        json.dumps({"id": "q1", **Q, "question": "caf\u00e9?"}, ensure_ascii=False).encode("latin-1") + b"\n"))[0],
     read_questions_from, "not UTF-8 text", 1),
    ("run.trec junk line", run_folder_with_trec(lambda ls: ls[:4] + ["<html> junk pasted here\n"] + ls[4:]),
     load_folder_of, "expected 6 fields 'qid Q0 docid rank score tag', got 4", 5),
    ("run.trec wrong passage at a rank", run_folder_with_trec(lambda ls: ls[:1] + [ls[1].replace("d0-1", "zzz")] + ls[2:]),
     load_folder_of, "rank 2 of question 'q0' is 'zzz', but run.ctxs.jsonl has 'd0-1' there", 2),
    ("run.trec unknown question", run_folder_with_trec(lambda ls: ls + ["q9 Q0 d0-0 1 1.0 tag\n"]),
     load_folder_of, "question 'q9' is not in run.ctxs.jsonl", 19),
    ("run.trec rank not a number", run_folder_with_trec(lambda ls: [ls[0].replace(" 1 ", " one ", 1)] + ls[1:]),
     load_folder_of, "rank must be an integer and score a number", 1),
    ("run.trec cut short", run_folder_with_trec(lambda ls: ls[:-2]), load_folder_of,
     "question 'q2' has 4 lines here but 6 passages in run.ctxs.jsonl", None),
]


@pytest.mark.parametrize("make, load, expected, line", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_file_line_and_reason(tmp_path, make, load, expected, line):
    path = make(tmp_path)
    with pytest.raises(InputError) as err:
        load(path)
    message = str(err.value)
    assert expected in message
    assert message.startswith(str(path))  # the file comes first
    if line is not None:
        assert f"line {line}" in message


def test_a_repeated_passage_is_dropped_only_when_asked(tmp_path):
    path = ctxs_file(tmp_path, lines({"id": "q1", **Q, "ctxs": [ctx(0), ctx(1), ctx(0), ctx(2)]}))
    run = load_run(path, duplicates="dedupe")
    assert [h.passage.id for h in run.hits["q1"]] == ["d0", "d1", "d2"]


def test_eval_refuses_a_repeated_passage_before_judging(tmp_path):
    run = make_run(n_questions=2, depth=4)
    folder = save_run(run, tmp_path / "run")
    ctxs = folder / "run.ctxs.jsonl"
    rows = [json.loads(x) for x in ctxs.read_text().splitlines()]
    rows[1]["ctxs"][3] = rows[1]["ctxs"][0]
    ctxs.write_text(lines(*rows))
    (folder / "run.trec").unlink()  # (the TREC check would also catch it; this case is about the ctxs)
    done = subprocess.run(berds_cmd("eval", str(folder), "--judge", "judges_for_tests:OverlapJudge", "--k", "4",
                                    "--no-cache", "-q"), capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{ctxs}, line 2, record 'q1': passage 'd1-0' is listed twice" in " ".join(done.stderr.split())
    assert "--duplicates dedupe" in done.stderr and not (folder / "metrics.json").exists()
