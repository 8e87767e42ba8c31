"""MMR reranking speed: berds' vectorised greedy against a direct implementation, per question.

For each question: 100 candidates with random retriever scores (normalised min-max) and random
``dim``-dimensional embeddings (1024 = UAE-Large-V1). Both implementations get the same Sim2 matrix
(cosines, computed once per question and timed separately), and must return the same ranking — the
benchmark checks it for every question before printing any number. The ratio is shown for the greedy
selection alone and with the shared Sim2 computation added to both sides.

* direct     — Eq. 1 written out: for every step, for every remaining document, a Python ``max`` over the
               chosen set (what a straightforward script does).
* berds      — ``berds.rerank.mmr.mmr_order``: one running max-similarity vector, updated with numpy.
* whole run  — ``mmr_rerank`` on a run of the same questions with embeddings already computed (an
               in-memory encoder), i.e. what `berds rerank mmr` costs per question once embeddings are cached.

    python benchmarks/bench_mmr.py                     # 200 questions, λ in 0.5, 0.9, 0.99
    python benchmarks/bench_mmr.py --questions 50 --dim 384
    OMP_NUM_THREADS=1 python benchmarks/bench_mmr.py   # on a busy shared machine (see below)

On a machine shared with other jobs, OpenBLAS's worker threads make the small 100x100 cosine products
10-30x slower than one thread does; the printed header says which thread setting was used.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def direct_mmr(relevance: list[float], similarity: list[list[float]], lam: float) -> list[int]:
    remaining = list(range(len(relevance)))
    chosen: list[int] = []
    while remaining:
        best, best_value = None, None
        for d in remaining:
            if chosen:
                value = lam * relevance[d] - (1 - lam) * max(similarity[d][s] for s in chosen)
            else:
                value = lam * relevance[d]
            if best is None or value > best_value:
                best, best_value = d, value
        chosen.append(best)
        remaining.remove(best)
    return chosen


class TableEncoder:
    """Embeddings looked up by text (stands in for a warm embedding cache)."""

    id = "bench-table"

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def encode(self, texts):
        return np.stack([self.table[t] for t in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--lambdas", default="0.5,0.9,0.99")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from berds.rerank.mmr import cosine_matrix, mmr_order, mmr_rerank, normalise_scores
    from berds.types import Hit, Passage, Question, Run

    rng = np.random.default_rng(args.seed)
    n = args.candidates
    data = []
    for _ in range(args.questions):
        scores = np.sort(rng.normal(size=n))[::-1]
        data.append((normalise_scores(scores), rng.normal(size=(n, args.dim)).astype(np.float32), scores))

    # Sim2 is the same matrix for both implementations: computed (and timed) once per question.
    start = time.perf_counter()
    sims = [cosine_matrix(emb) for _, emb, _ in data]
    t_cos = (time.perf_counter() - start) / args.questions
    sim_lists = [s.tolist() for s in sims]

    q = args.questions
    print(f"MMR over {n} candidates, {args.dim}-d embeddings, {q} questions; times per question")
    import os

    print(f"BLAS threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs")
    print(f"Sim2 (cosine matrix, shared by both): {1000 * t_cos:.3f} ms")
    print(f"{'λ':>5}  {'direct ms':>10}  {'berds ms':>9}  {'greedy ratio':>12}  {'ratio incl. Sim2':>16}")
    for lam in (float(x) for x in args.lambdas.split(",")):
        t_direct = t_fast = 0.0
        for (relevance, _, _), sim, sim_list in zip(data, sims, sim_lists):
            rel_list = relevance.tolist()
            start = time.perf_counter()
            slow = direct_mmr(rel_list, sim_list, lam)
            t_direct += time.perf_counter() - start
            start = time.perf_counter()
            fast, _ = mmr_order(relevance, sim, lam)
            t_fast += time.perf_counter() - start
            if fast.tolist() != slow:
                raise SystemExit(f"rankings differ at λ={lam}: the benchmark would compare different work")
        d, f = t_direct / q, t_fast / q
        print(f"{lam:>5g}  {1000 * d:>10.3f}  {1000 * f:>9.3f}  {d / f:>11.1f}x  {(d + t_cos) / (f + t_cos):>15.1f}x")

    # The whole-run path: Run -> embeddings (warm) -> per-question MMR -> new Run.
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
    start = time.perf_counter()
    mmr_rerank(run, lam=0.9, encoder=TableEncoder(table))
    per_q = (time.perf_counter() - start) / args.questions
    print(f"whole run (mmr_rerank, λ=0.9, embeddings in memory): {1000 * per_q:.3f} ms per question")


if __name__ == "__main__":
    main()
