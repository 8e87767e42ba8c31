"""The engine protocol: push batches through an object built from a ``Recipe``, yield each ``BatchResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Protocol, runtime_checkable

from berds.engine.recipes import Recipe


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

    def describe(self) -> dict[str, Any]:
        """What the engine runs on (for ``berds engine info`` and manifests)."""
        ...

    def close(self) -> None:
        """Release workers (and a Ray instance this engine started)."""
        ...
