"""Writing a passage store: berds' ``PassageStoreWriter`` against the strongest raw LMDB write of the same store.

All contestants take the same ``Passage`` objects (synthetic, 100 words each, ids "0".."n-1", made before any
timing) and write them to a fresh folder, each write in a fresh process, in turns (``benchmarks/turns.py``: each round led by another), at each
size of ``--sizes``; every figure is the median (min-max) of ``--rounds``, and a ratio is taken round by round.

* berds          ``PassageStoreWriter(out).add_many(passages)`` and ``close()``: per passage the type, group and
                 text-size checks, UTF-8 encoding (a lone surrogate refused by name), the record (header, fields,
                 CRC-32), the fingerprint line; the id table refuses a repeated id by name; a commit (with its
                 resume state) every 100,000 passages and at least every 64 MB; the manifest; the folder renamed
                 into place.
* berds add      the same writer, ``add(p)`` called per passage (what builders that name an input line per passage
                 do; ``add_many`` was this loop before issue 36)
* raw            what a user would hand-write for the same database: per passage the UTF-8 fields, the same
                 record bytes (header, fields, CRC-32) and the same SHA-256 lines (the fingerprint: the fields'
                 bytes when none holds a character JSON escapes, one ``bytes.translate`` tells), 1,024
                 passages at a time, then LMDB's ``cursor.putmulti`` for their records (``append=True``) and
                 id-table entries (``overwrite=False``, counting what was added to catch a repeated id); a commit
                 every 100,000 passages; no manifest, no checks of types, sizes or characters to escape.
* raw, prebuilt  the floor: the record and id-table bytes and the SHA-256 lines made before the timing; timed
                 are only the SHA-256 over the lines and the two ``putmulti`` per commit.

The same LMDB settings for all (``sync=False, metasync=False, meminit=False``, one ``sync`` at the end).

    python benchmarks/bench_store_write.py --sizes 20000,100000,300000 --rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_corpora import synthetic_passages  # noqa: E402
from turns import in_fresh_process as fresh_process, spread, take_turns  # noqa: E402

from berds.corpora.docstore import _crc32  # noqa: E402  (the store's CRC-32, for the raw writer's same bytes)

_REC = struct.Struct(">Q")
_HEAD = struct.Struct("<iIII")
_CRC = struct.Struct("<I")
COMMIT = 100_000
BATCH = 1024


def _open(out: Path):
    import lmdb

    out.mkdir(parents=True)
    env = lmdb.open(str(out), map_size=1 << 40, max_dbs=3, sync=False, metasync=False, meminit=False)
    return env, env.open_db(b"passages"), env.open_db(b"ids")


def _put(txn, recs, ids, records: list, keys: list, start: int) -> None:
    with txn.cursor(db=recs) as c:
        c.putmulti(records, append=True)
    with txn.cursor(db=ids) as c:
        consumed, added = c.putmulti(keys, overwrite=False)
    if added != consumed:
        raise ValueError(f"a repeated passage id among passages {start}..{start + len(keys)}")


# bytes that JSON escapes: the fingerprint is json.dumps([id, title, text]) per passage, so a line may be the raw
# UTF-8 fields only when none of them holds one (checked with one bytes.translate, json.dumps otherwise)
_PLAIN = bytes(0 if (i < 0x20 or i in b'"\\') else 1 for i in range(256))


def _encode(chunk: list, start: int) -> tuple[list, list, bytes]:
    """(records, id-table items, fingerprint lines) of ``chunk``: the bytes berds writes."""
    records, keys, lines = [], [], []
    pack, head, crc, cpack = _REC.pack, _HEAD.pack, _crc32, _CRC.pack  # (the store's CRC-32: ISA-L's, zlib's values)
    for i, p in enumerate(chunk, start):
        pid, title, source, text = p.id.encode(), p.title.encode(), p.source.encode(), p.text.encode()
        key = pack(i)
        h = head(-1, len(p.id), len(p.title), len(p.source))
        payload = b"".join((pid, title, source, text))
        records.append((key, b"".join((h, payload, cpack(crc(payload, crc(h)))))))
        keys.append((pid, key))
        if b"\x00" in payload.translate(_PLAIN):
            lines.append(json.dumps([p.id, p.title, p.text], ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
        else:
            lines.append(b"".join((b'["', pid, b'","', title, b'","', text, b'"]\n')))
    return records, keys, b"".join(lines)


def raw_write(passages: list, out: Path) -> str:
    env, recs, ids = _open(out)
    sha = hashlib.sha256()
    for start in range(0, len(passages), COMMIT):
        end = min(start + COMMIT, len(passages))
        with env.begin(write=True) as txn:
            for s in range(start, end, BATCH):  # (small lists: faster than one per commit)
                records, keys, lines = _encode(passages[s:min(s + BATCH, end)], s)
                sha.update(lines)
                _put(txn, recs, ids, records, keys, s)
    env.sync(True)
    env.close()
    return sha.hexdigest()


def prebuilt_write(chunks: list, out: Path) -> str:
    env, recs, ids = _open(out)
    sha = hashlib.sha256()
    for start, (records, keys, lines) in chunks:
        sha.update(lines)
        with env.begin(write=True) as txn:
            _put(txn, recs, ids, records, keys, start)
    env.sync(True)
    env.close()
    return sha.hexdigest()


def berds_write(passages: list, out: Path) -> str:
    from berds.corpora.docstore import PassageStoreWriter

    with PassageStoreWriter(out) as w:
        w.add_many(passages)
    return w.fingerprint


def berds_add_write(passages: list, out: Path) -> str:
    from berds.corpora.docstore import PassageStoreWriter

    with PassageStoreWriter(out) as w:
        add = w.add
        for p in passages:
            add(p)
    return w.fingerprint


def _contestant(name: str, n: int, out: str, queue) -> None:
    """One write in a fresh process: its input is made first (untimed), so no contestant's heap holds another's
    data (a heap holding the prebuilt records of another slowed the batched writers by a quarter)."""
    import berds.corpora.docstore  # noqa: F401  (imports are not part of a write)

    passages = list(synthetic_passages(n))
    if name == "prebuilt":
        chunks = [(s, _encode(passages[s:s + COMMIT], s)) for s in range(0, n, COMMIT)]
        del passages
        run = lambda: prebuilt_write(chunks, Path(out))  # noqa: E731
    else:
        write = {"berds": berds_write, "berds add": berds_add_write, "raw": raw_write}[name]
        run = lambda: write(passages, Path(out))  # noqa: E731
    import gc

    gc.collect()
    started = time.perf_counter()
    fingerprint = run()
    queue.put((fingerprint, time.perf_counter() - started))


def in_fresh_process(name: str, n: int, out: Path) -> tuple[str, float]:
    return fresh_process(_contestant, name, n, str(out))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20000,100000,300000")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    import os

    print(f"store writes, passages of 100 words, each write in a fresh process; {os.cpu_count()} cores (shared, load "
          f"average {os.getloadavg()[0]:.1f} at the start); medians (min-max) of {args.rounds} alternating rounds")
    print(f"{'passages':>9} {'berds s':>17} {'berds add s':>17} {'raw s':>17} {'prebuilt s':>17} {'berds / raw':>18} "
          f"{'berds add / raw':>18} {'berds / prebuilt':>18}")
    work = Path(tempfile.mkdtemp(prefix="berds-store-write-"))
    names = ("berds", "berds add", "raw", "prebuilt")
    try:
        for n in map(int, args.sizes.split(",")):
            times: dict[str, list[float]] = {name: [] for name in names}
            for turn in range(args.rounds):
                calls = {name: (lambda name=name: in_fresh_process(name, n, work / name)) for name in names}
                got = take_turns(calls, turn)
                fingerprints = {name: result[0] for name, (result, _) in got.items()}
                assert len(set(fingerprints.values())) == 1, fingerprints  # the same store, fingerprint included
                for name, (result, _) in got.items():
                    times[name].append(result[1])  # (timed in the process, around the write only)
                for name in calls:
                    shutil.rmtree(work / name)
            ratio = [b / r for b, r in zip(times["berds"], times["raw"])]
            floor = [b / r for b, r in zip(times["berds"], times["prebuilt"])]
            one = [b / r for b, r in zip(times["berds add"], times["raw"])]
            print(f"{n:>9,} {spread(times['berds']):>17} {spread(times['berds add']):>17} {spread(times['raw']):>17} "
                  f"{spread(times['prebuilt']):>17} {spread(ratio) + 'x':>18} {spread(one) + 'x':>18} "
                  f"{spread(floor) + 'x':>18}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
