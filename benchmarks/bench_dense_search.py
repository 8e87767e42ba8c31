"""Dense search outside the encoder: berds against raw FAISS for queries already encoded (on a GPU, or read from a
file), where the per-hit work around FAISS decides the speed.

A store of ``--passages`` synthetic passages (60-100 words) is indexed flat with a tiny random BERT built here
(tests/retrieval_fixtures.py: the model only makes the vectors), then ``--queries`` random query vectors are
searched at k = 10 and 100 by:

* raw ids    — ``faiss.Index.search`` + row -> id from a Python list;
* berds ids  — ``DenseIndex.search`` (the same, plus equal scores at the cut ordered by passage id);
* raw texts  — raw ids + id -> (title, text) from a dict of the whole corpus in memory (the fastest a user can
               do, at the memory cost of the corpus: no option at 21M passages);
* raw store  — raw ids + (id, title, text) read from an LMDB database by row: the store's own ``data.mdb``, a
               ``get`` per hit (a copy of it) of the record keyed by the row number in one read transaction, its UTF-8 decoded
               and sliced by the header's lengths (no checksum, no ``Passage``: the strongest raw read from disk);
* berds hits — what ``DenseRetriever.search`` does once the queries are encoded, for an index built from the
               store (its rows are the store's record numbers): ``DenseIndex.search_rows`` + ``hits_from_records``,
               ``Hit``s with their ``Passage``s read by record number (``PassageStore.get_hits``: checked, decoded
               and made into hits in one loop), their ids checked against the index's;
* berds hits by id — the path before (and for indexes that do not record their row order): ``DenseIndex.search``
               + ``hits_from_store`` (``get_many``: each id looked up in the store's id table).

Contestants take turns, each round led by another (benchmarks/turns.py); medians (min-max) of ``--rounds`` and
of the per-round ratios are printed, and both sides must return the same ids.

    python benchmarks/bench_dense_search.py --passages 20000 --queries 200 --rounds 10
    python benchmarks/bench_dense_search.py --passages 20000 --queries 200 --rounds 10 --dim 256
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
    ap.add_argument("--dim", type=int, default=16, help="the tiny model's vector size (FAISS's share grows with it)")
    ap.add_argument("--pieces", action="store_true", help="also time the per-hit pieces of the berds hits at k=100 "
                                                           "(the record reads, the CRC, the Hits) beside the raw read")
    args = ap.parse_args(argv)

    import faiss
    from retrieval_fixtures import random_passages, tiny_bert

    from berds.corpora.docstore import PassageStore, write_passage_store
    from berds.indexes.base import read_ids
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import DenseIndex, build_dense_index
    from berds.retrievers.base import hits_from_records, hits_from_store

    work = Path(tempfile.mkdtemp(prefix="berds-bench-dense-search-"))
    try:
        spec = EncoderSpec(name="tiny", model=str(tiny_bert(work / "bert", hidden=args.dim)), pooling="mean", max_length=32)
        write_passage_store(random_passages(args.passages, seed=1, min_words=60, max_words=100), work / "store")
        build_dense_index(work / "store", work / "index", encoder=spec, progress=False, batch_size=256)
        index = DenseIndex(work / "index")
        index.open(per_group=False)
        assert index.rows_are_store_records
        store = PassageStore.open(work / "store")
        raw_index = faiss.read_index(str(work / "index" / "faiss.index"))
        ids = read_ids(work / "index" / "docids.txt")
        texts = {p.id: (p.title, p.text) for p in store}
        vectors = np.random.default_rng(0).standard_normal((args.queries, raw_index.d)).astype(np.float32)

        def raw_ids(k):
            s, r = raw_index.search(vectors, k)
            return [[(ids[j], x) for x, j in zip(sr, rr) if j >= 0] for sr, rr in zip(s.tolist(), r.tolist())]

        import lmdb
        import struct

        shutil.copytree(work / "store", work / "raw-store")  # (LMDB opens a file once per process: berds holds it)
        env = lmdb.open(str(work / "raw-store"), readonly=True, lock=False, max_dbs=3)
        records = env.begin(db=env.open_db(b"passages", create=False))
        rec_get, key, head = records.get, struct.Struct(">Q").pack, struct.Struct("<iIII").unpack_from

        def from_record(value):
            _, a, t, s = head(value)
            text = value[16:-4].decode("utf-8")
            return text[:a], text[a:a + t], text[a + t + s:]

        def raw_store(k):
            s, r = raw_index.search(vectors, k)
            return [[(ids[j], x, from_record(rec_get(key(j)))) for x, j in zip(sr, rr) if j >= 0]
                    for sr, rr in zip(s.tolist(), r.tolist())]

        def raw_texts(k):
            s, r = raw_index.search(vectors, k)
            return [[(ids[j], x, texts[ids[j]]) for x, j in zip(sr, rr) if j >= 0]
                    for sr, rr in zip(s.tolist(), r.tolist())]

        print(f"dense search of {args.queries} encoded queries over {args.passages:,} passages (flat, "
              f"{raw_index.d}-d); {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}); medians (min-max) "
              f"of {args.rounds} alternated rounds")
        for k in (10, 100):
            calls = {"raw ids": lambda: raw_ids(k), "berds ids": lambda: index.search(vectors, k),
                     "raw texts": lambda: raw_texts(k), "raw store": lambda: raw_store(k),
                     "berds hits": lambda: hits_from_records(store, *index.search_rows(vectors, k)),
                     "hits by id": lambda: hits_from_store(store, index.search(vectors, k))}
            times: dict[str, list[float]] = {name: [] for name in calls}
            for turn in range(args.rounds):
                got = take_turns(calls, turn)
                for name, (_, secs) in got.items():
                    times[name].append(secs)
            def above_cut(pairs):  # (id, score) ranked; those scoring above the last (ties at the cut: berds searches
                # deeper and keeps the smallest ids, raw FAISS keeps its row order; both are right)
                pairs = sorted(pairs, key=lambda t: (-t[1], t[0]))
                return [(d, x) for d, x in pairs if x > pairs[-1][1]], [x for _, x in pairs]

            raw = [above_cut(q) for q in got["raw ids"][0]]
            assert raw == [above_cut(q) for q in got["berds ids"][0]], "ids differ"
            assert raw == [above_cut([(h.passage.id, h.score) for h in q]) for q in got["berds hits"][0]], "hits differ"
            assert got["berds hits"][0] == got["hits by id"][0], "hits by record differ from hits by id"
            served = {h.passage.id: h.passage.text for q in got["berds hits"][0] for h in q}
            assert all(served.get(d, t[2]) == t[2] for q in got["raw store"][0] for d, _, t in q), "texts differ"
            for berds, raw in (("berds ids", "raw ids"), ("berds hits", "raw store"), ("berds hits", "raw texts"),
                               ("hits by id", "raw store")):
                ratio = [b / r for b, r in zip(times[berds], times[raw])]
                print(f"k={k:<3} {berds:>10} {spread([args.queries / t for t in times[berds]], '{:,.0f}'):>26} q/s   "
                      f"{raw:>9} {spread([args.queries / t for t in times[raw]], '{:,.0f}'):>26} q/s   "
                      f"berds/raw {spread(ratio)}x time")
        if args.pieces:
            pieces(store, index, vectors, rec_get, key, from_record, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pieces(store, index, vectors, rec_get, key, from_record, rounds: int) -> None:
    """Where the berds hits' time goes at k=100, beside the raw read of the same records: µs a hit, medians
    (min-max) of alternating rounds (the FAISS search, the same for both, is left out)."""
    import zlib

    from berds.corpora import docstore
    from berds.retrievers.base import hits_from_records
    from berds.types import hits_of

    found, rows = index.search_rows(vectors, 100)
    flat = [r for rs in rows for r in rs]
    scores = [x for pairs in found for _, x in pairs]
    store_crc = docstore._crc32

    def with_zlib_crc():
        docstore._crc32 = zlib.crc32
        try:
            return store.get_records(flat)
        finally:
            docstore._crc32 = store_crc

    calls = {"raw: LMDB get + decode + slices": lambda: [from_record(rec_get(key(j))) for j in flat],
             "get_records (store's CRC-32)": lambda: store.get_records(flat),
             "get_records (zlib's CRC-32)": with_zlib_crc,
             "get_records + hits_of (two loops)": lambda: hits_of(store.get_records(flat), scores),
             "get_hits (one loop: CRC, Hits, ids)": lambda: store.get_hits(flat, scores),
             "hits_from_records (+ id check, rank)": lambda: hits_from_records(store, found, rows)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for turn in range(rounds):
        for name, (_, secs) in take_turns(calls, turn).items():
            times[name].append(1e6 * secs / len(flat))
    print(f"per hit at k=100 ({len(flat):,} hits, FAISS left out), µs, medians (min-max) of {rounds} rounds; "
          "ratio to the raw read per round")
    for name, us in times.items():
        ratio = [a / b for a, b in zip(us, times["raw: LMDB get + decode + slices"])]
        print(f"  {name:38} {spread(us, '{:.2f}'):>20}   {spread(ratio)}x")


if __name__ == "__main__":
    main()
