"""A fully cached re-evaluation of the 802 BERDS dev questions x 100 passages (target: < 10 s here).

Builds a run of 802 questions (the real dev questions when ``--dev-dir`` points at shared/data/berds-dev,
synthetic otherwise) with 100 synthetic 100-word passages each, fills a judgement cache with one verdict
per pair, then times ``evaluate_run`` at k = 5, 10, 100 answered entirely from the cache. Baseline in the
same process: the same lookups one pair at a time (one SELECT per pair), as a naive cache would do.

    python benchmarks/bench_eval_cache.py [--dev-dir ../shared/data/berds-dev]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from berds.questions import read_questions  # noqa: E402
from berds.evaluate.cache import JudgementCache, text_digest  # noqa: E402
from berds.evaluate.evaluation import evaluate_run, pairs_for_run  # noqa: E402
from berds.types import Hit, Passage, Question, Run, Verdict  # noqa: E402


class CachedOnly:
    id, prompt_version = "bench-judge", "bench-v1"

    def judge(self, pairs):
        raise RuntimeError("benchmark expects every pair cached")


def build_run(dev_dir: Path | None, depth: int = 100) -> Run:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    if dev_dir and dev_dir.exists():
        questions = [q for f in sorted(dev_dir.glob("*.dev.jsonl")) for q in read_questions(f)]
    else:
        questions = [Question(f"q{i}", f"question {i}?", tuple(f"perspective {i}-{j}" for j in range(2 + i % 3)))
                     for i in range(802)]
    hits = [[Hit(Passage(f"{q.id}-{r}", " ".join(rng.choices(words, k=100)), title=f"T{r}"), float(depth - r))
             for r in range(depth)] for q in questions]
    return Run.from_lists(questions, hits, name="bench")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/berds-dev")
    args = ap.parse_args()
    run = build_run(args.dev_dir)
    judge = CachedOnly()
    with tempfile.TemporaryDirectory() as tmp:
        cache = JudgementCache(Path(tmp) / "c.sqlite")
        grid = pairs_for_run(run, 100)
        pairs = [p for rows in grid.values() for row in rows for p in row]
        t0 = time.perf_counter()
        for lo in range(0, len(pairs), 20000):
            batch = pairs[lo:lo + 20000]
            cache.put_many(judge.id, judge.prompt_version, batch, [Verdict(hash(p.passage) % 5 == 0, 0.5, "x") for p in batch])
        fill = time.perf_counter() - t0

        t0 = time.perf_counter()
        res = evaluate_run(run, judge, ks=(5, 10, 100), cache=cache, progress=False)
        cached_eval = time.perf_counter() - t0
        assert res.stats.judged == 0

        # baseline: autocommit SELECT per pair on a new connection (no shared snapshot), on a sample, extrapolated
        sample = pairs[:20000]
        db = sqlite3.connect(cache.path, isolation_level=None)
        t0 = time.perf_counter()
        for p in sample:
            db.execute("SELECT label FROM judgements WHERE judge=? AND prompt=? AND perspective=? AND passage=?",
                       (judge.id, judge.prompt_version, text_digest(p.perspective), text_digest(p.passage))).fetchone()
        naive = (time.perf_counter() - t0) * len(pairs) / len(sample)
        db.close()
        size_mb = cache.path.stat().st_size / 1e6

    print(f"questions: {len(run)}  pairs: {len(pairs):,}  cache file: {size_mb:.0f} MB (fill {fill:.1f} s)")
    print(f"fully cached evaluate_run (k=5,10,100): {cached_eval:.2f} s  ({len(pairs) / cached_eval:,.0f} pairs/s)  target < 10 s")
    print(f"baseline autocommit SELECT per pair (extrapolated from 20k): {naive:.2f} s")
    print(f"ratio baseline-lookups / full berds evaluation: {naive / cached_eval:.2f}x")


if __name__ == "__main__":
    main()
