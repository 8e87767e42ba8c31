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
