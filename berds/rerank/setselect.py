"""Set-selection diversification through pyversity: DPP, MSD, COVER and SSD as berds rerankers.

pyversity (``pip install 'berds[diversify]'``) implements the strategies; berds gives each one the same
candidates MMR gets — the top ``depth`` passages, Sim1 (the normalised retriever score) as relevance, and the
passage embeddings — and records the library's version and every parameter in the run manifest.

* ``dpp``   — greedy determinantal point process; ``diversity`` (higher: more diverse), ``scale``;
* ``msd``   — max-sum diversification; ``diversity``;
* ``cover`` — facility-location coverage; ``diversity``, ``gamma`` in (0, 1] (concavity);
* ``ssd``   — sliding spectrum decomposition; ``diversity``, ``gamma`` (> 0), ``window``.

``diversity`` is pyversity's trade-off in [0, 1] (0 = relevance only). A strategy may stop before ``top``
picks (DPP does when no candidate adds volume); the passages it did not pick follow in their original order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from berds.errors import BerdsError
from berds.lazy import require
from berds.rerank.base import EmbeddingReranker, check_fraction
from berds.rerank.candidates import QuestionCandidates

STRATEGIES = ("dpp", "msd", "cover", "ssd")
DIVERSITY_GRID = (0.1, 0.3, 0.5, 0.7, 0.9)


class PyversityReranker(EmbeddingReranker):
    """One pyversity strategy (``strategy`` in ``STRATEGIES``) with its parameters."""

    parameter = "diversity"
    grid = DIVERSITY_GRID

    def __init__(self, strategy: str = "dpp", diversity: float = 0.5, *, scale: float | None = None,
                 gamma: float | None = None, window: int | None = None, **options: Any):
        if strategy not in STRATEGIES:
            raise BerdsError(f"unknown pyversity strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
        self.strategy = strategy
        self.method = strategy
        self.diversity = check_fraction("diversity", diversity)
        extra: dict[str, Any] = {}
        allowed = {"dpp": {"scale"}, "msd": set(), "cover": {"gamma"}, "ssd": {"gamma", "window"}}[strategy]
        for key, value in (("scale", scale), ("gamma", gamma), ("window", window)):
            if value is None:
                continue
            if key not in allowed:
                raise BerdsError(f"pyversity strategy {strategy!r} takes no {key!r} (it takes: "
                                 f"{', '.join(['diversity', *sorted(allowed)])})")
            extra[key] = value
        if strategy == "cover" and "gamma" in extra and not 0 < float(extra["gamma"]) <= 1:
            raise BerdsError(f"cover's gamma must be in (0, 1], got {extra['gamma']}")
        if strategy == "ssd" and "gamma" in extra and not float(extra["gamma"]) > 0:
            raise BerdsError(f"ssd's gamma must be > 0, got {extra['gamma']}")
        if strategy == "ssd" and "window" in extra and int(extra["window"]) < 1:
            raise BerdsError(f"ssd's window must be >= 1, got {extra['window']}")
        self.extra = extra
        self._pyversity = require("pyversity", extra="diversify", purpose=f"the {strategy} reranker")
        super().__init__(**options)

    def parameters(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "diversity": self.diversity, **self.extra,
                "library": f"pyversity {getattr(self._pyversity, '__version__', '?')}"}

    def select(self, cand: QuestionCandidates, k: int) -> np.ndarray:
        if k == 0:
            return np.empty(0, dtype=np.int64)
        try:
            result = self._pyversity.diversify(cand.unit, cand.sim1.astype(np.float32), k, strategy=self.strategy,
                                               diversity=self.diversity, **self.extra)
        except ValueError as exc:
            raise BerdsError(f"pyversity {self.strategy} on question {cand.qid!r}: {exc}") from None
        return np.asarray(result.indices, dtype=np.int64)


def dpp(diversity: float = 0.5, *, scale: float | None = None, **options: Any) -> PyversityReranker:
    return PyversityReranker("dpp", diversity, scale=scale, **options)


def msd(diversity: float = 0.5, **options: Any) -> PyversityReranker:
    return PyversityReranker("msd", diversity, **options)


def cover(diversity: float = 0.5, *, gamma: float | None = None, **options: Any) -> PyversityReranker:
    return PyversityReranker("cover", diversity, gamma=gamma, **options)


def ssd(diversity: float = 0.5, *, gamma: float | None = None, window: int | None = None,
        **options: Any) -> PyversityReranker:
    return PyversityReranker("ssd", diversity, gamma=gamma, window=window, **options)


for _factory in (dpp, msd, cover, ssd):  # what a study tunes, readable without building a reranker
    _factory.parameter = PyversityReranker.parameter  # type: ignore[attr-defined]
    _factory.grid = PyversityReranker.grid  # type: ignore[attr-defined]
