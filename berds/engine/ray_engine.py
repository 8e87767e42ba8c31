"""The Ray engine: a pool of Ray actors, one model per actor, fed batches by the driver; dead workers replaced.

How a job runs (``RayEngine.map_batches``):

1. The pool: ``num_workers`` actors (default: as many as the cluster's CPUs / ``cpus_per_worker``, or
   its GPUs / ``gpus_per_worker``), each reserving its CPUs/GPUs, so Ray places one model per GPU and
   sets ``CUDA_VISIBLE_DEVICES`` and ``OMP_NUM_THREADS`` for it. Each actor builds the recipe's object on
   its first batch and keeps it; the pool is kept for the next call with the same recipe (``berds eval
   runs/*`` loads the judge once per worker, not once per run).
2. Feeding: each actor holds at most ``in_flight_per_worker`` batches (one running, one queued so the
   transfer overlaps the compute); input batches are read lazily, so a 900M-passage corpus never sits
   in memory — only the batches in flight do, in the object store.
3. Results return to the driver as they finish; the caller commits each one (shard file, cache rows).
4. Faults: when an actor dies (process killed, node lost, out of memory), every batch it held is put
   back in the queue and a fresh actor takes its place; a batch that has killed ``max_batch_attempts``
   workers stops the job with an error naming it (a "poison" batch would otherwise kill the pool
   forever). An exception raised by the model code is not retried (it would fail again): it stops the
   job, and a ``BerdsError`` from the worker reaches the user unchanged.
5. Placement: a worker gets batches only once its process runs, so workers that wait for resources other
   jobs hold never keep batches from the placed ones: the job goes on with the workers that are running
   (and waits, with nothing running, while none is). When workers are still not running
   ``PLACEMENT_NOTICE_SECONDS`` after they were asked for and the cluster lacks the free CPUs/GPUs one of them
   needs, one line on stderr says how many wait and for what; another says when all run. There is no
   time limit on that wait (a shared cluster frees resources when other jobs end).
6. Hung workers: with ``batch_timeout`` set, a worker that holds batches but has finished none for that
   many seconds (a wedged GPU, a deadlock) is killed and replaced like a dead one; its batches go back in
   the queue, and the one it was running counts an attempt.

Determinism: each batch is processed whole by one worker, so a model that gives the same output for
the same batch gives byte-identical results on any number of workers; ``ordered=True`` also restores
input order for writers that need it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from berds.engine.base import BatchResult
from berds.engine.recipes import Recipe
from berds.errors import BerdsError
from berds.lazy import require

_BIND = "berds.engine.recipes:bind_function"  # Recipe.function's factory (its target is an option)
PLACEMENT_NOTICE_SECONDS = 10.0  # workers not running after this long, for want of free resources, are reported


class BatchWorker:
    """The actor: builds the recipe's callable once (on the first batch) and runs batches through it.

    Building lazily, inside a batch call, means a build failure (missing model file, bad option) comes
    back as that call's exception with its message, not as an opaque "actor died".
    """

    def __init__(self, recipe: Recipe):
        self._recipe = recipe
        self._fn: Any = None
        self.build_seconds = 0.0

    def ping(self) -> int:
        """Answers once the actor's process runs (``batch_timeout`` counts from then, not from a wait for resources)."""
        return os.getpid()

    def run(self, index: int, batch: Any, attempt: int) -> tuple[Any, dict[str, Any]]:
        from berds.engine.local import peak_rss_bytes

        if self._fn is None:
            started = time.perf_counter()
            self._fn = self._recipe.build()
            self.build_seconds = time.perf_counter() - started
        started = time.perf_counter()
        output = self._fn(batch)
        return output, {
            "pid": os.getpid(),
            "node": _node_ip(),
            "seconds": time.perf_counter() - started,
            "build_seconds": self.build_seconds,
            "peak_rss_bytes": peak_rss_bytes(),
            "attempt": attempt,
        }


def _check_reachable(address: str | None, timeout: float = 10.0) -> None:
    """A bare ``HOST:PORT`` (a GCS address) that nothing answers is refused here: ``ray.init`` retries it for many
    minutes in silence. ``ray://`` addresses time out by themselves; ``auto`` and ``None`` need no probe."""
    import re
    import socket

    found = re.fullmatch(r"([^:/\s]+|\[[0-9a-fA-F:]+\]):(\d+)", address or "")
    if not found:
        return
    host, port = found.group(1).strip("[]"), int(found.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise BerdsError(f"cannot reach the Ray cluster at {address!r}: {exc} — check the head's address and port "
                         "(`ray status` on the head), or pass --address ray://HEAD:10001") from None


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


@dataclass
class _Slot:
    """One place in the pool; ``actor`` is replaced when it dies, ``generation`` counts replacements."""

    actor: Any = None
    generation: int = 0
    pid: int | None = None
    node: str = ""
    since: float = 0.0  # when the batch it is running now started (its last result, or work after idling)
    ready: Any = None  # resolves once the actor process runs (until then it may wait for resources: not hung)
    started: bool = False  # its ``ready`` resolved (or it returned a batch): it may be given batches
    created: float = 0.0  # when its actor was asked for
    reported: bool = False  # its wait for resources was reported (or found not to be one)


@dataclass
class _Task:
    index: int
    batch_ref: Any
    attempt: int = 1
    slot: int = -1
    generation: int = -1
    last_error: str = ""
    submitted: int = 0  # submission order (the oldest of a worker's batches is the one it is running)


class RayEngine:
    """Batches on Ray actors. See the module docstring for scheduling, faults and determinism.

    * ``address`` — ``None`` starts a local Ray instance (``num_cpus``/``num_gpus`` cap it), ``"auto"``
      joins the instance running on this machine, ``"ray://head:10001"`` a remote cluster (Ray Client).
      An already initialised Ray (``ray.init`` by the caller) is used as it is. Ray starts on first use
      (or ``connect()``), so an evaluation that finds every judgement cached never starts it.
    * ``num_workers`` — actors in the pool (default: fill the cluster, see the module docstring); more than the
      cluster has room for is refused (the actors Ray cannot place would wait for ever). Actors waiting for
      resources other jobs hold get no batches meanwhile; ``placement_notice`` (attribute, seconds) is when
      such a wait is reported (module docstring, point 5).
    * ``cpus_per_worker`` / ``gpus_per_worker`` — resources each actor reserves (CPU encoding:
      ``cpus_per_worker`` = threads per model). ``gpus_per_worker=None`` (default) takes the recipe's
      hint: 1 for a GPU judge (``mistral-berds``, ``vllm:...``) or an encoder on ``device="cuda"``, else 0.
    * ``in_flight_per_worker`` — batches queued per actor; ``max_batch_attempts`` — how many workers a
      batch may lose before the job fails.
    * ``batch_timeout`` — seconds a worker may hold batches without finishing one before it is taken for
      hung, killed and replaced (``None``, the default: wait for ever). The first batch on a new worker
      includes loading its model: leave room for that.
    * ``runtime_env`` — Ray runtime environment for the actors (e.g. ``{"env_vars": {...}}``).
    * ``batch_size`` — items per batch that callers making batches should use on this engine (``None``:
      their own; e.g. a GPU judge under vLLM wants larger batches, at the price of batch-dependent
      floating point). The engine itself never splits or merges batches.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_workers: int | None = None,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float | None = None,
        in_flight_per_worker: int = 2,
        max_batch_attempts: int = 3,
        batch_timeout: float | None = None,
        runtime_env: dict[str, Any] | None = None,
        batch_size: int | None = None,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        log_to_driver: bool = False,
    ):
        ray = require("ray", extra="ray", purpose="the ray engine (--engine ray)")
        for label, value in (("num_workers", num_workers), ("batch_size", batch_size)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise BerdsError(f"{label} must be a positive integer, got {value!r}")
        if in_flight_per_worker < 1 or max_batch_attempts < 1:
            raise BerdsError("in_flight_per_worker and max_batch_attempts must be at least 1")
        if batch_timeout is not None and not batch_timeout > 0:
            raise BerdsError(f"batch_timeout must be a positive number of seconds (or None), got {batch_timeout!r}")
        for label, value in (("cpus_per_worker", cpus_per_worker), ("gpus_per_worker", gpus_per_worker)):
            # nan, inf: no actor could ever be placed (a hang), or a ValueError traceback sizing the pool
            if value is not None and not 0 <= float(value) < math.inf:
                raise BerdsError(f"{label} must be a finite number >= 0, got {value!r}")
        self._ray = ray
        self._owns_ray = False
        self._connected = False
        self._init_options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                                              "log_to_driver": log_to_driver}
        if address:
            self._init_options["address"] = address
        else:
            self._init_options.update(num_cpus=num_cpus, num_gpus=num_gpus)
        self.address = address
        self._num_workers = num_workers
        self.cpus_per_worker = float(cpus_per_worker)
        self.gpus_per_worker = None if gpus_per_worker is None else float(gpus_per_worker)
        self.in_flight_per_worker = in_flight_per_worker
        self.max_batch_attempts = max_batch_attempts
        self.batch_timeout = batch_timeout
        self.runtime_env = runtime_env
        self.batch_size = batch_size
        self._actor_class: Any = None
        self._pool_key: str | None = None
        self._slots: list[_Slot] = []
        self.replaced_workers = 0  # over the engine's life: how many dead workers were replaced
        self.placement_notice = PLACEMENT_NOTICE_SECONDS
        self._waiting_reported = False  # a "waiting for resources" line was printed and no "all running" yet

    # -- connection --------------------------------------------------------------------------------

    def connect(self) -> "RayEngine":
        """Start or join Ray (done on first use, so an engine that finds nothing to do costs nothing)."""
        if self._connected:
            return self
        ray = self._ray
        if not ray.is_initialized():
            _check_reachable(self.address)
            try:
                ray.init(**self._init_options)
            except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
                where = f"the Ray cluster at {self.address!r}" if self.address else "a local Ray instance"
                raise BerdsError(
                    f"cannot start or reach {where}: {type(exc).__name__}: {exc} — for a cluster, start its head with "
                    "`ray start --head` and pass --address ray://HEAD:10001 (or auto on a cluster node); a cluster with "
                    "token authentication (the default in recent Ray) also needs RAY_AUTH_MODE=token and its token in "
                    "~/.ray/auth_token here; locally, Ray needs a working loopback interface"
                ) from None
            self._owns_ray = True
            from berds.java import keep_jvm_signal_handlers

            keep_jvm_signal_handlers()  # ray.init took SIGSEGV from a JVM running Lucene here (berds.java)
        self._actor_class = ray.remote(BatchWorker)
        self._connected = True
        return self

    # -- pool --------------------------------------------------------------------------------------

    @property
    def workers(self) -> int:
        """The pool size a CPU job gets (``workers_for(recipe)`` for a given recipe)."""
        return self.workers_for(None)

    def gpus_for(self, recipe: Recipe | None) -> float:
        """GPUs each worker reserves: the engine's setting, else the recipe's hint."""
        if self.gpus_per_worker is not None:
            return self.gpus_per_worker
        return float(recipe.gpus) if recipe is not None else 0.0

    def workers_for(self, recipe: Recipe | None) -> int:
        """The pool size for ``recipe``: ``num_workers``, else as many as the cluster's GPUs (GPU
        workers) or CPUs allow."""
        resources = self.connect()._ray.cluster_resources()
        gpus_each = self.gpus_for(recipe)
        what = f"{recipe.label!r} workers ask" if recipe is not None else "workers ask"
        cpus, gpus = float(resources.get("CPU", 0.0)), float(resources.get("GPU", 0.0))  # a cluster lacking one lists none
        fits = []  # how many actors each resource they reserve leaves room for
        if gpus_each > 0:
            if gpus < gpus_each:
                raise BerdsError(f"{what} for {gpus_each:g} GPU each but the Ray cluster has {gpus:g} GPUs "
                                 "— add GPU nodes, or run on CPUs (gpus_per_worker=0, device cpu)")
            fits.append(int(gpus // gpus_each))
        if self.cpus_per_worker > 0:
            if self.cpus_per_worker > cpus:  # the actors would wait for ever for CPUs the cluster lacks
                raise BerdsError(f"{what} for {self.cpus_per_worker:g} CPU each but the Ray cluster has {cpus:g} CPUs "
                                 "— lower --cpus-per-worker, or add nodes")
            fits.append(int(cpus // self.cpus_per_worker))
        room = min(fits) if fits else None  # None: the actors reserve nothing, any number can be placed
        if not self._num_workers:
            return max(1, room if room is not None else int(cpus))
        if room is not None and self._num_workers > room:  # batches handed to an actor Ray cannot place wait for ever
            each = " and ".join(([f"{gpus_each:g} GPU"] if gpus_each > 0 else [])
                                + ([f"{self.cpus_per_worker:g} CPU"] if self.cpus_per_worker > 0 else []))
            raise BerdsError(f"num_workers={self._num_workers}: the Ray cluster ({cpus:g} CPUs, {gpus:g} GPUs) has room "
                             f"for {room} workers of {each} each — ask for at most {room}, or add nodes")
        return self._num_workers

    def worker_pids(self) -> list[int]:
        """Process ids of the pool's workers that have reported back at least once (for monitoring)."""
        return [slot.pid for slot in self._slots if slot.pid is not None]

    def _new_actor(self, recipe: Recipe) -> Any:
        options: dict[str, Any] = {"num_cpus": self.cpus_per_worker, "num_gpus": self.gpus_for(recipe),
                                   "max_restarts": 0, "max_task_retries": 0}
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        return self._actor_class.options(**options).remote(recipe)

    def _pool_for(self, recipe: Recipe) -> list[_Slot]:
        key = recipe.key()
        if key != self._pool_key:
            self._kill_pool()  # one model family at a time: a new recipe frees the old workers' memory
            self._slots = [_Slot() for _ in range(self.workers_for(recipe))]
            for slot in self._slots:
                self._start_actor(slot, recipe)
            self._pool_key = key
        return self._slots

    def _replace(self, slot: _Slot, recipe: Recipe) -> None:
        try:
            self._ray.kill(slot.actor, no_restart=True)
        except Exception:  # already gone: nothing to release
            pass
        self._start_actor(slot, recipe)
        slot.generation += 1
        self.replaced_workers += 1

    def _start_actor(self, slot: _Slot, recipe: Recipe) -> None:
        """A new actor in ``slot``; its ``ready`` ping resolves once the actor process runs."""
        slot.actor = self._new_actor(recipe)
        slot.pid, slot.node = None, ""
        slot.ready, slot.started = slot.actor.ping.remote(), False
        slot.created, slot.reported = time.monotonic(), False

    def _kill_pool(self) -> None:
        for slot in self._slots:
            try:
                self._ray.kill(slot.actor, no_restart=True)
            except Exception:  # a dead actor cannot be killed twice; nothing else to do
                pass
        self._slots, self._pool_key = [], None
        self._waiting_reported = False  # (a wait of the old pool: its "all running" would be said of the new one)

    def _death_errors(self) -> tuple[type, ...]:
        names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
                 "OutOfMemoryError", "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError")
        return tuple(getattr(self._ray.exceptions, n) for n in names if hasattr(self._ray.exceptions, n))

    # -- jobs --------------------------------------------------------------------------------------

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
        """Run every batch on the pool; yield results as they finish (input order when ``ordered``).

        Every batch is yielded exactly once, even when workers die mid-job (see the module docstring).
        """
        from berds.engine.local import _len
        from berds.engine.progress import batch_progress

        for target in (recipe.factory, recipe.options.get("target") if recipe.factory == _BIND else None):
            if isinstance(target, str) and target.partition(":")[0] == "__main__":  # a worker's __main__ is Ray's own
                raise BerdsError(f"recipe {recipe.label!r}: {target} is defined in the script being run, which Ray "
                                 "workers do not import — move it into a module on PYTHONPATH and name it there")
        ray = self.connect()._ray
        recipe.check_picklable()
        death = self._death_errors()
        slots = self._pool_for(recipe)
        source = enumerate(iter(batches))
        source_done = False
        retry: deque[_Task] = deque()
        in_flight: dict[Any, _Task] = {}
        waiting: dict[int, BatchResult] = {}  # ordered mode: finished results waiting for earlier ones
        next_to_yield = 0
        finished = False
        total = total if total is not None else _len(batches)
        submitted = itertools.count()

        def load(i: int) -> int:
            return sum(1 for t in in_flight.values() if t.slot == i and t.generation == slots[i].generation)

        def next_task() -> _Task | None:
            nonlocal source_done
            if retry:
                return retry.popleft()
            if source_done:
                return None
            try:
                index, batch = next(source)
            except StopIteration:
                source_done = True
                return None
            return _Task(index, ray.put(batch))

        try:
            with batch_progress(progress, description or recipe.label, total) as advance:
                while True:
                    # (checked every round, not only when a wait times out: results streaming in from the other
                    # workers may never let it time out)
                    self._report_waiting(slots, recipe)
                    if self.batch_timeout is not None:
                        self._replace_hung(slots, load, in_flight, retry, recipe)
                    # Fill every running worker up to its in-flight limit (one still waiting to be placed would
                    # hold its batches until then, while the others idle).
                    for i, slot in enumerate(slots):
                        while slot.started and load(i) < self.in_flight_per_worker:
                            task = next_task()
                            if task is None:
                                break
                            if load(i) == 0:
                                slot.since = time.monotonic()
                            task.slot, task.generation = i, slot.generation
                            task.submitted = next(submitted)
                            in_flight[slot.actor.run.remote(task.index, task.batch_ref, task.attempt)] = task
                    if not in_flight:
                        task = next_task()
                        if task is None:
                            break
                        retry.appendleft(task)  # work left, but no worker runs yet: wait for one to be placed
                    placing = {slot.ready: slot for slot in slots if not slot.started}
                    ready, _ = ray.wait([*in_flight, *placing], num_returns=1, timeout=self._wait_seconds(slots, load))
                    for ref in ready:
                        if ref in placing:  # its process runs (or its start failed: its batches will say how)
                            try:
                                ray.get(ref)  # read, or Ray prints a failed start as an "Unhandled error"
                            except Exception:  # (the start's error reaches the user through its first batch)
                                pass
                            placing[ref].started, placing[ref].since = True, time.monotonic()
                            self._report_all_running(slots)
                            continue
                        task = in_flight.pop(ref)
                        slot = slots[task.slot]
                        if task.generation == slot.generation:
                            slot.since, slot.started = time.monotonic(), True  # its next batch starts now
                        try:
                            output, info = ray.get(ref)
                        except death as exc:
                            self._on_worker_death(task, slot, exc, recipe)
                            retry.append(task)
                            continue
                        except ray.exceptions.RayTaskError as exc:
                            raise _user_error(exc, recipe, task, slot) from exc
                        if task.generation == slot.generation:
                            slot.pid, slot.node = info["pid"], info["node"]
                        result = BatchResult(task.index, output, f"{info['pid']}@{info['node']}", info["pid"], info)
                        advance()
                        if not ordered:
                            yield result
                            continue
                        waiting[task.index] = result
                        while next_to_yield in waiting:
                            yield waiting.pop(next_to_yield)
                            next_to_yield += 1
            finished = True
        finally:
            if not finished:  # abandoned or failed: stop the work in flight; the pool's state is unknown
                for ref in in_flight:
                    try:
                        ray.cancel(ref, force=False)
                    except Exception:  # a finished or lost task cannot be cancelled; nothing to do
                        pass
                self._kill_pool()
                _discard(ray, list(in_flight))

    def _wait_seconds(self, slots: list[_Slot], load: Any) -> float | None:
        """How long to wait for a result (or a worker starting) before checking for hung workers and reporting
        workers that wait for resources (None: nothing to check)."""
        now = time.monotonic()
        deadlines = [min((slot.created for slot in slots if not slot.started and not slot.reported), default=math.inf)
                     + self.placement_notice]
        if self.batch_timeout is not None:
            busy = [slot.since for i, slot in enumerate(slots) if load(i) and slot.started]
            deadlines.append(min(busy, default=now) + self.batch_timeout)
        if min(deadlines) == math.inf:
            return None
        # at most an hour at a time (the loop checks again): ray.wait takes whole milliseconds in a C long, which
        # --batch-timeout inf (or 1e30) overflowed
        return max(0.05, min(min(deadlines) - now, 3600.0))

    def _report_waiting(self, slots: list[_Slot], recipe: Recipe) -> None:
        """One line when workers are still not running ``placement_notice`` s after they were asked for and the
        cluster lacks the free resources one needs (other jobs hold them); a slow start with resources free is not
        a wait for resources and says nothing."""
        now = time.monotonic()
        if not any(not s.started and not s.reported and now - s.created >= self.placement_notice for s in slots):
            return
        pending = [s for s in slots if not s.started]
        for slot in pending:
            slot.reported = True
        free, total = self._ray.available_resources(), self._ray.cluster_resources()
        needs = [(self.gpus_for(recipe), "GPU"), (self.cpus_per_worker, "CPU")]
        short = [f"{float(free.get(key, 0.0)):g} of {float(total.get(key, 0.0)):g} {key}s free" for each, key in needs
                 if each > 0 and float(free.get(key, 0.0)) < each]
        if not short:
            return
        each = " and ".join(f"{n:g} {key}" for n, key in needs if n > 0)
        running = len(slots) - len(pending)
        goes_on = (f"the job goes on with the {running} running" if running else "nothing runs until one is placed")
        self._waiting_reported = True
        _say(f"{len(pending)} of {len(slots)} Ray workers for {recipe.label!r} are waiting for resources: each needs "
             f"{each}, and the cluster has {' and '.join(short)} (other jobs hold them) — they start as those are "
             f"released; {goes_on}")

    def _report_all_running(self, slots: list[_Slot]) -> None:
        if self._waiting_reported and all(slot.started for slot in slots):
            self._waiting_reported = False
            _say(f"all {len(slots)} Ray workers are running")

    def _replace_hung(self, slots: list[_Slot], load: Any, in_flight: dict[Any, _Task], retry: deque[_Task],
                      recipe: Recipe) -> None:
        """Kill and replace every worker past ``batch_timeout``; its batches go back in the queue (the one it
        was running, its oldest, counts an attempt)."""
        now = time.monotonic()
        for i, slot in enumerate(slots):
            if not load(i) or not slot.started or now - slot.since < self.batch_timeout:
                continue
            held = sorted((ref for ref, t in in_flight.items() if t.slot == i and t.generation == slot.generation),
                          key=lambda ref: in_flight[ref].submitted)
            tasks = [in_flight.pop(ref) for ref in held]
            running = tasks[0]
            running.last_error = (f"no result for {self.batch_timeout:g} s from worker "
                                  f"{slot.pid or '?'}@{slot.node or '?'} (batch_timeout): taken for hung")
            self._replace(slot, recipe)
            self._count_attempt(running, recipe, "raise batch_timeout if a batch (or loading the model) takes that "
                                                 "long, or use smaller batches")
            retry.extendleft(reversed(tasks))

    def _count_attempt(self, task: _Task, recipe: Recipe, advice: str) -> None:
        """``task`` lost its worker once more; past ``max_batch_attempts`` the job stops, naming the batch."""
        task.attempt += 1
        if task.attempt > self.max_batch_attempts:
            raise BerdsError(f"{recipe.label}: batch {task.index} lost its worker {self.max_batch_attempts} times "
                             f"(last: {task.last_error}) — {advice}")

    def _on_worker_death(self, task: _Task, slot: _Slot, exc: BaseException, recipe: Recipe) -> None:
        """A batch came back "worker died": count the attempt, replace the worker (once per death)."""
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        task.last_error = f"{type(exc).__name__}: {first_line}"
        if task.generation == slot.generation:  # the first of the dead worker's batches to report back
            self._replace(slot, recipe)
        self._count_attempt(task, recipe, "it may not fit in a worker's memory: use smaller batches or more memory "
                                          "per worker")

    def describe(self) -> dict[str, Any]:
        """The cluster: Ray version, nodes with their resources, and the pool a job would get."""
        ray = self.connect()._ray
        nodes = []
        for node in ray.nodes():
            res = node.get("Resources", {})
            nodes.append({
                "node": node.get("NodeManagerAddress", "?"), "alive": bool(node.get("Alive")),
                "cpus": res.get("CPU", 0.0), "gpus": res.get("GPU", 0.0),
                "memory_bytes": res.get("memory", 0.0), "object_store_bytes": res.get("object_store_memory", 0.0),
            })
        total = ray.cluster_resources()
        return {
            "engine": "ray", "ray_version": ray.__version__, "address": self.address or "local instance",
            "started_here": self._owns_ray, "nodes": nodes,
            "cpus": total.get("CPU", 0.0), "gpus": total.get("GPU", 0.0),
            "cpus_per_worker": self.cpus_per_worker, "gpus_per_worker": self.gpus_for(None),
            "workers": self.workers,
        }

    def close(self) -> None:
        """Kill the pool; shut Ray down if this engine started it."""
        self._kill_pool()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
            from berds.java import keep_jvm_signal_handlers

            keep_jvm_signal_handlers()  # ray.shutdown, too, leaves SIGSEGV to another handler than the JVM's
        self._owns_ray = self._connected = False

    def __enter__(self) -> "RayEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _say(message: str) -> None:
    """A note on stderr (above a progress bar, which rich keeps drawing below it)."""
    from rich.console import Console
    from rich.markup import escape

    # (escaped: a recipe label such as a model path holding "[/x]" raised a MarkupError, ending the job)
    Console(stderr=True).print(f"[yellow]note:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _user_error(exc: Any, recipe: Recipe, task: _Task, slot: _Slot) -> BerdsError:
    """The model code raised: pass a worker's ``BerdsError`` through as it is, wrap anything else."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BerdsError):
        return cause
    what = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc).strip().splitlines()[-1]
    where = f" on worker {slot.pid}@{slot.node}" if slot.pid else ""
    return BerdsError(f"{recipe.label}: batch {task.index} failed{where}: {what}")


def _discard(ray: Any, refs: list[Any], timeout: float = 5.0) -> None:
    """Read the outcome of abandoned tasks (their workers are being killed, so they end soon): Ray prints the
    error of a task nobody read as an "Unhandled error" traceback, after the job's own one-line error."""
    if not refs:
        return
    try:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    except Exception:  # Ray itself going down (Ctrl-C at exit): nothing left to print either
        return
    for ref in ready:
        try:
            ray.get(ref, timeout=0)
        except Exception:  # the error (or the kill) is what is being read away
            pass
