"""The reranker protocol, and the base class of the diversity rerankers berds ships.

A *reranker* turns a run into a new run::

    class Reranker(Protocol):
        name: str
        def rerank(self, run: Run, *, progress: bool = False) -> Run: ...

The returned run keeps the input's questions (every question, the same passages or a subset of them, none
more often than the input has it), scores that decrease with rank, and its provenance in ``manifest["rerank"]`` (at least
``method``) and ``manifest["input_run"]``. ``berds.testing.check_reranker`` checks all of that.

``EmbeddingReranker`` is the base of MMR, the pyversity strategies, xQuAD and PM2: it prepares the
candidates once (``berds.rerank.candidates``), asks the subclass for the order of the first ``top`` picks
of each question (``select``), and appends the candidates it did not pick in their original order.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Protocol, runtime_checkable

import numpy as np

from berds.errors import BerdsError
from berds.rerank.candidates import (DEFAULT_DEPTH, DEFAULT_EMBED_TEXT, DEFAULT_NORMALISATION, REPEATS, Candidates,
                                     QuestionCandidates, canonical_normalisation, finish_run, prepare_candidates)
from berds.types import Run


@runtime_checkable
class Reranker(Protocol):
    """Run in, run out; provenance in ``manifest["rerank"]``."""

    name: str

    def rerank(self, run: Run, *, progress: bool = False) -> Run:
        ...


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """One BLAS thread while reranking: the products are small (100 x d), and on a busy machine BLAS worker
    threads make them many times slower than one thread does."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # an optional speed-up, not a requirement
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


class EmbeddingReranker:
    """A reranker over embeddings and normalised retriever scores (see the module docstring).

    Subclasses set ``method`` and, if they have one, the tunable ``parameter`` with its default ``grid``,
    and implement ``select(candidates, k) -> indices`` and ``parameters() -> dict``.
    """

    method = ""
    parameter: str | None = None
    grid: tuple[float, ...] = ()
    # which end of the grid is closer to the original ranking ("larger"/"smaller"): tuning ties go there
    closer_to_original: str | None = None

    def __init__(self, *, encoder: Any = None, model: str | None = None, pooling: str | None = None,
                 device: str | None = None, batch_size: int = 32, embedding_cache: Any = None,
                 depth: int = DEFAULT_DEPTH, normalisation: str = DEFAULT_NORMALISATION,
                 embed_text: str = DEFAULT_EMBED_TEXT, sim1_constant: float | None = None, top: int | None = None,
                 repeats: str = "keep"):
        if depth < 1:
            raise BerdsError(f"depth must be a positive integer, got {depth}")
        if top is not None and top < 1:
            raise BerdsError(f"top must be a positive integer (or unset for all candidates), got {top}")
        self.normalisation = canonical_normalisation(normalisation)
        self.depth, self.embed_text, self.sim1_constant, self.top = depth, embed_text, sim1_constant, top
        if repeats not in REPEATS:
            raise BerdsError(f"repeats must be one of {', '.join(REPEATS)}, got {repeats!r}")
        self.repeats = repeats
        if encoder is None or isinstance(encoder, str):
            from berds.rerank.embeddings import DEFAULT_MODEL, DEFAULT_POOLING, load_encoder

            encoder = load_encoder(encoder or model or DEFAULT_MODEL, pooling=pooling or DEFAULT_POOLING,
                                   device=device, batch_size=batch_size)
        self.encoder = encoder
        if isinstance(embedding_cache, str) or hasattr(embedding_cache, "__fspath__"):
            from berds.rerank.embeddings import EmbeddingCache

            embedding_cache = EmbeddingCache(embedding_cache)
        self.embedding_cache = embedding_cache
        self.last: Candidates | None = None

    def __repr__(self) -> str:  # (a notebook showed <MMRReranker object at 0x...>)
        settings = {**self.parameters(), "depth": self.depth, "top": self.top}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in settings.items())})"

    # -- what subclasses provide
    def parameters(self) -> dict[str, Any]:
        return {}

    def select(self, cand: QuestionCandidates, k: int) -> np.ndarray:
        raise NotImplementedError

    def begin(self, run: Run, candidates: Candidates, progress: bool) -> None:
        """Called once per run before ``select`` (xQuAD/PM2 fetch and embed their aspects here)."""

    def extra_provenance(self) -> dict[str, Any]:
        return {}

    # -- the shared machinery
    @property
    def name(self) -> str:
        value = getattr(self, self.parameter) if self.parameter else None
        if not isinstance(value, (int, float)):
            return self.method
        return f"{self.method}{'-' if self.method[-1:].isdigit() else ''}{value:g}"

    def prepare(self, run: Run, *, progress: bool = False) -> Candidates:
        return prepare_candidates(run, encoder=self.encoder, embedding_cache=self.embedding_cache, depth=self.depth,
                                  normalisation=self.normalisation, embed_text=self.embed_text,
                                  sim1_constant=self.sim1_constant, repeats=self.repeats, progress=progress)

    def rerank(self, run: Run, *, progress: bool = False, input_path: Any = None,
               extra_provenance: Mapping[str, Any] | None = None, candidates: Candidates | None = None) -> Run:
        """Rerank every question of ``run``. ``candidates`` (from ``prepare``) skips the preparation, so a
        parameter grid embeds once."""
        cands = candidates if candidates is not None else self.prepare(run, progress=progress)
        self.last = cands
        self.begin(run, cands, progress)
        ordered = {}
        with single_blas_thread():
            for qid, cand in cands.questions.items():
                n = len(cand.hits)
                k = n if self.top is None else min(self.top, n)
                picks = [int(i) for i in self.select(cand, k)] if n else []
                if len(set(picks)) != len(picks) or any(not 0 <= i < n for i in picks):
                    raise BerdsError(f"{self.method}: question {qid!r}: the strategy returned invalid picks {picks[:10]}")
                chosen = set(picks)
                ordered[qid] = [cand.hits[i] for i in picks] + [h for i, h in enumerate(cand.hits) if i not in chosen]
        params = {**self.parameters(), **cands.config, "top": self.top, "embedded_now": cands.embedded_now,
                  **self.extra_provenance()}
        return finish_run(run, ordered, method=self.method, name_suffix=self.name, parameters=params,
                          input_path=input_path, extra_provenance=extra_provenance)


def questions_reordered(before: Run, after: Run, top: int = 10) -> int:
    """How many questions of ``after`` rank other passages, or the same in another order, in their first ``top``
    places than ``before`` does. Only the places ``after`` still holds are compared: a reranked run cut to a
    smaller ``--depth`` is not "changed" for the passages it no longer has."""
    moved = 0
    for qid, hits in after.hits.items():
        n = min(top, len(hits))
        moved += [h.passage.id for h in before.hits[qid][:n]] != [h.passage.id for h in hits[:n]]
    return moved


def check_fraction(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0 or np.isnan(value):
        raise BerdsError(f"{name} must be between 0 and 1, got {value}")
    return value
