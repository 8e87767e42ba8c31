"""Explicit-perspective diversification: xQuAD and PM2 over LLM-written perspectives ("aspects").

The aspects of a question are the perspectives that query expansion writes (Table 12 of the study): read from
an expansions file (``expansions=PATH``, e.g. the study's GPT-4 expansions or ``berds retrieve --expand``
output) or written by any LLM backend berds has (``llm=BACKEND:MODEL``). ``aspects="oracle"`` uses the
question's own gold perspectives instead — an upper bound for analysis, never a system result.

Aspect–passage relevance ``P(d|a)`` is the cosine of the aspect's and the passage's embeddings from the same
encoder that gives MMR its Sim2 (clipped at 0); ``P(d|q)`` is Sim1, the normalised retriever score; aspects
are weighted equally (``P(a|q) = 1/|A|``).

* **xQuAD** (Santos, Macdonald & Ounis, WWW 2010): pick ``argmax (1-λ) P(d|q) + λ Σ_a P(a|q) P(d|a)
  Π_{s∈S} (1 - P(s|a))``.
* **PM2** (Dang & Croft, SIGIR 2012): seats proportional to ``P(a|q)``; each step the aspect with the largest
  quotient ``v_a / (2 s_a + 1)`` is served: pick ``argmax λ qt_{a*} P(d|a*) + (1-λ) Σ_{a≠a*} qt_a P(d|a)``,
  then each aspect's seats grow by the pick's share ``P(d|a) / Σ P(d|a')``. PM2 uses no ``P(d|q)``.
Ties go to the earlier rank. Both are greedy loops of numpy vector operations (no library maintains them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from berds.errors import BerdsError
from berds.rerank.base import EmbeddingReranker, check_fraction
from berds.rerank.candidates import Candidates, QuestionCandidates, unit_rows
from berds.types import Run

ASPECT_TEXTS = ("perspective", "question-perspective")
EXPLICIT_GRID = (0.1, 0.3, 0.5, 0.7, 0.9)


def xquad_order(relevance: np.ndarray, aspect_relevance: np.ndarray, lam: float, k: int,
                weights: np.ndarray | None = None) -> np.ndarray:
    """xQuAD picks: ``relevance`` (n,) = P(d|q), ``aspect_relevance`` (m, n) = P(d|a) in [0, 1]."""
    rel = np.asarray(relevance, dtype=np.float64)
    r = np.asarray(aspect_relevance, dtype=np.float64)
    m, n = r.shape if r.ndim == 2 else (0, rel.shape[0])
    if not m:
        w = np.zeros(0)
    else:
        w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=np.float64)
    novelty = np.ones(m)
    taken = np.zeros(n, dtype=bool)
    order = np.empty(min(k, n), dtype=np.int64)
    for step in range(order.size):
        diversity = (w * novelty) @ r if m else np.zeros(n)
        objective = (1.0 - lam) * rel + lam * diversity
        objective[taken] = -np.inf
        pick = int(np.argmax(objective))
        order[step] = pick
        taken[pick] = True
        if m:
            novelty *= 1.0 - r[:, pick]
    return order


def pm2_order(aspect_relevance: np.ndarray, lam: float, k: int, weights: np.ndarray | None = None) -> np.ndarray:
    """PM2 picks over ``aspect_relevance`` (m, n) = P(d|a); ``weights`` = P(a|q) (uniform by default)."""
    r = np.asarray(aspect_relevance, dtype=np.float64)
    m, n = r.shape
    order = np.empty(min(k, n), dtype=np.int64)
    if m == 0:
        order[:] = np.arange(order.size)
        return order
    w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, dtype=np.float64)
    votes = w * max(k, 1)
    seats = np.zeros(m)
    taken = np.zeros(n, dtype=bool)
    for step in range(order.size):
        quotient = votes / (2.0 * seats + 1.0)
        served = int(np.argmax(quotient))
        others = quotient.copy()
        others[served] = 0.0
        objective = lam * quotient[served] * r[served] + (1.0 - lam) * (others @ r)
        objective[taken] = -np.inf
        pick = int(np.argmax(objective))
        order[step] = pick
        taken[pick] = True
        total = r[:, pick].sum()
        if total > 0:
            seats += r[:, pick] / total
    return order


class MemoExpander:
    """Asks the wrapped expander once per question: a parameter grid (or dev and test) reranked with LLM-written
    perspectives pays for each question's generation once."""

    def __init__(self, expander: Any):
        self.inner = expander
        self.done: dict[str, list[Any]] = {}

    def expand(self, questions: Any) -> dict[str, list[Any]]:
        todo = [q for q in questions if q.id not in self.done]
        if todo:
            self.done.update(self.inner.expand(todo))
        return {q.id: self.done[q.id] for q in questions if q.id in self.done}

    def provenance(self) -> dict[str, Any]:
        return self.inner.provenance() if hasattr(self.inner, "provenance") else {"source": "?"}


class ExplicitReranker(EmbeddingReranker):
    """xQuAD / PM2 with aspects from an expansions file, an LLM, or (for analysis only) the gold perspectives."""

    parameter = "lam"
    grid = EXPLICIT_GRID
    method = ""

    def __init__(self, lam: float = 0.5, *, expansions: str | Path | None = None, llm: str | None = None,
                 llm_options: Mapping[str, Any] | None = None, expander: Any = None, aspects: str | None = None,
                 aspect_text: str = "perspective", **options: Any):
        self.lam = check_fraction("λ", lam)
        if aspect_text not in ASPECT_TEXTS:
            raise BerdsError(f"unknown aspect_text {aspect_text!r}; use one of {', '.join(ASPECT_TEXTS)}")
        sources = [s for s in (expansions, llm, expander, aspects) if s is not None]
        if len(sources) != 1:
            raise BerdsError(f"{self.method} needs exactly one source of aspects: expansions=PATH (an expansions "
                             "jsonl), llm=BACKEND:MODEL (written now with the study's expansion prompt), or "
                             "aspects=oracle (the gold perspectives; an upper bound, not a system)")
        if aspects is not None and aspects != "oracle":
            raise BerdsError(f"aspects={aspects!r}: the only named source is 'oracle'")
        if expansions is not None:
            from berds.retrievers.expansion import FileExpander

            expander = FileExpander(expansions)
        elif llm is not None:
            from berds.llm import load_llm_by_name
            from berds.retrievers.expansion import LLMExpander

            expander = MemoExpander(LLMExpander(load_llm_by_name(llm, **dict(llm_options or {}))))
        self.expander = expander
        self.oracle = aspects == "oracle"
        self.aspect_text = aspect_text
        self._aspects: dict[str, np.ndarray] = {}
        self._aspect_counts: list[int] = []
        super().__init__(**options)

    def parameters(self) -> dict[str, Any]:
        return {"lambda": self.lam, "aspect_text": self.aspect_text, "aspect_relevance": "max(0, cosine)",
                "aspect_weights": "uniform"}

    def extra_provenance(self) -> dict[str, Any]:
        source = ({"source": "oracle (gold perspectives; an upper bound, not a system)"} if self.oracle
                  else dict(self.expander.provenance()) if hasattr(self.expander, "provenance") else {"source": "?"})
        counts = self._aspect_counts
        return {"aspects": {**source, "questions": len(counts),
                            "mean_per_question": round(float(np.mean(counts)), 3) if counts else 0.0}}

    def begin(self, run: Run, candidates: Candidates, progress: bool) -> None:
        from berds.rerank.embeddings import embed_texts

        questions = list(run.questions.values())
        if self.oracle:
            texts = {q.id: list(q.perspectives) for q in questions}
        else:
            expansions = self.expander.expand(questions)
            texts = {q.id: [e.text for e in expansions.get(q.id, [])] for q in questions}
        empty = [qid for qid, t in texts.items() if not t]
        if empty:
            raise BerdsError(f"{self.method}: no aspects for {len(empty)} question(s), e.g. {empty[:3]}")
        if self.aspect_text == "question-perspective":
            texts = {q.id: [f"{q.text} {t}" for t in texts[q.id]] for q in questions}
        flat = [t for q in questions for t in texts[q.id]]
        vectors, _ = embed_texts(flat, self.encoder, self.embedding_cache, progress=progress,
                                 description="embedding aspects")
        row = 0
        self._aspects = {}
        for q in questions:
            m = len(texts[q.id])
            self._aspects[q.id] = unit_rows(vectors[row:row + m])
            row += m
        self._aspect_counts = [len(texts[q.id]) for q in questions]

    def aspect_relevance(self, cand: QuestionCandidates) -> np.ndarray:
        aspects = self._aspects[cand.qid]
        if cand.unit.shape[0] == 0:
            return np.zeros((aspects.shape[0], 0))
        if aspects.shape[1] != cand.unit.shape[1]:
            raise BerdsError(f"aspect and passage embeddings differ in size ({aspects.shape[1]} vs "
                             f"{cand.unit.shape[1]}) — were they made by the same encoder?")
        return np.clip(aspects @ cand.unit.T, 0.0, 1.0)


class XQuADReranker(ExplicitReranker):
    method = "xquad"
    closer_to_original = "smaller"  # λ weights the aspects: λ = 0 ranks by P(d|q) alone

    def select(self, cand: QuestionCandidates, k: int) -> np.ndarray:
        return xquad_order(cand.sim1, self.aspect_relevance(cand), self.lam, k)


class PM2Reranker(ExplicitReranker):
    method = "pm2"

    def select(self, cand: QuestionCandidates, k: int) -> np.ndarray:
        return pm2_order(self.aspect_relevance(cand), self.lam, k)
