"""berds inside PyTerrier, and PyTerrier inside berds (``pip install 'berds[pyterrier]'``).

* ``PyTerrierRetriever(pipeline=...)``: any ``pt.Transformer`` returning a ranking is a berds retriever
  (``berds retrieve -r pyterrier --option pipeline=MODULE:OBJECT --corpus STORE``; ``berds/retrievers/pyterrier.py``).
* ``BerdsRetriever(name_or_object, k=..., **options)``: a berds retriever as a ``pt.Transformer`` (topics in,
  ranking out: ``qid, query, docno, score, rank, text, title``).
* ``BerdsReranker(name_or_object, **options)``: a berds reranker (MMR, xQuAD, ...) as a ``pt.Transformer``
  (ranking in, reranked ranking out), so ``BerdsRetriever("bm25", index=...) >> BerdsReranker("mmr", ...)``.
* ``topics(source)`` / ``qrels(evaluation)``: BERDS questions as PyTerrier topics (with their perspectives) and
  an evaluation's judgements as subtopic qrels (``qid, docno, label, iteration``), for
  ``pt.Experiment([...], topics, qrels, eval_metrics=[MRecall@5, BERDS_P@5])`` (measure objects, as
  ``pyterrier.measures`` gives; importing this module also registers the names with ir_measures, so
  ``ir_measures.parse_measure("MRecall@5")`` works; ``berds/evaluate/measures.py``).

Java: PyTerrier starts a JVM only for Terrier's own components; nothing here starts one (berds' BM25 retriever
starts pyserini's, as it does anywhere).
"""

from __future__ import annotations

from typing import Any, Sequence

from berds.lazy import require

pt = require("pyterrier", extra="pyterrier", purpose="berds in PyTerrier")
import pandas as pd  # noqa: E402  (a pyterrier dependency)

from berds.errors import BerdsError  # noqa: E402
from berds.evaluate.measures import register as _register_measures  # noqa: E402
from berds.retrievers.pyterrier import PyTerrierRetriever, topics_frame  # noqa: E402
from berds.types import Hit, Passage, Question, Run, rank_hits  # noqa: E402

MRecall, BERDS_P = _register_measures()["MRecall"], _register_measures()["BERDS_P"]
RANKING_COLUMNS = ["qid", "query", "docno", "score", "rank", "text", "title"]

__all__ = ["BERDS_P", "BerdsReranker", "BerdsRetriever", "MRecall", "PyTerrierRetriever", "qrels", "topics"]


def topics(source: Any = "demo", split: str = "test", *, limit: int | None = None) -> pd.DataFrame:
    """PyTerrier topics (``qid``, ``query``, ``perspectives``) from a question source ``berds.questions`` reads
    (``demo``, ``kialo``, a jsonl path) or a list of ``Question``."""
    if isinstance(source, (list, tuple)):
        questions = list(source)[:limit] if limit else list(source)
    else:
        from berds.questions import load_questions

        questions = load_questions(source, split, limit=limit)
    return topics_frame(questions)


def qrels(evaluation: Any) -> pd.DataFrame:
    """An evaluation folder (or its ``judgements.jsonl``) as PyTerrier subtopic qrels: ``qid, docno, label,
    iteration`` (iteration = the 1-based perspective), what ``MRecall`` / ``BERDS_P`` and ndeval's measures read."""
    from berds.evaluate.qrels import read_judgements

    rows, _ = read_judgements(evaluation, unjudged=True)  # (a question scored with no passage: one line)
    return pd.DataFrame([(q, d, r, s) for q, s, d, r in rows], columns=["qid", "docno", "label", "iteration"])


def _questions_of(frame: pd.DataFrame) -> list[Question]:
    """One ``Question`` per qid of a topics or ranking frame (its perspectives when the frame carries them)."""
    if "qid" not in frame.columns or "query" not in frame.columns:
        raise BerdsError(f"expected PyTerrier topics with qid and query columns, got {', '.join(map(str, frame.columns))}")
    first = frame.drop_duplicates("qid")
    perspectives = first["perspectives"].tolist() if "perspectives" in first.columns else [()] * len(first)
    return [Question(str(qid), str(query), tuple(p) if isinstance(p, (list, tuple)) else ())
            for qid, query, p in zip(first["qid"], first["query"], perspectives)]


def _ranking_frame(questions: Sequence[Question], hits: Sequence[Sequence[Hit]], *,
                   perspectives: bool = False) -> pd.DataFrame:
    """PyTerrier's ranking columns; ``perspectives`` carried on (as PyTerrier transformers keep query columns) when
    the input had them, so a reranker later in the pipeline that reads them finds them."""
    rows = [(q.id, q.text, h.passage.id, float(h.score), rank, h.passage.text, h.passage.title)
            for q, q_hits in zip(questions, hits) for rank, h in enumerate(q_hits)]  # PyTerrier ranks from 0
    frame = pd.DataFrame(rows, columns=RANKING_COLUMNS)
    if perspectives:
        by_id = {q.id: list(q.perspectives) for q in questions}
        frame["perspectives"] = [by_id[qid] for qid in frame["qid"]]
    return frame


class BerdsRetriever(pt.Transformer):
    """A berds retriever (a catalogue name, ``module:attr`` or an object) as a PyTerrier retriever."""

    def __init__(self, retriever: Any, *, k: int = 100, **options: Any):
        from berds.retrievers.registry import load_retriever

        if k < 1:
            raise BerdsError(f"k must be at least 1, got {k}")
        self.retriever, self.k = load_retriever(retriever, **options), int(k)

    def __repr__(self) -> str:
        return f"BerdsRetriever({getattr(self.retriever, 'name', '?')!r}, k={self.k})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        questions = _questions_of(inp)
        return _ranking_frame(questions, self.retriever.search(questions, k=self.k) if questions else [],
                              perspectives="perspectives" in inp.columns)


class BerdsReranker(pt.Transformer):
    """A berds reranker as a PyTerrier re-ranker: a ranking with ``text`` (and ``title``) in, reranked out.

    A ranking without ``text`` needs ``corpus=STORE`` (passages by docno). Perspectives, for rerankers that use
    them, come from a ``perspectives`` column (``topics()`` adds it)."""

    def __init__(self, reranker: Any, *, corpus: Any = None, **options: Any):
        from berds.rerank.catalogue import load_reranker

        self.reranker = load_reranker(reranker, **options)
        self.store = None
        if corpus is not None:
            from berds.indexes.base import open_store

            self.store = open_store(corpus)

    def __repr__(self) -> str:
        return f"BerdsReranker({getattr(self.reranker, 'name', '?')!r})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        missing = [c for c in ("qid", "query", "docno", "score") if c not in inp.columns]
        if missing:
            raise BerdsError(f"BerdsReranker needs a ranking with {', '.join(missing)} column(s)")
        if "text" not in inp.columns and self.store is None:
            raise BerdsError("the ranking has no 'text' column: give BerdsReranker(..., corpus=STORE) or add "
                             "pt.text.get_text before it")
        questions = _questions_of(inp)
        hits = []
        for q in questions:
            part = inp[inp["qid"].astype(str) == q.id]
            docnos = part["docno"].astype(str).tolist()
            if self.store is not None and "text" not in part.columns:
                passages = self.store.get_many(docnos)
            else:
                titles = part["title"].fillna("").astype(str).tolist() if "title" in part.columns else [""] * len(part)
                passages = [Passage(d, str(t), title=ti) for d, t, ti in zip(docnos, part["text"].tolist(), titles)]
            hits.append(rank_hits(Hit(p, float(s)) for p, s in zip(passages, part["score"].tolist())))
        reranked = self.reranker.rerank(Run.from_lists(questions, hits, name="pyterrier"))
        return _ranking_frame(questions, [reranked.hits[q.id] for q in questions],
                              perspectives="perspectives" in inp.columns)
