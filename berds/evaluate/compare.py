"""Paired comparison of runs over questions: is a difference in MRecall@k / Precision@k real?

For every run against the baseline and every metric, over the questions both runs answer:

* the mean of the per-question differences (run − baseline);
* a bootstrap confidence interval of that mean (``scipy.stats.bootstrap``, BCa; percentile when BCa cannot
  be computed, e.g. all differences equal);
* a paired randomization test (``scipy.stats.permutation_test`` with ``permutation_type="samples"``: the
  two runs' values are swapped within questions; exact when ``2**questions <= n_resamples``), two-sided;
* Holm's correction (``statsmodels``) of the p-values of one metric across the runs compared with the
  baseline (the family is one metric; with one compared run it changes nothing).

``berds compare RUN_A RUN_B [...]`` prints it (``berds.evaluate.report.write_compare`` writes it);
``berds report --baseline`` marks what is significant.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.lazy import require


@dataclass
class Comparison:
    """One run against the baseline on one metric."""

    run: str
    baseline: str
    metric: str
    questions: int
    baseline_mean: float
    run_mean: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    significant: bool
    ci_method: str


@dataclass
class CompareResult:
    KIND = "compare"

    baseline: str
    comparisons: list[Comparison]
    judge_id: str = ""
    ks: tuple[int, ...] = (5,)
    n_resamples: int = 10000
    alpha: float = 0.05
    confidence: float = 0.95
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def find(self, run: str, metric: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.run == run and c.metric == metric), None)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.KIND, "baseline": self.baseline, "judge": self.judge_id, "ks": list(self.ks),
                "n_resamples": self.n_resamples, "alpha": self.alpha, "confidence": self.confidence,
                "seed": self.seed, "correction": "holm, per metric across the compared runs",
                "test": "paired permutation (scipy.stats.permutation_test), two-sided",
                "interval": "bootstrap of the mean difference (scipy.stats.bootstrap)",
                "notes": self.notes, "comparisons": [asdict(c) for c in self.comparisons]}

    def table(self, *, narrow: bool = False) -> tuple[str, list[str], list[list[str]]]:
        """Title, header, rows; ``narrow``: five or six columns for an 80-column terminal, each run named on a row
        of its own above its metrics."""
        if narrow:
            # One line per comparison: each run on a line of its own above its metrics (a long run name no longer
            # folds every row), the question count in the title when every row has the same, compact cells
            counts = {c.questions for c in self.comparisons}
            n = ["n"] if len(counts) > 1 else []
            header = ["run / metric", *n, "base %", "run %", "Δ [CI]", "p (Holm)"]
            rows = []
            for run in dict.fromkeys(c.run for c in self.comparisons):
                rows.append([run, *[""] * (len(header) - 1)])
                rows.extend(["  " + c.metric.replace("mrecall", "MRecall").replace("precision", "Prec"),
                             *([str(c.questions)] if n else []),
                             f"{100 * c.baseline_mean:.1f}", f"{100 * c.run_mean:.1f}",
                             f"{100 * c.difference:+.1f} [{100 * c.ci_low:+.1f},{100 * c.ci_high:+.1f}]",
                             f"{c.p_value:.4f} ({c.p_holm:.4f})" + ("*" if c.significant else "")]
                             for c in self.comparisons if c.run == run)
            on = f" on {next(iter(counts))} questions" if len(counts) == 1 else ""
            return (f"paired comparison against {self.baseline}{on} (judge {self.judge_id}); Δ in points, "
                    f"{100 * self.confidence:g}% CI; p: permutation test (Holm-corrected); *: significant at "
                    f"α={self.alpha:g}", header, rows)
        header = ["run", "metric", "questions", "baseline %", "run %", "Δ (points)", f"{100 * self.confidence:g}% CI",
                  "p", "p (Holm)", f"significant (α={self.alpha:g})"]
        rows = [[c.run, c.metric, str(c.questions), f"{100 * c.baseline_mean:.1f}", f"{100 * c.run_mean:.1f}",
                 f"{100 * c.difference:+.1f}", f"[{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}]",
                 f"{c.p_value:.4f}", f"{c.p_holm:.4f}", "yes" if c.significant else "no"] for c in self.comparisons]
        return f"paired comparison against {self.baseline} (judge {self.judge_id})", header, rows


def paired_difference(baseline: np.ndarray, other: np.ndarray, *, n_resamples: int = 10000, confidence: float = 0.95,
                      seed: int = 0) -> tuple[float, float, float, float, str]:
    """``(mean difference, CI low, CI high, two-sided p, CI method)`` of ``other − baseline`` per question."""
    stats = require("scipy.stats", extra="analysis", purpose="paired significance tests")
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise BerdsError(f"paired comparison needs two equal-length, non-empty lists of per-question values "
                         f"(got {a.shape} and {b.shape})")
    d = b - a
    mean = float(d.mean())

    def mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(y - x, axis=axis)

    perm = stats.permutation_test((a, b), mean_difference, permutation_type="samples", vectorized=True,
                                  n_resamples=n_resamples, alternative="two-sided", rng=np.random.default_rng(seed))
    p = float(min(1.0, perm.pvalue))
    if np.all(d == d[0]):
        return mean, float(d[0]), float(d[0]), p, "all differences equal"
    method = "BCa"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa on small or lumpy samples warns and gives NaN: fall back below
        ci = stats.bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=n_resamples, method="BCa",
                             rng=np.random.default_rng(seed)).confidence_interval
        low, high = float(ci.low), float(ci.high)
        if not (np.isfinite(low) and np.isfinite(high)):
            method = "percentile"
            ci = stats.bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                                 method="percentile", rng=np.random.default_rng(seed)).confidence_interval
            low, high = float(ci.low), float(ci.high)
    return mean, low, high, p, method


def holm(p_values: Sequence[float], alpha: float) -> tuple[list[float], list[bool]]:
    """Holm-adjusted p-values and rejections (statsmodels' ``multipletests``)."""
    if not p_values:
        return [], []
    multitest = require("statsmodels.stats.multitest", extra="analysis", purpose="Holm's correction")
    reject, adjusted, _, _ = multitest.multipletests(list(p_values), alpha=alpha, method="holm")
    return [float(x) for x in adjusted], [bool(x) for x in reject]


def compare_per_question(
    values: Mapping[str, Mapping[str, Mapping[str, float]]],
    *,
    baseline: str,
    metrics: Sequence[str],
    n_resamples: int = 10000,
    alpha: float = 0.05,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[list[Comparison], list[str]]:
    """``values[label][qid][metric]`` -> comparisons of every other label against ``baseline`` (and notes)."""
    if baseline not in values:
        raise BerdsError(f"unknown baseline {baseline!r}; the runs are: {', '.join(values)}")
    if not 0 < alpha < 1:
        raise BerdsError(f"alpha must be between 0 and 1, got {alpha}")
    notes = []
    base = values[baseline]
    others = [label for label in values if label != baseline]
    if not others:
        raise BerdsError("compare needs at least two runs: the baseline and one more")
    found: dict[tuple[str, str], tuple] = {}
    for label in others:
        common = [q for q in base if q in values[label]]
        if not common:
            raise BerdsError(f"runs {baseline!r} and {label!r} share no question")
        if len(common) < max(len(base), len(values[label])):
            notes.append(f"{label}: compared on the {len(common)} questions it shares with {baseline}")
        for metric in metrics:
            a = np.array([base[q][metric] for q in common])
            b = np.array([values[label][q][metric] for q in common])
            found[(label, metric)] = (len(common), float(a.mean()), float(b.mean()),
                                      *paired_difference(a, b, n_resamples=n_resamples, confidence=confidence, seed=seed))
    comparisons = []
    for metric in metrics:
        labels = [label for label in others]
        adjusted, reject = holm([found[(label, metric)][6] for label in labels], alpha)
        for label, p_adj, rej in zip(labels, adjusted, reject):
            n, base_mean, run_mean, diff, low, high, p, method = found[(label, metric)]
            comparisons.append(Comparison(label, baseline, metric, n, base_mean, run_mean, diff, low, high, p, p_adj,
                                          rej, method))
    order = {label: i for i, label in enumerate(others)}
    comparisons.sort(key=lambda c: (order[c.run], list(metrics).index(c.metric)))
    return comparisons, notes


def metric_names(ks: Sequence[int]) -> list[str]:
    return [f"mrecall@{k}" for k in ks] + [f"precision@{k}" for k in ks]


def per_question_values(support: Mapping[str, np.ndarray], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    from berds.evaluate.metrics import question_metrics

    return {qid: question_metrics(m, ks) for qid, m in support.items()}


def compare_results(results: Sequence[Any], labels: Sequence[str], *, ks: Sequence[int] = (5,),
                    baseline: str | int = 0, **options: Any) -> CompareResult:
    """Compare ``EvalResult``s (judged at least to ``max(ks)``) — the first, or ``baseline``, against the rest."""
    ks = tuple(sorted({int(k) for k in ks}))
    base_label = labels[baseline] if isinstance(baseline, int) else baseline
    values = {label: per_question_values({q: m[:, :ks[-1]] for q, m in res.support.items()}, ks)
              for label, res in zip(labels, results)}
    comparisons, notes = compare_per_question(values, baseline=base_label, metrics=metric_names(ks), **options)
    return CompareResult(base_label, comparisons, judge_id=getattr(results[0], "judge_id", ""), ks=ks,
                         n_resamples=options.get("n_resamples", 10000), alpha=options.get("alpha", 0.05),
                         confidence=options.get("confidence", 0.95), seed=options.get("seed", 0), notes=notes)


def check_shared_questions(runs: Sequence[Any], labels: Sequence[str], baseline: int) -> None:
    """Refuse, before judging, a run that shares no question with the baseline (found only after judging before)."""
    base = runs[baseline].questions
    for run, label in zip(runs, labels):
        if run is not runs[baseline] and not any(q in base for q in run.questions):
            raise BerdsError(f"runs {labels[baseline]!r} and {label!r} share no question — compare runs of one "
                             "question set")


def resolve_baseline(baseline: str | None, labels: Sequence[str], paths: Sequence[str | Path]) -> int:
    """The index of the baseline run given by label or path (default: the first run)."""
    if baseline is None:
        return 0
    for i, (label, path) in enumerate(zip(labels, paths)):
        if baseline == label or Path(baseline) == Path(path):
            return i
    raise BerdsError(f"--baseline (baseline=) {baseline!r} is none of the runs: {', '.join(labels)}")


def compare_paths(run_paths: Sequence[str | Path], judge: str | Any, *, ks: Sequence[int] = (5,),
                  baseline: str | None = None, judge_options: Mapping[str, Any] | None = None,
                  cache_path: str | Path | None = None, allow_short: bool = False, allow_unparsed: bool = False,
                  progress: bool = False, **options: Any) -> CompareResult:
    """``berds compare``: judge the runs (through the cache) and compare them with the baseline."""
    from berds.evaluate.analyses.common import check_same_question_per_id, judge_runs, run_labels
    from berds.runs import load_run

    if len(run_paths) < 2:
        raise BerdsError("compare needs at least two runs: the baseline and one more")
    alpha = options.get("alpha", 0.05)
    if not 0 < alpha < 1:  # before judging, which can take hours
        raise BerdsError(f"alpha must be between 0 and 1, got {alpha}")
    ks = tuple(sorted({int(k) for k in ks}))
    if not ks or ks[0] < 1:
        raise BerdsError(f"--k values (ks=) must be positive integers, got {list(ks)}")
    runs = [load_run(p, allow_empty=allow_short) for p in run_paths]
    labels = run_labels(runs, run_paths)
    check_same_question_per_id(runs, labels)
    index = resolve_baseline(baseline, labels, run_paths)
    check_shared_questions(runs, labels, index)
    results = judge_runs(runs, judge, ks[-1], judge_options=judge_options, cache_path=cache_path,
                         allow_short=allow_short, allow_unparsed=allow_unparsed, progress=progress)
    compared = compare_results(results, labels, ks=ks, baseline=index, **options)
    compared.notes += repeat_notes(runs, results, labels, ks)
    return compared


def repeat_notes(runs: Sequence[Any], results: Sequence[Any], labels: Sequence[str], ks: Sequence[int]) -> list[str]:
    """One line per run whose rankings repeat passages (the study's expansion merge keeps them): how many top-k
    slots repeat a passage ranked above, and Precision@k with each passage counted once beside Precision@k
    as compared (every slot counts, as in the study)."""
    from berds.evaluate.evaluation import run_repeats
    from berds.evaluate.metrics import question_metrics

    lines = []
    for run, result, label in zip(runs, results, labels):
        support = {q: m[:, :max(ks)] for q, m in result.support.items()}
        repeats = run_repeats(run, support, ks)
        if not repeats:
            continue
        for k in ks:
            slots = int(sum(q[f"repeats@{k}"] for q in repeats.values()))
            once = sum(q[f"precision_once@{k}"] for q in repeats.values()) / len(repeats)
            as_is = sum(question_metrics(m, (k,))[f"precision@{k}"] for m in support.values()) / len(support)
            lines.append(f"{label}: {slots} of {k * len(repeats)} top-{k} slots repeat a passage ranked above; "
                         f"Precision@{k} {100 * as_is:.1f}, with each passage counted once {100 * once:.1f}")
    return lines
