"""Judgements as TREC diversity qrels, and ir_measures diversity measures on `berds eval` (one value by hand)."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from berds.errors import BerdsError, InputError
from berds.evaluate.evaluation import evaluate_paths, evaluate_run
from berds.evaluate.qrels import (
    check_measures,
    compute_measures,
    export_qrels,
    qrels_from_judgements,
    read_judgements,
)
from berds.runs import save_run
from berds.types import Hit, Passage, Question, Run
from conftest import berds_cmd, subprocess_env
from judges_for_tests import OverlapJudge

# Perspective 1 = "bike lanes make streets safer", 2 = "bike lanes hurt local shops". With the overlap judge:
# d1 supports 1, d2 supports 1, d3 supports both, d4 supports neither.
PASSAGES = [("d1", "bike lanes make streets safer"), ("d2", "safer streets make sense"),
            ("d3", "bike lanes make streets safer but hurt local shops"), ("d4", "gardening and weather")]


def hand_run(name: str = "hand") -> Run:
    q = Question("q1", "Should cities build more bike lanes?",
                 ("bike lanes make streets safer", "bike lanes hurt local shops"))
    q2 = Question("q2", "Is rain good?", ("rain helps farms",))
    hits = [Hit(Passage(pid, text), float(10 - i)) for i, (pid, text) in enumerate(PASSAGES)]
    return Run.from_lists([q, q2], [hits, list(reversed(hits))], name=name)


def test_alpha_ndcg_matches_a_hand_computation(tmp_path):
    result = evaluate_run(hand_run(), OverlapJudge(), ks=(4,), progress=False)
    assert result.support["q1"].astype(int).tolist() == [[1, 1, 1, 0], [0, 0, 1, 0]]
    qrels, ranking = qrels_from_judgements(result.judgements(hand_run()))
    means, per_question = compute_measures(["alpha_nDCG@4", "StRecall@4", "ERR_IA@4"], qrels, ranking)
    # alpha = 0.5: gain of a passage = sum over the subtopics it supports of 0.5 ** (times already covered).
    # Ranking d1 d2 d3 d4: gains 1, 0.5, 0.25 + 1, 0 -> DCG = 1/log2(2) + 0.5/log2(3) + 1.25/log2(4).
    dcg = 1 + 0.5 / math.log2(3) + 1.25 / math.log2(4)
    # Ideal (greedy): d3 (2), then d1 or d2 (0.5), then the other (0.25).
    ideal = 2 + 0.5 / math.log2(3) + 0.25 / math.log2(4)
    assert per_question["q1"]["alpha_nDCG@4"] == pytest.approx(dcg / ideal, abs=1e-9)
    assert dcg / ideal == pytest.approx(0.795121, abs=1e-6)
    assert per_question["q1"]["StRecall@4"] == 1.0
    # q2's only perspective is supported by no passage: ndeval has no subtopic for it, every measure is 0.
    assert per_question["q2"] == {"alpha_nDCG@4": 0.0, "StRecall@4": 0.0, "ERR_IA@4": 0.0}
    assert means["alpha_nDCG@4"] == pytest.approx(dcg / ideal / 2)


def test_qrels_lines_and_the_export_command(tmp_path):
    run = hand_run()
    save_run(run, tmp_path / "run")
    [(_, result, files)] = evaluate_paths([tmp_path / "run"], "judges_for_tests:OverlapJudge", ks=(4,),
                                          progress=False, use_cache=False)
    out = tmp_path / "run.qrels"
    n = export_qrels(tmp_path / "run", out)
    lines = out.read_text().splitlines()
    assert n == len(lines) == 4 * 2 + 4 * 1  # every judged pair: 4 passages x 2 perspectives, 4 x 1
    assert "q1 2 d3 1" in lines and "q1 2 d1 0" in lines and "q2 1 d4 0" in lines
    # The CLI does the same.
    cli_out = tmp_path / "cli.qrels"
    done = subprocess.run(berds_cmd("export", "qrels", str(tmp_path / "run"), "--out", str(cli_out)),
                          capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert sorted(cli_out.read_text().splitlines()) == sorted(lines)
    assert "12 qrels lines" in done.stdout


def test_cli_eval_measures_beside_mrecall(tmp_path):
    save_run(hand_run(), tmp_path / "run")
    done = subprocess.run(berds_cmd("eval", str(tmp_path / "run"), "--judge", "judges_for_tests:OverlapJudge",
                                    "--k", "4", "--no-cache", "-q", "--measure", "alpha_nDCG@4", "--measure",
                                    "ERR_IA@4", "--measure", "StRecall@4", "--qrels", str(tmp_path / "out.qrels")),
                          capture_output=True, text=True, env=subprocess_env(COLUMNS="250"))
    assert done.returncode == 0, done.stderr
    header = " ".join(line for line in done.stdout.splitlines() if line.startswith("┃"))  # two lines: name, then @k
    assert all(name in header for name in ("alpha_nDCG", "MRecall", "StRecall", "@4")), done.stdout
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    evaluated = json.loads(next((tmp_path / "run" / "eval").rglob("metrics.json")).read_text())
    for m in (metrics, evaluated):
        assert m["ir_measures"]["mean"]["alpha_nDCG@4"] == pytest.approx(0.795121 / 2, abs=1e-6)
        assert m["ir_measures"]["per_question"]["q2"]["StRecall@4"] == 0.0
    assert len((tmp_path / "out.qrels").read_text().splitlines()) == 12


def test_a_measure_deeper_than_the_judged_ranks_is_refused(tmp_path):
    # `eval --k 5 --measure alpha_nDCG@10` printed an "alpha_nDCG@10" computed on the 5 judged passages
    with pytest.raises(BerdsError, match=r"alpha_nDCG@10 needs the top 10 passages judged, but --k judges only the "
                                         r"top 5 — add 10 to --k \(e.g. --k 5,10\)"):
        check_measures(["MRecall@5", "alpha_nDCG@10"], depth=5)
    assert len(check_measures(["alpha_nDCG@10", "ERR_IA", "StRecall@5"], depth=10)) == 3
    save_run(hand_run(), tmp_path / "run")
    done = subprocess.run(berds_cmd("eval", str(tmp_path / "run"), "--judge", "judges_for_tests:OverlapJudge",
                                    "--k", "2", "--no-cache", "-q", "--measure", "ERR_IA@4"),
                          capture_output=True, text=True, env=subprocess_env(COLUMNS="250"))
    assert done.returncode == 2 and "--measure ERR_IA@4 needs the top 4 passages judged" in done.stderr, done.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()  # refused before any judging


def test_bad_measures_and_judgement_files(tmp_path):
    with pytest.raises(BerdsError, match="unknown --measure 'alphaNDCG@10'"):
        check_measures(["alphaNDCG@10"])
    done = subprocess.run(berds_cmd("eval", str(tmp_path / "nothing"), "--judge", "embedded", "--measure", "nope@3"),
                          capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 2 and "unknown --measure 'nope@3'" in done.stderr
    bad = tmp_path / "judgements.jsonl"
    bad.write_text('{"qid": "q1", "docid": "d1", "rank": 1, "perspective": 0, "label": 1}\n{"qid": "q1"}\n')
    with pytest.raises(InputError, match="judgements.jsonl, line 2: not a judgement record"):
        read_judgements(bad)
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(InputError, match="holds no judgements.jsonl"):
        read_judgements(tmp_path / "empty-dir")
    run = tmp_path / "run.jsonl"  # a run given for its judgements was "not a judgement record (KeyError: 'rank')"
    run.write_text(json.dumps({"id": "q1", "question": "?", "perspectives": ["p"], "ctxs": []}) + "\n")
    with pytest.raises(InputError, match=r"run.jsonl, line 1: this is a run .* pass the evaluation folder"):
        read_judgements(run)


def test_judgement_values_that_int_would_bend_and_non_utf8_bytes_are_refused(tmp_path):
    # int() turned a label of 0.9 into rel 0 and a perspective of -1 into subtopic 0, written without a word;
    # a non-UTF-8 byte was a UnicodeDecodeError traceback
    good = '{"qid": "q1", "docid": "d1", "rank": 1, "perspective": 0, "label": 1}\n'
    path = tmp_path / "judgements.jsonl"
    for bad, why in (('"perspective": -1', "'perspective' must be an index"), ('"perspective": 0.9', "'perspective'"),
                     ('"label": 0.9', "'label' must be 0 or 1"), ('"label": 2', "'label' must be 0 or 1"),
                     ('"rank": 0', "'rank' must be an integer >= 1")):
        key = bad.split(":")[0]
        record = json.loads(good)
        record[json.loads(key)] = json.loads(bad.split(":", 1)[1])
        path.write_text(good + json.dumps(record) + "\n")
        with pytest.raises(InputError, match=f"judgements.jsonl, line 2: not a judgement record .*{why}"):
            read_judgements(path)
    path.write_bytes(good.encode() + b'{"qid": "q\xff"}\n')
    with pytest.raises(InputError, match="judgements.jsonl, line 2: not UTF-8"):
        read_judgements(path)
    path.write_text(good.replace('"label": 1', '"label": true'))
    assert read_judgements(path)[0] == [("q1", "1", "d1", 1)]


def test_cli_qrels_of_several_runs_never_share_a_file_and_are_checked_before_judging(tmp_path):
    # the qrels file of each run was named by its name cut at the first dot: minilm-mmr0.5 and minilm-mmr0.75
    # wrote minilm-mmr0.qrels, and a/run and b/run wrote run.qrels, each over the other
    folders = ["minilm-mmr0.5", "minilm-mmr0.75", "a/run", "b/run"]
    for i, name in enumerate(folders):
        run = hand_run(name.replace("/", "-"))
        qids = list(run.questions)[: 1 + i % 2]  # runs of one and of two questions: each file has its own lines
        save_run(Run.from_lists([run.questions[q] for q in qids], [run.hits[q] for q in qids], name=run.name),
                 tmp_path / name)
    args = ["eval", *(str(tmp_path / f) for f in folders), "--judge", "judges_for_tests:OverlapJudge", "--k", "4",
            "--no-cache", "-q"]
    done = subprocess.run(berds_cmd(*args, "--qrels", str(tmp_path / "qrels")), capture_output=True, text=True,
                          env=subprocess_env())
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (tmp_path / "qrels").iterdir())
    assert written == ["a-run.qrels", "b-run.qrels", "minilm-mmr0.5.qrels", "minilm-mmr0.75.qrels"]
    for name, lines in (("minilm-mmr0.5", 8), ("minilm-mmr0.75", 12), ("a-run", 8), ("b-run", 12)):
        assert len((tmp_path / "qrels" / f"{name}.qrels").read_text().splitlines()) == lines, name
    # a file where the folder goes: refused before any pair is judged (it failed with "File exists" at the end)
    (tmp_path / "taken").write_text("mine")
    log = tmp_path / "judged.log"
    done = subprocess.run(berds_cmd(*args, "-o", f"log={log}", "--out", str(tmp_path / "out"), "--qrels",
                                    str(tmp_path / "taken")), capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 2 and f"error: {tmp_path / 'taken'}: is a file, but the output needs a folder here (--qrels)" in done.stderr, done.stderr
    assert not log.exists() and not (tmp_path / "out").exists()
    assert (tmp_path / "taken").read_text() == "mine"


def test_cli_qrels_refuses_an_id_holding_whitespace_before_judging(tmp_path):
    """The qrels writer refused such ids only after every pair had been judged, naming no run."""
    # a run folder cannot hold such ids (its run.trec refuses them); a BERDS-format jsonl run can
    record = {"id": "q1", "question": "Should cities build bike lanes?",
              "perspectives": ["bike lanes are safer", "bike lanes cost shops"],
              "ctxs": [{"id": "doc 1", "text": "bike lanes are safer for riders", "score": 1.0},
                       {"id": "d2", "text": "shops lose parking", "score": 0.5}]}
    (tmp_path / "run.jsonl").write_text(json.dumps(record) + "\n")
    log = tmp_path / "judged.log"
    done = subprocess.run(berds_cmd("eval", str(tmp_path / "run.jsonl"), "--judge", "judges_for_tests:OverlapJudge",
                                    "-o", f"log={log}", "--k", "2", "--no-cache", "-q", "--qrels",
                                    str(tmp_path / "run.qrels")), capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 2
    assert f"{tmp_path / 'run.jsonl'}: question 'q1': the id 'doc 1' holds whitespace" in done.stderr, done.stderr
    assert not log.exists() and not (tmp_path / "run.qrels").exists()


@pytest.mark.slow
def test_flat_qrels_give_ranx_and_trec_tools_berds_precision(tmp_path):
    """Read as ordinary qrels, the subtopic file kept one line per (qid, docid) — the last perspective's label —
    so ranx's precision@4 of q1 was 0.25 where berds' Precision@4 is 0.75."""
    from ranx import Qrels
    from ranx import Run as RanxRun
    from ranx import evaluate as ranx_evaluate

    run = hand_run()
    save_run(run, tmp_path / "run")
    [(_, result, _)] = evaluate_paths([tmp_path / "run"], "judges_for_tests:OverlapJudge", ks=(4,), progress=False,
                                      use_cache=False)
    done = subprocess.run(berds_cmd("export", "qrels", str(tmp_path / "run"), "--flat", "--out", str(tmp_path / "f")),
                          capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0 and "(qid 0 docid rel)" in done.stdout, done.stderr
    lines = (tmp_path / "f").read_text().splitlines()
    assert sorted(lines) == sorted(["q1 0 d1 1", "q1 0 d2 1", "q1 0 d3 1", "q1 0 d4 0",
                                    "q2 0 d1 0", "q2 0 d2 0", "q2 0 d3 0", "q2 0 d4 0"])
    qrels = Qrels.from_file(str(tmp_path / "f"), kind="trec")
    ranking = RanxRun.from_file(str(tmp_path / "run" / "run.trec"), kind="trec")
    per_question = ranx_evaluate(qrels, ranking, "precision@4", return_mean=False)
    berds = [result.per_question[q]["precision@4"] for q in ("q1", "q2")]
    assert list(per_question) == pytest.approx(berds) and berds == [0.75, 0.0]
