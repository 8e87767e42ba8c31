"""What the integrity checks of issue 33 cost (the figures in docs/reliability.md, "What the checks cost").

    python benchmarks/bench_integrity_checks.py                    # 200,000 passages, a 0.6 GB flat index
    python benchmarks/bench_integrity_checks.py --passages 50000 --faiss-rows 50000 --bm25   # + a BM25 build (Java)

Measured in one process, each the best of several runs (a shared machine is noisy), each against its baseline:
  id check            get_many of 100,000 random ids, and the comparison of their ids with those asked for alone
  verified stream     iter_batches / iter_utf8_batches with and without verify=True (the fingerprint recomputed)
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

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def best(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200_000)
    parser.add_argument("--faiss-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bm25", action="store_true", help="also time BM25 builds (needs Java and pyserini)")
    args = parser.parse_args()

    import numpy as np

    from berds.corpora.docstore import write_passage_store
    from berds.types import Passage

    with tempfile.TemporaryDirectory() as tmp:
        rnd = random.Random(0)
        store = write_passage_store((Passage(f"d-{i}", " ".join(rnd.choice(WORDS) for _ in range(100)), title=f"T{i}")
                                     for i in range(args.passages)), Path(tmp) / "store")
        ids = [f"d-{i}" for i in random.Random(1).sample(range(args.passages), min(100_000, args.passages))]
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
