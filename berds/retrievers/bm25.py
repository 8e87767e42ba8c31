"""BM25 retriever: Lucene (pyserini's Anserini) over a ``berds index bm25`` index.

``BM25Retriever(index="indexes/wiki-bm25")`` searches the whole index with Lucene. When the index was
built from a store with groups (one small corpus per question, e.g. search-engine results), each question
is searched only within the group named by its id, scored exactly as a separate Lucene index of that
group would score it (see ``berds.indexes.bm25``). ``groups="off"`` searches the whole index instead.

``BM25Retriever(corpus="corpora/small")`` (no ``index``) builds a throw-away index in a temporary folder
first: handy for small corpora and the contract test; use ``berds index bm25`` for anything large.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError
from berds.indexes.base import corpus_record, index_meta_sha256, open_index_corpus, read_index_meta
from berds.indexes.bm25 import DEFAULT_B, DEFAULT_K1, GroupedBM25, build_bm25_index, open_lucene
from berds.retrievers.base import hits_from_store
from berds.types import Hit, Question

GROUP_MODES = ("auto", "on", "off")
SEARCH_BATCH = 1_000  # questions per Lucene batch_search: its thread pool needs many queries to keep every core busy


class BM25Retriever:
    """Lucene BM25 (k1=0.9, b=0.4 by default: the study's Pyserini settings).

    Options (keyword-only): ``index`` (a BM25 index folder) or ``corpus`` (a passage store to index on
    the fly), ``corpus`` with ``index`` to read texts from a moved store (fingerprint checked), ``k1``,
    ``b``, ``threads`` (Lucene search threads; default every core), ``groups`` (``auto``/``on``/``off``, see module docstring).
    """

    def __repr__(self) -> str:
        return f"BM25Retriever(name={self.name!r}, index={str(self.index)!r}, k1={self.k1}, b={self.b})"

    def __init__(
        self,
        *,
        index: str | Path | None = None,
        corpus: Any = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        threads: int | None = None,
        groups: str = "auto",
        name: str = "bm25",
        progress: bool = False,
    ):
        if groups not in GROUP_MODES:
            raise BerdsError(f"groups must be one of {', '.join(GROUP_MODES)}, got {groups!r}")
        if index is None and corpus is None:
            raise BerdsError("BM25 needs an index (--index DIR, built by `berds index bm25`) or a corpus (--corpus DIR)")
        self._tmp: str | None = None
        if index is None:
            self._tmp = tempfile.mkdtemp(prefix="berds-bm25-")
            weakref.finalize(self, shutil.rmtree, self._tmp, True)
            index = Path(self._tmp) / "index"
            build_bm25_index(corpus, index, progress=progress)
        self.index = Path(index)
        self.meta = read_index_meta(self.index, "bm25")
        self.store = open_index_corpus(self.meta, corpus, index_path=self.index)
        self.name = name
        self.search_batch_size = SEARCH_BATCH
        self.k1, self.b, self.threads = float(k1), float(b), int(threads or os.cpu_count() or 1)
        grouped = bool(self.meta.get("grouped"))
        if groups == "on" and not grouped:
            raise BerdsError(f"groups='on' but the corpus of {self.index} has no groups — use groups='auto' or 'off'")
        self.per_group = grouped and groups != "off"
        self._grouped = GroupedBM25(self.index, k1=self.k1, b=self.b) if self.per_group else None
        self._searcher = None if self.per_group else open_lucene(self.index, self.meta, k1=self.k1, b=self.b)

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        """Top-``k`` passages per question (see the class docstring for per-group search)."""
        if not questions:
            return []
        if self._grouped is not None:
            found = []
            for q in questions:
                if not self._grouped.has_group(q.id):
                    raise BerdsError(
                        f"question {q.id!r} has no group in the corpus of {self.index} (groups are question ids; "
                        f"{len(self._grouped.group_names)} groups) — use the questions this corpus was built for, "
                        "or pass --option groups=off to search the whole corpus"
                    )
                found.append(self._grouped.search(q.id, q.text, k))
        else:
            assert self._searcher is not None
            found = self._searcher.search([q.text for q in questions], k, threads=self.threads)
        return hits_from_store(self.store, found)

    def provenance(self) -> dict[str, Any]:
        from berds.java import jvm_info

        return {
            "index": None if self._tmp else str(self.index.resolve()),
            "index_type": "bm25",
            "index_meta_sha256": None if self._tmp else index_meta_sha256(self.index),
            "k1": self.k1,
            "b": self.b,
            "analyzer": self.meta.get("analyzer"),
            "contents": self.meta.get("contents"),
            "search": "per-group (exact Lucene BM25 within each question's group)" if self.per_group else "lucene",
            "corpus": corpus_record(self.store),
            "java": jvm_info(),
        }

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
