"""Corpus embeddings in shard files: the resume rules, local encoding, and encoding on an engine.

``embed_corpus`` encodes in this process; ``embed_corpus_on_engine`` has each shard encoded by an engine's
worker and written by the driver. Both produce the same files: ``shard-NNNNN.npy`` + ``shard-NNNNN.ids.txt`` per ``shard_size`` passages, in store order,
each written atomically by the driver as soon as its vectors arrive. So:

* resume works as before — shards already on disk are skipped, whichever engine wrote them;
* a worker that dies loses only the shards it held; the engine re-runs them on a fresh worker, and no
  partial shard ever reaches the disk;
* a worker splits its shard into the same ``batch_size`` chunks as the local loop, so a deterministic
  encoder gives byte-identical shard files on any engine and any number of workers.

Each worker loads the encoder once (``ShardEncoder``, built from the picklable ``EncoderSpec``); with
``device="cuda"`` the recipe asks for one GPU per worker, Ray gives each worker its own, and ``cuda``
inside the worker means that GPU.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from berds.corpora.docstore import StoreDamagedError
from berds.engine.recipes import Recipe
from berds.errors import BerdsError, InputError
from berds.indexes.base import check_row_ids, progress_bar, read_ids, whole_store_batches, write_ids
from berds.indexes.encoders import Encoder, encoder_spec
from berds.io import atomic_write


# ------------------------------------------------------------------------------------------ shard files and resume rules


def shard_path(folder: Path, i: int) -> Path:
    return folder / f"shard-{i:05d}.npy"


def save_shard(folder: Path, i: int, vectors: np.ndarray, ids: list[str]) -> None:
    # ids first: a shard counts as done only when its .npy exists, so both are complete by then.
    write_ids(folder / f"shard-{i:05d}.ids.txt", ids)
    with atomic_write(shard_path(folder, i), "wb", encoding=None) as f:
        np.save(f, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)


def iter_shard_passages(store: Any, shard_size: int, batch_size: int) -> Iterator[tuple[int, list[Any]]]:
    """``(shard number, passages of that shard)`` in store order, one shard's passages at a time."""
    shard, current = 0, []
    for batch in whole_store_batches(store, batch_size):
        check_row_ids([p.id for p in batch], source=getattr(store, "path", None))  # before any encoding is spent on them
        for p in batch:
            current.append(p)
            if len(current) == shard_size:
                yield shard, current
                shard, current = shard + 1, []
    if current:
        yield shard, current


# Resuming an encode (locally or on an engine): a shard is done once its .npy exists.


def shard_rows(n: int, shard_size: int, i: int) -> int:
    """Rows in shard ``i`` of ``n`` passages cut into shards of ``shard_size``."""
    return min(shard_size, n - i * shard_size)


def shard_is_complete(folder: Path, i: int, rows: int) -> bool:
    """Whether shard ``i`` is on disk, readable and holds ``rows`` vectors (reads only the .npy header).

    A truncated or otherwise damaged shard (disk trouble, a copy cut short) counts as missing, so a
    resumed build encodes it again instead of failing at the end.
    """
    path = shard_path(folder, i)
    if not path.is_file() or not (folder / f"shard-{i:05d}.ids.txt").is_file():
        return False
    try:
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return False
    return vectors.ndim == 2 and vectors.shape[0] == rows


def resume_point(folder: Path, n: int, shard_size: int) -> tuple[int, int]:
    """``(shards, rows already encoded)`` for ``n`` passages cut into shards of ``shard_size``."""
    n_shards = max(1, math.ceil(n / shard_size))
    return n_shards, sum(shard_rows(n, shard_size, i) for i in range(n_shards)
                         if shard_is_complete(folder, i, shard_rows(n, shard_size, i)))


def shards_to_encode(store: Any, folder: Path, shard_size: int) -> Iterator[tuple[int, list[Any]]]:
    """``(shard number, passages)`` of the shards not yet (completely) written to ``folder``, in store order."""
    try:
        for shard, passages in iter_shard_passages(store, shard_size, min(shard_size, 1024)):
            if not shard_is_complete(folder, shard, len(passages)):
                yield shard, passages
    except StoreDamagedError:
        # A damaged format-2 store is found when the read ends (its fingerprint), so any shard may hold damaged text
        # (one left by a killed build too), and a rebuilt store has the same fingerprint: none may be resumed from.
        for path in folder.glob("shard-*"):
            path.unlink(missing_ok=True)
        raise


def stored_dim(folder: Path) -> int:
    """The vector dimension of the shards on disk (when a resumed encode had nothing left to do)."""
    return int(np.load(shard_path(folder, 0), mmap_mode="r").shape[1])


def embed_corpus(store: Any, encoder: Encoder, folder: Path, *, shard_size: int, progress: bool = True) -> dict[str, Any]:
    """Encode every passage of ``store`` into shard files under ``folder``, skipping shards already there.

    Returns ``{"dim", "rows", "shards", "encoded", "seconds"}`` (``encoded``: passages encoded now).
    """
    folder.mkdir(parents=True, exist_ok=True)
    n = len(store)
    n_shards, done_rows = resume_point(folder, n, shard_size)
    dim = None
    encoded = 0
    started = time.perf_counter()
    with progress_bar("passages", enabled=progress) as bar:
        task = bar.add_task(f"embed ({encoder.spec.name})", total=n, completed=done_rows)
        for shard, passages in shards_to_encode(store, folder, shard_size):
            vectors = None  # one shard's vectors, filled batch by batch (no concatenation copy)
            for i in range(0, len(passages), encoder.batch_size):
                chunk = passages[i:i + encoder.batch_size]
                part = encoder.encode_passages(chunk)
                if vectors is None:
                    dim = int(part.shape[1])
                    if encoder.spec.dim and dim != encoder.spec.dim:
                        raise BerdsError(f"encoder {encoder.spec.name!r} declares dim={encoder.spec.dim} but produced {dim}-d vectors")
                    vectors = np.empty((len(passages), dim), dtype=np.float32)
                vectors[i:i + len(chunk)] = part
                bar.advance(task, len(chunk))
            save_shard(folder, shard, vectors, [p.id for p in passages])
            del vectors
            encoded += len(passages)
    if dim is None:  # everything was already on disk
        dim = stored_dim(folder)
    return {"dim": dim, "rows": n, "shards": n_shards, "encoded": encoded, "seconds": time.perf_counter() - started}


class ShardedEmbeddings:
    """The embedding shards of an index, memory-mapped: ``rows(idx)`` gathers vectors by row number."""

    RESUME_FIX = "re-run the same `berds index dense` command: it encodes missing or damaged shards again"

    def __init__(self, folder: Path, n: int, shard_size: int, *, dim: int | None = None, fix: str | None = None):
        self.folder, self.n, self.shard_size, self.dim = folder, n, shard_size, dim
        self.fix = fix or self.RESUME_FIX
        self.n_shards = max(1, math.ceil(n / shard_size))
        missing = [i for i in range(self.n_shards) if not shard_path(folder, i).is_file()]
        if missing:
            raise InputError(f"embedding shard {missing[0]} is missing", path=folder, fix=self.fix)
        self._maps: dict[int, np.ndarray] = {}

    def shard(self, i: int) -> np.ndarray:
        """Shard ``i`` memory-mapped; a truncated or mis-shaped file is an error naming it (not an mmap traceback)."""
        if i not in self._maps:
            path = shard_path(self.folder, i)
            try:
                vectors = np.load(path, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise InputError(f"damaged embedding shard ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                                 path=path, fix=self.fix) from None
            rows = shard_rows(self.n, self.shard_size, i)
            if vectors.ndim != 2 or vectors.shape[0] != rows or (self.dim and vectors.shape[1] != self.dim):
                raise InputError(f"damaged embedding shard (shape {vectors.shape}, expected ({rows}, {self.dim or 'dim'}))",
                                 path=path, fix=self.fix)
            self._maps[i] = vectors
        return self._maps[i]

    def check(self) -> None:
        """Open every shard's header now (cheap), so a damaged one is reported before any work starts."""
        for i in range(self.n_shards):
            self.shard(i)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self.n_shards):
            yield np.asarray(self.shard(i))

    def rows(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        out = None
        for s in np.unique(idx // self.shard_size):
            sel = (idx // self.shard_size) == s
            part = np.asarray(self.shard(int(s))[idx[sel] - s * self.shard_size])
            if out is None:
                out = np.empty((len(idx), part.shape[1]), dtype=np.float32)
            out[sel] = part
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)

    def sample(self, size: int, seed: int) -> np.ndarray:
        """``size`` distinct rows chosen uniformly at random (deterministic for a seed), in row order."""
        rng = np.random.default_rng(seed)
        return self.rows(np.sort(rng.choice(self.n, size=min(size, self.n), replace=False)))

    def ids(self) -> Iterator[str]:
        for i in range(self.n_shards):
            yield from read_ids(self.folder / f"shard-{i:05d}.ids.txt")


# ------------------------------------------------------------------------------------------ on an engine


class ShardEncoder:
    """A worker's encoder: one ``Encoder`` built from a spec, encoding whole shards in fixed-size chunks."""

    def __init__(self, *, spec: Any, device: str = "cpu", batch_size: int = 32, dtype: str | None = None):
        self.encoder = Encoder(encoder_spec(spec), device=device, batch_size=batch_size, dtype=dtype)

    def encode_shard(self, passages: Sequence[Any]) -> np.ndarray:
        """float32 ``[len(passages), dim]``, chunked exactly as ``embed_corpus`` chunks a shard."""
        size = self.encoder.batch_size
        parts = [self.encoder.encode_passages(list(passages[i:i + size])) for i in range(0, len(passages), size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.encoder.spec.dim or 0), dtype=np.float32)


def encoder_recipe(spec: Any, *, device: str = "cpu", batch_size: int = 32, dtype: str | None = None) -> Recipe:
    """The worker recipe for passage encoding with ``spec`` (an ``EncoderSpec``, a name, or its dict)."""
    spec = encoder_spec(spec)
    return Recipe("berds.indexes.embedding:ShardEncoder",
                  {"spec": spec, "device": device, "batch_size": int(batch_size), "dtype": dtype},
                  method="encode_shard", label=f"encode {spec.name}", gpus=1.0 if device.startswith("cuda") else 0.0)


def embed_corpus_on_engine(
    engine: Any,
    store: Any,
    spec: Any,
    folder: Path,
    *,
    shard_size: int,
    device: str = "cpu",
    batch_size: int = 32,
    dtype: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """``embed_corpus`` with the shards encoded by ``engine``'s workers (same files, same return value:
    ``{"dim", "rows", "shards", "encoded", "seconds"}``). ``engine`` is an ``Engine`` or a name."""
    from berds.engine import get_engine

    owned = isinstance(engine, str)  # an engine given by name is started here and closed at the end
    engine = get_engine(engine)
    try:
        return _embed(engine, store, spec, folder, shard_size=shard_size, device=device, batch_size=batch_size,
                      dtype=dtype, progress=progress)
    finally:
        if owned:
            engine.close()


def _embed(engine: Any, store: Any, spec: Any, folder: Path, *, shard_size: int, device: str, batch_size: int,
           dtype: str | None, progress: bool) -> dict[str, Any]:
    recipe = encoder_recipe(spec, device=device, batch_size=batch_size, dtype=dtype)
    declared_dim = recipe.options["spec"].dim
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(store)
    n_shards, done_rows = resume_point(folder, n, shard_size)
    pending: dict[int, tuple[int, list[str]]] = {}  # batch position -> (shard number, passage ids), while in flight

    def batches() -> Iterator[list[Any]]:
        for position, (shard, passages) in enumerate(shards_to_encode(store, folder, shard_size)):
            pending[position] = (shard, [p.id for p in passages])
            yield passages

    dim: int | None = None
    encoded = 0
    started = time.perf_counter()
    with progress_bar("passages", enabled=progress) as bar:
        task = bar.add_task(f"embed ({recipe.label.split(' ', 1)[-1]}, {engine.name} x{engine.workers})", total=n,
                            completed=done_rows)
        for result in engine.map_batches(recipe, batches()):
            shard, ids = pending.pop(result.index)
            vectors = np.asarray(result.output)
            if vectors.ndim != 2 or vectors.shape[0] != len(ids):
                raise BerdsError(f"{recipe.label}: shard {shard} came back with shape {vectors.shape} for {len(ids)} passages")
            if dim is None:
                dim = int(vectors.shape[1])
                if declared_dim and dim != declared_dim:
                    raise BerdsError(f"encoder {recipe.label!r} declares dim={declared_dim} but produced {dim}-d vectors")
            elif vectors.shape[1] != dim:
                raise BerdsError(f"{recipe.label}: shard {shard} has {vectors.shape[1]}-d vectors, earlier shards {dim}-d")
            save_shard(folder, shard, vectors, ids)
            encoded += len(ids)
            bar.advance(task, len(ids))
    if dim is None:  # everything was already on disk
        dim = stored_dim(folder)
    return {"dim": dim, "rows": n, "shards": n_shards, "encoded": encoded, "seconds": time.perf_counter() - started}
