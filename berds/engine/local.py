"""The local engine: every batch runs in this process, in order, through one object built per recipe."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Iterator

from berds.engine.base import BatchResult
from berds.engine.recipes import Recipe


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (``getrusage``; kB on Linux, bytes on macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class LocalEngine:
    """Runs batches here, one after another. The object a recipe builds is kept for later calls with an
    equal recipe (an ``encode`` after an ``encode`` does not reload the model)."""

    name = "local"

    def __init__(self) -> None:
        self._built: dict[str, Callable[[Any], Any]] = {}

    @property
    def workers(self) -> int:
        return 1

    def _callable(self, recipe: Recipe) -> Callable[[Any], Any]:
        key = recipe.key()
        if key not in self._built:
            self._built.clear()  # hold one model at a time, as a worker does
            self._built[key] = recipe.build()
        return self._built[key]

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
        """Run each batch through ``recipe``'s callable here; results come in input order (always)."""
        from berds.engine.progress import batch_progress

        fn = self._callable(recipe)
        pid = os.getpid()
        with batch_progress(progress, description or recipe.label, total if total is not None else _len(batches)) as advance:
            for index, batch in enumerate(batches):
                started = time.perf_counter()
                output = fn(batch)
                info = {"seconds": time.perf_counter() - started, "peak_rss_bytes": peak_rss_bytes(), "attempt": 1}
                advance()
                yield BatchResult(index, output, "local", pid, info)

    def describe(self) -> dict[str, Any]:
        return {"engine": "local", "pid": os.getpid(), "cpus": os.cpu_count() or 1, "workers": 1}

    def close(self) -> None:
        self._built.clear()

    def __enter__(self) -> "LocalEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _len(obj: Any) -> int | None:
    try:
        return len(obj)
    except TypeError:
        return None
