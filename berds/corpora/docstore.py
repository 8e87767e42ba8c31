"""The passage store: every corpus berds builds ends up here, and every index and run reads from here.

A store is a folder::

    manifest.json   kind "passage-store", format 3 (2: before record checksums), counts, groups, fingerprint, file sizes, builder metadata
    data.mdb        an LMDB database (https://www.symas.com/lmdb) with three tables:
                      passages  record number (8 bytes, big-endian, so key order = store order) -> passage
                      ids       passage id (utf-8; ids over 480 bytes by their sha256) -> record number
                      meta      what a resumed build needs (count, groups, options), committed with the data
    groups.npy      (only when groups were used) the group number of each record, -1 for none

Why LMDB: ``benchmarks/bench_store_engines.py`` timed SQLite, LMDB, Arrow IPC and Parquet on the same
passages; with both read in one transaction, SQLite took 1.9-2.3x LMDB's time per lookup by id (docs/corpora.md),
and they write and scan about as fast, and is crash-proof by design (copy-on-write pages: a killed writer leaves the last
committed state, nothing to recover). Arrow and Parquet have no key lookup, so they would need the
hand-written id index this module used to carry. docs/corpora.md has the figures.

A passage is stored as ``struct("<iIII")`` (group number, character counts of id, title, source) followed by
id + title + source + text in utf-8 (one decode per read), zlib-compressed when the store was written with
``compression="zlib"`` (~1.9x smaller, a few µs more per lookup), then (format 3) the CRC-32 of all that, 4 bytes
little-endian. The CRC-32 of a whole record is then one constant (``_CRC_RESIDUE``), so every read that decodes a
record (lookups, scans, indexing) checks it with one CRC-32 call (ISA-L's, ~0.1 µs for a 500-byte passage;
zlib's, ~0.3 µs, where isal is not installed) and a changed byte is an error naming the record and its passage,
never a changed passage served or indexed. Format-2 stores (no checksum) are still read: their whole-store reads
recompute the fingerprint instead (``_StreamCheck``), and ``berds corpus upgrade`` rewrites them as format 3 with
the same fingerprint.

Writes are atomic at the folder level: the store is built in ``<out>.building/`` and renamed into place
when the writer closes cleanly. The writer commits every ``shard_size`` passages (and at least every
64 MB); a build that died keeps every committed passage, and ``PassageStoreWriter(out, resume=True)``
reports how many (``writer.resumed_passages``) so a deterministic builder can skip that many and carry on.

The fingerprint is a sha256 over every passage's id, title and text (and group, when one is set) in
store order. It does not depend on the storage format, commit size or compression, so the same passages
always give the same fingerprint; indexes and runs record it to prove which corpus they came from.
``PassageStore.verify()`` (``berds corpus info --verify``) reads everything back and recomputes it.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import threading
import weakref
import zlib
from array import array
from itertools import islice
from operator import attrgetter
from json.encoder import encode_basestring as _json_string
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import lmdb
import numpy as np

from berds.errors import BerdsError, InputError
from berds.io import (
    MAX_TEXT_CHARS_ENV,
    empty_folder,
    iter_jsonl,
    lock_folder,
    new_manifest,
    no_gc,
    read_json,
    refused_write,
    text_limit,
    write_json,
)
from berds.types import Hit, Passage, hits_of, plain_scores

STORE_KIND = "passage-store"
STORE_FORMAT = 3
READ_FORMATS = (2, 3)  # 2: records without a checksum (berds before issue 33), read with store-level checks
DATA_FILE = "data.mdb"
GROUPS_FILE = "groups.npy"
_MAP_SIZE = 1 << 40  # address space only: LMDB grows the file as it writes (Linux/macOS keep it sparse)
_TXN_BYTES = 64 << 20  # LMDB holds a write transaction's pages in memory until commit: this bounds the writer
_MAX_KEY = 480  # LMDB keys are at most 511 bytes
_WRITE_BATCH = 128  # passages PassageStoreWriter.add_many encodes and puts at once (measured: 32-1,024 alike)
_REC = struct.Struct(">Q")
_HEAD = struct.Struct("<iIII")  # group number; character counts of id, title, source
_HEAD_SIZE = _HEAD.size
_CRC = struct.Struct("<I")  # format 3: a record ends with the CRC-32 of what comes before it
_CRC_SIZE = _CRC.size
_CRC_RESIDUE = 0x2144DF1C  # zlib.crc32(data + crc32(data) little-endian) for any data: one call checks a record
try:  # ISA-L's CRC-32: the same function as zlib's (same values), ~3x faster (102 vs 289 ns a
    # ~600-byte record: benchmarks/bench_integrity_checks.py --only-checksums)
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # (a core dependency; zlib's where a platform has no isal wheel)
    _crc32 = zlib.crc32

__all__ = [
    "PassageStoreWriter",
    "PassageStore",
    "PassageNotFoundError",
    "DuplicatePassageIdError",
    "PassageRefusedError",
    "write_passage_store",
    "upgrade_passage_store",
    "load_passages_jsonl",
    "estimate_store_size",
    "is_passage_store",
    "human_bytes",
]


class PassageNotFoundError(InputError, KeyError):
    """A passage id that is not in the store (a ``KeyError`` too, so ``dict``-style code works)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def _id_key(pid: str) -> bytes:
    key = pid.encode("utf-8")
    return key if len(key) <= _MAX_KEY else b"\xff" + hashlib.sha256(key).digest()  # 0xff never starts utf-8


# Bytes json's string escaper (ensure_ascii=False) changes: control characters, '"' and '\\'. UTF-8 never
# uses ASCII bytes inside a multi-byte character, so a field's UTF-8 bytes without these ARE its JSON body.
_JSON_PLAIN = bytes(0 if (i < 0x20 or i in b'"\\') else 1 for i in range(256))


def _json_bytes(value: str, utf8: bytes) -> bytes:
    """``json.dumps(value, ensure_ascii=False).encode()`` given ``utf8 = value.encode()``: checking for bytes
    that need escaping is ~4x faster than the escaper, and most passages have none."""
    if b"\x00" in utf8.translate(_JSON_PLAIN):
        return _json_string(value).encode("utf-8")
    return b'"' + utf8 + b'"'


def _fingerprint_bytes(p: Passage, group: str | None) -> bytes:
    """``json.dumps([id, title, text(, group)], ensure_ascii=False, separators=(",", ":")) + "\\n"`` in UTF-8:
    what the store's fingerprint hashes per passage (``PassageStoreWriter.add`` inlines the same steps)."""
    parts = [b"[", _json_bytes(p.id, p.id.encode("utf-8")), b",", _json_bytes(p.title, p.title.encode("utf-8")),
             b",", _json_bytes(p.text, p.text.encode("utf-8"))]
    if group is not None:
        parts += [b",", _json_string(group).encode("utf-8")]
    parts.append(b"]\n")
    return b"".join(parts)


_new_passage = object.__new__
_passage_id = attrgetter("id")


class PassageRefusedError(InputError):
    """A passage the writer refuses; ``what`` is the message without the place, for builders that know the input line."""

    def __init__(self, what: str, **where: Any):
        super().__init__(what, **where)
        self.what = what


class DuplicatePassageIdError(PassageRefusedError):
    """A passage id added twice."""


class StoreDamagedError(InputError):
    """A passage store whose files were changed on disk (a read found it): rebuild the store."""


class DamagedRecordError(ValueError):
    """A stored record whose header does not fit its contents (its field lengths run past its end)."""


class ChecksumError(DamagedRecordError):
    """A format-3 record whose bytes do not give the CRC-32 written at its end."""

    def __init__(self) -> None:
        super().__init__("fails its checksum (the CRC-32 written with it)")


# what decoding a damaged record raises (reads turn each into the store's "damaged" InputError)
_DECODE_ERRORS = (UnicodeDecodeError, struct.error, zlib.error, DamagedRecordError)


def _decode(value: bytes) -> Passage:
    """A stored record back to a Passage: one utf-8 decode, then slices by character counts.

    Passage's checks are not run again (the passage passed them when written): this is the hot path of
    every lookup and scan.
    """
    _, a, t, s = _HEAD.unpack_from(value)
    text = value[_HEAD_SIZE:].decode("utf-8")
    e2 = a + t
    e3 = e2 + s
    if e3 > len(text) or not a:  # a damaged header: slicing would shift fields into each other silently
        raise DamagedRecordError(f"record header says {a}+{t}+{s} characters of id, title and source in {len(text)}")
    p = _new_passage(Passage)
    d = p.__dict__
    d["id"] = text[:a]
    d["text"] = text[e3:]
    d["title"] = text[a:e2]
    d["source"] = text[e2:e3]
    return p


def _decode_zlib(value: bytes) -> Passage:
    return _decode(value[:_HEAD_SIZE] + zlib.decompress(value[_HEAD_SIZE:]))


def _decode_crc(value: bytes) -> Passage:
    """A format-3 record (``_decode`` after its checksum): the one-record case of ``_decode_crc_many``."""
    return _decode_crc_many((value,))[0]


def _decode_crc_many(values: Sequence[bytes], scores: Sequence[float] | None = None,
                     ids: list[str] | None = None) -> list[Any]:
    """Format-3 records (``_decode`` after each one's checksum) in one loop: no call per record, ~10% of a batch
    read by record number, where a dense search's hits spend their time.

    With ``scores`` (as many as ``values``, plain floats, none NaN: ``berds.types.plain_scores``) each record
    becomes ``Hit(passage, score)`` instead and its passage id is appended to ``ids``: a dense search's hits made
    in the pass that decodes them (``PassageStore.get_hits``), not in a second loop over the passages."""
    out: list[Any] = []
    add, crc, unpack, new, head, tail = out.append, _crc32, _HEAD.unpack_from, _new_passage, _HEAD_SIZE, -_CRC_SIZE
    hits = scores is not None
    add_id = ids.append if ids is not None else None
    for value, score in zip(values, scores if hits else values):  # (score unused without scores)
        if crc(value) != _CRC_RESIDUE:
            raise ChecksumError()
        _, a, t, s = unpack(value)
        text = value[head:tail].decode("utf-8")
        e2 = a + t
        e3 = e2 + s
        if e3 > len(text) or not a:
            raise DamagedRecordError(f"record header says {a}+{t}+{s} characters of id, title and source in {len(text)}")
        p = new(Passage)
        d = p.__dict__
        d["id"] = pid = text[:a]
        d["text"] = text[e3:]
        d["title"] = text[a:e2]
        d["source"] = text[e2:e3]
        if hits:  # (Hit.__init__'s checks are met by plain_scores: the fields are set as hits_of sets them)
            h = new(Hit)
            hd = h.__dict__
            hd["passage"] = p
            hd["score"] = score
            add(h)
            add_id(pid)  # type: ignore[misc]
        else:
            add(p)
    return out


def _decode_crc_zlib(value: bytes) -> Passage:
    if _crc32(value) != _CRC_RESIDUE:
        raise ChecksumError()
    return _decode(value[:_HEAD_SIZE] + zlib.decompress(value[_HEAD_SIZE:-_CRC_SIZE]))


def _decoder(compressed: bool, checksummed: bool = True) -> Callable[[bytes], Passage]:
    if checksummed:
        return _decode_crc_zlib if compressed else _decode_crc
    return _decode_zlib if compressed else _decode


def _record(group: int, a: int, t: int, s: int, payload: bytes) -> bytes:
    """A format-3 record: header, payload (utf-8 fields, compressed or not), the CRC-32 of both."""
    head = _HEAD.pack(group, a, t, s)
    return b"".join((head, payload, _CRC.pack(_crc32(payload, _crc32(head)))))


def _record_body(value: bytes, compressed: bool, checksummed: bool) -> bytes:
    """The utf-8 fields of a record (id + title + source + text), unchecked: for naming a damaged record."""
    body = value[_HEAD_SIZE:-_CRC_SIZE] if checksummed else value[_HEAD_SIZE:]
    if not compressed:
        return body
    inflate, out = zlib.decompressobj(), []
    for i in range(0, len(body), 16):  # as far as the damage: the id comes first
        try:
            out.append(inflate.decompress(body[i:i + 16]))
        except zlib.error:
            break
    return b"".join(out)


def _group_number(value: bytes) -> int:
    return _HEAD.unpack_from(value)[0]


def _ascii_line(body: bytes, a: int, t: int, s: int) -> bytes | None:
    """The fingerprint line (no group) of a record body that is ASCII with nothing to escape, sliced from the bytes as
    stored (character counts are byte counts then); None otherwise (the general path encodes the fields)."""
    if body.isascii() and b"\x00" not in body.translate(_JSON_PLAIN):
        return b"".join((b'["', body[:a], b'","', body[a:a + t], b'","', body[a + t + s:], b'"]\n'))
    return None


def _json_utf8(utf8: bytes) -> bytes:
    """``json.dumps(text, ensure_ascii=False).encode()`` from the UTF-8 bytes of ``text``."""
    if b"\x00" in utf8.translate(_JSON_PLAIN):
        return _json_string(utf8.decode("utf-8")).encode("utf-8")
    return b'"' + utf8 + b'"'


class _StreamCheck:
    """The store's fingerprint recomputed over a whole-store read, record by record (``iter_passages(verify=True)``)
    of a format-2 store (format 3 checks each record's CRC-32 instead, as it is decoded).

    Format-2 records carry no checksum of their own, so a flipped bit that keeps a record decodable is found when the
    stream ends: the last batch is then refused, so an index or encoding reading the stream is never finished
    from it. A record that cannot be decoded, a record number out of sequence or a group number outside the
    store's groups is named as it is read. Costs about as much as the read itself (``docs/reliability.md``)."""

    __slots__ = ("store", "n", "_lines", "_hash", "_groups")

    def __init__(self, store: "PassageStore"):
        self.store, self.n = store, 0
        self._hash = hashlib.sha256()
        self._lines: list[bytes] = []  # hashed 1,024 at a time: one call, which lets go of the GIL (hashlib does
        # for more than 2 KB), so a reader thread hashes while Lucene indexes
        self._groups = [_json_string(g).encode("utf-8") for g in store._group_names]

    def add(self, value: bytes, line: bytes) -> None:
        """One record: ``line`` is its fingerprint line without a group; the group comes from the record header."""
        g = _group_number(value)
        if g != -1:
            if not 0 <= g < len(self._groups):
                raise self.store._damaged(ValueError(f"record {self.n} has group number {g}; the store has "
                                                     f"{len(self._groups)} groups"))
            line = line[:-2] + b"," + self._groups[g] + b"]\n"
        self._lines.append(line)
        self.n += 1
        if len(self._lines) >= 1024:
            self._hash.update(b"".join(self._lines))
            self._lines.clear()

    def finish(self) -> None:
        store = self.store
        self._hash.update(b"".join(self._lines))
        self._lines.clear()
        if self.n != store._count or self._hash.hexdigest() != store.fingerprint:
            raise StoreDamagedError(f"the passage store is damaged: the {self.n:,} passages read do not give the fingerprint "
                             f"its manifest.json records ({store._count:,} passages) — a record was changed on disk "
                             f"(`berds corpus info --verify {store.path}` checks it)", path=store.path / DATA_FILE,
                             fix=_rebuild_hint(store.path, store.manifest))


def is_passage_store(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder holding a finished passage store (of this or an older format)."""
    manifest = Path(path) / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        return read_json(manifest).get("kind") == STORE_KIND
    except (BerdsError, AttributeError):
        return False


def estimate_store_size(n_passages: int, avg_passage_bytes: float = 620.0, *, compression: str = "none") -> dict[str, int]:
    """Expected disk use and peak writer memory for a store of ``n_passages``, in bytes.

    ``avg_passage_bytes`` is the utf-8 size of one passage with its title (a DPR passage is ~620 bytes).
    Measured with ``benchmarks/bench_corpora.py``: a passage record costs its bytes plus ~40 bytes of header
    and B-tree node, pages ~10% slack; the id table ~60 bytes per passage. zlib (per passage) shrinks text ~1.9x.
    The writer holds one uncommitted transaction in memory (at most 64 MB) plus 4 bytes per passage when
    groups are used.
    """
    ratio = 1.9 if compression == "zlib" else 1.0
    data = int(n_passages * (avg_passage_bytes / ratio + 40) * 1.1)
    index = n_passages * 60
    return {"disk_bytes": data + index, "data_bytes": data, "index_bytes": index,
            "writer_memory_bytes": min(_TXN_BYTES, data) + n_passages * 4}


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"


# What a build folder may hold: the database, its lock table, and what close() writes before the rename.
_BUILD_FILES = {DATA_FILE, "lock.mdb", GROUPS_FILE, "manifest.json"}


def _is_build_database(folder: Path) -> bool:
    """Whether ``folder/data.mdb`` is an LMDB database with the writer's tables (passages, ids, meta)."""
    if not (folder / DATA_FILE).is_file():
        return False
    try:
        env = lmdb.open(str(folder), readonly=True, lock=False, max_dbs=3)
    except lmdb.Error:
        return False
    try:
        with env.begin() as txn:
            return all(txn.get(name) is not None for name in (b"passages", b"ids", b"meta"))
    except lmdb.Error:
        return False
    finally:
        env.close()


def check_store_out(out: Path, *, overwrite: bool) -> None:
    """The store writer's rules for ``out``, also checked by builders before any work: an existing store needs
    ``overwrite``; a file or a non-empty folder that is not a store is never replaced."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if is_passage_store(out):
        if not overwrite:
            raise InputError("a passage store already exists here", path=out,
                             fix="pass overwrite=True (CLI: --overwrite) to replace it, or choose another --out")
        return
    if overwrite:
        raise InputError("exists and is not a passage store; refusing to overwrite it", path=out,
                         fix="remove it yourself or choose another output folder")
    raise InputError("exists and is not an empty folder or a passage store", path=out, fix="choose another output folder")


def check_building_folder(building: Path) -> None:
    """Refuse a ``<out>.building`` that berds did not make: the writer deletes or resumes it, and it may hold
    someone's files."""
    if not building.exists() and not building.is_symlink():
        return
    fix = "move it away or choose another --out"
    if building.is_symlink() or not building.is_dir():
        raise InputError("is in the way of the build: it is not a folder of an interrupted berds build",
                         path=building, fix=fix)
    entries = {p.name for p in building.iterdir()}
    if not entries:
        return  # an empty folder: nothing to lose
    others = sorted(n for n in entries if n not in _BUILD_FILES and not n.startswith(".manifest.json."))
    if others or not _is_build_database(building):
        shown = ", ".join(others[:5]) if others else f"{DATA_FILE} is not a berds build database"
        raise InputError(f"is in the way of the build: it is not a folder of an interrupted berds build "
                         f"({shown})", path=building, fix=fix)


def _lock_building(building: Path) -> int | None:
    """An exclusive lock on the build folder (made when missing), held by the open descriptor returned (None where
    the platform has no flock). Two builds of one --out at once both wrote into it (LMDB lets writers take turns)
    and the first to finish moved it into place under the other: a store its own size check then refused as
    damaged. The lock is taken again when the folder at that path changed between opening and locking it (made
    by the other build, or moved into place by it): a lock on a folder no longer there holds nothing."""
    for _ in range(100):
        building.mkdir(parents=True, exist_ok=True)
        try:
            fd = lock_folder(building, what="berds build")
        except FileNotFoundError:  # (moved away just now)
            continue
        if fd is None:
            return None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(building)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise InputError("another berds build keeps replacing this folder", path=building,
                     fix="wait for it to finish, or choose another --out")


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _open_env(path: Path, *, write: bool) -> lmdb.Environment:
    if write:
        return lmdb.open(str(path), map_size=_MAP_SIZE, max_dbs=3, sync=False, metasync=False, meminit=False)
    return lmdb.open(str(path), readonly=True, lock=False, max_dbs=3)


class PassageStoreWriter:
    """Write passages into a new store folder; use as a context manager.

    ``with PassageStoreWriter("corpora/wiki") as w: w.add_many(passages)`` — on a clean exit the last
    transaction is committed, ``manifest.json`` (with the fingerprint) is written last and the folder is moved
    into place. On an exception nothing replaces ``out`` and the partial build stays in ``<out>.building/``
    (``resume=True`` picks it up).

    Options:
        shard_size:  passages per committed transaction: the unit a killed build can lose and resume after.
        overwrite:   replace an existing store at ``out`` (otherwise that is an error).
        metadata:    JSON-serialisable builder facts stored in the manifest (source files, options, counts).
        compression: ``"none"`` (default, fastest lookups) or ``"zlib"`` (each text compressed, ~1.9x smaller).
        resume:      keep the committed passages of an interrupted build of ``out``; see ``resumed_passages``.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        *,
        shard_size: int = 100_000,
        overwrite: bool = False,
        metadata: dict | None = None,
        compression: str = "none",
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
        self._compressed = compression == "zlib"
        self.building = self.out.with_name(self.out.name + ".building")
        self.resumed_passages = 0
        self.identity = identity  # inputs + options, kept in the checkpoint
        self.resume_check = resume_check  # recorded identity -> why it cannot resume (None: it can)

        check_store_out(self.out, overwrite=overwrite)

        self._count = 0
        self._fingerprint = hashlib.sha256()
        self._text_limit = text_limit()  # (BERDS_MAX_TEXT_CHARS: a 60 MB passage costs GBs in every later stage)
        self._groups: dict[str, int] = {}
        self._record_groups = array("i")
        self._uses_groups = False
        self._txn_passages = 0
        self._txn_bytes = 0
        self._closed = False

        # held from before the folder is checked and cleared until it is moved into place (or the build stops);
        # the folder is emptied, not replaced, so the lock stays on the folder the build writes into
        in_the_way = self.building.is_symlink() or (self.building.exists() and not self.building.is_dir())
        self._lock = None if in_the_way else _lock_building(self.building)
        try:
            check_building_folder(self.building)
            resuming = resume and (self.building / DATA_FILE).is_file()
            if not resuming:
                empty_folder(self.building)
            else:
                (self.building / "lock.mdb").unlink(missing_ok=True)  # a killed writer's lock table; we are the only writer
            try:
                self._env = _open_env(self.building, write=True)
                self._passages = self._env.open_db(b"passages")
                self._ids = self._env.open_db(b"ids")
                self._meta = self._env.open_db(b"meta")
            except lmdb.Error as e:
                raise InputError(f"cannot open the interrupted build ({e})", path=self.building,
                                 fix="build afresh without --resume") from None
            if resuming:
                self._resume()
            self._txn = self._env.begin(write=True)
        except BaseException:
            _unlock(self._lock)
            raise

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
        # Runs once per stored passage (21M for Wikipedia): the fields are encoded once and shared by the id key,
        # the fingerprint and the record, and the common path makes no other function calls.
        if self._closed:
            raise BerdsError("this PassageStoreWriter is closed")
        if type(passage) is not Passage and not isinstance(passage, Passage):
            raise InputError(f"expected a berds.types.Passage, got {type(passage).__name__}", path=self.out)
        if group is not None and (not isinstance(group, str) or not group):
            raise InputError(f"group must be a non-empty string, got {group!r}", record=passage.id, path=self.out)
        pid, title, text = passage.id, passage.title, passage.text
        if len(text) > self._text_limit:
            raise PassageRefusedError(f"passage {pid!r} has {len(text):,} characters of text, over the limit of "
                                      f"{self._text_limit:,}", path=self.out, record=pid,
                                      fix=f"split the document into passages, or raise the limit ({MAX_TEXT_CHARS_ENV}=N)")
        try:
            id_b, title_b, source_b, text_b = pid.encode("utf-8"), title.encode("utf-8"), passage.source.encode("utf-8"), text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate (JSON's "\ud800" escapes decode to one): UTF-8 has no bytes for it
            raise PassageRefusedError(f"passage {pid!r} holds a lone surrogate ({e.object[e.start:e.end]!r}), which UTF-8 "
                             "cannot store", path=self.out, record=pid,
                             fix="fix the source text (a broken \\uXXXX escape), or drop the passage") from None
        record = _REC.pack(self._count)
        id_key = id_b if len(id_b) <= _MAX_KEY else _id_key(pid)
        txn = self._txn
        if not txn.put(id_key, record, db=self._ids, overwrite=False):
            first = _REC.unpack(txn.get(id_key, db=self._ids))[0]
            raise DuplicatePassageIdError(
                f"duplicate passage id {pid!r} (first added as passage number {first + 1})",
                path=self.out, fix="passage ids must be unique within a store",
            )
        gi = -1 if group is None and not self._uses_groups else self._group_number(group)
        payload = b"".join((id_b, title_b, source_b, text_b))  # _decode slices them back by character counts
        if b"\x00" in payload.translate(_JSON_PLAIN):  # something to escape (rare): the reference encoder
            self._fingerprint.update(_fingerprint_bytes(passage, group))
        else:  # the fields are their own JSON bodies: one join, no escaper
            self._fingerprint.update(b"".join((b'["', id_b, b'","', title_b, b'","', text_b, b'"]\n' if group is None
                                               else b'",' + _json_string(group).encode("utf-8") + b"]\n")))
        if self._compressed:
            payload = zlib.compress(payload, 3)
        head = _HEAD.pack(gi, len(pid), len(title), len(passage.source))
        value = b"".join((head, payload, _CRC.pack(_crc32(payload, _crc32(head)))))  # (= _record(...))
        txn.put(record, value, db=self._passages, append=True)
        self._count += 1
        self._txn_passages += 1
        self._txn_bytes += len(value) + len(id_key)
        if self._txn_passages >= self.shard_size or self._txn_bytes >= _TXN_BYTES:
            self._commit()

    def _group_number(self, group: str | None) -> int:
        """The group number of the passage being added (-1: none), recorded per passage once any has a group."""
        if group is None:
            self._record_groups.append(-1)
            return -1
        gi = self._groups.setdefault(group, len(self._groups))
        if not self._uses_groups:
            self._uses_groups = True
            self._record_groups.extend([-1] * self._count)
        self._record_groups.append(gi)
        return gi

    def add_many(self, passages: Iterable[Passage], *, group: str | None = None) -> int:
        """Append passages in order (all to ``group``, or none); returns how many were added.

        The same store as ``add`` one by one (the same record bytes, fingerprint and commits, the same errors at
        the same passage), written a batch at a time: the records and id-table entries of up to 128 passages
        go to LMDB in one ``putmulti`` each and the fingerprint takes one update, where ``add`` makes two puts
        and an update per passage. A batch that holds anything ``add`` would refuse (or a repeated id) is
        undone and added one by one, so the error comes from ``add`` at the passage that caused it."""
        if self._closed:
            raise BerdsError("this PassageStoreWriter is closed")
        n = 0
        it = iter(passages)
        pending: list[Passage] = []
        while True:
            if not pending:
                pending = list(islice(it, _WRITE_BATCH))
                if not pending:
                    return n
            room = self.shard_size - self._txn_passages  # (a batch never crosses a commit: commits stay where add puts them)
            # A batch's lists of tuples would start the cycle collector (over every object the process holds) again
            # and again; none is cyclic, and all are freed when the batch ends, so it is paused for the batch only
            # (not around the producer above, whose garbage may be cyclic; no_gc's freeze would age what is young).
            enabled = gc.isenabled()
            gc.disable()
            try:
                done = self._add_batch(pending if len(pending) <= room else pending[:room], group)
            finally:
                if enabled:
                    gc.enable()
            n += done
            pending = pending[done:]

    def _add_batch(self, batch: list[Passage], group: str | None) -> int:
        """Add the first passages of ``batch`` (at least one, at most as many as fit the transaction's byte bound)
        the way ``add`` would; returns how many. Stops before a passage ``add`` must judge (another type, a text
        over the limit, a lone surrogate) and leaves it to ``add`` when it comes first."""
        if group is not None and (not isinstance(group, str) or not group):
            self.add(batch[0], group=group)  # (raises add's error)
        gi = -1 if group is None else self._groups.get(group, len(self._groups))
        tail = b'"]\n' if group is None else b'",' + _json_string(group).encode("utf-8") + b"]\n"
        limit, count, compressed, plain = self._text_limit, self._count, self._compressed, _JSON_PLAIN
        budget = max(_TXN_BYTES - self._txn_bytes, 1)
        head_pack, rec_pack, crc_pack, crc = _HEAD.pack, _REC.pack, _CRC.pack, _crc32
        records, keys, lines = [], [], []
        add_record, add_key, add_line = records.append, keys.append, lines.append
        size = 0
        for p in batch:
            if type(p) is not Passage:
                break
            pid, title, source, text = p.id, p.title, p.source, p.text
            if len(text) > limit:
                break
            try:
                id_b, title_b, source_b, text_b = pid.encode(), title.encode(), source.encode(), text.encode()  # (UTF-8)
            except UnicodeEncodeError:
                break
            payload = b"".join((id_b, title_b, source_b, text_b))
            if b"\x00" in payload.translate(plain):  # something to escape (rare): the reference encoder
                add_line(_fingerprint_bytes(p, group))
            else:
                add_line(b"".join((b'["', id_b, b'","', title_b, b'","', text_b, tail)))
            if compressed:
                payload = zlib.compress(payload, 3)
            head = head_pack(gi, len(pid), len(title), len(source))
            record = rec_pack(count)
            value = b"".join((head, payload, crc_pack(crc(payload, crc(head)))))
            id_key = id_b if len(id_b) <= _MAX_KEY else _id_key(pid)
            add_record((record, value))
            add_key((id_key, record))
            count += 1
            size += len(value) + len(id_key)
            if size >= budget:
                break
        k = len(records)
        if not k:
            self.add(batch[0], group=group)  # (raises add's error, or adds a Passage subclass)
            return 1
        txn = self._txn
        try:
            with txn.cursor(db=self._ids) as cursor:
                consumed, added = cursor.putmulti(keys, overwrite=False)
            if added != consumed:  # a repeated id: undo this batch's entries; add names the passage
                for id_key, record in keys:
                    if txn.get(id_key, db=self._ids) == record:
                        txn.delete(id_key, db=self._ids)
                for p in batch[:k]:
                    self.add(p, group=group)
                return k
            with txn.cursor(db=self._passages) as cursor:
                cursor.putmulti(records, append=True)
        except lmdb.Error as e:
            raise refused_write(e, self.building / DATA_FILE) or e from None
        self._fingerprint.update(b"".join(lines))
        if group is not None or self._uses_groups:
            self._group_number(group)  # (the first: registers the group, starts the per-record table)
            self._record_groups.extend([gi] * (k - 1))
        self._count = count
        self._txn_passages += k
        self._txn_bytes += size
        if self._txn_passages >= self.shard_size or self._txn_bytes >= _TXN_BYTES:
            self._commit()
        return k

    def _commit(self) -> None:
        """Commit what was added so far, with what a resumed build needs to carry on from it."""
        try:
            self._txn.put(b"state", json.dumps({
                "passages": self._count, "compression": self.compression, "groups": list(self._groups),
                "format": STORE_FORMAT,
                **({"identity": self.identity} if self.identity is not None else {}),
            }).encode(), db=self._meta)
            self._txn.commit()
            self._env.sync(True)
        except lmdb.Error as e:  # (a full disk or the file-size limit: LMDB writes at commit)
            self._txn = self._env.begin(write=True)  # (the failed one is gone: abort() and a resume start from here)
            raise refused_write(e, self.building / DATA_FILE) or e from None
        self._txn = self._env.begin(write=True)
        self._txn_passages = self._txn_bytes = 0

    # -- resume ----------------------------------------------------------------------------------------
    def _resume(self) -> None:
        with self._env.begin() as txn:
            raw = txn.get(b"state", db=self._meta)
            if raw is None:  # killed before its first commit: nothing to keep
                return
            state = json.loads(raw)
            if state.get("format") != STORE_FORMAT:  # (records of another layout: the store would mix two)
                raise InputError(f"the interrupted build was written in store format {state.get('format', 2)} by an "
                                 f"older berds; this one writes format {STORE_FORMAT}", path=self.building,
                                 fix="build afresh without --resume")
            if state["compression"] != self.compression:
                raise InputError(
                    f"the interrupted build used compression={state['compression']!r}",
                    path=self.building, fix="resume with the same options, or build afresh without --resume",
                )
            problem = self.resume_check(state.get("identity")) if self.resume_check is not None else None
            if problem:
                raise InputError(f"cannot resume: {problem}; resuming would mix two corpora in one store",
                                 path=self.building, fix="resume with the same input files and options, or build "
                                                         "afresh without --resume")
            names = state["groups"]
            self._groups = {g: i for i, g in enumerate(names)}
            groups = array("i")
            # Read the committed passages once: restores the fingerprint state and the group table.
            decode = _decoder(self._compressed)
            with txn.cursor(db=self._passages) as cursor:
                for value in cursor.iternext(keys=False, values=True):
                    try:
                        p = decode(value)
                    except _DECODE_ERRORS as e:
                        raise InputError(f"the interrupted build holds a damaged passage (record {self._count}: {e})",
                                         path=self.building, fix="build afresh without --resume") from None
                    g = _group_number(value)
                    groups.append(g)
                    self._fingerprint.update(_fingerprint_bytes(p, names[g] if g >= 0 else None))
                    self._count += 1
        if self._count != state["passages"]:
            raise InputError(f"the interrupted build says {state['passages']} passages but holds {self._count}",
                             path=self.building, fix="build afresh without --resume")
        if any(g >= 0 for g in groups):
            self._uses_groups = True
            self._record_groups = groups
        self.resumed_passages = self._count

    # -- finishing -------------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """The fingerprint of the passages added so far."""
        return self._fingerprint.hexdigest()

    def close(self) -> "PassageStore":
        """Finish the store: commit, write the manifest, move the folder into place."""
        if self._closed:
            return PassageStore.open(self.out)
        self._commit()
        self._txn.abort()
        try:
            # Record a map size that fits the finished file, so readers reserve that much address space, not 1 TB.
            self._env.set_mapsize((self.building / DATA_FILE).stat().st_size + (4 << 20))
            with self._env.begin(write=True) as txn:
                txn.put(b"finished", b"1", db=self._meta)
        except lmdb.Error as e:
            self._txn = self._env.begin(write=True)
            raise refused_write(e, self.building / DATA_FILE) or e from None
        self._env.close()
        self._closed = True
        (self.building / "lock.mdb").unlink(missing_ok=True)
        files = {DATA_FILE: (self.building / DATA_FILE).stat().st_size}
        group_counts: dict[str, int] = {}
        if self._uses_groups:
            rg = np.frombuffer(self._record_groups, dtype=np.int32)
            np.save(self.building / GROUPS_FILE, rg)
            files[GROUPS_FILE] = (self.building / GROUPS_FILE).stat().st_size
            counts = np.bincount(rg[rg >= 0], minlength=len(self._groups)) if len(rg) else np.zeros(len(self._groups), int)
            group_counts = {g: int(counts[i]) for g, i in self._groups.items()}
        manifest = new_manifest(
            STORE_KIND,
            format=STORE_FORMAT,
            engine=f"lmdb {'.'.join(map(str, lmdb.version()))}",
            passages=self._count,
            fingerprint=self.fingerprint,
            compression=self.compression,
            files=files,
            groups=group_counts,
            metadata=self.metadata,
        )
        write_json(self.building / "manifest.json", manifest)
        if self.out.exists():
            # a folder of our own for the replaced store: a fixed "<out>.old" could be someone's
            old_root = Path(tempfile.mkdtemp(dir=self.out.parent, prefix=self.out.name + ".old-"))
            old = old_root / self.out.name
            os.replace(self.out, old)
            try:
                os.replace(self.building, self.out)
            except OSError:
                os.replace(old, self.out)  # put the old store back
                old_root.rmdir()
                raise
            shutil.rmtree(old_root)
        else:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.building, self.out)
        _unlock(self._lock)
        self._record_groups = array("i")
        return PassageStore.open(self.out)

    def abort(self) -> None:
        """Stop without finishing; committed passages stay in ``<out>.building/`` for ``resume=True``. With
        none committed the folder goes (while still locked): it held nothing to resume, yet `corpus info` and
        the next build's advice pointed to it (every input error before the first commit left one behind)."""
        if self._closed:
            return
        self._txn.abort()
        self._env.close()
        self._closed = True
        if self._count - self._txn_passages == 0:
            shutil.rmtree(self.building, ignore_errors=True)
        _unlock(self._lock)


# LMDB allows one open environment per file and process: stores opened on the same data file share it
# (keyed by device and inode, so a store rebuilt at the same path gets a fresh one).
_READERS: "weakref.WeakValueDictionary[tuple[int, int], lmdb.Environment]" = weakref.WeakValueDictionary()
_READERS_LOCK = threading.Lock()
_OPEN_STORES: "weakref.WeakSet[PassageStore]" = weakref.WeakSet()


def _reader_env(path: Path) -> lmdb.Environment:
    st = os.stat(path / DATA_FILE)
    key = (st.st_dev, st.st_ino)
    with _READERS_LOCK:
        env = _READERS.get(key)
        if env is None:
            env = _READERS[key] = _open_env(path, write=False)
        return env


def _forget_environments_after_fork() -> None:
    # LMDB environments must not cross fork(): the child drops its copies (read-only, unlocked: closing
    # them only unmaps the child's view) and its stores reopen on first use.
    for store in list(_OPEN_STORES):
        store._forget()
    for env in list(_READERS.values()):
        try:
            env.close()
        except Exception:
            pass
    _READERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_environments_after_fork)


class PassageStore:
    """Read access to a finished passage store: ``len``, ``in``, ``get``/``[]``, iteration in store order.

    Open with ``PassageStore.open(path)``. The database is memory-mapped: opening reads almost nothing, a
    lookup is two B+tree searches in the page cache. Safe to share between threads (each thread gets its own
    read transaction), to pickle (it reopens by path) and to use across ``fork``.
    """

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self.fingerprint: str = manifest["fingerprint"]
        self._count = int(manifest["passages"])
        self.format: int = manifest["format"]
        self._checksummed = self.format >= 3  # records end with their CRC-32 (checked by every decode)
        self._compressed = manifest.get("compression") == "zlib"
        self._decode = _decoder(self._compressed, self._checksummed)
        self._group_names = list(manifest.get("groups", {}))
        gpath = path / GROUPS_FILE
        self._record_groups = np.load(gpath, mmap_mode="r") if gpath.exists() else None
        self._env: lmdb.Environment | None = None
        self._local = threading.local()
        self._connect()
        _OPEN_STORES.add(self)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "PassageStore":
        """Open the store folder at ``path``; a clear ``InputError`` when it is not one or is damaged."""
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
        if manifest.get("format") == 1:
            raise InputError("this passage store was written by an older berds (store format 1)", path=path,
                             fix=f"convert it in place with `berds corpus upgrade {path}` (same passages, same fingerprint)")
        if manifest.get("format") not in READ_FORMATS:
            raise InputError(f"passage store format {manifest.get('format')!r} is not supported (this berds reads "
                             f"formats {', '.join(map(str, READ_FORMATS))})", path=path,
                             fix="rebuild the store with this version of berds")
        problem = _manifest_problem(manifest)
        if problem:
            hint = _rebuild_hint(path, manifest if isinstance(manifest.get("metadata") or {}, dict) else {})
            raise InputError(f"manifest.json is damaged ({problem})", path=path, fix=hint)
        for name, size in manifest.get("files", {}).items():
            f = path / name
            if not f.is_file():
                raise InputError(f"passage store is incomplete: {name} is missing", path=path, fix=_rebuild_hint(path, manifest))
            if f.stat().st_size != size:
                raise InputError(f"{name} is {f.stat().st_size:,} bytes but was written as {size:,}: the file is truncated "
                                 "or damaged", path=path, fix=_rebuild_hint(path, manifest))
        return cls(path, manifest)

    def __repr__(self) -> str:
        return f"PassageStore({str(self.path)!r}, passages={self._count}, fingerprint={self.fingerprint[:12]})"

    def __len__(self) -> int:
        return self._count

    # -- the LMDB environment and per-thread read transactions ---------------------------------------
    def _connect(self) -> None:
        try:
            self._env = _reader_env(self.path)
            self._passages = self._env.open_db(b"passages", create=False)
            self._ids = self._env.open_db(b"ids", create=False)
            with self._env.begin() as txn:  # (LMDB keeps the counts: no read of the records)
                counts = txn.stat(self._passages)["entries"], txn.stat(self._ids)["entries"]
        except (lmdb.Error, OSError) as e:
            raise self._damaged(e) from None
        if counts != (self._count, self._count):  # found now, not as an index "incomplete" after its whole build
            raise StoreDamagedError(f"manifest.json says {self._count:,} passages, but data.mdb holds {counts[0]:,} "
                                    f"passages and {counts[1]:,} ids", path=self.path,
                                    fix=_rebuild_hint(self.path, self.manifest))

    def _txn(self) -> lmdb.Transaction:
        if self._env is None:
            self._connect()
        txn = self._local.txn = self._env.begin()  # type: ignore[union-attr]
        return txn

    def _forget(self) -> None:
        self._local = threading.local()
        self._env = None

    def close(self) -> None:
        """Let go of the database (closed when no other open store shares it; a later read reopens it)."""
        self._local = threading.local()
        self._env = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may be gone already
            pass

    def __getstate__(self) -> dict:  # picklable for multiprocessing / ray workers: reopen by path
        return {"path": str(self.path)}

    def __setstate__(self, state: dict) -> None:
        other = PassageStore.open(state["path"])
        self.__dict__.update(other.__dict__)
        other._env = None  # now ours
        other._local = threading.local()
        _OPEN_STORES.add(self)

    def _damaged(self, error: Exception) -> InputError:
        return StoreDamagedError(f"the passage store is damaged ({type(error).__name__}: {error})", path=self.path / DATA_FILE,
                          fix=_rebuild_hint(self.path, self.manifest))

    def _bad_record(self, n: int, value: bytes | None, error: Exception) -> InputError:
        """The error for record ``n`` (``value``: its bytes as read) that failed its checksum or cannot be decoded:
        names the record and, when the id in it is still readable and the id table agrees, its passage."""
        pid = self._record_id(n, value) if value is not None else None
        which = f"record {n:,}" + (f" (passage {pid!r})" if pid is not None else "")
        return StoreDamagedError(
            f"the passage store is damaged: {which} "
            f"{error if isinstance(error, ChecksumError) else f'cannot be decoded ({error})'}: its bytes were changed on "
            "disk", path=self.path / DATA_FILE,
            fix=f"`berds corpus info --verify {self.path}` checks every record; {_rebuild_hint(self.path, self.manifest)}")

    def _record_id(self, n: int, value: bytes) -> str | None:
        """The passage id held in damaged record ``n``, when it can be read and the id table sends it to ``n``."""
        try:
            _, a, _, _ = _HEAD.unpack_from(value)
            pid = _record_body(value, self._compressed, self._checksummed).decode("utf-8", "replace")[:a]
            if pid and self._find(pid) == n:
                return pid
        except (zlib.error, struct.error, StoreDamagedError):
            pass
        return None

    def _wrong_record(self, pid: str, found: str, record: bytes) -> InputError:
        return self._damaged(ValueError(f"the id table sends passage id {pid!r} to record {_REC.unpack(record)[0]}, "
                                        f"which holds passage {found!r}"))

    def _missing(self, pid: object) -> PassageNotFoundError:
        return PassageNotFoundError(f"passage id {pid!r} is not in this store ({self._count} passages)", path=self.path,
                                    fix="check the id (`berds corpus show` prints a passage) and that the run/index was built on this corpus")

    def _value(self, record: int) -> bytes:
        txn = getattr(self._local, "txn", None) or self._txn()
        try:
            value = txn.get(_REC.pack(record), db=self._passages)
        except lmdb.Error as e:
            raise self._damaged(e) from None
        if value is None:
            raise self._damaged(KeyError(f"record {record} is missing"))
        return value

    def _find(self, pid: object) -> int | None:
        """The record number of ``pid``, or None."""
        if not isinstance(pid, str) or not pid:
            return None
        txn = getattr(self._local, "txn", None) or self._txn()
        try:
            record = txn.get(_id_key(pid), db=self._ids)
        except lmdb.Error as e:
            raise self._damaged(e) from None
        return None if record is None else _REC.unpack(record)[0]

    # -- public reads ------------------------------------------------------------------------------
    def __contains__(self, pid: object) -> bool:
        return self._find(pid) is not None

    def _getters(self) -> tuple[Callable[[bytes], bytes | None], Callable[[bytes], bytes | None]]:
        """This thread's bound ``get`` of the id table and of the passage table (one read transaction each)."""
        if self._env is None:
            self._connect()
        env = self._env
        getters = self._local.getters = (env.begin(db=self._ids).get, env.begin(db=self._passages).get)  # type: ignore[union-attr]
        return getters

    def get(self, pid: str) -> Passage:
        """The passage with id ``pid``; ``PassageNotFoundError`` (an ``InputError`` and ``KeyError``) if absent."""
        try:
            id_get, passage_get = self._local.getters
        except AttributeError:
            id_get, passage_get = self._getters()
        try:
            record = id_get(pid.encode("utf-8") if len(pid) <= _MAX_KEY // 4 else _id_key(pid))
            if record is None:
                raise self._missing(pid)
            value = passage_get(record)
            passage = self._decode(value)
        except (AttributeError, TypeError, lmdb.BadValsizeError):  # not a str, or ""
            raise self._missing(pid) from None
        except _DECODE_ERRORS as e:
            raise self._bad_record(_REC.unpack(record)[0], value, e) from None
        except lmdb.Error as e:
            raise self._damaged(e) from None
        if passage.id != pid:  # a damaged id table points at another record: never serve another passage
            raise self._wrong_record(pid, passage.id, record)
        return passage

    __getitem__ = get

    def get_many(self, pids: Sequence[str]) -> list[Passage]:
        """Passages for ``pids`` in the given order (repeats allowed); ``get`` without its per-call overhead."""
        try:
            id_get, passage_get = self._local.getters
        except AttributeError:
            id_get, passage_get = self._getters()
        try:
            with no_gc():  # a batch of acyclic Passages: the cyclic GC's passes over them would cost more than the reads
                records = list(map(id_get, [p.encode("utf-8") if len(p) <= _MAX_KEY // 4 else _id_key(p) for p in pids]))
                if None in records:
                    raise self._missing(pids[records.index(None)])
                values = list(map(passage_get, records))
                passages = self._decode_list(values)
        except (AttributeError, TypeError, lmdb.BadValsizeError):
            raise self._missing(next(p for p in pids if not isinstance(p, str) or not p)) from None
        except _DECODE_ERRORS:
            raise self._first_bad(records, values) from None
        except lmdb.Error as e:
            raise self._damaged(e) from None
        got = list(map(_passage_id, passages))
        if got != (pids if isinstance(pids, list) else list(pids)):  # (one list comparison: the batch's ids)
            i = next(i for i, (a, b) in enumerate(zip(got, pids)) if a != b)
            raise self._wrong_record(pids[i], got[i], records[i])
        return passages

    def get_records(self, rows: Sequence[int]) -> list[Passage]:
        """The passages at record numbers ``rows`` (store order from 0; repeats allowed), in the given order.

        ``get_many`` without the id table: one LMDB read per passage where ``get_many`` makes two. For callers that
        hold record numbers already: a dense index built from this store, whose FAISS row is the record number
        (``DenseRetriever`` checks the ids it gets against the index's own)."""
        return self._read_records(rows)

    def get_hits(self, rows: Sequence[int], scores: Sequence[float]) -> tuple[list[Hit], list[str]]:
        """``hits_of(self.get_records(rows), scores)`` and the ids of those passages, in the given order: what a dense
        search by record number serves (``berds.retrievers.base.hits_from_records``, which checks the ids against the
        index's and ranks each question's hits).

        A format-3 store without compression, given plain float scores (``plain_scores``: FAISS's ``.tolist()``),
        makes each Hit in the loop that checks and decodes its record (``_decode_crc_many``), not in a second loop over
        the passages (``benchmarks/bench_dense_search.py --pieces`` times both). Other stores and scores take ``get_records`` + ``hits_of``, so a NaN or
        non-number score meets ``Hit``'s own check (``InvalidScore``). Checksums and damaged-record errors are
        ``get_records``'s."""
        if len(scores) != len(rows):
            raise ValueError(f"{len(rows)} record numbers but {len(scores)} scores")
        if self._decode is not _decode_crc or not plain_scores(scores):
            passages = self._read_records(rows)
            return hits_of(passages, scores), list(map(_passage_id, passages))
        ids: list[str] = []
        return self._read_records(rows, scores, ids), ids

    def _read_records(self, rows: Sequence[int], scores: Sequence[float] | None = None,
                      ids: list[str] | None = None) -> list[Any]:
        """``get_records``; with ``scores`` (a format-3 store without compression only), ``get_hits``'s Hits, their
        passage ids appended to ``ids`` (see ``_decode_crc_many``)."""
        try:
            _, passage_get = self._local.getters
        except AttributeError:
            _, passage_get = self._getters()
        rows = rows if isinstance(rows, list) else list(rows)
        try:
            keys = list(map(_REC.pack, rows))  # (struct refuses what is not a whole number from 0 to 2**64-1)
            if rows and max(rows) >= self._count:
                raise struct.error
        except (struct.error, TypeError):
            bad = next(r for r in rows if not isinstance(r, int) or not 0 <= r < self._count)
            raise BerdsError(f"record number {bad!r} is not in this store ({self._count} passages: 0 to "
                             f"{self._count - 1})") from None
        try:
            with no_gc():
                values = list(map(passage_get, keys))
                if None in values:
                    raise self._damaged(KeyError(f"record {rows[values.index(None)]} is missing"))
                if scores is not None:
                    return _decode_crc_many(values, scores, ids)
                return self._decode_list(values)
        except _DECODE_ERRORS:
            raise self._first_bad(keys, values) from None
        except lmdb.Error as e:
            raise self._damaged(e) from None

    def _first_bad(self, records: list[bytes], values: list[bytes]) -> InputError:
        """The error for the first of ``values`` (read for ``records``) that fails to decode (a batch read failed)."""
        for record, value in zip(records, values):
            try:
                self._decode(value)
            except _DECODE_ERRORS as e:
                return self._bad_record(_REC.unpack(record)[0], value, e)
        raise AssertionError("no record of the batch fails to decode")  # (called only when one did)

    def _values(self, verify: bool = False) -> Iterator[bytes]:
        """Every stored record in store order (with ``verify``, checking that the record numbers run 0, 1, 2...)."""
        if self._env is None:
            self._connect()
        try:
            with self._env.begin(db=self._passages) as txn, txn.cursor() as cursor:  # type: ignore[union-attr]
                if not verify:
                    yield from cursor.iternext(keys=False, values=True)
                    return
                pack, n = _REC.pack, 0
                for n, (key, value) in enumerate(cursor.iternext(), 1):
                    if key != pack(n - 1):
                        raise self._damaged(ValueError(f"record {n - 1} is missing (found key {key!r})"))
                    yield value
                if n != self._count:
                    raise self._short(n)
        except lmdb.Error as e:
            raise self._damaged(e) from None

    def __iter__(self) -> Iterator[Passage]:
        """All passages in store order (the order they were added), streaming."""
        try:
            yield from self._decoded(self._values())
        except _DECODE_ERRORS as e:
            raise self._locate_bad(e) from None

    def _decode_list(self, values: list[bytes]) -> list[Passage]:
        """``[self._decode(v) for v in values]``; format-3 records without compression in one loop."""
        if self._decode is _decode_crc:
            return _decode_crc_many(values)
        return list(map(self._decode, values))

    def _decoded(self, values: Iterator[bytes]) -> Iterator[Passage]:
        """``map(self._decode, values)``; format-3 records without compression 1,024 at a time in one loop."""
        if self._decode is not _decode_crc:
            yield from map(self._decode, values)
            return
        while chunk := list(islice(values, 1024)):
            yield from _decode_crc_many(chunk)

    def _locate_bad(self, error: Exception) -> InputError:
        """The error naming the first record that fails to decode (a stream stopped at it: the records before it
        decoded). Reads the store again, on the error path only, so streams need not count records."""
        for n, value in enumerate(self._values()):
            try:
                self._decode(value)
            except _DECODE_ERRORS as e:
                return self._bad_record(n, value, e)
        return self._damaged(error)  # (not found again: the file changed while it was read)

    def _short(self, n: int) -> InputError:
        return StoreDamagedError(f"the passage store is damaged: {n:,} records read to its end, its manifest.json "
                                 f"records {self._count:,} passages", path=self.path / DATA_FILE,
                                 fix=f"`berds corpus info --verify {self.path}` checks every record; "
                                     f"{_rebuild_hint(self.path, self.manifest)}")

    def iter_passages(self, *, verify: bool = False) -> Iterator[Passage]:
        """All passages in store order; with ``verify`` (what readers of the whole store use: indexing, encoding),
        record numbers are checked to run 0, 1, 2, ... to the manifest's count, and in a format-2 store (whose
        records carry no checksum) the fingerprint is recomputed on the way, so a changed record fails when the
        stream ends (``_StreamCheck``). A format-3 record fails its checksum as it is read, verified or not."""
        if not verify:
            yield from self
            return
        decode, value = self._decode, None
        if self._checksummed:  # each record's CRC-32 is checked as it is decoded; _values checks numbers and count
            try:
                yield from self._decoded(self._values(verify=True))
            except _DECODE_ERRORS as e:
                raise self._locate_bad(e) from None
            return
        check = _StreamCheck(self)
        add, plain = check.add, self._decode is _decode
        unpack = _HEAD.unpack_from
        try:
            for value in self._values(verify=True):
                p = decode(value)
                line = None
                if plain:
                    _, a, t, s = unpack(value)
                    line = _ascii_line(value[_HEAD_SIZE:], a, t, s)
                add(value, line or _fingerprint_bytes(p, None))
                yield p
        except _DECODE_ERRORS as e:
            raise self._bad_record(check.n, value, e) from None
        check.finish()

    def iter_batches(self, batch_size: int, *, verify: bool = False) -> Iterator[list[Passage]]:
        """Passages in store order, ``batch_size`` at a time (the last batch may be shorter); ``verify`` as in
        ``iter_passages`` (indexing and encoding pass it)."""
        if batch_size < 1:
            raise BerdsError(f"batch_size must be at least 1, got {batch_size}")
        passages = self.iter_passages(verify=verify)
        while batch := list(islice(passages, batch_size)):
            yield batch

    def iter_utf8_batches(self, batch_size: int, *, verify: bool = False) -> Iterator[list[tuple[bytes, bytes, bytes]]]:
        """``(id, title, text)`` of every passage as UTF-8 bytes, in store order, ``batch_size`` at a time: for
        writers that pass bytes on (the Lucene indexer) without building ``Passage``s and encoding them again.
        A record that is all ASCII is sliced as stored (its character counts are byte counts); others are
        decoded and their fields encoded. ``verify`` as in ``iter_passages``."""
        if batch_size < 1:
            raise BerdsError(f"batch_size must be at least 1, got {batch_size}")
        unpack, head, compressed = _HEAD.unpack_from, _HEAD_SIZE, self._compressed
        crc = self._checksummed
        end = -_CRC_SIZE if crc else None
        values = self._values(verify)
        check = _StreamCheck(self) if verify and not crc else None
        n, value = 0, None  # records before this batch; the record being read
        batch: list[tuple[bytes, bytes, bytes]] = []
        try:
            while chunk := list(islice(values, batch_size)):
                batch = []
                for value in chunk:
                    if crc and _crc32(value) != _CRC_RESIDUE:
                        raise ChecksumError()
                    _, a, t, s = unpack(value)
                    body = zlib.decompress(value[head:end]) if compressed else value[head:end]
                    if a + t + s > len(body) or not a:  # (decoded, a non-ASCII body is checked again by character)
                        raise DamagedRecordError(f"record header says {a}+{t}+{s} of id, title and source in {len(body)}")
                    if body.isascii():
                        fields = (body[:a], body[a:a + t], body[a + t + s:])
                    else:
                        text = body.decode("utf-8")
                        if a + t + s > len(text):
                            raise DamagedRecordError(f"record header says {a}+{t}+{s} characters in {len(text)}")
                        fields = (text[:a].encode("utf-8"), text[a:a + t].encode("utf-8"),
                                  text[a + t + s:].encode("utf-8"))
                    if check is not None:
                        check.add(value, _ascii_line(body, a, t, s) or b"".join((
                            b"[", _json_utf8(fields[0]), b",", _json_utf8(fields[1]), b",", _json_utf8(fields[2]),
                            b"]\n")))
                    batch.append(fields)
                n += len(batch)
                yield batch
        except _DECODE_ERRORS as e:
            raise self._bad_record(n + len(batch), value, e) from None
        if check is not None:
            check.finish()

    def ids(self) -> Iterator[str]:
        """Passage ids in store order."""
        for p in self:
            yield p.id

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
        numbers = np.asarray(self._record_groups, dtype=np.int32)
        if numbers.size != self._count or (numbers.size and not -1 <= numbers.min() <= numbers.max() < len(self._group_names)):
            raise InputError(f"the passage store is damaged ({GROUPS_FILE} holds {numbers.size} group numbers for "
                             f"{self._count} passages, or numbers outside its {len(self._group_names)} groups)",
                             path=self.path / GROUPS_FILE, fix=_rebuild_hint(self.path, self.manifest))
        return numbers

    def group_ids(self, group: str) -> list[str]:
        """Ids of the passages in ``group``, in store order."""
        return [p.id for p in self.group_passages(group)]

    def group_passages(self, group: str) -> list[Passage]:
        """The passages in ``group``, in store order."""
        out, decode = [], self._decode
        for r in self._group_records(group).tolist():
            value = self._value(r)
            try:
                out.append(decode(value))
            except _DECODE_ERRORS as e:
                raise self._bad_record(r, value, e) from None
        return out

    def group_of(self, pid: str) -> str | None:
        """The group a passage was added to, or None."""
        record = self._find(pid)
        if record is None:
            raise self._missing(pid)
        if self._record_groups is None:
            return None
        g = int(self._record_groups[record]) if record < len(self._record_groups) else None
        if g == -1:
            return None
        if g is None or not 0 <= g < len(self._group_names):  # read from groups.npy: damage, not a lookup miss
            raise InputError(f"the passage store is damaged (passage {pid!r}, record {record}, has group number {g}; "
                             f"the store has {len(self._group_names)} groups)", path=self.path / GROUPS_FILE,
                             fix=_rebuild_hint(self.path, self.manifest))
        return self._group_names[g]

    def info(self) -> dict[str, Any]:
        """Counts, sizes and identity of the store (what ``berds corpus info`` prints)."""
        files = [p for p in self.path.iterdir() if p.is_file()]
        m = self.manifest
        return {
            "path": str(self.path),
            "passages": self._count,
            "documents": m.get("metadata", {}).get("documents"),
            "groups": len(self._group_names),
            "format": self.format,  # 3: records with a checksum; 2: without (`berds corpus upgrade` rewrites it)
            "engine": m.get("engine"),
            "compression": m.get("compression"),
            "disk_bytes": sum(p.stat().st_size for p in files),
            "data_bytes": (self.path / DATA_FILE).stat().st_size,
            "fingerprint": self.fingerprint,
            "created": m.get("created"),
            "source": m.get("metadata", {}).get("source"),
        }

    def verify(self, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Read every passage back and check it: record numbers, id table, groups and the fingerprint.

        Raises an ``InputError`` naming the damage and the command that rebuilds the store; returns
        ``{"passages", "fingerprint", "verified": True}``. ``progress(n)`` is called every 10,000 passages.
        """
        fingerprint = hashlib.sha256()
        n = 0
        names = self._group_names
        if self._env is None:
            self._connect()
        try:
            with self._env.begin() as txn, txn.cursor(db=self._passages) as cursor:  # type: ignore[union-attr]
                for key, value in cursor.iternext():
                    if key != _REC.pack(n):
                        raise self._damaged(ValueError(f"record {n} is missing (found key {key!r})"))
                    try:
                        p = self._decode(value)
                    except _DECODE_ERRORS as e:
                        raise self._bad_record(n, value, e) from None
                    if txn.get(_id_key(p.id), db=self._ids) != key:
                        raise self._damaged(ValueError(f"passage id {p.id!r} (record {n}) is not in the id table"))
                    g = _group_number(value)
                    stored = -1 if self._record_groups is None else int(self._record_groups[n])
                    if g != stored:
                        raise self._damaged(ValueError(f"record {n}: group {g} in the data, {stored} in {GROUPS_FILE}"))
                    fingerprint.update(_fingerprint_bytes(p, names[g] if g >= 0 else None))
                    n += 1
                    if progress is not None and n % 10_000 == 0:
                        progress(n)
                ids = txn.stat(self._ids)["entries"]
        except lmdb.Error as e:
            raise self._damaged(e) from None
        except (zlib.error, UnicodeDecodeError, struct.error, IndexError, ValueError) as e:
            raise self._damaged(ValueError(f"record {n} cannot be decoded: {e}")) from None
        if n != self._count or ids != self._count:
            raise self._damaged(ValueError(f"{n} passages and {ids} ids stored, the manifest says {self._count}"))
        if fingerprint.hexdigest() != self.fingerprint:
            raise self._damaged(ValueError("the passages do not match the manifest's fingerprint"))
        return {"passages": n, "fingerprint": self.fingerprint, "verified": True}


_SHA256 = re.compile("[0-9a-f]{64}")


def _manifest_problem(manifest: dict) -> str | None:
    """What is wrong with the types of a store manifest's fields (None when they are right)."""
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    if not count(manifest.get("passages")):
        return f"'passages' is {manifest.get('passages')!r}, not a count"
    fingerprint = manifest.get("fingerprint")
    if not isinstance(fingerprint, str) or not _SHA256.fullmatch(fingerprint) or not fingerprint.strip("0"):
        # (64 zeros is a placeholder, not what any content hashes to: runs would be recorded under it)
        return f"'fingerprint' is {str(fingerprint)[:80]!r}, not a SHA-256 of the passages (64 hex digits)"
    for key in ("files", "groups"):
        value = manifest.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and count(v) for k, v in value.items()):
            return f"{key!r} is {str(value)[:60]!r}, not a table of names and counts"
    if not isinstance(manifest.get("metadata", {}), dict):
        return f"'metadata' is {str(manifest.get('metadata'))[:60]!r}, not an object"
    return None


def _rebuild_hint(path: Path, manifest: dict) -> str:
    source = (manifest.get("metadata") or {}).get("source")
    where = f" from its source ({source})" if source else ""
    return f"rebuild it{where} with the `berds corpus build ...` command that made it, adding --overwrite"


def write_passage_store(passages: Iterable[Passage], out: str | os.PathLike, **kwargs: Any) -> PassageStore:
    """Write ``passages`` to a new store at ``out`` (options as ``PassageStoreWriter``) and open it."""
    with PassageStoreWriter(out, **kwargs) as writer:
        writer.add_many(passages)
    return PassageStore.open(out)


# -- stores written by berds before the LMDB format --------------------------------------------------------
def _legacy_records(path: Path, manifest: dict) -> Iterator[tuple[Passage, str | None]]:
    """(passage, group) of a format-1 store (zlib blocks of JSON lines in shard files) in store order."""
    blocks = np.load(path / "blocks.npy")
    compressed = manifest.get("compression", "zlib") == "zlib"
    names = list(manifest.get("groups", {}))
    gpath = path / "groups.npy"
    groups = np.load(gpath) if gpath.exists() else None
    shards = manifest["shards"]
    n = 0
    handles: dict[int, Any] = {}
    try:
        for shard, offset, nbytes in zip(blocks["shard"], blocks["offset"], blocks["nbytes"]):
            f = handles.get(int(shard))
            if f is None:
                f = handles[int(shard)] = open(path / shards[int(shard)]["file"], "rb")
            f.seek(int(offset))
            data = f.read(int(nbytes))
            for line in (zlib.decompress(data) if compressed else data).splitlines():
                pid, text, title, source = json.loads(line)
                g = -1 if groups is None else int(groups[n])
                yield Passage(id=pid, text=text, title=title, source=source), (names[g] if g >= 0 else None)
                n += 1
    except (OSError, zlib.error, ValueError, KeyError, IndexError) as e:
        raise InputError(f"cannot read the old-format store at passage {n + 1} ({type(e).__name__}: {e})", path=path,
                         fix=_rebuild_hint(path, manifest)) from None
    finally:
        for f in handles.values():
            f.close()


def _format2_records(store: PassageStore) -> Iterator[tuple[Passage, str | None]]:
    """(passage, group) of a format-2 store in store order (record numbers checked; the caller compares the
    fingerprint of what it wrote with the manifest's, which finds a changed record)."""
    names = store._group_names
    decode, n, value = store._decode, 0, None
    try:
        for value in store._values(verify=True):
            g = _group_number(value)
            p = decode(value)
            n += 1
            yield p, (names[g] if g >= 0 else None)
    except (*_DECODE_ERRORS, IndexError) as e:
        raise store._bad_record(n, value, e) from None
    if n != len(store):
        raise store._short(n)


def upgrade_passage_store(path: str | os.PathLike, *, compression: str | None = None,
                          progress: Callable[[int], None] | None = None) -> PassageStore:
    """Rewrite a store of an older format in place (``berds corpus upgrade``); the fingerprint must come out the same.

    Format 1 (zlib blocks of JSON lines) and format 2 (LMDB records without a checksum) become format 3.
    ``compression`` None keeps a format-2 store's own (format 1: ``"none"``). The new store is built beside
    the old one and swapped in only when its fingerprint matches, so indexes and runs made on the old store
    stay valid. A store already in the current format is returned as is.
    """
    path = Path(path)
    manifest = read_json(path / "manifest.json") if (path / "manifest.json").is_file() else None
    if not isinstance(manifest, dict) or manifest.get("kind") != STORE_KIND:
        raise InputError("not a passage store (no passage-store manifest.json)", path=path,
                         fix="point to a folder written by `berds corpus build`")
    if manifest.get("format") == STORE_FORMAT:
        return PassageStore.open(path)
    old_format = manifest.get("format")
    if old_format not in (1, 2):
        raise InputError(f"passage store format {old_format!r} cannot be upgraded", path=path,
                         fix="rebuild the store with this version of berds")
    old = PassageStore.open(path) if old_format == 2 else None  # (checks the manifest and the counts)
    if compression is None:
        compression = old.manifest.get("compression", "none") if old is not None else "none"
    records = _format2_records(old) if old is not None else _legacy_records(path, manifest)
    metadata = {**manifest.get("metadata", {}), "upgraded_from": {"format": old_format, "created": manifest.get("created")}}
    writer = PassageStoreWriter(path, overwrite=True, metadata=metadata, compression=compression)
    with writer:
        for i, (passage, group) in enumerate(records, 1):
            writer.add(passage, group=group)
            if progress is not None and i % 10_000 == 0:
                progress(i)
        if old is not None:
            old.close()  # (before the new store takes its place)
        if writer.fingerprint != manifest["fingerprint"] or len(writer) != manifest["passages"]:
            raise InputError(f"the upgraded copy has fingerprint {writer.fingerprint[:12]} over {len(writer)} passages, "
                             f"the old store {manifest['fingerprint'][:12]} over {manifest['passages']}; the old store "
                             "is left as it was", path=path, fix=_rebuild_hint(path, manifest))
    shutil.rmtree(writer.building, ignore_errors=True)
    return PassageStore.open(path)


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
