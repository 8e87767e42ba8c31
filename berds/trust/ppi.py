"""Corrected MRecall@k / Precision@k: prediction-powered estimates from a few human-labelled questions.

A judge's MRecall@k is its opinion; human labels on a random sample of questions correct it. Per question the
metric is a function of that question's labels (``berds.evaluate.metrics``), so with ``Ŷ_q`` the judged value
of question ``q`` (all ``N`` questions of the run) and ``Y_q`` the value from the human labels (the ``n``
questions whose every top-k pair is labelled)::

    θ̂_PPI  = mean_N(Ŷ) + mean_n(Y − Ŷ)          (prediction-powered; unbiased whatever the judge)
    θ̂_lab  = mean_n(Y)                           (labels only)

The interval depends on what the estimate is about (``population``):

* ``questions`` (default): the human metric averaged over *these* N questions — the quantity the judged table
  reports, with humans in place of the judge. The labelled questions are a simple random sample (without
  replacement) of the N, and the judged mean over the N is known exactly, so (the survey *difference
  estimator*)::

      SE²(θ̂_PPI) = (1 − n/N) · s²(Y − Ŷ) / n        SE²(θ̂_lab) = (1 − n/N) · s²(Y) / n

  with sample variances (n − 1 in the denominator) and a Student-t quantile with n − 1 degrees of freedom.
  All N labelled gives the exact value with a zero-width interval.
* ``superpopulation``: the mean over questions like these (the N are themselves a sample). This is the
  classic PPI of Angelopoulos et al. (2023), computed by ``ppi_py`` (``ppi_mean_ci`` with ``Y`` the human and
  ``Yhat`` the judged values of the n labelled questions, ``Yhat_unlabeled`` the judged values of the N − n
  *other* questions, so the two parts are independent samples; ``classical_mean_ci`` for labels only); its
  intervals use the normal quantile and ``ppi_py``'s variances (n in the denominator).

``lam``: 1 (default) is the plain, unbiased estimator above. ``tuned`` is PPI++ (Angelopoulos, Duchi & Zrnic
2023): ``θ̂ = λ·mean_N(Ŷ) + mean_n(Y − λŶ)`` with λ = Cov(Y, Ŷ)/Var(Ŷ) on the labelled questions, clipped to
[0, 1] (``ppi_py``'s own λ under ``superpopulation``); it never does much worse than labels alone when the judge
is poor, at the price of a small bias from estimating λ.

Macro averages (the mean of the dataset means) combine the datasets' estimates as independent strata:
``θ̂ = mean_d θ̂_d``, ``SE² = Σ_d SE_d² / D²`` (Welch–Satterthwaite degrees of freedom); every dataset needs at
least 2 labelled questions. Two runs (``corrected_difference``): the same estimators on the per-question
differences ``Y_A − Y_B`` and ``Ŷ_A − Ŷ_B``, paired on the questions labelled for both.

Intervals are clipped to the metric's range ([0, 1]; [−1, 1] for a difference). See docs/corrected-estimates.md.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.evaluate.metrics import question_metrics, stacked_metrics
from berds.trust.labels import LabelledSet

POPULATIONS = ("questions", "superpopulation")
LAMBDAS = ("1", "tuned")
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """One estimate with its interval. ``n`` questions carry human labels out of ``N``; ``low``/``high`` are
    None when the interval cannot be computed (fewer than 2 labelled questions), ``value`` None when n is 0."""

    value: float | None
    low: float | None
    high: float | None
    se: float | None
    n: int
    N: int
    df: float = math.inf
    lam: float = 1.0
    unclipped: float | None = None  # the point estimate before clipping to the metric's range (None: not clipped)

    @property
    def width(self) -> float | None:
        return None if self.low is None or self.high is None else self.high - self.low

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "ci95": None if self.low is None else [self.low, self.high],
                               "se": self.se, "n": self.n, "N": self.N}
        if math.isfinite(self.df):
            out["df"] = self.df
        if self.lam != 1.0:
            out["lambda"] = self.lam
        if self.unclipped is not None:
            out["unclipped"] = self.unclipped
        return out

    def text(self, scale: float = 100.0, sep: str = " ") -> str:
        """``66.7 [40.1, 93.2]`` (percent; ``sep="\n"`` puts the interval on a line of its own); ``-`` when there
        is nothing to estimate, ``[n<2]`` when one labelled question gives no interval."""
        if self.value is None:
            return "-"
        if self.low is None:
            return f"{scale * self.value:.1f}{sep}[n<2]"
        return f"{scale * self.value:.1f}{sep}[{scale * self.low:.1f}, {scale * self.high:.1f}]"


def _quantile(df: float, confidence: float) -> float:
    from berds.lazy import require

    stats = require("scipy.stats", extra="analysis", purpose="confidence intervals of corrected estimates")
    tail = 0.5 + confidence / 2
    return float(stats.norm.ppf(tail) if not math.isfinite(df) else stats.t.ppf(tail, df))


def _clip(x: float, bounds: tuple[float, float]) -> float:
    return min(max(x, bounds[0]), bounds[1])


def _bounded(value: float, low: float | None, high: float | None, se: float | None, n: int, N: int, *,
             bounds: tuple[float, float], df: float = math.inf, lam: float = 1.0) -> Estimate:
    """An estimate with its value and interval clipped to the metric's range (a PPI estimate from few questions
    can fall outside it: judged 90 + a mean correction of 20); the unclipped value is kept."""
    clipped = _clip(value, bounds)
    return Estimate(clipped, None if low is None else _clip(low, bounds), None if high is None else _clip(high, bounds),
                    se, n, N, df, lam, None if clipped == value else value)


def _interval(value: float, se: float, df: float, n: int, N: int, *, confidence: float, bounds: tuple[float, float],
              lam: float = 1.0) -> Estimate:
    half = _quantile(df, confidence) * se
    return _bounded(value, value - half, value + half, se, n, N, bounds=bounds, df=df, lam=lam)


def check_options(population: str, lam: str | float) -> None:
    """Refuse an unknown ``--population`` or ``--ppi-lambda`` (before any judging)."""
    _check(population, lam)


def _check(population: str, lam: str | float) -> float | None:
    if population not in POPULATIONS:
        raise BerdsError(f"unknown --population (population=) {population!r}; use one of {', '.join(POPULATIONS)}")
    if str(lam) not in LAMBDAS:
        raise BerdsError(f"unknown --ppi-lambda (lam=) {lam!r}; use 1 (plain PPI) or tuned (PPI++)")
    return 1.0 if str(lam) == "1" else None


def ppi_estimate(y: Sequence[float], yhat: Sequence[float], yhat_all: Sequence[float], *,
                 labelled: Sequence[bool] | None = None, population: str = "questions", lam: str | float = "1",
                 confidence: float = CONFIDENCE, bounds: tuple[float, float] = (0.0, 1.0)) -> Estimate:
    """The prediction-powered estimate of the mean of ``Y`` over the questions of ``yhat_all``.

    ``y``/``yhat``: human and judged values of the n labelled questions; ``yhat_all``: judged values of all N
    questions, the labelled ones included; ``labelled``: a mask over ``yhat_all`` marking the labelled ones
    (needed for ``superpopulation``, whose unlabelled part is the N − n others). See the module docstring."""
    fixed = _check(population, lam)
    y, yhat, yhat_all = (np.asarray(a, dtype=float) for a in (y, yhat, yhat_all))
    n, N = len(y), len(yhat_all)
    if len(yhat) != n:
        raise ValueError(f"y has {n} values but yhat {len(yhat)}")
    if n > N:
        raise ValueError(f"{n} labelled questions but only {N} in all")
    if n == 0:
        return Estimate(None, None, None, None, 0, N)
    if population == "superpopulation":
        mask = np.asarray(labelled, dtype=bool) if labelled is not None else None
        if mask is None or mask.sum() != n or len(mask) != N:
            raise ValueError("superpopulation needs the mask of labelled questions over yhat_all")
        rest = yhat_all[~mask]
        if n < 2 or len(rest) < 2:  # (ppi_py's variances need two of each; all or nearly all labelled: labels only)
            return labels_only_estimate(y, N, population=population, confidence=confidence, bounds=bounds)
        from berds.lazy import require

        ppi = require("ppi_py", extra="analysis", purpose="prediction-powered estimates (--population superpopulation)")
        alpha = 1 - confidence
        lam_used = fixed
        if lam_used is None:  # ppi_py's own PPI++ λ, computed once so the estimate and its interval share it
            from ppi_py.ppi import _calc_lam_glm

            point = ppi.ppi_mean_pointestimate(y, yhat, rest, lam=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                lam_used = float(_calc_lam_glm((y - point)[:, None], (yhat - point)[:, None], (rest - point)[:, None],
                                               np.eye(1), coord=None, clip=True))
            if not math.isfinite(lam_used):  # the judge gave every question the same value: it carries nothing
                lam_used = 0.0
        value = float(np.squeeze(ppi.ppi_mean_pointestimate(y, yhat, rest, lam=lam_used)))
        low, high = (float(np.squeeze(b)) for b in ppi.ppi_mean_ci(y, yhat, rest, alpha=alpha, lam=lam_used))
        se = (high - low) / (2 * _quantile(math.inf, confidence))
        return _bounded(value, low, high, se, n, N, bounds=bounds, lam=lam_used)
    if fixed is None:  # PPI++ for the finite population: the regression estimator's λ, clipped to [0, 1]
        var = float(np.var(yhat, ddof=1)) if n > 1 else 0.0
        lam_used = float(np.clip(np.cov(y, yhat, ddof=1)[0, 1] / var, 0.0, 1.0)) if var > 0 else 0.0
    else:
        lam_used = fixed
    value = float(lam_used * yhat_all.mean() + (y - lam_used * yhat).mean())
    if n < 2:
        return _bounded(value, None, None, None, n, N, bounds=bounds, lam=lam_used)
    se = math.sqrt(max(0.0, 1 - n / N) * float(np.var(y - lam_used * yhat, ddof=1)) / n)
    return _interval(value, se, n - 1, n, N, confidence=confidence, bounds=bounds, lam=lam_used)


def labels_only_estimate(y: Sequence[float], N: int, *, population: str = "questions", confidence: float = CONFIDENCE,
                         bounds: tuple[float, float] = (0.0, 1.0)) -> Estimate:
    """The mean of the human values of the n labelled questions, with its interval (finite-population correction
    under ``questions``; ``ppi_py.classical_mean_ci`` under ``superpopulation``)."""
    _check(population, "1")
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n == 0:
        return Estimate(None, None, None, None, 0, N)
    value = float(y.mean())
    if n < 2:
        return Estimate(value, None, None, None, n, N)
    if population == "superpopulation":
        from berds.lazy import require

        ppi = require("ppi_py", extra="analysis", purpose="prediction-powered estimates (--population superpopulation)")
        low, high = (float(b) for b in ppi.classical_mean_ci(y, alpha=1 - confidence))
        se = (high - low) / (2 * _quantile(math.inf, confidence))
        return _bounded(value, low, high, se, n, N, bounds=bounds)
    se = math.sqrt(max(0.0, 1 - n / N) * float(np.var(y, ddof=1)) / n)
    return _interval(value, se, n - 1, n, N, confidence=confidence, bounds=bounds)


def combine_strata(parts: Sequence[Estimate], *, confidence: float = CONFIDENCE,
                   bounds: tuple[float, float] = (0.0, 1.0)) -> Estimate:
    """The mean of independent per-dataset estimates (a macro average): SE² = Σ SE_d² / D², Welch–Satterthwaite
    degrees of freedom. No interval unless every part has one."""
    n, N = sum(p.n for p in parts), sum(p.N for p in parts)
    if not parts or any(p.value is None for p in parts):
        return Estimate(None, None, None, None, n, N)
    value = float(np.mean([p.value if p.unclipped is None else p.unclipped for p in parts]))  # (unbiased: raw values)
    if any(p.se is None for p in parts):
        return _bounded(value, None, None, None, n, N, bounds=bounds)
    D = len(parts)
    variances = [(p.se / D) ** 2 for p in parts]
    total = sum(variances)
    if total == 0:
        return _bounded(value, value, value, 0.0, n, N, bounds=bounds)
    finite = [(v, p.df) for v, p in zip(variances, parts) if math.isfinite(p.df)]
    if len(finite) < len(parts):
        df = math.inf
    else:
        denominator = sum(v * v / d for v, d in finite if v > 0)
        df = total * total / denominator if denominator else math.inf
    return _interval(value, math.sqrt(total), df, n, N, confidence=confidence, bounds=bounds)


# ---------------------------------------------------------------------------------------------------------------
# Human labels matched to a run


@dataclass
class HumanLabels:
    """A run's top-``depth`` pairs with the human labels found for them.

    ``matrices[qid]``: perspectives x depth, 1/0 where labelled, −1 where not (ranks past a short question's last
    passage are 0: unsupported, as in the judged metrics). ``matched``: labelled pairs used; ``unmatched``:
    counts of the file's pairs the run does not have (``questions``: their question id is not in the run;
    ``pairs``: the question is there but not that perspective with that passage text in its top depth)."""

    matrices: dict[str, np.ndarray]
    matched: int
    unmatched: dict[str, int]
    unmatched_examples: list[int]  # lines of a few unmatched pairs
    path: str
    sha256: str
    pairs: int

    def labelled(self, k: int) -> tuple[list[str], list[str]]:
        """(questions whose every top-k pair is labelled, questions with some but not all labelled), run order."""
        full, part = [], []
        for qid, h in self.matrices.items():
            top = h[:, :k]
            known = top >= 0
            if known.all():
                full.append(qid)
            elif known.any():
                part.append(qid)
        return full, part

    def human_metrics(self, qid: str, k: int) -> dict[str, float]:
        return question_metrics(self.matrices[qid][:, :k] == 1, [k])


def _label_index(labels: LabelledSet) -> dict[tuple[str, str, str], tuple[bool, int]]:
    """``(question id, perspective, document) -> (label, line)``; a pair labelled twice with different labels is
    refused, naming both lines (the same label twice is kept once)."""
    index: dict[tuple[str, str, str], tuple[bool, int]] = {}
    for p in labels:
        key = (p.id, p.perspective, p.document)
        seen = index.get(key)
        if seen is None:
            index[key] = (p.label, p.line)
        elif seen[0] != p.label:
            raise InputError(
                f"the pair (question {p.id!r}, perspective {p.perspective[:40]!r}..., this passage) is labelled "
                f"{int(seen[0])} on line {seen[1]} and {int(p.label)} on line {p.line}",
                path=labels.path or None, line=p.line,
                fix="settle the disagreement (keep one row per pair) before using the labels as the human sample")
    return index


def human_label_index(labels: LabelledSet) -> dict[tuple[str, str, str], bool]:
    """``(question id, perspective, passage text as judged) -> label`` of a labelled-pairs file (``report --html``'s
    grid shows them beside the judge's verdicts)."""
    return {key: label for key, (label, _) in _label_index(labels).items()}


def read_labels(path: Any) -> LabelledSet:
    """The labelled-pairs file ``--labels`` names, read and checked (a pair labelled twice differently is refused)
    — the commands call this before any judging."""
    from berds.trust.labels import read_labelled_pairs

    labels = read_labelled_pairs(path)
    _label_index(labels)
    return labels


def match_labels(run: Any, result: Any, labels: LabelledSet, *, title_position: str = "after") -> HumanLabels:
    """Match a labelled-pairs file to one evaluated run by question id, perspective and the passage text the judge
    saw (``title_position`` as in the evaluation). Refuses a file none of whose pairs match the run."""
    return _match(run, list(result.support), result.depth, result.run_name, labels, title_position)


def check_labels_for_run(run: Any, labels: LabelledSet, ks: Sequence[int], *, title_position: str = "after") -> None:
    """Before any judging: refuse labels none of which match ``run``, or that label no whole question at any k."""
    depth = max(ks)
    human = _match(run, list(run.questions), depth, run.name, labels, title_position)
    labelled, partly = {}, {}
    for k in ks:
        labelled[k], partly[k] = human.labelled(k)
    _require_some(run.name, list(ks), labelled, partly, labels.path)


def check_labels_for_paths(paths: Sequence[Any], labels: LabelledSet, ks: Sequence[int], *,
                           allow_short: bool = False, title_position: str = "after") -> None:
    """``check_labels_for_run`` for runs on disk (``compare``/``report --labels``, before they judge)."""
    from berds.runs import load_run

    for path in paths:
        run = load_run(path, allow_empty=allow_short)
        check_labels_for_run(run, labels, ks, title_position=title_position)


def _match(run: Any, qids: Sequence[str], depth: int, name: str, labels: LabelledSet, title_position: str
           ) -> HumanLabels:
    from berds.types import Passage

    index = _label_index(labels)
    used: set[tuple[str, str, str]] = set()
    matrices: dict[str, np.ndarray] = {}
    result_qids = set(qids)
    for qid in qids:
        perspectives = list(run.questions[qid].perspectives)
        hits = run.hits[qid][:depth]
        texts = Passage.judge_texts([h.passage for h in hits], title_position)
        h = np.zeros((len(perspectives), depth), dtype=np.int8)  # (past the last passage: unsupported)
        h[:, : len(texts)] = -1
        for i, perspective in enumerate(perspectives):
            for j, text in enumerate(texts):
                found = index.get((qid, perspective, text))
                if found is not None:
                    h[i, j] = int(found[0])
                    used.add((qid, perspective, text))
        matrices[qid] = h
    other = [(key, line) for key, (_, line) in index.items() if key not in used]
    missing_questions = sum(1 for key, _ in other if key[0] not in result_qids)
    # pairs of passages the run ranks below the judged depth: expected of labels sampled deeper (or for a larger k)
    deeper_texts: dict[str, set[str]] = {}
    for qid in {key[0] for key, _ in other if key[0] in result_qids}:
        deeper_texts[qid] = set(Passage.judge_texts([h.passage for h in run.hits[qid][depth:]], title_position))
    deeper = sum(1 for key, _ in other if key[0] in result_qids and key[2] in deeper_texts[key[0]])
    unmatched = {"questions": missing_questions, "pairs": len(other) - missing_questions, "deeper": deeper}
    if not used:
        asked = Counter(key[0] for key in index)
        shared = sum(1 for qid in asked if qid in result_qids)
        raise InputError(
            f"none of its {len(index)} labelled pairs matches run {name!r} ({shared} of the file's "
            f"{len(asked)} question ids are in the run; pairs are matched by question id, perspective and the passage "
            "text as the judge sees it)", path=labels.path or None,
            fix="give the labels sampled from this run's evaluation (`berds label sample`), with the same "
                "--title-position as the evaluation")
    return HumanLabels(matrices, len(used), unmatched, sorted(line for _, line in other)[:5], labels.path,
                       labels.sha256, len(labels))


# ---------------------------------------------------------------------------------------------------------------
# Corrected metrics of one run, and the difference of two


@dataclass
class CorrectedRow:
    """One metric of one group (``all``, a dataset, ``macro``): the judged value beside the two estimates."""

    group: str
    metric: str
    judged: float | None
    ppi: Estimate
    labels_only: Estimate

    def to_json(self) -> dict[str, Any]:
        return {"judged": self.judged, "ppi": self.ppi.to_json(), "labels_only": self.labels_only.to_json()}


@dataclass
class Corrected:
    """The corrected metrics of a run (or of the difference of two: ``run`` is then ``A − B``)."""

    run: str
    rows: list[CorrectedRow]
    partly_labelled: dict[int, list[str]]
    labelled: dict[int, list[str]]
    population: str
    lam: str
    source: Mapping[str, Any] = field(default_factory=dict)

    def find(self, metric: str, group: str = "all") -> CorrectedRow | None:
        return next((r for r in self.rows if r.metric == metric and r.group == group), None)

    def to_json(self) -> dict[str, Any]:
        estimates: dict[str, dict[str, Any]] = {}
        for r in self.rows:
            estimates.setdefault(r.group, {})[r.metric] = r.to_json()
        return {
            "run": self.run, "population": self.population, "lambda": self.lam, "confidence": CONFIDENCE,
            "labelled_questions": {str(k): v for k, v in self.labelled.items()},
            "partly_labelled_questions": {str(k): v for k, v in self.partly_labelled.items()},
            **dict(self.source), "estimates": estimates,
        }


def _groups(qids: Sequence[str], datasets: Mapping[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for qid in qids:
        groups.setdefault(datasets.get(qid) or "-", []).append(qid)
    return groups


def _rows(metric_names: Sequence[tuple[int, str]], qids: Sequence[str], datasets: Mapping[str, str],
          labelled: Mapping[int, set[str]], judged: Mapping[str, Mapping[str, float]],
          human: Mapping[str, Mapping[str, float]], *, population: str, lam: str, bounds: tuple[float, float]
          ) -> list[CorrectedRow]:
    """The estimates of every metric for ``all``, each dataset and ``macro`` (when there are several)."""
    groups = _groups(qids, datasets)
    rows: list[CorrectedRow] = []
    for k, metric in metric_names:
        per_group: dict[str, CorrectedRow] = {}
        for name, members in [("all", list(qids)), *(sorted(groups.items()) if len(groups) > 1 else [])]:
            mask = [q in labelled[k] for q in members]
            lab = [q for q in members if q in labelled[k]]
            y = [human[q][metric] for q in lab]
            yhat = [judged[q][metric] for q in lab]
            yall = [judged[q][metric] for q in members]
            per_group[name] = CorrectedRow(
                name, metric, float(np.mean(yall)) if yall else None,
                ppi_estimate(y, yhat, yall, labelled=mask, population=population, lam=lam, bounds=bounds),
                labels_only_estimate(y, len(members), population=population, bounds=bounds))
        rows.append(per_group["all"])
        if len(groups) > 1:
            parts = [per_group[name] for name in sorted(groups)]
            rows.extend(parts)
            rows.append(CorrectedRow("macro", metric, float(np.mean([p.judged for p in parts])),
                                     combine_strata([p.ppi for p in parts], bounds=bounds),
                                     combine_strata([p.labels_only for p in parts], bounds=bounds)))
    return rows


def _metric_names(ks: Sequence[int]) -> list[tuple[int, str]]:
    return [(k, f"mrecall@{k}") for k in ks] + [(k, f"precision@{k}") for k in ks]


def _source(human: HumanLabels) -> dict[str, Any]:
    return {"labels": {"path": human.path, "sha256": human.sha256, "pairs": human.pairs,
                       "matched_pairs": human.matched, "unmatched_pairs": human.unmatched,
                       "unmatched_example_lines": human.unmatched_examples}}


def _require_some(name: str, ks: Sequence[int], labelled: Mapping[int, list[str]],
                  partly: Mapping[int, list[str]], path: str) -> None:
    if not any(labelled[k] for k in ks):
        some = sorted({q for k in ks for q in partly[k]})
        raise InputError(
            f"no question of run {name!r} has every (perspective, passage) pair of its top {min(ks)} labelled "
            f"({len(some)} partly labelled: {', '.join(some[:5])}{' ...' if len(some) > 5 else ''})",
            path=path or None, fix="label whole questions (`berds label sample` takes every pair of each question's "
                                   "top k), or evaluate at the k the labels were sampled for")


def corrected_metrics(run: Any, result: Any, labels: LabelledSet, *, title_position: str = "after",
                      population: str = "questions", lam: str = "1") -> Corrected:
    """Judged, prediction-powered and labels-only MRecall@k / Precision@k of one evaluated run (``EvalResult``),
    per dataset and macro, from the human labels in ``labels``."""
    _check(population, lam)
    human = match_labels(run, result, labels, title_position=title_position)
    ks = list(result.ks)
    labelled, partly = {}, {}
    for k in ks:
        labelled[k], partly[k] = human.labelled(k)
    _require_some(result.run_name, ks, labelled, partly, labels.path)
    values = {qid: {m: v for k in ks for m, v in human.human_metrics(qid, k).items()}
              for qid in set().union(*map(set, labelled.values()))}
    rows = _rows(_metric_names(ks), list(result.per_question), result.datasets, {k: set(v) for k, v in labelled.items()},
                 result.per_question, values, population=population, lam=lam, bounds=(0.0, 1.0))
    return Corrected(result.run_name, rows, partly, labelled, population, lam, _source(human))


def corrected_difference(run_a: Any, result_a: Any, run_b: Any, result_b: Any, labels: LabelledSet, *,
                         title_position: str = "after", population: str = "questions", lam: str = "1") -> Corrected:
    """The corrected difference A − B of two runs, paired on their shared questions: the estimators of
    ``corrected_metrics`` on the per-question differences, over the questions labelled for both runs."""
    _check(population, lam)
    human_a = match_labels(run_a, result_a, labels, title_position=title_position)
    human_b = match_labels(run_b, result_b, labels, title_position=title_position)
    ks = [k for k in result_a.ks if k in result_b.ks]
    shared = [q for q in result_a.per_question if q in result_b.per_question]
    labelled, partly = {}, {}
    for k in ks:
        full_a, part_a = human_a.labelled(k)
        full_b, part_b = human_b.labelled(k)
        both = set(full_a) & set(full_b)
        labelled[k] = [q for q in shared if q in both]
        partly[k] = [q for q in shared if q not in both and (q in part_a or q in part_b or q in full_a or q in full_b)]
    name = f"{result_a.run_name} − {result_b.run_name}"
    _require_some(name, ks, labelled, partly, labels.path)
    judged = {q: {m: result_a.per_question[q][m] - result_b.per_question[q][m] for _, m in _metric_names(ks)}
              for q in shared}
    human: dict[str, dict[str, float]] = {}
    for q in set().union(*map(set, labelled.values())):
        human[q] = {}
        for k in ks:
            if q in labelled[k]:
                a, b = human_a.human_metrics(q, k), human_b.human_metrics(q, k)
                human[q].update({m: a[m] - b[m] for m in a})
    rows = _rows(_metric_names(ks), shared, result_a.datasets, {k: set(v) for k, v in labelled.items()}, judged, human,
                 population=population, lam=lam, bounds=(-1.0, 1.0))
    source = {"runs": [result_a.run_name, result_b.run_name], **_source(human_a)}
    return Corrected(name, rows, partly, labelled, population, lam, source)


# ---------------------------------------------------------------------------------------------------------------
# What the commands print


def notes(corrected: Corrected) -> list[str]:
    """The stderr lines a command prints for one corrected result: partly labelled questions left out, labels the
    run does not have."""
    out = []
    for k, qids in corrected.partly_labelled.items():
        if qids:
            out.append(f"note: {corrected.run}: {len(qids)} partly labelled question(s) left out of the k={k} "
                       f"estimates (not every top-{k} pair labelled): {', '.join(qids[:8])}"
                       + (" ..." if len(qids) > 8 else "")
                       # (a run left out of `label sample` loses the questions its own ranking moved off the
                       # sampled passages: the rest are then no random sample, and the estimate may be biased)
                       + (" — the rest stand for a random sample only if these were left partly labelled by "
                          "chance; labels sampled from other runs are not: include every run you correct in "
                          "`berds label sample`" if corrected.labelled.get(k) else
                          f" — none is whole at k={k}: label the top {k} (`berds label sample --k {k}`)"))
    flat = sorted({r.metric for r in corrected.rows for e in (r.ppi, r.labels_only)
                   if e.width == 0 and e.n < e.N})
    if flat:
        out.append(f"note: {corrected.run}: {', '.join(flat)}: every labelled question gave the same value (or the "
                   "same human − judged difference), so the normal interval has width 0 — it understates the "
                   "uncertainty of so few questions; label more")
    labels = corrected.source.get("labels") or {}
    unmatched = labels.get("unmatched_pairs") or {}
    if "runs" not in corrected.source and (unmatched.get("questions") or unmatched.get("pairs")):  # (a difference:
        # its runs' own notes said it)
        lines = labels.get("unmatched_example_lines") or []
        deeper = int(unmatched.get("deeper", 0))
        where = (f" ({deeper} of them for passages it ranks below that: labels of deeper ranks, as a sample drawn "
                 "at a larger k has)" if deeper else "")
        out.append(f"note: {corrected.run}: {unmatched.get('questions', 0)} labelled pair(s) are for questions the run "
                   f"does not have and {unmatched.get('pairs', 0)} for passages or perspectives not in its judged top "
                   f"ranks{where} (e.g. lines {', '.join(map(str, lines))} of {labels.get('path', 'the labels')}); "
                   "not used")
    return out


def corrected_table(results: Sequence[Corrected], *, title: str = "corrected estimates (95% CI)") -> Any:
    """A rich table within 80 columns: per run (or difference of two), metric and set (``all``, each dataset,
    ``macro``) the judged value, the prediction-powered estimate and the labels-only estimate with their intervals
    (percent), and n labelled / N questions."""
    from rich.table import Table

    population = {r.population for r in results}
    lam = {r.lam for r in results}
    caption = ("PPI = judged mean + mean(human − judged) over the n labelled questions; intervals for "
               + ("these N questions" if population == {"questions"} else "questions like these")
               + ("; λ tuned (PPI++)" if lam != {"1"} else ""))
    table = Table(title=title, caption=caption)
    table.add_column("run / metric / set", overflow="fold", max_width=22)
    table.add_column("judged", justify="right")
    table.add_column("PPI\n[95% CI]", justify="right")
    table.add_column("labels only\n[95% CI]", justify="right")
    table.add_column("n/N", justify="right")
    for c in results:
        table.add_row(c.run, "", "", "", "")
        for r in c.rows:
            metric = r.metric.replace("mrecall", "MRecall").replace("precision", "Prec")
            label = f"  {metric}" if r.group == "all" else f"    {r.group}"
            judged = "-" if r.judged is None else f"{100 * r.judged:.1f}"
            table.add_row(label, judged, _cell(r.ppi), _cell(r.labels_only), f"{r.ppi.n}/{r.ppi.N}")
    return table


def _cell(e: Estimate) -> str:
    """``66.7`` over ``[40.1,93.2]``: two short lines keep the table within 80 columns."""
    if e.value is None or e.low is None:
        return e.text()
    return f"{100 * e.value:.1f}\n[{100 * e.low:.1f},{100 * e.high:.1f}]"


def correct_evaluations(evaluated: Sequence[tuple[Any, Any, Mapping[str, Any]]], labels_path: str | Any, *,
                        title_position: str = "after", duplicates: str = "refuse", allow_short: bool = False,
                        population: str = "questions", lam: str = "1", write: bool = True) -> list[Corrected]:
    """``berds eval --labels``: the corrected metrics of each ``(path, EvalResult, files)`` that ``evaluate_paths``
    returned, from the labelled-pairs file at ``labels_path``; with ``write``, each result's ``metrics.json``
    (the run folder's copy and the one under ``eval/JUDGE/``) gets them under ``"corrected"``."""
    from pathlib import Path

    from berds.io import read_json, write_json
    from berds.runs import load_run
    _check(population, lam)
    labels = labels_path if isinstance(labels_path, LabelledSet) else read_labels(labels_path)
    out = []
    for path, result, files in evaluated:
        run = load_run(path, allow_empty=allow_short, duplicates=duplicates, duplicates_option="--duplicates")
        corrected = corrected_metrics(run, result, labels, title_position=title_position, population=population,
                                      lam=lam)
        out.append(corrected)
        if write and files:
            targets = {Path(files["metrics"])}
            if files.get("judgements"):
                targets.add(Path(files["judgements"]).parent / "metrics.json")
            for target in targets:
                if target.is_file():
                    write_json(target, {**read_json(target), "corrected": corrected.to_json()})
    return out


def print_corrected(evaluated: Sequence[tuple[Any, Any, Mapping[str, Any]]], labels: LabelledSet, *, console: Any = None,
                    **options: Any) -> list[Corrected]:
    """What ``--labels`` adds to a command's output: the corrected table on the console, the notes on stderr, and
    the estimates in each ``metrics.json`` (``correct_evaluations``)."""
    corrected = correct_evaluations(evaluated, labels, **options)
    print_corrected_runs(corrected, console=console)
    return corrected


# ---------------------------------------------------------------------------------------------------------------
# How many questions to label: `berds label plan`


def questions_needed(s_rectifier: float, N: int, width: float, *, population: str = "questions",
                     s_judged: float = 0.0, confidence: float = CONFIDENCE) -> int | None:
    """The fewest labelled questions n (2 <= n <= N) whose 95% interval is at most ``width`` wide (full width, on
    the metric's 0–1 scale), given the standard deviation ``s_rectifier`` of human − judged (PPI; of the human
    values for labels only, with ``s_judged`` 0) measured on a pilot sample. ``questions``: width =
    2·t(n−1)·sqrt((1 − n/N)·s²/n); ``superpopulation``: 2·z·sqrt(s_judged²/(N − n) + s²/n), the variance of
    ``ppi_py``'s interval with the N − n others unlabelled. None when no n <= N reaches it."""
    _check(population, "1")
    if width <= 0:
        raise BerdsError(f"--target-width must be positive, got {width}")
    for n in range(2, N + 1):
        if population == "questions":
            half = _quantile(n - 1, confidence) * math.sqrt(max(0.0, 1 - n / N) * s_rectifier ** 2 / n)
        else:
            if N - n < 2 and s_judged > 0:
                return None
            rest = s_judged ** 2 / (N - n) if N > n else 0.0
            half = _quantile(math.inf, confidence) * math.sqrt(rest + s_rectifier ** 2 / n)
        if 2 * half <= width:
            return n
    return None


PLAN_QUANTILE = 0.9  # the conservative plan: n enough in this share of the simulation's draws


@dataclass
class PlanRow:
    """One metric's plan. From a pilot (``source`` "pilot"): the pilot's SDs and n. From error rates ("error
    rates", ``plan_from_error_rates``): ``s_rectifier`` is the central SD of human − judged over the draws and
    ``n_ppi`` the n it needs; ``s_rectifier_90``/``n_ppi_90`` the conservative plan (the SD at the 90th percentile
    of the draws and the n that suffices in 90% of them); ``rates`` says which rates it rests on
    (``ErrorRates.summary``)."""

    metric: str
    pilot: int
    N: int
    s_rectifier: float
    s_human: float
    n_ppi: int | None
    n_labels_only: int | None
    width_now: float | None
    source: str = "pilot"  # "pilot" (a labelled sample) or "error rates" (plan_from_error_rates)
    s_rectifier_90: float = math.nan
    n_ppi_90: int | None = None
    rates: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class ErrorRates:
    """A judge's pair-level error rates as measured on human labels (``berds judge validate --out FILE``).

    ``counts`` (tp, fp, fn, tn) are the validation's confusion counts; with them the rates are uncertain and
    ``posterior`` draws them from Beta(tp + 1, fn + 1) (sensitivity) and Beta(tn + 1, fp + 1) (specificity):
    the posteriors under uniform Beta(1, 1) priors, independent of each other (the Yes and the No pairs are
    disjoint samples). Without counts the rates are taken as exact."""

    judge_id: str
    sensitivity: float  # P(judge Yes | human Yes)
    specificity: float  # P(judge No | human No)
    pairs: int
    source: str = ""
    counts: tuple[int, int, int, int] | None = None  # (tp, fp, fn, tn); None: the rates are exact

    @classmethod
    def from_counts(cls, judge_id: str, tp: int, fp: int, fn: int, tn: int, source: str = "") -> "ErrorRates":
        """The measured rates tp/(tp + fn) and tn/(tn + fp), with the counts that make them uncertain."""
        return cls(judge_id, tp / (tp + fn), tn / (tn + fp), tp + fp + fn + tn, source, (tp, fp, fn, tn))

    def _beta(self) -> tuple[tuple[int, int], tuple[int, int]]:
        tp, fp, fn, tn = self.counts  # type: ignore[misc]
        return (tp + 1, fn + 1), (tn + 1, fp + 1)

    def posterior(self, rng: np.random.Generator, draws: int) -> tuple[np.ndarray, np.ndarray]:
        """``draws`` (sensitivity, specificity) pairs from their posteriors; the point rates repeated when
        there are no counts."""
        if self.counts is None:
            return np.full(draws, self.sensitivity), np.full(draws, self.specificity)
        (a, b), (c, d) = self._beta()
        return rng.beta(a, b, draws), rng.beta(c, d, draws)

    def interval(self, confidence: float = CONFIDENCE) -> tuple[tuple[float, float], tuple[float, float]] | None:
        """Equal-tailed credible intervals of (sensitivity, specificity); None without counts."""
        if self.counts is None:
            return None
        from berds.lazy import require

        stats = require("scipy.stats", extra="analysis", purpose="credible intervals of a judge's error rates")
        tails = ((1 - confidence) / 2, (1 + confidence) / 2)
        sens, spec = (tuple(float(x) for x in stats.beta.ppf(tails, *ab)) for ab in self._beta())
        return sens, spec  # type: ignore[return-value]

    def summary(self, draws: int) -> dict[str, Any]:
        """What a plan rests on, for its note and JSON."""
        out: dict[str, Any] = {"judge_id": self.judge_id, "source": self.source, "pairs": self.pairs,
                               "sensitivity": self.sensitivity, "specificity": self.specificity, "draws": draws}
        bounds = self.interval()
        if bounds is not None:
            tp, fp, fn, tn = self.counts  # type: ignore[misc]
            out.update(counts={"tp": tp, "fp": fp, "fn": fn, "tn": tn}, sensitivity_ci95=list(bounds[0]),
                       specificity_ci95=list(bounds[1]), prior="uniform Beta(1, 1)")
        return out

    @classmethod
    def from_validation(cls, path: Any, judge_id: str) -> "ErrorRates":
        """The row of ``judge_id`` in a ``judge validate --out`` JSON file (its confusion counts)."""
        from berds.io import read_json

        data = read_json(path)
        rows = data.get("judges") if isinstance(data, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise InputError("not a `berds judge validate --out` report (no 'judges' list)", path=path)
        found = [r for r in rows if r.get("judge_id") == judge_id]
        if not found:
            ids = ", ".join(str(r.get("judge_id")) for r in rows) or "none"
            raise InputError(f"no validation of the judge {judge_id!r} in this report (it validated: {ids})", path=path,
                             fix="validate this judge on human labels first: `berds judge validate --labels FILE "
                                 "--judge J --out FILE.json`; another judge's error rates say nothing about this one")
        counts = found[0].get("counts") or {}
        try:
            tp, fp, fn, tn = (int(counts[key]) for key in ("tp", "fp", "fn", "tn"))
        except (KeyError, TypeError, ValueError):
            raise InputError(f"the row of {judge_id!r} has no confusion counts (tp, fp, fn, tn)", path=path) from None
        if min(tp, fp, fn, tn) < 0:
            raise InputError(f"the row of {judge_id!r} has a negative confusion count: {counts}", path=path)
        if tp + fn == 0 or tn + fp == 0:
            raise InputError(f"the validation of {judge_id!r} has {'no Yes' if tp + fn == 0 else 'no No'} label: its "
                             "sensitivity and specificity are not both measured", path=path)
        return cls.from_counts(judge_id, tp, fp, fn, tn, str(path))


def _label_odds(tpr: Any, fpr: Any, q: float) -> tuple[np.ndarray, np.ndarray]:
    """``(P(human Yes | judge Yes), P(human Yes | judge No))`` for arrays of rates, on a run whose judged Yes
    share is ``q``: the prevalence π solved from ``q = tpr·π + fpr·(1 − π)`` (clipped to [0, 1]; any judge but
    one with tpr = fpr, whose π is anything and whose verdicts are noise: π = q), then Bayes."""
    tpr, fpr = np.asarray(tpr, dtype=float), np.asarray(fpr, dtype=float)
    gap = tpr - fpr
    noise = np.abs(gap) <= 1e-12
    prevalence = np.clip(np.where(noise, q, (q - fpr) / np.where(noise, 1.0, gap)), 0.0, 1.0)
    ppv = np.minimum(1.0, tpr * prevalence / q) if q > 0 else np.zeros_like(tpr)
    false_omission = np.minimum(1.0, (1 - tpr) * prevalence / (1 - q)) if q < 1 else np.zeros_like(tpr)
    return np.where(noise, prevalence, ppv), np.where(noise, prevalence, false_omission)


def _true_label_odds(rates: ErrorRates, judged_yes_share: float) -> tuple[float, float]:
    """``(P(human Yes | judge Yes), P(human Yes | judge No))`` on a run whose judged Yes share is given, at the
    measured rates: the run's prevalence from that share and the judge's rates (``q = sens·π + (1 − spec)·(1 − π)``),
    then Bayes. A judge whose measured rates carry no information is refused."""
    tpr, fpr = rates.sensitivity, 1 - rates.specificity
    if tpr <= fpr:
        raise BerdsError(f"the judge {rates.judge_id} says Yes no more often to supporting pairs ({100 * tpr:.1f}%) "
                         f"than to others ({100 * fpr:.1f}%) in {rates.source or 'its validation'}: its verdicts carry "
                         "no information to plan from — plan from a labelled pilot (--labels)")
    ppv, false_omission = _label_odds(tpr, fpr, judged_yes_share)
    return float(ppv), float(false_omission)


def plan_from_error_rates(result: Any, rates: ErrorRates, *, target_width: float, population: str = "questions",
                          draws: int = 400, seed: int = 0) -> list[PlanRow]:
    """How many questions to label, without a pilot: the spread of human − judged simulated from the judge's
    validated error rates.

    Each of ``draws`` draws takes a sensitivity and a specificity from their posteriors given the validation's
    confusion counts (``ErrorRates.posterior``: Beta(tp + 1, fn + 1), Beta(tn + 1, fp + 1), uniform priors; the
    measured rates themselves when ``rates`` has no counts), and gives every judged pair of the evaluation
    ``result`` a human label drawn from P(human Yes | judged) at those rates (``_label_odds``: the run's
    prevalence from its judged Yes share, then Bayes), independently pair by pair. Per draw, the SD across the
    run's questions of human − judged; so its spread over draws holds both the rates' uncertainty and how the
    human labels of these N questions fall. Central plan: the root mean square of the draws' SDs (the
    mean variance: n scales with it), n from ``questions_needed`` as ``plan_labels`` does. Conservative plan
    (``*_90``): the 90th percentile of the draws' SDs and its n, the n that suffices in 90% of the draws (or the
    central SD and n, when these are larger: never a smaller plan than the central one). Draws of a judge that
    says Yes less often to supporting pairs than to others, which a small validation does not rule out, are kept
    (only measured rates like that are refused). The central SD need not exceed that of the measured rates: the
    uniform prior pulls the rates towards 0.5, which moves the prevalence solved from the run's Yes share.

    It assumes the judge errs on this run as on the validated pairs and independently per pair (errors that
    cluster in questions widen the spread: label more than it says). The seed fixes the plan: the rates and the
    labels come from two streams spawned from it, so a plan with exact rates uses the same label draws."""
    _check(population, "1")
    if target_width <= 0 or target_width > 100:
        raise BerdsError(f"--target-width is in percentage points, between 0 and 100; got {target_width:g}")
    if draws < 2:
        raise BerdsError(f"the plan needs at least 2 simulation draws, got {draws}")
    if result.judge_id != rates.judge_id:
        raise BerdsError(f"the error rates are {rates.judge_id!r}'s but the run was judged by {result.judge_id!r}")
    ks = tuple(result.ks)
    depth = max(ks)
    matrices = [np.asarray(result.support[q], dtype=bool)[:, :depth] for q in result.per_question]
    judged_pairs = sum(m.size for m in matrices)
    yes_share = sum(int(m.sum()) for m in matrices) / judged_pairs if judged_pairs else 0.0
    _true_label_odds(rates, yes_share)  # (refuses a judge whose measured rates carry no information)
    rate_rng, label_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    sensitivity, specificity = rates.posterior(rate_rng, draws)
    ppv, false_omission = _label_odds(sensitivity, 1 - specificity, yes_share)
    ppv, false_omission = ppv[:, None, None], false_omission[:, None, None]
    # per metric: (draws × questions) of human and of human − judged
    human = {name: np.zeros((draws, len(matrices))) for _, name in _metric_names(ks)}
    for j, judged in enumerate(matrices):
        odds = np.where(judged[None], ppv, false_omission)
        sampled = label_rng.random((draws, *judged.shape)) < odds
        for k in ks:
            mrecall, precision = stacked_metrics(sampled, k)
            human[f"mrecall@{k}"][:, j], human[f"precision@{k}"][:, j] = mrecall, precision
    rows = []
    N = len(matrices)
    width = target_width / 100
    summary = rates.summary(draws)
    for k, metric in _metric_names(ks):
        yhat = np.array([result.per_question[q][metric] for q in result.per_question])
        if N < 2:
            rows.append(PlanRow(metric, 0, N, math.nan, math.nan, None, None, None, source="error rates",
                                rates=summary))
            continue
        per_draw = np.std(human[metric] - yhat, axis=1, ddof=1)
        s_d = float(np.sqrt(np.mean(per_draw ** 2)))
        # (inverted_cdf: an SD that at least 90% of the draws do not exceed, so its n suffices in 90% of them;
        # never below the central SD, which a spread piled up at its top, as MRecall's 0/1 values make, can pass)
        s_90 = max(s_d, float(np.quantile(per_draw, PLAN_QUANTILE, method="inverted_cdf")))
        s_hat = float(np.std(yhat, ddof=1))
        # labels only is not planned: it needs the spread of the true values across questions, which pair-level
        # error rates cannot give (on the demo the simulation put it at 0 where a pilot measured 42 points)
        rows.append(PlanRow(metric, 0, N, s_d, math.nan,
                            questions_needed(s_d, N, width, population=population, s_judged=s_hat),
                            None, None, source="error rates", s_rectifier_90=s_90,
                            n_ppi_90=questions_needed(s_90, N, width, population=population, s_judged=s_hat),
                            rates=summary))
    return rows


def plan_labels(run_path: Any, judge: Any, labels: Any = None, *, target_width: float, ks: Sequence[int] = (5,),
                cache_path: Any = None, title_position: str = "after", population: str = "questions",
                judge_options: Mapping[str, Any] | None = None, duplicates: str = "refuse",
                allow_short: bool = False, validation: Any = None, draws: int = 400, seed: int = 0) -> list[PlanRow]:
    """``berds label plan``: how many questions of an evaluated run (its verdicts read from the judgement cache,
    nothing judged) to label for a 95% interval of ``target_width`` (percentage points) on each metric, with the
    judge (PPI) and without it (labels only) — from a pilot sample of whole labelled questions (``labels``), or
    from the judge's error rates in a ``judge validate --out`` report (``validation``; ``plan_from_error_rates``)."""
    from berds.evaluate.cache import JudgementCache
    from berds.evaluate.evaluation import EvalOptions, evaluate_run
    from berds.judges import LazyJudge, check_judge_name, load_judge
    from berds.runs import load_run

    _check(population, "1")
    if target_width <= 0 or target_width > 100:
        raise BerdsError(f"--target-width is in percentage points, between 0 and 100; got {target_width:g}")
    if (labels is None) == (validation is None):
        raise BerdsError("plan from a labelled pilot sample (--labels FILE) or from the judge's validated error rates "
                         "(--validation FILE, what `berds judge validate --out` wrote): give one of them")
    if labels is not None:
        labels = labels if isinstance(labels, LabelledSet) else read_labels(labels)
    run = load_run(run_path, allow_empty=allow_short, duplicates=duplicates, duplicates_option="--duplicates")
    if isinstance(judge, str):
        check_judge_name(judge)
        name, options = judge, dict(judge_options or {})
        judge = LazyJudge(lambda: load_judge(name, **options))
    with JudgementCache(cache_path) as cache:
        try:
            result = evaluate_run(run, judge, EvalOptions(ks=tuple(ks), overwrite="never", progress=False,
                                                          title_position=title_position, allow_short=allow_short,
                                                          duplicates=duplicates), cache=cache)
        except BerdsError as exc:
            if "not in the judgement cache" not in str(exc):
                raise
            # (the evaluation's own advice, "use --overwrite only-missing", is no option of `label plan`)
            what = str(exc).split(" and --overwrite never", 1)[0]
            raise BerdsError(f"{what}; `berds label plan` judges nothing: run `berds eval {run_path} --judge ...` "
                             "first (with the same --cache)") from None
    if validation is not None:
        rates = ErrorRates.from_validation(validation, result.judge_id)
        return plan_from_error_rates(result, rates, target_width=target_width, population=population, draws=draws,
                                     seed=seed)
    corrected = corrected_metrics(run, result, labels, title_position=title_position, population=population)
    human = match_labels(run, result, labels, title_position=title_position)
    rows = []
    for k, metric in _metric_names(result.ks):
        lab = corrected.labelled[k]
        y = np.array([human.human_metrics(q, k)[metric] for q in lab])
        yhat = np.array([result.per_question[q][metric] for q in lab])
        yall = np.array([v[metric] for v in result.per_question.values()])
        N = len(yall)
        if len(lab) < 2:
            rows.append(PlanRow(metric, len(lab), N, math.nan, math.nan, None, None, None))
            continue
        s_d, s_y = float(np.std(y - yhat, ddof=1)), float(np.std(y, ddof=1))
        s_hat = float(np.std(yall, ddof=1))
        width = target_width / 100
        row = corrected.find(metric)
        rows.append(PlanRow(metric, len(lab), N, s_d, s_y,
                            questions_needed(s_d, N, width, population=population, s_judged=s_hat),
                            questions_needed(s_y, N, width, population=population),
                            row.ppi.width if row is not None else None))
    return rows


def _needed(n: int | None, row: PlanRow, spread: float | None = None) -> str:
    spread = row.s_rectifier if spread is None else spread
    if row.pilot < 2 and row.source == "pilot" or spread != spread:
        return "-"  # (no spread to plan from)
    return f"> {row.N}" if n is None else str(n)  # (None: out of reach even with every question labelled)


def plan_table(rows: Sequence[PlanRow], *, target_width: float) -> Any:
    """The plan as a table; from error rates the conservative ``n PPI 90%`` column stands where a pilot's
    ``width now`` does (``rates_note`` says what the rates rest on)."""
    from rich.table import Table

    from_rates = any(r.source == "error rates" for r in rows)
    caption = ("from the spread of human − judged simulated from the judge's validated error rates, drawn from "
               "their posteriors; n PPI 90%: enough in 90% of the draws; pairs independent (errors that cluster in "
               "questions need more: label more than it says); labels only needs a pilot" if from_rates else
               "from the pilot's spread of human − judged (PPI) and of human values (labels only), "
               "in points like the widths; a pilot with no disagreement plans too few — label more than it says")
    table = Table(title=f"questions to label for a 95% interval {target_width:g} points wide", caption=caption)
    # (from rates there is no interval now: its column gives way to the conservative n, so 80 columns still fit)
    columns = ["metric", "pilot n", *["width now"] * (not from_rates), "SD human − judged", "SD human", "n PPI",
               *["n PPI 90%"] * from_rates, "n labels only", "N"]
    for col in columns:
        # the metric is never cut to "MRecall…" in 80 columns: the other headers wrap instead
        table.add_column(col, justify="left" if col == "metric" else "right", no_wrap=col == "metric",
                         min_width=11 if col == "metric" else None)
    for r in rows:
        metric = r.metric.replace("mrecall", "MRecall").replace("precision", "Prec")
        now = [] if from_rates else ["-" if r.width_now is None else f"{100 * r.width_now:.1f}"]
        conservative = [_needed(r.n_ppi_90, r, r.s_rectifier_90)] if from_rates else []
        table.add_row(metric, str(r.pilot) if r.source == "pilot" else "rates", *now,
                      "-" if r.s_rectifier != r.s_rectifier else f"{100 * r.s_rectifier:.1f}",
                      "-" if r.s_human != r.s_human else f"{100 * r.s_human:.1f}", _needed(r.n_ppi, r), *conservative,
                      _needed(r.n_labels_only, r, r.s_human), str(r.N))
    return table


def rates_note(rows: Sequence[PlanRow]) -> str | None:
    """The line under a plan from error rates: which rates, on how many validated pairs, with their 95% credible
    intervals (None for a pilot's plan)."""
    rates = next((r.rates for r in rows if r.rates), None)
    if rates is None:
        return None
    where = f" of {rates['source']}" if rates.get("source") else ""
    if "sensitivity_ci95" not in rates:
        return (f"rates: sensitivity {100 * rates['sensitivity']:.1f}%, specificity {100 * rates['specificity']:.1f}% "
                f"taken as exact ({rates['draws']} draws of the human labels)")
    (sl, sh), (pl, ph) = rates["sensitivity_ci95"], rates["specificity_ci95"]
    c = rates["counts"]
    return (f"rates: sensitivity {100 * rates['sensitivity']:.1f}% [{100 * sl:.1f}, {100 * sh:.1f}] "
            f"({c['tp']}/{c['tp'] + c['fn']}), specificity {100 * rates['specificity']:.1f}% [{100 * pl:.1f}, "
            f"{100 * ph:.1f}] ({c['tn']}/{c['tn'] + c['fp']}): {rates['pairs']} validated pairs{where}; 95% "
            f"credible intervals, uniform priors; {rates['draws']} draws")


# ---------------------------------------------------------------------------------------------------------------
# Several runs at once: `berds compare --labels`, `berds report --labels`


def with_ks(result: Any, ks: Sequence[int]) -> Any:
    """An ``EvalResult`` judged to ``max(ks)`` with its per-question metrics and averages at every k of ``ks``
    (the analyses judge at one depth only)."""
    from dataclasses import replace

    from berds.evaluate.metrics import aggregate

    ks = tuple(sorted({int(k) for k in ks}))
    per_question = {q: question_metrics(s, ks) for q, s in result.support.items()}
    return replace(result, ks=ks, per_question=per_question, averages=aggregate(per_question, result.datasets))


def corrected_runs(run_paths: Sequence[Any], judge: Any, labels: Any, *, ks: Sequence[int] = (5,),
                   baseline: str | None = None, differences: bool = True, judge_options: Mapping[str, Any] | None = None,
                   cache_path: Any = None, allow_short: bool = False, allow_unparsed: bool = False,
                   title_position: str = "after", population: str = "questions", lam: str = "1",
                   names: Sequence[str] | None = None) -> list[Corrected]:
    """The corrected metrics of each run and, with ``differences``, each other run's corrected difference from the
    baseline (its label or path, as in ``berds compare``; default the first), paired on the questions labelled
    for both. ``run_paths`` are paths or ``Run``s (``names`` then labels them). Verdicts come through the judgement
    cache (the command judged them already)."""
    from berds.evaluate.analyses.common import judge_runs, run_labels
    from berds.evaluate.compare import resolve_baseline
    from berds.runs import Run, load_run

    _check(population, lam)
    labels = labels if isinstance(labels, LabelledSet) else read_labels(labels)
    ks = tuple(sorted({int(k) for k in ks}))
    runs = [p if isinstance(p, Run) else load_run(p, allow_empty=allow_short) for p in run_paths]
    paths = [getattr(p, "name", None) or str(i) if isinstance(p, Run) else p for i, p in enumerate(run_paths)]
    names = list(names) if names is not None else run_labels(runs, paths)
    runs = [Run(r.questions, r.hits, r.manifest, name) for r, name in zip(runs, names)]
    results = [with_ks(r, ks) for r in judge_runs(runs, judge, ks[-1], judge_options=judge_options,
                                                  cache_path=cache_path, allow_short=allow_short,
                                                  allow_unparsed=allow_unparsed)]
    for r, name in zip(results, names):
        r.run_name = name
    out = [corrected_metrics(run, r, labels, title_position=title_position, population=population, lam=lam)
           for run, r in zip(runs, results)]
    if differences and len(runs) > 1:
        base = resolve_baseline(baseline, names, paths)
        out += [corrected_difference(runs[i], results[i], runs[base], results[base], labels,
                                     title_position=title_position, population=population, lam=lam)
                for i in range(len(runs)) if i != base]
    return out


def page_estimates(corrected: Sequence[Corrected]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each run's prediction-powered estimates over all its questions in the shape report.html's leaderboard
    takes (``{run: {"MRecall@5": {"mean", "low", "high", "n"}}}``); differences of two runs are left out."""
    names = {"mrecall": "MRecall", "precision": "Precision"}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for c in corrected:
        for r in c.rows:
            if r.group != "all" or r.ppi.value is None or "runs" in c.source:  # ("runs": a difference)
                continue
            kind, k = r.metric.split("@")
            out.setdefault(c.run, {})[f"{names[kind]}@{k}"] = {"mean": r.ppi.value, "low": r.ppi.low,
                                                               "high": r.ppi.high, "n": r.ppi.n}
    return out


def corrected_csv(corrected: Sequence[Corrected]) -> tuple[list[str], list[list[str]]]:
    """The corrected estimates as a flat table (header, rows in percent) for markdown/CSV reports."""
    header = ["run", "metric", "set", "judged", "PPI", "PPI low", "PPI high", "labels only", "low", "high", "n", "N"]
    rows = []
    for c in corrected:
        for r in c.rows:
            def pct(x: float | None) -> str:
                return "" if x is None else f"{100 * x:.1f}"

            rows.append([c.run, r.metric, r.group, pct(r.judged), pct(r.ppi.value), pct(r.ppi.low), pct(r.ppi.high),
                         pct(r.labels_only.value), pct(r.labels_only.low), pct(r.labels_only.high),
                         str(r.ppi.n), str(r.ppi.N)])
    return header, rows


def print_corrected_runs(corrected: Sequence[Corrected], *, console: Any = None, out: Any = None) -> None:
    """The corrected table and its notes (stderr); with ``out``, ``corrected.json`` in that folder."""
    import sys

    from rich.console import Console

    for c in corrected:
        for line in notes(c):
            print(line, file=sys.stderr)
    (console or Console()).print(corrected_table(corrected))
    if out is not None:
        write_corrected(corrected, out)


def corrected_section(corrected: Sequence[Corrected], out: Any) -> tuple[dict[str, Any], list[str]]:
    """``write_corrected`` into ``out`` and the lines ``report.md`` shows them with (``build_report(extra=)``)."""
    from berds.evaluate.report import markdown_table

    files = write_corrected(corrected, out)
    header, rows = corrected_csv(corrected)
    return files, ["## Corrected estimates (human labels)", "",
                   "The judged metrics corrected by human labels on a random sample of whole questions "
                   "(prediction-powered: judged mean + mean of human − judged over the n labelled questions; "
                   "labels only: mean of the human values), in %, with 95% intervals; n labelled of N questions. "
                   "Also in [corrected.csv](corrected.csv) and [corrected.json](corrected.json).", "",
                   markdown_table(header, rows)]


def write_corrected(corrected: Sequence[Corrected], out: Any) -> dict[str, Any]:
    """``corrected.json`` (every estimate, the labels used, the partly labelled questions) and
    ``corrected.md``/``.csv`` (the flat table) in the folder ``out``."""
    from pathlib import Path

    from berds.evaluate.report import write_table
    from berds.io import write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "corrected.json", {"runs": [c.to_json() for c in corrected]})
    header, rows = corrected_csv(corrected)
    files = {f"corrected.{k}": v for k, v in write_table(out / "corrected", header, rows,
                                                           title="corrected estimates (95% CI)").items()}
    return {"corrected.json": out / "corrected.json", **files}
