"""Every diversification strategy side by side with MMR, and pyversity's four beside a raw pyversity call.

A run of ``questions`` x ``candidates`` passages with decreasing scores and random float32 embeddings
(``dim``, 1024 = UAE-Large-V1) given through an in-memory encoder; xQuAD and PM2 get ``aspects`` random
perspective vectors per question through an in-memory expander. The candidates (Sim1 + unit embeddings) are
prepared once and timed separately; each strategy then reranks the same prepared candidates
(``EmbeddingReranker.rerank(run, candidates=...)``), Run in, Run out. For DPP, MSD, COVER and SSD the raw way is
also timed: ``pyversity.diversify`` called per question on the same unit embeddings and Sim1, its picks then the
rest in rank order, as a list of passage ids, under one BLAS thread as berds runs it -- and its order must be
berds' (the script says so, or exits 1).
Every contestant runs once per round, each round led by another (``benchmarks/turns.py``); medians (min-max)
of ``--rounds``. "× MMR" is each round's time over MMR's; "berds / raw" each round's berds time over raw's.
(MMR beside a hand-written numpy MMR is ``bench_rerank.py``; no library implements xQuAD or PM2.)

    python benchmarks/bench_diversify.py                       # 1,000 x 100, 1024-d, all 100 ordered
    python benchmarks/bench_diversify.py --top 20              # only the first 20 picks ordered
    python benchmarks/bench_diversify.py --questions 200 --dim 384
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mmr import TableEncoder  # noqa: E402  (embeddings looked up by text)
from turns import spread, take_turns  # noqa: E402


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
    import pyversity

    def raw(strategy: str):
        """pyversity per question on the prepared arrays; the picks, then the rest in rank order, as ids. One
        BLAS thread, as berds sets (small products; on a busy machine BLAS threads make them slower)."""
        from threadpoolctl import threadpool_limits

        out = {}
        with threadpool_limits(limits=1, user_api="blas"):
            return _raw_questions(strategy, out)

    def _raw_questions(strategy: str, out: dict) -> dict:
        for qid, cand in prepared.questions.items():
            k = len(cand.hits) if args.top is None else min(args.top, len(cand.hits))
            picked = [int(i) for i in pyversity.diversify(cand.unit, cand.sim1.astype(np.float32), k, strategy=strategy,
                                                          diversity=strategies[strategy]["diversity"]).indices]
            chosen = set(picked)
            out[qid] = [cand.hits[i].passage.id for i in picked + [j for j in range(len(cand.hits)) if j not in chosen]]
        return out

    def ids(reranked) -> dict[str, list[str]]:
        return {qid: [h.passage.id for h in hits] for qid, hits in reranked.hits.items()}

    calls = {name: (lambda r=reranker: ids(r.rerank(run, candidates=prepared))) for name, reranker in rerankers.items()}
    pyversity_names = ("dpp", "msd", "cover", "ssd")
    calls.update({f"raw {name}": (lambda n=name: raw(n)) for name in pyversity_names})
    times: dict[str, list[float]] = {name: [] for name in calls}
    vs_mmr: dict[str, list[float]] = {name: [] for name in rerankers}
    vs_raw: dict[str, list[float]] = {name: [] for name in pyversity_names}
    same: dict[str, bool] = {}
    for turn in range(args.rounds):
        done = take_turns(calls, turn)
        for name, (_, seconds) in done.items():
            times[name].append(seconds)
        for name in rerankers:
            vs_mmr[name].append(done[name][1] / done["mmr"][1])
        for name in pyversity_names:
            vs_raw[name].append(done[name][1] / done[f"raw {name}"][1])
            same[name] = done[name][0] == done[f"raw {name}"][0]
    print(f"{'strategy':>8}  {'seconds':>20}  {'ms/question':>11}  {'× MMR':>18}  {'raw pyversity s':>20}  "
          f"{'berds / raw':>18}  same order")
    import statistics

    for name in rerankers:
        t = statistics.median(times[name])
        has_raw = name in pyversity_names
        print(f"{name:>8}  {spread(times[name]):>20}  {1000 * t / q:>11.3f}  {spread(vs_mmr[name]):>18}  "
              f"{spread(times['raw ' + name]) if has_raw else '-':>20}  {spread(vs_raw[name]) if has_raw else '-':>18}  "
              f"{('yes' if same[name] else 'NO') if has_raw else '-'}")
    if not all(same.values()):
        sys.exit("berds' order differs from pyversity's own for " + ", ".join(n for n, ok in same.items() if not ok))


if __name__ == "__main__":
    main()
