"""A PyTerrier pipeline as a berds retriever: ``berds retrieve -r pyterrier --option pipeline=MODULE:OBJECT``.

Any ``pt.Transformer`` that turns topics (``qid``, ``query``) into a ranking (``qid``, ``docno``, ``score``,
PyTerrier's column names) is a berds retriever. Its passages come from a berds passage store by docno
(``--corpus STORE``): a docno the store lacks is a one-line error naming the question and the docno. Without a
store, the ranking's own ``text`` (and ``title``) columns are the passages -- what ``pt.text.get_text`` adds.

``pipeline`` is a transformer, or ``"module:attr"`` naming one (or a function of no arguments that returns one).
The user names the module, so importing it is theirs to choose; berds imports nothing else. PyTerrier itself runs
a pure-Python transformer without Java; a pipeline with Terrier's own retrievers starts its JVM as PyTerrier does.
"""

from __future__ import annotations

from typing import Any, Sequence

from berds.errors import BerdsError, InputError
from berds.types import Hit, Passage, Question, rank_hits


def load_pipeline(pipeline: Any) -> tuple[Any, str]:
    """``(transformer, how it was named)`` from a ``pt.Transformer`` or a ``module:attr`` string."""
    from berds.lazy import require

    pt = require("pyterrier", extra="pyterrier", purpose="PyTerrier pipelines as retrievers")
    spec = pipeline if isinstance(pipeline, str) else None
    if spec is not None:
        from berds.registry import import_object

        if ":" not in spec:
            raise BerdsError(f"pipeline={spec!r}: expected MODULE:OBJECT naming a pt.Transformer "
                             "(e.g. my_pipelines:bm25_then_mono)")
        pipeline = import_object(spec)
        if not isinstance(pipeline, pt.Transformer) and callable(pipeline):  # a factory of no arguments
            pipeline = pipeline()
    if not isinstance(pipeline, pt.Transformer):
        raise BerdsError(f"pipeline {spec or repr(pipeline)[:80]} is a {type(pipeline).__name__}, not a "
                         "pt.Transformer (a PyTerrier transformer or pipeline that returns a ranking)")
    return pipeline, spec or f"{type(pipeline).__module__}:{type(pipeline).__qualname__}"


def topics_frame(questions: Sequence[Question]) -> Any:
    """PyTerrier topics: ``qid``, ``query`` (the question text), plus berds' ``perspectives``."""
    import pandas as pd

    return pd.DataFrame({"qid": [q.id for q in questions], "query": [q.text for q in questions],
                         "perspectives": [list(q.perspectives) for q in questions]})


class PyTerrierRetriever:
    """A ``pt.Transformer`` returning a ranking, as a berds retriever.

    Options (keyword-only): ``pipeline`` (a transformer or ``"module:attr"``), ``corpus`` (a passage store: passages
    by docno; without it the ranking's ``text``/``title`` columns), ``name`` (default ``pyterrier``),
    ``perspectives`` (pass the questions' perspectives as a topics column; default off, PyTerrier's topics are
    ``qid``/``query``).
    """

    search_batch_size = 64  # topics per transform call (the resume unit of `berds retrieve`)

    def __init__(self, *, pipeline: Any, corpus: Any = None, name: str = "pyterrier", perspectives: bool = False):
        self.pipeline, self.spec = load_pipeline(pipeline)
        self.store = None
        if corpus is not None:
            from berds.indexes.base import open_store

            self.store = open_store(corpus)
        self.name = name
        self.perspectives = bool(perspectives)

    def __repr__(self) -> str:
        return f"PyTerrierRetriever(name={self.name!r}, pipeline={self.spec!r})"

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        if not questions:
            return []
        topics = topics_frame(questions)
        if not self.perspectives:
            topics = topics[["qid", "query"]]
        ranking = self.pipeline.transform(topics)
        missing = [c for c in ("qid", "docno", "score") if c not in getattr(ranking, "columns", ())]
        if missing:
            raise BerdsError(f"pipeline {self.spec} returned no {', '.join(missing)} column(s) (got "
                             f"{', '.join(map(str, getattr(ranking, 'columns', []))) or type(ranking).__name__}) — a "
                             "retriever pipeline must return a ranking: qid, docno, score")
        if self.store is None and "text" not in ranking.columns:
            raise BerdsError(f"pipeline {self.spec} returns no 'text' column and no passage store was given — pass "
                             "--corpus STORE (passages looked up by docno) or end the pipeline with pt.text.get_text")
        per_question: dict[str, list[tuple[str, float, str, str]]] = {}
        texts = ranking["text"].tolist() if self.store is None else [""] * len(ranking)
        titles = ranking["title"].tolist() if self.store is None and "title" in ranking.columns else [""] * len(ranking)
        for qid, docno, score, text, title in zip(ranking["qid"].astype(str), ranking["docno"].astype(str),
                                                  ranking["score"].astype(float), texts, titles):
            per_question.setdefault(qid, []).append((docno, score, text, title))
        out = []
        for q in questions:
            rows = sorted(per_question.get(q.id, []), key=lambda r: (-r[1], r[0]))  # berds' order: score, then id
            seen: dict[str, tuple[str, float, str, str]] = {}
            for row in rows:
                seen.setdefault(row[0], row)  # a docno twice: its best score
            top = list(seen.values())[:k]
            out.append(self._hits(q, top))
        return out

    def _hits(self, question: Question, rows: list[tuple[str, float, str, str]]) -> list[Hit]:
        if self.store is None:
            return rank_hits(Hit(Passage(docno, str(text), title=str(title or "")), score)
                             for docno, score, text, title in rows)
        docnos = [r[0] for r in rows]
        absent = next((d for d in docnos if d not in self.store), None)
        if absent is not None:
            raise InputError(f"pipeline {self.spec} returned docno {absent!r} for question {question.id!r}, which the "
                             "passage store does not hold", path=getattr(self.store, "path", None),
                             fix="give the store the pipeline's index was built from (docno = berds passage id)")
        return rank_hits(Hit(p, score) for p, (_, score, _, _) in zip(self.store.get_many(docnos), rows))

    def provenance(self) -> dict[str, Any]:
        import pyterrier as pt

        described = repr(self.pipeline)
        info: dict[str, Any] = {"pipeline": self.spec, "pyterrier": pt.__version__,
                                # PyTerrier's transformers describe their settings; object.__repr__ (an address) not
                                **({"pipeline_repr": described[:500]} if " object at 0x" not in described else {}),
                                "passages": "passage store by docno" if self.store is not None else "ranking text"}
        if self.store is not None:
            from berds.indexes.base import corpus_record

            info["corpus"] = corpus_record(self.store)
        return info
