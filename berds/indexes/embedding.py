"""Dense encoding on an engine: each embedding shard is encoded by a worker and written by the driver.

``embed_corpus_on_engine`` is the engine twin of ``berds.indexes.faiss.embed_corpus`` and produces the
same files: ``shard-NNNNN.npy`` + ``shard-NNNNN.ids.txt`` per ``shard_size`` passages, in store order,
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

import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from berds.engine.recipes import Recipe
from berds.errors import BerdsError


class ShardEncoder:
    """A worker's encoder: one ``Encoder`` built from a spec, encoding whole shards in fixed-size chunks."""

    def __init__(self, *, spec: Any, device: str = "cpu", batch_size: int = 32, dtype: str | None = None):
        from berds.indexes.encoders import Encoder, encoder_spec

        self.encoder = Encoder(encoder_spec(spec), device=device, batch_size=batch_size, dtype=dtype)

    def encode_shard(self, passages: Sequence[Any]) -> np.ndarray:
        """float32 ``[len(passages), dim]``, chunked exactly as ``embed_corpus`` chunks a shard."""
        size = self.encoder.batch_size
        parts = [self.encoder.encode_passages(list(passages[i:i + size])) for i in range(0, len(passages), size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.encoder.spec.dim or 0), dtype=np.float32)


def encoder_recipe(spec: Any, *, device: str = "cpu", batch_size: int = 32, dtype: str | None = None) -> Recipe:
    """The worker recipe for passage encoding with ``spec`` (an ``EncoderSpec``, a name, or its dict)."""
    from berds.indexes.encoders import encoder_spec

    spec = encoder_spec(spec)
    return Recipe("berds.engine.encoding:ShardEncoder",
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
    from berds.indexes.base import progress_bar
    from berds.indexes.faiss import _resume_point, _save_shard, _shards_to_encode, _stored_dim

    recipe = encoder_recipe(spec, device=device, batch_size=batch_size, dtype=dtype)
    declared_dim = recipe.options["spec"].dim
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(store)
    n_shards, done_rows = _resume_point(folder, n, shard_size)
    pending: dict[int, tuple[int, list[str]]] = {}  # batch position -> (shard number, passage ids), while in flight

    def shards_to_encode() -> Iterator[list[Any]]:
        for position, (shard, passages) in enumerate(_shards_to_encode(store, folder, shard_size)):
            pending[position] = (shard, [p.id for p in passages])
            yield passages

    dim: int | None = None
    encoded = 0
    started = time.perf_counter()
    with progress_bar("passages", enabled=progress) as bar:
        task = bar.add_task(f"embed ({recipe.label.split(' ', 1)[-1]}, {engine.name} x{engine.workers})", total=n,
                            completed=done_rows)
        for result in engine.map_batches(recipe, shards_to_encode()):
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
            _save_shard(folder, shard, vectors, ids)
            encoded += len(ids)
            bar.advance(task, len(ids))
    if dim is None:  # everything was already on disk
        dim = _stored_dim(folder)
    return {"dim": dim, "rows": n, "shards": n_shards, "encoded": encoded, "seconds": time.perf_counter() - started}
