"""Parameter tuning for rerankers on a dev run: rerank with each value, judge, keep the best.

``tune_reranker`` tunes any reranker's parameter (``berds study diversify`` uses it for every strategy);
``tune_mmr`` is MMR's λ with the study's grid (``berds tune mmr``). Tuning needs judging, so it lives here
with the other experiments that combine stages, not in ``rerank/`` (which only reorders runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from berds.errors import BerdsError
from berds.evaluate.analyses.common import build_judge
from berds.evaluate.cache import JudgementCache
from berds.evaluate.evaluation import evaluate_run, note_unparsed
from berds.rerank.candidates import check_depth_covers
from berds.rerank.mmr import DEFAULT_DEPTH, DEFAULT_LAMBDAS, MMRReranker
from berds.types import Run


@dataclass
class TuneResult:
    """Tuning on a dev run: one row of averages per value (plus the un-reranked baseline), and the choice.

    ``parameter`` names the key of the value in each row (``"lambda"`` for MMR)."""

    rows: list[dict[str, Any]]
    chosen: float
    select: str
    judge_id: str
    ks: tuple[int, ...]
    runs: dict[float, Run]
    parameter: str = "lambda"
    method: str = "mmr"

    @property
    def tied(self) -> bool:
        """Every value tried scored the same on ``select``: the data told the values apart by nothing, and the
        choice is the tie rule's (e.g. a dev run whose questions all got no passages)."""
        scores = {round(float(r[self.select]), 12) for r in self.rows if r.get(self.parameter) is not None}
        return len([r for r in self.rows if r.get(self.parameter) is not None]) > 1 and len(scores) == 1

    def to_json(self) -> dict[str, Any]:
        out = {"method": self.method, "parameter": self.parameter, "select": self.select, "chosen": self.chosen,
               "judge": self.judge_id, "ks": list(self.ks), "rows": self.rows}
        if self.parameter == "lambda":
            out["chosen_lambda"] = self.chosen
        return out


def choose_value(rows: Sequence[Mapping[str, Any]], select: str, key: str = "lambda",
                 prefer: str = "larger") -> float:
    """The value of ``key`` with the best ``select`` metric; ties go to the larger value (``prefer="larger"``:
    for λ, closer to the original ranking) or the smaller (for a diversity weight, closer to it)."""
    candidates = [r for r in rows if r.get(key) is not None]
    if not candidates:
        raise BerdsError(f"no {key} was evaluated")
    if select not in candidates[0]:
        metrics = [k for k in candidates[0] if "@" in k]
        raise BerdsError(f"unknown --select metric {select!r}; use one of {', '.join(metrics)}")
    sign = 1.0 if prefer == "larger" else -1.0
    best = max(candidates, key=lambda r: (round(float(r[select]), 12), sign * float(r[key])))
    return float(best[key])


def check_select(select: str, ks: Sequence[int]) -> None:
    """Refuse a ``select`` metric the tuning will not compute, before any judging (the grid can take hours)."""
    metrics = [f"{m}@{k}" for k in ks for m in ("mrecall", "precision")]
    if select not in metrics:
        raise BerdsError(f"unknown --select metric {select!r}; use one of {', '.join(metrics)}")


def choose_lambda(rows: Sequence[Mapping[str, Any]], select: str) -> float:
    """The λ with the best ``select`` metric; ties go to the larger λ (closer to the original ranking)."""
    return choose_value(rows, select, "lambda")


# How each built-in parameter moves away from the original ranking: ties in the tuning metric go to the
# value closest to it.
CLOSER_TO_ORIGINAL = {"lam": "larger", "lambda": "larger", "diversity": "smaller"}


def tune_reranker(
    run: Run,
    judge: Any,
    make: Callable[[float], Any],
    values: Sequence[float],
    *,
    parameter: str = "lambda",
    method: str | None = None,
    ks: Sequence[int] = (5, 10),
    select: str | None = None,
    judgement_cache: Any = None,
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
    input_path: str | Path | None = None,
    prefer: str = "larger",
) -> TuneResult:
    """Rerank ``run`` (a dev-split run) with ``make(value)`` for each value, judge the top ``max(ks)``, and
    pick the best value by ``select`` (default ``mrecall@<smallest k>``, averaged over questions).

    Rerankers built on ``EmbeddingReranker`` prepare the candidates (embeddings, Sim1) once for the whole
    grid; the judgement cache makes the grid cheap (passages shared by several values, and by the original
    run evaluated as the baseline row, are judged once).
    """
    values = sorted({float(x) for x in values})
    if not values:
        raise BerdsError(f"give at least one value of {parameter}")
    if not run.questions:
        raise BerdsError(f"run {run.name!r} has no questions to tune {parameter} on")
    ks = tuple(sorted({int(k) for k in ks}))
    select = select or f"mrecall@{ks[0]}"
    check_select(select, ks)

    def averages(r: Run) -> dict[str, float]:
        result = evaluate_run(r, judge, ks, cache=judgement_cache, allow_short=allow_short,
                              allow_unparsed=allow_unparsed, progress=progress)
        if allow_unparsed:
            note_unparsed([result])
        return dict(result.averages["all"])

    rows: list[dict[str, Any]] = [{parameter: None, "setting": "original ranking", **averages(run)}]
    runs: dict[float, Run] = {}
    prepared = None
    for value in values:
        reranker = make(value)
        method = method or getattr(reranker, "method", None) or getattr(reranker, "name", "reranker")
        kwargs: dict[str, Any] = {"progress": progress}
        if hasattr(reranker, "prepare"):
            prepared = prepared if prepared is not None else reranker.prepare(run, progress=progress)
            kwargs.update(candidates=prepared, input_path=input_path)
        reranked = reranker.rerank(run, **kwargs)
        runs[value] = reranked
        symbol = "λ" if parameter in ("lambda", "lam") else parameter
        rows.append({parameter: value, "setting": f"{method} {symbol}={value:g}", **averages(reranked)})
    chosen = choose_value(rows, select, parameter, prefer)
    return TuneResult(rows=rows, chosen=chosen, select=select, judge_id=getattr(judge, "id", ""), ks=ks, runs=runs,
                      parameter=parameter, method=method or "reranker")


def tune_mmr(
    run: Run,
    judge: Any,
    *,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    ks: Sequence[int] = (5, 10),
    select: str | None = None,
    encoder: Any = None,
    embedding_cache: Any = None,
    judgement_cache: Any = None,
    depth: int = DEFAULT_DEPTH,
    normalisation: str = "question-max",
    embed_text: str = "text-title",
    first: str = "rank1",
    sim1_constant: float | None = None,
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
    input_path: str | Path | None = None,
) -> TuneResult:
    """MMR's λ on a dev run (``tune_reranker`` with the study's grid); ties go to the larger λ."""
    from berds.rerank.embeddings import load_encoder

    for lam in lambdas:
        if not 0.0 <= float(lam) <= 1.0:
            raise BerdsError(f"λ must be between 0 and 1, got {lam}")
    if not list(lambdas):
        raise BerdsError("give at least one λ (--lambdas 0.5,0.75,0.9,0.95,0.99)")
    if select is not None:  # before the encoder loads
        check_select(select, sorted({int(k) for k in ks}))
    check_depth_covers(depth, [int(k) for k in ks])
    encoder = encoder if encoder is not None else load_encoder()

    def make(lam: float) -> MMRReranker:
        return MMRReranker(lam, first=first, encoder=encoder, embedding_cache=embedding_cache, depth=depth,
                           normalisation=normalisation, embed_text=embed_text, sim1_constant=sim1_constant)

    return tune_reranker(run, judge, make, lambdas, parameter="lambda", method="MMR", ks=ks, select=select,
                         judgement_cache=judgement_cache, allow_short=allow_short, allow_unparsed=allow_unparsed,
                         progress=progress, input_path=input_path)


def write_tuning(result: TuneResult, out_dir: str | Path, *, overwrite: bool = False) -> dict[str, Path]:
    """Write the run reranked with the chosen λ (its manifest records the whole grid) and the λ table.

    Files: ``OUT/manifest.json`` + run files (a normal run folder), ``OUT/tuning.csv``, ``OUT/tuning.md``,
    ``OUT/tuning.json``, and ``OUT/tuning.png`` (MRecall@k and Precision@k against λ).
    """
    from berds.evaluate.report import plot_tuning, write_table
    from berds.io import write_json
    from berds.runs import save_run

    out = Path(out_dir)
    best = result.runs[result.chosen]
    manifest = dict(best.manifest)
    manifest["rerank"] = {**manifest["rerank"], "tuning": result.to_json()}
    save_run(Run(best.questions, best.hits, manifest, best.name), out, overwrite=overwrite)
    header, body = tuning_table(result)
    symbol = "λ" if result.parameter in ("lambda", "lam") else result.parameter
    paths = write_table(out / "tuning", header, body,
                        title=f"{result.method} {symbol} tuning ({result.select}; judge {result.judge_id})")
    write_json(out / "tuning.json", result.to_json())
    paths["json"] = out / "tuning.json"
    from berds.evaluate.report import figure_caption, run_split

    title = (f"{result.method} {symbol} tuning ({result.select} chooses)\n"
             f"{figure_caption(result.judge_id, len(best.questions), run_split(best))}")
    paths["png"] = plot_tuning(result.rows, result.ks, out / "tuning.png", parameter=result.parameter,
                               chosen=result.chosen, title=title)
    paths["run"] = out
    return paths


def tuning_table(result: TuneResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows (percent, one decimal) for the grid; the chosen value is marked."""
    metrics = [f"mrecall@{k}" for k in result.ks] + [f"precision@{k}" for k in result.ks]
    symbol = "λ" if result.parameter in ("lambda", "lam") else result.parameter
    header = [symbol, *[m.replace("mrecall", "MRecall").replace("precision", "Precision") for m in metrics], "chosen"]
    body = []
    for row in result.rows:
        lam = row[result.parameter]
        body.append([
            "original" if lam is None else f"{lam:g}",
            *[f"{100 * float(row[m]):.1f}" for m in metrics],
            "*" if lam is not None and lam == result.chosen else "",
        ])
    return header, body


def tune_path(
    run_path: str | Path,
    out: str | Path,
    judge: str | Any,
    *,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    overwrite: bool = False,
    **options: Any,
) -> tuple[TuneResult, dict[str, Path]]:
    """``berds tune mmr``: ``tune_mmr`` on a run file with a judge by name (loaded only if a pair is not
    cached), then ``write_tuning`` into ``out``. ``options`` go to ``tune_mmr``."""
    from berds.runs import load_run

    out = Path(out)
    if (out / "manifest.json").exists() and not overwrite:
        raise BerdsError(f"{out} already holds a run — choose another --out or pass --overwrite")
    run = load_run(run_path, allow_empty=bool(options.get("allow_short")))
    with JudgementCache(cache_path) as cache:
        result = tune_mmr(run, build_judge(judge, judge_options), judgement_cache=cache, input_path=run_path, **options)
    return result, write_tuning(result, out, overwrite=overwrite)
