"""Execution engines: where the heavy batches of a job run — this process, or the workers of a Ray cluster.

Three hot paths go through an engine: **encoding** a corpus for a dense index, **judging** (perspective,
passage) pairs, and **corpus building** (cutting documents into passages). Each of them is a stream of
independent batches pushed through a model (or a plain function). An engine's one job is::

    for result in engine.map_batches(recipe, batches):
        commit(result.index, result.output)        # on the driver: write a shard, fill the cache

* ``recipe`` (``berds.engine.recipes.Recipe``) says how a worker builds its model — an importable
  factory plus options — so each worker builds **one** instance and no model is ever pickled;
* results come back to the caller, which commits them **on the driver** one batch at a time: a worker
  that dies loses at most the batches it was holding, those are re-run on a fresh worker, and files and
  caches are only ever written by the driver, whole batch by whole batch.

Engines:

* ``local`` (default) — builds the worker object once in this process and runs batches in order;
* ``ray``   — a pool of Ray actors (one model per actor; CPUs/GPUs per actor configurable), on a local
  Ray instance or a cluster (``address="ray://head:10001"`` or ``"auto"``), with retries on worker death.

``get_engine("ray", address=...)`` builds one. The engine is generic: it knows no judge, index or
evaluation. Its users bring their recipes — ``berds.judges.recipe`` (judges; ``berds.evaluate.judging``
commits verdicts to the cache), ``berds.indexes.embedding`` (dense encoding, with the resume rules),
``berds.corpora.split.split_documents_batch`` (corpus building).
"""

from __future__ import annotations

from typing import Any

from berds.engine.base import BatchResult, Engine
from berds.engine.recipes import Recipe
from berds.errors import BerdsError

ENGINE_NAMES = ("local", "ray")


def get_engine(name: str | Engine | None = "local", *, address: str | None = None, **options: Any) -> Engine:
    """An engine by name: ``"local"`` or ``"ray"`` (``address``: ``None`` starts a local Ray instance,
    ``"auto"`` joins the one on this machine, ``"ray://host:10001"`` a remote cluster).

    An ``Engine`` instance passes through unchanged, so APIs can take ``engine: str | Engine``.
    ``options`` go to the engine's constructor (e.g. ``num_workers=``, ``gpus_per_worker=``).
    """
    if name is None:
        name = "local"
    if not isinstance(name, str):
        if isinstance(name, Engine):
            return name
        raise BerdsError(f"engine must be a name ({', '.join(ENGINE_NAMES)}) or an Engine, got {type(name).__name__}")
    if name == "local":
        if address:
            raise BerdsError(f"--address {address} is for a Ray cluster — add --engine ray, or drop --address")
        from berds.engine.local import LocalEngine

        return LocalEngine(**options)
    if name == "ray":
        from berds.engine.ray_engine import RayEngine

        return RayEngine(address=address, **options)
    from berds.errors import UnknownNameError

    raise UnknownNameError("engine", name, list(ENGINE_NAMES))


def engine_info(name: str = "local", *, address: str | None = None, **options: Any) -> dict[str, Any]:
    """What ``name`` would run on (``berds engine info``): starts/joins the engine, describes it, closes it."""
    engine = get_engine(name, address=address, **options)
    try:
        return engine.describe()
    finally:
        engine.close()


def info_table(info: dict[str, Any]) -> Any:
    """A rich table of ``Engine.describe()``: one row per node (Ray) or for this process (local)."""
    from rich.table import Table

    def gib(n: float) -> str:
        return f"{n / 2**30:,.1f}"

    if info.get("engine") != "ray":
        table = Table(title="engine: local (this process)")
        for col in ("pid", "cpus", "workers"):
            table.add_column(col, justify="right")
        table.add_row(str(info.get("pid")), str(info.get("cpus")), str(info.get("workers")))
        return table
    workers = f"{info['workers']} worker" + ("" if info['workers'] == 1 else "s")
    table = Table(title=f"engine: ray {info['ray_version']} at {info['address']} — {workers} "
                        f"of {info['cpus_per_worker']:g} CPU / {info['gpus_per_worker']:g} GPU")
    for col in ("node", "alive", "CPUs", "GPUs", "memory GiB", "object store GiB"):
        table.add_column(col, justify="left" if col == "node" else "right")
    for node in info["nodes"]:
        table.add_row(node["node"], "yes" if node["alive"] else "no", f"{node['cpus']:g}", f"{node['gpus']:g}",
                      gib(node["memory_bytes"]), gib(node["object_store_bytes"]))
    table.add_row("total", "", f"{info['cpus']:g}", f"{info['gpus']:g}", "", "", style="bold")
    return table


__all__ = ["BatchResult", "ENGINE_NAMES", "Engine", "Recipe", "engine_info", "get_engine", "info_table"]
