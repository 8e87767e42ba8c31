"""Judging on an engine: ``judge_missing`` with the batches run by workers and committed by the driver."""

from __future__ import annotations

import time
from typing import Any, Sequence

from berds.engine.recipes import JudgedBatch, JudgeRecipe
from berds.errors import BerdsError


def judge_on_engine(
    engine: Any,
    judge: Any,
    pairs: Sequence[Any],
    cache: Any,
    *,
    recipe: JudgeRecipe | None = None,
    batch_size: int = 256,
    progress: bool = True,
    description: str = "judging",
) -> dict[tuple[str, str], Any]:
    """Judge ``pairs`` on ``engine``'s workers; return ``{(perspective, passage): Verdict}``.

    Each worker builds the judge from ``recipe`` (default: the one ``judge`` carries). Batches are the
    slices ``pairs[lo:lo + batch_size]`` — exactly those of ``judge_missing`` — and each answered batch
    is written to ``cache`` (one transaction) by this process the moment it arrives: a worker that dies
    loses only the batches it held, which the engine re-runs elsewhere; nothing half-done reaches the
    cache. Before anything is written, the worker's judge id and prompt version are checked against
    ``judge``'s, so verdicts of a differently configured judge never enter the cache under this key.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if batch_size < 1:
        raise BerdsError(f"batch size must be at least 1, got {batch_size}")
    recipe = recipe or JudgeRecipe.from_judge(judge)
    pairs = list(pairs)
    starts = list(range(0, len(pairs), batch_size))
    expected_id, expected_prompt = judge.id, judge.prompt_version

    out: dict[tuple[str, str], Any] = {}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]} pairs/s"), TextColumn("{task.fields[workers]}"), TimeRemainingColumn()]
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task(f"{description} [{engine.name}]", total=len(pairs), rate="-", workers="")
        start = time.perf_counter()
        done = 0
        seen_workers: set[str] = set()
        batches = (pairs[lo:lo + batch_size] for lo in starts)
        for result in engine.map_batches(recipe.recipe(), batches, total=len(starts)):
            batch = pairs[starts[result.index]: starts[result.index] + batch_size]
            judged = result.output
            if not isinstance(judged, JudgedBatch):
                raise BerdsError(f"engine {engine.name!r} returned a {type(judged).__name__} for a judge batch")
            if (judged.judge_id, judged.prompt_version) != (expected_id, expected_prompt):
                raise BerdsError(
                    f"worker {result.worker} built judge {judged.judge_id!r} (prompt {judged.prompt_version!r}) but this "
                    f"evaluation uses {expected_id!r} (prompt {expected_prompt!r}) — workers must see the same model "
                    "files and berds version as the driver"
                )
            if len(judged.verdicts) != len(batch):
                raise BerdsError(f"judge {expected_id!r} returned {len(judged.verdicts)} verdicts for {len(batch)} pairs")
            if cache is not None:
                cache.put_many(expected_id, expected_prompt, batch, judged.verdicts)
            for p, v in zip(batch, judged.verdicts):
                out[(p.perspective, p.passage)] = v
            done += len(batch)
            seen_workers.add(result.worker)
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.update(task, completed=done, rate=f"{done / elapsed:,.1f}", workers=f"{len(seen_workers)} workers")
    return out
