"""Peak memory of a fully cached ``berds eval`` against the same job written by hand (issue 36, item 4).

Builds the run folder and judgement cache of ``bench_eval_cache.py`` (802 questions x 100 passages by default,
~175k pairs with the real dev questions), then, alternating contestants round by round (``benchmarks/turns.py``),
runs each in a fresh Python process and reads its peak RSS (``VmHWM`` in ``/proc/self/status``; ``ru_maxrss``
would carry over the pages of the parent that forked it):

* berds: ``evaluate_paths`` at k = 5, 10, 100 from the cache, writing ``metrics.json`` + ``judgements.jsonl``;
* hand: what a user would write with the standard library, streaming: read the run's jsonl line by line,
  hash the judge texts (``text + " " + title``) of the top 100 passages, one bulk SELECT of the judge's verdicts
  into a dict, MRecall/Precision per question, one judgements line per pair written as it goes.

Both processes import numpy first (berds needs it; the hand job's baseline is an interpreter with numpy
loaded), and each process also reports its RSS after imports, so the rows show what the job itself adds.

    python benchmarks/bench_eval_memory.py [--questions 802] [--rounds 3] [--dev-dir ../shared/data/berds-dev]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

CHILD_BERDS = r"""
import sys, json, time
def hwm():  # this process's peak RSS in MB (ru_maxrss would count the forking parent's pages)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024
import numpy
from berds.evaluate.evaluation import EvalOptions, evaluate_paths
from bench_eval_cache import CachedOnly
base = hwm()
t0 = time.perf_counter()
tmp = sys.argv[1]
opts = EvalOptions(ks=(5, 10, 100), progress=False, cache_path=tmp + "/c.sqlite", out=tmp + "/out-berds")
[(_, res, _)] = evaluate_paths([tmp + "/run"], CachedOnly(), opts)
assert res.stats.judged == 0
print(json.dumps({"base": base, "peak": hwm(), "seconds": time.perf_counter() - t0}))
"""

CHILD_HAND = r"""
import sys, json, time, hashlib, sqlite3, os
def hwm():  # this process's peak RSS in MB (ru_maxrss would count the forking parent's pages)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024
import numpy
base = hwm()
t0 = time.perf_counter()
tmp = sys.argv[1]
ks, depth = (5, 10, 100), 100
sha = lambda t: hashlib.sha256(t.encode("utf-8")).digest()
db = sqlite3.connect(tmp + "/c.sqlite")
verdicts = {(pd, sd): label for pd, sd, label in db.execute(
    "SELECT perspective, passage, label FROM judgements WHERE judge=? AND prompt=?", ("bench-judge", "bench-v1"))}
db.close()
os.makedirs(tmp + "/out-hand", exist_ok=True)
sums, n = {}, 0
with open(tmp + "/run/run.ctxs.jsonl", encoding="utf-8") as f, open(tmp + "/out-hand/judgements.jsonl", "w") as out:
    for line in f:
        q = json.loads(line)
        ctxs = q["ctxs"][:depth]
        sds = [sha(f"{c['text']} {c['title']}" if c.get("title") else c["text"]) for c in ctxs]
        rows = [[verdicts[(sha(p), sd)] for sd in sds] for p in q["perspectives"]]
        for i, row in enumerate(rows):
            for j, (c, label) in enumerate(zip(ctxs, row), start=1):
                out.write(json.dumps({"qid": q["id"], "docid": c["id"], "rank": j, "perspective": i, "label": label}) + "\n")
        for k in ks:
            covered = sum(any(r[:k]) for r in rows)
            sums[f"mrecall@{k}"] = sums.get(f"mrecall@{k}", 0) + (covered / min(k, len(rows)) >= 1.0 if rows else 0)
            sums[f"precision@{k}"] = sums.get(f"precision@{k}", 0) + sum(any(col) for col in zip(*(r[:k] for r in rows))) / k
        n += 1
with open(tmp + "/out-hand/metrics.json", "w") as m:
    json.dump({k: v / n for k, v in sums.items()}, m)
print(json.dumps({"base": base, "peak": hwm(), "seconds": time.perf_counter() - t0}))
"""


def child(code: str, tmp: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code, str(tmp)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from bench_eval_cache import CachedOnly, build_run
    from berds.evaluate.cache import JudgementCache
    from berds.evaluate.evaluation import pairs_for_run
    from berds.runs import save_run
    from berds.types import Run, Verdict
    from turns import spread, take_turns

    ap = argparse.ArgumentParser()
    ap.add_argument("--dev-dir", type=Path, default=HERE.parents[1] / "shared/data/berds-dev")
    ap.add_argument("--questions", type=int, default=802)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    full = build_run(args.dev_dir)
    qids = list(full.questions)[: args.questions]
    run = Run.from_lists([full.questions[q] for q in qids], [full.hits[q] for q in qids], name="bench")
    del full
    judge = CachedOnly()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_run(run, tmp / "run")
        pairs = [p for rows in pairs_for_run(run, 100).values() for row in rows for p in row]
        cache = JudgementCache(tmp / "c.sqlite")
        for lo in range(0, len(pairs), 20000):
            batch = pairs[lo:lo + 20000]
            cache.put_many(judge.id, judge.prompt_version, batch,
                           [Verdict(hash(p.passage) % 5 == 0, 0.5, "x") for p in batch])
        cache.close()
        n_pairs, n_questions = len(pairs), len(run)
        del pairs, run
        calls = {"berds": lambda: child(CHILD_BERDS, tmp), "hand": lambda: child(CHILD_HAND, tmp)}
        seen: dict[str, list[dict]] = {name: [] for name in calls}
        for turn in range(args.rounds):
            for name, (out, _) in take_turns(calls, turn).items():
                seen[name].append(out)
    peak = {name: [r["peak"] for r in rs] for name, rs in seen.items()}
    added = {name: [r["peak"] - r["base"] for r in rs] for name, rs in seen.items()}
    print(f"{n_questions} questions x 100 passages, {n_pairs:,} pairs, fully cached; medians (min-max) of "
          f"{args.rounds} alternated rounds, each a new process")
    print(f"{'contestant':44s} {'peak RSS MB':>22s} {'added after imports MB':>24s}")
    print(f"{'hand: stdlib, streamed, one bulk SELECT':44s} {spread(peak['hand'], '{:.0f}'):>22s} "
          f"{spread(added['hand'], '{:.0f}'):>24s}")
    print(f"{'berds: evaluate_paths (as berds eval)':44s} {spread(peak['berds'], '{:.0f}'):>22s} "
          f"{spread(added['berds'], '{:.0f}'):>24s}")
    secs = {name: [r["seconds"] for r in rs] for name, rs in seen.items()}
    print(f"seconds after imports: hand {spread(secs['hand'])}, berds {spread(secs['berds'])}")
    ratio = [b / h for b, h in zip(peak["berds"], peak["hand"])]
    print(f"berds / hand, peak RSS: {spread(ratio)}x (goal <= 1.3x); median {statistics.median(ratio):.2f}x")


if __name__ == "__main__":
    main()
