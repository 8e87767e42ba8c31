"""Corpus benchmarks: splitter throughput, passage-store random lookups, peak memory while building.

Every number is printed next to a baseline measured in the same run (the raw-engine rows are the honest
comparison for lookups; the jsonl and dict rows show what the usual quick hacks cost in memory and open time):

* splitter   — ``berds.corpora.split.word_windows`` vs the strongest raw way (``str.split()`` and a join per
               window; a character loop was the baseline before issue 36), alternated rounds (MB of text per
               second, one process = one core).
* build      — peak memory (RSS, each build in a fresh process) of ``PassageStoreWriter`` vs the naive way
               (keep every passage in a dict, then dump it), plus passages/s and bytes on disk.
* lookups    — random ``store.get(id)`` per second vs a jsonl file with an in-memory id -> offset dict, and
               vs a plain in-memory dict of all passages (the fastest possible, at the memory cost shown).
* raw engine — ``get``, ``get_many`` and a full scan vs the raw engine under the store (LMDB, via ``lmdb``
               on the same ``data.mdb``: two ``get`` calls and a struct unpack into a tuple per passage), so
               the price of berds' layer (Passage objects, errors, threads) is a ratio in the same run.
               ``bench_store_engines.py`` compares the engines themselves (SQLite, LMDB, Arrow, Parquet).

Synthetic passages: 100 words drawn from a Zipf-like vocabulary of 30k pseudo-words (so zlib sees text
about as compressible as English), titles shared by runs of ~10 passages like Wikipedia articles.

    python benchmarks/bench_corpora.py                 # 1M passages (a few minutes on 2 cores)
    python benchmarks/bench_corpora.py --passages 200000 --lookups 100000 --zlib
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turns import spread, take_turns  # noqa: E402


def vocabulary(n: int = 30_000, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = sorted({"".join(rng.choices(letters, weights=range(26, 0, -1), k=rng.randint(1, 10))) for _ in range(n * 2)})[:n]
    rng.shuffle(words)
    probs = 1.0 / np.arange(1, len(words) + 1)
    return words, probs / probs.sum()


def synthetic_passages(n: int, seed: int = 0):
    """Yield ``Passage`` objects (ids "0".."n-1"), generated in chunks with numpy to keep it cheap."""
    from berds.types import Passage

    words, probs = vocabulary()
    rng = np.random.default_rng(seed)
    chunk = 10_000
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        idx = rng.choice(len(words), size=(m, 100), p=probs)
        for j in range(m):
            i = start + j
            yield Passage(id=str(i), text=" ".join(words[k] for k in idx[j]), title=f"Article {i // 10}", source="")


def synthetic_text(n_bytes: int) -> str:
    words, probs = vocabulary()
    rng = np.random.default_rng(1)
    out, size = [], 0
    while size < n_bytes:
        idx = rng.choice(len(words), size=20_000, p=probs)
        piece = " ".join(words[k] for k in idx)
        # Paragraph breaks and odd whitespace, as in cleaned web text.
        piece = piece.replace(" e ", "\n\n").replace(" a ", "\t")
        out.append(piece)
        size += len(piece)
    return " ".join(out)


def raw_windows(text: str, n: int = 100) -> list[str]:
    """The strongest raw splitter a user would write: ``str.split()`` and a join per slice of ``n`` words."""
    words = text.split()
    return [" ".join(words[i:i + n]) for i in range(0, len(words), n)]


def bench_splitter(mb: int, rounds: int = 5) -> dict:
    import statistics

    from berds.corpora.split import word_windows

    text = synthetic_text(mb * 1_000_000)
    size = len(text.encode("utf-8")) / 1e6
    docs = [text[i : i + 20_000] for i in range(0, len(text), 20_000)]  # ~3k-word documents
    times: dict[str, list[float]] = {"ours": [], "raw": []}
    for turn in range(rounds):  # alternated, each round led by the other (benchmarks/turns.py)
        got = take_turns({"ours": lambda: [word_windows(d) for d in docs],
                          "raw": lambda: [raw_windows(d) for d in docs]}, turn)
        assert got["ours"][0] == got["raw"][0]
        for name, (_, secs) in got.items():
            times[name].append(secs)
    return {"MB": size, "ours_MBps": size / statistics.median(times["ours"]),
            "raw_MBps": size / statistics.median(times["raw"]),
            "ratios": [o / r for o, r in zip(times["ours"], times["raw"])]}


# -- builds run in fresh processes so peak RSS belongs to one build ---------------------------------
def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def _build_ours(out: str, n: int, queue, compression: str = "none") -> None:
    from berds.corpora.docstore import PassageStoreWriter

    base = _rss_mb()
    t = time.perf_counter()
    with PassageStoreWriter(out, overwrite=True, compression=compression) as w:
        w.add_many(synthetic_passages(n))
    queue.put({"seconds": time.perf_counter() - t, "peak_mb": _rss_mb() - base, "disk": _du(out)})


def _build_naive(out: str, n: int, queue) -> None:
    base = _rss_mb()
    t = time.perf_counter()
    passages = {}
    for p in synthetic_passages(n):
        if p.id in passages:
            raise ValueError(p.id)
        passages[p.id] = p
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "passages.jsonl"), "w", encoding="utf-8") as f:
        for p in passages.values():
            f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
    queue.put({"seconds": time.perf_counter() - t, "peak_mb": _rss_mb() - base, "disk": _du(out)})


def _idle(queue) -> None:
    from berds.types import Passage  # noqa: F401  (same imports as a build, nothing else)

    queue.put({"peak_mb": _rss_mb()})


def _du(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def in_fresh_process(target, *args, **kwargs) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue), kwargs=kwargs)
    proc.start()
    result = queue.get()
    proc.join()
    if proc.exitcode:
        raise RuntimeError(f"{target.__name__} failed with exit code {proc.exitcode}")
    return result


def bench_lookups(store_path: str, naive_path: str, n: int, lookups: int, raw_engine: bool = True) -> dict:
    from berds.corpora.docstore import PassageStore

    rng = random.Random(7)
    ids = [str(rng.randrange(n)) for _ in range(lookups)]
    store = PassageStore.open(store_path)
    t = time.perf_counter()
    for pid in ids:
        store.get(pid)
    ours = lookups / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(0, lookups, 1000):
        store.get_many(ids[i : i + 1000])
    ours_batched = lookups / (time.perf_counter() - t)

    # Baseline 1: jsonl + id -> offset dict in memory (the usual quick hack).
    t = time.perf_counter()
    offsets = {}
    with open(os.path.join(naive_path, "passages.jsonl"), "rb") as f:
        pos = 0
        for line in f:
            offsets[json.loads(line)["id"]] = pos
            pos += len(line)
    open_naive = time.perf_counter() - t
    with open(os.path.join(naive_path, "passages.jsonl"), "rb") as f:
        t = time.perf_counter()
        for pid in ids:
            f.seek(offsets[pid])
            json.loads(f.readline())
        seek = lookups / (time.perf_counter() - t)
    del offsets
    # Baseline 2: everything in a dict.
    rss0 = _rss_mb()
    with open(os.path.join(naive_path, "passages.jsonl"), "rb") as f:
        everything = {}
        for line in f:
            rec = json.loads(line)
            everything[rec["id"]] = rec
    dict_mb = _rss_mb() - rss0
    t = time.perf_counter()
    for pid in ids:
        everything[pid]
    in_memory = lookups / (time.perf_counter() - t)
    t = time.perf_counter()
    store2 = PassageStore.open(store_path)
    open_ours = time.perf_counter() - t
    assert store2.get(ids[0]).text == everything[ids[0]]["text"]
    return {"ours": ours, "ours_batched": ours_batched, "seek": seek, "dict": in_memory, "dict_mb": dict_mb,
            "open_ours_s": open_ours, "open_seek_s": open_naive,
            **(bench_raw_engine(store_path, ids, rounds=3) if raw_engine else {})}


def bench_raw_engine(store_path: str, ids: list[str], rounds: int) -> dict:
    """berds' PassageStore vs raw LMDB on the same file: alternated rounds, best of each (a shared machine)."""
    import struct


    from berds.corpora.docstore import PassageStore

    head = struct.Struct("<iIII")

    def unpack(value: bytes) -> tuple:
        _, a, t, s = head.unpack_from(value)
        text = value[16:-4].decode("utf-8")  # (store format 3: the record ends with its CRC-32, unchecked here)
        return text[:a], text[a + t + s:], text[a:a + t], text[a + t:a + t + s]

    from berds.corpora.docstore import _reader_env

    env = _reader_env(Path(store_path))  # LMDB allows one environment per file and process: share berds' one
    id_db, passage_db = env.open_db(b"ids", create=False), env.open_db(b"passages", create=False)
    id_get, passage_get = env.begin(db=id_db).get, env.begin(db=passage_db).get
    store = PassageStore.open(store_path)

    def raw_get():
        for pid in ids:
            unpack(passage_get(id_get(pid.encode())))

    def raw_get_many():
        for i in range(0, len(ids), 1000):
            [unpack(passage_get(id_get(p.encode()))) for p in ids[i:i + 1000]]

    def raw_scan():
        with env.begin(db=passage_db) as txn, txn.cursor() as cursor:
            return sum(1 for _ in map(unpack, cursor.iternext(keys=False)))

    def ours_get():
        for pid in ids:
            store.get(pid)

    def ours_get_many():
        for i in range(0, len(ids), 1000):
            store.get_many(ids[i:i + 1000])

    def ours_scan():
        return sum(1 for _ in store)

    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in (("raw_get", raw_get), ("ours_get", ours_get), ("raw_get_many", raw_get_many),
                         ("ours_get_many", ours_get_many), ("raw_scan", raw_scan), ("ours_scan", ours_scan)):
            t = time.perf_counter()
            count = fn()
            rate = (count or len(ids)) / (time.perf_counter() - t)
            best[name] = max(best.get(name, 0.0), rate)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--lookups", type=int, default=100_000)
    ap.add_argument("--split-mb", type=int, default=20)
    ap.add_argument("--workdir", default=None, help="where to build the stores (default: a temp folder, removed after)")
    ap.add_argument("--zlib", action="store_true", help="also build a compression='zlib' store and time its lookups")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)  # full tables when piped to a file
    work = Path(args.workdir or tempfile.mkdtemp(prefix="berds-bench-"))
    try:
        console.print(f"splitter on {args.split_mb} MB of synthetic text ...")
        sp = bench_splitter(args.split_mb)
        console.print(f"building {args.passages:,} passages twice (ours, naive), each in a fresh process ...")
        idle = in_fresh_process(_idle)["peak_mb"]
        ours = in_fresh_process(_build_ours, str(work / "store"), args.passages)
        naive = in_fresh_process(_build_naive, str(work / "naive"), args.passages)
        console.print(f"{args.lookups:,} random lookups ...")
        lk = bench_lookups(str(work / "store"), str(work / "naive"), args.passages, args.lookups)
        packed = None
        if args.zlib:
            packed = in_fresh_process(_build_ours, str(work / "zlib"), args.passages, compression="zlib")
            packed.update(bench_lookups(str(work / "zlib"), str(work / "naive"), args.passages, args.lookups, raw_engine=False))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    t = Table(title=f"berds corpora benchmark ({args.passages:,} passages, {os.cpu_count()} cores, 1 used)")
    for col in ("measure", "berds", "baseline", "ratio (berds / baseline)"):
        t.add_column(col, justify="right" if col != "measure" else "left")
    t.add_row("splitter, MB/s per core (medians)", f"{sp['ours_MBps']:.1f}", f"{sp['raw_MBps']:.1f} (str.split + join)",
              spread(sp["ratios"]) + "x time")
    t.add_row("build: peak memory above idle (MB)", f"{ours['peak_mb']:.0f}", f"{naive['peak_mb']:.0f} (dict then dump)",
              f"{ours['peak_mb'] / naive['peak_mb']:.2f}x")
    t.add_row("build: passages/s", f"{args.passages / ours['seconds']:,.0f}", f"{args.passages / naive['seconds']:,.0f}",
              f"{naive['seconds'] / ours['seconds']:.2f}x")
    t.add_row("build: bytes on disk", f"{ours['disk'] / 1e6:,.0f} MB", f"{naive['disk'] / 1e6:,.0f} MB (jsonl)",
              f"{ours['disk'] / naive['disk']:.2f}x")
    t.add_row("random lookups/s (get)", f"{lk['ours']:,.0f}", f"{lk['seek']:,.0f} (naive: jsonl + offset dict)", f"{lk['ours'] / lk['seek']:.2f}x")
    t.add_row("random lookups/s (get_many, 1000)", f"{lk['ours_batched']:,.0f}", f"{lk['dict']:,.0f} (all in a dict)",
              f"{lk['ours_batched'] / lk['dict']:.3f}x")
    for what, key in (("random get/s", "get"), ("get_many/s (1,000 ids)", "get_many"), ("full scan passages/s", "scan")):
        t.add_row(f"{what} vs raw LMDB (same file)", f"{lk['ours_' + key]:,.0f}", f"{lk['raw_' + key]:,.0f} (lmdb + struct)",
                  f"{lk['raw_' + key] / lk['ours_' + key]:.2f}x time")
    if packed is not None:
        t.add_row("compression=zlib: lookups/s (get)", f"{packed['ours']:,.0f}", f"{lk['ours']:,.0f} (uncompressed store)",
                  f"{packed['ours'] / lk['ours']:.2f}x")
        t.add_row("compression=zlib: bytes on disk", f"{packed['disk'] / 1e6:,.0f} MB", f"{ours['disk'] / 1e6:,.0f} MB (uncompressed store)",
                  f"{packed['disk'] / ours['disk']:.2f}x")
    t.add_row("memory to serve lookups (MB)", "index memory-mapped", f"{lk['dict_mb']:,.0f} (all in a dict)", "")
    t.add_row("open time (s)", f"{lk['open_ours_s']:.3f}", f"{lk['open_seek_s']:.1f} (build offset dict)",
              f"{lk['open_ours_s'] / lk['open_seek_s']:.4f}x")
    console.print(t)
    console.print(f"(idle process with berds imported: {idle:.0f} MB RSS; 21M DPR passages extrapolate to "
                  f"~{ours['disk'] / args.passages * 21e6 / 1e9:.1f} GB on disk)")


if __name__ == "__main__":
    main()
