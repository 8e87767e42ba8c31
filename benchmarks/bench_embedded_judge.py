"""Judgements per second of the embedded CPU judge v2 (stance cross-encoder) against v1 (frozen features).

    python benchmarks/bench_embedded_judge.py [--pairs 256] [--repeats 2] [--pairs-tsv berds/data/demo/labelled_pairs.tsv]

Measured in one process on the same pairs (the first ``--pairs`` rows of the labelled TSV, by default the
demo benchmark shipped in berds, where each passage appears once per perspective of its question):

  v1 (baseline)   ``embedded:v1`` (at torch's own thread count): one bi-encoder pass per distinct passage and perspective, then a
                  logistic head; passages shared by several perspectives are encoded once
  v2 batch B      ``embedded`` (default batch 32): one cross-encoder pass per (perspective, passage) pair,
                  ``--batches`` pairs per forward pass, under each of ``--threads`` torch thread counts

Configurations alternate round after round; medians (min-max) are printed, and ratios against the default
v2 configuration (batch 32). Each v2 configuration must give the same labels as that one (batching must not
change answers; the largest P(Yes) difference is printed: padding differs between batch sizes); the script
says so, or exits with status 1. The agreement of v2 with v1 is printed too (they are different models: it is
not meant to be 100%). This is berds against berds on purpose: it chooses the judge's CPU settings.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from berds.judges.embedded import EmbeddedJudge  # noqa: E402
from berds.types import JudgePair  # noqa: E402

DEFAULT_TSV = Path(__file__).resolve().parents[1] / "berds" / "data" / "demo" / "labelled_pairs.tsv"


def read_pairs(path: Path, n: int) -> list[JudgePair]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    text_col = "document" if rows and "document" in rows[0] else "passage"
    return [JudgePair(r["perspective"], r[text_col], r.get("question", "")) for r in rows[:n]]


def timed(fn) -> tuple[float, list]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="rounds (configurations alternate; medians printed)")
    ap.add_argument("--batches", default="32,16,8,4", help="v2 batch sizes to time (the first is the default, 32)")
    ap.add_argument("--threads", default=None,
                    help="torch thread counts to time v2 under, e.g. 1,2 (default: torch's own count only)")
    ap.add_argument("--pairs-tsv", type=Path, default=DEFAULT_TSV)
    args = ap.parse_args()
    import statistics

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from turns import spread, take_turns

    console = Console(width=None if sys.stdout.isatty() else 160)  # full tables when piped to a file
    pairs = read_pairs(args.pairs_tsv, args.pairs)
    v1 = EmbeddedJudge(version="v1")
    v2 = EmbeddedJudge()
    for judge in (v1, v2):
        judge.judge(pairs[:4])  # warm-up: loads the model, first forward passes allocate
    own_threads = torch.get_num_threads()
    threads = [int(t) for t in args.threads.split(",")] if args.threads else [own_threads]

    def v2_with(batch_size: int, n_threads: int):
        def run():
            torch.set_num_threads(n_threads)
            v2.cross_encoder.batch_size = batch_size
            try:
                return v2.judge(pairs)
            finally:
                torch.set_num_threads(own_threads)
        return run

    configs = {"v1 (baseline)": lambda: v1.judge(pairs)}
    for t in threads:
        for b in (int(x) for x in args.batches.split(",")):
            configs[f"v2 batch {b}, {t} thread{'s' * (t > 1)}"] = v2_with(b, t)
    # Configurations take turns round after round (benchmarks/turns.py), each round led by another: the machine
    # may be shared, and a load spike then hits every configuration alike.
    times: dict[str, list[float]] = {name: [] for name in configs}
    outs: dict[str, list] = {}
    for turn in range(args.repeats):
        for name, (out, secs) in take_turns(configs, turn).items():
            times[name].append(secs)
            outs[name] = out
    base = outs["v1 (baseline)"]
    first_v2 = next(n for n in configs if n.startswith("v2"))
    reference = outs[first_v2]

    table = Table(title=f"embedded judge throughput, {len(pairs)} pairs from {args.pairs_tsv.name}; medians (min-max) "
                        f"of {args.repeats} alternated rounds")
    for col in ("configuration", "seconds", "pairs/s", f"time / {first_v2}", "same labels", "max |dP(Yes)|",
                "agrees with v1"):
        table.add_column(col)
    ok = True
    for name in configs:
        out = outs[name]
        labels = [v.label for v in out]
        same = labels == [v.label for v in reference]
        if name.startswith("v2"):
            ok &= same
        agree = sum(a == b.label for a, b in zip(labels, base)) / len(pairs)
        ratio = [a / b for a, b in zip(times[name], times[first_v2])]
        dp = max(abs((a.p_yes or 0.0) - (b.p_yes or 0.0)) for a, b in zip(out, reference)) if name.startswith("v2") else None
        table.add_row(name, spread(times[name]), f"{len(pairs) / statistics.median(times[name]):.1f}",
                      spread(ratio) + "x", ("yes" if same else "NO") if name.startswith("v2") else "-",
                      "-" if dp is None else f"{dp:.1e}", f"{100 * agree:.0f}%")
    console.print(table)
    if not ok:
        console.print("[red]a batch size changed labels[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
