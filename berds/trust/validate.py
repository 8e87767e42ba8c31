"""How valid is a perspective judge? Compare it with human labels, and judges with each other.

``validate(labelled, judges)`` judges every labelled pair with each judge (through the judgement cache,
so a pair is never judged twice) and reports, per judge, with percentile-bootstrap 95% intervals:

* accuracy   = (TP + TN) / N
* precision  = TP / (TP + FP)            (0 when the judge says Yes to nothing)
* recall     = TP / (TP + FN)            (0 when there are no gold positives)
* F1         = 2·TP / (2·TP + FP + FN)   (0 when there is no positive, gold or predicted)
* positive share = (TP + FP) / N         (how often the judge says Yes; compare with the gold share)
* Cohen's κ  = (p_o − p_e) / (1 − p_e), p_o = observed agreement with the gold labels,
  p_e = p_gold·p_judge + (1 − p_gold)(1 − p_judge) (NaN when p_e = 1: both constant)

and for every two judges: raw agreement, κ between them, and McNemar's test on which pairs each got
right (``mcnemar``). These are small pure functions over boolean arrays, tested on hand-computed cases.

Intervals resample pairs by default. Pairs of one question share its passages and perspectives, so their
errors are correlated and pair resampling makes intervals too narrow when there are few questions;
``resample="questions"`` (``--resample questions``) resamples whole questions instead (a cluster bootstrap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.types import JudgePair, Verdict

METRIC_NAMES = ("accuracy", "precision", "recall", "f1", "positive_share", "kappa")
RESAMPLE_UNITS = ("pairs", "questions")


# ----------------------------------------------------------------------------------- statistics


def _as_bool(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, got shape {arr.shape}")
    return arr.astype(bool)


def confusion_counts(gold: Any, pred: Any) -> tuple[int, int, int, int]:
    """``(TP, FP, FN, TN)`` of predictions against gold labels (both boolean, same length)."""
    g, p = _as_bool(gold, "gold"), _as_bool(pred, "pred")
    if g.shape != p.shape:
        raise ValueError(f"gold has {g.size} labels but pred has {p.size}")
    return int((g & p).sum()), int((~g & p).sum()), int((g & ~p).sum()), int((~g & ~p).sum())


def _metrics_from_counts(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, tn: np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised metrics over arrays of confusion counts (one entry per bootstrap sample)."""
    tp, fp, fn, tn = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn))
    n = tp + fp + fn + tn
    with np.errstate(divide="ignore", invalid="ignore"):
        accuracy = (tp + tn) / n
        precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
        recall = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 0.0)
        f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
        share = (tp + fp) / n
        p_gold = (tp + fn) / n
        p_o = accuracy
        p_e = p_gold * share + (1 - p_gold) * (1 - share)
        kappa = np.where(p_e < 1, (p_o - p_e) / np.where(p_e < 1, 1 - p_e, 1.0), np.nan)
    return {"accuracy": accuracy, "precision": precision, "recall": recall, "f1": f1,
            "positive_share": share, "kappa": kappa}


def classification_metrics(gold: Any, pred: Any) -> dict[str, float]:
    """Accuracy, precision, recall, F1, positive share and Cohen's κ (formulas in the module docstring)."""
    counts = confusion_counts(gold, pred)
    if sum(counts) == 0:
        raise ValueError("no labels to score")
    return {k: float(v) for k, v in _metrics_from_counts(*counts).items()}


def rank_auc(gold: Any, scores: Any) -> float:
    """The area under the ROC curve of ``scores`` for the ``gold`` labels, from ranks (the Mann–Whitney U
    statistic over n₁·n₀; tied scores count one half)::

        AUC = (Σ rank of the positives − n₁(n₁ + 1)/2) / (n₁ · n₀)

    NaN when a class is empty or a score is missing (a judge that gives no P(Yes))."""
    from berds.lazy import require

    g = _as_bool(gold, "gold")
    x = np.asarray(scores, dtype=float)
    n1, n0 = int(g.sum()), int((~g).sum())
    if not n1 or not n0 or x.size != g.size or np.isnan(x).any():
        return float("nan")
    ranks = require("scipy.stats", extra="analysis", purpose="the AUC of judge validate").rankdata(x)
    return float((ranks[g].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def cohen_kappa(a: Any, b: Any) -> float:
    """Cohen's κ between two binary raters: ``(p_o − p_e) / (1 − p_e)``; NaN when ``p_e = 1``.

    ``p_o`` is the share of items where they agree; ``p_e = p_a·p_b + (1 − p_a)(1 − p_b)`` is the agreement
    expected by chance from each rater's Yes rate.
    """
    return classification_metrics(a, b)["kappa"]


_BLOCK = 1 << 20  # indices drawn at a time by the bootstrap (8 MB)


def _resampled_counts(rng: Any, n_boot: int, size: int, counts_of: Any, *, values_per_index: int = 1) -> np.ndarray:
    """``counts_of(idx)`` (rows of 4 confusion counts) for ``n_boot`` resamples of ``size`` units drawn with
    replacement, in blocks of about ``_BLOCK`` values (``values_per_index`` of them gathered per index drawn):
    100,000 resamples of 3,000 pairs held 3.5 GB at once. Row blocks drawn one after another are the very numbers
    of one whole draw, so intervals are unchanged."""
    out = np.empty((n_boot, 4))
    step = max(1, _BLOCK // (values_per_index * max(size, 1)))
    for start in range(0, n_boot, step):
        idx = rng.integers(0, size, size=(min(step, n_boot - start), size))
        out[start:start + len(idx)] = counts_of(idx)
    return out


def bootstrap_intervals(
    gold: Any, pred: Any, *, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95, groups: Any = None,
    undefined: dict[str, int] | None = None,
) -> dict[str, tuple[float, float]]:
    """Percentile-bootstrap intervals of every metric: resample the N pairs with replacement ``n_boot`` times.

    With ``groups`` (one label per pair, e.g. its question), the G groups are resampled instead, each drawn
    group bringing all its pairs (a cluster bootstrap; groups sort by label). Returns ``{metric: (low, high)}``;
    NaN samples (κ on a constant resample) are left out of the percentiles; ``undefined``, a dict, gets how many
    resamples each metric left out (the intervals then hold for the resamples where it is defined).
    """
    g, p = _as_bool(gold, "gold"), _as_bool(pred, "pred")
    if n_boot < 1:
        return {name: (float("nan"), float("nan")) for name in METRIC_NAMES}
    rng = np.random.default_rng(seed)
    if groups is None:
        def pair_counts(idx: np.ndarray) -> np.ndarray:
            gs, ps = g[idx], p[idx]
            return np.stack([(gs & ps).sum(1), (~gs & ps).sum(1), (gs & ~ps).sum(1), (~gs & ~ps).sum(1)], axis=1)

        samples = _metrics_from_counts(*_resampled_counts(rng, n_boot, g.size, pair_counts).T)
    else:
        labels = np.asarray(groups, dtype=object)
        if labels.shape != g.shape:
            raise ValueError(f"groups has {labels.size} labels but there are {g.size} pairs")
        _, code = np.unique(labels.astype(str), return_inverse=True)
        n_groups = int(code.max()) + 1 if code.size else 0
        # confusion counts per group, then per resample the sum over the drawn groups
        per_group = np.stack([np.bincount(code, weights=m, minlength=n_groups)
                              for m in (g & p, ~g & p, g & ~p, ~g & ~p)], axis=1)
        drawn = _resampled_counts(rng, n_boot, n_groups, lambda idx: per_group[idx].sum(1), values_per_index=4)
        samples = _metrics_from_counts(*drawn.T)
    tail = 100 * (1 - confidence) / 2
    out = {}
    for name, values in samples.items():
        defined = ~np.isnan(values)
        if undefined is not None:
            undefined[name] = int(values.size - defined.sum())
        values = values[defined]
        out[name] = ((float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail)))
                     if values.size else (float("nan"), float("nan")))
    return out


@dataclass(frozen=True)
class McNemarResult:
    """McNemar's test on the discordant pairs ``b`` (only the first is right / says Yes) and ``c``.

    * exact:  two-sided binomial, ``p = min(1, 2 · Σ_{i ≤ min(b,c)} C(b+c, i) / 2^(b+c))``
    * χ²:     with continuity correction, ``χ² = max(0, |b − c| − 1)² / (b + c)``, 1 degree of freedom,
              ``p = erfc(√(χ²/2))``
    Both p-values are 1 when ``b + c = 0``.
    """

    b: int
    c: int
    exact_p: float
    chi2: float
    chi2_p: float

    def to_json(self) -> dict[str, float]:
        return {"b": self.b, "c": self.c, "exact_p": self.exact_p, "chi2": self.chi2, "chi2_p": self.chi2_p}


def mcnemar(b: int, c: int) -> McNemarResult:
    """McNemar's test from the two discordant counts (see ``McNemarResult``)."""
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return McNemarResult(b, c, 1.0, 0.0, 1.0)
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    exact = min(1.0, 2 * tail / 2**n)  # Python int / int is exact then rounded once, even for huge n
    chi2 = max(0, abs(b - c) - 1) ** 2 / n
    return McNemarResult(b, c, exact, chi2, math.erfc(math.sqrt(chi2 / 2)))


def mcnemar_paired(first: Any, second: Any) -> McNemarResult:
    """McNemar on two paired boolean outcomes: ``b`` = first True & second False, ``c`` = the reverse.

    Pass correctness arrays to compare two judges' accuracy, or Yes-answers to test whether a change
    of prompt shifts how often a judge says Yes.
    """
    a, s = _as_bool(first, "first"), _as_bool(second, "second")
    if a.shape != s.shape:
        raise ValueError(f"paired outcomes differ in length: {a.size} vs {s.size}")
    return mcnemar(int((a & ~s).sum()), int((~a & s).sum()))


# ----------------------------------------------------------------------------------- judging


def judge_pairs(
    judge: Any,
    pairs: Sequence[JudgePair],
    *,
    cache: Any = None,
    overwrite: str = "only-missing",
    batch_size: int | None = None,
    progress: bool = True,
    description: str = "judging",
) -> list[Verdict]:
    """Verdicts for ``pairs`` in order, reusing the judgement cache and committing new ones batch by batch.

    Duplicate pairs (same perspective and passage text) are judged once. ``overwrite`` is as in
    ``evaluate_run`` (``only-missing``, ``always``, ``never``).
    """
    from berds.evaluate.cache import unique_pairs
    from berds.evaluate.evaluation import OVERWRITE_POLICIES
    from berds.evaluate.judging import judge_missing

    if overwrite not in OVERWRITE_POLICIES:
        raise BerdsError(f"unknown overwrite policy {overwrite!r}; use one of {', '.join(OVERWRITE_POLICIES)}")
    needed = unique_pairs(pairs)
    found: dict[tuple[str, str], Verdict] = {}
    if cache is not None and overwrite != "always":
        for p, v in zip(needed, cache.get_many(judge.id, judge.prompt_version, needed)):
            if v is not None:
                found[(p.perspective, p.passage)] = v
    missing = [p for p in needed if (p.perspective, p.passage) not in found]
    if missing and overwrite == "never":
        raise BerdsError(f"{len(missing)} of {len(needed)} pairs are not cached for judge {judge.id!r} and "
                         "overwrite=never forbids judging them — use only-missing")
    if missing:
        bs = batch_size or int(getattr(judge, "batch_size", 0) or 64) * 4
        found.update(judge_missing(judge, missing, cache, batch_size=bs, progress=progress, description=description))
    return [found[(p.perspective, p.passage)] for p in pairs]


def is_unparsed(verdict: Verdict) -> bool:
    return bool(verdict.detail and verdict.detail.get("unparsed"))


# ----------------------------------------------------------------------------------- reports


@dataclass
class JudgeValidity:
    """One judge's scores on a labelled set (``intervals`` are bootstrap 95% percentile intervals)."""

    name: str
    judge_id: str
    prompt_version: str
    n: int
    metrics: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    counts: dict[str, int]
    unparsed: int = 0
    debate: Any = None  # DebateSummary when the judge is a debate judge
    predictions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False)
    p_yes: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    tuned_on: dict[str, Any] | None = None  # a calibrated judge's threshold was chosen on some of these pairs
    auc: float = float("nan")  # of P(Yes) for the gold labels (rank_auc); NaN without P(Yes) on every pair
    undefined_resamples: dict[str, int] = field(default_factory=dict)  # per metric: bootstrap resamples left out
    resamples: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "judge_id": self.judge_id, "prompt_version": self.prompt_version, "n": self.n,
            "metrics": self.metrics, "auc": None if self.auc != self.auc else self.auc, "ci95": {k: list(v) for k, v in self.intervals.items()},
            "counts": self.counts, "unparsed": self.unparsed,
            **({"debate": self.debate.to_json()} if self.debate is not None else {}),
            **({"threshold_tuned_on": self.tuned_on} if self.tuned_on else {}),
            **({"ci95_undefined_resamples": self.undefined_resamples, "resamples": self.resamples}
               if self.undefined_resamples else {}),
        }


@dataclass
class PairComparison:
    """Two judges on the same pairs: agreement, κ between them, McNemar on correctness."""

    first: str
    second: str
    agreement: float
    kappa: float
    mcnemar: McNemarResult

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "second": self.second, "agreement": self.agreement, "kappa": self.kappa,
                "mcnemar_correct": self.mcnemar.to_json()}


@dataclass
class ValidationReport:
    labels_path: str
    labels_sha256: str
    n: int
    gold_positive_share: float
    judges: list[JudgeValidity]
    comparisons: list[PairComparison]
    n_boot: int
    seed: int
    resample: str = "pairs"
    questions: int = 0
    repeats: dict[str, Any] = field(default_factory=dict)  # LabelledSet.repeats(): pairs the file lists twice

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": {"path": self.labels_path, "sha256": self.labels_sha256, "n": self.n,
                       "gold_positive_share": self.gold_positive_share, "questions": self.questions,
                       "repeats": self.repeats},
            "bootstrap": {"samples": self.n_boot, "seed": self.seed, "interval": "percentile 95%",
                          "resample": self.resample},
            "judges": [j.to_json() for j in self.judges],
            "comparisons": [c.to_json() for c in self.comparisons],
        }


def score_predictions(name: str, gold: Any, verdicts: Sequence[Verdict] | Any, *, judge_id: str = "",
                      prompt_version: str = "", n_boot: int = 1000, seed: int = 0, groups: Any = None) -> JudgeValidity:
    """Score one judge's verdicts (or a plain boolean array, e.g. a second annotator) against gold labels
    (``groups``: resample these clusters for the intervals, see ``bootstrap_intervals``)."""
    g = _as_bool(gold, "gold")
    debate = None
    if len(verdicts) and isinstance(verdicts[0], Verdict):
        from berds.judges.debate import debate_summary

        pred = np.array([v.label for v in verdicts], dtype=bool)
        p_yes = np.array([np.nan if v.p_yes is None else v.p_yes for v in verdicts], dtype=float)
        unparsed = sum(is_unparsed(v) for v in verdicts)
        debate = debate_summary(verdicts, g)
    else:
        pred = _as_bool(verdicts, name)
        p_yes = np.full(pred.size, np.nan)
        unparsed = 0
    tp, fp, fn, tn = confusion_counts(g, pred)
    undefined: dict[str, int] = {}
    return JudgeValidity(
        name=name, judge_id=judge_id or name, prompt_version=prompt_version, n=int(g.size),
        metrics=classification_metrics(g, pred),
        intervals=bootstrap_intervals(g, pred, n_boot=n_boot, seed=seed, groups=groups, undefined=undefined),
        counts={"tp": tp, "fp": fp, "fn": fn, "tn": tn}, unparsed=unparsed, debate=debate, predictions=pred,
        p_yes=p_yes, auc=rank_auc(g, p_yes), undefined_resamples={k: v for k, v in undefined.items() if v},
        resamples=max(n_boot, 0),
    )


def compare_judges(gold: Any, rows: Sequence[JudgeValidity]) -> list[PairComparison]:
    """Every pair of rows: raw agreement, κ between the two, McNemar on correctness (b: first right only)."""
    g = _as_bool(gold, "gold")
    out = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i].predictions, rows[j].predictions
            out.append(PairComparison(
                rows[i].name, rows[j].name, float((a == b).mean()), cohen_kappa(a, b),
                mcnemar_paired(a == g, b == g),
            ))
    return out


MAX_BOOTSTRAP = 100_000  # resamples: more adds nothing to a 95% interval and costs memory per pair


def check_bootstrap(n_boot: Any, seed: Any) -> None:
    """Refuse a resample count or a seed the bootstrap cannot use, before any judging (numpy's seed must be a
    whole number >= 0)."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or not 0 <= n_boot <= MAX_BOOTSTRAP:
        raise BerdsError(f"--bootstrap must be between 0 and {MAX_BOOTSTRAP:,} resamples, got {n_boot!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise BerdsError(f"--seed must be a whole number >= 0, got {seed!r}")


def validate(
    labelled: Any,
    judges: Sequence[Any] | Mapping[str, Any],
    *,
    annotators: Sequence[str] = (),
    cache: Any = None,
    overwrite: str = "only-missing",
    n_boot: int = 1000,
    seed: int = 0,
    resample: str = "pairs",
    batch_size: int | None = None,
    progress: bool = True,
) -> ValidationReport:
    """Judge every pair of ``labelled`` (a ``LabelledSet``) with each judge and score them side by side.

    ``judges`` is a list of judges (named by their ``name`` or ``id``) or ``{display name: judge}``.
    ``annotators`` names extra 0/1 columns of the labelled file (e.g. a second human's labels) to score
    as if they were judges. ``resample`` is what the bootstrap draws: ``pairs`` or ``questions``.
    """
    from berds.trust.overlap import threshold_tuned_on

    if resample not in RESAMPLE_UNITS:
        raise BerdsError(f"resample must be one of {', '.join(RESAMPLE_UNITS)}, got {resample!r}")
    check_bootstrap(n_boot, seed)  # (0 resamples: no intervals)
    gold = labelled.labels
    questions = [p.question for p in labelled]
    groups = questions if resample == "questions" else None
    if groups is not None and len(set(questions)) < 2:  # every resample would be the one question: a zero-width "interval"
        raise BerdsError(f"--resample questions needs pairs of at least 2 questions; {labelled.path or 'the file'} "
                         f"has {len(set(questions))} — resample pairs instead")
    named = list(judges.items()) if isinstance(judges, Mapping) else [
        (getattr(j, "name", None) or j.id, j) for j in judges]
    if not named and not annotators:
        raise BerdsError("validate needs at least one judge (or an annotator column)")
    # an annotator column that is missing or not 0/1 is refused before any judge runs (judging may take hours)
    annotated = [(column, annotator_labels(labelled, column)) for column in annotators]
    pairs = labelled.judge_pairs()
    rows: list[JudgeValidity] = []
    for name, judge in named:
        verdicts = judge_pairs(judge, pairs, cache=cache, overwrite=overwrite, batch_size=batch_size,
                               progress=progress, description=f"judging with {name}")
        rows.append(score_predictions(name, gold, verdicts, judge_id=judge.id, prompt_version=judge.prompt_version,
                                      n_boot=n_boot, seed=seed, groups=groups))
        rows[-1].tuned_on = threshold_tuned_on(judge, labelled)
    for column, values in annotated:
        rows.append(score_predictions(f"column:{column}", gold, values, n_boot=n_boot, seed=seed, groups=groups))
    return ValidationReport(labelled.path, labelled.sha256, len(labelled), float(gold.mean()), rows,
                            compare_judges(gold, rows), n_boot, seed, resample, len(set(questions)), labelled.repeats())


def validate_files(
    labels_path: str,
    judges: Sequence[str],
    *,
    judge_options: Mapping[str, Any] | None = None,
    annotators: Sequence[str] = (),
    cache_path: str | None = None,
    use_cache: bool = True,
    n_boot: int = 1000,
    seed: int = 0,
    resample: str = "pairs",
    progress: bool = True,
) -> ValidationReport:
    """``berds judge validate``: read the labelled file, build each judge by name (``--judge``), validate."""
    from berds.evaluate.cache import JudgementCache
    from berds.judges.catalogue import check_judge_name
    from berds.trust.labels import read_labelled_pairs

    labelled = read_labelled_pairs(labels_path)
    for name in judges:
        check_judge_name(name)  # fail on a typo before any model loads
    named = {}
    for name in judges:
        key = name if name not in named else f"{name}#{len(named) + 1}"
        named[key] = lazy_judge(name, judge_options)
    cache = JudgementCache(cache_path) if use_cache else None
    try:
        return validate(labelled, named, annotators=annotators, cache=cache, n_boot=n_boot, seed=seed,
                        resample=resample, progress=progress)
    finally:
        if cache is not None:
            cache.close()


def lazy_judge(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """A judge by name whose model loads on first use (``LazyJudge``)."""
    from berds.judges import LazyJudge
    from berds.judges.catalogue import load_judge

    opts = dict(options or {})
    return LazyJudge(lambda: load_judge(name, **opts))


def annotator_labels(labelled: Any, column: str) -> np.ndarray:
    """An extra 0/1 column of a labelled file (another annotator's labels) as a boolean array."""
    from berds.errors import InputError

    from berds.trust.labels import LABEL_COLUMNS

    if column in (*LABEL_COLUMNS, "stance"):  # (it said "no column 'stance'" of a file that has one)
        raise InputError(f"--column {column!r} is one of the file's own columns, not another annotator's labels",
                         path=labelled.path or None,
                         fix="name an extra 0/1 column (a second annotator's labels); `label` is the gold column "
                             "and `stance` is read as each pair's stance")
    values = []
    for p in labelled:
        if column not in p.extra:
            raise InputError(f"no column {column!r}", path=labelled.path or None,
                             fix=f"extra columns in this file: {', '.join(sorted(p.extra)) or '(none)'}")
        raw = p.extra[column].strip()
        if raw not in ("0", "1"):
            raise InputError(f"column {column!r} must hold 0 or 1, got {raw!r}", path=labelled.path or None, line=p.line,
                             record=p.id or None)
        values.append(raw == "1")
    return np.array(values, dtype=bool)


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}"


FEW_QUESTIONS = 10  # below this, a question bootstrap has too few distinct resamples to mean much (docs/judge-trust.md)
SHARE_METRICS = METRIC_NAMES[:-1]  # the metrics shown in percent (all but κ)


def _share_cells(row: JudgeValidity) -> list[str]:
    """Each share metric of a judge as "value [low, high]", in percent (validity tables, rich and markdown)."""
    cells = []
    for name in SHARE_METRICS:
        lo, hi = row.intervals[name]
        interval = "" if lo != lo and hi != hi else f" [{_pct(lo)}, {_pct(hi)}]"  # (--bootstrap 0: none)
        cells.append(f"{_pct(row.metrics[name])}{interval}")
    return cells


def _kappa_cell(row: JudgeValidity) -> str:
    kappa, (lo, hi) = row.metrics["kappa"], row.intervals["kappa"]
    if kappa != kappa:
        return "-"
    return f"{kappa:.3f}" + ("" if lo != lo and hi != hi else f" [{lo:.2f}, {hi:.2f}]")


def one_class_note(report: ValidationReport) -> str | None:
    """One line when every labelled pair has the same label: then some measures say nothing about a judge
    (None when both labels occur)."""
    if report.n == 0 or 0 < report.gold_positive_share < 1:
        return None
    if report.gold_positive_share == 0:
        return (f"note: every pair in {report.labels_path or 'the labelled file'} is labelled 0: precision, recall and F1 are 0 "
                "and κ is 0 or undefined whatever the judge answers; only accuracy and the Yes share measure it")
    return (f"note: every pair in {report.labels_path or 'the labelled file'} is labelled 1: precision is 100 and κ "
            "is 0 or undefined whatever the judge answers; only recall (= accuracy = Yes share) measures it")


def one_answer_notes(report: ValidationReport) -> list[str]:
    """One line per judge that answered No to every pair: its precision is 0/0, shown as 0 by convention, and its
    F1 and κ are then 0 by construction — the figures say it never says Yes, not how well it would."""
    return [f"note: {row.name} answered No to all {row.n} pairs: its precision (0 of 0) is shown as 0, and F1 and κ "
            "are 0 by construction; the Yes share says so — check its prompt, threshold or training"
            for row in report.judges if row.n and not bool(np.asarray(row.predictions).any())
            and len(row.predictions) == row.n]


def undefined_resample_notes(report: ValidationReport) -> list[str]:
    """One line per judge whose bootstrap left resamples out of an interval (κ on a resample where the labels or
    the verdicts are all one answer is undefined): that interval holds for the other resamples only."""
    notes = []
    for row in report.judges:
        # (a metric undefined on the whole file, e.g. κ of a one-class file, is said by one_class_note)
        dropped = {m: n for m, n in row.undefined_resamples.items() if n < row.resamples}
        if dropped:
            what = ", ".join(f"{m} in {n:,} of {row.resamples:,}" for m, n in dropped.items())
            notes.append(f"note: {row.name}: undefined in some bootstrap resamples (all one answer in a resample): "
                         f"{what}; those intervals are over the other resamples only")
    return notes


def in_sample_notes(report: ValidationReport) -> list[str]:
    """One line per calibrated judge whose threshold was chosen on pairs of this file: its figures here are
    in-sample, not a measure of how it does on new pairs."""
    notes = []
    for row in report.judges:
        if row.tuned_on:
            t = row.tuned_on
            notes.append(f"note: {row.name}'s threshold was chosen on {t['dev']}, which holds {t['pairs_in_dev']} of "
                         f"these {row.n} pairs and {t['questions_in_dev']} of their {report.questions} questions: its "
                         "figures here are in-sample — validate it on pairs of other questions")
    return notes


def validity_table(report: ValidationReport, *, title: str | None = None) -> Any:
    """A rich table: one row per metric, one column per judge (value and bootstrap 95% interval) — judges
    side by side fit 80 columns where metrics side by side did not."""
    from rich.table import Table

    unit = (f"resampling the {report.questions} questions" if report.resample == "questions"
            else "resampling pairs (--resample questions for question-level intervals)")
    if report.resample == "questions" and report.questions < FEW_QUESTIONS:
        unit += (f" — only {math.comb(2 * report.questions - 1, report.questions)} distinct resamples: "
                 "no interval is reliable with so few questions")
    caption = f"[95% interval]: percentile bootstrap, {report.n_boot} samples, {unit}" if report.n_boot else None
    table = Table(title=title or f"judge validity on {report.n} labelled pairs ({_pct(report.gold_positive_share)}% positive)",
                  caption=caption)
    table.add_column("metric (%)", no_wrap=True)
    for row in report.judges:
        table.add_column(row.name, justify="right", overflow="fold")
    cells = [_share_cells(row) for row in report.judges]
    for i, name in enumerate(SHARE_METRICS):
        table.add_row(name.replace("_", " ").replace("positive share", "Yes share"), *(c[i] for c in cells))
    table.add_row("κ", *(_kappa_cell(row) for row in report.judges))
    table.add_row("AUC of P(Yes)", *("-" if row.auc != row.auc else f"{row.auc:.3f}" for row in report.judges))
    table.add_row("unparsed (count)", *(str(row.unparsed) for row in report.judges))
    return table


def comparison_table(report: ValidationReport) -> Any:
    """A rich table: agreement, κ and McNemar (correctness) for every two judges, one row per pair."""
    from rich.table import Table

    table = Table(title="agreement between judges (McNemar on which pairs each got right)")
    for col in ("judges", "agree %", "κ", "only 1st right", "only 2nd right", "exact p", "χ² p"):
        table.add_column(col, justify="left" if col == "judges" else "right", overflow="fold")
    for c in report.comparisons:
        table.add_row(f"1st {c.first}\n2nd {c.second}", _pct(c.agreement), "-" if c.kappa != c.kappa else f"{c.kappa:.3f}",
                      str(c.mcnemar.b), str(c.mcnemar.c), f"{c.mcnemar.exact_p:.2g}", f"{c.mcnemar.chi2_p:.2g}")
    return table


def debate_table(report: ValidationReport) -> Any | None:
    """A rich table of what the critic changed, for debate judges (None when there are none): one row per
    count, one column per debate judge."""
    rows = [r for r in report.judges if r.debate is not None]
    if not rows:
        return None
    from rich.table import Table

    table = Table(title="devil's-advocate debate: answers the critic changed")
    table.add_column("", no_wrap=True)
    for r in rows:
        table.add_column(r.name, justify="right", overflow="fold")
    facts = [("pairs", lambda d: str(d.pairs)), ("Yes→No", lambda d: str(d.changed_yes_to_no)),
             ("No→Yes", lambda d: str(d.changed_no_to_yes)), ("changes that fixed", lambda d: str(d.changes_fixed)),
             ("changes that broke", lambda d: str(d.changes_broke)),
             ("closed by NO ISSUE", lambda d: str(d.closed_no_issue)),
             ("hit max rounds", lambda d: str(d.ended_max_rounds)), ("tie-broken", lambda d: str(d.tie_broken)),
             ("mean rounds", lambda d: f"{d.mean_rounds:.2f}")]
    for label, cell in facts:
        table.add_row(label, *(cell(r.debate) for r in rows))
    return table


def markdown_table(report: ValidationReport) -> str:
    """The validity table as GitHub markdown (for READMEs): metric value and [95% interval] in percent."""
    head = "| judge | accuracy | precision | recall | F1 | Yes share | κ |"
    lines = [head, "|" + "---|" * 7]
    for row in report.judges:
        cells = _share_cells(row) + [_kappa_cell(row)]
        lines.append(f"| {row.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
