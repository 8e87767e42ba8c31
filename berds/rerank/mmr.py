"""Maximal Marginal Relevance (MMR) reranking — Eq. 1 of the BERDS study.

Over the top ``depth`` (100) passages of a question, MMR builds a new ranking greedily. With ``S`` the
passages picked so far, the next pick is::

    argmax_{d not in S}  λ · Sim1(d, q)  −  (1 − λ) · max_{s in S} Sim2(d, s)

* ``Sim1`` is the retriever's score normalised to [0, 1] per question (``normalise_scores``);
* ``Sim2`` is the cosine similarity of passage embeddings (``berds.rerank.embeddings``);
* the first pick, with ``S`` empty, is the argmax of ``λ · Sim1`` (the max over an empty set is dropped);
* ties are broken by the original rank (the earlier passage wins).

λ = 1 ranks by Sim1 alone (the original ranking when scores decrease with rank); λ = 0 ignores
relevance after the first pick and always takes the passage least similar to everything chosen.

The implementation keeps, for every candidate, its running ``max_{s in S} Sim2(d, s)`` as one numpy
vector and updates it with the row of the last pick, so a whole reranking costs ``depth`` vector
operations — no Python loop over pairs of documents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.types import Hit, Run

# Named Sim1 normalisations (per question):
#   minmax — (s − min) / (max − min); all-equal scores give 1.0 everywhere.
#   max    — s / max, the original BERDS scripts' rule; needs a positive maximum.
#   rank   — 1 − (r − 1) / n for rank r of n, ignoring scores (for runs whose files carry no scores).
#   none   — the scores as they are (already in [0, 1], e.g. cosines).
NORMALISATIONS = ("minmax", "max", "rank", "none")
# What text of a passage is embedded for Sim2.
EMBED_TEXTS = ("text", "title-text", "text-title")
DEFAULT_DEPTH = 100
DEFAULT_LAMBDAS = (0.5, 0.75, 0.9, 0.95, 0.99)


def normalise_scores(scores: Sequence[float] | np.ndarray, method: str = "minmax", *, qid: str = "") -> np.ndarray:
    """Retriever scores of one question (in rank order) -> Sim1 values in [0, 1]. See ``NORMALISATIONS``."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    if method not in NORMALISATIONS:
        raise BerdsError(f"unknown Sim1 normalisation {method!r}; use one of {', '.join(NORMALISATIONS)}")
    if s.size == 0:
        return s
    if method == "minmax":
        lo, hi = float(s.min()), float(s.max())
        return np.ones_like(s) if hi == lo else (s - lo) / (hi - lo)
    if method == "max":
        hi = float(s.max())
        if hi <= 0:
            raise BerdsError(
                f"question {qid!r}: the 'max' normalisation (score / max, the original scripts' rule) needs a "
                f"positive top score, got {hi:g} — use --normalisation minmax for scores that can be negative"
            )
        return s / hi
    if method == "rank":
        n = s.size
        return 1.0 - np.arange(n, dtype=np.float64) / n
    return s


def cosine_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of the rows of ``embeddings`` (zero vectors have cosine 0 with all)."""
    # float32 like the embeddings themselves: the product is several times faster than in float64, and
    # cosines need no more precision than the vectors carry.
    e = np.asarray(embeddings, dtype=np.float32)
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    unit = np.divide(e, norms, out=np.zeros_like(e), where=norms > 0)
    return (unit @ unit.T).astype(np.float64)


def mmr_order(relevance: Sequence[float] | np.ndarray, similarity: np.ndarray, lam: float,
              k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Greedy MMR over candidates given in original rank order.

    ``relevance`` is Sim1 (n,), ``similarity`` is Sim2 (n, n). Returns ``(order, gains)``: the indices of
    the first ``k`` (default all) picks, and the MMR objective value each pick had when it was chosen.
    """
    if not 0.0 <= lam <= 1.0 or math.isnan(lam):
        raise BerdsError(f"λ must be between 0 and 1, got {lam}")
    rel = np.asarray(relevance, dtype=np.float64)
    sim = np.asarray(similarity, dtype=np.float64)
    n = rel.shape[0]
    if sim.shape != (n, n):
        raise ValueError(f"similarity must be {n}x{n} for {n} candidates, got {sim.shape}")
    k = n if k is None else max(0, min(int(k), n))
    weighted = lam * rel
    diversity_weight = 1.0 - lam
    max_sim = np.zeros(n)
    taken = np.zeros(n, dtype=bool)
    order = np.empty(k, dtype=np.int64)
    gains = np.empty(k, dtype=np.float64)
    for step in range(k):
        objective = weighted.copy() if step == 0 else weighted - diversity_weight * max_sim
        objective[taken] = -np.inf
        pick = int(np.argmax(objective))  # first maximum = best original rank among ties
        order[step], gains[step] = pick, objective[pick]
        taken[pick] = True
        if step == 0:
            max_sim = sim[pick].copy()
        else:
            np.maximum(max_sim, sim[pick], out=max_sim)
    return order, gains


def passage_embed_text(hit: Hit, embed_text: str = "text") -> str:
    """The text of a passage that is embedded: ``text`` alone (default), ``title-text`` or ``text-title``."""
    p = hit.passage
    if embed_text == "text" or not p.title:
        return p.text
    if embed_text == "title-text":
        return f"{p.title} {p.text}"
    if embed_text == "text-title":
        return f"{p.text} {p.title}"
    raise BerdsError(f"unknown --embed-text {embed_text!r}; use one of {', '.join(EMBED_TEXTS)}")


def mmr_rerank_hits(hits: Sequence[Hit], embeddings: np.ndarray, lam: float, *, normalisation: str = "minmax",
                    qid: str = "") -> list[Hit]:
    """Rerank one question's hits (already cut to the depth) given their embeddings (rows in hit order).

    The returned hits are scored ``n − position`` (n hits): MMR's objective values can tie, and TREC
    tools order by score, so a strictly decreasing score keeps MMR's order everywhere.
    """
    if not hits:
        return []
    relevance = normalise_scores([h.score for h in hits], normalisation, qid=qid)
    order, _ = mmr_order(relevance, cosine_matrix(embeddings), lam)
    n = len(order)
    return [Hit(hits[i].passage, float(n - pos)) for pos, i in enumerate(order)]


@dataclass
class RerankStats:
    questions: int = 0
    passages: int = 0
    embedded: int = 0            # texts embedded in this call (the rest came from the cache)
    constant_scores: int = 0     # questions whose scores were all equal (Sim1 carries no information)
    moved: int = 0               # questions whose top 10 changed


def mmr_rerank(
    run: Run,
    *,
    lam: float,
    encoder: Any = None,
    embedding_cache: Any = None,
    depth: int = DEFAULT_DEPTH,
    normalisation: str = "minmax",
    embed_text: str = "text",
    input_path: str | Path | None = None,
    progress: bool = False,
    extra_provenance: Mapping[str, Any] | None = None,
) -> tuple[Run, RerankStats]:
    """MMR-rerank the top ``depth`` hits of every question of ``run``; returns the new run and counts.

    ``encoder`` defaults to the study's UAE-Large-V1 (CLS pooling, no prompt); ``embedding_cache`` is an
    ``EmbeddingCache`` (None: embed without caching). The new run keeps the input's provenance and adds
    ``manifest["rerank"]`` (method, λ, encoder id, normalisation, depth, embedded text) and
    ``manifest["input_run"]`` (name, path, and the input's own manifest).
    """
    from berds.rerank.embeddings import embed_texts, load_encoder

    if depth < 1:
        raise BerdsError(f"--depth must be a positive integer, got {depth}")
    if normalisation not in NORMALISATIONS:
        raise BerdsError(f"unknown Sim1 normalisation {normalisation!r}; use one of {', '.join(NORMALISATIONS)}")
    if embed_text not in EMBED_TEXTS:
        raise BerdsError(f"unknown --embed-text {embed_text!r}; use one of {', '.join(EMBED_TEXTS)}")
    if not 0.0 <= lam <= 1.0:
        raise BerdsError(f"λ must be between 0 and 1, got {lam}")
    encoder = encoder if encoder is not None else load_encoder()
    cut = {qid: list(run.hits[qid][:depth]) for qid in run.questions}
    texts = [passage_embed_text(h, embed_text) for hits in cut.values() for h in hits]
    vectors, computed = embed_texts(texts, encoder, embedding_cache, progress=progress,
                                    description=f"embedding {run.name or 'run'}")
    stats = RerankStats(questions=len(cut), passages=len(texts), embedded=computed)
    if normalisation in ("minmax", "max"):
        const = [qid for qid, hits in cut.items() if len(hits) > 1 and len({h.score for h in hits}) == 1]
        stats.constant_scores = len(const)
        if const and len(const) == sum(len(h) > 1 for h in cut.values()):
            raise BerdsError(
                f"every question of run {run.name!r} has all-equal retriever scores (a file without scores?), so "
                f"Sim1 would carry no relevance and MMR would ignore λ — use --normalisation rank to take "
                f"relevance from the rank instead"
            )
    reranked: dict[str, list[Hit]] = {}
    row = 0
    for qid, hits in cut.items():
        emb = vectors[row:row + len(hits)]
        row += len(hits)
        reranked[qid] = mmr_rerank_hits(hits, emb, lam, normalisation=normalisation, qid=qid)
        before = [h.passage.id for h in hits[:10]]
        stats.moved += before != [h.passage.id for h in reranked[qid][:10]]

    inherited = {k: v for k, v in run.manifest.items()
                 if k not in ("kind", "created", "versions", "name", "questions", "min_depth", "max_depth",
                              "rerank", "input_run")}
    manifest = {
        **inherited,
        "rerank": {
            "method": "mmr",
            "lambda": lam,
            "encoder": getattr(encoder, "id", type(encoder).__name__),
            "normalisation": normalisation,
            "depth": depth,
            "embed_text": embed_text,
            "score": "n - position after reranking",
            "embedded_now": computed,
            **(dict(extra_provenance) if extra_provenance else {}),
        },
        "input_run": {
            "name": run.name,
            "path": str(input_path) if input_path is not None else None,
            "manifest": dict(run.manifest),
        },
    }
    name = f"{run.name or 'run'}-mmr{lam:g}"
    return Run(run.questions, reranked, manifest, name), stats


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
    encoder: Any = None,
    embedding_cache: Any = None,
    depth: int = DEFAULT_DEPTH,
    normalisation: str = "minmax",
    embed_text: str = "text",
    overwrite: bool = False,
    progress: bool = False,
    extra_provenance: Mapping[str, Any] | None = None,
) -> tuple[Run, RerankStats, Path]:
    """``berds rerank mmr``: load a run (folder or BERDS jsonl), MMR-rerank it, save the new run folder."""
    from berds.runs import load_run, save_run

    out = Path(out)
    if (out / "manifest.json").exists() and not overwrite:  # fail before the (slow) embedding step
        raise BerdsError(f"{out} already holds a run — choose another --out or pass --overwrite")
    run = load_run(run_path, require_perspectives=False)  # reranking needs no gold perspectives (DELPHI)
    reranked, stats = mmr_rerank(run, lam=lam, encoder=encoder, embedding_cache=embedding_cache, depth=depth,
                                 normalisation=normalisation, embed_text=embed_text, input_path=run_path,
                                 progress=progress, extra_provenance=extra_provenance)
    return reranked, stats, save_run(reranked, out, overwrite=overwrite)
