"""MMR reranking speed, cosine step included: berds against a plain numpy implementation, in one process.

For each question: ``candidates`` passages with decreasing retriever scores (Sim1 = score / the question's top
score, the study's rule, computed once and shared) and random ``dim``-dimensional float32 embeddings
(1024 = UAE-Large-V1). Both implementations start from the raw embeddings, so the cosine step is timed on both
sides, and must pick the same passages in the same order — checked for every question before any number is
printed.

* numpy   — the plain implementation: unit rows, the full cosine matrix ``U @ U.T``, then the greedy loop
            (rank 1 first, running max similarity, ``argmax``), stopping after ``wanted`` picks;
* berds   — ``berds.rerank.mmr.mmr_order_embeddings`` on ``unit_rows(embeddings)``, as ``MMRReranker`` calls
            it: only the cosine rows of the picks when few are wanted, all of them in one product otherwise;
* run     — ``MMRReranker`` (what ``mmr_rerank`` and ``berds rerank mmr`` run) on a whole ``Run`` with
            embeddings already computed (an in-memory encoder), split into the preparation (embedding lookup,
            Sim1, unit rows) and MMR + building the new Run, beside the numpy baseline in the same rounds.

Rounds alternate numpy and berds (medians of ``--rounds``). BLAS threads: berds' reranker runs its loop under
one BLAS thread (``threadpoolctl``); the numpy baseline is timed both with the default thread pool and with one
thread, and the ratio is printed against each.

    python benchmarks/bench_mmr.py                         # 1,000 questions x 100 candidates, 1024-d
    python benchmarks/bench_mmr.py --questions 200 --dim 384
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def numpy_mmr(relevance: np.ndarray, embeddings: np.ndarray, lam: float, wanted: int) -> list[int]:
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    sim = unit @ unit.T
    n = len(relevance)
    picked = [0]
    taken = np.zeros(n, dtype=bool)
    taken[0] = True
    max_sim = sim[0].copy()
    for _ in range(min(wanted, n) - 1):
        objective = lam * relevance - (1 - lam) * max_sim
        objective[taken] = -np.inf
        i = int(np.argmax(objective))
        picked.append(i)
        taken[i] = True
        np.maximum(max_sim, sim[i], out=max_sim)
    return picked


class TableEncoder:
    """Embeddings looked up by text (stands in for a warm embedding cache)."""

    id = "bench-table"

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def encode(self, texts):
        return np.stack([self.table[t] for t in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--wanted", default="10,20,100", help="picks per question (comma-separated)")
    parser.add_argument("--lam", type=float, default=0.9)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from threadpoolctl import threadpool_limits

    from berds.rerank.candidates import normalise_scores, unit_rows
    from berds.rerank.mmr import mmr_order_embeddings
    from berds.types import Hit, Passage, Question, Run

    rng = np.random.default_rng(args.seed)
    n, q = args.candidates, args.questions
    data = []
    for _ in range(q):
        scores = np.sort(rng.gamma(4.0, 2.0, size=n))[::-1]
        data.append((normalise_scores(scores), rng.normal(size=(n, args.dim)).astype(np.float32), scores))

    def time_numpy(wanted: int) -> float:
        start = time.perf_counter()
        for rel, emb, _ in data:
            numpy_mmr(rel, emb, args.lam, wanted)
        return (time.perf_counter() - start) / q

    def time_berds(wanted: int) -> float:
        start = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"):
            for rel, emb, _ in data:
                mmr_order_embeddings(rel, unit_rows(emb), args.lam, wanted)
        return (time.perf_counter() - start) / q

    def time_numpy_one_thread(wanted: int) -> float:
        with threadpool_limits(limits=1, user_api="blas"):
            return time_numpy(wanted)

    print(f"MMR (cosine step included) over {n} candidates, {args.dim}-d float32 embeddings, {q} questions, "
          f"λ={args.lam}; medians of {args.rounds} alternated rounds; times per question")
    print(f"{os.cpu_count()} CPUs; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'wanted':>6}  {'numpy ms':>9}  {'numpy 1-thr ms':>14}  {'berds ms':>9}  {'berds/numpy':>11}  {'berds/numpy 1-thr':>17}")
    for wanted in (int(x) for x in args.wanted.split(",")):
        for rel, emb, _ in data:  # same picks, same order, for every question
            ours = mmr_order_embeddings(rel, unit_rows(emb), args.lam, wanted)[0].tolist()
            if ours != numpy_mmr(rel, emb, args.lam, wanted):
                raise SystemExit(f"orders differ at wanted={wanted}: the benchmark would compare different work")
        t_np, t_np1, t_b = [], [], []
        for _ in range(args.rounds):
            t_np.append(time_numpy(wanted))
            t_b.append(time_berds(wanted))
            t_np1.append(time_numpy_one_thread(wanted))
        a, a1, b = statistics.median(t_np), statistics.median(t_np1), statistics.median(t_b)
        print(f"{wanted:>6}  {1000 * a:>9.3f}  {1000 * a1:>14.3f}  {1000 * b:>9.3f}  {b / a:>10.2f}x  {b / a1:>16.2f}x")

    # The whole-run path: Run -> embeddings (warm) -> Sim1 -> per-question MMR -> new Run, split into the
    # preparation (embedding lookup, Sim1, unit rows) and MMR + building the new Run; numpy 1-thread alongside.
    from berds.rerank.mmr import MMRReranker

    table: dict[str, np.ndarray] = {}
    questions, hits = [], []
    for qi, (_, emb, scores) in enumerate(data):
        questions.append(Question(f"q{qi}", f"question {qi}", ("a", "b")))
        row = []
        for j in range(n):
            text = f"passage {qi}-{j}"
            table[text] = emb[j]
            row.append(Hit(Passage(f"p{qi}-{j}", text), float(scores[j])))
        hits.append(row)
    run = Run.from_lists(questions, hits, name="bench")
    for wanted in (20, None):
        reranker = MMRReranker(args.lam, encoder=TableEncoder(table), embed_text="text", top=wanted)
        t_prep, t_mmr, t_np1 = [], [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            prepared = reranker.prepare(run)
            middle = time.perf_counter()
            reranker.rerank(run, candidates=prepared)
            t_prep.append((middle - start) / q)
            t_mmr.append((time.perf_counter() - middle) / q)
            t_np1.append(time_numpy_one_thread(wanted or n))
        p, m, b = statistics.median(t_prep), statistics.median(t_mmr), statistics.median(t_np1)
        print(f"whole run (top={wanted or n}, embeddings in memory): {1000 * (p + m):.3f} ms per question = "
              f"preparation {1000 * p:.3f} (embedding lookup, Sim1, unit rows) + MMR and the new Run {1000 * m:.3f}; "
              f"numpy 1-thr {1000 * b:.3f}: MMR-and-Run/numpy {m / b:.2f}x, whole/numpy {(p + m) / b:.2f}x")


if __name__ == "__main__":
    main()
