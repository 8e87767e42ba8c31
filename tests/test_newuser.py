"""What a new user hit (issue 16) and silent mixing/loss (issue 15, item 5): each test failed on the
main this branch started from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from berds.errors import BerdsError, InputError
from berds.evaluate.evaluation import evaluate_paths, evaluate_run
from berds.runs import load_run, save_run
from berds.types import Hit, Passage, Question, Run
from conftest import berds_cmd, make_run, subprocess_env
from judges_for_tests import OverlapJudge

JUDGE = "judges_for_tests:OverlapJudge"


def short_and_empty_run(name: str = "holes") -> Run:
    """q0 complete (6 passages), q1 short (2 passages), q2 empty (retrieval found nothing)."""
    run = make_run(n_questions=3, depth=6, name=name)
    hits = dict(run.hits)
    hits["q1"] = hits["q1"][:2]
    hits["q2"] = []
    return Run(run.questions, hits, run.manifest, run.name)


# ------------------------------------------------------------------------- 1, 2: short and empty questions


def test_short_and_empty_questions_score_as_documented(tmp_path):
    run = short_and_empty_run()
    folder = save_run(run, tmp_path / "run")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["empty_questions"] == ["q2"]
    with pytest.raises(InputError, match="'ctxs' is empty.*--allow-short"):
        evaluate_paths([folder], JUDGE, (5,), cache_path=tmp_path / "c.sqlite", progress=False)
    # used to end in IndexError while writing judgements.jsonl, after the judging
    [(_, result, files)] = evaluate_paths([folder], JUDGE, (5,), cache_path=tmp_path / "c.sqlite",
                                          progress=False, allow_short=True)
    full = evaluate_run(make_run(n_questions=3, depth=6), OverlapJudge(), ks=(5,), progress=False)
    assert result.per_question["q0"] == full.per_question["q0"]
    # short: the 2 passages are judged, ranks 3-5 count as unsupported (denominator stays k)
    s1 = result.support["q1"]
    assert s1.shape == (3, 5) and not s1[:, 2:].any()
    assert result.per_question["q1"]["precision@5"] == pytest.approx(s1[:, :2].any(axis=0).sum() / 5)
    # empty: nothing supports anything -> zero on both metrics
    assert result.per_question["q2"] == {"mrecall@5": 0.0, "precision@5": 0.0}
    rows = [json.loads(line) for line in files["judgements"].read_text().splitlines()]
    per_q = {q: sum(r["qid"] == q for r in rows) for q in ("q0", "q1", "q2")}
    assert per_q == {"q0": 2 * 5, "q1": 3 * 2, "q2": 0}


def test_cli_allow_short_on_a_run_with_holes(tmp_path):
    folder = save_run(short_and_empty_run(), tmp_path / "run")
    done = subprocess.run(berds_cmd("eval", str(folder), "--judge", JUDGE, "--k", "5", "--allow-short",
                                    "--cache", str(tmp_path / "c.sqlite"), "-q"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and (folder / "metrics.json").exists()


def test_retrieve_reports_questions_with_no_hits(tmp_path, capsys):
    from berds.retrievers import retrieve

    class Picky:
        name = "picky"

        def search(self, questions, *, k):
            return [[] if q.id == "q1" else [Hit(Passage(f"p-{q.id}", "some text", "t"), 1.0)] for q in questions]

    qs = list(make_run(n_questions=3).questions.values())
    run = retrieve(Picky(), qs, k=3, out=tmp_path / "run", progress=False)
    assert not run.hits["q1"]
    err = capsys.readouterr().err
    assert "1 of 3 questions got no passages" in err and "q1" in err and "--allow-short" in err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["empty_questions"] == ["q1"]


# ------------------------------------------------------------------------------- 3: names and collisions


def test_output_folders_keep_dotted_names_and_never_collide(tmp_path):
    base = make_run(n_questions=2, depth=4)
    a = save_run(Run(base.questions, base.hits, {}, "minilm"), tmp_path / "a" / "minilm-mmr0.5")
    b = save_run(Run(base.questions, base.hits, {}, "minilm"), tmp_path / "a" / "minilm-mmr0.9")
    c = save_run(Run(base.questions, base.hits, {}, "minilm"), tmp_path / "b" / "minilm-mmr0.9")
    results = evaluate_paths([a, b, c], JUDGE, (2,), cache_path=tmp_path / "c.sqlite", progress=False,
                             out=tmp_path / "X")
    folders = [files["metrics"].parent for _, _, files in results]
    assert folders[0] == tmp_path / "X" / "minilm-mmr0.5"
    assert len(set(folders)) == 3 and all(f.parent == tmp_path / "X" for f in folders)
    assert {f.name for f in folders[1:]} == {"a-minilm-mmr0.9", "b-minilm-mmr0.9"}
    labels = [r.run_name for _, r, _ in results]
    assert len(set(labels)) == 3 and all(label.startswith("minilm (") for label in labels)
    # a single jsonl keeps its dots too
    single = tmp_path / "minilm-mmr0.75.jsonl"
    single.write_text((a / "run.ctxs.jsonl").read_text())
    [(_, r, files)] = evaluate_paths([single], JUDGE, (2,), cache_path=tmp_path / "c.sqlite", progress=False)
    assert r.run_name == "minilm-mmr0.75" and files["metrics"].parent.name == "minilm-mmr0.75.eval"


def test_two_run_files_with_one_name_under_one_out(tmp_path, tiny_run):
    for parent in ("x", "y"):
        save_run(tiny_run, tmp_path / parent / "run")
    paths = [tmp_path / "x" / "run" / "run.ctxs.jsonl", tmp_path / "y" / "run" / "run.ctxs.jsonl"]
    results = evaluate_paths(paths, JUDGE, (2,), cache_path=tmp_path / "c.sqlite", progress=False,
                             out=tmp_path / "out")
    metrics = {files["metrics"] for _, _, files in results}
    assert len(metrics) == 2 and all(m.exists() for m in metrics)
    with pytest.raises(BerdsError, match="given twice"):
        evaluate_paths([paths[0], paths[0]], JUDGE, (2,), cache_path=tmp_path / "c.sqlite", progress=False,
                       out=tmp_path / "out")


# ------------------------------------------------------------------------- issue 15, item 5: mixing, loss


def test_bad_out_is_refused_before_judging(tmp_path, tiny_run):
    folder = save_run(tiny_run, tmp_path / "run")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    judge = OverlapJudge()
    calls = []
    judge.judge = lambda pairs: calls.append(len(pairs)) or OverlapJudge.judge(judge, pairs)
    with pytest.raises(InputError, match="file"):
        evaluate_paths([folder], judge, (2,), use_cache=False, progress=False, out=blocker / "sub")
    assert calls == []


def test_eval_refuses_a_manifest_from_another_run(tmp_path, tiny_run):
    a = save_run(tiny_run, tmp_path / "a")
    b = save_run(make_run(n_questions=2, depth=4), tmp_path / "b")
    (a / "manifest.json").write_text((b / "manifest.json").read_text())
    with pytest.raises(InputError, match="manifest.json.*does not match run.ctxs.jsonl"):
        load_run(a)
    # an older manifest without the checksum is checked on its counts
    old = json.loads((b / "manifest.json").read_text())
    del old["ctxs_sha256"]
    (a / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(InputError, match="questions=2 but run.ctxs.jsonl has 3"):
        load_run(a)
