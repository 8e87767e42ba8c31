"""Is a judge's P(Yes) a probability? Reliability tables, expected calibration error, and a tuned threshold.

LLM judges expose P(Yes) through first-token log-probabilities (``p_yes_from_logprobs``: P(yes-like) /
(P(yes-like) + P(no-like))); the embedded judge computes it directly. On a labelled *dev* file:

* **reliability table** — pairs are put into bins by P(Yes) (``uniform``: [0, .1), [.1, .2), ..., [.9, 1];
  ``quantile``: bins of equal size); per bin, the mean P(Yes) against the observed share of gold positives.
* **ECE** = Σ_b (n_b / N) · |observed_b − mean P(Yes)_b|  (and MCE = max_b of the same gap);
  **Brier** = mean (P(Yes) − gold)²; **AUC** = P(a positive pair's P(Yes) > a negative's), ties half.
* **threshold** — the cut ``label = P(Yes) >= t`` that maximises an objective (``f1``, ``accuracy`` or
  ``youden`` = TPR + TNR − 1) on the dev pairs. Candidates are the midpoints between consecutive distinct
  P(Yes) values (with 0 and 1 added), so a chosen threshold never sits exactly on a dev score; ties go to
  the candidate nearest 0.5.

The chosen threshold is stored in a small JSON file keyed by the judge id (``calibration.json`` in
berds' home folder, next to the default judgement cache; ``--store`` / ``calibration=PATH`` choose another). ``--judge calibrated:NAME`` then wraps judge NAME
in a ``ThresholdJudge`` using it; ``--judge-option threshold=T`` sets one by hand for judges that take it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.judges.threshold import CalibrationStore, default_store_path
from berds.types import Verdict

OBJECTIVES = ("f1", "accuracy", "youden")
BIN_STRATEGIES = ("uniform", "quantile")


# ----------------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability table: ``observed`` is the share of gold positives among its pairs."""

    lo: float
    hi: float
    count: int
    mean_p: float
    observed: float

    @property
    def gap(self) -> float:
        return self.observed - self.mean_p


def _check_scores(p_yes: Any, gold: Any) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p_yes, dtype=float)
    g = np.asarray(gold).astype(bool)
    if p.ndim != 1 or p.shape != g.shape:
        raise ValueError(f"p_yes and gold must be 1-D and equally long, got {p.shape} and {g.shape}")
    if p.size == 0:
        raise ValueError("no scores")
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("p_yes values must be probabilities in [0, 1] (drop pairs without P(Yes) first)")
    return p, g


def bin_edges(p_yes: Any, n_bins: int = 10, strategy: str = "uniform") -> np.ndarray:
    """Bin edges from 0 to 1: equal widths (``uniform``) or equal counts (``quantile``, duplicates merged)."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":
        inner = np.quantile(np.asarray(p_yes, dtype=float), np.linspace(0, 1, n_bins + 1)[1:-1])
        return np.unique(np.concatenate([[0.0], inner, [1.0]]))
    raise BerdsError(f"unknown binning {strategy!r}; use one of {', '.join(BIN_STRATEGIES)}")


def reliability_table(p_yes: Any, gold: Any, *, n_bins: int = 10, strategy: str = "uniform") -> list[ReliabilityBin]:
    """Bins ``[lo, hi)`` (the last one closed) with count, mean P(Yes) and observed positive share.

    Empty bins are kept (count 0, NaN means) so uniform tables always have ``n_bins`` rows.
    """
    p, g = _check_scores(p_yes, gold)
    edges = bin_edges(p, n_bins, strategy)
    if strategy == "uniform":  # p * n_bins, rounded first so 0.9 lands in [0.9, 1] despite float edges
        which = np.clip(np.floor(np.round(p * n_bins, 9)).astype(int), 0, n_bins - 1)
    else:
        which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    out = []
    for b in range(len(edges) - 1):
        mask = which == b
        n = int(mask.sum())
        out.append(ReliabilityBin(float(edges[b]), float(edges[b + 1]), n,
                                  float(p[mask].mean()) if n else float("nan"),
                                  float(g[mask].mean()) if n else float("nan")))
    return out


def expected_calibration_error(p_yes: Any, gold: Any, *, n_bins: int = 10, strategy: str = "uniform") -> float:
    """ECE = Σ_b (n_b / N) · |observed_b − mean P(Yes)_b| over the bins of ``reliability_table``."""
    bins = reliability_table(p_yes, gold, n_bins=n_bins, strategy=strategy)
    total = sum(b.count for b in bins)
    return float(sum(b.count / total * abs(b.gap) for b in bins if b.count))


def maximum_calibration_error(p_yes: Any, gold: Any, *, n_bins: int = 10, strategy: str = "uniform") -> float:
    """MCE = max over non-empty bins of |observed_b − mean P(Yes)_b|."""
    bins = reliability_table(p_yes, gold, n_bins=n_bins, strategy=strategy)
    return float(max(abs(b.gap) for b in bins if b.count))


def roc_auc(p_yes: Any, gold: Any) -> float:
    """Area under the ROC curve: the chance that a gold-positive pair gets a higher P(Yes) than a gold-negative one
    (ties count half), from average ranks (Mann–Whitney U / (positives · negatives)); NaN with one class. It says
    how well P(Yes) ranks pairs whatever the threshold."""
    p, g = _check_scores(p_yes, gold)
    pos, neg = int(g.sum()), int((~g).sum())
    if not pos or not neg:
        return float("nan")
    _, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # 1-based, ties share their average rank
    return float((ranks[g].sum() - pos * (pos + 1) / 2) / (pos * neg))


def brier_score(p_yes: Any, gold: Any) -> float:
    """Brier score = mean (P(Yes) − gold)²  (0 is perfect; always answering 0.5 scores 0.25)."""
    p, g = _check_scores(p_yes, gold)
    return float(np.mean((p - g.astype(float)) ** 2))


@dataclass(frozen=True)
class ThresholdChoice:
    threshold: float
    objective: str
    value: float


def threshold_candidates(p_yes: Any) -> np.ndarray:
    """Midpoints between consecutive distinct values of ``{0, 1} ∪ P(Yes)`` (all strictly inside (0, 1))."""
    values = np.unique(np.concatenate([[0.0, 1.0], np.asarray(p_yes, dtype=float)]))
    return (values[:-1] + values[1:]) / 2


def objective_curve(p_yes: Any, gold: Any, thresholds: Any, objective: str = "f1") -> np.ndarray:
    """The objective at each threshold (label = P(Yes) >= t), from cumulative counts (no n×m matrix)."""
    if objective not in OBJECTIVES:
        raise BerdsError(f"unknown threshold objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    p, g = _check_scores(p_yes, gold)
    t = np.asarray(thresholds, dtype=float)
    order = np.argsort(p, kind="stable")
    sorted_p, sorted_g = p[order], g[order].astype(int)
    below = np.searchsorted(sorted_p, t, side="left")          # pairs with p < t are labelled No
    neg_below = np.concatenate([[0], np.cumsum(1 - sorted_g)])[below]
    pos_below = np.concatenate([[0], np.cumsum(sorted_g)])[below]
    pos, neg = int(g.sum()), int((~g).sum())
    tp, fn = pos - pos_below, pos_below
    tn, fp = neg_below, neg - neg_below
    with np.errstate(divide="ignore", invalid="ignore"):
        if objective == "f1":
            return np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
        if objective == "accuracy":
            return (tp + tn) / p.size
        tpr = tp / pos if pos else np.zeros_like(t)
        tnr = tn / neg if neg else np.zeros_like(t)
        return tpr + tnr - 1


def choose_threshold(p_yes: Any, gold: Any, *, objective: str = "f1") -> ThresholdChoice:
    """The candidate threshold with the best objective on these pairs (ties: nearest 0.5, then lowest)."""
    candidates = threshold_candidates(p_yes)
    values = objective_curve(p_yes, gold, candidates, objective)
    best = values.max()
    tied = candidates[np.isclose(values, best, rtol=0, atol=1e-12)]
    pick = tied[np.lexsort((tied, np.abs(tied - 0.5)))][0]
    return ThresholdChoice(float(pick), objective, float(best))


# ----------------------------------------------------------------------------------- calibrate


@dataclass
class CalibrationResult:
    """What ``calibrate`` measured on a dev file (and, when given, on a held-out file)."""

    judge_id: str
    prompt_version: str
    n: int
    n_scored: int
    ece: float
    mce: float
    brier: float
    bins: list[ReliabilityBin]
    threshold: ThresholdChoice
    dev_default: dict[str, float]
    dev_at_threshold: dict[str, float]
    holdout_default: dict[str, float] | None = None
    holdout_at_threshold: dict[str, float] | None = None
    holdout_ece: float | None = None
    auc: float = float("nan")
    holdout_auc: float | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    holdout_labels: dict[str, Any] | None = None
    strategy: str = "uniform"
    store_path: str | None = None

    def record(self) -> dict[str, Any]:
        """The JSON record stored under the judge id."""
        return {
            "judge_id": self.judge_id, "prompt_version": self.prompt_version,
            "threshold": self.threshold.threshold, "objective": self.threshold.objective,
            "objective_value_on_dev": self.threshold.value,
            "dev": {**self.labels, "n": self.n, "n_with_p_yes": self.n_scored},
            "ece": self.ece, "mce": self.mce, "brier": self.brier, "auc": self.auc, "bins": len(self.bins),
            "binning": self.strategy,
            "dev_metrics_default": self.dev_default, "dev_metrics_at_threshold": self.dev_at_threshold,
            **({"holdout": {**(self.holdout_labels or {}), "ece": self.holdout_ece, "auc": self.holdout_auc,
                            "metrics_default": self.holdout_default,
                            "metrics_at_threshold": self.holdout_at_threshold}} if self.holdout_default else {}),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.record(), "reliability": [{**asdict(b), "gap": b.gap} for b in self.bins],
                "store": self.store_path}


def _scored(verdicts: Sequence[Verdict], gold: np.ndarray, *, judge_id: str, path: str) -> tuple[np.ndarray, np.ndarray]:
    keep = np.array([v.p_yes is not None for v in verdicts], dtype=bool)
    if not keep.any():
        raise BerdsError(
            f"judge {judge_id!r} reported no P(Yes) for any of the {len(verdicts)} pairs in {path} — calibration needs "
            "log-probabilities (transformers, vllm, or an OpenAI-compatible server that returns logprobs)"
        )
    p = np.array([v.p_yes for v, k in zip(verdicts, keep) if k], dtype=float)
    return p, gold[keep]


MAX_BINS = 1000  # reliability-diagram bins: far more than any labelled set fills


def calibrate(
    labelled: Any,
    judge: Any,
    *,
    objective: str = "f1",
    n_bins: int = 10,
    strategy: str = "uniform",
    holdout: Any = None,
    cache: Any = None,
    store: CalibrationStore | None = None,
    batch_size: int | None = None,
    progress: bool = True,
) -> CalibrationResult:
    """Reliability table, ECE, Brier and a tuned threshold for ``judge`` on the dev pairs in ``labelled``.

    With ``holdout`` (another ``LabelledSet``), the chosen threshold is also scored on pairs it was not
    tuned on. With ``store``, the record is saved under the judge id. Pairs for which the judge gave no
    P(Yes) are left out of the calibration numbers (``n_scored`` says how many remain).
    """
    from berds.trust.overlap import shared_with
    from berds.trust.validate import classification_metrics, judge_pairs

    if objective not in OBJECTIVES:
        raise BerdsError(f"unknown threshold objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    if strategy not in BIN_STRATEGIES:
        raise BerdsError(f"unknown binning {strategy!r}; use one of {', '.join(BIN_STRATEGIES)}")
    if not isinstance(n_bins, int) or not 2 <= n_bins <= MAX_BINS:
        raise BerdsError(f"--bins must be between 2 and {MAX_BINS}, got {n_bins!r}")
    gold = labelled.labels
    if gold.all() or not gold.any():  # any threshold "fits" one class; it would be saved and used without a word
        raise BerdsError(f"{labelled.path or 'the labelled file'}: every pair is labelled {int(gold[0]) if len(gold) else '-'}"
                         " — a threshold can only be calibrated on pairs of both labels")
    verdicts = judge_pairs(judge, labelled.judge_pairs(), cache=cache, batch_size=batch_size, progress=progress,
                           description="judging dev pairs")
    p, g = _scored(verdicts, gold, judge_id=judge.id, path=labelled.path)
    choice = choose_threshold(p, g, objective=objective)
    default_pred = np.array([v.label for v in verdicts], dtype=bool)
    tuned_pred = np.array([v.label if v.p_yes is None else v.p_yes >= choice.threshold for v in verdicts], dtype=bool)
    result = CalibrationResult(
        judge_id=judge.id, prompt_version=judge.prompt_version, n=len(verdicts), n_scored=int(p.size),
        ece=expected_calibration_error(p, g, n_bins=n_bins, strategy=strategy),
        mce=maximum_calibration_error(p, g, n_bins=n_bins, strategy=strategy), brier=brier_score(p, g),
        bins=reliability_table(p, g, n_bins=n_bins, strategy=strategy), threshold=choice,
        dev_default=classification_metrics(gold, default_pred), dev_at_threshold=classification_metrics(gold, tuned_pred),
        labels={"path": labelled.path, "sha256": labelled.sha256, "positive_share": float(gold.mean())},
        strategy=strategy, auc=roc_auc(p, g),
    )
    if holdout is not None:
        h_gold = holdout.labels
        h_verdicts = judge_pairs(judge, holdout.judge_pairs(), cache=cache, batch_size=batch_size, progress=progress,
                                 description="judging held-out pairs")
        hp, hg = _scored(h_verdicts, h_gold, judge_id=judge.id, path=holdout.path)
        result.holdout_ece = expected_calibration_error(hp, hg, n_bins=n_bins, strategy=strategy)
        result.holdout_auc = roc_auc(hp, hg)
        result.holdout_default = classification_metrics(h_gold, [v.label for v in h_verdicts])
        result.holdout_at_threshold = classification_metrics(
            h_gold, [v.label if v.p_yes is None else v.p_yes >= choice.threshold for v in h_verdicts])
        # a "held-out" file that shares pairs or questions with the dev file is not held out: say how much
        result.holdout_labels = {"path": holdout.path, "sha256": holdout.sha256, "n": len(holdout),
                                 "n_with_p_yes": int(hp.size), **shared_with(labelled, holdout)}
    if store is not None:
        store.put(result.record())
        result.store_path = str(store.path)
    return result


def _num(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.3f}"


def reliability_rich_table(result: CalibrationResult) -> Any:
    from rich.table import Table

    table = Table(title=f"reliability of P(Yes) — ECE {result.ece:.3f}, MCE {result.mce:.3f}, Brier {result.brier:.3f}, "
                        f"AUC {_num(result.auc)} "
                        f"({result.n_scored} of {result.n} pairs with P(Yes))")
    for col in ("bin", "pairs", "mean P(Yes)", "observed Yes", "gap"):
        table.add_column(col, justify="right")
    for b in result.bins:
        mean = "-" if not b.count else f"{b.mean_p:.3f}"
        obs = "-" if not b.count else f"{b.observed:.3f}"
        gap = "-" if not b.count else f"{b.gap:+.3f}"
        table.add_row(f"[{b.lo:.2f}, {b.hi:.2f}{']' if b.hi >= 1 else ')'}", str(b.count), mean, obs, gap)
    return table


def threshold_rich_table(result: CalibrationResult) -> Any:
    from rich.table import Table

    caption = "dev rows at the threshold are in-sample: it was chosen on those pairs"
    held = result.holdout_labels
    if result.holdout_default is not None and held is not None:
        caption += (f"; held-out: {held.get('n')} pairs, ECE {result.holdout_ece:.3f} "
                    f"({held.get('n_with_p_yes', held.get('n'))} with P(Yes)), AUC {_num(result.holdout_auc)}")
        if held.get("pairs_in_dev") or held.get("questions_in_dev"):
            caption += (f" — NOT held out: {held.get('pairs_in_dev', 0)} of its pairs and "
                        f"{held.get('questions_in_dev', 0)} of its questions are in the dev file")
    table = Table(title=f"threshold {result.threshold.threshold:.4f} chosen for {result.threshold.objective} on the dev pairs",
                  caption=caption)
    for col in ("pairs", "labels from", "accuracy", "precision", "recall", "F1", "Yes share"):
        table.add_column(col, justify="right")
    rows = [("dev", "judge's own", result.dev_default), ("dev", "threshold", result.dev_at_threshold)]
    if result.holdout_default is not None:
        rows += [("held-out", "judge's own", result.holdout_default), ("held-out", "threshold", result.holdout_at_threshold)]
    for where, how, m in rows:
        table.add_row(where, how, *(f"{100 * m[k]:.1f}" for k in ("accuracy", "precision", "recall", "f1", "positive_share")))
    return table


def calibrate_file(
    labels_path: str,
    judge: str,
    *,
    judge_options: Mapping[str, Any] | None = None,
    objective: str = "f1",
    n_bins: int = 10,
    strategy: str = "uniform",
    holdout_path: str | None = None,
    store_path: str | None = None,
    save: bool = True,
    cache_path: str | None = None,
    use_cache: bool = True,
    progress: bool = True,
) -> CalibrationResult:
    """``berds judge calibrate``: read the dev (and held-out) files, build the judge, calibrate, store."""
    from berds.evaluate.cache import JudgementCache
    from berds.judges.catalogue import check_judge_name
    from berds.trust.labels import read_labelled_pairs
    from berds.trust.validate import lazy_judge

    dev = read_labelled_pairs(labels_path)
    held = read_labelled_pairs(holdout_path) if holdout_path else None
    check_judge_name(judge)
    store = CalibrationStore(store_path or default_store_path()) if save else None
    cache = JudgementCache(cache_path) if use_cache else None
    try:
        return calibrate(dev, lazy_judge(judge, judge_options), objective=objective, n_bins=n_bins, strategy=strategy,
                         holdout=held, cache=cache, store=store, progress=progress)
    finally:
        if cache is not None:
            cache.close()
