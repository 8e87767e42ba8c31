"""What the integrity checks of issue 33 cost (the figures in docs/reliability.md, "What the checks cost").

    python benchmarks/bench_integrity_checks.py                    # 200,000 passages, a 0.6 GB flat index
    python benchmarks/bench_integrity_checks.py --passages 50000 --faiss-rows 50000 --bm25   # + a BM25 build (Java)

Measured in one process, each the best of several runs (a shared machine is noisy), each against its baseline:
  id check            get_many of 100,000 random ids, and the comparison of their ids with those asked for alone
  verified stream     iter_batches / iter_utf8_batches with and without verify=True (the fingerprint recomputed)
  record checksums    (store format 3) the same reads of the same passages in a format-3 store (each record's
                      CRC-32 checked) and in its format-2 copy (the same records without the 4-byte CRC), the two
                      alternating round by round (benchmarks/turns.py); medians (min-max) of --rounds
  FAISS SHA-256       read_faiss with the size check only, and with the SHA-256 check too; write_faiss (with its hash)
  BM25 build          (--bm25) build_bm25_index with the verified read and with the plain one, alternately
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from turns import spread, take_turns  # noqa: E402

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def best(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def format2_copy(store, out: Path):
    """The same store in format 2: every record without its 4-byte CRC-32 (format 3 = format 2 + the CRC)."""
    import json
    import shutil

    import lmdb

    from berds.corpora.docstore import PassageStore

    shutil.copytree(store.path, out)
    env = lmdb.open(str(out), map_size=1 << 36, max_dbs=3)
    db = env.open_db(b"passages")
    with env.begin(write=True, db=db) as txn:
        for key, value in list(txn.cursor().iternext()):
            txn.put(key, value[:-4], db=db)
    env.close()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["format"] = 2
    manifest["files"]["data.mdb"] = (out / "data.mdb").stat().st_size
    (out / "manifest.json").write_text(json.dumps(manifest))
    return PassageStore.open(out)


def checksum_rows(store, ids: list[str], rounds: int, tmp: Path) -> None:
    """Each read of a format-3 store against its format-2 copy, alternating: the CRC's cost per passage."""
    old = format2_copy(store, tmp / "format2")
    assert old.verify()["fingerprint"] == store.fingerprint
    n = len(store)
    reads = {
        "scan (iter_batches)": (lambda s: sum(map(len, s.iter_batches(1024))), n),
        "scan (iter_utf8_batches, what Lucene reads)": (lambda s: sum(map(len, s.iter_utf8_batches(1024))), n),
        "whole-store read for indexing (utf8, verify=True)": (
            lambda s: sum(map(len, s.iter_utf8_batches(1024, verify=True))), n),
        "get_many (1,000 ids a call)": (lambda s: [s.get_many(ids[i:i + 1000]) for i in range(0, len(ids), 1000)],
                                        len(ids)),
    }
    print(f"\nrecord checksums: {n:,} passages, format 3 (CRC-32 checked) vs the same records in format 2; "
          f"µs a passage, medians (min-max) of {rounds} alternating rounds")
    print(f"{'read':52} {'format 2':>18} {'format 3':>18} {'3 - 2':>20}")
    for name, (read, count) in reads.items():
        times: dict[str, list[float]] = {"2": [], "3": []}
        for turn in range(rounds):
            for label, (_, seconds) in take_turns({"2": lambda: read(old), "3": lambda: read(store)}, turn).items():
                times[label].append(1e6 * seconds / count)
        diffs = [b - a for a, b in zip(times["2"], times["3"])]
        fmt = "{:.2f}"
        print(f"{name:52} {spread(times['2'], fmt):>18} {spread(times['3'], fmt):>18} {spread(diffs, fmt):>20}")
    import zlib

    from berds.corpora.docstore import _crc32

    values = list(store._values())  # (in memory: the CRC alone, no LMDB read around it)
    crcs = {"the store's CRC-32 (" + _crc32.__module__ + ")": _crc32, "zlib.crc32": zlib.crc32}
    times = {label: [] for label in crcs}
    for turn in range(rounds):
        for label, (_, seconds) in take_turns({label: (lambda fn=fn: list(map(fn, values)))
                                               for label, fn in crcs.items()}, turn).items():
            times[label].append(1e9 * seconds / len(values))
    for label, ns in times.items():
        print(f"{label} of every stored value, in memory: {spread(ns, '{:.0f}')} ns a record "
              f"(~{sum(map(len, values)) // len(values)} bytes)")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200_000)
    parser.add_argument("--faiss-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bm25", action="store_true", help="also time BM25 builds (needs Java and pyserini)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds of the record-checksum rows")
    parser.add_argument("--only-checksums", action="store_true", help="only the record-checksum rows")
    args = parser.parse_args()

    import numpy as np

    from berds.corpora.docstore import write_passage_store
    from berds.types import Passage

    with tempfile.TemporaryDirectory() as tmp:
        rnd = random.Random(0)
        store = write_passage_store((Passage(f"d-{i}", " ".join(rnd.choice(WORDS) for _ in range(100)), title=f"T{i}")
                                     for i in range(args.passages)), Path(tmp) / "store")
        ids = [f"d-{i}" for i in random.Random(1).sample(range(args.passages), min(100_000, args.passages))]
        checksum_rows(store, ids, args.rounds, Path(tmp))
        if args.only_checksums:
            return
        found = store.get_many(ids)
        lookup = best(lambda: store.get_many(ids), args.repeats)
        check = best(lambda: list(map(attrgetter("id"), found)) == ids, args.repeats)
        print(f"get_many of {len(ids):,} ids: {lookup:.3f} s; of which the id check {1000 * check:.1f} ms "
              f"({100 * check / lookup:.1f}%)")
        for name, read in (("iter_batches", store.iter_batches), ("iter_utf8_batches", store.iter_utf8_batches)):
            plain = best(lambda: sum(map(len, read(1024))), args.repeats)
            verified = best(lambda: sum(map(len, read(1024, verify=True))), args.repeats)
            print(f"{name} of {args.passages:,} passages: {plain:.2f} s, verified {verified:.2f} s "
                  f"({1e6 * (verified - plain) / args.passages:.1f} µs a passage more)")

        import faiss

        from berds.indexes.faiss import read_faiss, write_faiss

        index = faiss.IndexFlatIP(768)
        index.add(np.random.default_rng(0).random((args.faiss_rows, 768), dtype=np.float32))
        path = Path(tmp) / "faiss.index"
        started = time.perf_counter()
        size, digest = write_faiss(index, path)
        written = time.perf_counter() - started
        sized = best(lambda: read_faiss(path, folder=path.parent, meta={"faiss_bytes": size}), args.repeats)
        hashed = best(lambda: read_faiss(path, folder=path.parent, meta={"faiss_bytes": size, "faiss_sha256": digest}),
                      args.repeats)
        print(f"faiss.index of {size / 1e9:.2f} GB: written (with its SHA-256) in {written:.2f} s; read {sized:.2f} s, "
              f"with the SHA-256 check {hashed:.2f} s ({(hashed - sized) / (size / 1e9):.1f} s per GB more)")

        if args.bm25:
            import shutil

            import berds.indexes.bm25 as bm25

            verified_read = bm25.whole_store_batches

            def plain_read(store, batch_size, *, utf8=False):
                return (store.iter_utf8_batches if utf8 else store.iter_batches)(batch_size)

            bm25.build_bm25_index(store, Path(tmp) / "warm", progress=False)  # (the JVM starts here, not in a timing)
            times: dict[str, list[float]] = {"verified": [], "plain": []}
            for _ in range(args.repeats):
                for label, read in (("verified", verified_read), ("plain", plain_read)):
                    bm25.whole_store_batches = read
                    shutil.rmtree(Path(tmp) / "idx", ignore_errors=True)
                    started = time.perf_counter()
                    bm25.build_bm25_index(store, Path(tmp) / "idx", progress=False)
                    times[label].append(time.perf_counter() - started)
            bm25.whole_store_batches = verified_read
            print(f"BM25 build of {args.passages:,} passages: {min(times['plain']):.2f} s, verified "
                  f"{min(times['verified']):.2f} s (best of {args.repeats})")


if __name__ == "__main__":
    main()
