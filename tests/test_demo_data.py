"""The demo benchmark shipped in berds/data/demo: well-formed, consistent, and its tsv in sync.

The data is hand-written (see berds/data/demo/README.md); these checks keep edits to it honest.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

import berds
from berds.errors import InputError
from berds.io import iter_jsonl
from berds.types import Passage, Question

DEMO_DIR = Path(berds.__file__).parent / "data" / "demo"
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "make_demo_labels.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("make_demo_labels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def make_labels():
    return _load_script()


@pytest.fixture(scope="module")
def questions() -> dict[str, Question]:
    out = {}
    for _, rec in iter_jsonl(DEMO_DIR / "questions.jsonl"):
        assert set(rec) == {"id", "question", "perspectives"}, rec
        assert rec["id"] not in out, f"duplicate question id {rec['id']}"
        out[rec["id"]] = Question(id=rec["id"], text=rec["question"], perspectives=rec["perspectives"], dataset="demo")
    return out


@pytest.fixture(scope="module")
def passages() -> dict[str, Passage]:
    out = {}
    for _, rec in iter_jsonl(DEMO_DIR / "corpus.jsonl"):
        assert set(rec) == {"id", "title", "text", "source"}, rec
        assert rec["id"] not in out, f"duplicate passage id {rec['id']}"
        out[rec["id"]] = Passage(id=rec["id"], text=rec["text"], title=rec["title"], source=rec["source"])
    return out


@pytest.fixture(scope="module")
def labels() -> list[dict]:
    return [rec for _, rec in iter_jsonl(DEMO_DIR / "labels.jsonl")]


def test_questions_are_contentious_questions_with_two_to_four_perspectives(questions):
    assert len(questions) == 12
    for q in questions.values():
        assert q.text.endswith("?"), q.id
        assert 2 <= len(q.perspectives) <= 4, q.id
        assert len(set(q.perspectives)) == len(q.perspectives), f"{q.id} repeats a perspective"
        for p in q.perspectives:
            assert 8 <= len(p.split()) <= 20, (q.id, p)
    # Not only pro/con: some questions offer several distinct answers.
    assert any(len(q.perspectives) > 2 for q in questions.values())


def test_passage_ids_titles_and_texts_are_unique(passages):
    assert len(passages) >= 250
    titles = Counter(p.title for p in passages.values())
    texts = Counter(p.text for p in passages.values())
    assert [t for t, n in titles.items() if n > 1] == []
    assert [t for t, n in texts.items() if n > 1] == []
    assert {p.source for p in passages.values()} == {"demo"}


def test_passage_lengths_are_passage_sized(passages):
    too_short_or_long = {pid: len(p.text.split()) for pid, p in passages.items() if not 40 <= len(p.text.split()) <= 140}
    assert too_short_or_long == {}
    for p in passages.values():
        assert p.title.strip() and "\t" not in p.text and "\n" not in p.text


def test_labels_point_at_existing_passages_and_valid_perspectives(questions, passages, labels):
    seen = set()
    for rec in labels:
        assert set(rec) == {"passage_id", "question_id", "supports"}, rec
        assert rec["passage_id"] in passages, rec
        assert rec["question_id"] in questions, rec
        assert rec["passage_id"] not in seen, f"{rec['passage_id']} is labelled twice"
        seen.add(rec["passage_id"])
        supports = rec["supports"]
        n = len(questions[rec["question_id"]].perspectives)
        assert all(type(i) is int and 0 <= i < n for i in supports), rec
        assert supports == sorted(set(supports)), rec
    # Off-topic filler exists: passages that belong to no question.
    assert len(set(passages) - seen) >= 20


def test_every_perspective_is_supported_and_every_question_has_hard_negatives(questions, labels):
    support_count = Counter()
    negatives = Counter()
    for rec in labels:
        for i in rec["supports"]:
            support_count[(rec["question_id"], i)] += 1
        if not rec["supports"]:
            negatives[rec["question_id"]] += 1
    for q in questions.values():
        for i, perspective in enumerate(q.perspectives):
            assert support_count[(q.id, i)] >= 2, f"{q.id} perspective {i} ({perspective!r}) has too few supporting passages"
        # On-topic passages that support nothing keep Precision@k from being trivial.
        assert negatives[q.id] >= 2, q.id


def test_corpus_order_does_not_group_passages_by_question(labels):
    by_position = [rec["question_id"] for rec in sorted(labels, key=lambda r: r["passage_id"])]
    # If ids had been assigned question by question, neighbours would almost always share a question.
    same_as_next = sum(a == b for a, b in zip(by_position, by_position[1:]))
    assert same_as_next < len(by_position) / 3


def test_tsv_is_exactly_what_the_script_produces(make_labels):
    expected = make_labels.render_tsv(make_labels.labelled_pair_rows(DEMO_DIR))
    actual = (DEMO_DIR / "labelled_pairs.tsv").read_text(encoding="utf-8")
    assert actual == expected, "labelled_pairs.tsv is stale: run python scripts/make_demo_labels.py"


def test_tsv_rows_match_the_labels(questions, passages, labels):
    with open(DEMO_DIR / "labelled_pairs.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert rows[0] == ["question", "id", "document", "perspective", "label"]
    body = rows[1:]
    assert len(body) == sum(len(questions[r["question_id"]].perspectives) for r in labels)
    # No quote characters: readers that honour CSV quoting and readers that don't see the same cells.
    assert all(len(row) == 5 and not any('"' in cell for cell in row) for row in body)
    first = labels[0]
    q, p = questions[first["question_id"]], passages[first["passage_id"]]
    for i, row in enumerate(body[: len(q.perspectives)]):
        assert row == [q.text, q.id, f"{p.text} {p.title}", q.perspectives[i], "1" if i in first["supports"] else "0"]
    positives = sum(row[4] == "1" for row in body)
    assert positives == sum(len(r["supports"]) for r in labels)


def _copy_demo(tmp_path: Path) -> Path:
    target = tmp_path / "demo"
    shutil.copytree(DEMO_DIR, target)
    return target


def test_script_rejects_a_label_with_an_out_of_range_perspective(make_labels, tmp_path):
    demo = _copy_demo(tmp_path)
    lines = (demo / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[2])
    bad["supports"] = [7]
    lines[2] = json.dumps(bad)
    (demo / "labels.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        make_labels.labelled_pair_rows(demo)
    message = str(err.value)
    assert "labels.jsonl" in message and "line 3" in message and "[7]" in message


def test_script_rejects_an_unknown_passage_id(make_labels, tmp_path):
    demo = _copy_demo(tmp_path)
    with open(demo / "labels.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"passage_id": "d-9999", "question_id": "demo-01", "supports": []}) + "\n")
    with pytest.raises(InputError, match=r"unknown passage id 'd-9999'"):
        make_labels.labelled_pair_rows(demo)


def test_check_mode_detects_a_stale_tsv_and_rewrite_fixes_it(make_labels, tmp_path, capsys):
    demo = _copy_demo(tmp_path)
    assert make_labels.main(["--demo-dir", str(demo), "--check"]) == 0
    # Flip one label: the shipped tsv no longer matches.
    lines = (demo / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[0])
    rec["supports"] = [] if rec["supports"] else [0]
    lines[0] = json.dumps(rec)
    (demo / "labels.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert make_labels.main(["--demo-dir", str(demo), "--check"]) == 1
    assert make_labels.main(["--demo-dir", str(demo)]) == 0
    assert make_labels.main(["--demo-dir", str(demo), "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
