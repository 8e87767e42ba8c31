"""Dense indexes: corpus embeddings streamed to disk in shards, then a FAISS index over them.

**Index folder** (``berds index dense CORPUS --encoder NAME --out DIR``)::

    meta.json              type "dense", corpus path + fingerprint, encoder spec (identity), dim, FAISS settings
    embeddings/            shard-00000.npy ... (float32 [rows, dim]) + shard-00000.ids.txt, one per shard
    faiss.index            the FAISS index (rows in store order)
    docids.txt             row -> passage id
    row-groups.npy         only for stores with groups: the group number of each row
    group-names.json

**Memory stays flat while embedding**: passages stream from the store in batches, and only the current
shard's vectors are held (``shard_size`` rows; each shard written atomically). **Resume by shard**: an
interrupted build, started again with the same settings, skips the shards already on disk.

**FAISS** (``faiss=``): ``flat`` (exact inner product; the default, what the study's runs use), ``hnsw``
(``IndexHNSWFlat``: graph search; options ``hnsw_m``, ``ef_construction``, ``ef_search``), ``ivfpq``
(``IndexIVFPQ``: inverted lists + product quantisation, for corpora too big for memory; options
``nlist``, ``pq_m``, ``pq_bits``, ``nprobe``; trained on a deterministic sample of the shards). With
``device="cuda"`` and faiss-gpu installed, flat and IVF-PQ are built and searched on the GPU through
the same code (the index is moved with ``index_cpu_to_gpu``); HNSW has no GPU version and stays on CPU.

**Per-question corpora** (a store with groups): each question is searched exactly (inner product)
against its own group's rows, read from the kept embedding shards — no per-question FAISS files.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from berds.errors import BerdsError, InputError
from berds.indexes.base import (
    corpus_record,
    damaged_index,
    finish_index_folder,
    open_store,
    prepare_index_folder,
    IdTable,
    read_ids,
    read_index_meta,
    releases_on_failure,
    rebuild_command,
    write_ids,
)
from berds.indexes.embedding import ShardedEmbeddings, embed_corpus, embed_corpus_on_engine
from berds.indexes.encoders import Encoder, EncoderSpec, encoder_spec, model_files_fingerprint
from berds.io import atomic_write, read_json, refused_write, sha256_file, write_json
from berds.lazy import require

FAISS_KINDS = ("flat", "hnsw", "ivfpq")
EMBEDDINGS_DIR = "embeddings"
FAISS_FILE = "faiss.index"


@dataclass(frozen=True)
class FaissSettings:
    """How the FAISS index is built and searched. ``None`` sizes are chosen from the corpus size.

    * ``hnsw_m`` links per node, ``ef_construction`` / ``ef_search`` candidate list sizes (HNSW);
    * ``nlist`` inverted lists (default ``4 * sqrt(n)``, at most ``n / 39``), ``pq_m`` sub-quantisers
      (default ``dim / 8`` rounded to a divisor of ``dim``), ``pq_bits`` bits per code, ``nprobe``
      lists visited per query (IVF-PQ); ``train_size`` training rows (default ``max(64 * nlist, 2**pq_bits * 64)``).
    """

    kind: str = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 256
    nlist: int | None = None
    pq_m: int | None = None
    pq_bits: int = 8
    nprobe: int = 32
    train_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAISS_KINDS:
            raise BerdsError(f"faiss must be one of {', '.join(FAISS_KINDS)}, got {self.kind!r}")
        # FAISS aborts the whole process (C++ assertion) on a zero or negative size, so check here.
        for name in ("hnsw_m", "ef_construction", "ef_search", "nlist", "pq_m", "pq_bits", "nprobe", "train_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise BerdsError(f"FAISS option {name} must be a positive integer, got {value!r} "
                                 f"(--faiss-option {name}=N)")


# The FaissSettings fields each kind uses (a summary shows only these).
FAISS_KIND_SETTINGS = {"flat": (), "hnsw": ("hnsw_m", "ef_construction", "ef_search"),
                       "ivfpq": ("nlist", "pq_m", "pq_bits", "nprobe", "train_size", "seed")}


def faiss_settings(kind: str | FaissSettings = "flat", **options: Any) -> FaissSettings:
    if isinstance(kind, FaissSettings):
        return FaissSettings(**{**asdict(kind), **options})
    known = set(FaissSettings.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise BerdsError(f"unknown FAISS option(s) {', '.join(unknown)}; known: {', '.join(sorted(known - {'kind'}))}")
    return FaissSettings(kind=kind, **options)


# ------------------------------------------------------------------------------------------ FAISS


def _faiss() -> Any:
    return require("faiss", extra="dense", purpose="dense indexes")


def gpu_available() -> bool:
    faiss = _faiss()
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


_GPU_RESOURCES: dict[int, Any] = {}


def _to_device(index: Any, device: str) -> Any:
    """Move an index to the GPU when ``device`` is ``cuda[:N]`` (and it can live there); else unchanged."""
    if not device.startswith("cuda"):
        return index
    faiss = _faiss()
    if not gpu_available():
        raise BerdsError(f"device {device!r} asked for, but this FAISS has no GPU support — pip install 'berds[gpu]' "
                         "(faiss-gpu) or ask for device cpu (--device cpu)")
    if isinstance(index, faiss.IndexHNSW):
        return index  # FAISS has no GPU HNSW: same index, searched on CPU
    gpu_id = int(device.split(":")[1]) if ":" in device else 0
    if gpu_id not in _GPU_RESOURCES:  # one resource pool per GPU, alive as long as the process
        _GPU_RESOURCES[gpu_id] = faiss.StandardGpuResources()
    options = faiss.GpuClonerOptions()
    # GPU IVF-PQ with many sub-quantisers (e.g. 96 for 768-d) needs float16 lookup tables; flat stays float32.
    options.useFloat16 = isinstance(index, faiss.IndexIVFPQ)
    return faiss.index_cpu_to_gpu(_GPU_RESOURCES[gpu_id], gpu_id, index, options)


def _to_cpu(index: Any) -> Any:
    faiss = _faiss()
    return faiss.index_gpu_to_cpu(index) if hasattr(faiss, "index_gpu_to_cpu") and "Gpu" in type(index).__name__ else index


def default_pq_m(dim: int) -> int:
    """``dim / 8`` sub-quantisers, lowered to the nearest divisor of ``dim``."""
    m = max(1, dim // 8)
    while dim % m:
        m -= 1
    return m


def resolve_sizes(settings: FaissSettings, n: int, dim: int) -> FaissSettings:
    """Fill in the corpus-dependent sizes of ``settings`` for ``n`` vectors of ``dim``."""
    if settings.kind != "ivfpq":
        return settings
    nlist = settings.nlist or max(1, min(int(4 * math.sqrt(n)), n // 39 or 1))
    pq_m = settings.pq_m or default_pq_m(dim)
    if dim % pq_m:
        raise BerdsError(f"pq_m={pq_m} must divide the embedding dimension {dim}")
    train = settings.train_size or max(64 * nlist, 64 * 2**settings.pq_bits)
    return FaissSettings(**{**asdict(settings), "nlist": nlist, "pq_m": pq_m, "train_size": min(train, n)})


def check_faiss_fits(settings: FaissSettings, n: int, dim: int | None) -> None:
    """Refuse IVF-PQ sizes that ``n`` vectors cannot train, before any passage is embedded (FAISS refused them
    only after the whole corpus was encoded, with a C++ assertion, and shards made under other settings are not
    reused). ``dim`` None (an encoder that does not declare it) skips the ``pq_m`` check."""
    if settings.kind != "ivfpq":
        return
    resolved = resolve_sizes(settings, n, dim or 8 * (settings.pq_m or 1))  # (pq_m is checked below, with the real dim)
    train, centroids = resolved.train_size, 2 ** settings.pq_bits
    flag = "--faiss-option"
    if resolved.nlist > train:
        raise InputError(f"IVF-PQ with nlist={resolved.nlist} needs at least {resolved.nlist} training vectors, but "
                         f"{'the store has' if train == n else 'train_size is'} {train}",
                         fix=f"lower nlist ({flag} nlist=N, N <= {train}) or leave it to its default")
    if centroids > train:
        raise InputError(f"IVF-PQ with pq_bits={settings.pq_bits} trains {centroids} centroids per sub-quantiser and needs "
                         f"at least {centroids} training vectors, but {'the store has' if train == n else 'train_size is'} {train}",
                         fix=f"use --faiss flat (exact; a store of {n:,} passages needs no compression) or {flag} "
                             f"pq_bits={max(1, int(math.log2(train)))}")
    if dim and settings.pq_m and dim % settings.pq_m:
        raise InputError(f"pq_m={settings.pq_m} must divide the embedding dimension {dim}", fix=f"{flag} pq_m=N with N dividing {dim}")


def new_faiss_index(settings: FaissSettings, dim: int) -> Any:
    """An empty (untrained) FAISS index for inner-product search."""
    faiss = _faiss()
    if settings.kind == "flat":
        return faiss.IndexFlatIP(dim)
    if settings.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings.ef_construction
        index.hnsw.efSearch = settings.ef_search
        return index
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, settings.nlist, settings.pq_m, settings.pq_bits, faiss.METRIC_INNER_PRODUCT)
    index.nprobe = settings.nprobe  # (FAISS's Python wrapper keeps the quantizer alive with the index)
    return index


def build_faiss(chunks: Any, n: int, dim: int, settings: FaissSettings, *, device: str = "cpu",
                training_sample: np.ndarray | None = None) -> Any:
    """A FAISS index over ``n`` vectors given as an iterable of float32 ``[rows, dim]`` chunks (in order).

    IVF-PQ is trained on ``training_sample`` first. Returns a CPU index (moved back from the GPU).
    """
    settings = resolve_sizes(settings, n, dim)
    index = _to_device(new_faiss_index(settings, dim), device)
    if settings.kind == "ivfpq":
        check_faiss_fits(settings, n if training_sample is None else len(training_sample), dim)
        index.train(np.ascontiguousarray(training_sample, dtype=np.float32))
    for chunk in chunks:
        index.add(np.ascontiguousarray(chunk, dtype=np.float32))
    if index.ntotal != n:
        raise BerdsError(f"FAISS holds {index.ntotal} vectors, expected {n}")
    return _to_cpu(index)


def write_faiss(index: Any, path: Path) -> tuple[int, str]:
    """Write an index atomically (FAISS writes to a temporary name, then it is renamed); returns its size in bytes
    and the SHA-256 of its bytes (recorded in ``meta.json``; ``read_faiss`` checks both)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            _faiss().write_index(index, str(tmp))
        except RuntimeError as exc:  # FAISS's "write error in ...: N != M (No space left on device)"
            raise refused_write(exc, path, written=tmp) or exc from None
        size = tmp.stat().st_size
        digest = sha256_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size, digest


def read_faiss(path: Path, *, folder: Path, meta: dict[str, Any]) -> Any:
    """Read ``faiss.index`` and check it against ``meta.json`` (size, SHA-256, vector count, dimension): a damaged
    file is an error naming it and the rebuild command, never a FAISS traceback or wrong results.

    The SHA-256 is computed on a second thread while FAISS reads the file (both read it once from the page cache),
    so the check costs little more than the read: ``docs/reliability.md`` gives the timing. Indexes built before
    berds recorded it (no ``faiss_sha256``) are checked by size only."""
    if not path.is_file():
        raise damaged_index(path, "file is missing", folder=folder, meta=meta)
    want_bytes = meta.get("faiss_bytes")
    have_bytes = path.stat().st_size
    if want_bytes is not None and have_bytes != want_bytes:
        raise damaged_index(path, f"{have_bytes:,} bytes, meta.json records {want_bytes:,}", folder=folder, meta=meta)
    want_digest = meta.get("faiss_sha256")
    hashing = None
    if want_digest is not None:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(1, thread_name_prefix="berds-faiss-sha256")
        hashing = pool.submit(sha256_file, path)
        pool.shutdown(wait=False)
    try:
        index = _faiss().read_index(str(path))
    except (RuntimeError, MemoryError, ValueError) as exc:  # FAISS reports a bad file as RuntimeError
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise damaged_index(path, f"FAISS cannot read it: {first[:200]}", folder=folder, meta=meta) from None
    if hashing is not None and hashing.result() != want_digest:
        raise damaged_index(path, "its SHA-256 is not the one meta.json recorded when it was built (its vectors "
                                  "were changed on disk)", folder=folder, meta=meta)
    if index.ntotal != meta.get("rows", index.ntotal) or index.d != meta.get("dim", index.d):
        raise damaged_index(path, f"holds {index.ntotal} vectors of {index.d}-d, meta.json records "
                                  f"{meta.get('rows')} of {meta.get('dim')}-d", folder=folder, meta=meta)
    return index


# ------------------------------------------------------------------------------------------ building


def _check_store_before_encoding(store: Any, emb_dir: Path) -> None:
    """Read the whole store once, checking every record (its CRC-32; a format-2 store: the fingerprint), before any
    passage is encoded: ~1.4 µs a passage (format 2: 3-4; about half a minute for 21M) against hours of encoding
    before a damaged record at the end is reached. Found damage also deletes the shards of an earlier try (a store
    rebuilt from its source has the same fingerprint: they must not be resumed from)."""
    from berds.corpora.docstore import PassageStore, StoreDamagedError

    if not isinstance(store, PassageStore):
        return
    try:
        for _ in store.iter_utf8_batches(8192, verify=True):
            pass
    except StoreDamagedError:
        for path in emb_dir.glob("shard-*"):
            path.unlink(missing_ok=True)
        raise


@releases_on_failure
def build_dense_index(
    corpus: Any,
    out: str | os.PathLike,
    *,
    encoder: str | EncoderSpec,
    encoder_options: dict[str, Any] | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    batch_size: int = 32,
    shard_size: int = 25_000,
    faiss: str | FaissSettings = "flat",
    faiss_options: dict[str, Any] | None = None,
    keep_embeddings: bool | None = None,
    overwrite: str = "missing",
    progress: bool = True,
    engine: Any = None,
) -> dict[str, Any]:
    """Embed a passage store with ``encoder`` and build a FAISS index in ``out``; returns ``meta.json``
    (plus ``"kept": True`` when an identical finished index was already there and nothing was built).

    ``keep_embeddings`` keeps the shard files after FAISS is built (default: only for stores with
    groups, whose per-question search reads them; a flat FAISS index holds the same vectors anyway).
    ``engine`` (``"ray"`` or a ``berds.engine`` Engine) encodes the shards on its workers; the shard
    files, and so the index, are the same as without it.
    """
    store = open_store(corpus)
    spec = encoder_spec(encoder, **(encoder_options or {}))
    fsettings = faiss_settings(faiss, **(faiss_options or {}))
    if shard_size < 1:
        raise BerdsError(f"shard_size must be at least 1, got {shard_size}")
    if len(store) == 0:
        raise InputError("the passage store is empty: nothing to index", path=getattr(store, "path", None))
    check_faiss_fits(fsettings, len(store), spec.dim)
    if engine is None or engine == "local":  # before any folder or progress bar (workers check their own device)
        from berds.lazy import check_device

        check_device(device)
    grouped = bool(store.groups())
    keep = grouped if keep_embeddings is None else keep_embeddings
    settings = {"type": "dense", "corpus_fingerprint": store.fingerprint, "encoder": spec.identity(),
                "shard_size": shard_size, "faiss": asdict(fsettings)}
    settings["dtype"] = dtype  # half-precision weights give other vectors: never resumed or kept as float32 ones
    files = {key: fp for key, fp in model_files_fingerprint(spec).items() if fp}
    if files:  # local model folders: their contents, so weights changed in place are not mixed with old shards
        settings["encoder_files"] = files
    out = Path(out)
    # (the FAISS index is built afresh from the shards on every run: shards embedded under other FAISS settings are kept)
    if not prepare_index_folder(out, settings, overwrite=overwrite, redone=("faiss",)):
        return {**read_index_meta(out, "dense"), "kept": True}  # (not in the file: says nothing was built)
    emb_dir = out / EMBEDDINGS_DIR
    _check_store_before_encoding(store, emb_dir)
    if engine is not None and engine != "local":  # shards encoded by an execution engine's workers
        stats = embed_corpus_on_engine(engine, store, spec, emb_dir, shard_size=shard_size, device=device,
                                       batch_size=batch_size, dtype=dtype, progress=progress)
    else:
        encoder_ = Encoder(spec, device=device, batch_size=batch_size, dtype=dtype)
        stats = embed_corpus(store, encoder_, emb_dir, shard_size=shard_size, progress=progress)
        encoder_.close()
    embeddings = ShardedEmbeddings(emb_dir, len(store), shard_size, dim=stats["dim"])
    write_ids(out / "docids.txt", embeddings.ids())  # streamed shard by shard
    if grouped:
        from berds.indexes.bm25 import _row_groups  # same row -> group mapping as BM25 indexes

        row_groups, names = _row_groups(store, read_ids(out / "docids.txt"))
        with atomic_write(out / "row-groups.npy", "wb", encoding=None) as f:
            np.save(f, row_groups, allow_pickle=False)
        write_json(out / "group-names.json", names)
    resolved = resolve_sizes(fsettings, len(store), stats["dim"])
    started = time.perf_counter()
    sample = embeddings.sample(resolved.train_size, resolved.seed) if resolved.kind == "ivfpq" else None
    index = build_faiss(iter(embeddings), len(store), stats["dim"], resolved, device=device, training_sample=sample)
    faiss_bytes, faiss_sha256 = write_faiss(index, out / FAISS_FILE)
    faiss_seconds = time.perf_counter() - started
    if not keep:
        shutil.rmtree(emb_dir)
    return finish_index_folder(
        out, "dense", **settings,
        faiss_resolved=asdict(resolved),
        corpus=corpus_record(store),
        dim=stats["dim"],
        rows=len(store),
        row_order="store records",  # row i holds record i of the store (shards are encoded in store order)
        grouped=grouped,
        embeddings_kept=keep,
        encoded_now=stats["encoded"],  # passages encoded by this call (fewer when it resumed)
        embed_seconds=round(stats["seconds"], 3),
        passages_per_second=round(stats["encoded"] / stats["seconds"], 2) if stats["encoded"] and stats["seconds"] > 0 else None,
        faiss_seconds=round(faiss_seconds, 3),
        faiss_bytes=faiss_bytes,  # checked when the index is opened (a truncated copy is caught)
        faiss_sha256=faiss_sha256,  # checked when it is read (a changed byte is caught)
        device=device,
    )


# ------------------------------------------------------------------------------------------ search


@dataclass
class DenseIndex:
    """A finished dense index opened for search: ``search(vectors, k)`` and ``search_group(...)``."""

    path: Path
    device: str = "cpu"
    ef_search: int | None = None
    nprobe: int | None = None
    verify: bool = True  # check faiss.index's SHA-256 when it is read
    meta: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.meta = read_index_meta(self.path, "dense")
        self.encoder_identity: dict[str, Any] = self.meta["encoder"]
        self.ids = IdTable(self.path / "docids.txt")
        if "rows" in self.meta and len(self.ids) != self.meta["rows"]:
            raise damaged_index(self.path / "docids.txt", f"{len(self.ids)} row ids, meta.json records {self.meta['rows']}",
                                folder=self.path, meta=self.meta)
        self._index = None
        self._groups: tuple[list[np.ndarray], dict[str, int]] | None = None
        self._embeddings: ShardedEmbeddings | None = None

    @property
    def grouped(self) -> bool:
        return bool(self.meta.get("grouped"))

    def _faiss_index(self) -> Any:
        if self._index is None:
            meta = self.meta if self.verify else {k: v for k, v in self.meta.items() if k != "faiss_sha256"}
            index = read_faiss(self.path / FAISS_FILE, folder=self.path, meta=meta)
            if self.ef_search is not None and hasattr(index, "hnsw"):
                index.hnsw.efSearch = int(self.ef_search)
            if self.nprobe is not None and hasattr(index, "nprobe"):
                index.nprobe = int(self.nprobe)
            self._index = _to_device(index, self.device)
        return self._index

    def open(self, *, per_group: bool) -> None:
        """Open (and so check) what a search will read, before any question is encoded: the FAISS file, or
        for per-group search every embedding shard."""
        if per_group:
            self._group_index()
            self._shards().check()
        else:
            self._faiss_index()

    @property
    def rows_are_store_records(self) -> bool:
        """Whether row ``i`` of this index is record ``i`` of the store it was built from (``build_dense_index``
        records it; an index made another way may order its rows otherwise)."""
        return self.meta.get("row_order") == "store records" and self.meta.get("rows") == self.meta.get("corpus", {}).get("passages")

    def search(self, vectors: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Top-``k`` ``(docid, inner product)`` per query vector, best first."""
        return self.search_rows(vectors, k)[0]

    def search_rows(self, vectors: np.ndarray, k: int) -> tuple[list[list[tuple[str, float]]], list[list[int]]]:
        """``search`` and, per query, the index rows of its hits in the same order (for a store read by record
        number when ``rows_are_store_records``)."""
        if len(vectors) == 0:
            return [], []
        index, k = self._faiss_index(), int(k)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        # FAISS breaks ties by row; the contract breaks them by passage id. One row more than k shows whether a
        # tie crosses the cut: then that query is searched deeper until the tie ends, and cut after sorting by id.
        fetch = min(k + 1, index.ntotal)
        limit = 2048 if "Gpu" in type(index).__name__ else index.ntotal  # GPU FAISS searches at most 2048 deep
        fetch = min(fetch, max(k, limit))
        scores, rows = index.search(vectors, fetch)
        ids = self.ids
        # The top k of every query at once: ids of all kept rows in one IdTable step, scores in one tolist(), then
        # a slice per query (per-hit Python here was 5x raw FAISS at k=100 once queries are encoded).
        keep = rows[:, :k] >= 0
        kept_rows = rows[:, :k][keep]
        flat_ids = ids.many(kept_rows)
        flat_rows = kept_rows.tolist()
        flat_scores = scores[:, :k][keep].tolist()
        counts = keep.sum(axis=1).tolist()
        # A query whose (k+1)-th hit ties its k-th: the tie may run past what was fetched (searched deeper below).
        if fetch > k:
            crossing = ((rows[:, k] >= 0) & (scores[:, k] == scores[:, k - 1])).tolist()
        else:
            crossing = [False] * len(vectors)
        out, out_rows = [], []
        start = 0
        for i, (n, tie) in enumerate(zip(counts, crossing)):
            if tie:
                triples = self._past_tie(index, vectors[i], scores[i], rows[i], k, fetch, limit)
                pairs = [(pid, x) for pid, x, _ in triples]
                out_rows.append([j for _, _, j in triples])
            else:
                pairs = list(zip(flat_ids[start:start + n], flat_scores[start:start + n]))
                out_rows.append(flat_rows[start:start + n])
            start += n
            out.append(pairs)
        return out, out_rows

    def _past_tie(self, index: Any, vector: np.ndarray, scores: np.ndarray, rows: np.ndarray, k: int, fetch: int,
                  limit: int) -> list[tuple[str, float, int]]:
        """Top ``k`` of one query whose k-th score ties the next (``scores``/``rows``: its ``fetch`` hits from the
        batch): search deeper until the tie ends, then order by (score descending, passage id) and cut, so which
        of the tied passages make the cut does not depend on FAISS's row order. ``(docid, score, row)`` each."""
        ids = self.ids
        pairs = [(ids[j], x, j) for x, j in zip(scores.tolist(), rows.tolist()) if j >= 0]
        depth = fetch
        while len(pairs) > k and pairs[k][1] == pairs[k - 1][1] and depth < min(index.ntotal, limit):
            depth = min(depth * 2, index.ntotal, limit)
            s, r = index.search(vector[None, :], depth)
            pairs = [(ids[j], x, j) for x, j in zip(s[0].tolist(), r[0].tolist()) if j >= 0]
        if len(pairs) > k and pairs[k][1] == pairs[k - 1][1]:
            pairs.sort(key=lambda t: (-t[1], t[0]))
        return pairs[:k]

    def has_group(self, group: str) -> bool:
        return group in self._group_index()[1]

    def _group_index(self) -> tuple[list[np.ndarray], dict[str, int]]:
        if self._groups is None:
            if not self.grouped:
                raise BerdsError(f"index {self.path} was built from a store without groups")
            from berds.indexes.bm25 import group_row_lists

            names = read_json(self.path / "group-names.json")
            self._groups = (group_row_lists(np.load(self.path / "row-groups.npy"), len(names)), {g: i for i, g in enumerate(names)})
        return self._groups

    def _shards(self) -> ShardedEmbeddings:
        if self._embeddings is None:
            if not self.meta.get("embeddings_kept"):
                raise BerdsError(f"index {self.path} did not keep its embeddings; rebuild it with keep_embeddings")
            self._embeddings = ShardedEmbeddings(self.path / EMBEDDINGS_DIR, int(self.meta["rows"]), int(self.meta["shard_size"]),
                                                 dim=self.meta.get("dim"), fix=f"rebuild the index: {rebuild_command(self.path, self.meta)}")
        return self._embeddings

    def search_group(self, group: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Exact top-``k`` inner products of ``vector`` against the rows of ``group`` only."""
        group_rows, numbers = self._group_index()
        if group not in numbers:
            raise BerdsError(f"group {group!r} is not in index {self.path}")
        rows = group_rows[numbers[group]]
        scores = self._shards().rows(rows) @ np.asarray(vector, dtype=np.float32)
        ranked = sorted(((self.ids[int(r)], float(s)) for r, s in zip(rows, scores)), key=lambda t: (-t[1], t[0]))
        return ranked[:k]  # ties broken by docid before cutting at k
