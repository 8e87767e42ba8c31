"""λ tuning for MMR on a dev run: rerank with each λ, judge, keep the best (``berds tune mmr``).

Tuning needs judging, so it lives here with the other experiments that combine stages, not in ``rerank/``
(which only reorders runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError
from berds.evaluate.analyses.common import build_judge
from berds.evaluate.cache import JudgementCache
from berds.evaluate.evaluation import evaluate_run
from berds.rerank.mmr import DEFAULT_DEPTH, DEFAULT_LAMBDAS, mmr_rerank
from berds.types import Run


@dataclass
class TuneResult:
    """λ tuning on a dev run: one row of averages per λ (plus the un-reranked baseline), and the choice."""

    rows: list[dict[str, Any]]
    chosen: float
    select: str
    judge_id: str
    ks: tuple[int, ...]
    runs: dict[float, Run]

    def to_json(self) -> dict[str, Any]:
        return {"select": self.select, "chosen_lambda": self.chosen, "judge": self.judge_id,
                "ks": list(self.ks), "rows": self.rows}


def choose_lambda(rows: Sequence[Mapping[str, Any]], select: str) -> float:
    """The λ with the best ``select`` metric; ties go to the larger λ (closer to the original ranking)."""
    candidates = [r for r in rows if r.get("lambda") is not None]
    if not candidates:
        raise BerdsError("no λ was evaluated")
    if select not in candidates[0]:
        metrics = [k for k in candidates[0] if "@" in k]
        raise BerdsError(f"unknown --select metric {select!r}; use one of {', '.join(metrics)}")
    best = max(candidates, key=lambda r: (round(float(r[select]), 12), float(r["lambda"])))
    return float(best["lambda"])


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
    normalisation: str = "minmax",
    embed_text: str = "text",
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
    input_path: str | Path | None = None,
) -> TuneResult:
    """Rerank ``run`` (a dev-split run) with each λ, judge the top ``max(ks)``, and pick the best λ.

    ``select`` (default ``mrecall@<smallest k>``) is the metric averaged over questions that decides; ties
    go to the larger λ. The judgement cache makes the grid cheap: passages shared by several λ (and by
    the original run, evaluated as the baseline row) are judged once.
    """
    from berds.rerank.embeddings import load_encoder

    lambdas = sorted({float(x) for x in lambdas})
    if not lambdas:
        raise BerdsError("give at least one λ (--lambdas 0.5,0.75,0.9,0.95,0.99)")
    for lam in lambdas:
        if not 0.0 <= lam <= 1.0:
            raise BerdsError(f"λ must be between 0 and 1, got {lam}")
    ks = tuple(sorted({int(k) for k in ks}))
    select = select or f"mrecall@{ks[0]}"
    encoder = encoder if encoder is not None else load_encoder()

    def averages(r: Run) -> dict[str, float]:
        result = evaluate_run(r, judge, ks, cache=judgement_cache, allow_short=allow_short,
                              allow_unparsed=allow_unparsed, progress=progress)
        return dict(result.averages["all"])

    rows: list[dict[str, Any]] = [{"lambda": None, "setting": "original ranking", **averages(run)}]
    runs: dict[float, Run] = {}
    for lam in lambdas:
        reranked, _ = mmr_rerank(run, lam=lam, encoder=encoder, embedding_cache=embedding_cache, depth=depth,
                                 normalisation=normalisation, embed_text=embed_text, input_path=input_path,
                                 progress=progress)
        runs[lam] = reranked
        rows.append({"lambda": lam, "setting": f"MMR λ={lam:g}", **averages(reranked)})
    chosen = choose_lambda(rows, select)
    judge_id = getattr(judge, "id", "")
    return TuneResult(rows=rows, chosen=chosen, select=select, judge_id=judge_id, ks=ks, runs=runs)


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
    paths = write_table(out / "tuning", header, body, title=f"MMR λ tuning ({result.select}; judge {result.judge_id})")
    write_json(out / "tuning.json", result.to_json())
    paths["json"] = out / "tuning.json"
    paths["png"] = plot_tuning(result.rows, result.ks, out / "tuning.png")
    paths["run"] = out
    return paths


def tuning_table(result: TuneResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows (percent, one decimal) for the λ grid; the chosen λ is marked."""
    metrics = [f"mrecall@{k}" for k in result.ks] + [f"precision@{k}" for k in result.ks]
    header = ["λ", *[m.replace("mrecall", "MRecall").replace("precision", "Precision") for m in metrics], "chosen"]
    body = []
    for row in result.rows:
        lam = row["lambda"]
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
