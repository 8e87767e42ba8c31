"""Peak memory of a fully cached ``berds eval`` against the same job written by hand (issue 36, item 4).

Builds the run folder and judgement cache of ``bench_eval_cache.py`` (802 questions x 100 passages by default,
~175k pairs with the real dev questions), then, alternating contestants round by round (``benchmarks/turns.py``),
runs each in a fresh Python process and reads its peak RSS (``VmHWM`` in ``/proc/self/status``; ``ru_maxrss``
would carry over the pages of the parent that forked it):

* berds: ``evaluate_paths`` at k = 5, 10, 100 from the cache, writing ``metrics.json`` + ``judgements.jsonl``, as
  ``berds eval`` calls it (each run read question by question, no per-pair matrices kept: ``matrices=False``);
* berds whole: the same with ``stream=False``, every run read whole first (the path before issue 36's streaming);
* hand: what a user would write with the standard library, streaming: read the run's jsonl line by line,
  hash the judge texts (``text + " " + title``) of the top 100 passages, one bulk SELECT of the judge's verdicts
  into a dict, MRecall/Precision per question, one judgements line per pair written as it goes.

Both processes import numpy first (berds needs it; the hand job's baseline is an interpreter with numpy
loaded), and each process also reports its RSS after imports, so the rows show what the job itself adds.

``--copies 1,4`` measures runs of 1 and 4 copies of the questions (each copy's perspectives and passages carry its
number, so every pair is distinct and 4 copies hold 4 times the pairs): berds' peak should not grow with them.

    python benchmarks/bench_eval_memory.py [--questions 802] [--copies 1,4] [--rounds 3] [--dev-dir ../shared/data/berds-dev]
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
stream = sys.argv[2] == "stream"
opts = EvalOptions(ks=(5, 10, 100), progress=False, cache_path=tmp + "/c.sqlite", out=tmp + "/out-" + sys.argv[2],
                   stream=stream, matrices=not stream)
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


def child(code: str, tmp: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code, str(tmp), *args], env=env, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def copied(run, copies: int):
    """``run`` ``copies`` times over, each copy's ids, perspectives and passage texts marked with its number."""
    from berds.types import Hit, Passage, Question, Run

    if copies == 1:
        return run
    qs, hits = [], []
    for c in range(copies):
        for qid, q in run.questions.items():
            qs.append(Question(f"{qid}~{c}", q.text, tuple(f"{p} ({c})" for p in q.perspectives), dataset=q.dataset))
            hits.append([Hit(Passage(f"{h.passage.id}~{c}", f"{h.passage.text} {c}", h.passage.title), h.score)
                         for h in run.hits[qid]])
    return Run.from_lists(qs, hits, name=run.name)


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
    ap.add_argument("--copies", default="1", help="run sizes, as copies of the questions: e.g. 1,4")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    full = build_run(args.dev_dir)
    qids = list(full.questions)[: args.questions]
    base = Run.from_lists([full.questions[q] for q in qids], [full.hits[q] for q in qids], name="bench")
    del full
    judge = CachedOnly()
    print(f"fully cached evaluations at k = 5, 10, 100; medians (min-max) of {args.rounds} alternated rounds, each "
          f"contestant a new process; peak RSS from VmHWM; {os.cpu_count()} cores")
    print(f"{'run':>22s}  {'contestant':38s} {'peak RSS MB':>16s} {'added after imports MB':>24s} {'seconds':>18s}")
    for copies in [int(c) for c in args.copies.split(",")]:
        run = copied(base, copies)
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
            calls = {"berds": lambda: child(CHILD_BERDS, tmp, "stream"),
                     "berds whole": lambda: child(CHILD_BERDS, tmp, "whole"),
                     "hand": lambda: child(CHILD_HAND, tmp)}
            seen: dict[str, list[dict]] = {name: [] for name in calls}
            for turn in range(args.rounds):
                for name, (out, _) in take_turns(calls, turn).items():
                    seen[name].append(out)
            for name in ("judgements.jsonl", "metrics.json"):  # the streamed and whole-run paths write the same bytes
                assert (tmp / "out-stream" / name).read_bytes() == (tmp / "out-whole" / name).read_bytes(), name
        label = f"{n_questions} q, {n_pairs / 1000:.0f}k pairs"
        for name, what in (("hand", "hand: stdlib, streamed, one bulk SELECT"),
                           ("berds", "berds eval (streamed, no matrices)"),
                           ("berds whole", "berds, stream=False (whole run)")):
            rs = seen[name]
            print(f"{label:>22s}  {what:38s} {spread([r['peak'] for r in rs], '{:.0f}'):>16s} "
                  f"{spread([r['peak'] - r['base'] for r in rs], '{:.0f}'):>24s} "
                  f"{spread([r['seconds'] for r in rs]):>18s}")
        for name in ("berds", "berds whole"):
            ratio = [b["peak"] / h["peak"] for b, h in zip(seen[name], seen["hand"])]
            print(f"{'':>22s}  {name} / hand, peak RSS: {spread(ratio)}x (goal <= 1.3x); median "
                  f"{statistics.median(ratio):.2f}x")


if __name__ == "__main__":
    main()
