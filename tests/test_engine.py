"""Execution engines: recipes, the local engine, and (marker ``ray``) a 2-CPU Ray instance started here.

The Ray tests check what a user relies on: encoding a corpus and judging a run on Ray write the very same
bytes (shard files; metrics, judgements, cache rows) as the local engine, also when a worker is killed in
the middle of the job; a batch that kills every worker stops the job with an error instead of looping;
an error raised by model code reaches the user unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from conftest import make_run
from engine_fixtures import CountingDoubler, make_tiny_bert, write_test_head

from berds.engine import BatchResult, Recipe, engine_info, get_engine
from berds.evaluate.judging import judge_runner_for
from berds.judges.recipe import JudgeRecipe
from berds.errors import BerdsError, InputError, UnknownNameError

TESTS_DIR = Path(__file__).parent


# ---------------------------------------------------------------------------------------- recipes


def test_recipe_rejects_bad_factory_and_missing_method():
    with pytest.raises(BerdsError, match="package.module:attr"):
        Recipe("engine_fixtures.CountingDoubler")
    recipe = Recipe("engine_fixtures:CountingDoubler", {"plus": 1}, method="nope")
    with pytest.raises(BerdsError, match="has no method 'nope'"):
        recipe.build()
    with pytest.raises(BerdsError, match="not callable"):
        Recipe("engine_fixtures:CountingDoubler").build()


def test_recipe_function_binds_keyword_options():
    fn = Recipe.function("engine_fixtures:double_all", plus=5).build()
    assert fn([1, 2]) == [7, 9]


def test_recipe_with_unpicklable_option_fails_on_the_driver():
    recipe = Recipe("engine_fixtures:CountingDoubler", {"plus": lambda: 1}, method="run")
    with pytest.raises(BerdsError, match="cannot be sent to workers"):
        recipe.check_picklable()


def test_equal_recipes_have_equal_keys_whatever_the_option_order():
    a = Recipe("m:f", {"x": 1, "y": [1, 2]}, method="run")
    b = Recipe("m:f", {"y": [1, 2], "x": 1}, method="run")
    assert a.key() == b.key() and a.key() != Recipe("m:f", {"x": 2, "y": [1, 2]}, method="run").key()


def test_judge_recipe_comes_from_a_judge_loaded_by_name(tmp_path):
    from berds.judges import LazyJudge

    lazy = LazyJudge(lambda: None, recipe=JudgeRecipe("embedded", {"threshold": 0.4}))
    assert JudgeRecipe.from_judge(lazy) == JudgeRecipe("embedded", {"threshold": 0.4})
    recipe = JudgeRecipe("embedded", {"threshold": 0.4}).recipe()
    assert (recipe.factory, recipe.method, recipe.options) == (
        "berds.judges.recipe:JudgeWorker", "judge_batch", {"name": "embedded", "options": {"threshold": 0.4}})
    with pytest.raises(BerdsError, match="carries no recipe"):
        JudgeRecipe.from_judge(object())


def test_recipes_ask_for_a_gpu_only_for_gpu_models():
    from berds.indexes.embedding import encoder_recipe
    from berds.indexes.encoders import EncoderSpec

    assert JudgeRecipe("mistral-berds").recipe().gpus == 1.0  # catalogue judge tagged gpu
    assert JudgeRecipe("vllm:/models/mistral").recipe().gpus == 1.0
    assert JudgeRecipe("transformers:/models/m", {"device": "cuda:0"}).recipe().gpus == 1.0
    assert JudgeRecipe("transformers:/models/m").recipe().gpus == 0.0
    assert JudgeRecipe("embedded").recipe().gpus == 0.0
    spec = EncoderSpec(name="t", model="/m")
    assert encoder_recipe(spec, device="cuda").gpus == 1.0 and encoder_recipe(spec).gpus == 0.0


# ---------------------------------------------------------------------------------------- engines


def test_get_engine_names_and_errors():
    assert get_engine("local").name == "local"
    assert get_engine(None).name == "local"
    engine = get_engine("local")
    assert get_engine(engine) is engine
    with pytest.raises(UnknownNameError, match="Did you mean 'ray'"):
        get_engine("rya")
    with pytest.raises(BerdsError, match="add --engine ray"):
        get_engine("local", address="ray://head:10001")


@pytest.mark.parametrize("option", [{"cpus_per_worker": float("nan")}, {"cpus_per_worker": float("inf")},
                                    {"gpus_per_worker": float("nan")}])
def test_ray_engine_refuses_sizes_no_worker_could_have(option):
    # nan ended `berds engine info` in a ValueError traceback; inf sized a pool whose actors could never start
    pytest.importorskip("ray")
    with pytest.raises(BerdsError, match="must be a finite number >= 0"):
        get_engine("ray", **option)


def test_ray_engine_refuses_a_gcs_address_nothing_answers():
    # ray.init("HOST:PORT") retried a dead address for many minutes without a word
    import socket

    pytest.importorskip("ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    started = time.perf_counter()
    with pytest.raises(BerdsError, match=f"cannot reach the Ray cluster at '127.0.0.1:{port}'"):
        get_engine("ray", address=f"127.0.0.1:{port}").connect()
    assert time.perf_counter() - started < 10


def test_local_engine_builds_once_per_recipe_and_keeps_order():
    engine = get_engine("local")
    CountingDoubler.builds = 0
    recipe = Recipe("engine_fixtures:CountingDoubler", {"plus": 1}, method="run")
    first = list(engine.map_batches(recipe, [[1, 2], [3], []]))
    assert [(r.index, r.output) for r in first] == [(0, [3, 5]), (1, [7]), (2, [])]
    assert all(isinstance(r, BatchResult) and r.worker == "local" and r.pid == os.getpid() for r in first)
    list(engine.map_batches(Recipe("engine_fixtures:CountingDoubler", {"plus": 1}, method="run"), iter([[4]])))
    assert CountingDoubler.builds == 1
    list(engine.map_batches(Recipe("engine_fixtures:CountingDoubler", {"plus": 2}, method="run"), [[4]]))
    assert CountingDoubler.builds == 2


def test_local_engine_judge_runner_is_judge_missing():
    from berds.evaluate.judging import judge_missing

    assert judge_runner_for(get_engine("local")) is judge_missing


def test_index_dense_cli_rejects_an_unknown_engine(tmp_path, capsys):
    from berds.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["index", "dense", str(tmp_path), "--out", str(tmp_path / "i"), "--encoder", "minilm", "--engine", "rya"])
    assert exit_info.value.code == 2
    assert "unknown engine 'rya'. Did you mean 'ray'?" in capsys.readouterr().err.replace("\n", "")


@pytest.mark.parametrize("command", [["eval", "RUN", "--judge", "embedded"], ["index", "dense", "STORE", "--encoder", "minilm"]])
def test_batch_timeout_is_refused_without_the_ray_engine(tmp_path, capsys, command):
    from berds.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--out", str(tmp_path / "o"), "--batch-timeout", "60"])
    assert exit_info.value.code == 2
    assert "--batch-timeout is for --engine ray" in capsys.readouterr().err.replace("\n", "")
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--out", str(tmp_path / "o"), "--address", "ray://head:10001"])
    assert exit_info.value.code == 2 and "add --engine ray" in capsys.readouterr().err.replace("\n", "")


@pytest.mark.parametrize("command", [["eval", "RUN", "--judge", "embedded", "--out", "OUT"],
                                     ["index", "dense", "STORE", "--encoder", "minilm", "--out", "OUT"],
                                     ["engine", "info", "--engine", "local"]])
def test_workers_must_be_positive_and_is_refused_without_the_ray_engine(tmp_path, capsys, command):
    from berds.cli import main

    command = [str(tmp_path / "o") if word == "OUT" else word for word in command]
    for value in ("0", "-2", "two"):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--workers", value])
        assert exit_info.value.code == 2 and "Invalid value for '--workers'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--workers", "2"])
    assert exit_info.value.code == 2
    assert "--workers is for --engine ray" in capsys.readouterr().err.replace("\n", "")
    assert not (tmp_path / "o").exists()


def test_workers_reaches_the_ray_engine():
    pytest.importorskip("ray")
    from berds.cli.options import engine_for

    engine = engine_for("ray", None, None, 3)  # not connected: sizing happens on first use
    assert engine.name == "ray" and engine._num_workers == 3


def test_engine_info_cli_for_the_local_engine(capsys):
    from berds.cli import main

    main(["engine", "info", "--engine", "local"])
    out = capsys.readouterr().out
    assert "engine: local" in out and str(os.getpid()) in out
    assert engine_info("local")["workers"] == 1


# ---------------------------------------------------------------------------------------- Ray

ray_mark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_engine():
    """One 2-CPU local Ray instance for the module; workers see tests/ and never touch the hub."""
    pytest.importorskip("ray")
    from berds.engine.ray_engine import RayEngine

    pythonpath = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p)
    engine = RayEngine(num_cpus=2, runtime_env={"env_vars": {
        "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}})
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-models")
    return {"bert": str(make_tiny_bert(root / "tiny-bert")), "head": str(write_test_head(root / "head.json"))}


def _tiny_store(path: Path, n: int = 240):
    from berds.corpora.docstore import PassageStore, PassageStoreWriter
    from berds.types import Passage

    words = "bike lanes make streets safer hurt local shops sugar taxes reduce obesity phones distract students".split()
    with PassageStoreWriter(path) as writer:
        for i in range(n):
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(5 + i % 23))
            writer.add(Passage(f"p{i}", f"{text} number {i}", title=f"Doc {i % 9}"))
    return PassageStore.open(path)


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@ray_mark
def test_ray_encoding_writes_the_same_shards_even_when_a_worker_is_killed(tmp_path, ray_engine, tiny_models):
    from berds.indexes.embedding import embed_corpus_on_engine
    from berds.indexes.encoders import Encoder, EncoderSpec
    from berds.indexes.faiss import embed_corpus

    store = _tiny_store(tmp_path / "store")
    spec = EncoderSpec(name="tiny", model=tiny_models["bert"], pooling="mean", max_length=64)
    local = embed_corpus(store, Encoder(spec, batch_size=8), tmp_path / "local", shard_size=20, progress=False)
    expected = _folder_bytes(tmp_path / "local")
    assert len(expected) == 2 * 12 and local["encoded"] == 240

    stats = embed_corpus_on_engine(ray_engine, store, spec, tmp_path / "ray", shard_size=20, batch_size=8, progress=False)
    assert stats == {**local, "seconds": stats["seconds"]}
    assert _folder_bytes(tmp_path / "ray") == expected
    assert len(ray_engine.worker_pids()) == 2  # both workers took shards

    # Again, killing a worker (SIGKILL, as the OOM killer would) once the first shard is on disk.
    replaced_before = ray_engine.replaced_workers
    killed: list[int] = []

    def kill_a_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((tmp_path / "killed").glob("shard-*.npy")):
            time.sleep(0.005)
        pids = ray_engine.worker_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    stats = embed_corpus_on_engine(ray_engine, store, spec, tmp_path / "killed", shard_size=20, batch_size=8, progress=False)
    killer.join()
    assert killed and ray_engine.replaced_workers == replaced_before + 1
    assert killed[0] not in ray_engine.worker_pids()
    assert stats["encoded"] == 240
    assert _folder_bytes(tmp_path / "killed") == expected
    assert not [p for p in (tmp_path / "killed").iterdir() if p.name.startswith(".")]  # no half-written temp files

    # Through build_dense_index(engine=...): the FAISS index and its row ids are the same bytes.
    from berds.indexes.faiss import build_dense_index

    metas = {name: build_dense_index(store, tmp_path / f"index-{name}", encoder=spec, batch_size=8, shard_size=20,
                                     progress=False, engine=engine)
             for name, engine in (("local", None), ("ray", ray_engine))}
    assert metas["ray"]["rows"] == metas["local"]["rows"] == 240
    for name in ("faiss.index", "docids.txt"):
        assert (tmp_path / "index-ray" / name).read_bytes() == (tmp_path / "index-local" / name).read_bytes()

    # Resume: with 5 shards removed, only those 5 are encoded again.
    for i in (0, 3, 4, 9, 11):
        (tmp_path / "killed" / f"shard-{i:05d}.npy").unlink()
    stats = embed_corpus_on_engine(ray_engine, store, spec, tmp_path / "killed", shard_size=20, batch_size=8, progress=False)
    assert stats["encoded"] == 100
    assert _folder_bytes(tmp_path / "killed") == expected


def _eval_outputs(folder: Path) -> dict[str, object]:
    """metrics.json without its timing (seconds spent judging) and judgements.jsonl as bytes."""
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["judging"].pop("seconds") >= 0
    return {"metrics": metrics, "judgements": (folder / "judgements.jsonl").read_bytes()}


def _cache_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT judge, prompt, perspective, passage, label, p_yes, raw, detail FROM judgements "
                          "ORDER BY perspective, passage").fetchall()


@ray_mark
def test_ray_judging_gives_identical_outputs_and_cache_even_when_a_worker_dies(tmp_path, ray_engine, tiny_models):
    from berds.evaluate.evaluation import evaluate_paths
    from berds.runs import write_ctxs_jsonl

    run_path = tmp_path / "run.jsonl"
    write_ctxs_jsonl(make_run(n_questions=4, depth=6), run_path)
    # The same options (so the same worker pool) for every run; the flag file exists only for the last.
    flag = tmp_path / "crash.flag"
    options = {"model": tiny_models["bert"], "weights": tiny_models["head"], "batch_size": 2,
               "crash_flag": str(flag), "owner_pid": os.getpid()}
    judge = "engine_fixtures:CrashOnceJudge"

    def evaluate(name: str, runner):
        return evaluate_paths([run_path], judge, (2, 5), judge_options=options,
                              cache_path=tmp_path / f"{name}.sqlite", out=tmp_path / name, progress=False,
                              judge_runner=runner)

    [(_, local, _)] = evaluate("local", None)
    pairs = local.stats.judged
    assert pairs == local.stats.pairs > 16  # several batches of 8 pairs
    labels = {row[4] for row in _cache_rows(tmp_path / "local.sqlite")}
    assert labels == {0, 1}  # the test head says Yes to some pairs and No to others
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["judgements.jsonl", "metrics.json"]
    expected = _eval_outputs(tmp_path / "local")

    [(_, on_ray, _)] = evaluate("ray", judge_runner_for(ray_engine))
    assert on_ray.stats.judged == pairs and on_ray.averages == local.averages
    assert _eval_outputs(tmp_path / "ray") == expected
    assert _cache_rows(tmp_path / "ray.sqlite") == _cache_rows(tmp_path / "local.sqlite")
    assert len(_cache_rows(tmp_path / "local.sqlite")) == pairs

    # A worker dies (os._exit) in the middle of its first batch; its batches are re-run elsewhere.
    flag.write_text("die once")
    replaced_before = ray_engine.replaced_workers
    evaluate("crash", judge_runner_for(ray_engine))
    assert not flag.exists() and Path(str(flag) + ".taken").exists()  # a worker did take the flag and die
    assert ray_engine.replaced_workers == replaced_before + 1
    assert _eval_outputs(tmp_path / "crash") == expected
    assert _cache_rows(tmp_path / "crash.sqlite") == _cache_rows(tmp_path / "local.sqlite")


@ray_mark
def test_ray_corpus_building_keeps_input_order(ray_engine):
    from berds.corpora.split import Document, split_document

    docs = [Document(f"d{i}", " ".join(f"w{i}x{j}" for j in range(7 + 13 * (i % 5))), title=f"T{i}") for i in range(40)]
    batches = [docs[i:i + 3] for i in range(0, len(docs), 3)]
    recipe = Recipe.function("berds.corpora.split:split_documents_batch", words_per_passage=10)
    results = list(ray_engine.map_batches(recipe, batches, ordered=True))
    assert [r.index for r in results] == list(range(len(batches)))
    passages = [p for r in results for p in r.output]
    assert passages == [p for d in docs for p in split_document(d, words_per_passage=10)]
    assert {r.pid for r in results} <= set(ray_engine.worker_pids())


@ray_mark
def test_ray_passes_user_errors_through_and_stops_on_a_poison_batch(ray_engine):
    recipe = Recipe.function("engine_fixtures:raise_input_error")
    with pytest.raises(InputError, match=r"numbers.jsonl, line 7: expected a number — fix line 7"):
        list(ray_engine.map_batches(recipe, [[1], [2]]))

    from berds.engine.ray_engine import RayEngine

    strict = RayEngine(num_workers=1, max_batch_attempts=2, runtime_env=ray_engine.runtime_env)
    with pytest.raises(BerdsError, match="batch 0 lost its worker 2 times"):
        list(strict.map_batches(Recipe.function("engine_fixtures:exit_every_time"), [[1]]))
    strict.close()
    doubled = sorted(ray_engine.map_batches(Recipe.function("engine_fixtures:double_all"), [[1, 2], [3]]),
                     key=lambda r: r.index)
    assert [r.output for r in doubled] == [[2, 4], [6]]  # the shared instance still works after both failures


@ray_mark
def test_ray_replaces_a_hung_worker_and_fails_a_batch_that_always_hangs(ray_engine, tmp_path):
    """batch_timeout: a worker that holds batches without finishing one is killed and replaced, its batches run
    elsewhere (every result once); a batch that hangs on every worker stops the job with an error naming it."""
    from berds.engine.ray_engine import RayEngine

    flag = tmp_path / "hang-flag"
    flag.write_text("")
    replaced = ray_engine.replaced_workers
    ray_engine.batch_timeout = 8
    try:
        started = time.monotonic()
        results = list(ray_engine.map_batches(Recipe.function("engine_fixtures:hang_once", flag=str(flag)),
                                              [[i] for i in range(6)]))
        assert sorted(r.output[0] for r in results) == [2 * i for i in range(6)]
        assert not flag.exists() and ray_engine.replaced_workers == replaced + 1 and time.monotonic() - started < 120
        ray_engine.max_batch_attempts = 1
        with pytest.raises(BerdsError, match=r"batch 0 lost its worker 1 times .*no result for 8 s .*batch_timeout"):
            list(ray_engine.map_batches(Recipe.function("engine_fixtures:hang_every_time"), [[1]]))
    finally:
        ray_engine.batch_timeout, ray_engine.max_batch_attempts = None, 3
    with pytest.raises(BerdsError, match="batch_timeout must be a positive number"):
        RayEngine(batch_timeout=0)


@ray_mark
def test_ray_workers_waiting_for_resources_are_reported_and_hold_no_batches(ray_engine, capsys):
    """Other jobs hold the cluster's CPUs: the wait is said in one line and lasts until resources free up; then the
    job runs on the workers placed, without leaving batches with a worker that is still waiting."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from berds.engine.ray_engine import RayEngine

    ray_engine.connect()
    held = [placement_group([{"CPU": 1}]) for _ in range(2)]  # "other jobs": one CPU each
    ray.get([pg.ready() for pg in held], timeout=60)
    engine = RayEngine(num_workers=2, runtime_env=ray_engine.runtime_env)
    engine.placement_notice = 0.5
    results, errors = [], []

    def job():
        try:
            results.extend(engine.map_batches(Recipe.function("engine_fixtures:double_all"), [[i] for i in range(6)]))
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    worker = threading.Thread(target=job, daemon=True)
    try:
        worker.start()
        said, deadline = "", time.monotonic() + 30
        while "waiting for resources" not in said and time.monotonic() < deadline:
            time.sleep(0.2)
            said += capsys.readouterr().err
        said = " ".join(said.split())
        assert ("note: 2 of 2 Ray workers for 'double_all' are waiting for resources: each needs 1 CPU, and the cluster "
                "has 0 of 2 CPUs free (other jobs hold them)") in said and "nothing runs until one is placed" in said
        assert worker.is_alive() and not results  # it waits (no time limit)
        remove_placement_group(held.pop(0))  # one CPU free: one worker is placed, the other still waits
        worker.join(45)
        assert not worker.is_alive() and not errors, errors  # the waiting worker kept none of the batches
        assert sorted(r.output[0] for r in results) == [2 * i for i in range(6)]
        assert len({r.pid for r in results}) == 1
    finally:
        for pg in held:
            remove_placement_group(pg)
        engine.close()


@ray_mark
def test_ray_refuses_gpu_workers_on_a_cluster_without_gpus(ray_engine):
    with pytest.raises(BerdsError, match="ask for 1 GPU each but the Ray cluster has 0 GPUs"):
        ray_engine.workers_for(JudgeRecipe("mistral-berds").recipe())


@ray_mark
def test_ray_refuses_workers_larger_than_the_cluster(ray_engine):
    # an actor asking for 3 CPUs on a 2-CPU instance waited for ever
    ray_engine.cpus_per_worker = 3.0
    try:
        with pytest.raises(BerdsError, match="ask for 3 CPU each but the Ray cluster has 2 CPUs"):
            ray_engine.workers_for(None)
    finally:
        ray_engine.cpus_per_worker = 1.0


@ray_mark
def test_engine_info_cli_sizes_the_pool_by_workers(ray_engine, capsys):
    from berds.cli import main

    ray_engine.connect()  # the CLI's engine joins this instance (and leaves it running)
    main(["engine", "info", "--engine", "ray", "--workers", "1"])
    assert "— 1 worker of 1 CPU" in capsys.readouterr().out.replace("\n", "")
    with pytest.raises(SystemExit) as exit_info:
        main(["engine", "info", "--engine", "ray", "--workers", "3"])
    assert exit_info.value.code == 2
    assert "num_workers=3: the Ray cluster (2 CPUs, 0 GPUs) has room for 2 workers" in capsys.readouterr().err.replace("\n", "")


@ray_mark
def test_engine_describes_the_ray_cluster(ray_engine):
    info = ray_engine.describe()
    assert info["engine"] == "ray" and info["cpus"] == 2.0 and info["workers"] == 2
    assert len(info["nodes"]) == 1 and info["nodes"][0]["alive"]
    from berds.engine import info_table

    assert info_table(info).row_count == 2  # the node and the total
    assert "— 2 workers of 1 CPU" in info_table(info).title
    assert "— 1 worker of 2 CPU" in info_table({**info, "workers": 1, "cpus_per_worker": 2.0}).title  # not "1 workers"


JVM_THEN_RAY = """
import faulthandler, random, sys, tempfile, time
from pathlib import Path
faulthandler.enable()  # as pytest does, before the JVM starts
from berds.corpora.docstore import write_passage_store
from berds.engine.ray_engine import RayEngine
from berds.indexes.bm25 import LuceneSearcher, build_bm25_index
from berds.java import autoclass
from berds.types import Passage
tmp = Path(tempfile.mkdtemp())
rng = random.Random(0)
words = [f"w{i}" for i in range(500)]
write_passage_store((Passage(f"p{i}", " ".join(rng.choices(words, k=40))) for i in range(3000)), tmp / "store")
build_bm25_index(tmp / "store", tmp / "index", progress=False)
searcher = LuceneSearcher(tmp / "index" / "lucene")
queries = [" ".join(rng.choices(words, k=4)) for _ in range(200)]
searcher.search(queries, 10)
engine = RayEngine(num_cpus=1).connect()  # ray.init installs crash handlers over the JVM's
gc, rounds = autoclass("java.lang.System").gc, 0


def lucene_for(seconds):  # Lucene and JVM collections: the JVM raises SIGSEGV on purpose here and there
    global rounds
    end = time.time() + seconds
    while time.time() < end:
        searcher.search(queries, 50, threads=2)
        gc()
        rounds += 1


lucene_for(6)
engine.close()  # and so does ray.shutdown
lucene_for(6)
print("survived", rounds)
"""


@ray_mark
@pytest.mark.java
def test_lucene_keeps_working_after_ray_starts_in_the_same_process(tmp_path):
    # Before berds.java.keep_jvm_signal_handlers this process died within seconds ("Segmentation fault"),
    # after ray.init and again after ray.shutdown.
    pytest.importorskip("ray")
    import subprocess
    import sys

    from conftest import subprocess_env

    proc = subprocess.run([sys.executable, "-c", JVM_THEN_RAY], capture_output=True, text=True, cwd=tmp_path,
                          env=subprocess_env(), timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("survived")
