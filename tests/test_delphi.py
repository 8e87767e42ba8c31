"""The DELPHI question set: formats, labels, per-answer perspectives, the offline error, and the gold rule
(retrieval works without gold perspectives; evaluation refuses with a message naming the commands)."""

from __future__ import annotations

import json

import pytest

from berds.errors import BerdsError, InputError
from berds.questions import load_questions, parse_controversy_label, read_delphi
from berds.testing import TINY_PASSAGES
from berds.types import Hit, rank_hits

RECORDS = [
    {"qid": 11, "question_text": "Does God exist?", "controversial": True, "emotion": 4.6, "opinion": 4.8},
    {"qid": 12, "question_text": "What breed of dogs are most cheerful?", "controversial": "false"},
    {"qid": 13, "question_text": "Is the Earth flat?", "controversial": 0,
     "answers": [{"model": "gpt-4", "answer": "No.", "perspectives": ["The Earth is round."]}]},
    {"qid": 14, "question": "Should taxes be raised?", "label": "controversial",
     "perspectives": ["Taxes fund schools.", "Taxes hurt growth."]},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class FixedRetriever:
    name = "fixed"

    def search(self, questions, *, k):
        hits = [Hit(TINY_PASSAGES[0], 3.0), Hit(TINY_PASSAGES[1], 2.0)]
        return [rank_hits(hits)[:k] for _ in questions]


def test_records_labels_and_per_answer_perspectives(tmp_path):
    questions = read_delphi(write_jsonl(tmp_path / "delphi.jsonl", RECORDS))
    assert [q.id for q in questions] == ["11", "12", "13", "14"]
    assert [q.extra["controversial"] for q in questions] == [True, False, False, True]
    assert questions[0].text == "Does God exist?" and questions[0].perspectives == ()
    assert questions[0].extra["emotion"] == 4.6 and questions[0].dataset == "delphi"
    assert questions[2].extra["answers"][0]["perspectives"] == ["The Earth is round."]
    assert questions[3].perspectives == ("Taxes fund schools.", "Taxes hurt growth.")


def test_csv_and_json_releases_read_the_same(tmp_path):
    import csv

    rows = [{"qid": r["qid"], "question_text": r.get("question_text", r.get("question")),
             "controversial": str(r.get("controversial", "true"))} for r in RECORDS]
    with open(tmp_path / "delphi.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["qid", "question_text", "controversial"])
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "delphi.json").write_text(json.dumps({"data": rows}))
    from_csv, from_json = read_delphi(tmp_path / "delphi.csv"), read_delphi(tmp_path / "delphi.json")
    assert [(q.id, q.text, q.extra["controversial"]) for q in from_csv] == \
           [(q.id, q.text, q.extra["controversial"]) for q in from_json]
    assert [q.extra["controversial"] for q in from_csv] == [True, False, False, True]


@pytest.mark.parametrize("record, message", [
    ({"question_text": "Q?"}, "line 1: record has no id"),
    ({"qid": 1}, "record '1': record has no question text"),
    ({"qid": 1, "question": "Q?", "controversial": "maybe"}, "controversy label 'maybe'"),
    ({"qid": 1, "question": "Q?", "answers": "x"}, "'answers' must be a list of objects"),
    ({"qid": 1, "question": "Q?", "answers": [{"perspectives": "x"}]}, r"answers\[0\].perspectives must be a list"),
])
def test_bad_records_name_file_and_line(tmp_path, record, message):
    path = write_jsonl(tmp_path / "delphi.jsonl", [record])
    with pytest.raises(InputError, match=message):
        read_delphi(path)


def test_label_values():
    assert [parse_controversy_label(v) for v in (True, 1, "yes", "Controversial", 0, "non-controversial", "?")] == \
           [True, True, True, True, False, False, None]


def test_named_set_from_data_dir_and_the_controversial_subset(tmp_path, monkeypatch):
    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    write_jsonl(tmp_path / "delphi.jsonl", RECORDS)
    everything = load_questions("delphi", require_perspectives=False)
    assert len(everything) == 4
    assert [q.id for q in load_questions("delphi-controversial", require_perspectives=False)] == ["11", "14"]
    # A split file wins over the split-less one.
    write_jsonl(tmp_path / "delphi.dev.jsonl", RECORDS[:1])
    assert len(load_questions("delphi", "dev", require_perspectives=False)) == 1


def test_commands_that_need_gold_perspectives_refuse_delphi(tmp_path, monkeypatch):
    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    write_jsonl(tmp_path / "delphi.jsonl", RECORDS)
    with pytest.raises(InputError, match=r"record '11': 3 of 4 questions have no gold perspectives.*berds eval.*"
                                         r"berds retrieve"):
        load_questions("delphi")


def test_offline_without_a_local_copy_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.delenv("BERDS_DATA_DIR", raising=False)
    monkeypatch.setenv("BERDS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BERDS_OFFLINE", "1")
    with pytest.raises(BerdsError, match=r"DELPHI is not available locally and berds is offline.*BERDS_DATA_DIR/delphi"):
        load_questions("delphi", require_perspectives=False)
    assert not (tmp_path / "home" / "benchmarks").exists()


def test_retrieve_works_without_gold_and_eval_refuses_the_run(tmp_path):
    from berds.evaluate.evaluation import evaluate_paths
    from berds.retrievers import retrieve
    from berds.runs import load_run

    path = write_jsonl(tmp_path / "delphi.jsonl", RECORDS)
    run = retrieve(f"{__name__}:FixedRetriever", str(path), k=2, out=tmp_path / "run", progress=False)
    assert len(run.questions) == 4 and run.questions["11"].perspectives == ()
    assert len(load_run(tmp_path / "run", require_perspectives=False).questions) == 4
    with pytest.raises(InputError, match=r"line 1, record '11'.*berds eval.*need gold perspectives.*berds retrieve"):
        evaluate_paths([tmp_path / "run"], "embedded", progress=False, use_cache=False)


def test_evaluate_run_refuses_in_memory_questions_without_gold():
    from berds.evaluate.evaluation import evaluate_run
    from berds.types import Question, Run

    run = Run.from_lists([Question("q1", "Q?", ())], [[Hit(TINY_PASSAGES[0], 1.0)]], name="mine")
    with pytest.raises(InputError, match="mine, record 'q1': 1 of 1 questions have no gold perspectives"):
        evaluate_run(run, object(), ks=(1,), progress=False)


def test_any_question_file_may_lack_gold_for_retrieval_only(tmp_path):
    from berds.questions import read_questions

    path = write_jsonl(tmp_path / "mine.jsonl", [{"id": "a", "question": "Q?"}, {"id": "b", "question": "R?",
                                                                                   "perspectives": []}])
    questions = load_questions(str(path), require_perspectives=False)
    assert [q.perspectives for q in questions] == [(), ()]
    with pytest.raises(InputError, match=r"line 1, record 'a': record has no 'perspectives'.*berds retrieve"):
        read_questions(path)


def test_the_no_gold_refusal_names_questions_stats_and_the_docs_quote_it_as_printed():
    # `berds questions stats delphi` refused with a list of the commands that need gold perspectives that left
    # out the command being run
    import re
    from pathlib import Path

    from berds.questions import NO_GOLD_FIX

    assert "berds questions stats" in NO_GOLD_FIX
    docs = (Path(__file__).parent.parent / "docs" / "question-sets.md").read_text()
    quoted = re.search(r"this command needs them —\n(.*?)\n```", docs, re.S)
    assert quoted and " ".join(quoted.group(1).split()) == NO_GOLD_FIX
