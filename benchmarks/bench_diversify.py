"""Every diversification strategy side by side with MMR: seconds to rerank a whole run, in one process.

A run of ``questions`` x ``candidates`` passages with decreasing scores and random float32 embeddings
(``dim``, 1024 = UAE-Large-V1) given through an in-memory encoder; xQuAD and PM2 get ``aspects`` random
perspective vectors per question through an in-memory expander. The candidates (Sim1 + unit embeddings) are
prepared once and timed separately; each strategy then reranks the same prepared candidates
(``EmbeddingReranker.rerank(run, candidates=...)``), Run in, Run out. Times are medians of ``--rounds``;
the last column is the ratio to MMR measured in the same round.

    python benchmarks/bench_diversify.py                       # 1,000 x 100, 1024-d, all 100 ordered
    python benchmarks/bench_diversify.py --top 20              # only the first 20 picks ordered
    python benchmarks/bench_diversify.py --questions 200 --dim 384
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


class TableEncoder:
    id = "bench-table"

    def __init__(self, table):
        self.table = table

    def encode(self, texts):
        return np.stack([self.table[t] for t in texts])


class TableExpander:
    """Perspectives looked up per question (stands in for an expansions file)."""

    def __init__(self, aspects):
        self.aspects = aspects

    def expand(self, questions):
        from berds.retrievers.expansion import Expansion

        return {q.id: [Expansion(f"a{i}", t) for i, t in enumerate(self.aspects[q.id])] for q in questions}

    def provenance(self):
        return {"source": "benchmark"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--aspects", type=int, default=4)
    parser.add_argument("--top", type=int, default=None, help="order only the first TOP picks (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from berds.rerank.catalogue import load_reranker
    from berds.types import Hit, Passage, Question, Run

    rng = np.random.default_rng(args.seed)
    n, q = args.candidates, args.questions
    table: dict[str, np.ndarray] = {}
    aspects: dict[str, list[str]] = {}
    questions, hits = [], []
    for qi in range(q):
        qid = f"q{qi}"
        questions.append(Question(qid, f"question {qi}", ("a", "b")))
        scores = np.sort(rng.gamma(4.0, 2.0, size=n))[::-1]
        emb = rng.normal(size=(n, args.dim)).astype(np.float32)
        row = []
        for j in range(n):
            text = f"passage {qi}-{j}"
            table[text] = emb[j]
            row.append(Hit(Passage(f"p{qi}-{j}", text), float(scores[j])))
        hits.append(row)
        aspects[qid] = [f"aspect {qi}-{a}" for a in range(args.aspects)]
        for text in aspects[qid]:
            table[text] = rng.normal(size=args.dim).astype(np.float32)
    run = Run.from_lists(questions, hits, name="bench")
    encoder = TableEncoder(table)
    common = {"encoder": encoder, "embed_text": "text", "top": args.top}
    expander = TableExpander(aspects)
    strategies = {
        "mmr": {"lam": 0.9},
        "dpp": {"diversity": 0.5},
        "msd": {"diversity": 0.5},
        "cover": {"diversity": 0.5},
        "ssd": {"diversity": 0.5},
        "xquad": {"lam": 0.5, "expander": expander},
        "pm2": {"lam": 0.5, "expander": expander},
    }
    rerankers = {name: load_reranker(name, **opts, **common) for name, opts in strategies.items()}

    start = time.perf_counter()
    prepared = rerankers["mmr"].prepare(run)
    t_prepare = time.perf_counter() - start
    print(f"{q} questions x {n} candidates, {args.dim}-d float32 embeddings given, "
          f"ordered: {'all' if args.top is None else f'first {args.top}'}; {args.aspects} aspects for xquad/pm2")
    print(f"{os.cpu_count()} CPUs; medians of {args.rounds} rounds; candidate preparation (Sim1 + unit "
          f"embeddings, shared): {t_prepare:.2f} s")
    times: dict[str, list[float]] = {name: [] for name in rerankers}
    ratios: dict[str, list[float]] = {name: [] for name in rerankers}
    for _ in range(args.rounds):
        for name, reranker in rerankers.items():
            start = time.perf_counter()
            reranker.rerank(run, candidates=prepared)
            times[name].append(time.perf_counter() - start)
        for name in rerankers:
            ratios[name].append(times[name][-1] / times["mmr"][-1])
    print(f"{'strategy':>8}  {'seconds':>8}  {'ms/question':>11}  {'× MMR':>6}")
    for name in rerankers:
        t = statistics.median(times[name])
        print(f"{name:>8}  {t:>8.2f}  {1000 * t / q:>11.3f}  {statistics.median(ratios[name]):>6.2f}")


if __name__ == "__main__":
    main()
