"""Dense retriever: encode questions, search a ``berds index dense`` index (FAISS) by inner product.

The query encoder is the one recorded in the index's ``meta.json`` — loaded without asking only when it is
a catalogue model without remote code (``index_encoder_spec``; a shared index must not pick code to run).
Naming one (``encoder="dpr"``, as
the ``dpr`` / ``contriever`` / ``nv-embed`` / ``minilm`` catalogue entries do) is a check: an index built
with anything else is refused rather than searched with vectors from another space.

For a store with groups (one small corpus per question) each question is scored exactly against its own
group's passages (``groups="auto"``), not the whole index. Without an ``index``, ``corpus=`` plus
``encoder=`` embeds a small store into a throw-away flat index first.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError
from berds.indexes.base import corpus_record, index_meta_sha256, open_index_corpus
from berds.indexes.encoders import (Encoder, EncoderSpec, check_same_encoder, encoder_spec, index_encoder_spec,
                                    model_files_fingerprint)
from berds.indexes.faiss import DenseIndex, build_dense_index
from berds.retrievers.base import hits_from_records, hits_from_store
from berds.types import Hit, Question

GROUP_MODES = ("auto", "on", "off")


class DenseRetriever:
    """Inner-product search over a dense index with the index's own encoder.

    Options (keyword-only): ``index`` (folder) or ``corpus`` (+ ``encoder``) for a throw-away index;
    ``encoder`` / ``encoder_options`` (checked against the index); ``device`` (``cpu``, ``cuda``: the
    query encoder and, with faiss-gpu, FAISS); ``dtype`` (``float16`` on GPU); ``batch_size`` (queries
    per encoder batch); ``ef_search`` (HNSW) and ``nprobe`` (IVF-PQ) search-time knobs; ``groups``;
    ``trust_remote_code`` for the encoder you name; ``trust_index_encoder`` loads whatever model the index records even when no catalogue entry names it
    (off: an index folder never chooses code or weights to load by itself, see ``index_encoder_spec``);
    ``verify_index=false`` skips the SHA-256 check of ``faiss.index`` when it is read (about 1.3 s per GB here).
    """

    def __repr__(self) -> str:
        return f"DenseRetriever(name={self.name!r}, index={str(self.index.path)!r}, encoder={self.spec.name!r})"

    def __init__(
        self,
        *,
        index: str | Path | None = None,
        corpus: Any = None,
        encoder: str | EncoderSpec | dict | None = None,
        encoder_options: dict[str, Any] | None = None,
        device: str = "cpu",
        dtype: str | None = None,
        batch_size: int = 32,
        ef_search: int | None = None,
        nprobe: int | None = None,
        groups: str = "auto",
        trust_index_encoder: bool = False,
        trust_remote_code: bool | None = None,
        verify_index: bool = True,
        name: str | None = None,
        progress: bool = False,
    ):
        if groups not in GROUP_MODES:
            raise BerdsError(f"groups must be one of {', '.join(GROUP_MODES)}, got {groups!r}")
        if trust_remote_code is not None:  # the user's own choice for the encoder they name
            if encoder is None:
                raise BerdsError("trust_remote_code applies to an encoder you name: add -o encoder=NAME "
                                 "(or -o trust_index_encoder=true to accept the index's recorded encoder)")
            encoder_options = {**(encoder_options or {}), "trust_remote_code": bool(trust_remote_code)}
        wanted = encoder_spec(encoder, **(encoder_options or {})) if encoder is not None else None
        self._tmp: str | None = None
        if index is None:
            if corpus is None:
                raise BerdsError("a dense retriever needs an index (--index DIR, built by `berds index dense`) or a corpus (--corpus DIR)")
            if wanted is None:
                raise BerdsError("to search a corpus without an index, name the encoder (encoder=... / --option encoder=NAME)")
            self._tmp = tempfile.mkdtemp(prefix="berds-dense-")
            weakref.finalize(self, shutil.rmtree, self._tmp, True)
            index = Path(self._tmp) / "index"
            build_dense_index(corpus, index, encoder=wanted, device=device, dtype=dtype, batch_size=batch_size,
                              keep_embeddings=True, progress=progress)
        self.index = DenseIndex(Path(index), device=device, ef_search=ef_search, nprobe=nprobe, verify=verify_index)
        if wanted is not None:
            check_same_encoder(self.index.encoder_identity, wanted, index_path=index)
        self.spec = wanted or index_encoder_spec(self.index.encoder_identity, index_path=index,
                                                 trusted=trust_index_encoder)
        built_with = (self.index.meta.get("encoder_files") or {}).get("model")
        if built_with and model_files_fingerprint(self.spec).get("model") != built_with:
            raise BerdsError(f"the files of the query model {self.spec.model!r} changed since index {index} was built "
                             "with it (its weights were replaced in that folder): its queries would not match the "
                             "index's vectors — rebuild the index (berds index dense ... --overwrite always) or "
                             "restore the model it was built with")
        self.store = open_index_corpus(self.index.meta, corpus, index_path=index)
        if groups == "on" and not self.index.grouped:
            raise BerdsError(f"groups='on' but the corpus of {index} has no groups — use groups='auto' or 'off'")
        self.per_group = self.index.grouped and groups != "off"
        # Read hits by record number when the index proves its rows are this store's records: built by berds in
        # store order (meta.json's row_order) from a store with the same fingerprint (checked just above) and size.
        from berds.corpora.docstore import PassageStore

        self._rows_are_records = (self.index.rows_are_store_records and isinstance(self.store, PassageStore)
                                  and len(self.store) == self.index.meta.get("rows"))
        self.index.open(per_group=self.per_group)  # a damaged index fails here, before the query encoder loads
        self.encoder = Encoder(self.spec, device=device, batch_size=batch_size, dtype=dtype)
        self.encoder.load_query_model()  # load now, so search timings measure search
        self.name = name or self.spec.name
        self.device = device
        # Questions per search() call in retrieve(): the encoder cuts its own batches of `batch_size`, so larger
        # calls only save per-call work (FAISS, the store, the contract check); each call is one resume unit.
        self.search_batch_size = 256

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        """Top-``k`` passages per question by inner product with the encoded question."""
        if not questions:
            return []
        vectors = self.encoder.encode_queries([q.text for q in questions])
        if self.per_group:
            found = []
            for q, v in zip(questions, vectors):
                if not self.index.has_group(q.id):
                    raise BerdsError(f"question {q.id!r} has no group in the corpus of {self.index.path} "
                                     "(groups are question ids) — pass --option groups=off to search the whole corpus")
                found.append(self.index.search_group(q.id, v, k))
        elif self._rows_are_records:
            found, rows = self.index.search_rows(vectors, k)
            return hits_from_records(self.store, found, rows, index_path=self.index.path)
        else:
            found = self.index.search(vectors, k)
        return hits_from_store(self.store, found)

    def provenance(self) -> dict[str, Any]:
        meta = self.index.meta
        return {
            "index": None if self._tmp else str(self.index.path.resolve()),
            "index_type": "dense",
            "index_meta_sha256": None if self._tmp else index_meta_sha256(self.index.path),
            "encoder": self.spec.identity(),
            "encoder_files": meta.get("encoder_files"),
            "faiss": meta.get("faiss_resolved", meta.get("faiss")),
            "ef_search": self.index.ef_search,
            "nprobe": self.index.nprobe,
            "device": self.device,
            "dtype": self.encoder.dtype,  # the query encoder's (None: float32)
            "index_dtype": meta.get("dtype"),
            "search": "per-group exact inner product" if self.per_group else "faiss",
            "corpus": corpus_record(self.store),
        }

    def close(self) -> None:
        self.encoder.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
