"""Retriever sycophancy (the study's Fig. 3): does a retriever return what the query already claims?

For each two-perspective question with a known stance, retrieve twice — with the **supporting**
perspective as the query and with the **opposing** one — and judge every top-k passage against both
perspectives. For a perspective P (one *setting*: P = supporting or P = opposing)::

    p = number of top-k passages supporting P when P itself is the query      (summed over questions)
    n = number of top-k passages supporting P when the opposite of P is the query
    Δ = (p − n) / p

Δ > 0: asking from P's side brings more passages for P — the retriever follows the query's stance.
Δ is undefined (reported as n/a) when p = 0. Counts are reported with Δ so small settings can be seen.
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

SIDES = ("supporting", "opposing")


def perspective_queries(questions: Sequence[Question], stances: Mapping[str, Stance], side: str) -> list[Question]:
    """One question per two-perspective question with a known stance; its text is the ``side`` perspective.

    The perspectives are reordered ``(supporting, opposing)``, so row 0 of a support matrix is always
    the supporting perspective and row 1 the opposing one.
    """
    if side not in SIDES:
        raise BerdsError(f"side must be one of {', '.join(SIDES)}, got {side!r}")
    out = []
    for q in questions:
        st = stances.get(q.id)
        if st is None or not st.known or len(q.perspectives) != 2:
            continue
        ordered = (q.perspectives[st.supporting], q.perspectives[st.opposing])
        out.append(Question(q.id, ordered[0] if side == "supporting" else ordered[1], ordered, q.dataset))
    return out


def sycophancy_counts(from_supporting: Supports, from_opposing: Supports, k: int) -> dict[str, dict[str, Any]]:
    """p, n, Δ per side from support matrices with rows (supporting, opposing) (see module docstring).

    ``from_supporting[qid]`` judges the passages retrieved with the supporting perspective as the query,
    ``from_opposing[qid]`` those retrieved with the opposing one. Only questions in both are counted.
    """
    qids = [q for q in from_supporting if q in from_opposing]
    out: dict[str, dict[str, Any]] = {}
    for row, side in enumerate(SIDES):
        own = from_supporting if side == "supporting" else from_opposing
        other = from_opposing if side == "supporting" else from_supporting
        p = int(sum(np.asarray(own[q], dtype=bool)[row, :k].sum() for q in qids))
        n = int(sum(np.asarray(other[q], dtype=bool)[row, :k].sum() for q in qids))
        out[side] = {"p": p, "n": n, "delta": (p - n) / p if p else None, "questions": len(qids)}
    return out


@dataclass
class SycophancyResult:
    """Rows of (label, side, p, n, Δ, questions) — one label per retriever setting."""

    KIND = "sycophancy"
    k: int
    rows: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "rows": self.rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SycophancyResult":
        return cls(int(data["k"]), list(data["rows"]))

    def merge(self, other: "SycophancyResult") -> "SycophancyResult":
        if other.k != self.k:
            raise BerdsError(f"cannot merge sycophancy results at k={self.k} and k={other.k}")
        return SycophancyResult(self.k, self.rows + other.rows)

    def table(self) -> tuple[str, list[str], list[list[str]]]:
        header = ["setting", "perspective", "p (query = perspective)", "n (query = opposite)", "Δ = (p−n)/p %", "questions"]
        body = [[r["label"], r["side"], str(r["p"]), str(r["n"]),
                 "n/a" if r["delta"] is None else f"{100 * r['delta']:.1f}", str(r["questions"])] for r in self.rows]
        return f"Retriever sycophancy: passages supporting a perspective in the top {self.k}", header, body


def sycophancy_result(label: str, from_supporting: Supports, from_opposing: Supports, k: int,
                      judge_id: str | None = None) -> SycophancyResult:
    """``judge_id`` goes into every row so that `berds judge stance-correct` can check it corrects with the
    error rates of the judge that counted p and n."""
    counts = sycophancy_counts(from_supporting, from_opposing, k)
    extra = {"judge": judge_id} if judge_id else {}
    return SycophancyResult(k, [{"label": label, "side": side, **counts[side], **extra} for side in SIDES])


def delta_is_defined(row: Mapping[str, Any]) -> bool:
    return row.get("delta") is not None and not math.isnan(float(row["delta"]))
