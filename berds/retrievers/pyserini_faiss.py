"""Search a pyserini FAISS index, prebuilt or your own: ``berds retrieve -r pyserini-faiss --index NAME|PATH``.

pyserini ships the study's Wikipedia corpus as dense FAISS indexes too (``wikipedia-dpr-100w.dpr-multi``,
``wikipedia-dpr-100w.dpr-single-nq``: DPR's 21M passages, flat inner product). ``--index`` takes

* a **prebuilt name** from pyserini's table (``pyserini.prebuilt_index_info.FAISS_INDEX_INFO``), resolved to the
  folder pyserini unpacks it into (``$PYSERINI_CACHE/indexes/<tarball name>.<md5>``, as for ``-r pyserini``);
  berds never downloads it;
* or the **path** of a folder laid out the way pyserini's are: ``index`` (a FAISS index, inner product) and
  ``docid`` (one passage id per line, in index order), as ``python -m pyserini.encode ... output --to-faiss`` and
  ``python -m pyserini.index.faiss`` write them.

Queries are encoded by the **query encoder** you name (``-o encoder=NAME_OR_PATH``, a hub name or a local folder),
the way pyserini's own query encoders do (``pyserini.search.faiss``'s ``--encoder`` / ``--encoder-class``):

* ``dpr``: ``DPRQuestionEncoder``, its pooled output (the [CLS] state); no query prefix;
* ``contriever``: ``AutoModel``, mean over the tokens, no normalisation;
* ``sentence``: mean pooling, L2-normalised;
* ``auto``: ``AutoModel`` with ``pooling`` (``cls``, pyserini's default, or ``mean``) and ``l2_norm``.

The class is, as in pyserini, the first of its class keywords found in the encoder's name (for a local folder:
its folder name, so a test folder's parents do not choose it), else ``auto``; ``-o encoder_class=`` names it.
For a prebuilt name the default encoder is the one pyserini's reproduction commands (``pyserini/2cr/*.yaml``) use
with that index, e.g. ``facebook/dpr-question_encoder-multiset-base`` for ``wikipedia-dpr-100w.dpr-multi``: a
hub name, which must already be in the local Hugging Face cache (or pass a local copy).

Passage texts: a FAISS index holds vectors only. They come from a **Lucene index's stored documents**
(``-o texts=NAME|PATH``; default, for a prebuilt name, the Lucene index pyserini pairs it with, its table's
``texts``: ``wikipedia-dpr-100w``), read as ``-r pyserini`` reads them (``title`` option), or from a **berds
passage store** (``--corpus``). A passage id of the FAISS index that the text source lacks stops the run.

Scores are FAISS's inner products, exactly what pyserini's ``FaissSearcher`` returns (``normalize_distances`` off).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError, InputError
from berds.retrievers.base import hits_from_store
from berds.types import Hit, Passage, Question

# pyserini's query-encoder classes in the order its search command tries their names as keywords of the encoder
# name (``pyserini.encode.query_encoder_class_map``); the first found wins, none found means ``auto``.
PYSERINI_ENCODER_KEYWORDS = ("dkrr", "cosdpr", "dpr", "bpr", "tct_colbert", "ance", "sentence", "contriever",
                             "aggretriever", "openai-api", "auto", "clip", "arctic", "uniir", "qwen3", "dse", "mmeb")
ENCODER_CLASSES = ("dpr", "contriever", "sentence", "auto")  # the ones berds reproduces
POOLINGS = ("cls", "mean")


def infer_encoder_class(encoder: str) -> str:
    """pyserini's rule: the first class keyword in the encoder's name, else ``auto``. For a local folder only its
    own name counts (``/tmp/test_dpr0/contriever`` is a Contriever)."""
    name = Path(encoder).name if os.path.isdir(os.path.expanduser(encoder)) else encoder
    return next((kw for kw in PYSERINI_ENCODER_KEYWORDS if kw in name.lower()), "auto")


def query_encoder_spec(encoder: str, encoder_class: str | None = None, *, pooling: str | None = None,
                       l2_norm: bool | None = None, query_prefix: str | None = None, max_length: int = 512) -> Any:
    """The ``EncoderSpec`` that encodes queries as pyserini's query encoder of ``encoder_class`` does."""
    from berds.indexes.encoders import EncoderSpec

    cls = encoder_class or infer_encoder_class(encoder)
    if cls not in ENCODER_CLASSES:
        raise BerdsError(f"pyserini's {cls!r} query encoder (chosen for {encoder!r}) is not one berds reproduces: "
                         f"-o encoder_class= takes {', '.join(ENCODER_CLASSES)} (DPR's [CLS] pooler, Contriever's "
                         "mean, sentence = mean + L2, auto = cls/mean pooling)")
    if pooling is not None and pooling not in POOLINGS:
        raise BerdsError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if cls != "auto" and (pooling is not None or l2_norm is not None):
        raise BerdsError(f"pooling / l2_norm apply to encoder_class=auto; pyserini's {cls!r} encoder fixes them")
    if cls == "dpr":
        if query_prefix:  # (pyserini's DPR query encoder takes no prefix; silently dropping it would mislead)
            raise BerdsError("pyserini's DPR query encoder takes no query_prefix")
        return EncoderSpec(name=f"pyserini-dpr:{encoder}", model=encoder, model_class="DPRQuestionEncoder",
                           pooling="pooler", max_length=max_length)
    mean, norm = {"contriever": (True, False), "sentence": (True, True)}.get(
        cls, ((pooling or "cls") == "mean", bool(l2_norm)))
    return EncoderSpec(name=f"pyserini-{cls}:{encoder}", model=encoder, pooling="mean" if mean else "cls",
                       normalize=norm, max_length=max_length,
                       # pyserini's auto encoders read f"{prefix} {query}"
                       query_prefix=f"{query_prefix} " if query_prefix else "")


def reproduction_encoder(name: str) -> dict[str, str] | None:
    """The query encoder pyserini's reproduction commands (``pyserini/2cr/*.yaml``) use with prebuilt index
    ``name``: ``{"encoder", "encoder_class"?, "from"}``, or None when they name none (or several)."""
    import pyserini

    found: dict[tuple[str, str | None], str] = {}
    for yaml in sorted((Path(pyserini.__file__).parent / "2cr").glob("*.yaml")):
        for line in yaml.read_text(encoding="utf-8").splitlines():
            if "pyserini.search.faiss" not in line or "--encoder " not in line:
                continue
            index = re.search(r"--index\s+(\S+)", line)
            encoder = re.search(r"--encoder\s+(\S+)", line)
            if not index or not encoder:
                continue
            # "${dataset}" in a template matches one name part; the encoder may use the same variables
            pattern = re.sub(r"\\\$\\\{(\w+)\\\}", r"(?P<\1>[\\w.-]+?)", re.escape(index.group(1)))
            matched = re.fullmatch(pattern, name)
            if not matched:
                continue
            model = re.sub(r"\$\{(\w+)\}", lambda v: matched.groupdict().get(v.group(1), v.group(0)),
                           encoder.group(1).strip("'\""))
            if "${" in model or "--query-prefix" in line or "--pooling" in line or "--l2-norm" in line:
                continue  # (not an encoder berds can name without pyserini's other settings)
            cls = re.search(r"--encoder-class\s+(\S+)", line)
            found.setdefault((model, cls.group(1) if cls else None), f"pyserini/2cr/{yaml.name}")
    if len(found) != 1:
        return None
    [((model, cls), where)] = found.items()
    return {"encoder": model, **({"encoder_class": cls} if cls else {}), "from": where}


def resolve_faiss_index(index: str | os.PathLike) -> tuple[Path, dict[str, Any] | None]:
    """``(FAISS folder, prebuilt record or None)`` for a path or a prebuilt name from pyserini's table."""
    import difflib

    from berds.retrievers.pyserini_index import downloaded_prebuilt, folder_or_name, pyserini_tables

    folder, name = folder_or_name(index, fix="pass a folder holding pyserini's 'index' and 'docid' files, or a "
                                             "pyserini prebuilt FAISS index name (e.g. wikipedia-dpr-100w.dpr-multi)")
    if folder is not None:
        return folder, None
    tables = pyserini_tables()
    entry = tables["faiss"].get(name)
    if entry is None:
        if name in tables["lucene"]:
            raise BerdsError(f"pyserini's {name!r} is a BM25 (Lucene) index: search it with -r pyserini")
        if name in tables["dense"] or name in tables["impact"]:
            raise BerdsError(f"pyserini's {name!r} is a Lucene {'impact' if name in tables['impact'] else 'dense'} "
                             "index, not a FAISS one; -r pyserini-faiss searches FAISS indexes such as "
                             "wikipedia-dpr-100w.dpr-multi")
        close = difflib.get_close_matches(name, list(tables["faiss"]), n=3, cutoff=0.6)
        raise BerdsError(f"{name!r} is neither an index folder nor a FAISS index in pyserini's table"
                         + (f" — did you mean {', '.join(map(repr, close))}?" if close else
                            " (python -c 'from pyserini.util import get_dense_indexes_info as i; i()' lists them)"))
    return downloaded_prebuilt(name, entry, what="FAISS index", extra={"texts": entry.get("texts")},
                               fetch=f"python -c \"from pyserini.util import download_prebuilt_index as d; d('{name}')\"")


def read_docids(path: Path) -> list[str]:
    """pyserini's ``docid`` file: one id per line, trailing whitespace dropped (``FaissSearcher.load_docids``)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip() for line in f]
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path=path, fix="a docid file has one passage id per line"
                         ) from None


class LuceneTexts:
    """Passage texts from a Lucene index's stored raw documents (a prebuilt name or a folder)."""

    def __init__(self, index: str | os.PathLike, *, title: str = "auto"):
        from berds.java import start_jvm
        from berds.retrievers.pyserini_index import TITLE_MODES, resolve_index

        if title not in TITLE_MODES:
            raise BerdsError(f"title must be one of {', '.join(TITLE_MODES)}, got {title!r}")
        self.folder, self.prebuilt = resolve_index(index)
        if not any(self.folder.glob("segments_*")):
            raise InputError("is not a Lucene index (no segments_* file)", path=self.folder,
                             fix="-o texts= takes the Lucene index that stores the passages (e.g. wikipedia-dpr-100w)")
        from berds.indexes.bm25 import LuceneSearcher

        start_jvm()
        self.title = title
        self._searcher = LuceneSearcher(self.folder)

    def describe(self) -> str:
        return f"the Lucene index {(self.prebuilt or {}).get('name') or self.folder}"

    def get_many(self, ids: Sequence[str]) -> list[Passage]:
        from berds.retrievers.pyserini_index import passage_from_raw

        java = self._searcher._searcher  # Anserini's SimpleSearcher
        out = []
        for docid in ids:
            raw = java.doc_raw(docid)
            if raw is None and java.doc(docid) is None:
                raise KeyError(docid)
            out.append(passage_from_raw(docid, raw, title=self.title))
        return out

    def record(self) -> dict[str, Any]:
        return {"kind": "lucene stored documents", "index": str(self.folder.resolve()), "prebuilt": self.prebuilt,
                "documents": self._searcher.num_docs, "title": self.title}

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None


class StoreTexts:
    """Passage texts from a berds passage store."""

    def __init__(self, corpus: Any):
        from berds.corpora.docstore import PassageStore

        self.store = corpus if hasattr(corpus, "get_many") else PassageStore.open(corpus)

    def describe(self) -> str:
        return f"the passage store {self.store.path}"

    def get_many(self, ids: Sequence[str]) -> list[Passage]:
        from berds.corpora.docstore import PassageNotFoundError

        try:
            return self.store.get_many(list(ids))
        except PassageNotFoundError:  # (the error path only: find which id, one at a time)
            raise KeyError(next((i for i in ids if not _has(self.store, i)), ids[0])) from None

    def record(self) -> dict[str, Any]:
        from berds.indexes.base import corpus_record

        return {"kind": "berds passage store", **corpus_record(self.store)}

    def close(self) -> None:
        pass


def _has(store: Any, pid: str) -> bool:
    from berds.corpora.docstore import PassageNotFoundError

    try:
        store.get_many([pid])
        return True
    except PassageNotFoundError:
        return False


class PyseriniFaissRetriever:
    """Inner-product search over a pyserini FAISS index (prebuilt name or path), queries encoded as pyserini's query
    encoders do, passages from a Lucene index's stored documents or a berds store.

    Options (keyword-only): ``index`` (name or path); ``encoder`` (hub name or local folder; default for a prebuilt
    name: pyserini's reproduction commands'), ``encoder_class`` (``dpr`` / ``contriever`` / ``sentence`` /
    ``auto``; default from the encoder's name, as pyserini), ``pooling`` / ``l2_norm`` (``auto`` only),
    ``query_prefix``; ``texts`` (Lucene index name or folder; default pyserini's pairing) or ``corpus`` (berds
    store); ``title`` (as ``-r pyserini``); ``device``, ``batch_size``, ``threads`` (FAISS), ``ef_search`` (an HNSW
    index's search depth, as pyserini's ``set_hnsw_ef_search``); ``name``."""

    search_batch_size = 256

    def __init__(self, *, index: str | os.PathLike, encoder: str | None = None, encoder_class: str | None = None,
                 pooling: str | None = None, l2_norm: bool | None = None, query_prefix: str | None = None,
                 texts: str | os.PathLike | None = None, corpus: Any = None, title: str = "auto",
                 device: str = "cpu", batch_size: int = 32, threads: int | None = None,
                 ef_search: int | None = None, name: str = "pyserini-faiss"):
        from berds.lazy import require

        if texts is not None and corpus is not None:
            raise BerdsError("give the passage texts one way: -o texts=LUCENE_INDEX or --corpus STORE, not both")
        self.folder, self.prebuilt = resolve_faiss_index(index)
        self.name, self.device = name, device
        # -- the query encoder: the user's, else the one pyserini's reproduction commands use with this index
        self.encoder_default_from = None
        if encoder is None:
            suggested = reproduction_encoder(self.prebuilt["name"]) if self.prebuilt else None
            if suggested is None:
                raise BerdsError(f"name the query encoder that matches the index {index} (-o encoder=HUB_NAME_OR_PATH, "
                                 "e.g. facebook/dpr-question_encoder-multiset-base): "
                                 + ("pyserini's reproduction commands name none for it" if self.prebuilt
                                    else "a folder does not say which model encoded it"))
            encoder, self.encoder_default_from = suggested["encoder"], suggested["from"]
            encoder_class = encoder_class or suggested.get("encoder_class")
            import sys

            print(f"note: query encoder {encoder}, the one {suggested['from']} (pyserini's reproduction "
                  f"commands) uses with {self.prebuilt['name']} (-o encoder= to choose another)", file=sys.stderr)
        self.encoder_name = str(encoder)
        self.encoder_class = encoder_class or infer_encoder_class(self.encoder_name)
        self.spec = query_encoder_spec(self.encoder_name, self.encoder_class, pooling=pooling, l2_norm=l2_norm,
                                       query_prefix=query_prefix)
        # -- the FAISS index and its docids (checked before any model or text source loads)
        for part in ("index", "docid"):
            if not (self.folder / part).is_file():
                raise InputError(f"has no '{part}' file", path=self.folder,
                                 fix="a pyserini FAISS index folder holds 'index' (FAISS) and 'docid' (one id per "
                                 "line), as python -m pyserini.encode ... --to-faiss writes them")
        faiss = require("faiss", extra="dense", purpose="pyserini FAISS indexes")
        try:
            self.index = faiss.read_index(str(self.folder / "index"))
        except RuntimeError as exc:
            raise InputError(f"is not a FAISS index faiss can read ({str(exc).strip().splitlines()[-1][:160]})",
                             path=self.folder / "index", fix="pyserini's binary (BPR) indexes are not supported; "
                             "pass a float FAISS index") from None
        if self.index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise InputError("is not an inner-product FAISS index (berds ranks by inner product, as pyserini's "
                             "prebuilt indexes do)", path=self.folder / "index")
        self.docids = read_docids(self.folder / "docid")
        if len(self.docids) != self.index.ntotal:
            raise InputError(f"has {len(self.docids):,} ids but the FAISS index beside it holds {self.index.ntotal:,} "
                             "vectors", path=self.folder / "docid",
                             fix="the docid file must list one id per vector, in index order (rebuild the index)")
        self.threads = int(threads) if threads else None
        self.ef_search = None
        if ef_search is not None:  # (pyserini's FaissSearcher.set_hnsw_ef_search)
            if not hasattr(self.index, "hnsw"):
                raise BerdsError(f"ef_search applies to HNSW indexes; {self.folder / 'index'} is a "
                                 f"{type(self.index).__name__}")
            self.index.hnsw.efSearch = self.ef_search = int(ef_search)
        # -- the passage texts
        if corpus is not None:
            self.texts: Any = StoreTexts(corpus)
        else:
            if texts is None:
                texts = (self.prebuilt or {}).get("texts")
                if not texts:
                    raise BerdsError(f"say where the passage texts of {index} are: -o texts=LUCENE_INDEX (a prebuilt "
                                     "name such as wikipedia-dpr-100w, or a folder) or --corpus STORE")
            self.texts = LuceneTexts(texts, title=title)
        # -- the encoder (last: the slowest step, after every check that can refuse)
        from berds.indexes.encoders import Encoder

        self.encoder = Encoder(self.spec, device=device, batch_size=batch_size)
        self.encoder.load_query_model()

    def __repr__(self) -> str:
        return (f"PyseriniFaissRetriever(index={str(self.folder)!r}, prebuilt={(self.prebuilt or {}).get('name')!r}, "
                f"encoder={self.encoder_name!r})")

    def encode(self, questions: Sequence[Question]) -> Any:
        """The questions' query vectors (float32, one row each)."""
        vectors = self.encoder.encode_queries([q.text for q in questions])
        if vectors.shape[1] != self.index.d:
            raise BerdsError(f"the query encoder {self.encoder_name!r} gives {vectors.shape[1]}-d vectors but the "
                             f"index {self.folder} holds {self.index.d}-d ones: it was built with another encoder "
                             "(-o encoder=)")
        return vectors

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        if not questions:
            return []
        return self.search_vectors(self.encode(questions), k=k)

    def search_vectors(self, vectors: Any, *, k: int) -> list[list[Hit]]:
        """Top-``k`` hits for query vectors (rows), as pyserini's ``FaissSearcher.batch_search`` finds them."""
        import faiss
        import numpy as np

        if self.threads:
            faiss.omp_set_num_threads(self.threads)
        scores, rows = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), int(k))
        found = [[(self.docids[i], float(s)) for s, i in zip(srow, irow) if i != -1]
                 for srow, irow in zip(scores.tolist(), rows.tolist())]
        try:  # (ranked as the contract has it: FAISS leaves equal scores in row order, the contract by passage id)
            return hits_from_store(self.texts, found)
        except KeyError as exc:
            raise BerdsError(f"passage {exc.args[0]!r} of the FAISS index {self.folder} is not in "
                             f"{self.texts.describe()}: the texts must come from the corpus the index was built "
                             "from (-o texts= / --corpus)") from None

    def provenance(self) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        import faiss

        from berds.indexes.encoders import model_files_fingerprint

        try:
            pyserini_version = version("pyserini")
        except PackageNotFoundError:  # pragma: no cover - pyserini is needed to resolve names, not paths
            pyserini_version = None
        texts = self.texts.record()
        return {"index": str(self.folder.resolve()), "index_type": "pyserini-faiss", "prebuilt": self.prebuilt,
                "pyserini": pyserini_version, "faiss": faiss.__version__, "documents": int(self.index.ntotal),
                "dim": int(self.index.d), "faiss_index": type(self.index).__name__, "ef_search": self.ef_search,
                "query_encoder": {"encoder": self.encoder_name, "encoder_class": self.encoder_class,
                                  "default_from": self.encoder_default_from, "spec": self.spec.identity(),
                                  "files": model_files_fingerprint(self.spec)},
                "texts": texts, **({"corpus": {k: v for k, v in texts.items() if k != "kind"}}
                                   if isinstance(self.texts, StoreTexts) else {})}

    def close(self) -> None:
        self.encoder.close()
        self.texts.close()
