"""BM25 benchmark: berds' Lucene BM25 next to raw pyserini and to bm25s on the same data, same run.

Measured, on synthetic 100-word passages (Zipf-distributed vocabulary of 30k pseudo-words plus English
stopwords, so analysis and posting lists look like text):

* vs raw pyserini (same Anserini jar, same ``--threads`` for both) — indexing: ``build_bm25_index`` from the
              passage store vs pyserini's documented way, ``IndexCollection`` over JsonCollection files
              written beforehand (one per thread); search at k=10 and k=100: ``LuceneSearcher.batch_search``
              plus reading every hit's docid and score, vs berds' ``LuceneSearcher.search``,
              ``BM25Retriever.search`` (hits carry their passages' texts) and ``retrieve()`` (berds moves hits
              and passages across the Java bridge as arrays: ``berds/data/java/LuceneBridge.java``). Contestants take
              turns every 100 queries and the best of ``--rounds`` is kept (the machine is shared); the run
              checks that ids, scores and order are identical. Anserini's ``batch_search`` runs a pool of
              ``threads`` workers (earlier docs called its rows "1 thread": they were not).

* indexing  — passages/s: ``berds.indexes.bm25.build_bm25_index`` (reads the passage store, Anserini
              SimpleIndexer) vs ``bm25s`` (tokenize with its English stopwords + Snowball stemmer, then
              index; the ``lucene`` BM25 variant with the same k1=0.9, b=0.4). Also disk size.
* search    — queries/s at k=10 and k=100 (Lucene with ``--threads``; bm25s single-threaded with its numba
              backend when numba is installed, else numpy), and how often the two agree on the top hit / top 10.
* groups    — per-question corpora (one small corpus per question): berds' exact in-memory per-group
              scorer vs the naive way, one Lucene index per question (built, opened, searched, closed);
              measured on a sample of groups and extrapolated.

Ratios are printed against the baseline measured in the same process. Peak RSS includes the JVM.

    python benchmarks/bench_bm25.py                       # 1M passages (~10 min on 2 cores)
    python benchmarks/bench_bm25.py --passages 100000     # quick
    python benchmarks/bench_bm25.py --passages 50000 --skip-bm25s --skip-groups   # only berds vs raw pyserini
"""

from __future__ import annotations

import argparse
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
from turns import take_turns  # noqa: E402

STOPWORDS = "the of and to in is that for it as was with be by on not he this are or his from".split()


def vocabulary(n: int = 30_000, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = sorted({"".join(rng.choices(letters, weights=range(26, 0, -1), k=rng.randint(3, 10))) for _ in range(n * 2)})
    words = [w for w in words if w not in STOPWORDS][:n]
    rng.shuffle(words)
    words = STOPWORDS + words  # stopwords are the most frequent ranks, as in English
    probs = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    return words, probs / probs.sum()


def synthetic_texts(n: int, seed: int = 0) -> list[str]:
    words, probs = vocabulary()
    rng = np.random.default_rng(seed)
    vocab = np.array(words, dtype=object)
    out: list[str] = []
    for start in range(0, n, 20_000):
        idx = rng.choice(len(words), size=(min(20_000, n - start), 100), p=probs)
        out += [" ".join(row) for row in vocab[idx]]
    return out


def synthetic_queries(n: int, seed: int = 1) -> list[str]:
    words, _ = vocabulary()
    rng = random.Random(seed)
    content = words[len(STOPWORDS):]
    # Queries mix frequent and rarer words (ranks 20..5000), 3-8 words, sometimes a stopword.
    return [" ".join(rng.choice(content[20:5000]) for _ in range(rng.randint(3, 8)))
            + (" the" if rng.random() < 0.3 else "") for _ in range(n)]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def raw_pyserini_index(jsonl_dir: Path, out: Path, threads: int) -> None:
    """What pyserini's documentation does: ``python -m pyserini.index.lucene --collection JsonCollection ...``."""
    from berds.java import autoclass

    autoclass("io.anserini.index.IndexCollection").main([
        "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator", "-input", str(jsonl_dir),
        "-index", str(out), "-threads", str(threads), "-quiet"])


def raw_pyserini_search(searcher, queries: list[str], k: int, threads: int) -> list[list[tuple[str, float]]]:
    """pyserini's ``LuceneSearcher.batch_search`` (its own Python wrapper), then each hit's docid and score read."""
    qids = [str(i) for i in range(len(queries))]
    found = searcher.batch_search(queries, qids, k=k, threads=threads)
    return [[(h.docid, h.score) for h in found[q]] for q in qids]


def lucene_part(texts: list[str], queries: list[str], work: Path, threads: int, rounds: int) -> dict:
    """berds (store -> index -> retriever) next to raw pyserini on the same passages, same threads, same run."""
    import json

    os.environ.setdefault("OPENAI_API_KEY", "unused")  # pyserini.search builds an OpenAI client at import
    from berds.corpora.docstore import write_passage_store
    from berds.indexes.bm25 import LuceneSearcher, build_bm25_index
    from berds.java import start_jvm
    from berds.retrievers import retrieve
    from berds.retrievers.bm25 import BM25Retriever
    from berds.types import Passage, Question

    start_jvm()
    from pyserini.search.lucene import LuceneSearcher as PyseriniSearcher

    _, store_s = timed(write_passage_store, (Passage(str(i), t) for i, t in enumerate(texts)), work / "store")
    # pyserini's input: the same passages as JsonCollection files, one per thread (written untimed).
    (work / "jsonl").mkdir()
    per_file = -(-len(texts) // threads)
    for f in range(threads):
        with open(work / "jsonl" / f"part{f}.jsonl", "w", encoding="utf-8") as out:
            for i in range(f * per_file, min(len(texts), (f + 1) * per_file)):
                out.write(json.dumps({"id": str(i), "contents": texts[i]}) + "\n")
    index_berds, index_raw = [], []
    for r in range(rounds):  # alternated, so load on the shared machine hits both alike; best of the rounds
        for name in (("raw", "berds") if r % 2 == 0 else ("berds", "raw")):
            target = work / f"{name}-{r}"
            if name == "raw":
                index_raw.append(timed(raw_pyserini_index, work / "jsonl", target, threads)[1])
            else:
                index_berds.append(timed(build_bm25_index, work / "store", target, threads=threads, progress=False)[1])
    out = {"store_s": store_s, "index_berds_s": min(index_berds), "index_raw_s": min(index_raw),
           "disk_mb": folder_mb(work / "berds-0" / "lucene"), "raw_disk_mb": folder_mb(work / "raw-0")}
    index = work / "berds-0"
    searcher, out["open_s"] = timed(LuceneSearcher, index / "lucene")
    raw = PyseriniSearcher(str(work / "raw-0"))
    raw.set_bm25(0.9, 0.4)
    retriever = BM25Retriever(index=index, threads=threads)
    questions = [Question(id=f"q{i}", text=q, perspectives=("x",)) for i, q in enumerate(queries)]
    raw_search(raw, queries, 100, threads)  # warm-up: JIT and page cache, for every contestant
    retriever.search(questions[:200], k=100)
    chunk = 100  # contestants take turns (benchmarks/turns.py) every 100 queries
    for k in (10, 100):
        totals: dict[str, list[float]] = {"raw": [], "searcher": [], "retriever": [], "retrieve": []}
        raw_hits, ours, hits, run_ids = [], [], [], []
        for r in range(rounds):
            spent = dict.fromkeys(totals, 0.0)
            for turn, start in enumerate(range(0, len(queries), chunk)):
                texts, batch = queries[start:start + chunk], questions[start:start + chunk]
                calls = {"raw": lambda: raw_search(raw, texts, k, threads),
                         "searcher": lambda: searcher.search(texts, k, threads=threads),
                         "retriever": lambda: retriever.search(batch, k=k),
                         "retrieve": lambda: retrieve(retriever, batch, k=k, progress=False)}
                timings = take_turns(calls, turn)
                for name, (_, seconds) in timings.items():
                    spent[name] += seconds
                got, mine, found, run = (timings[name][0] for name in ("raw", "searcher", "retriever", "retrieve"))
                if r == 0:
                    raw_hits += got
                    ours += mine
                    hits += found
                    run_ids += [[h.passage.id for h in run.hits[q.id]] for q in batch]
            for name in totals:
                totals[name].append(spent[name])
        for name, ts in totals.items():
            out[f"q{k}_{name}"] = len(queries) / min(ts)
        same_ids = all([d for d, _ in a] == [h.passage.id for h in b] == ids for a, b, ids in zip(raw_hits, hits, run_ids))
        same_scores = all([s for _, s in a] == [h.score for h in b] for a, b in zip(raw_hits, hits))
        out[f"identical{k}"] = same_ids and same_scores
        out[f"hits{k}"] = ours
    searcher.close()
    retriever.close()
    raw.close()
    return out


raw_search = raw_pyserini_search


def bm25s_part(texts: list[str], queries: list[str], work: Path) -> dict:
    import bm25s

    try:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    except ImportError:
        stemmer = None
    try:
        import numba  # noqa: F401

        backend = "numba"
    except ImportError:
        backend = "numpy"
    start = time.perf_counter()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene", backend=backend)
    model.index(tokens, show_progress=False)
    index_s = time.perf_counter() - start
    del tokens
    model.save(str(work / "bm25s"))
    out = {"index_s": index_s, "disk_mb": folder_mb(work / "bm25s"), "backend": backend, "stemmer": stemmer is not None}
    q_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    model.retrieve(q_tokens, k=100, show_progress=False, n_threads=1)  # one untimed pass (numba compile, caches)
    for k in (10, 100):
        start = time.perf_counter()
        q_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
        docs, _ = model.retrieve(q_tokens, k=k, show_progress=False, n_threads=1)
        out[f"q{k}_t1"] = len(queries) / (time.perf_counter() - start)
        out[f"hits{k}"] = [[str(int(d)) for d in row] for row in docs]
    return out


def groups_part(n_groups: int, per_group: int, sample: int, work: Path) -> dict:
    """Per-question corpora: exact in-memory per-group BM25 vs one Lucene index per question."""
    from berds.corpora.docstore import PassageStoreWriter, write_passage_store
    from berds.indexes.bm25 import GroupedBM25, LuceneSearcher, build_bm25_index
    from berds.types import Passage

    texts = synthetic_texts(n_groups * per_group, seed=5)
    queries = synthetic_queries(n_groups, seed=6)
    with PassageStoreWriter(work / "gstore") as w:
        for g in range(n_groups):
            for j in range(per_group):
                w.add(Passage(f"g{g}-{j}", texts[g * per_group + j]), group=f"g{g}")
    _, build_s = timed(build_bm25_index, work / "gstore", work / "gindex", progress=False)
    grouped = GroupedBM25(work / "gindex")
    grouped.search("g0", queries[0], 100)  # starts the query analyzer
    start = time.perf_counter()
    for g in range(n_groups):
        grouped.search(f"g{g}", queries[g], 100)
    search_s = time.perf_counter() - start
    # The naive way on a sample of groups: a store + Lucene index per question, opened and searched.
    start = time.perf_counter()
    for g in range(sample):
        ps = [Passage(f"g{g}-{j}", texts[g * per_group + j]) for j in range(per_group)]
        write_passage_store(ps, work / f"one-{g}")
        build_bm25_index(work / f"one-{g}", work / f"one-index-{g}", progress=False)
        searcher = LuceneSearcher(work / f"one-index-{g}" / "lucene")
        searcher.search([queries[g]], 100)
        searcher.close()
    naive_per_group = (time.perf_counter() - start) / sample
    return {"groups": n_groups, "per_group": per_group, "grouped_build_s": build_s, "grouped_search_s": search_s,
            "naive_per_group_s": naive_per_group, "naive_total_s": naive_per_group * n_groups, "sample": sample}


def overlap(a: list[list[str]], b: list[list[str]], depth: int) -> tuple[float, float]:
    top1 = np.mean([bool(x and y and x[0] == y[0]) for x, y in zip(a, b)])
    topk = np.mean([len(set(x[:depth]) & set(y[:depth])) / depth for x, y in zip(a, b)])
    return float(top1), float(topk)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="Lucene indexing and search threads, for berds and raw pyserini alike (default: all cores)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per measurement (best reported)")
    parser.add_argument("--skip-bm25s", action="store_true", help="leave out the bm25s comparison")
    parser.add_argument("--groups", type=int, default=2400, help="per-question corpora: number of questions")
    parser.add_argument("--per-group", type=int, default=100, help="passages per question corpus")
    parser.add_argument("--group-sample", type=int, default=20, help="per-question Lucene indexes actually built")
    parser.add_argument("--skip-groups", action="store_true", help="leave out the per-question corpora part")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)  # full tables when piped to a file
    work = Path(tempfile.mkdtemp(prefix="berds-bench-bm25-", dir=args.workdir))
    try:
        console.print(f"generating {args.passages:,} synthetic 100-word passages and {args.queries} queries ...")
        (texts, gen_s) = timed(synthetic_texts, args.passages)
        queries = synthetic_queries(args.queries)
        console.print(f"  {gen_s:.1f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        console.print(f"Lucene: berds and raw pyserini, {args.threads} threads, {args.rounds} alternated rounds ...")
        lucene = lucene_part(texts, queries, work, args.threads, args.rounds)
        n = args.passages
        lt = Table(title=f"BM25 through berds vs raw pyserini: {n:,} passages, {args.queries} queries, "
                         f"{args.threads} threads, best of {args.rounds} (load avg {os.getloadavg()[0]:.1f})")
        for col in ("measure", "berds", "raw pyserini", "berds time / raw time"):
            lt.add_column(col, justify="right")
        lt.add_row("index passages/s (store -> Lucene vs JsonCollection -> Lucene)", f"{n / lucene['index_berds_s']:,.0f}",
                   f"{n / lucene['index_raw_s']:,.0f}", f"{lucene['index_berds_s'] / lucene['index_raw_s']:.2f}x")
        for k in (10, 100):
            raw_q = lucene[f"q{k}_raw"]
            for name, label in (("searcher", "LuceneSearcher.search (ids, scores)"), ("retriever", "BM25Retriever.search (Hits with texts)"),
                                ("retrieve", "retrieve() (+ contract check, Run)")):
                lt.add_row(f"k={k} queries/s: {label}", f"{lucene[f'q{k}_{name}']:,.0f}", f"{raw_q:,.0f}",
                           f"{raw_q / lucene[f'q{k}_{name}']:.2f}x")
            lt.add_row(f"k={k}: same ids, scores and order as pyserini", "yes" if lucene[f"identical{k}"] else "NO", "", "")
        lt.add_row("index size MB", f"{lucene['disk_mb']:,.0f}", f"{lucene['raw_disk_mb']:,.0f}", "")
        lt.add_row("(not timed) passage store write s", f"{lucene['store_s']:.1f}", "", "")
        console.print(lt)
        console.print("raw pyserini: IndexCollection on JsonCollection files (one per thread, written beforehand); "
                      "LuceneSearcher.batch_search + reading each hit's docid and score. Anserini's batch_search "
                      "runs its queries on a pool of the given size.")
        if args.skip_bm25s:
            base = None
        else:
            console.print("bm25s ...")
            base = bm25s_part(texts, queries, work)
        del texts
        if base is not None:
            table = Table(title=f"BM25 on {n:,} passages, {args.queries} queries (load avg {os.getloadavg()[0]:.1f})")
            for col in ("measure", "berds Lucene", f"bm25s ({base['backend']}, 1 thread)", "Lucene / bm25s"):
                table.add_column(col, justify="right")
            table.add_row(f"index passages/s (Lucene {args.threads} threads)", f"{n / lucene['index_berds_s']:,.0f}",
                          f"{n / base['index_s']:,.0f}", f"{base['index_s'] / lucene['index_berds_s']:.2f}x")
            table.add_row("index size MB", f"{lucene['disk_mb']:,.0f}", f"{base['disk_mb']:,.0f}", f"{lucene['disk_mb'] / base['disk_mb']:.2f}x")
            for k in (10, 100):
                table.add_row(f"queries/s k={k} (Lucene {args.threads} threads)", f"{lucene[f'q{k}_searcher']:,.0f}",
                              f"{base[f'q{k}_t1']:,.0f}", f"{lucene[f'q{k}_searcher'] / base[f'q{k}_t1']:.2f}x")
            top1, top10 = overlap([[d for d, _ in h] for h in lucene["hits10"]], base["hits10"], 10)
            table.add_row("agreement top-1 / top-10 overlap", f"{top1:.1%} / {top10:.1%}", "", "")
            table.add_row("peak RSS MB (process, incl. JVM)", f"{peak_rss_mb():,.0f}", "", "")
            console.print(table)
        if args.skip_groups:
            return
        console.print(f"per-question corpora: {args.groups} x {args.per_group} passages ...")
        groups = groups_part(args.groups, args.per_group, args.group_sample, work)

        g = groups
        gt = Table(title=f"per-question corpora: {g['groups']} questions x {g['per_group']} passages, k=100")
        for col in ("way", "build s", "search s", "total s", "vs per-question Lucene"):
            gt.add_column(col, justify="right")
        total = g["grouped_build_s"] + g["grouped_search_s"]
        gt.add_row("berds: one index + exact per-group scoring", f"{g['grouped_build_s']:.1f}", f"{g['grouped_search_s']:.2f}",
                   f"{total:.1f}", f"{g['naive_total_s'] / total:.1f}x faster")
        gt.add_row(f"one Lucene index per question (measured on {g['sample']}, extrapolated)", "", "",
                   f"{g['naive_total_s']:.1f}", "1x")
        gt.add_row("per-group queries/s", f"{g['groups'] / g['grouped_search_s']:,.0f}", "", "", "")
        console.print(gt)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
