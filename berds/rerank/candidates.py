"""What every diversity reranker starts from: each question's candidates with Sim1 and embeddings.

MMR and the other strategies (pyversity's DPP/MSD/COVER/SSD, xQuAD, PM2) share one preparation so they are
compared on equal terms: the top ``depth`` hits of each question, their retriever scores normalised into
Sim1 (``normalise_scores``), and their passage embeddings (``berds.rerank.embeddings``, cached on disk).

Sim1 normalisations (``--normalisation``):

* ``question-max`` (default; the study's released code) — score / the largest score among that question's
  candidates; when that largest score is <= 0, score / a per-corpus constant (``sim1_constant``; by default
  the largest score of the whole run, recorded in the manifest);
* ``dataset-max`` (the paper's appendix A.6) — score / the largest score over the whole run;
* ``minmax`` (berds before the parity work) — (s - min) / (max - min) per question, 1.0 when all equal;
* ``rank`` — 1 - (r - 1) / n, ignoring scores (for runs whose files carry none);
* ``none`` — the scores as they are.
``max`` is an older name of ``question-max``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.types import Hit, Run

NORMALISATIONS = ("question-max", "dataset-max", "minmax", "rank", "none")
NORMALISATION_ALIASES = {"max": "question-max"}
# What text of a passage is embedded: the study embeds ``text + " " + title`` (``text-title``).
EMBED_TEXTS = ("text-title", "text", "title-text")
DEFAULT_NORMALISATION = "question-max"
DEFAULT_EMBED_TEXT = "text-title"
DEFAULT_DEPTH = 100


def check_depth_covers(depth: int, ks: Sequence[int]) -> None:
    """Refuse, before any judging, a depth below the largest cut-off: a reranked run holds only its top ``depth``
    passages, so every question would fail (or, with --allow-short, lose) the ranks past it."""
    if ks and depth < max(ks):
        raise BerdsError(f"--depth {depth} is smaller than --k {max(ks)}: a reranked run holds only the top --depth "
                         f"passages of each question, so its top {max(ks)} cannot be judged — use --depth "
                         f"{max(ks)} or more (the study: 100), or a smaller --k")


def canonical_normalisation(method: str) -> str:
    method = NORMALISATION_ALIASES.get(method, method)
    if method not in NORMALISATIONS:
        raise BerdsError(f"unknown Sim1 normalisation {method!r}; use one of {', '.join(NORMALISATIONS)}")
    return method


def normalise_scores(scores: Sequence[float] | np.ndarray, method: str = DEFAULT_NORMALISATION, *, qid: str = "",
                     dataset_max: float | None = None, sim1_constant: float | None = None) -> np.ndarray:
    """Retriever scores of one question (in rank order) -> Sim1. See the module docstring.

    ``dataset_max`` is the largest score of the whole run (``dataset-max``); ``sim1_constant`` is the
    divisor ``question-max`` uses when the question's own top score is <= 0.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    method = canonical_normalisation(method)
    if s.size == 0:
        return s
    if method == "question-max":
        hi = float(s.max())
        if hi > 0:
            return s / hi
        if sim1_constant is None or not sim1_constant > 0:
            raise BerdsError(
                f"question {qid!r}: its top score is {hi:g}, so 'question-max' divides by the per-corpus constant, "
                f"but none is set (got {sim1_constant!r}) — pass --sim1-constant VALUE (> 0), or use "
                f"--normalisation minmax for scores that can be negative"
            )
        return s / float(sim1_constant)
    if method == "dataset-max":
        if dataset_max is None or not dataset_max > 0:
            raise BerdsError(f"the 'dataset-max' normalisation needs a positive largest score over the run, got "
                             f"{dataset_max!r} — use --normalisation minmax for scores that can be negative")
        return s / float(dataset_max)
    if method == "minmax":
        lo, hi = float(s.min()), float(s.max())
        return np.ones_like(s) if hi == lo else (s - lo) / (hi - lo)
    if method == "rank":
        n = s.size
        return 1.0 - np.arange(n, dtype=np.float64) / n
    return s


def passage_embed_text(hit: Hit, embed_text: str = DEFAULT_EMBED_TEXT) -> str:
    """The text of a passage that is embedded: ``text + " " + title`` (``text-title``, the study), ``text``
    alone, or ``title + " " + text``. Without a title it is the text."""
    p = hit.passage
    if embed_text not in EMBED_TEXTS:
        raise BerdsError(f"unknown --embed-text {embed_text!r}; use one of {', '.join(EMBED_TEXTS)}")
    if embed_text == "text" or not p.title:
        return p.text
    if embed_text == "title-text":
        return f"{p.title} {p.text}"
    return f"{p.text} {p.title}"


@dataclass
class QuestionCandidates:
    """One question: its top hits (rank order), Sim1 (float64) and unit-length embeddings (float32)."""

    qid: str
    hits: list[Hit]
    sim1: np.ndarray
    unit: np.ndarray


@dataclass
class Candidates:
    """All questions of a run, prepared once; ``config`` is the provenance every reranker records."""

    questions: dict[str, QuestionCandidates]
    config: dict[str, Any] = field(default_factory=dict)
    embedded_now: int = 0
    constant_scores: int = 0


def unit_rows(embeddings: np.ndarray, *, inplace: bool = False) -> np.ndarray:
    """Rows scaled to unit length, float32 (zero rows stay zero, so their cosine with anything is 0).
    ``inplace`` scales a float32 array the caller owns instead of a copy (one allocation less per question)."""
    e = embeddings if inplace and embeddings.dtype == np.float32 else np.array(embeddings, dtype=np.float32)
    if e.ndim != 2 or e.size == 0:
        return e
    norms = np.sqrt(np.einsum("ij,ij->i", e, e))
    norms[norms == 0] = 1.0
    e /= norms[:, None]
    return e


passage_of = attrgetter("passage")  # Hit -> Passage

REPEATS = ("keep", "first")  # what a passage repeated in a ranking is to a reranker (see prepare_candidates)


def first_occurrences(hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` without repeated passages (each kept at its first rank)."""
    seen: set[str] = set()
    return [h for h in hits if not (h.passage.id in seen or seen.add(h.passage.id))]


def run_max_score(run: Run, depth: int) -> float | None:
    scores = [h.score for hits in run.hits.values() for h in hits[:depth]]
    return max(scores) if scores else None


def prepare_candidates(
    run: Run,
    *,
    encoder: Any,
    embedding_cache: Any = None,
    depth: int = DEFAULT_DEPTH,
    normalisation: str = DEFAULT_NORMALISATION,
    embed_text: str = DEFAULT_EMBED_TEXT,
    sim1_constant: float | None = None,
    repeats: str = "keep",
    progress: bool = False,
) -> Candidates:
    """Cut every question to ``depth``, normalise its scores and embed its passages (through the cache).

    ``repeats``: what a passage a ranking repeats (an expansion run merged with duplicates kept) is. ``keep``, the
    study's code: a candidate at each of its ranks, within the first ``depth`` entries. ``first``: one candidate, at
    its first rank (the first ``depth`` distinct passages)."""
    from berds.rerank.embeddings import embedding_matrix

    if depth < 1:
        raise BerdsError(f"--depth must be a positive integer, got {depth}")
    normalisation = canonical_normalisation(normalisation)
    if embed_text not in EMBED_TEXTS:
        raise BerdsError(f"unknown --embed-text {embed_text!r}; use one of {', '.join(EMBED_TEXTS)}")
    if repeats not in REPEATS:
        raise BerdsError(f"unknown repeats {repeats!r}; use one of {', '.join(REPEATS)}")
    if repeats == "first":
        cut = {qid: first_occurrences(run.hits[qid])[:depth] for qid in run.questions}
        dropped = sum(len(run.hits[qid]) - len(first_occurrences(run.hits[qid])) for qid in run.questions)
    else:
        cut = {qid: list(run.hits[qid][:depth]) for qid in run.questions}
        dropped = 0
    dataset_max = run_max_score(run, depth)
    constant = sim1_constant if sim1_constant is not None else dataset_max
    constant_used = 0
    if normalisation in ("minmax", "question-max", "dataset-max"):
        flat = [qid for qid, hits in cut.items() if len(hits) > 1 and len({h.score for h in hits}) == 1]
        if flat and len(flat) == sum(len(h) > 1 for h in cut.values()):
            raise BerdsError(
                f"every question of run {run.name!r} has all-equal retriever scores (a file without scores?), so "
                f"Sim1 would carry no relevance and the reranker would ignore it — use --normalisation rank to "
                f"take relevance from the rank instead"
            )
    else:
        flat = []
    sim1: dict[str, np.ndarray] = {}
    for qid, hits in cut.items():
        scores = [h.score for h in hits]
        if normalisation == "question-max" and scores and max(scores) <= 0:
            constant_used += 1
        sim1[qid] = normalise_scores(scores, normalisation, qid=qid, dataset_max=dataset_max, sim1_constant=constant)
    if embed_text == "text-title":  # the study's, without a call per passage (20,000 in a 200-question rerank)
        texts = {qid: [f"{p.text} {p.title}" if p.title else p.text for p in map(passage_of, hits)]
                 for qid, hits in cut.items()}
    else:
        texts = {qid: [passage_embed_text(h, embed_text) for h in hits] for qid, hits in cut.items()}
    matrix, rows, computed = embedding_matrix([t for ts in texts.values() for t in ts], encoder, embedding_cache,
                                              progress=progress, description=f"embedding {run.name or 'run'}")
    questions: dict[str, QuestionCandidates] = {}
    for qid, hits in cut.items():
        # one small matrix per question, gathered by one numpy index from the run's matrix of distinct texts (a
        # copy: it stays in cache while it is normalised in place, and the run's matrix is left as it is)
        emb = matrix[[rows[t] for t in texts[qid]]] if hits else np.zeros((0, 1), dtype=np.float32)
        questions[qid] = QuestionCandidates(qid, hits, sim1[qid], unit_rows(emb, inplace=True))
    config: dict[str, Any] = {
        "encoder": getattr(encoder, "id", type(encoder).__name__),
        # what `rerank --lambda-from` needs to rebuild the same Sim2 encoder
        "model": getattr(encoder, "model_name", None), "pooling": getattr(encoder, "pooling", None),
        "normalisation": normalisation,
        "depth": depth,
        # what was reranked: a 20-passage input under depth 100 reranks 20 (the manifest said 100 alone)
        "passages_reranked": max(map(len, cut.values()), default=0),
        "embed_text": embed_text,
    }
    if repeats != "keep":
        config["repeats"] = repeats
        config["repeated_passages_dropped"] = dropped
    if normalisation == "question-max":
        config["sim1_constant"] = constant
        config["sim1_constant_source"] = "given" if sim1_constant is not None else "largest score of the run"
        config["questions_divided_by_constant"] = constant_used
    if normalisation == "dataset-max":
        config["dataset_max"] = dataset_max
    return Candidates(questions, config, embedded_now=computed, constant_scores=len(flat))


def finish_run(run: Run, ordered: Mapping[str, Sequence[Hit]], *, method: str, name_suffix: str,
               parameters: Mapping[str, Any], input_path: Any = None,
               extra_provenance: Mapping[str, Any] | None = None) -> Run:
    """The reranked run: hits scored ``n - position`` (reranker objectives tie, and TREC tools order by
    score), the input's provenance kept, ``manifest["rerank"]`` and ``manifest["input_run"]`` added."""
    hits = {qid: [Hit(h.passage, float(len(hs) - pos)) for pos, h in enumerate(hs)] for qid, hs in ordered.items()}
    # ("source" is where the input was read from: inherited, it made errors about the reranked run name the input's
    # file; input_run keeps it)
    inherited = {k: v for k, v in run.manifest.items()
                 if k not in ("kind", "created", "versions", "name", "questions", "min_depth", "max_depth",
                              "rerank", "input_run", "source")}
    manifest = {
        **inherited,
        "rerank": {"method": method, **dict(parameters), "score": "n - position after reranking",
                   **(dict(extra_provenance) if extra_provenance else {})},
        "input_run": {"name": run.name, "path": str(input_path) if input_path is not None else None,
                      "manifest": dict(run.manifest)},
    }
    return Run(run.questions, hits, manifest, f"{run.name or 'run'}-{name_suffix}")
