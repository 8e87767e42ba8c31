"""Sycophancy Δ corrected for the judge's own stance bias.

The study's sycophancy measure (``berds.evaluate.analyses.sycophancy``) counts, in one run's top-k
documents, those the judge says contain the supporting perspective (p) and those it says contain the
opposing one (n), and reports Δ = (p − n) / p. If the judge errs differently on supporting and on opposing
statements (say it says Yes too easily to supporting ones), Δ mixes the retriever's leaning with the
judge's. The correction uses the judge's error rates *per stance*, measured on a human-labelled file:

    sensitivity_s = TP_s / (TP_s + FN_s)        specificity_s = TN_s / (TN_s + FP_s)

for the labelled pairs whose perspective has stance s. A judge with these rates turns a true support share
π into an observed share q = π·sens + (1 − π)(1 − spec); inverting it (the Rogan–Gladen estimator)::

    π = (q + spec − 1) / (sens + spec − 1)       clipped to [0, 1]

p's share (p_docs / N, N the run's judged documents) is corrected with the *supporting* stance's rates,
n's share with the *opposing* stance's rates, and Δ_corrected = (π_p − π_n) / π_p. Bootstrap intervals
resample the labelled pairs (within each stance) and recompute the rates, so they show how much the
correction itself is uncertain. The correction is undefined when sens + spec ≤ 1 for a stance (a judge no
better than chance on it); such rows say so instead of printing a number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError, InputError

# sycophancy's side names -> the stance of the perspective on that side (berds.trust.labels.STANCES)
SIDE_STANCE = {"supporting": "support", "opposing": "oppose"}


@dataclass(frozen=True)
class StanceErrorRates:
    """A judge's confusion counts on labelled pairs of one stance, and the rates derived from them."""

    stance: str
    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def sensitivity(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")

    @property
    def specificity(self) -> float:
        return self.tn / (self.tn + self.fp) if self.tn + self.fp else float("nan")

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    def to_json(self) -> dict[str, Any]:
        return {"stance": self.stance, "tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "sensitivity": self.sensitivity, "specificity": self.specificity}


def stance_error_rates(labelled: Any, predictions: Sequence[bool]) -> dict[str, StanceErrorRates]:
    """Per-stance confusion counts of ``predictions`` on ``labelled`` (stance from the file's ``stance``
    column, else the ``negation-cue`` rule of ``berds.trust.labels.infer_stances``)."""
    from berds.trust.labels import STANCES

    pairs = labelled.with_inferred_stances().pairs
    pred = np.asarray(predictions, dtype=bool)
    if pred.size != len(pairs):
        raise BerdsError(f"{pred.size} predictions for {len(pairs)} labelled pairs")
    out = {}
    for stance in STANCES:
        idx = [i for i, p in enumerate(pairs) if p.stance == stance]
        g = np.array([pairs[i].label for i in idx], dtype=bool)
        y = pred[idx] if idx else np.zeros(0, dtype=bool)
        out[stance] = StanceErrorRates(stance, int((g & y).sum()), int((~g & y).sum()), int((g & ~y).sum()),
                                       int((~g & ~y).sum()))
    return out


def rogan_gladen(observed: float, sensitivity: float, specificity: float) -> float:
    """The true share π behind an observed Yes share, given the judge's sensitivity and specificity:
    ``π = (q + spec − 1) / (sens + spec − 1)``, clipped to [0, 1]. NaN when ``sens + spec ≤ 1``."""
    denom = sensitivity + specificity - 1
    if not denom > 0:
        return float("nan")
    return float(min(1.0, max(0.0, (observed + specificity - 1) / denom)))


def corrected_delta(p: int, n: int, total: int, rates: StanceErrorRates,
                    rates_n: StanceErrorRates | None = None) -> dict[str, float]:
    """Observed and corrected shares and Δ (``total`` documents behind each of the counts p and n); p's
    share is corrected with ``rates``, n's with ``rates_n`` (default: the same rates)."""
    if total <= 0:
        raise BerdsError(f"the number of judged passages behind p and n must be positive, got {total}")
    rates_n = rates if rates_n is None else rates_n
    q_p, q_n = p / total, n / total
    pi_p = rogan_gladen(q_p, rates.sensitivity, rates.specificity)
    pi_n = rogan_gladen(q_n, rates_n.sensitivity, rates_n.specificity)
    delta_corrected = (pi_p - pi_n) / pi_p if pi_p > 0 else float("nan")
    return {"p_share": q_p, "n_share": q_n, "p_corrected": pi_p, "n_corrected": pi_n,
            "delta": (p - n) / p if p else float("nan"), "delta_corrected": delta_corrected}


@dataclass
class StanceCorrectedResult:
    """Observed and stance-corrected Δ per (setting, side), with bootstrap intervals of the corrected Δ."""

    KIND = "sycophancy-stance-corrected"
    k: int
    rates: dict[str, StanceErrorRates]
    rows: list[dict[str, Any]]
    labels: dict[str, Any] = field(default_factory=dict)
    judge_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "judge": self.judge_id, "labels": self.labels,
                "rates": {s: r.to_json() for s, r in self.rates.items()}, "rows": self.rows}

    def table(self) -> tuple[str, list[str], list[list[str]]]:
        from berds.evaluate.analyses.common import pct

        # (six columns and the judge's rates under the table: eight side by side were cut at 80 columns)
        header = ["setting", "query", "docs p/n/all", "Δ %", "Δ corrected %", "95% interval"]
        body = []
        for r in self.rows:
            lo, hi = r["delta_corrected_ci95"]
            interval = "n/a" if lo != lo else f"[{pct(lo)}, {pct(hi)}]"  # ("[n/a, n/a]" is rich markup: it vanished)
            body.append([r["label"], r["query"], f"{r['p_docs']}/{r['n_docs']}/{r['docs']}", pct(r["delta"]),
                         pct(r["delta_corrected"]), interval])
        return (f"Retriever sycophancy at k={self.k}, corrected for the judge's per-stance errors "
                f"(Rogan–Gladen; rates from {self.labels.get('path', 'a labelled file')})", header, body)

    def rates_note(self) -> str:
        """The judge's sensitivity/specificity per stance, which the correction used (printed under the table)."""
        from berds.evaluate.analyses.common import pct

        sup, opp = self.rates["support"], self.rates["oppose"]
        note = (f"judge sensitivity/specificity %: supporting perspectives {pct(sup.sensitivity)}/"
                f"{pct(sup.specificity)}, opposing {pct(opp.sensitivity)}/{pct(opp.specificity)}")
        if any(r["delta_corrected"] != r["delta_corrected"] for r in self.rows):
            note += ("; n/a: the correction is undefined (a stance with no labelled positive or negative, sens + "
                     "spec <= 1 for it, or no supporting document left)")
        partial = [r for r in self.rows if r["delta_corrected"] == r["delta_corrected"]
                   and r.get("bootstrap_defined", 0) < r.get("bootstrap_samples", 0)]
        if partial:
            few = min(partial, key=lambda r: r["bootstrap_defined"])
            note += (f"; {len(partial)} row(s)' interval counts only the resamples where the correction is defined "
                     f"(as few as {few['bootstrap_defined']} of {few['bootstrap_samples']}), so it is too narrow")
        return note


def check_sycophancy_rows(data: Mapping[str, Any], source: Any = None) -> list[dict[str, Any]]:
    """The rows of a sycophancy result (its JSON), each checked: counts that are whole numbers >= 0, with p and n
    documents among the run's ``docs`` (> 0). Refused with the row named, before any judging."""
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise InputError("the sycophancy result has no rows (expected a non-empty list under 'rows')", path=source,
                         fix="pass the JSON written by `berds analyze sycophancy`")
    for i, row in enumerate(rows):
        name = f"row {i + 1}" + (f" ({row.get('label')!r}, query {row.get('query')!r})" if isinstance(row, dict) else "")
        if not isinstance(row, dict):
            raise InputError(f"{name} is not an object", path=source)
        counts = {key: row.get(key) for key in ("docs", "p_docs", "n_docs", "questions")}
        bad = [key for key, v in counts.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0]
        if bad:
            raise InputError(f"{name}: {', '.join(repr(k) for k in bad)} must be whole numbers >= 0, got "
                             + ", ".join(f"{k}={counts[k]!r}" for k in bad), path=source)
        if counts["docs"] == 0 or counts["p_docs"] > counts["docs"] or counts["n_docs"] > counts["docs"]:
            raise InputError(f"{name}: p_docs={counts['p_docs']} and n_docs={counts['n_docs']} must be among its "
                             f"docs={counts['docs']} judged documents (> 0)", path=source)
    return rows


def check_correction_inputs(data: Mapping[str, Any], labelled: Any, judge_id: str = "", source: Any = None
                            ) -> list[dict[str, Any]]:
    """The checked rows of a sycophancy result (its JSON), refused when they need another berds or were counted by
    another judge than ``judge_id``, or when ``labelled`` lacks pairs of a stance: all knowable before judging."""
    from berds.trust.labels import STANCES

    rows = list(check_sycophancy_rows(data, source))
    for row in rows:
        if "query" not in row:
            raise BerdsError("this sycophancy result was written by an earlier berds (rows per perspective side, not "
                             "the paper's per-run Δ) — run `berds analyze sycophancy` again")
        # results written before rows named their judge carry no "judge" and are not checked
        if judge_id and row.get("judge") and row["judge"] != judge_id:
            raise BerdsError(f"the sycophancy row {row.get('label', '')!r} / query {row['query']} was counted by judge "
                             f"{row['judge']!r}, not {judge_id!r} — pass the judge that produced the result "
                             "(its error rates are what the correction needs)")
    stances = set(labelled.with_inferred_stances().stances)
    for stance in STANCES:
        if stance not in stances:
            raise BerdsError(f"{labelled.path or 'the labelled set'} has no pairs with a {stance!r} perspective — add a "
                             "'stance' column (support/oppose) or use questions whose two perspectives differ by a negation")
    return rows


def stance_corrected_sycophancy(
    sycophancy: Any,
    labelled: Any,
    predictions: Sequence[bool],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    judge_id: str = "",
) -> StanceCorrectedResult:
    """Correct every row of a ``SycophancyResult`` (or its JSON) with the judge's per-stance error rates.

    ``predictions`` are the same judge's labels for the pairs of ``labelled`` (in file order). Each row's
    ``N`` is its ``docs`` (the run's judged documents, behind both p and n).
    """
    from berds.trust.validate import check_bootstrap

    check_bootstrap(n_boot, seed)
    data = sycophancy.to_json() if hasattr(sycophancy, "to_json") else dict(sycophancy)
    k, rows = int(data["k"]), check_correction_inputs(data, labelled, judge_id)
    rates = stance_error_rates(labelled, predictions)
    pairs = labelled.with_inferred_stances().pairs
    gold = np.array([p.label for p in pairs], dtype=bool)
    pred = np.asarray(predictions, dtype=bool)
    by_stance = {s: np.array([i for i, p in enumerate(pairs) if p.stance == s]) for s in rates}
    rng = np.random.default_rng(seed)
    boot_rates = []
    for _ in range(max(n_boot, 0)):
        sample = {}
        for s, idx in by_stance.items():
            pick = idx[rng.integers(0, idx.size, idx.size)]
            g, y = gold[pick], pred[pick]
            sample[s] = StanceErrorRates(s, int((g & y).sum()), int((~g & y).sum()), int((g & ~y).sum()),
                                         int((~g & ~y).sum()))
        boot_rates.append(sample)
    out_rows = []
    sup, opp = SIDE_STANCE["supporting"], SIDE_STANCE["opposing"]
    for row in rows:
        total, p, n = int(row["docs"]), int(row["p_docs"]), int(row["n_docs"])
        corrected = corrected_delta(p, n, total, rates[sup], rates[opp])
        samples = np.array([corrected_delta(p, n, total, b[sup], b[opp])["delta_corrected"] for b in boot_rates],
                           dtype=float)
        samples = samples[~np.isnan(samples)]
        # no interval around an estimate that is undefined: the resamples where it happens to be defined are
        # not an interval for it
        ci = ((float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5)))
              if samples.size and not np.isnan(corrected["delta_corrected"]) else (float("nan"), float("nan")))
        out_rows.append({"label": row.get("label", ""), "query": row["query"], "p_docs": p, "n_docs": n,
                         "docs": total, "questions": int(row["questions"]), **corrected,
                         "delta_corrected_ci95": ci, "bootstrap_defined": int(samples.size),
                         "bootstrap_samples": len(boot_rates)})
    return StanceCorrectedResult(k, rates, out_rows, {"path": labelled.path, "sha256": labelled.sha256,
                                                      "n": len(labelled)}, judge_id)


def correct_sycophancy_file(
    result_path: str,
    labels_path: str,
    judge: Any,
    *,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    progress: bool = True,
) -> StanceCorrectedResult:
    """``berds judge stance-correct``: load a saved sycophancy result and a labelled file, judge the labelled
    pairs with the judge that produced the result (through the cache), and correct Δ."""
    from berds.errors import InputError
    from berds.evaluate.analyses.common import build_judge
    from berds.evaluate.analyses.results import load_result
    from berds.evaluate.analyses.sycophancy import SycophancyResult
    from berds.evaluate.cache import JudgementCache
    from berds.trust.labels import read_labelled_pairs
    from berds.trust.validate import check_bootstrap, judge_pairs

    check_bootstrap(n_boot, seed)  # before any judging
    result = load_result(result_path)
    if not isinstance(result, SycophancyResult):
        raise InputError(f"is a {result.KIND} result, not a sycophancy result", path=result_path,
                         fix="pass the JSON written by `berds analyze sycophancy`")
    check_sycophancy_rows(result.to_json(), result_path)  # before reading the labels
    labelled = read_labelled_pairs(labels_path)
    judge = build_judge(judge, judge_options)
    # before any judging (the judge's id needs no model loaded)
    check_correction_inputs(result.to_json(), labelled, judge.id, result_path)
    cache = JudgementCache(cache_path) if cache_path is not None else JudgementCache()
    try:
        verdicts = judge_pairs(judge, labelled.judge_pairs(), cache=cache, progress=progress,
                               description="judging labelled pairs")
    finally:
        cache.close()
    return stance_corrected_sycophancy(result, labelled, [v.label for v in verdicts], n_boot=n_boot, seed=seed,
                                       judge_id=judge.id)
