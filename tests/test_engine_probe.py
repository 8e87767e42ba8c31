"""Engine edge cases found by probing the scale path: pool sizes a cluster cannot place, errors of abandoned
batches, and plug-ins defined in the running script (which Ray workers cannot import).

The Ray tests (marker ``ray``) share one 2-CPU local Ray instance; their worker functions live in this module
(tests/ is on the workers' PYTHONPATH).
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import pytest

from berds.engine import Recipe
from berds.errors import BerdsError

TESTS_DIR = Path(__file__).parent
ray_mark = pytest.mark.ray


def ok_or_fail_late(batch: list[int]) -> list[int]:
    """Batch [0] answers at once; every other batch raises after a moment."""
    if batch == [0]:
        return batch
    time.sleep(0.3)
    raise ValueError(f"batch {batch} is broken")


@pytest.fixture(scope="module")
def ray_engine():
    pytest.importorskip("ray")
    from berds.engine.ray_engine import RayEngine

    pythonpath = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p)
    engine = RayEngine(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}})
    engine.connect()
    yield engine
    engine.close()


@ray_mark
def test_ray_refuses_more_workers_than_the_cluster_can_place(ray_engine):
    from berds.engine.ray_engine import RayEngine

    # 3 actors of 1 CPU on 2 CPUs: the third is never placed, and the batches handed to it waited for ever
    with pytest.raises(BerdsError, match=r"num_workers=3: .*room for 2 workers of 1 CPU each — ask for at most 2"):
        RayEngine(num_workers=3).workers
    assert RayEngine(num_workers=2).workers == 2
    assert RayEngine(num_workers=5, cpus_per_worker=0).workers == 5  # reserving nothing, any number fits


@ray_mark
def test_ray_failed_job_leaves_no_unhandled_error_tracebacks(ray_engine, monkeypatch):
    import ray._private.worker as ray_worker

    printed: list[str] = []
    monkeypatch.setattr(ray_worker, "_unhandled_error_handler", lambda e: printed.append(str(e)))
    # Killing the pool takes a moment (an RPC to a remote cluster): the batches queued behind the failed one fail
    # meanwhile, and Ray printed each error nobody read as an "Unhandled error" traceback after berds' one line.
    kill_pool = ray_engine._kill_pool

    def slow_kill_pool() -> None:
        time.sleep(1.0)
        kill_pool()

    monkeypatch.setattr(ray_engine, "_kill_pool", slow_kill_pool)
    with pytest.raises(BerdsError, match=r"batch \d failed.*ValueError: batch \[\d\] is broken"):
        list(ray_engine.map_batches(Recipe.function("test_engine_probe:ok_or_fail_late"), [[1], [2], [3], [4]]))
    gc.collect()
    time.sleep(1)  # Ray reports unread errors from another thread once their refs are freed
    assert printed == []
    monkeypatch.undo()
    # the pool was replaced: the engine still works
    assert [r.output for r in ray_engine.map_batches(Recipe.function("test_engine_probe:ok_or_fail_late"), [[0]])] == [[0]]


@ray_mark
def test_ray_refuses_plugins_defined_in_the_running_script(ray_engine):
    from berds.evaluate.judging import judge_on_engine
    from berds.judges.recipe import JudgeRecipe
    from berds.types import JudgePair
    from judges_for_tests import OverlapJudge

    # A worker's __main__ is Ray's worker script: it answered "module '__main__' has no attribute ..."
    with pytest.raises(BerdsError, match=r"'__main__:MyJudge' is defined in the script being run.*'MODULE:MyJudge'"):
        judge_on_engine(ray_engine, OverlapJudge(), [JudgePair("p", "q")], None, recipe=JudgeRecipe("__main__:MyJudge"),
                        progress=False)
    with pytest.raises(BerdsError, match=r"__main__:double is defined in the script being run"):
        list(ray_engine.map_batches(Recipe.function("__main__:double"), [[1]]))


@ray_mark
@pytest.mark.parametrize("timeout", [float("inf"), 1e30])
def test_ray_batch_timeout_of_for_ever_waits_for_ever(ray_engine, timeout, monkeypatch):
    # ray.wait's timeout overflowed: OverflowError from inside Ray, once the pool was running
    monkeypatch.setattr(ray_engine, "batch_timeout", timeout)
    results = ray_engine.map_batches(Recipe.function("test_engine_probe:ok_or_fail_late"), [[0]] * 6)
    assert [r.output for r in results] == [[0]] * 6  # waits after the first results, with the workers running


def test_engine_info_refuses_ray_options_for_the_local_engine():
    # --num-cpus 4 with --engine local was ignored without a word
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, ["engine", "info", "--engine", "local", "--num-cpus", "4",
                                      "--gpus-per-worker", "1"])
    assert result.exit_code != 0  # (main() prints it as one error line, exit 2: CliRunner sees the exception)
    assert "--num-cpus, --gpus-per-worker are for --engine ray" in str(result.exception)
    assert CliRunner().invoke(app, ["engine", "info", "--engine", "local"]).exit_code == 0
