"""Contestants taking turns in one process: what the benchmarks that time berds beside a raw library share."""

from __future__ import annotations

import gc
import time
from typing import Any, Callable


def take_turns(calls: dict[str, Callable[[], Any]], turn: int) -> dict[str, tuple[Any, float]]:
    """Run each of ``calls`` once and time it; ``{name: (result, seconds)}``.

    Turn ``turn`` starts with a different contestant (each takes every place in turn: a JVM or Python GC pause
    tends to land on whoever runs after a heavy one), and garbage is collected, untimed, before each, so nobody
    pays for garbage another contestant left. Call it on small chunks of the work, so a load spike from other
    jobs on a shared machine hits every contestant alike.
    """
    names = list(calls)
    shift = turn % len(names)
    out: dict[str, tuple[Any, float]] = {}
    for name in names[shift:] + names[:shift]:
        gc.collect()
        start = time.perf_counter()
        result = calls[name]()
        out[name] = (result, time.perf_counter() - start)
    return out


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min–max)`` of one contestant's rounds: the issue-36 way every benchmark prints a figure."""
    import statistics

    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def in_fresh_process(target: Callable[..., None], *args: Any) -> Any:
    """``target(*args, queue)`` in a new interpreter (spawned: nothing inherited from this one's memory or
    imports) and what it put on ``queue``: one contestant's own time and peak memory."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result
