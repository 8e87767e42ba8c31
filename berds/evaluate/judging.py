"""Judging the pairs the cache lacks, batch by batch, each batch committed to the cache as it is answered.

* ``judge_missing`` — in this process, with the judge the caller holds;
* ``judge_on_engine`` — on an engine's workers (one judge per worker, rebuilt from its ``JudgeRecipe``),
  committed by the driver;
* ``judge_runner_for(engine)`` — the runner ``EvalOptions(judge_runner=...)`` takes for an engine.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from berds.errors import BerdsError
from berds.judges.base import check_verdicts, prepare_judge
from berds.judges.recipe import JudgedBatch, JudgeRecipe
from berds.lazy import quiet_model_loading
from berds.llm.shared import unpinned_hub_weights
from berds.types import JudgePair, Verdict

# runner(judge, pairs, cache, *, batch_size, progress, description) -> {(perspective, passage): Verdict}
JudgeRunner = Callable[..., dict]


def judge_missing(
    judge: Any,
    pairs: Sequence[JudgePair],
    cache: Any,
    *,
    batch_size: int = 256,
    progress: bool = True,
    description: str = "judging",
) -> dict[tuple[str, str], Verdict]:
    """Judge ``pairs`` batch by batch, committing each batch to ``cache`` as soon as it is answered.

    ``pairs[lo:lo + batch_size]`` are the slices ``judge_on_engine`` sends to workers; here each is handed to the
    judge in its own batches (``judge.batch_size`` pairs, the slices it would cut anyway, so answers are the same),
    and each of those is committed and moves the bar as soon as it is answered, so an interrupt loses only the batch
    being judged. Model-loading bars are silenced so they do not print into the bar.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    # model-loading bars are silenced for the whole run: a LazyJudge may load its model at the first batch
    with quiet_model_loading():
        prepare_judge(judge)  # a model that cannot be had fails here, before the bar starts
        step = int(getattr(judge, "batch_size", 0) or 0) or batch_size
        from rich.table import Column

        out: dict[tuple[str, str], Verdict] = {}
        judge_id = judge.id
        columns = [TextColumn("{task.description}", table_column=Column(max_width=28, no_wrap=True, overflow="ellipsis")),
                   BarColumn(bar_width=16), MofNCompleteColumn(), TextColumn("{task.fields[rate]} pairs/s"),
                   TimeRemainingColumn()]
        with Progress(*columns, disable=not progress, transient=False) as bar:
            task = bar.add_task(description, total=len(pairs), rate="-")
            start = time.perf_counter()
            weights_checked = False
            for lo in range(0, len(pairs), batch_size):
                batch = list(pairs[lo:lo + batch_size])
                for sub in range(0, len(batch), step):
                    part = batch[sub:sub + step]
                    answered = check_verdicts(judge, judge_id, part, judge.judge(part))
                    # Each of the judge's batches is committed the moment it is answered: committed once per
                    # `batch_size`, a Ctrl-C or SIGTERM in a later one lost those answered before it (~60 us a
                    # transaction here, nothing beside a judge's call)
                    if cache is not None:
                        if not weights_checked:  # (the model is loaded now) the weights of the verdicts cached under this id
                            cache.check_weights(judge_id, unpinned_hub_weights(judge))
                            weights_checked = True
                        cache.put_many(judge_id, judge.prompt_version, part, answered)
                    for p, v in zip(part, answered):
                        out[(p.perspective, p.passage)] = v
                    done = lo + sub + len(part)
                    bar.update(task, completed=done, rate=f"{done / max(time.perf_counter() - start, 1e-9):,.1f}")
    return out


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
    module, _, attr = recipe.name.partition(":")
    if module == "__main__" and getattr(engine, "name", None) != "local":  # a worker's __main__ is Ray's, not the script
        raise BerdsError(f"judge {recipe.name!r} is defined in the script being run, which the {engine.name} engine's "
                         f"workers do not import — move it into a module on PYTHONPATH and name it 'MODULE:{attr}'")
    pairs = list(pairs)
    starts = list(range(0, len(pairs), batch_size))
    expected_id, expected_prompt = judge.id, judge.prompt_version
    checked: list[dict] = []  # the workers' hub weights already checked against the cache's record

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
                # dtype=auto is bf16 where there is a GPU and float32 elsewhere: a driver without one names float32
                precision = (" and run the weights in the same precision (a driver without a GPU resolves dtype=auto "
                             "to float32: pass -o dtype=bfloat16 or the precision you mean)"
                             if "+dtype=" in judged.judge_id + expected_id else "")
                raise BerdsError(
                    f"worker {result.worker} built judge {judged.judge_id!r} (prompt {judged.prompt_version!r}) but this "
                    f"evaluation uses {expected_id!r} (prompt {expected_prompt!r}) — workers must see the same model "
                    f"files and berds version as the driver{precision}"
                )
            verdicts = check_verdicts(None, expected_id, batch, judged.verdicts)
            if cache is not None:
                weights = dict(getattr(judged, "weights", None) or {})
                if weights and weights not in checked:  # (once per distinct answer: each worker sends the same)
                    cache.check_weights(expected_id, weights)
                    checked.append(weights)
                cache.put_many(expected_id, expected_prompt, batch, verdicts)
            for p, v in zip(batch, verdicts):
                out[(p.perspective, p.passage)] = v
            done += len(batch)
            seen_workers.add(result.worker)
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.update(task, completed=done, rate=f"{done / elapsed:,.1f}", workers=f"{len(seen_workers)} workers")
    return out


def judge_runner_for(engine: Any, recipe: JudgeRecipe | None = None, *, batch_size: int | None = None) -> JudgeRunner:
    """The judge runner for ``engine``: ``judge_missing`` itself on the local engine (the judge already lives
    in this process), else ``judge_on_engine`` on its workers, with the engine's preferred ``batch_size``.

    Batches are the same slices of ``pairs`` that ``judge_missing`` would make (unless the engine or
    ``batch_size`` overrides their size), so a deterministic judge gives byte-identical verdicts on any engine.
    """
    if getattr(engine, "name", None) == "local":
        return judge_missing
    override = batch_size or getattr(engine, "batch_size", None)

    def run(judge: Any, pairs: Any, cache: Any, *, batch_size: int = 256, progress: bool = True,
            description: str = "judging") -> dict:
        return judge_on_engine(engine, judge, pairs, cache, recipe=recipe, batch_size=override or batch_size,
                               progress=progress, description=description)

    return run
