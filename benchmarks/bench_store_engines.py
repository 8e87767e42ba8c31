"""Which embedded engine should hold the passage store? SQLite vs LMDB vs Arrow IPC vs Parquet, side by side.

Each engine stores the same synthetic passages (100 words each, ids "0".."n-1", see ``bench_corpora``) the way a
passage store needs them — in store order, findable by id — and is timed on:

* write      — n passages streamed in from a jsonl file, committed, in a fresh process (peak RSS above idle); raw
               LMDB with a ``putmulti`` per 10,000 records and no fingerprint or checksum (berds against a raw
               write doing the same job, fingerprint and record CRCs included: ``bench_store_write.py``);
* get        — random lookups by id, one at a time, single-threaded, each returning (id, title, text, source);
* get_many   — the same ids asked 1,000 at a time;
               (Parquet: only the first 3,000 ids, as a lookup decodes a whole row group);
* scan       — every passage in store order;
* disk       — bytes on disk.

Engines take turns round after round (``--rounds``, each round led by another engine) and every figure is the
median of the rounds with their min-max, so load from other jobs on a shared machine does not land on one engine
only. Each reader is what a user would write for that engine: SQLite and LMDB lookups run inside one read
transaction (a SQLite lookup in a transaction of its own is 2.2x slower). ``--berds`` adds the berds ``PassageStore`` itself
as a row. Every engine gets a ratio row against ``--raw`` (LMDB, the engine berds uses), taken round by round.

    python benchmarks/bench_store_engines.py --passages 100000 --lookups 50000 --rounds 2 --berds --raw lmdb
    python benchmarks/bench_store_engines.py --engines lmdb --berds --raw lmdb --rounds 3   # berds vs raw only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_corpora import synthetic_passages  # noqa: E402
from turns import in_fresh_process as fresh_process, spread  # noqa: E402

ENGINES = ("sqlite", "lmdb", "arrow-ipc", "parquet")


def _rss_mb() -> float:
    """Peak resident memory so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mb() -> float:
    """Resident memory now (MB): the base the write's peak is measured above (the peak so far may be an import's)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def _rows(jsonl: str):
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


# -- SQLite: one rowid table (store order) with a UNIQUE index on the id ---------------------------------------
def sqlite_write(jsonl: str, out: Path) -> None:
    import sqlite3

    db = sqlite3.connect(out / "store.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("CREATE TABLE passages (rec INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT, text TEXT, source TEXT)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO passages (id, title, text, source) VALUES (?,?,?,?)",
                   ((r[0], r[1], r[2], r[3]) for r in _rows(jsonl)))
    db.execute("COMMIT")
    db.close()


class SqliteReader:
    def __init__(self, out: Path):
        import sqlite3

        self.db = sqlite3.connect(f"file:{out / 'store.sqlite'}?mode=ro", uri=True, check_same_thread=False,
                                  isolation_level=None)
        # One read transaction for the whole session, as a reader that looks many passages up would hold (and as
        # LMDB's reader below holds one): without it each SELECT opens and closes its own, 2.2x slower per lookup.
        self.db.execute("BEGIN")

    def get(self, pid):
        return self.db.execute("SELECT id, title, text, source FROM passages WHERE id = ?", (pid,)).fetchone()

    def get_many(self, pids):
        marks = ",".join("?" * len(pids))
        found = {r[0]: r for r in self.db.execute(f"SELECT id, title, text, source FROM passages WHERE id IN ({marks})", pids)}
        return [found[p] for p in pids]

    def scan(self):
        return self.db.execute("SELECT id, title, text, source FROM passages ORDER BY rec")


# -- LMDB: records keyed by big-endian record number (store order), plus an id -> record number table --------
_REC = struct.Struct(">Q")


def _pack(r) -> bytes:
    title, text, source = (s.encode("utf-8") for s in (r[1], r[2], r[3]))
    pid = r[0].encode("utf-8")
    return struct.pack("<III", len(pid), len(title), len(source)) + pid + title + source + text


def _unpack(b: bytes):
    a, t, s = struct.unpack_from("<III", b)
    o = 12
    return (b[o:o + a].decode(), b[o + a:o + a + t].decode(), b[o + a + t + s:].decode(), b[o + a + t:o + a + t + s].decode())


def lmdb_write(jsonl: str, out: Path) -> None:
    import lmdb

    from itertools import islice

    env = lmdb.open(str(out), map_size=1 << 40, max_dbs=2, sync=False, writemap=False)
    recs, ids = env.open_db(b"records"), env.open_db(b"ids")
    rows, i = _rows(jsonl), 0
    with env.begin(write=True) as txn:
        # LMDB's strongest write from Python: a putmulti per 10,000 records (append: keys in order), and one for
        # their id-table entries, counting what was added to catch a repeated id
        while chunk := list(islice(rows, 10_000)):
            keys = [_REC.pack(j) for j in range(i, i + len(chunk))]
            with txn.cursor(db=recs) as c:
                c.putmulti(list(zip(keys, map(_pack, chunk))), append=True)
            with txn.cursor(db=ids) as c:
                consumed, added = c.putmulti([(r[0].encode("utf-8"), k) for r, k in zip(chunk, keys)], overwrite=False)
            if added != consumed:
                raise ValueError(f"a repeated id among rows {i}..{i + len(chunk)}")
            i += len(chunk)
    env.sync(True)
    env.close()


class LmdbReader:
    def __init__(self, out: Path):
        import lmdb

        self.env = lmdb.open(str(out), readonly=True, lock=False, max_dbs=2)
        self.recs, self.ids = self.env.open_db(b"records", create=False), self.env.open_db(b"ids", create=False)
        self.txn = self.env.begin(buffers=False)

    def get(self, pid):
        key = self.txn.get(pid.encode("utf-8"), db=self.ids)
        return _unpack(self.txn.get(key, db=self.recs))

    def get_many(self, pids):
        txn, ids, recs = self.txn, self.ids, self.recs
        return [_unpack(txn.get(txn.get(p.encode("utf-8"), db=ids), db=recs)) for p in pids]

    def scan(self):
        with self.txn.cursor(db=self.recs) as cur:
            for _, v in cur:
                yield _unpack(v)


# -- Arrow IPC / Parquet: columns in record batches; an id -> row index has to be built beside them -----------
def _arrow_batches(jsonl: str, batch: int = 10_000):
    import pyarrow as pa

    schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string()), ("source", pa.string())])
    cols: list[list] = [[], [], [], []]
    for r in _rows(jsonl):
        for c, v in zip(cols, r):
            c.append(v)
        if len(cols[0]) == batch:
            yield pa.record_batch(cols, schema=schema)
            cols = [[], [], [], []]
    if cols[0]:
        yield pa.record_batch(cols, schema=schema)


def _id_index(ids: list[str], out: Path) -> None:
    """A sorted 64-bit hash -> row index (what berds' old format hand-wrote): Arrow has no key lookup."""
    import hashlib

    import numpy as np

    keys = np.fromiter((int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8).digest(), "little") for p in ids),
                       dtype=np.uint64, count=len(ids))
    order = np.argsort(keys)
    np.save(out / "keys.npy", keys[order])
    np.save(out / "rows.npy", order.astype(np.uint32))


def arrow_write(jsonl: str, out: Path) -> None:
    import pyarrow as pa

    ids: list[str] = []
    writer = None
    with pa.OSFile(str(out / "store.arrow"), "wb") as sink:
        for b in _arrow_batches(jsonl):
            if writer is None:
                writer = pa.ipc.new_file(sink, b.schema)
            writer.write_batch(b)
            ids.extend(b.column(0).to_pylist())
        writer.close()
    _id_index(ids, out)


def parquet_write(jsonl: str, out: Path) -> None:
    import pyarrow.parquet as pq

    ids: list[str] = []
    writer = None
    for b in _arrow_batches(jsonl):
        if writer is None:
            writer = pq.ParquetWriter(str(out / "store.parquet"), b.schema, compression="zstd", write_page_checksum=True)
        writer.write_batch(b, row_group_size=10_000)
        ids.extend(b.column(0).to_pylist())
    writer.close()
    _id_index(ids, out)


class _HashIndexed:
    def _rows_for(self, pids):
        import hashlib

        import numpy as np

        keys = np.fromiter((int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8).digest(), "little") for p in pids),
                           dtype=np.uint64, count=len(pids))
        return self.rows[np.searchsorted(self.keys, keys)]


class ArrowReader(_HashIndexed):
    def __init__(self, out: Path):
        import numpy as np
        import pyarrow as pa

        self.table = pa.ipc.open_file(pa.memory_map(str(out / "store.arrow"))).read_all()
        self.cols = [self.table.column(i) for i in range(4)]
        self.keys, self.rows = np.load(out / "keys.npy", mmap_mode="r"), np.load(out / "rows.npy", mmap_mode="r")

    def get(self, pid):
        row = int(self._rows_for([pid])[0])
        return tuple(c[row].as_py() for c in self.cols)

    def get_many(self, pids):
        taken = self.table.take(self._rows_for(pids))
        return list(zip(*(taken.column(i).to_pylist() for i in range(4))))

    def scan(self):
        for b in self.table.to_batches():
            yield from zip(*(b.column(i).to_pylist() for i in range(4)))


class ParquetReader(_HashIndexed):
    def __init__(self, out: Path):
        import numpy as np
        import pyarrow.parquet as pq

        self.file = pq.ParquetFile(str(out / "store.parquet"), memory_map=True)
        self.group_rows = self.file.metadata.row_group(0).num_rows
        self.keys, self.rows = np.load(out / "keys.npy", mmap_mode="r"), np.load(out / "rows.npy", mmap_mode="r")
        self._cache: dict = {}

    def _group(self, g):
        t = self._cache.get(g)
        if t is None:
            if len(self._cache) > 8:
                self._cache.clear()
            t = self._cache[g] = self.file.read_row_group(g)
        return t

    def get(self, pid):
        row = int(self._rows_for([pid])[0])
        t = self._group(row // self.group_rows)
        r = row % self.group_rows
        return tuple(t.column(i)[r].as_py() for i in range(4))

    def get_many(self, pids):
        rows = self._rows_for(pids)
        out = [None] * len(pids)
        for i in sorted(range(len(pids)), key=lambda j: rows[j]):  # one row-group decode serves its neighbours
            row = int(rows[i])
            t = self._group(row // self.group_rows)
            out[i] = tuple(t.column(c)[row % self.group_rows].as_py() for c in range(4))
        return out

    def scan(self):
        for b in self.file.iter_batches(batch_size=10_000):
            yield from zip(*(b.column(i).to_pylist() for i in range(4)))


WRITERS = {"sqlite": sqlite_write, "lmdb": lmdb_write, "arrow-ipc": arrow_write, "parquet": parquet_write}
READERS = {"sqlite": SqliteReader, "lmdb": LmdbReader, "arrow-ipc": ArrowReader, "parquet": ParquetReader}


# -- berds itself ---------------------------------------------------------------------------------------------
def berds_write(jsonl: str, out: Path) -> None:
    from berds.corpora.docstore import PassageStoreWriter
    from berds.types import Passage

    with PassageStoreWriter(out, overwrite=True) as w:  # (its fingerprint, checks and record CRCs: bench_store_write.py)
        w.add_many(Passage(id=r[0], title=r[1], text=r[2], source=r[3]) for r in _rows(jsonl))


class BerdsReader:
    def __init__(self, out: Path):
        from berds.corpora.docstore import PassageStore

        self.store = PassageStore.open(out)

    def get(self, pid):
        return self.store.get(pid)

    def get_many(self, pids):
        return self.store.get_many(pids)

    def scan(self):
        return iter(self.store)


WRITERS["berds"], READERS["berds"] = berds_write, BerdsReader


def _write_in_process(engine: str, jsonl: str, out: str, queue) -> None:
    if engine == "berds":
        import berds.corpora.docstore  # noqa: F401  (imports are not part of the build's memory)
    base = _current_rss_mb()
    t = time.perf_counter()
    WRITERS[engine](jsonl, Path(out))
    queue.put({"write_s": time.perf_counter() - t, "peak_mb": _rss_mb() - base})


def in_fresh_process(engine: str, jsonl: str, out: Path) -> dict:
    if engine != "berds":
        out.mkdir(parents=True, exist_ok=True)
    return fresh_process(_write_in_process, engine, jsonl, str(out))


PARQUET_LOOKUPS = 3_000  # each miss decodes a 10,000-row group (~tens of ms): more would take minutes


def read_round(reader, engine: str, ids: list[str], n: int) -> dict:
    if engine == "parquet":
        ids = ids[:PARQUET_LOOKUPS]
    out = {}
    t = time.perf_counter()
    for pid in ids:
        reader.get(pid)
    out["get"] = len(ids) / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(0, len(ids), 1000):
        got = reader.get_many(ids[i:i + 1000])
    out["get_many"] = len(ids) / (time.perf_counter() - t)
    last = got[-1]
    assert (last.id if hasattr(last, "id") else last[0]) == ids[-1]
    t = time.perf_counter()
    count = sum(1 for _ in reader.scan())
    out["scan"] = count / (time.perf_counter() - t)
    assert count == n, (engine, count)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--lookups", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--berds", action="store_true", help="also time berds' PassageStore")
    ap.add_argument("--raw", default="lmdb", help="the engine every other one's ratio is taken against")
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)  # full tables when piped to a file
    engines = args.engines.split(",") + (["berds"] if args.berds else [])
    work = Path(tempfile.mkdtemp(prefix="berds-engines-"))
    try:
        jsonl = work / "passages.jsonl"
        with open(jsonl, "w", encoding="utf-8") as f:
            for p in synthetic_passages(args.passages):
                f.write(json.dumps([p.id, p.title, p.text, p.source], ensure_ascii=False) + "\n")
        rng = random.Random(7)
        ids = [str(rng.randrange(args.passages)) for _ in range(args.lookups)]
        results: dict[str, dict[str, list]] = {e: {} for e in engines}
        # Engines take turns, round after round, each round starting with another engine, and every figure is
        # the median of the rounds with their min-max: load from other jobs on a shared machine then hits every
        # engine alike instead of whichever ran during a spike.
        for r in range(args.rounds):
            shift = r % len(engines)
            for engine in engines[shift:] + engines[:shift]:
                console.print(f"round {r + 1}: {engine} writes {args.passages:,} passages in a fresh process ...")
                out = work / f"{engine}-{r}"
                w = in_fresh_process(engine, str(jsonl), out)
                got = results[engine]
                for key, value in (*w.items(), ("disk", _du(out))):
                    got.setdefault(key, []).append(value)
                reader = READERS[engine](out)
                for key, rate in read_round(reader, engine, ids, args.passages).items():
                    got.setdefault(key, []).append(rate)
                del reader
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t = Table(title=f"passage-store engines: {args.passages:,} passages of 100 words, {args.lookups:,} random ids, "
                    f"single-threaded ({os.cpu_count()} cores, shared); engines alternate; medians (min-max) of "
                    f"{args.rounds} rounds")
    for col in ("engine", "write s", "write peak MB", "get/s", "get_many/s (1,000)", "scan/s", "disk MB"):
        t.add_column(col, justify="left" if col == "engine" else "right")
    for engine, r in results.items():
        t.add_row(engine, spread(r["write_s"]), spread(r["peak_mb"], "{:.0f}"), spread(r["get"], "{:,.0f}"),
                  spread(r["get_many"], "{:,.0f}"), spread(r["scan"], "{:,.0f}"),
                  f"{statistics.median(r['disk']) / 1e6:,.0f}")
    if args.raw in results:
        # Ratios against --raw are taken round by round (the two ran side by side in each), then summarised.
        raw = results[args.raw]
        for engine, b in results.items():
            if engine == args.raw:
                continue
            ratio = {key: [x / y for x, y in zip(b[key], raw[key])] for key in ("write_s", "disk")}
            ratio.update({key: [y / x for x, y in zip(b[key], raw[key])] for key in ("get", "get_many", "scan")})
            t.add_row(f"{engine} / {args.raw}", spread(ratio["write_s"]) + "x time", "",
                      spread(ratio["get"]) + "x time", spread(ratio["get_many"]) + "x time",
                      spread(ratio["scan"]) + "x time", spread(ratio["disk"]) + "x")
    console.print(t)


if __name__ == "__main__":
    main()
