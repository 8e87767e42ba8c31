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

``get_engine("ray", address=...)`` builds one; ``engine.judge_runner()`` plugs into
``berds.evaluate.evaluation.evaluate_run(judge_runner=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol, runtime_checkable

from berds.engine.recipes import JudgeRecipe, Recipe
from berds.errors import BerdsError

ENGINE_NAMES = ("local", "ray")

# The signature of ``berds.evaluate.evaluation.judge_missing``:
# runner(judge, pairs, cache, *, batch_size, progress, description) -> {(perspective, passage): Verdict}
JudgeRunner = Callable[..., dict]


@dataclass(frozen=True)
class BatchResult:
    """One finished batch: its position in the input, the worker's output, and where and how it ran.

    ``worker`` is ``"local"`` or ``"pid@node"``; ``info`` holds the worker's measurements
    (``seconds`` spent on the batch, ``peak_rss_bytes`` of the worker process, ``attempt`` — 1 unless the
    batch was re-run after its worker died).
    """

    index: int
    output: Any
    worker: str = "local"
    pid: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """Runs batches through a model built from a ``Recipe``. Implementations: ``LocalEngine``, ``RayEngine``."""

    name: str

    @property
    def workers(self) -> int:
        """How many batches can run at once (sizes prefetching)."""
        ...

    def map_batches(
        self,
        recipe: Recipe,
        batches: Iterable[Any],
        *,
        ordered: bool = False,
        progress: bool = False,
        description: str = "",
        total: int | None = None,
    ) -> Iterator[BatchResult]:
        """Push every batch through ``recipe``'s callable; yield each result as soon as it is done
        (in input order when ``ordered``). Every batch is yielded exactly once."""
        ...

    def judge_runner(self, recipe: JudgeRecipe | None = None) -> JudgeRunner:
        """A drop-in for ``judge_missing``: judges batches on this engine, committing each to the cache."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the engine runs on (for ``berds engine info`` and manifests)."""
        ...

    def close(self) -> None:
        """Release workers (and a Ray instance this engine started)."""
        ...


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


def engine_judge_runner(engine: Engine, recipe: JudgeRecipe | None = None, *, batch_size: int | None = None) -> JudgeRunner:
    """``judge_missing`` on ``engine``: batches go to workers (one judge per worker, rebuilt from the
    judge's recipe); each answered batch is committed to the cache on the driver as it arrives.

    Batches are the same slices of ``pairs`` that ``judge_missing`` would make (``batch_size`` from the
    caller unless overridden here), so a deterministic judge gives byte-identical verdicts on any engine.
    """

    def run(judge: Any, pairs: Any, cache: Any, *, batch_size: int = 256, progress: bool = True,
            description: str = "judging") -> dict:
        from berds.engine.judging import judge_on_engine

        return judge_on_engine(engine, judge, pairs, cache, recipe=recipe,
                               batch_size=batch_size_override or batch_size, progress=progress,
                               description=description)

    batch_size_override = batch_size
    return run


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
    table = Table(title=f"engine: ray {info['ray_version']} at {info['address']} — {info['workers']} workers "
                        f"of {info['cpus_per_worker']:g} CPU / {info['gpus_per_worker']:g} GPU")
    for col in ("node", "alive", "CPUs", "GPUs", "memory GiB", "object store GiB"):
        table.add_column(col, justify="left" if col == "node" else "right")
    for node in info["nodes"]:
        table.add_row(node["node"], "yes" if node["alive"] else "no", f"{node['cpus']:g}", f"{node['gpus']:g}",
                      gib(node["memory_bytes"]), gib(node["object_store_bytes"]))
    table.add_row("total", "", f"{info['cpus']:g}", f"{info['gpus']:g}", "", "", style="bold")
    return table


__all__ = ["BatchResult", "ENGINE_NAMES", "Engine", "JudgeRecipe", "JudgeRunner", "Recipe", "engine_info",
           "engine_judge_runner", "get_engine", "info_table"]
