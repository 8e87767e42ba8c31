"""The passage store: every corpus berds builds ends up here, and every index and run reads from here.

A store is a folder::

    manifest.json        kind "passage-store", counts, shards, groups, fingerprint, builder metadata
    passages-00000.bin   shard files: a sequence of blocks; a block is ~8 KB of JSON lines
    passages-00001.bin   (``[id, text, title, source]`` one per line), zlib-compressed by default
    blocks.npy           per block: shard number, byte offset, byte length, first record number
    index-keys.npy       sorted 64-bit hashes of the passage ids ...
    index-records.npy    ... and the record number each one points to (a sorted id -> record index)
    groups.npy           (only when groups were used) the group number of each record, -1 for none

Why this shape: 21M DPR passages are ~13 GB of text. Compressed blocks keep that to ~6 GB on disk; the
index costs 12 bytes per passage (~250 MB for DPR) and is memory-mapped, so opening a store reads
almost nothing and a random lookup is a binary search plus one small block decompression. While
writing, memory holds only the current block and the id hashes (16 bytes per passage, needed to reject
duplicate ids at ``add`` time), never the passages themselves.

Writes are atomic at the folder level: the store is built in ``<out>.building/`` and renamed into place
when the writer closes cleanly. A build that died leaves ``<out>.building/`` with its finished shards;
``PassageStoreWriter(out, resume=True)`` keeps them and reports how many passages they hold
(``writer.resumed_passages``) so a deterministic builder can skip that many and carry on.

The fingerprint is a sha256 over every passage's id, title and text (and group, when one is set) in
store order. It does not depend on shard size, block size or compression, so the same passages always
give the same fingerprint; indexes and runs record it to prove which corpus they came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.io import iter_jsonl, new_manifest, read_json, write_json
from berds.types import Passage

STORE_KIND = "passage-store"
STORE_FORMAT = 1
_MAX_RECORDS = 2**32 - 1  # record numbers are stored as uint32
_CHECKPOINT = "checkpoint.json"

__all__ = [
    "PassageStoreWriter",
    "PassageStore",
    "PassageNotFoundError",
    "write_passage_store",
    "load_passages_jsonl",
    "estimate_store_size",
    "is_passage_store",
    "human_bytes",
]


class PassageNotFoundError(InputError, KeyError):
    """A passage id that is not in the store (a ``KeyError`` too, so ``dict``-style code works)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def id_hash(pid: str) -> int:
    """The 64-bit key a passage id is indexed under (blake2b; stable across runs and machines)."""
    return int.from_bytes(hashlib.blake2b(pid.encode("utf-8"), digest_size=8).digest(), "little")


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder: json.dumps re-creates it per call


def _encode_record(p: Passage) -> bytes:
    return _ENCODE([p.id, p.text, p.title, p.source]).encode("utf-8") + b"\n"


def _decode_record(line: bytes) -> Passage:
    pid, text, title, source = json.loads(line)
    return Passage(id=pid, text=text, title=title, source=source)


def _fingerprint_bytes(p: Passage, group: str | None) -> bytes:
    fields = [p.id, p.title, p.text] if group is None else [p.id, p.title, p.text, group]
    return _ENCODE(fields).encode("utf-8") + b"\n"


def is_passage_store(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder holding a finished passage store."""
    manifest = Path(path) / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        return read_json(manifest).get("kind") == STORE_KIND
    except (BerdsError, AttributeError):
        return False


def estimate_store_size(n_passages: int, avg_passage_bytes: float = 620.0, *, compression: str = "zlib") -> dict[str, int]:
    """Expected disk use and peak writer memory for a store of ``n_passages``, in bytes.

    ``avg_passage_bytes`` is the encoded size of one passage (a DPR passage with its title is ~620 bytes);
    zlib (level 3) on 8 KB blocks of English web text compresses ~2.1x. The index costs 12 bytes per passage on disk,
    and the writer holds 16 bytes per passage in memory (id hashes used to reject duplicates) plus twice
    that while it merges and sorts them.
    """
    ratio = 2.1 if compression == "zlib" else 1.0
    data = int(n_passages * avg_passage_bytes / ratio)
    index = n_passages * 12
    return {"disk_bytes": data + index, "data_bytes": data, "index_bytes": index, "writer_memory_bytes": n_passages * 16 * 3}


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"


class _IdHashSet:
    """Id hashes seen so far -> record numbers: a small pending set plus big sorted numpy arrays.

    Keeps 16 bytes per passage instead of a Python set's ~70, so a 21M-passage build stays in a few
    hundred MB. ``candidates(h)`` lists the record numbers whose id hashes to ``h`` (almost always 0 or 1).
    """

    def __init__(self, merge_every: int = 500_000):
        self.keys = np.empty(0, dtype=np.uint64)
        self.records = np.empty(0, dtype=np.uint32)
        self._pending_keys: array = array("Q")
        self._pending_records: array = array("I")
        self._pending_set: set[int] = set()
        self._merge_every = merge_every

    def __len__(self) -> int:
        return len(self.keys) + len(self._pending_keys)

    def candidates(self, h: int) -> list[int]:
        found: list[int] = []
        if h in self._pending_set:
            pk = np.frombuffer(self._pending_keys, dtype=np.uint64)
            found.extend(int(r) for r in np.frombuffer(self._pending_records, dtype=np.uint32)[pk == h])
        if len(self.keys):
            key = np.uint64(h)
            lo = int(np.searchsorted(self.keys, key, side="left"))
            while lo < len(self.keys) and self.keys[lo] == key:
                found.append(int(self.records[lo]))
                lo += 1
        return found

    def add(self, h: int, record: int) -> None:
        self._pending_keys.append(h)
        self._pending_records.append(record)
        self._pending_set.add(h)
        if len(self._pending_keys) >= self._merge_every:
            self.merge()

    def merge(self) -> None:
        if not len(self._pending_keys):
            return
        keys = np.concatenate([self.keys, np.frombuffer(self._pending_keys, dtype=np.uint64)])
        records = np.concatenate([self.records, np.frombuffer(self._pending_records, dtype=np.uint32)])
        order = np.argsort(keys, kind="stable")
        self.keys, self.records = keys[order], records[order]
        self._pending_keys, self._pending_records, self._pending_set = array("Q"), array("I"), set()


class PassageStoreWriter:
    """Write passages into a new store folder; use as a context manager.

    ``with PassageStoreWriter("corpora/wiki") as w: w.add_many(passages)`` — on a clean exit the shards
    are closed, the index is sorted and written, ``manifest.json`` (with the fingerprint) is written last
    and the folder is moved into place. On an exception nothing replaces ``out`` and the partial build
    stays in ``<out>.building/`` (``resume=True`` picks it up).

    Options:
        shard_size:  passages per shard file.
        overwrite:   replace an existing store at ``out`` (otherwise that is an error).
        metadata:    JSON-serialisable builder facts stored in the manifest (source files, options, counts).
        compression: ``"zlib"`` (default, level 3; ~2.1x smaller) or ``"none"`` (faster lookups, bigger files).
        block_bytes: uncompressed size of a block, the unit a random lookup decompresses.
        resume:      keep the finished shards of an interrupted build of ``out``; see ``resumed_passages``.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        *,
        shard_size: int = 1_000_000,
        overwrite: bool = False,
        metadata: dict | None = None,
        compression: str = "zlib",
        block_bytes: int = 8_192,
        resume: bool = False,
        identity: dict | None = None,
        resume_check: Any = None,
    ):
        if shard_size < 1:
            raise BerdsError(f"shard_size must be at least 1, got {shard_size}")
        if compression not in ("zlib", "none"):
            raise BerdsError(f"compression must be 'zlib' or 'none', got {compression!r}")
        self.out = Path(out)
        self.shard_size = int(shard_size)
        self.overwrite = overwrite
        self.metadata = dict(metadata or {})
        self.compression = compression
        self.block_bytes = int(block_bytes)
        self.building = self.out.with_name(self.out.name + ".building")
        self.resumed_passages = 0
        self.identity = identity  # inputs + options, kept in the checkpoint
        self.resume_check = resume_check  # recorded identity -> why it cannot resume (None: it can)

        if self.out.exists() and not overwrite:
            if is_passage_store(self.out):
                raise InputError(
                    "a passage store already exists here", path=self.out,
                    fix="pass overwrite=True (CLI: --overwrite) to replace it, or choose another --out",
                )
            if self.out.is_file() or any(self.out.iterdir()):
                raise InputError(
                    "exists and is not an empty folder or a passage store", path=self.out,
                    fix="choose another output folder",
                )
        if self.out.exists() and overwrite and not is_passage_store(self.out) and (self.out.is_file() or any(self.out.iterdir())):
            raise InputError(
                "exists and is not a passage store; refusing to overwrite it", path=self.out,
                fix="remove it yourself or choose another output folder",
            )

        self._count = 0
        self._hashes = _IdHashSet()
        self._fingerprint = hashlib.sha256()
        self._groups: dict[str, int] = {}
        self._record_groups = array("i")
        self._uses_groups = False
        # Block table, kept as compact arrays (24 bytes per ~50 passages).
        self._block_shard, self._block_offset = array("I"), array("Q")
        self._block_nbytes, self._block_first = array("I"), array("Q")
        self._block_lines: list[bytes] = []
        self._block_size = 0
        self._block_first_record = 0
        self._shards: list[dict[str, Any]] = []
        self._shard_file = None
        self._shard_passages = 0
        self._shard_offset = 0
        self._closed = False

        if resume and (self.building / _CHECKPOINT).is_file():
            self._resume()
        else:
            if self.building.exists():
                shutil.rmtree(self.building)
            self.building.mkdir(parents=True)

    # -- writing ------------------------------------------------------------------------------------
    def __enter__(self) -> "PassageStoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __len__(self) -> int:
        return self._count

    def add(self, passage: Passage, *, group: str | None = None) -> None:
        """Append one passage (optionally to ``group``, e.g. a question id). A repeated id is an error."""
        if self._closed:
            raise BerdsError("this PassageStoreWriter is closed")
        if not isinstance(passage, Passage):
            raise InputError(f"expected a berds.types.Passage, got {type(passage).__name__}", path=self.out)
        if self._count >= _MAX_RECORDS:
            raise BerdsError(f"a passage store holds at most {_MAX_RECORDS} passages")
        h = id_hash(passage.id)
        for record in self._hashes.candidates(h):
            if self._read_own_record(record).id == passage.id:
                raise InputError(
                    f"duplicate passage id {passage.id!r} (first added as passage number {record + 1})",
                    path=self.out, fix="passage ids must be unique within a store",
                )
        if group is not None:
            if not isinstance(group, str) or not group:
                raise InputError(f"group must be a non-empty string, got {group!r}", record=passage.id, path=self.out)
            gi = self._groups.setdefault(group, len(self._groups))
            if not self._uses_groups:
                self._uses_groups = True
                self._record_groups.extend([-1] * self._count)
            self._record_groups.append(gi)
        elif self._uses_groups:
            self._record_groups.append(-1)
        self._hashes.add(h, self._count)
        self._fingerprint.update(_fingerprint_bytes(passage, group))
        line = _encode_record(passage)
        if not self._block_lines:
            self._block_first_record = self._count
        self._block_lines.append(line)
        self._block_size += len(line)
        self._count += 1
        self._shard_passages += 1
        if self._block_size >= self.block_bytes:
            self._flush_block()
        if self._shard_passages >= self.shard_size:
            self._finish_shard()

    def add_many(self, passages: Iterable[Passage], *, group: str | None = None) -> int:
        """Append passages in order; returns how many were added."""
        n = 0
        for p in passages:
            self.add(p, group=group)
            n += 1
        return n

    def _shard_path(self, i: int) -> Path:
        return self.building / f"passages-{i:05d}.bin"

    def _flush_block(self) -> None:
        if not self._block_lines:
            return
        if self._shard_file is None:
            self._shard_file = open(self._shard_path(len(self._shards)).with_suffix(".bin.partial"), "wb")
            self._shard_offset = 0
        raw = b"".join(self._block_lines)
        data = zlib.compress(raw, 3) if self.compression == "zlib" else raw
        self._shard_file.write(data)
        self._block_shard.append(len(self._shards))
        self._block_offset.append(self._shard_offset)
        self._block_nbytes.append(len(data))
        self._block_first.append(self._block_first_record)
        self._shard_offset += len(data)
        self._block_lines, self._block_size = [], 0

    def _finish_shard(self) -> None:
        self._flush_block()
        if self._shard_file is None:
            return
        self._shard_file.flush()
        os.fsync(self._shard_file.fileno())
        self._shard_file.close()
        self._shard_file = None
        i = len(self._shards)
        os.replace(self._shard_path(i).with_suffix(".bin.partial"), self._shard_path(i))
        self._shards.append({"file": self._shard_path(i).name, "passages": self._shard_passages, "bytes": self._shard_offset})
        self._shard_passages = 0
        self._write_checkpoint()

    def _read_own_record(self, record: int) -> Passage:
        """Read back a passage this writer already took (to tell a duplicate id from a hash collision)."""
        if self._block_lines and record >= self._block_first_record:
            return _decode_record(self._block_lines[record - self._block_first_record])
        firsts = np.frombuffer(self._block_first, dtype=np.uint64)
        b = int(np.searchsorted(firsts, record, side="right")) - 1
        shard = self._block_shard[b]
        if self._shard_file is not None and shard == len(self._shards):
            self._shard_file.flush()
            path = self._shard_path(shard).with_suffix(".bin.partial")
        else:
            path = self._shard_path(shard)
        with open(path, "rb") as f:
            f.seek(self._block_offset[b])
            data = f.read(self._block_nbytes[b])
        raw = zlib.decompress(data) if self.compression == "zlib" else data
        return _decode_record(raw.split(b"\n")[record - int(firsts[b])])

    # -- checkpoints and resume ----------------------------------------------------------------------
    def _write_checkpoint(self) -> None:
        """After each finished shard: save what a resumed build needs to trust the shards on disk."""
        np.save(self.building / "checkpoint-blocks.npy", self._blocks_array())
        if self._uses_groups:
            np.save(self.building / "checkpoint-groups.npy", np.frombuffer(self._record_groups, dtype=np.int32))
        write_json(self.building / _CHECKPOINT, {
            "passages": self._count, "shards": self._shards, "compression": self.compression,
            "block_bytes": self.block_bytes, "shard_size": self.shard_size,
            "groups": list(self._groups), "uses_groups": self._uses_groups,
            **({"identity": self.identity} if self.identity is not None else {}),
        })

    def _resume(self) -> None:
        cp = read_json(self.building / _CHECKPOINT)
        if cp["compression"] != self.compression or cp["shard_size"] != self.shard_size:
            raise InputError(
                f"the interrupted build used compression={cp['compression']!r}, shard_size={cp['shard_size']}",
                path=self.building, fix="resume with the same options, or build afresh without --resume",
            )
        problem = self.resume_check(cp.get("identity")) if self.resume_check is not None else None
        if problem:
            raise InputError(f"cannot resume: {problem}; resuming would mix two corpora in one store",
                             path=self.building, fix="resume with the same input files and options, or build "
                                                     "afresh without --resume")
        for f in self.building.glob("*.partial"):
            f.unlink()
        self.block_bytes = cp["block_bytes"]
        blocks = np.load(self.building / "checkpoint-blocks.npy")
        self._block_shard.extend(int(x) for x in blocks["shard"])
        self._block_offset.extend(int(x) for x in blocks["offset"])
        self._block_nbytes.extend(int(x) for x in blocks["nbytes"])
        self._block_first.extend(int(x) for x in blocks["first"])
        self._shards = list(cp["shards"])
        self._groups = {g: i for i, g in enumerate(cp["groups"])}
        self._uses_groups = cp["uses_groups"]
        group_of = np.load(self.building / "checkpoint-groups.npy") if self._uses_groups else None
        names = cp["groups"]
        # Re-read the finished shards once: restores the fingerprint state and the id hashes.
        for b in range(len(blocks)):
            path = self._shard_path(int(blocks["shard"][b]))
            with open(path, "rb") as f:
                f.seek(int(blocks["offset"][b]))
                data = f.read(int(blocks["nbytes"][b]))
            raw = zlib.decompress(data) if self.compression == "zlib" else data
            for line in raw.splitlines():
                p = _decode_record(line)
                g = None
                if group_of is not None and group_of[self._count] >= 0:
                    g = names[group_of[self._count]]
                self._fingerprint.update(_fingerprint_bytes(p, g))
                self._hashes.add(id_hash(p.id), self._count)
                self._count += 1
        if group_of is not None:
            self._record_groups.extend(int(x) for x in group_of[: self._count])
        if self._count != cp["passages"]:
            raise InputError(
                f"checkpoint says {cp['passages']} passages but the shards hold {self._count}",
                path=self.building, fix="build afresh without --resume",
            )
        self.resumed_passages = self._count

    # -- finishing -------------------------------------------------------------------------------------
    def _blocks_array(self) -> np.ndarray:
        blocks = np.empty(len(self._block_shard), dtype=[("shard", "<u4"), ("offset", "<u8"), ("nbytes", "<u4"), ("first", "<u8")])
        blocks["shard"] = np.frombuffer(self._block_shard, dtype=np.uint32)
        blocks["offset"] = np.frombuffer(self._block_offset, dtype=np.uint64)
        blocks["nbytes"] = np.frombuffer(self._block_nbytes, dtype=np.uint32)
        blocks["first"] = np.frombuffer(self._block_first, dtype=np.uint64)
        return blocks

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the passages added so far."""
        return self._fingerprint.hexdigest()

    def close(self) -> "PassageStore":
        """Finish the store: flush, write the index and manifest, move the folder into place."""
        if self._closed:
            return PassageStore.open(self.out)
        self._finish_shard()
        self._hashes.merge()
        np.save(self.building / "index-keys.npy", self._hashes.keys)
        np.save(self.building / "index-records.npy", self._hashes.records)
        np.save(self.building / "blocks.npy", self._blocks_array())
        group_counts: dict[str, int] = {}
        if self._uses_groups:
            rg = np.frombuffer(self._record_groups, dtype=np.int32)
            np.save(self.building / "groups.npy", rg)
            counts = np.bincount(rg[rg >= 0], minlength=len(self._groups)) if len(rg) else np.zeros(len(self._groups), int)
            group_counts = {g: int(counts[i]) for g, i in self._groups.items()}
        manifest = new_manifest(
            STORE_KIND,
            format=STORE_FORMAT,
            passages=self._count,
            fingerprint=self.fingerprint,
            compression=self.compression,
            block_bytes=self.block_bytes,
            shard_size=self.shard_size,
            shards=self._shards,
            blocks=len(self._block_shard),
            groups=group_counts,
            metadata=self.metadata,
        )
        for f in ("checkpoint.json", "checkpoint-blocks.npy", "checkpoint-groups.npy"):
            (self.building / f).unlink(missing_ok=True)
        write_json(self.building / "manifest.json", manifest)
        if self.out.exists():
            old = self.out.with_name(self.out.name + ".old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(self.out, old)
            os.replace(self.building, self.out)
            shutil.rmtree(old)
        else:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.building, self.out)
        self._closed = True
        self._hashes = _IdHashSet()
        return PassageStore.open(self.out)

    def abort(self) -> None:
        """Stop without finishing; finished shards stay in ``<out>.building/`` for ``resume=True``."""
        if self._shard_file is not None:
            self._shard_file.close()
            self._shard_file = None
        self._closed = True


class PassageStore:
    """Read access to a finished passage store: ``len``, ``in``, ``get``/``[]``, iteration in store order.

    Open with ``PassageStore.open(path)``. The index and block table are memory-mapped; a lookup hashes
    the id, binary-searches the index and decompresses one block (a few recently used blocks are
    cached, so neighbouring lookups are cheap).
    """

    def __init__(self, path: Path, manifest: dict, *, cache_blocks: int = 64):
        self.path = path
        self.manifest = manifest
        self.fingerprint: str = manifest["fingerprint"]
        self._count = int(manifest["passages"])
        self._compressed = manifest.get("compression", "zlib") == "zlib"
        self._keys = np.load(path / "index-keys.npy", mmap_mode="r")
        self._records = np.load(path / "index-records.npy", mmap_mode="r")
        blocks = np.load(path / "blocks.npy")
        self._block_shard = blocks["shard"]
        self._block_offset = blocks["offset"]
        self._block_nbytes = blocks["nbytes"]
        self._block_first = blocks["first"]
        self._group_names = list(manifest.get("groups", {}))
        gpath = path / "groups.npy"
        self._record_groups = np.load(gpath, mmap_mode="r") if gpath.exists() else None
        self._fds: dict[int, int] = {}
        self._cache: OrderedDict[int, list[bytes]] = OrderedDict()
        self._cache_blocks = cache_blocks

    @classmethod
    def open(cls, path: str | os.PathLike) -> "PassageStore":
        """Open the store folder at ``path``; a clear ``InputError`` when it is not one."""
        path = Path(path)
        if not path.exists():
            building = path.with_name(path.name + ".building")
            fix = ("an interrupted build is in " + str(building) + "; re-run the build with --resume") if building.exists() \
                else "build one with `berds corpus build ...`"
            raise InputError("no passage store here (folder not found)", path=path, fix=fix)
        manifest_path = path / "manifest.json"
        if not path.is_dir() or not manifest_path.is_file():
            raise InputError(
                "not a passage store (no manifest.json)", path=path,
                fix="point to a folder written by `berds corpus build` / PassageStoreWriter",
            )
        manifest = read_json(manifest_path)
        if not isinstance(manifest, dict) or manifest.get("kind") != STORE_KIND:
            kind = manifest.get("kind") if isinstance(manifest, dict) else None
            raise InputError(f"manifest.json describes a {kind!r}, not a {STORE_KIND!r}", path=path,
                             fix="point to a passage store folder")
        if manifest.get("format") != STORE_FORMAT:
            raise InputError(f"passage store format {manifest.get('format')!r} is not supported (expected {STORE_FORMAT})",
                             path=path, fix="rebuild the store with this version of berds")
        for name in ("index-keys.npy", "index-records.npy", "blocks.npy", *(s["file"] for s in manifest["shards"])):
            if not (path / name).is_file():
                raise InputError(f"passage store is incomplete: {name} is missing", path=path, fix="rebuild the store")
        return cls(path, manifest)

    def __repr__(self) -> str:
        return f"PassageStore({str(self.path)!r}, passages={self._count}, fingerprint={self.fingerprint[:12]})"

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._cache.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: os may be gone already
            pass

    def __getstate__(self) -> dict:  # picklable for multiprocessing / ray workers: reopen lazily
        return {"path": str(self.path)}

    def __setstate__(self, state: dict) -> None:
        other = PassageStore.open(state["path"])
        self.__dict__.update(other.__dict__)
        other._fds = {}

    # -- low level ---------------------------------------------------------------------------------
    def _block_lines(self, b: int) -> list[bytes]:
        lines = self._cache.get(b)
        if lines is not None:
            self._cache.move_to_end(b)
            return lines
        shard = int(self._block_shard[b])
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(self.path / self.manifest["shards"][shard]["file"], os.O_RDONLY)
        data = os.pread(fd, int(self._block_nbytes[b]), int(self._block_offset[b]))
        raw = zlib.decompress(data) if self._compressed else data
        lines = raw.split(b"\n")
        self._cache[b] = lines
        if len(self._cache) > self._cache_blocks:
            self._cache.popitem(last=False)
        return lines

    def _line(self, record: int) -> bytes:
        b = int(np.searchsorted(self._block_first, record, side="right")) - 1
        return self._block_lines(b)[record - int(self._block_first[b])]

    def _record(self, record: int) -> Passage:
        return _decode_record(self._line(record))

    def _candidates(self, pid: str) -> Iterator[int]:
        """Record numbers whose id hashes like ``pid`` (one, or none; more only on a 64-bit collision)."""
        key = np.uint64(id_hash(pid))
        lo = int(np.searchsorted(self._keys, key, side="left"))
        while lo < len(self._keys) and self._keys[lo] == key:
            yield int(self._records[lo])
            lo += 1

    def _lookup(self, pid: str) -> tuple[int, Passage] | None:
        """(record number, passage) for ``pid``: one block read; the stored id is checked against ``pid``."""
        if not isinstance(pid, str):
            return None
        for record in self._candidates(pid):
            passage = self._record(record)
            if passage.id == pid:
                return record, passage
        return None

    def _find(self, pid: str) -> int | None:
        """The record number of ``pid``, or None."""
        found = self._lookup(pid)
        return None if found is None else found[0]

    def _missing(self, pid: str) -> PassageNotFoundError:
        return PassageNotFoundError(f"passage id {pid!r} is not in this store ({self._count} passages)", path=self.path,
                                    fix="check the id (`berds corpus show` prints a passage) and that the run/index was built on this corpus")

    # -- public reads ------------------------------------------------------------------------------
    def __contains__(self, pid: object) -> bool:
        return isinstance(pid, str) and self._lookup(pid) is not None

    def get(self, pid: str) -> Passage:
        """The passage with id ``pid``; ``PassageNotFoundError`` (an ``InputError`` and ``KeyError``) if absent."""
        found = self._lookup(pid)
        if found is None:
            raise self._missing(pid)
        return found[1]

    __getitem__ = get

    def get_many(self, pids: Sequence[str]) -> list[Passage]:
        """Passages for ``pids`` in the given order.

        Hashing and index search are vectorised, and the lookups are served block by block so a block
        holding several requested passages is decompressed once.
        """
        n = len(pids)
        if n == 0:
            return []
        if len(self._keys) == 0:
            raise self._missing(pids[0])
        keys = np.fromiter((id_hash(p) if isinstance(p, str) else 0 for p in pids), dtype=np.uint64, count=n)
        pos = np.minimum(np.searchsorted(self._keys, keys, side="left"), len(self._keys) - 1)
        hit = np.asarray(self._keys[pos]) == keys
        records = np.asarray(self._records[pos]).astype(np.int64)
        blocks = np.searchsorted(self._block_first, records, side="right") - 1
        out: list[Passage | None] = [None] * n
        for i in np.argsort(np.where(hit, blocks, -1), kind="stable"):
            i = int(i)
            passage = self._record(int(records[i])) if hit[i] else None
            if passage is None or passage.id != pids[i]:
                passage = self.get(pids[i])  # a 64-bit hash collision (or a miss): the careful path decides
            out[i] = passage
        return out  # type: ignore[return-value]

    def _iter_blocks(self) -> Iterator[list[bytes]]:
        for shard_no, shard in enumerate(self.manifest["shards"]):
            (first, last) = np.searchsorted(self._block_shard, [shard_no, shard_no + 1], side="left")
            with open(self.path / shard["file"], "rb") as f:
                for b in range(int(first), int(last)):
                    data = f.read(int(self._block_nbytes[b]))
                    raw = zlib.decompress(data) if self._compressed else data
                    lines = raw.split(b"\n")
                    yield lines[:-1] if lines and not lines[-1] else lines

    def __iter__(self) -> Iterator[Passage]:
        """All passages in store order (the order they were added), streaming shard by shard."""
        for lines in self._iter_blocks():
            for line in lines:
                yield _decode_record(line)

    def iter_batches(self, batch_size: int) -> Iterator[list[Passage]]:
        """Passages in store order, ``batch_size`` at a time (the last batch may be shorter)."""
        if batch_size < 1:
            raise BerdsError(f"batch_size must be at least 1, got {batch_size}")
        batch: list[Passage] = []
        for p in self:
            batch.append(p)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def ids(self) -> Iterator[str]:
        """Passage ids in store order."""
        for lines in self._iter_blocks():
            for line in lines:
                yield json.loads(line)[0]

    def groups(self) -> list[str]:
        """Group names (e.g. question ids of a per-question search corpus) in the order first added."""
        return list(self._group_names)

    def _group_records(self, group: str) -> np.ndarray:
        if group not in self._group_names or self._record_groups is None:
            known = ", ".join(repr(g) for g in self._group_names[:10]) or "none"
            raise PassageNotFoundError(f"group {group!r} is not in this store (groups: {known})", path=self.path,
                                       fix="a per-question corpus groups passages by question id")
        return np.nonzero(np.asarray(self._record_groups) == self._group_names.index(group))[0]

    def group_numbers(self) -> np.ndarray:
        """The group of every passage in store order, as indexes into ``groups()`` (-1: no group).

        One array read instead of one ``group_ids`` call per group: what an index needs to tag its rows.
        """
        if self._record_groups is None:
            return np.full(self._count, -1, dtype=np.int32)
        return np.asarray(self._record_groups, dtype=np.int32)

    def group_ids(self, group: str) -> list[str]:
        """Ids of the passages in ``group``, in store order."""
        return [p.id for p in self.group_passages(group)]

    def group_passages(self, group: str) -> list[Passage]:
        """The passages in ``group``, in store order."""
        return [self._record(int(r)) for r in self._group_records(group)]

    def group_of(self, pid: str) -> str | None:
        """The group a passage was added to, or None."""
        record = self._find(pid)
        if record is None:
            raise self._missing(pid)
        if self._record_groups is None or self._record_groups[record] < 0:
            return None
        return self._group_names[int(self._record_groups[record])]

    def info(self) -> dict[str, Any]:
        """Counts, sizes and identity of the store (what ``berds corpus info`` prints)."""
        files = [p for p in self.path.iterdir() if p.is_file()]
        m = self.manifest
        return {
            "path": str(self.path),
            "passages": self._count,
            "documents": m.get("metadata", {}).get("documents"),
            "groups": len(self._group_names),
            "shards": len(m["shards"]),
            "compression": m.get("compression"),
            "disk_bytes": sum(p.stat().st_size for p in files),
            "data_bytes": sum(s["bytes"] for s in m["shards"]),
            "fingerprint": self.fingerprint,
            "created": m.get("created"),
            "source": m.get("metadata", {}).get("source"),
        }


def write_passage_store(passages: Iterable[Passage], out: str | os.PathLike, **kwargs: Any) -> PassageStore:
    """Write ``passages`` to a new store at ``out`` (options as ``PassageStoreWriter``) and open it."""
    with PassageStoreWriter(out, **kwargs) as writer:
        writer.add_many(passages)
    return PassageStore.open(out)


def load_passages_jsonl(path: str | os.PathLike) -> Iterator[Passage]:
    """Read passages from jsonl records ``{"id", "text", "title"?, "source"?}``; errors name file and line."""
    for lineno, rec in iter_jsonl(path):
        pid = rec.get("id", rec.get("_id"))
        if isinstance(pid, int) and not isinstance(pid, bool):
            pid = str(pid)
        if not isinstance(pid, str) or not pid.strip():
            raise InputError(f"missing or empty \"id\" (got {pid!r})", path=path, line=lineno,
                             fix='each line needs {"id": "...", "text": "..."}')
        text = rec.get("text")
        if not isinstance(text, str):
            raise InputError(f"\"text\" must be a string, got {type(text).__name__}", path=path, line=lineno,
                             record=pid, fix='each line needs {"id": "...", "text": "..."}')
        title = rec.get("title") or ""
        source = rec.get("source") or rec.get("url") or ""
        if not isinstance(title, str) or not isinstance(source, str):
            raise InputError("\"title\" and \"source\" must be strings", path=path, line=lineno, record=pid)
        yield Passage(id=pid, text=text, title=title, source=source)
