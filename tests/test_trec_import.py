"""`berds import run`: a TREC run made elsewhere + its passage store + its question set -> a run folder."""

from __future__ import annotations

import json

import pytest

from berds.errors import BerdsError, InputError
from berds.io import sha256_file
from berds.retrievers.trec_import import import_trec_run
from berds.runs import load_run, save_run, trec_scores
from berds.types import Hit, Question, Run
from retrieval_fixtures import word_store
from cli_fixtures import cli




@pytest.fixture
def setup(tmp_path):
    store = word_store(tmp_path / "store", n=40)
    qfile = tmp_path / "questions.jsonl"
    qs = [Question(f"q{i}", f"Is {w} good?", ("yes it is", "no it is not")) for i, w in enumerate(("fig", "kiwi", "plum"))]
    qfile.write_text("".join(json.dumps({"id": q.id, "question": q.text, "perspectives": list(q.perspectives)}) + "\n"
                             for q in qs))
    return store, qfile, qs


def write_trec(path, rows):
    path.write_text("".join(f"{q} Q0 {d} {r} {s} mine\n" for q, d, r, s in rows))
    return path


def test_a_run_folder_round_trips_through_its_own_trec_file(tmp_path, setup):
    """The TREC file berds writes, imported with the same store and questions, is the same ranking again."""
    store, qfile, qs = setup
    passages = list(store)
    hits = [[Hit(passages[(i * 7 + j) % 40], 10.0 - j * 0.5 - (j == 3) * 0.0) for j in range(6)] for i in range(3)]
    hits[1][2] = Hit(hits[1][2].passage, hits[1][1].score)  # a tie: trec_eval's order survives the trip
    original = save_run(Run.from_lists(qs, hits, name="orig"), tmp_path / "orig")
    run, report = import_trec_run(original / "run.trec", corpus=store.path, questions=qfile, out=tmp_path / "back")
    want, got = load_run(original), load_run(tmp_path / "back")
    for q in qs:  # the same ranking; tied scores come back as run.trec spreads them (runs.trec_scores)
        assert [h.passage for h in got.hits[q.id]] == [h.passage for h in want.hits[q.id]]
        assert [h.score for h in got.hits[q.id]] == trec_scores([h.score for h in want.hits[q.id]])
        assert got.questions[q.id].perspectives == q.perspectives
    assert (report.matched, report.unknown_qids, report.missing_docids, report.depths) == (3, [], 0, [6, 6, 6])
    manifest = json.loads((tmp_path / "back" / "manifest.json").read_text())
    assert manifest["imported"]["sha256"] == sha256_file(original / "run.trec")
    assert manifest["imported"]["path"] == str((original / "run.trec").resolve())
    assert manifest["corpus"]["fingerprint"] == store.fingerprint and manifest["name"] == "orig"
    assert (tmp_path / "back" / "run.trec").read_text() == (original / "run.trec").read_text()


def test_ranked_by_score_like_trec_eval_and_cut_to_k(tmp_path, setup):
    store, qfile, _ = setup
    trec = write_trec(tmp_path / "r.trec", [("q0", "p0001", 1, 1.0), ("q0", "p0002", 2, 3.0), ("q0", "p0003", 3, 2.0),
                                            ("q1", "p0004", 1, 5.0)])
    run, report = import_trec_run(trec, corpus=store, questions=qfile, k=2)
    assert [h.passage.id for h in run.hits["q0"]] == ["p0002", "p0003"]
    assert report.reordered == 1 and report.cut == 1 and report.depths == [2, 1, 0]
    assert not run.hits["q2"] and report.matched == 2  # kept, with no passages: eval refuses it unless --allow-short


def test_missing_docids_are_refused_naming_one_or_dropped_and_counted(tmp_path, setup):
    store, qfile, _ = setup
    trec = write_trec(tmp_path / "r.trec", [("q0", "p0001", 1, 3.0), ("q0", "nope", 2, 2.0), ("q1", "p0002", 1, 1.0)])
    with pytest.raises(InputError, match=r"question 'q0': passage 'nope' is not in the passage store .*--missing drop"):
        import_trec_run(trec, corpus=store, questions=qfile)
    run, report = import_trec_run(trec, corpus=store, questions=qfile, missing="drop", out=tmp_path / "run")
    assert [h.passage.id for h in run.hits["q0"]] == ["p0001"] and report.missing_docids == 1
    imported = json.loads((tmp_path / "run" / "manifest.json").read_text())["imported"]
    assert imported["missing_docids"] == 1 and imported["missing_docid_examples"] == ["q0/nope"]


def test_unknown_qids_are_left_out_and_listed_but_a_file_of_only_unknown_qids_is_refused(tmp_path, setup):
    store, qfile, _ = setup
    trec = write_trec(tmp_path / "r.trec", [("q0", "p0001", 1, 3.0), ("zz9", "p0002", 1, 1.0)])
    run, report = import_trec_run(trec, corpus=store, questions=qfile)
    assert list(run.hits) == ["q0", "q1", "q2"] and report.unknown_qids == ["zz9"]
    other = write_trec(tmp_path / "o.trec", [("301", "p0001", 1, 3.0), ("302", "p0002", 1, 1.0)])
    with pytest.raises(InputError, match=r"none of its 2 question ids \(301, 302, \.\.\.\) is in the question set"):
        import_trec_run(other, corpus=store, questions=qfile)


@pytest.mark.parametrize("text, message", [
    ("q0 Q0 p0001 1 3.0\n", "line 1.*expected 6 fields"),
    ("q0 Q0 p0001 one 3.0 t\n", "line 1.*rank must be an integer"),
    ("q0 Q0 p0001 1 nan t\n", "line 1.*score is nan, not a finite number"),
    ("q0 Q0 p0001 1 3.0 t\nq0 Q0 p0001 2 2.0 t\n", "line 2.*lists passage 'p0001' again \\(first on line 1\\)"),
])
def test_a_malformed_trec_file_names_the_line(tmp_path, setup, text, message):
    store, qfile, _ = setup
    (tmp_path / "r.trec").write_text(text)
    with pytest.raises(InputError, match=message):
        import_trec_run(tmp_path / "r.trec", corpus=store, questions=qfile)


def test_the_command_prints_what_it_joined_and_eval_reads_the_folder(tmp_path, setup, capsys, monkeypatch):
    store, qfile, _ = setup
    trec = write_trec(tmp_path / "r.trec", [("q0", "p0001", 1, 3.0), ("q1", "p0002", 1, 1.0), ("x", "p0003", 1, 1.0)])
    code, out, err = cli(capsys, monkeypatch, "import", "run", "--trec", str(trec), "--corpus", str(store.path),
                         "--questions", str(qfile), "--out", str(tmp_path / "run"))
    assert code == 0, err
    rows = [" ".join(line.strip("│ ").split()) for line in out.splitlines()]
    assert "unknown qids │ 1 (left out): x" in rows and "question set │ 3 questions, 2 of them in the file" in rows
    assert "1 of 3 questions have no passages" in err and "q2" in err
    assert load_run(tmp_path / "run", allow_empty=True).name == "mine"
    code, _, err = cli(capsys, monkeypatch, "import", "run", "--trec", str(trec), "--corpus", str(store.path),
                       "--questions", str(qfile), "--out", str(tmp_path / "run"))
    assert code == 2 and "already holds a run" in err
    code, _, err = cli(capsys, monkeypatch, "eval", str(trec), "--judge", "demo-gold")
    assert code == 2 and "berds import run --trec" in err and len(err.strip().splitlines()) == 1


def test_a_byte_order_mark_is_not_part_of_the_first_qid_and_a_gzip_file_is_named(tmp_path, setup):
    import gzip

    store, qfile, _ = setup
    (tmp_path / "bom.trec").write_bytes(b"\xef\xbb\xbfq0 Q0 p0001 1 3.0 t\n")
    _, report = import_trec_run(tmp_path / "bom.trec", corpus=store, questions=qfile)
    assert report.unknown_qids == [] and report.matched == 1
    (tmp_path / "r.trec.gz").write_bytes(gzip.compress(b"q0 Q0 p0001 1 3.0 t\n"))
    with pytest.raises(InputError, match="is gzip-compressed; a TREC run file must be plain text"):
        import_trec_run(tmp_path / "r.trec.gz", corpus=store, questions=qfile)


def test_bad_arguments_are_one_line(tmp_path, setup):
    store, qfile, _ = setup
    with pytest.raises(InputError, match="no such TREC run file"):
        import_trec_run(tmp_path / "none.trec", corpus=store, questions=qfile)
    with pytest.raises(BerdsError, match="missing must be one of refuse, drop"):
        import_trec_run(tmp_path / "none.trec", corpus=store, questions=qfile, missing="skip")
