"""Dense search outside the encoder: berds against raw FAISS for queries already encoded (on a GPU, or read from a
file), where the per-hit work around FAISS decides the speed.

A store of ``--passages`` synthetic passages (60-100 words) is indexed flat with a tiny random BERT built here
(tests/retrieval_fixtures.py: the model only makes the vectors), then ``--queries`` random query vectors are
searched at k = 10 and 100 by:

* raw ids    — ``faiss.Index.search`` + row -> id from a Python list;
* berds ids  — ``DenseIndex.search`` (the same, plus equal scores at the cut ordered by passage id);
* raw texts  — raw ids + id -> (title, text) from a dict of the whole corpus in memory (the fastest a user can
               do, at the memory cost of the corpus: no option at 21M passages);
* berds hits — ``DenseIndex.search`` + ``hits_from_store``: ``Hit``s with their ``Passage``s from the store.

Contestants take turns, each round led by another (benchmarks/turns.py); medians (min-max) of ``--rounds`` and
of the per-round ratios are printed, and both sides must return the same ids.

    python benchmarks/bench_dense_search.py --passages 20000 --queries 200 --rounds 10
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]
from turns import spread, take_turns  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args(argv)

    import faiss
    from retrieval_fixtures import random_passages, tiny_bert

    from berds.corpora.docstore import PassageStore, write_passage_store
    from berds.indexes.base import read_ids
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import DenseIndex, build_dense_index
    from berds.retrievers.base import hits_from_store

    work = Path(tempfile.mkdtemp(prefix="berds-bench-dense-search-"))
    try:
        spec = EncoderSpec(name="tiny", model=str(tiny_bert(work / "bert")), pooling="mean", max_length=32)
        write_passage_store(random_passages(args.passages, seed=1, min_words=60, max_words=100), work / "store")
        build_dense_index(work / "store", work / "index", encoder=spec, progress=False, batch_size=256)
        index = DenseIndex(work / "index")
        index.open(per_group=False)
        store = PassageStore.open(work / "store")
        raw_index = faiss.read_index(str(work / "index" / "faiss.index"))
        ids = read_ids(work / "index" / "docids.txt")
        texts = {p.id: (p.title, p.text) for p in store}
        vectors = np.random.default_rng(0).standard_normal((args.queries, raw_index.d)).astype(np.float32)

        def raw_ids(k):
            s, r = raw_index.search(vectors, k)
            return [[(ids[j], x) for x, j in zip(sr, rr) if j >= 0] for sr, rr in zip(s.tolist(), r.tolist())]

        def raw_texts(k):
            s, r = raw_index.search(vectors, k)
            return [[(ids[j], x, texts[ids[j]]) for x, j in zip(sr, rr) if j >= 0]
                    for sr, rr in zip(s.tolist(), r.tolist())]

        print(f"dense search of {args.queries} encoded queries over {args.passages:,} passages (flat, "
              f"{raw_index.d}-d); {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}); medians (min-max) "
              f"of {args.rounds} alternated rounds")
        for k in (10, 100):
            calls = {"raw ids": lambda: raw_ids(k), "berds ids": lambda: index.search(vectors, k),
                     "raw texts": lambda: raw_texts(k), "berds hits": lambda: hits_from_store(store, index.search(vectors, k))}
            times: dict[str, list[float]] = {name: [] for name in calls}
            for turn in range(args.rounds):
                got = take_turns(calls, turn)
                for name, (_, secs) in got.items():
                    times[name].append(secs)
            ranked = [[d for d, _ in sorted(q, key=lambda t: (-t[1], t[0]))] for q in got["raw ids"][0]]
            assert ranked == [[d for d, _ in q] for q in got["berds ids"][0]], "ids differ"
            assert ranked == [[h.passage.id for h in q] for q in got["berds hits"][0]], "hits differ"
            for berds, raw in (("berds ids", "raw ids"), ("berds hits", "raw texts")):
                ratio = [b / r for b, r in zip(times[berds], times[raw])]
                print(f"k={k:<3} {berds:>10} {spread([args.queries / t for t in times[berds]], '{:,.0f}'):>26} q/s   "
                      f"{raw:>9} {spread([args.queries / t for t in times[raw]], '{:,.0f}'):>26} q/s   "
                      f"berds/raw {spread(ratio)}x time")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
