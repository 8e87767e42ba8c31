"""Judge a run and compute its metrics: the heart of ``berds eval``.

``evaluate_run(run, judge, ks=(5, 10))``

1. builds every (perspective, passage) pair of the top ``max(ks)`` passages of each question (the
   passage text is ``text + " " + title``, as in the study),
2. reads what the judgement cache already holds (``overwrite`` decides what is reused),
3. judges the missing pairs in batches — each batch committed to the cache before the next starts, so an
   interrupted evaluation resumes where it stopped — with a progress bar,
4. computes MRecall@k / Precision@k per question, per dataset and overall.

The judge is loaded only if some pair is missing from the cache.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.evaluate.cache import JudgementCache, unique_pairs
from berds.evaluate.metrics import aggregate, question_metrics
from berds.types import Judgement, JudgePair, Run, Verdict

OVERWRITE_POLICIES = ("only-missing", "always", "never")


@dataclass
class JudgeStats:
    pairs: int = 0          # distinct (perspective, passage) pairs needed
    cached: int = 0         # answered from the cache
    judged: int = 0         # sent to the judge in this call
    unparsed: int = 0       # judge answers that were neither Yes nor No (strict parsing)
    seconds: float = 0.0    # time spent judging


@dataclass
class EvalResult:
    """Everything ``berds eval`` reports. ``support[qid]`` is the (perspectives x passages) matrix."""

    run_name: str
    judge_id: str
    prompt_version: str
    ks: tuple[int, ...]
    depth: int
    support: dict[str, np.ndarray]
    p_yes: dict[str, np.ndarray]
    per_question: dict[str, dict[str, float]]
    averages: dict[str, dict[str, float]]
    stats: JudgeStats
    datasets: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)

    def judgements(self, run: Run) -> list[Judgement]:
        out = []
        for qid, matrix in self.support.items():
            hits = run.hits[qid]
            for i in range(matrix.shape[0]):
                for j in range(matrix.shape[1]):
                    p = self.p_yes[qid][i, j]
                    out.append(Judgement(qid, hits[j].passage.id, j + 1, i, bool(matrix[i, j]),
                                         None if np.isnan(p) else float(p)))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_name,
            "judge": {"id": self.judge_id, "prompt_version": self.prompt_version},
            "ks": list(self.ks),
            "depth": self.depth,
            "averages": self.averages,
            "per_question": self.per_question,
            "judging": vars(self.stats),
            **({"run_manifest": self.manifest} if self.manifest else {}),
        }


def pairs_for_run(run: Run, depth: int, *, title_position: str = "after", allow_short: bool = False
                  ) -> dict[str, list[list[JudgePair]]]:
    """``qid -> [perspective index][rank index] -> JudgePair`` over the top ``depth`` passages."""
    out: dict[str, list[list[JudgePair]]] = {}
    for qid, q in run.questions.items():
        hits = run.hits[qid][:depth]
        if len(hits) < depth and not allow_short:
            raise InputError(
                f"question has {len(hits)} passages but k={depth} needs {depth}",
                path=run.manifest.get("source", {}).get("path") or run.name or None, record=qid,
                fix="use a smaller --k, retrieve more passages, or pass --allow-short to score missing ranks as unsupported",
            )
        texts = [h.passage.judge_text(title_position) for h in hits]
        out[qid] = [[JudgePair(perspective=p, passage=t) for t in texts] for p in q.perspectives]
    return out


JudgeFactory = Callable[[], Any]


def judge_missing(
    judge: Any,
    pairs: Sequence[JudgePair],
    cache: JudgementCache | None,
    *,
    batch_size: int = 256,
    progress: bool = True,
    description: str = "judging",
) -> dict[tuple[str, str], Verdict]:
    """Judge ``pairs`` batch by batch, committing each batch to ``cache`` as soon as it is answered."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    out: dict[tuple[str, str], Verdict] = {}
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]} pairs/s"), TimeRemainingColumn()]
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task(description, total=len(pairs), rate="-")
        start = time.perf_counter()
        for lo in range(0, len(pairs), batch_size):
            batch = list(pairs[lo:lo + batch_size])
            verdicts = judge.judge(batch)
            if len(verdicts) != len(batch):
                raise BerdsError(f"judge {judge.id!r} returned {len(verdicts)} verdicts for {len(batch)} pairs")
            if cache is not None:
                cache.put_many(judge.id, judge.prompt_version, batch, verdicts)
            for p, v in zip(batch, verdicts):
                out[(p.perspective, p.passage)] = v
            done = lo + len(batch)
            elapsed = max(time.perf_counter() - start, 1e-9)
            bar.update(task, completed=done, rate=f"{done / elapsed:,.1f}")
    return out


def evaluate_run(
    run: Run,
    judge: Any,
    ks: Sequence[int] = (5, 10),
    *,
    cache: JudgementCache | None = None,
    overwrite: str = "only-missing",
    title_position: str = "after",
    allow_short: bool = False,
    batch_size: int | None = None,
    progress: bool = True,
    judge_runner: Callable[..., dict[tuple[str, str], Verdict]] | None = None,
) -> EvalResult:
    """Judge the top ``max(ks)`` passages of every question against every perspective; compute metrics.

    ``judge`` is any Judge (wrap it in ``LazyJudge`` to load a model only when something is missing from
    the cache). ``overwrite``: ``only-missing`` (reuse cached verdicts, judge the rest),
    ``always`` (re-judge everything and replace cached verdicts), ``never`` (use cached verdicts only; fail
    if any pair is missing). ``judge_runner`` replaces ``judge_missing`` (the Ray engine plugs in here).
    """
    if overwrite not in OVERWRITE_POLICIES:
        raise BerdsError(f"unknown overwrite policy {overwrite!r}; use one of {', '.join(OVERWRITE_POLICIES)}")
    if title_position not in ("after", "before", "none"):  # checked here: passages without titles never reach judge_text's check
        raise BerdsError(f"unknown --title-position {title_position!r}; use one of after, before, none")
    ks = tuple(sorted(set(int(k) for k in ks)))
    if not ks or ks[0] < 1:
        raise BerdsError(f"--k values must be positive integers, got {list(ks)}")
    depth = ks[-1]
    grid = pairs_for_run(run, depth, title_position=title_position, allow_short=allow_short)
    needed = unique_pairs(p for rows in grid.values() for row in rows for p in row)
    stats = JudgeStats(pairs=len(needed))

    verdicts: dict[tuple[str, str], Verdict] = {}
    if cache is not None and overwrite != "always":
        for p, v in zip(needed, cache.get_many(judge.id, judge.prompt_version, needed)):
            if v is not None:
                verdicts[(p.perspective, p.passage)] = v
    stats.cached = len(verdicts)
    missing = [p for p in needed if (p.perspective, p.passage) not in verdicts]
    if missing and overwrite == "never":
        raise BerdsError(
            f"{len(missing)} of {len(needed)} pairs are not in the judgement cache for judge {judge.id!r} and "
            f"--overwrite never forbids judging them — use --overwrite only-missing"
        )
    if missing:
        started = time.perf_counter()
        runner = judge_runner or judge_missing
        bs = batch_size or int(getattr(judge, "batch_size", 0) or 64) * 4
        verdicts.update(runner(judge, missing, cache, batch_size=bs, progress=progress,
                               description=f"judging {run.name or 'run'}"))
        stats.judged = len(missing)
        stats.seconds = time.perf_counter() - started

    support: dict[str, np.ndarray] = {}
    p_yes: dict[str, np.ndarray] = {}
    per_question: dict[str, dict[str, float]] = {}
    for qid, rows in grid.items():
        s = np.zeros((len(rows), depth), dtype=bool)
        py = np.full((len(rows), depth), np.nan)
        for i, row in enumerate(rows):
            for j, pair in enumerate(row):
                v = verdicts[(pair.perspective, pair.passage)]
                s[i, j] = v.label
                if v.p_yes is not None:
                    py[i, j] = v.p_yes
                if v.detail and v.detail.get("unparsed"):
                    stats.unparsed += 1
        support[qid], p_yes[qid] = s, py
        per_question[qid] = question_metrics(s, ks)
    datasets = {qid: q.dataset for qid, q in run.questions.items()}
    return EvalResult(
        run_name=run.name, judge_id=judge.id, prompt_version=judge.prompt_version, ks=ks, depth=depth,
        support=support, p_yes=p_yes, per_question=per_question,
        averages=aggregate(per_question, datasets), stats=stats, datasets=datasets, manifest=dict(run.manifest),
    )


class LazyJudge:
    """A judge whose model loads on first use: cache lookups need only ``id`` and ``prompt_version``.

    Backends build their ``id`` without loading weights, so a fully cached evaluation never loads a model.
    """

    def __init__(self, factory: JudgeFactory, *, recipe: Any = None):
        self._factory = factory
        self._judge: Any = None
        # How a remote worker rebuilds this judge (``berds.engine.recipes.JudgeRecipe``): engines that run
        # the judge elsewhere build one instance per worker from it instead of pickling the model.
        self.recipe = recipe

    @property
    def inner(self) -> Any:
        if self._judge is None:
            self._judge = self._factory()
        return self._judge

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def prompt_version(self) -> str:
        return self.inner.prompt_version

    @property
    def batch_size(self) -> int:
        return int(getattr(self.inner, "batch_size", 64) or 64)

    def judge(self, pairs):
        return self.inner.judge(pairs)


def judge_slug(judge_id: str) -> str:
    """A file-name-safe short form of a judge id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", judge_id).strip("_")[:80]


def write_eval_outputs(result: EvalResult, run: Run, out_dir: str | Path, *, legacy_jsonl: bool = False) -> dict[str, Path]:
    """Write ``metrics.json`` and ``judgements.jsonl`` (and optionally the legacy inline predictions)."""
    from berds.io import write_json, write_jsonl
    from berds.runs import legacy_predictions, write_ctxs_jsonl

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"metrics": out / "metrics.json", "judgements": out / "judgements.jsonl"}
    write_json(paths["metrics"], result.to_json())
    write_jsonl(paths["judgements"], (
        {"qid": j.qid, "docid": j.docid, "rank": j.rank, "perspective": j.perspective_index,
         "label": int(j.label), "p_yes": j.p_yes, "judge": result.judge_id}
        for j in result.judgements(run)
    ))
    if legacy_jsonl:
        paths["legacy"] = out / "run.mistral-preds.jsonl"
        labels = {qid: m.tolist() for qid, m in result.support.items()}
        cut = Run(run.questions, {qid: run.hits[qid][: result.depth] for qid in run.questions}, run.manifest, run.name)
        write_ctxs_jsonl(cut, paths["legacy"], extra=legacy_predictions(labels))
    return paths


def metrics_table(results: Sequence[EvalResult], *, title: str = "BERDS metrics") -> Any:
    """A rich table: one row per run (and per dataset when a run mixes several), metrics in percent.

    The judge goes into the title when every result shares it, else into a column.
    """
    from rich.table import Table

    ks = sorted({k for r in results for k in r.ks})
    judges = sorted({r.judge_id for r in results})
    multi_set = any(len(r.averages) > 1 for r in results)
    table = Table(title=title if len(judges) != 1 else f"{title}\n[dim]judge: {judges[0]}[/]")
    table.add_column("run", overflow="fold")
    if len(judges) > 1:
        table.add_column("judge", overflow="fold")
    if multi_set:
        table.add_column("set")
    table.add_column("n", justify="right")
    for k in ks:
        table.add_column(f"MRecall@{k}", justify="right")
    for k in ks:
        table.add_column(f"Prec@{k}", justify="right")
    for r in results:
        counts: dict[str, int] = {"all": len(r.per_question), "macro": len(r.per_question)}
        for qid in r.per_question:
            name = r.datasets.get(qid) or "-"
            counts[name] = counts.get(name, 0) + 1
        for name, avg in r.averages.items():
            cells = [f"{100 * avg[f'mrecall@{k}']:.1f}" if f"mrecall@{k}" in avg else "" for k in ks]
            cells += [f"{100 * avg[f'precision@{k}']:.1f}" if f"precision@{k}" in avg else "" for k in ks]
            row = [r.run_name if name == "all" else ""]
            if len(judges) > 1:
                row.append(r.judge_id if name == "all" else "")
            if multi_set:
                row.append(name)
            table.add_row(*row, str(counts.get(name, "")), *cells)
    return table


def eval_output_dir(run_path: Path, out: str | Path | None, n_runs: int) -> Path:
    """Where an evaluation's files go: ``--out`` (a sub-folder per run when several), else the run folder
    (``RUN/``) or, for a single jsonl file, ``FILE.eval/`` beside it."""
    if out is not None:
        out = Path(out)
        return out / run_path.name.split(".")[0] if n_runs > 1 else out
    return run_path if run_path.is_dir() else run_path.with_name(run_path.name.split(".")[0] + ".eval")


def evaluate_paths(
    paths: Sequence[str | Path],
    judge: str | Any,
    ks: Sequence[int] = (5, 10),
    *,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    use_cache: bool = True,
    overwrite: str = "only-missing",
    title_position: str = "after",
    allow_short: bool = False,
    out: str | Path | None = None,
    legacy_jsonl: bool = False,
    progress: bool = True,
    judge_runner: Callable[..., dict[tuple[str, str], Verdict]] | None = None,
) -> list[tuple[Path, EvalResult, dict[str, Path]]]:
    """``berds eval``: load each run (folder or BERDS jsonl), judge it through the shared cache, write
    ``metrics.json`` + ``judgements.jsonl`` next to it (or under ``out``), and return the results.

    A judge given by name is built lazily, so a fully cached evaluation never loads a model.
    """
    from berds.evaluate.judge import check_judge_name, load_judge
    from berds.runs import load_run

    if isinstance(judge, str):
        check_judge_name(judge)
    runs = [(Path(p), load_run(p)) for p in paths]  # parse everything first: bad input fails fast
    if isinstance(judge, str):
        from berds.engine.recipes import JudgeRecipe

        name, opts = judge, dict(judge_options or {})
        judge = LazyJudge(lambda: load_judge(name, **opts), recipe=JudgeRecipe(name, opts))
    cache = JudgementCache(cache_path) if use_cache else None
    results = []
    try:
        for path, run in runs:
            result = evaluate_run(
                run, judge, ks, cache=cache, overwrite=overwrite, title_position=title_position,
                allow_short=allow_short, progress=progress, judge_runner=judge_runner,
            )
            target = eval_output_dir(path, out, len(runs))
            files = write_eval_outputs(result, run, target / "eval" / judge_slug(result.judge_id) if target == path else target,
                                       legacy_jsonl=legacy_jsonl)
            if target == path:  # a run folder also gets the latest metrics at its top level
                from berds.io import write_json

                write_json(path / "metrics.json", result.to_json())
                files["metrics"] = path / "metrics.json"
            results.append((path, result, files))
    finally:
        if cache is not None:
            cache.close()
    return results
