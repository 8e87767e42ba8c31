"""Maximal Marginal Relevance (MMR) reranking — Eq. 1 of the BERDS study, as its released code runs it.

Over the top ``depth`` (100) passages of a question, MMR builds a new ranking greedily. With ``S`` the
passages picked so far, the next pick is::

    argmax_{d not in S}  λ · Sim1(d, q)  −  (1 − λ) · max_{s in S} Sim2(d, s)

The defaults are the study's released code (``../shared/data/berds-study/README.md``, "MMR"):

* ``Sim1`` is the retriever score divided by the largest score among the question's candidates
  (``question-max``; a per-corpus constant when that largest score is <= 0). The paper's appendix divides by
  the largest score of the whole dataset instead (``dataset-max``); berds' earlier per-question min-max is
  ``minmax``. See ``berds.rerank.candidates``;
* ``Sim2`` is the cosine of UAE-Large-V1 embeddings (CLS pooling, no prompt) of ``text + " " + title``;
* the first pick is always the rank-1 candidate (``first="rank1"``); ``first="objective"`` takes the argmax
  of ``λ · Sim1`` instead (berds' earlier rule). Ties go to the earlier rank;
* λ per retriever and corpus: the paper's Table 7 (``LAMBDA_PRESETS``, ``--lambda-preset bm25-wikipedia``
  or ``--lambda table7:bm25:wikipedia``).

The greedy keeps, for every candidate, its running ``max_{s in S} Sim2(d, s)`` as one numpy vector and
updates it with the cosine row of the last pick, so choosing ``k`` passages costs ``k`` vector operations;
when few of the candidates are wanted (``top``) only their rows of cosines are computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.rerank.base import EmbeddingReranker, check_fraction, questions_reordered
from berds.rerank.candidates import (DEFAULT_DEPTH, DEFAULT_EMBED_TEXT, DEFAULT_NORMALISATION, EMBED_TEXTS,
                                     NORMALISATIONS, QuestionCandidates, normalise_scores, passage_embed_text,
                                     unit_rows)
from berds.types import Hit, Run

__all__ = ["NORMALISATIONS", "EMBED_TEXTS", "DEFAULT_DEPTH", "DEFAULT_LAMBDAS", "LAMBDA_PRESETS",
           "SIM1_CONSTANT_PRESETS",
           "FIRST_PICKS", "parse_sim1_constant",
           "normalise_scores", "passage_embed_text", "cosine_matrix", "mmr_order", "mmr_order_embeddings",
           "mmr_rerank_hits", "mmr_rerank", "rerank_path", "lambda_from_manifest", "parse_lambda", "MMRReranker"]

DEFAULT_LAMBDAS = (0.5, 0.75, 0.9, 0.95, 0.99)
FIRST_PICKS = ("rank1", "objective")

# Table 7 of the study: λ per (retriever, corpus). Google Search output has no DPR run.
LAMBDA_PRESETS: dict[tuple[str, str], float] = {
    ("bm25", "wikipedia"): 0.99, ("dpr", "wikipedia"): 0.95, ("contriever", "wikipedia"): 0.75,
    ("bm25", "sphere"): 0.99, ("dpr", "sphere"): 0.99, ("contriever", "sphere"): 0.95,
    ("bm25", "google-search"): 0.95, ("contriever", "google-search"): 0.95,
}
_CORPUS_ALIASES = {"wiki": "wikipedia", "google": "google-search", "google-search-output": "google-search",
                   "web": "google-search"}


def lambda_preset(retriever: str, corpus: str) -> float:
    """λ of Table 7 for ``retriever`` (bm25, dpr, contriever) on ``corpus`` (wikipedia, sphere, google-search)."""
    r, c = retriever.strip().lower(), corpus.strip().lower()
    c = _CORPUS_ALIASES.get(c, c)
    try:
        return LAMBDA_PRESETS[(r, c)]
    except KeyError:
        names = ", ".join(f"{a}-{b}" for a, b in LAMBDA_PRESETS)
        raise BerdsError(f"Table 7 has no λ for retriever {retriever!r} on corpus {corpus!r}; presets: {names}") from None


# The study's per-(corpus, retriever) Sim1 divisors for a question whose top score is <= 0 (its MMR code's
# max_score_map: wiki, sphere, google_api), keyed like LAMBDA_PRESETS. Google Search output has no DPR run.
SIM1_CONSTANT_PRESETS: dict[tuple[str, str], float] = {
    ("bm25", "wikipedia"): 63.5, ("dpr", "wikipedia"): 100.6, ("contriever", "wikipedia"): 2.20,
    ("bm25", "sphere"): 99.9, ("dpr", "sphere"): 243.9, ("contriever", "sphere"): 2.55,
    ("bm25", "google-search"): 181.5, ("contriever", "google-search"): 2.52,
}
_CORPUS_ALIASES["google_api"] = "google-search"  # (the study's own name for it)


def parse_sim1_constant(text: str | float | None) -> float | None:
    """``--sim1-constant``: a number > 0, or the study's constant for ``RETRIEVER-CORPUS`` (``bm25-wikipedia``,
    ``contriever-sphere``, ``bm25-google-search``, ...: ``SIM1_CONSTANT_PRESETS``)."""
    if text is None or isinstance(text, (int, float)):
        return None if text is None else float(text)
    value = str(text).strip()
    try:
        number = float(value)
    except ValueError:
        retriever, sep, corpus = value.partition("-")
        key = (retriever.strip().lower(), _CORPUS_ALIASES.get(corpus.strip().lower(), corpus.strip().lower()))
        if not sep or key not in SIM1_CONSTANT_PRESETS:
            names = ", ".join(f"{a}-{b}" for a, b in SIM1_CONSTANT_PRESETS)
            raise BerdsError(f"--sim1-constant {value!r} is neither a number nor one of the study's presets: "
                             f"{names}") from None
        return SIM1_CONSTANT_PRESETS[key]
    if not number > 0:
        raise BerdsError(f"--sim1-constant must be > 0, got {value!r}")
    return number


def parse_lambda(text: str | float) -> float:
    """``0.9``, ``table7:RETRIEVER:CORPUS`` or a preset name ``RETRIEVER-CORPUS`` (e.g. ``bm25-wikipedia``)."""
    if isinstance(text, (int, float)):
        return check_fraction("λ", text)
    value = str(text).strip()
    try:
        return check_fraction("λ", float(value))
    except ValueError:
        pass
    if value.lower().startswith("table7:"):
        parts = value.split(":")
        if len(parts) != 3:
            raise BerdsError(f"--lambda {value!r}: write table7:RETRIEVER:CORPUS, e.g. table7:bm25:wikipedia")
        return lambda_preset(parts[1], parts[2])
    retriever, sep, corpus = value.partition("-")
    if not sep:
        raise BerdsError(f"--lambda {value!r} is neither a number, table7:RETRIEVER:CORPUS nor a preset like "
                         "bm25-wikipedia")
    return lambda_preset(retriever, corpus)


def cosine_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities (float32) of the rows of ``embeddings`` (zero vectors: cosine 0 with all)."""
    unit = unit_rows(embeddings)
    return unit @ unit.T


def _greedy(relevance: np.ndarray, row_of: Any, n: int, lam: float, k: int, first: str) -> tuple[np.ndarray, np.ndarray]:
    # float64 objective (Sim1's precision), float32 similarities; a picked candidate's relevance becomes -inf,
    # so it can never win again without a mask operation per step.
    available = lam * relevance
    diversity_weight = 1.0 - lam
    order = np.empty(k, dtype=np.int64)
    gains = np.empty(k, dtype=np.float64)
    if k == 0:
        return order, gains
    pick = 0 if first == "rank1" else int(available.argmax())  # first maximum = best rank among ties
    order[0], gains[0] = pick, available[pick]
    available[pick] = -np.inf
    max_sim = np.array(row_of(pick), dtype=np.float32)
    objective = np.empty(n, dtype=np.float64)
    for step in range(1, k):
        np.multiply(max_sim, diversity_weight, out=objective, dtype=np.float64)
        np.subtract(available, objective, out=objective)
        pick = int(objective.argmax())
        order[step], gains[step] = pick, objective[pick]
        available[pick] = -np.inf
        if step + 1 < k:
            np.maximum(max_sim, row_of(pick), out=max_sim)
    return order, gains


def _check(lam: float, first: str) -> float:
    if math.isnan(lam) or not 0.0 <= lam <= 1.0:
        raise BerdsError(f"λ must be between 0 and 1, got {lam}")
    if first not in FIRST_PICKS:
        raise BerdsError(f"unknown first-pick rule {first!r}; use one of {', '.join(FIRST_PICKS)}")
    return float(lam)


def mmr_order(relevance: Sequence[float] | np.ndarray, similarity: np.ndarray, lam: float,
              k: int | None = None, *, first: str = "rank1") -> tuple[np.ndarray, np.ndarray]:
    """Greedy MMR over candidates given in original rank order.

    ``relevance`` is Sim1 (n,), ``similarity`` is Sim2 (n, n). Returns ``(order, gains)``: the indices of
    the first ``k`` (default all) picks, and the MMR objective value each pick had when it was chosen
    (for the first pick, ``λ · Sim1``).
    """
    lam = _check(lam, first)
    rel = np.asarray(relevance, dtype=np.float64)
    sim = np.asarray(similarity)
    n = rel.shape[0]
    if sim.shape != (n, n):
        raise ValueError(f"similarity must be {n}x{n} for {n} candidates, got {sim.shape}")
    k = n if k is None else max(0, min(int(k), n))
    return _greedy(rel, sim.__getitem__, n, lam, k, first)


def mmr_order_embeddings(relevance: Sequence[float] | np.ndarray, unit: np.ndarray, lam: float,
                         k: int | None = None, *, first: str = "rank1") -> tuple[np.ndarray, np.ndarray]:
    """``mmr_order`` from unit-length embeddings: Sim2 rows are computed as they are needed (all of them
    in one product when most candidates are wanted, one row per pick when few are)."""
    lam = _check(lam, first)
    rel = np.asarray(relevance, dtype=np.float64)
    n = rel.shape[0]
    k = n if k is None else max(0, min(int(k), n))
    if n and unit.shape[0] != n:
        raise ValueError(f"{n} candidates but {unit.shape[0]} embeddings")
    if 4 * k >= n:
        sim = unit @ unit.T
        return _greedy(rel, sim.__getitem__, n, lam, k, first)
    return _greedy(rel, lambda i: unit @ unit[i], n, lam, k, first)


def mmr_rerank_hits(hits: Sequence[Hit], embeddings: np.ndarray, lam: float, *,
                    normalisation: str = DEFAULT_NORMALISATION, qid: str = "", first: str = "rank1",
                    sim1_constant: float | None = None, dataset_max: float | None = None) -> list[Hit]:
    """Rerank one question's hits (already cut to the depth) given their embeddings (rows in hit order);
    the returned hits are scored ``n − position``."""
    if not hits:
        return []
    relevance = normalise_scores([h.score for h in hits], normalisation, qid=qid, sim1_constant=sim1_constant,
                                 dataset_max=dataset_max)
    order, _ = mmr_order_embeddings(relevance, unit_rows(embeddings), lam, first=first)
    n = len(order)
    return [Hit(hits[i].passage, float(n - pos)) for pos, i in enumerate(order)]


class MMRReranker(EmbeddingReranker):
    """MMR (Eq. 1) as a reranker: ``MMRReranker(lam=0.9)``; every option of ``EmbeddingReranker``
    (encoder, cache, depth, normalisation, embedded text, ``top``) plus ``first``."""

    method = "mmr"
    parameter = "lam"
    grid = DEFAULT_LAMBDAS

    def __init__(self, lam: float | str = 0.9, *, first: str = "rank1", **options: Any):
        self.lam = parse_lambda(lam)
        _check(self.lam, first)
        self.first = first
        super().__init__(**options)

    def parameters(self) -> dict[str, Any]:
        return {"lambda": self.lam, "first": self.first}

    def select(self, cand: QuestionCandidates, k: int) -> np.ndarray:
        return mmr_order_embeddings(cand.sim1, cand.unit, self.lam, k, first=self.first)[0]


@dataclass
class RerankStats:
    questions: int = 0
    passages: int = 0
    embedded: int = 0            # texts embedded in this call (the rest came from the cache)
    constant_scores: int = 0     # questions whose scores were all equal (Sim1 carries no information)
    moved: int = 0               # questions whose top 10 changed


def stats_of(before: Run, after: Run, reranker: EmbeddingReranker) -> RerankStats:
    cands = reranker.last
    return RerankStats(questions=len(before.questions), passages=sum(len(c.hits) for c in cands.questions.values()),
                       embedded=cands.embedded_now, constant_scores=cands.constant_scores,
                       moved=questions_reordered(before, after))


def mmr_rerank(
    run: Run,
    *,
    lam: float,
    encoder: Any = None,
    embedding_cache: Any = None,
    depth: int = DEFAULT_DEPTH,
    normalisation: str = DEFAULT_NORMALISATION,
    embed_text: str = DEFAULT_EMBED_TEXT,
    first: str = "rank1",
    sim1_constant: float | None = None,
    top: int | None = None,
    input_path: str | Path | None = None,
    progress: bool = False,
    extra_provenance: Mapping[str, Any] | None = None,
) -> tuple[Run, RerankStats]:
    """MMR-rerank the top ``depth`` hits of every question of ``run``; returns the new run and counts.

    ``encoder`` defaults to the study's UAE-Large-V1 (CLS pooling, no prompt); ``embedding_cache`` is an
    ``EmbeddingCache`` (None: embed without caching). The new run keeps the input's provenance and adds
    ``manifest["rerank"]`` (method, λ, first-pick rule, encoder id, normalisation, depth, embedded text) and
    ``manifest["input_run"]`` (name, path, and the input's own manifest). ``top`` orders only the first
    ``top`` picks by MMR (the rest follow in their original order).
    """
    reranker = MMRReranker(lam, first=first, encoder=encoder, embedding_cache=embedding_cache, depth=depth,
                           normalisation=normalisation, embed_text=embed_text, sim1_constant=sim1_constant, top=top)
    reranked = reranker.rerank(run, progress=progress, input_path=input_path, extra_provenance=extra_provenance)
    return reranked, stats_of(run, reranked, reranker)


def similarity_model_from_manifest(path: str | Path) -> tuple[str | None, str | None]:
    """``(model, pooling)`` of the Sim2 encoder ``berds tune mmr`` used (None, None when not recorded)."""
    from berds.io import read_json

    path = Path(path)
    manifest = read_json(path / "manifest.json" if path.is_dir() else path)
    rerank = manifest.get("rerank") or {}
    return rerank.get("model"), rerank.get("pooling")


def lambda_from_manifest(path: str | Path) -> float:
    """The λ chosen by ``berds tune mmr`` (read from its output folder or manifest file)."""
    from berds.io import read_json

    path = Path(path)
    manifest_path = path / "manifest.json" if path.is_dir() else path
    manifest = read_json(manifest_path)
    try:
        return float(manifest["rerank"]["tuning"]["chosen_lambda"])
    except (KeyError, TypeError, ValueError):
        from berds.errors import InputError

        raise InputError("holds no tuned λ (rerank.tuning.chosen_lambda)", path=manifest_path,
                         fix="pass the output folder of `berds tune mmr`") from None


# ----------------------------------------------------------------------------------- file-level API


def rerank_path(
    run_path: str | Path,
    out: str | Path,
    *,
    lam: float,
    overwrite: bool = False,
    **options: Any,
) -> tuple[Run, RerankStats, Path]:
    """``berds rerank mmr``: load a run (folder or BERDS jsonl), MMR-rerank it, save the new run folder.
    ``options`` go to ``mmr_rerank``."""
    from berds.runs import load_run, save_run

    out = Path(out)
    if (out / "manifest.json").exists() and not overwrite:  # fail before the (slow) embedding step
        raise BerdsError(f"{out} already holds a run — choose another --out or pass --overwrite")
    # reranking needs no gold perspectives (DELPHI); an empty question stays empty
    run = load_run(run_path, allow_empty=True, require_perspectives=False)
    reranked, stats = mmr_rerank(run, lam=lam, input_path=run_path, **options)
    return reranked, stats, save_run(reranked, out, overwrite=overwrite)
