"""A small batch-counting progress bar shared by the engines (callers with richer bars pass progress=False)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def batch_progress(enabled: bool, description: str, total: int | None) -> Iterator[Callable[[], None]]:
    """Yield ``advance()``; draws a rich bar of finished batches when ``enabled``."""
    if not enabled:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("batches"),
                  TimeElapsedColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)
