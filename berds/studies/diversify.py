"""``berds study diversify``: every diversification strategy, tuned on dev, compared on test.

For a retriever run with dev and test questions:

1. each strategy (MMR, pyversity's DPP/MSD/COVER/SSD, and xQuAD/PM2 when aspects are given) has its
   parameter tuned on the dev questions (``berds.studies.tuning.tune_reranker``: every value of its grid,
   judged, best ``select`` metric; ties go to the value closest to the original ranking);
2. the test run is reranked with each chosen value, judged, and compared with the un-reranked test run:
   MRecall@k / Precision@k, the mean difference with a bootstrap interval and a paired permutation test over
   questions, Holm-corrected across the strategies (``berds.evaluate.compare``);
3. a query-expansion run (``berds retrieve --expand``), when given, is compared too, as is and reranked with
   MMR (expansion, then reranking: the combination the study names as future work);
4. the MRecall@k vs Precision@k trade-off is drawn with one point per strategy and parameter value (on the
   dev questions by default, whose judgements tuning already made; ``tradeoff_split="test"`` for test).

Without a dev run, the run's questions are split deterministically: questions sorted by the sha256 of their
id, the first ``round(split_dev * n)`` are dev (``split_questions``). Every reranker uses one encoder whose
vectors are kept in memory for the whole study (and in the embedding cache file when one is given).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError
from berds.types import Run

DEFAULT_STRATEGIES = ("mmr", "dpp", "msd", "cover", "ssd", "xquad", "pm2")
ASPECT_STRATEGIES = ("xquad", "pm2")


def split_questions(run: Run, dev_share: float) -> tuple[Run, Run]:
    """(dev, test) runs: questions sorted by sha256 of their id, the first ``round(dev_share * n)`` are dev."""
    if not 0.0 < dev_share < 1.0:
        raise BerdsError(f"--split-dev must be between 0 and 1 (the share of questions used for tuning), got {dev_share}")
    ids = sorted(run.questions, key=lambda q: hashlib.sha256(q.encode("utf-8")).hexdigest())
    n_dev = int(round(dev_share * len(ids)))
    if n_dev < 1 or n_dev >= len(ids):
        raise BerdsError(f"splitting {len(ids)} questions with --split-dev {dev_share} leaves dev or test empty")
    dev_ids = set(ids[:n_dev])
    return subset(run, [q for q in run.questions if q in dev_ids], "dev"), \
        subset(run, [q for q in run.questions if q not in dev_ids], "test")


def subset(run: Run, qids: Sequence[str], split: str) -> Run:
    manifest = {**run.manifest, "split": {"name": split, "questions": list(qids),
                                          "rule": "questions sorted by sha256 of their id; the first share is dev"}}
    return Run({q: run.questions[q] for q in qids}, {q: run.hits[q] for q in qids}, manifest, run.name)


@dataclass
class StudyRow:
    label: str
    strategy: str
    parameter: str | None
    chosen: float | None
    run: Run
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class DiversifyStudy:
    rows: list[StudyRow]
    comparison: Any
    tuning: dict[str, Any]
    tradeoff: list[dict[str, Any]]
    ks: tuple[int, ...]
    judge_id: str
    dev_questions: list[str]
    test_questions: list[str]
    notes: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    corrected: list[Any] | None = None  # with labels: each test run's corrected estimates (berds.trust.ppi)

    def table(self, *, detail: bool = True) -> tuple[str, list[str], list[list[str]]]:
        """Rows per setting; ``detail`` adds the interval and Holm p to each cell (the files have them).
        Without ``detail`` (the terminal's 80 columns): each setting's values on one line, and under it its
        tuned parameter and the differences from the base run."""
        metrics = [f"mrecall@{k}" for k in self.ks] + [f"precision@{k}" for k in self.ks]
        if not detail:
            return self._narrow_table(metrics)
        # (the terminal table says Prec@k, as eval's does: "Precision@10" folds into "Precision@1" / "0" at 80 columns)
        header = ["setting", "parameter (tuned on dev)",
                  *[m.replace("mrecall", "MRecall").replace("precision", "Precision" if detail else "Prec")
                    for m in metrics]]
        body = []
        for row in self.rows:
            cells = []
            for m in metrics:
                value = f"{100 * row.metrics[m]:.1f}"
                found = self.comparison.find(row.label, m) if self.comparison is not None else None
                if found is not None and detail:
                    value += f" ({100 * found.difference:+.1f} [{100 * found.ci_low:+.1f}, {100 * found.ci_high:+.1f}]" \
                             f" p={found.p_holm:.3f}{'*' if found.significant else ''})"
                elif found is not None:
                    value += f" ({100 * found.difference:+.1f}{'*' if found.significant else ''})"
                cells.append(value)
            param = "" if row.chosen is None else f"{row.parameter}={row.chosen:g}"
            body.append([row.label, param, *cells])
        title = (f"diversification on {len(self.test_questions)} test questions (judge {self.judge_id}); % with "
                 f"Δ vs the base run [95% bootstrap CI], Holm-corrected permutation p; * significant")
        if self.mixed_questions():  # (rows averaged over other question sets: each says over how many)
            header.insert(1, "questions")
            for line, row in zip(body, self.rows):
                line.insert(1, str(len(row.run.questions)))
        return title, header, body

    def mixed_questions(self) -> bool:
        """Whether the rows are averaged over different question sets (an expansion run covering only some)."""
        return len({frozenset(row.run.questions) for row in self.rows}) > 1

    def _narrow_table(self, metrics: list[str]) -> tuple[str, list[str], list[list[str]]]:
        # (the wide layout folded a parameter mid-number, "diversity=0" over ".1", and every Δ onto a second line)
        header = ["setting", *[m.replace("mrecall", "MRecall").replace("precision", "Prec") for m in metrics]]
        body = []
        for row in self.rows:
            body.append([row.label, *[f"{100 * row.metrics[m]:.1f}" for m in metrics]])
            found = [self.comparison.find(row.label, m) if self.comparison is not None else None for m in metrics]
            if row.chosen is None and all(f is None for f in found):
                continue
            param = "" if row.chosen is None else f"{row.parameter}={row.chosen:g}"
            body.append([f"  {param}{', ' if param else ''}Δ",
                         *["" if f is None else f"{100 * f.difference:+.1f}{'*' if f.significant else ''}"
                           for f in found]])
        title = (f"diversification on {len(self.test_questions)} test questions (judge {self.judge_id}); %, and "
                 f"under each setting its parameter tuned on dev and Δ vs the base run in points (intervals and "
                 f"Holm-corrected p in results.md); * significant")
        return title, header, body

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "diversify-study", "judge": self.judge_id, "ks": list(self.ks),
            "dev_questions": self.dev_questions, "test_questions": self.test_questions, "notes": self.notes,
            "rows": [{"label": r.label, "strategy": r.strategy, "parameter": r.parameter, "chosen": r.chosen,
                      "metrics": r.metrics} for r in self.rows],
            "comparison": self.comparison.to_json() if self.comparison is not None else None,
            "tuning": self.tuning, "tradeoff": self.tradeoff,
        }


def study_diversify(
    test_run: Run,
    dev_run: Run,
    judge: Any,
    *,
    encoder: Any,
    strategies: Sequence[str] | None = None,
    grids: Mapping[str, Sequence[float]] | None = None,
    reranker_options: Mapping[str, Mapping[str, Any]] | None = None,
    expansions: str | Path | None = None,
    llm: str | None = None,
    llm_options: Mapping[str, Any] | None = None,
    aspects: str | None = None,
    expanded_test_run: Run | None = None,
    expanded_dev_run: Run | None = None,
    embedding_cache: Any = None,
    judgement_cache: Any = None,
    depth: int = 100,
    ks: Sequence[int] = (5, 10),
    select: str | None = None,
    tradeoff_split: str = "dev",
    n_resamples: int = 10000,
    alpha: float = 0.05,
    seed: int = 0,
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
) -> DiversifyStudy:
    """The study on runs already split (see the module docstring). ``grids`` replaces a strategy's grid;
    ``reranker_options[name]`` adds options to its factory. ``aspects="oracle"`` gives xQuAD/PM2 the gold
    perspectives (their rows are labelled "(oracle aspects)": an upper bound, not a system)."""
    from berds.evaluate.compare import compare_results
    from berds.evaluate.evaluation import evaluate_run, note_unparsed
    from berds.rerank.candidates import check_depth_covers
    from berds.rerank.catalogue import RERANKERS, load_reranker
    from berds.rerank.embeddings import MemoEncoder
    from berds.studies.tuning import CLOSER_TO_ORIGINAL, check_select, tune_reranker

    ks = tuple(sorted({int(k) for k in ks}))
    select = select or f"mrecall@{ks[0]}"
    check_select(select, ks)
    check_depth_covers(depth, ks)
    if tradeoff_split not in ("dev", "test"):
        raise BerdsError(f"tradeoff_split must be 'dev' or 'test', got {tradeoff_split!r}")
    overlap = set(test_run.questions) & set(dev_run.questions)
    if overlap:
        raise BerdsError(f"the dev and test runs share {len(overlap)} question(s), e.g. {sorted(overlap)[:3]} — "
                         "tuning on test questions would overstate every strategy")
    strategies = list(strategies or DEFAULT_STRATEGIES)
    for name in strategies:
        RERANKERS.spec(name)  # unknown names fail now, with suggestions, before any judging
    if stray := sorted(set(grids or {}) - set(strategies)):  # a misspelt name would leave the default grid in use
        raise BerdsError(f"a grid is given for {', '.join(map(repr, stray))}, which this study does not run "
                         f"(strategies: {', '.join(strategies)}) — check the name after --grid, or add it with -s")
    if expanded_test_run is not None and expanded_dev_run is None:
        raise BerdsError("an expanded test run needs its dev run too (or split one run with --split-dev)")
    # the comparison is paired over test questions (bootstrap interval, permutation test): with one question there
    # is no spread to resample, and scipy failed on it after every strategy had been tuned and judged
    for label, part in (("test run", test_run), ("expansion run's test part", expanded_test_run)):
        if part is not None and len(part.questions) == 1:
            raise BerdsError(f"the {label} holds 1 question: comparing strategies (a bootstrap interval and a paired "
                             "permutation test over test questions) needs at least 2 — give more questions, or a "
                             "smaller --split-dev")
    for label, part in (("test", expanded_test_run), ("dev", expanded_dev_run)):
        if part is not None and not part.questions:  # tuning on nothing ended in a misleading --select error
            raise BerdsError(f"the expansion run has no {label} questions (none of its question ids are among the "
                             f"{label} split's) — give the expansion run of the same questions")
    notes: list[str] = []
    if sum(x is not None for x in (expansions, llm, aspects)) > 1:
        raise BerdsError("give one source of perspectives for xquad/pm2: expansions, llm or aspects='oracle'")
    if aspects is not None and aspects != "oracle":
        raise BerdsError(f"aspects={aspects!r}: the only named source is 'oracle'")
    if expansions is None and llm is None and aspects is None:
        skipped = [s for s in strategies if s in ASPECT_STRATEGIES]
        if skipped:
            notes.append(f"{', '.join(skipped)} not run: they need perspectives (--expansions FILE or --llm BACKEND:MODEL)")
        strategies = [s for s in strategies if s not in ASPECT_STRATEGIES]
    memo = encoder if isinstance(encoder, MemoEncoder) else MemoEncoder(encoder)
    aspect_options: dict[str, Any] = {}
    if aspects == "oracle":
        aspect_options["aspects"] = "oracle"
        notes.append("xquad/pm2 use the gold perspectives as aspects (oracle): an upper bound, not a system")
    elif expansions is not None:
        aspect_options["expansions"] = str(expansions)
    elif llm is not None:
        from berds.llm import load_llm_by_name
        from berds.rerank.explicit import MemoExpander
        from berds.retrievers.expansion import LLMExpander

        # one model, each question's perspectives written once for the whole grid
        aspect_options["expander"] = MemoExpander(LLMExpander(load_llm_by_name(llm, **dict(llm_options or {}))))

    def evaluate(run: Run) -> Any:
        result = evaluate_run(run, judge, ks, cache=judgement_cache, allow_short=allow_short,
                              allow_unparsed=allow_unparsed, progress=progress)
        if allow_unparsed:
            note_unparsed([result])
        return result

    def factory(name: str):
        extra = dict((reranker_options or {}).get(name, {}))
        if name in ASPECT_STRATEGIES:
            extra = {**aspect_options, **extra}

        def make(value: float) -> Any:
            probe = RERANKERS.load(name)
            parameter = getattr(probe, "parameter", None) or "lam"
            return load_reranker(name, **{parameter: value}, encoder=memo, embedding_cache=embedding_cache,
                                 depth=depth, **extra)
        return make

    base_eval = evaluate(test_run)
    rows = [StudyRow("base run", "none", None, None, test_run, dict(base_eval.averages["all"]))]
    evals = [base_eval]
    tuning: dict[str, Any] = {}
    tradeoff: list[dict[str, Any]] = []

    def study_one(label: str, name: str, dev: Run, test: Run) -> None:
        cls = RERANKERS.load(name)
        parameter = getattr(cls, "parameter", None)
        grid = tuple((grids or {}).get(name, getattr(cls, "grid", ())))
        if not parameter or not grid:
            raise BerdsError(f"reranker {name!r} declares no tunable parameter/grid; pass grids={{{name!r}: [...]}}")
        make = factory(name)
        result = tune_reranker(dev, judge, make, grid, parameter=parameter, method=label, ks=ks, select=select,
                               judgement_cache=judgement_cache, allow_short=allow_short,
                               allow_unparsed=allow_unparsed, progress=progress, prefer=getattr(cls, "closer_to_original", None)
                               or CLOSER_TO_ORIGINAL.get(parameter, "larger"))
        tuning[label] = result.to_json()
        points = result.rows[1:]
        if tradeoff_split == "test":
            reranker = make(grid[0])
            prepared = reranker.prepare(test, progress=progress)
            points = []
            for value in sorted(set(grid)):
                reranked = make(value).rerank(test, candidates=prepared)
                points.append({parameter: value, **evaluate(reranked).averages["all"]})
        for point in points:
            tradeoff.append({"setting": label, "parameter": parameter, "value": point[parameter],
                             "split": tradeoff_split, **{k: v for k, v in point.items() if "@" in k}})
        reranked = make(result.chosen).rerank(test)
        ev = evaluate(reranked)
        rows.append(StudyRow(label, name, parameter, result.chosen, reranked, dict(ev.averages["all"])))
        evals.append(ev)

    for name in strategies:
        oracle = aspects == "oracle" and name in ASPECT_STRATEGIES
        study_one(f"{name} (oracle aspects)" if oracle else name, name, dev_run, test_run)
    if expanded_test_run is not None:
        if set(expanded_test_run.questions) != set(test_run.questions):
            notes.append("the expansion run's test questions differ from the base run's; compared on shared ones")
        ev = evaluate(expanded_test_run)
        rows.append(StudyRow("expansion", "expansion", None, None, expanded_test_run, dict(ev.averages["all"])))
        evals.append(ev)
        study_one("expansion + mmr", "mmr", expanded_dev_run, expanded_test_run)
    comparison = compare_results(evals, [r.label for r in rows], ks=ks, baseline=0, n_resamples=n_resamples,
                                 alpha=alpha, seed=seed)
    from berds.evaluate.compare import repeat_notes

    # a ranking that repeats passages (an expansion run merged as the study did): repeated slots, Precision once
    comparison.notes += repeat_notes([r.run for r in rows], evals, [r.label for r in rows], ks)
    notes += comparison.notes
    return DiversifyStudy(rows, comparison, tuning, tradeoff, ks, getattr(judge, "id", ""), list(dev_run.questions),
                          list(test_run.questions), notes)


def plot_tradeoff(points: Sequence[Mapping[str, Any]], path: str | Path, *, k: int = 5,
                  chosen: Mapping[str, float] | None = None, base: Mapping[str, float] | None = None,
                  judge: str | None = None, n: int | None = None) -> Path:
    """MRecall@k (x) against Precision@k (y), one marker shape per strategy and a line through its parameter
    values, each point labelled with its value (``λ=0.9``); the chosen value is ringed. Strategies are drawn
    in turn with their own marker and line style, so one lying on another still shows (MMR's series hid under
    the others). The title names the split the points were measured on, the judge and n."""
    from berds.evaluate.report import _figure, _save, figure_caption

    fig = _figure(6.5, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    by_setting: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        by_setting.setdefault(p["setting"], []).append(p)
    markers, styles = "osD^vP*X", ["-", "--", "-.", ":"]
    for i, (setting, pts) in enumerate(by_setting.items()):
        pts = sorted(pts, key=lambda p: p["value"])
        xs = [100 * p[f"mrecall@{k}"] for p in pts]
        ys = [100 * p[f"precision@{k}"] for p in pts]
        # the later ones smaller and hollow: one on top of another leaves both visible
        line = ax.plot(xs, ys, marker=markers[i % len(markers)], markersize=max(7 - 1.5 * i, 3.5), linewidth=1,
                       linestyle=styles[i % len(styles)], label=setting, fillstyle="full" if i == 0 else "none",
                       zorder=2 + i)[0]
        symbol = {"lambda": "λ", "lam": "λ"}.get(str(pts[0].get("parameter")), str(pts[0].get("parameter")))
        for p, x, y in zip(pts, xs, ys):
            ax.annotate(f"{symbol}={p['value']:g}", (x, y), fontsize=6, color=line.get_color(),
                        xytext=(4, 3 + 7 * i), textcoords="offset points")
        if chosen and setting in chosen:
            for p, x, y in zip(pts, xs, ys):
                if p["value"] == chosen[setting]:
                    ax.plot([x], [y], marker="o", markersize=11, fillstyle="none", color=line.get_color(),
                            zorder=10)
    if base:
        ax.plot([100 * base[f"mrecall@{k}"]], [100 * base[f"precision@{k}"]], marker="*", markersize=12,
                color="black", linestyle="none", label="original ranking", zorder=11)
    if chosen:
        ax.plot([], [], marker="o", markersize=11, fillstyle="none", color="grey", linestyle="none",
                label="chosen (ringed)")
    splits = {p.get("split", "dev") for p in points}
    ax.set_title(f"MRecall@{k} vs Precision@{k}, each strategy over its parameter grid\n"
                 f"{figure_caption(judge, n, splits.pop() if len(splits) == 1 else None)}", fontsize=9)
    ax.set_xlabel(f"MRecall@{k} (%)")
    ax.set_ylabel(f"Precision@{k} (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    return _save(fig, path)


def _slug(label: str) -> str:
    return label.replace(" (oracle aspects)", "-oracle").replace(" ", "").replace("+", "-")


def check_study_out(out: str | Path, *, overwrite: bool = False) -> None:
    """Refuse, before any work, an ``out`` that holds a study, unless ``overwrite``."""
    if (Path(out) / "study.json").exists() and not overwrite:
        raise BerdsError(f"{out} already holds a study — choose another --out or pass --overwrite")


def write_study(study: DiversifyStudy, out: str | Path, *, base_dev: Mapping[str, float] | None = None,
                labelled: bool = False) -> dict[str, Path]:
    """Write results.md/.csv, comparison.md/.csv, study.json, tradeoff.png and the reranked test runs.
    ``labelled``: corrected estimates will be written beside them, and the tables say where.

    The runs of an earlier study in ``out`` whose settings this one lacks are removed: left there, they would
    read as this study's."""
    import json
    import shutil

    from berds.evaluate.report import write_table
    from berds.io import write_json
    from berds.runs import save_run

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "study.json").is_file():
        try:
            earlier = {_slug(r["label"]) for r in json.loads((out / "study.json").read_text(encoding="utf-8"))["rows"][1:]}
        except (OSError, ValueError, KeyError, TypeError):
            earlier = set()
        for slug in earlier - {_slug(r.label) for r in study.rows[1:]}:
            if (out / "runs" / slug / "manifest.json").is_file():
                shutil.rmtree(out / "runs" / slug)
        # the earlier study's corrected estimates (`--labels`) were of its runs: a study without labels must not
        # sit beside them (with labels, the command writes them afresh after this)
        for name in ("corrected.json", "corrected.md", "corrected.csv"):
            (out / name).unlink(missing_ok=True)
    title, header, body = study.table()
    notes = list(study.notes)
    if study.mixed_questions():
        counts = ", ".join(f"{r.label} {len(r.run.questions)}" for r in study.rows)
        notes.insert(0, f"the rows are not averaged over the same test questions ({counts}); each Δ compares a row "
                        "with the base run on the questions both hold")
    if labelled:
        notes.insert(0, "these figures take the judge's verdicts as true; corrected.md holds the test runs' estimates "
                        "corrected with the human labels (--labels), with 95% intervals")
    files = {f"results.{k}": v for k, v in write_table(out / "results", header, body, title=title, notes=notes).items()}
    c_title, c_header, c_rows = study.comparison.table()
    files.update({f"comparison.{k}": v for k, v in write_table(out / "comparison", c_header, c_rows, title=c_title,
                                                               notes=notes).items()})
    write_json(out / "study.json", study.to_json())
    files["json"] = out / "study.json"
    chosen = {r.label: r.chosen for r in study.rows if r.chosen is not None}
    on_test = any(p.get("split") == "test" for p in study.tradeoff)
    files["tradeoff.png"] = plot_tradeoff(study.tradeoff, out / "tradeoff.png", k=study.ks[0], chosen=chosen,
                                          base=base_dev, judge=study.judge_id,
                                          n=len(study.test_questions if on_test else study.dev_questions))
    for row in study.rows[1:]:
        files[f"run:{row.label}"] = save_run(row.run, out / "runs" / _slug(row.label), overwrite=True)
    study.files = files
    return files


def study_diversify_paths(
    run: str | Path,
    out: str | Path,
    judge: str | Any,
    *,
    dev_run: str | Path | None = None,
    split_dev: float | None = None,
    expanded_run: str | Path | None = None,
    expanded_dev_run: str | Path | None = None,
    model: str | None = None,
    pooling: str | None = None,
    encoder: Any = None,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    embedding_cache: str | Path | None = None,
    overwrite: bool = False,
    labels: Any = None,
    population: str = "questions",
    **options: Any,
) -> DiversifyStudy:
    """``berds study diversify``: load and split the runs, build the judge and encoder, run, write ``out`` (a study
    already there is refused unless ``overwrite``). ``embedding_cache=None`` keeps embeddings in memory only.

    ``labels`` (a labelled-pairs file, or what ``berds.trust.ppi.read_labels`` returned): human labels of whole test
    questions; each test run and each strategy's difference from the base run is also estimated with them
    (``study.corrected``, written to corrected.md/.csv/.json; ``population`` as in ``berds eval --population``)."""
    from berds.evaluate.analyses.common import build_judge
    from berds.evaluate.cache import JudgementCache
    from berds.evaluate.evaluation import evaluate_run
    from berds.rerank.embeddings import DEFAULT_MODEL, DEFAULT_POOLING, EmbeddingCache, load_encoder
    from berds.runs import load_run as load_any_run

    if (dev_run is None) == (split_dev is None):
        raise BerdsError("give the dev questions: either --dev-run DEV_RUN, or --split-dev SHARE to split RUN")
    check_study_out(out, overwrite=overwrite)
    if labels is None and population != "questions":
        raise BerdsError("--population shapes the corrected estimates: give --labels too")
    if labels is not None:  # read and checked before any reranking or judging
        from berds.trust.ppi import check_options, read_labels

        check_options(population, "1")
        if isinstance(labels, (str, Path)):
            labels = read_labels(labels)

    def load_run(path: Any) -> Run:  # --allow-short takes questions that got no passages, as eval and tune do
        return load_any_run(path, allow_empty=bool(options.get("allow_short")))

    test = load_run(run)
    notes = []
    if dev_run is not None:
        dev = load_run(dev_run)
    else:
        dev, test = split_questions(test, float(split_dev))
        notes.append(f"no dev run: {len(dev.questions)} of {len(dev.questions) + len(test.questions)} questions "
                     f"(sorted by sha256 of their id) are dev, the other {len(test.questions)} test")
    exp_test = exp_dev = None
    if expanded_run is not None:
        exp_test = load_run(expanded_run)
        if expanded_dev_run is not None:
            exp_dev = load_run(expanded_dev_run)
        else:
            exp_test = subset(exp_test, [q for q in exp_test.questions if q in test.questions], "test")
            exp_dev_full = load_run(expanded_run)
            exp_dev = subset(exp_dev_full, [q for q in exp_dev_full.questions if q in dev.questions], "dev")
    if encoder is None:
        encoder = load_encoder(model or DEFAULT_MODEL, pooling=pooling or DEFAULT_POOLING)
    judge_obj = build_judge(judge, judge_options)
    emb_cache = EmbeddingCache(embedding_cache) if embedding_cache is not None else None
    with JudgementCache(cache_path) as cache:
        study = study_diversify(test, dev, judge_obj, encoder=encoder, embedding_cache=emb_cache,
                                judgement_cache=cache, expanded_test_run=exp_test, expanded_dev_run=exp_dev, **options)
        base_dev = dict(evaluate_run(dev, judge_obj, study.ks, cache=cache, allow_short=options.get("allow_short", False),
                                     allow_unparsed=options.get("allow_unparsed", False), progress=False).averages["all"])
    study.notes = notes + study.notes
    on_dev = options.get("tradeoff_split", "dev") == "dev"
    write_study(study, out, base_dev=base_dev if on_dev else study.rows[0].metrics, labelled=labels is not None)
    if labels is not None:  # the study's test runs, every verdict already in the cache
        from berds.trust.ppi import corrected_runs, write_corrected

        study.corrected = corrected_runs(
            [row.run for row in study.rows], judge, labels, ks=study.ks, names=[row.label for row in study.rows],
            baseline=study.rows[0].label, judge_options=judge_options, cache_path=cache_path,
            allow_short=bool(options.get("allow_short")), allow_unparsed=True, population=population)
        study.files.update(write_corrected(study.corrected, out))
    return study
