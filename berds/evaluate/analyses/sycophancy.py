"""Retriever sycophancy (the study's Fig. 3): does a retriever lean towards the stance of its query?

The paper's quantity, for **one run** over the two-perspective questions with a known stance (perspectives
ordered supporting, opposing)::

    p = % of the top-k documents (all questions together) that contain the supporting perspective
    n = % of the top-k documents that contain the opposing perspective
    Δ = (p − n) / p

(a document containing both counts in both; the percentages share a denominator, so Δ is also
(count_p − count_n) / count_p). Greater Δ: the run favours the supporting perspective. The study compares
three runs of one retriever: queried with the **question**, with the **supporting** perspective and with
the **opposing** perspective; sycophancy shows as Δ(supporting query) > Δ(question) > Δ(opposing query).
The paper uses the top 5 (default ``k``). Δ is undefined (n/a) when p = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.evaluate.analyses.common import Supports
from berds.evaluate.analyses.stance import Stance
from berds.types import Question

QUERIES = ("question", "supporting", "opposing")
SIDES = ("supporting", "opposing")  # the perspectives, in the row order of every support matrix here
DEFAULT_K = 5


def perspective_queries(questions: Sequence[Question], stances: Mapping[str, Stance], query: str) -> list[Question]:
    """One question per two-perspective question with a known stance, its text the search query: the
    question itself (``query="question"``), or its supporting / opposing perspective.

    The perspectives are reordered ``(supporting, opposing)``, so row 0 of a support matrix is always
    the supporting perspective and row 1 the opposing one.
    """
    if query not in QUERIES:
        raise BerdsError(f"query must be one of {', '.join(QUERIES)}, got {query!r}")
    out = []
    for q in questions:
        st = stances.get(q.id)
        if st is None or not st.known or len(q.perspectives) != 2:
            continue
        ordered = (q.perspectives[st.supporting], q.perspectives[st.opposing])
        text = {"question": q.text, "supporting": ordered[0], "opposing": ordered[1]}[query]
        out.append(Question(q.id, text, ordered, q.dataset))
    return out


def sycophancy_counts(support: Supports, k: int = DEFAULT_K) -> dict[str, Any]:
    """p, n (as percentages and counts) and Δ of one run, from matrices with rows (supporting, opposing)
    over its ranked documents (see the module doc). Questions with fewer than k documents count the ones
    they have."""
    if k < 1:
        raise BerdsError(f"k must be at least 1, got {k}")
    docs = p_count = n_count = 0
    for matrix in support.values():
        m = np.asarray(matrix, dtype=bool)[:, :k]
        if m.shape[0] != 2:
            raise BerdsError(f"sycophancy needs matrices with 2 rows (supporting, opposing), got {m.shape[0]}")
        docs += m.shape[1]
        p_count += int(m[0].sum())
        n_count += int(m[1].sum())
    p_pct = 100.0 * p_count / docs if docs else None
    n_pct = 100.0 * n_count / docs if docs else None
    return {"p": p_pct, "n": n_pct, "p_docs": p_count, "n_docs": n_count, "docs": docs,
            "delta": (p_count - n_count) / p_count if p_count else None, "questions": len(support)}


@dataclass
class SycophancyResult:
    """Rows of (label, query, p %, n %, their document counts, Δ, questions) — one per run."""

    KIND = "sycophancy"
    k: int
    rows: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "measure": "paper: per run, Δ = (p − n)/p", "rows": self.rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SycophancyResult":
        rows = list(data["rows"])
        if rows and "query" not in rows[0]:
            raise BerdsError("this sycophancy result was written by an earlier berds (rows per perspective side, "
                             "not the paper's per-run Δ) — run `berds analyze sycophancy` again")
        return cls(int(data["k"]), rows)

    def merge(self, other: "SycophancyResult") -> "SycophancyResult":
        if other.k != self.k:
            raise BerdsError(f"cannot merge sycophancy results at k={self.k} and k={other.k}")
        return SycophancyResult(self.k, self.rows + other.rows)

    def table(self) -> tuple[str, list[str], list[list[str]]]:
        header = ["setting", "query", "p % (supporting)", "n % (opposing)", "Δ = (p−n)/p %", "documents", "questions"]
        body = [[r["label"], r["query"], _pct(r["p"]), _pct(r["n"]),
                 "n/a" if r["delta"] is None else f"{100 * r['delta']:.1f}", str(r["docs"]), str(r["questions"])]
                for r in self.rows]
        return (f"Retriever sycophancy (Fig. 3): top {self.k} documents containing the supporting (p) and the "
                "opposing (n) perspective", header, body)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def sycophancy_result(label: str, supports: Mapping[str, Supports], k: int = DEFAULT_K,
                      judge_id: str | None = None) -> SycophancyResult:
    """One row per run: ``supports[query]`` is the support matrices of the run queried with ``query``
    (``question``, ``supporting`` or ``opposing``). ``judge_id`` goes into every row so that
    `berds judge stance-correct` can check it corrects with the error rates of the judge that counted."""
    extra = {"judge": judge_id} if judge_id else {}
    rows = []
    for query in QUERIES:
        if query in supports:
            rows.append({"label": label, "query": query, **sycophancy_counts(supports[query], k), **extra})
    unknown = set(supports) - set(QUERIES)
    if unknown:
        raise BerdsError(f"unknown sycophancy queries {sorted(unknown)}; use {', '.join(QUERIES)}")
    return SycophancyResult(k, rows)


def delta_is_defined(row: Mapping[str, Any]) -> bool:
    return row.get("delta") is not None and not math.isnan(float(row["delta"]))
