"""Judgements per second of the embedded CPU judge v2 (stance cross-encoder) against v1 (frozen features).

    python benchmarks/bench_embedded_judge.py [--pairs 256] [--repeats 2] [--pairs-tsv berds/data/demo/labelled_pairs.tsv]

Measured in one process on the same pairs (the first ``--pairs`` rows of the labelled TSV, by default the
demo benchmark shipped in berds, where each passage appears once per perspective of its question):

  v1 (baseline)   ``embedded:v1``: one bi-encoder pass per distinct passage and perspective, then a
                  logistic head; passages shared by several perspectives are encoded once
  v2 batch 32     ``embedded`` (default): one cross-encoder pass per (perspective, passage) pair
  v2 batch 8      the same with smaller forward passes

Ratios are against v1. Each v2 configuration must give the same labels as the first v2 one (batching
must not change answers); the script says so, or exits with status 1. The agreement of v2 with v1 is
printed too (they are different models: it is not meant to be 100%).
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
    ap.add_argument("--repeats", type=int, default=2, help="runs per configuration (interleaved; best kept)")
    ap.add_argument("--pairs-tsv", type=Path, default=DEFAULT_TSV)
    args = ap.parse_args()
    console = Console()
    pairs = read_pairs(args.pairs_tsv, args.pairs)
    v1 = EmbeddedJudge(version="v1")
    v2 = EmbeddedJudge()
    for judge in (v1, v2):
        judge.judge(pairs[:4])  # warm-up: loads the model, first forward passes allocate

    def v2_with(batch_size: int):
        def run():
            v2.cross_encoder.batch_size = batch_size
            return v2.judge(pairs)
        return run

    configs = [("v1 (baseline)", v1.id, lambda: v1.judge(pairs)),
               ("v2 batch 32", v2.id, v2_with(32)),
               ("v2 batch 8", v2.id, v2_with(8))]
    # Interleave the configurations and keep each one's best time: the machine may be shared.
    best: dict[str, tuple[float, list]] = {}
    for _ in range(args.repeats):
        for name, _, fn in configs:
            secs, out = timed(fn)
            if name not in best or secs < best[name][0]:
                best[name] = (secs, out)
    base_s, base = best[configs[0][0]]
    reference = best[configs[1][0]][1]

    table = Table(title=f"embedded judge throughput, {len(pairs)} pairs from {args.pairs_tsv.name}")
    for col in ("configuration", "judge id", "seconds", "pairs/s", "speed vs v1", "same labels as v2/32",
                "agrees with v1"):
        table.add_column(col)
    ok = True
    for name, judge_id, _ in configs:
        secs, out = best[name]
        labels = [v.label for v in out]
        same = labels == [v.label for v in reference]
        if name.startswith("v2"):
            ok &= same
        agree = sum(a == b.label for a, b in zip(labels, base)) / len(pairs)
        table.add_row(name, judge_id[:40], f"{secs:.2f}", f"{len(pairs) / secs:.1f}", f"{base_s / secs:.2f}x",
                      ("yes" if same else "NO") if name.startswith("v2") else "-", f"{100 * agree:.0f}%")
    console.print(table)
    v2_s = best["v2 batch 32"][0]
    console.print(f"v2 (default batch 32) is {v2_s / base_s:.1f}x slower than v1 on these pairs")
    if not ok:
        console.print("[red]a batch size changed labels[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
