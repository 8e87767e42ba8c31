"""BERDS metrics as small pure functions over a support matrix.

For one question with ``m`` gold perspectives and a ranked list of passages, the *support matrix*
``S`` is ``m x n`` booleans: ``S[i, j]`` is True when passage ``j`` (rank ``j + 1``) supports perspective
``i`` according to the judge.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np


def _top(support: np.ndarray, k: int) -> np.ndarray:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    support = np.asarray(support, dtype=bool)
    if support.ndim != 2:
        raise ValueError(f"support matrix must be 2-D (perspectives x passages), got shape {support.shape}")
    return support[:, :k]


def mrecall_at_k(support: np.ndarray, k: int) -> float:
    """MRecall@k (BERDS).

    With ``m`` perspectives, let ``c`` be the number of perspectives supported by at least one of the top-k
    passages. The question scores 1 when ``c == m`` (all covered) if ``m <= k``, or when ``c >= k`` if
    ``m > k`` (k passages can cover at most k perspectives); otherwise 0::

        MRecall@k = 1[c >= min(m, k)]
    """
    top = _top(support, k)
    m = top.shape[0]
    covered = int(top.any(axis=1).sum())
    return float(covered >= min(m, k))


def precision_at_k(support: np.ndarray, k: int) -> float:
    """Precision@k (BERDS): the share of the top-k passages that support any perspective::

        Precision@k = |{j <= k : exists i, S[i, j]}| / k

    The denominator is k even when fewer than k passages were judged (missing passages support nothing).
    """
    top = _top(support, k)
    return float(top.any(axis=0).sum()) / k


def stacked_metrics(supports: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``mrecall_at_k`` and ``precision_at_k`` of many same-shaped support matrices at once (``supports``:
    stack × perspectives × passages), one value each per matrix: what simulating a question's labels needs."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    top = np.asarray(supports, dtype=bool)[:, :, :k]
    m = top.shape[1]
    return (top.any(axis=2).sum(axis=1) >= min(m, k)).astype(float), top.any(axis=1).sum(axis=1) / k


def perspectives_covered(support: np.ndarray, k: int) -> int:
    """How many perspectives at least one top-k passage supports."""
    return int(_top(support, k).any(axis=1).sum())


def docs_needed(support: np.ndarray) -> int | None:
    """The smallest depth d such that the top-d passages support every perspective (None if never)."""
    support = np.asarray(support, dtype=bool)
    m, n = support.shape
    if m == 0:
        return 0
    first = np.full(m, -1)
    for i in range(m):
        hits = np.flatnonzero(support[i])
        if hits.size == 0:
            return None
        first[i] = hits[0]
    return int(first.max()) + 1


METRICS = {"mrecall": mrecall_at_k, "precision": precision_at_k}


def question_metrics(support: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """``{"mrecall@5": ..., "precision@5": ..., ...}`` for one question: ``mrecall_at_k`` and ``precision_at_k``
    at every k from one pass over the matrix (an evaluation computes them for every question; tests check
    that both ways agree)."""
    top = _top(support, max(ks)) if ks else np.zeros((0, 0), dtype=bool)
    m, n = top.shape
    # the rank index at which each perspective is first supported (past every k: never), and supported passages so far
    never = max(ks, default=0)
    first = np.where(top.any(axis=1), top.argmax(axis=1), never).tolist() if n else [never] * m
    supported_so_far = np.cumsum(top.any(axis=0)).tolist()
    out: dict[str, float] = {}
    for k in ks:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        covered = sum(f < k for f in first)
        out[f"mrecall@{k}"] = float(covered >= min(m, k))
        out[f"precision@{k}"] = supported_so_far[min(k, n) - 1] / k if n else 0.0
    return out


def repeat_metrics(passage_ids: Sequence[str], support: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """For a ranking that repeats passages (the study's expansion merge keeps them), per k:

    * ``repeats@k`` — how many of the top k slots hold a passage already ranked above (a count);
    * ``precision_once@k`` — Precision@k with each passage counted once: (distinct passages in the top k
      that support some perspective) / k, so a repeated slot counts as unsupported.

    ``support`` is the (perspectives x ranks) matrix of the same ranking, ``passage_ids`` its ids in order."""
    seen: set[str] = set()
    repeat: list[bool] = []
    for pid in passage_ids[:max(ks, default=0)]:
        repeat.append(pid in seen)
        seen.add(pid)
    n = min(len(repeat), support.shape[1] if support.ndim == 2 else 0)
    supported = support[:, :n].any(axis=0).tolist() if n and support.shape[0] else [False] * n
    out: dict[str, float] = {}
    for k in ks:
        out[f"repeats@{k}"] = float(sum(repeat[:k]))
        out[f"precision_once@{k}"] = sum(s and not r for s, r in zip(supported[:k], repeat[:k])) / k
    return out


def mean_metrics(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each metric over questions (as percentages are up to the caller)."""
    rows = list(rows)
    if not rows:
        return {}
    keys = rows[0].keys()
    return {key: float(np.mean([r[key] for r in rows])) for key in keys}


def aggregate(
    per_question: Mapping[str, Mapping[str, float]], datasets: Mapping[str, str]
) -> dict[str, dict[str, float]]:
    """Averages: ``all`` (micro over questions), one per dataset, and ``macro`` (mean of dataset means)."""
    out: dict[str, dict[str, float]] = {"all": mean_metrics(per_question.values())}
    groups: dict[str, list[Mapping[str, float]]] = {}
    for qid, row in per_question.items():
        groups.setdefault(datasets.get(qid) or "-", []).append(row)
    if len(groups) > 1:
        for name in sorted(groups):
            out[name] = mean_metrics(groups[name])
        out["macro"] = mean_metrics(out[name] for name in sorted(groups))
    return out
