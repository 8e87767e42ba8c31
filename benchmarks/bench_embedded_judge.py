"""Judgements per second of the embedded CPU judge: batched calls against a one-pair-at-a-time loop.

    python benchmarks/bench_embedded_judge.py [--pairs 128] [--repeats 2] [--pairs-tsv berds/data/demo/labelled_pairs.tsv]

Measured in one process on the same pairs (the first ``--pairs`` rows of the labelled TSV, by default the
demo benchmark shipped in berds, where each passage appears once per perspective of its question):

  baseline        ``judge.judge([pair])`` for each pair in turn (no batching, no sharing of passage or
                  perspective encodings between pairs)
  batched-64      ``judge.judge(pairs)`` with the default encoder batch size 64
  batched-16      the same with batch size 16 (smaller forward passes)

Ratios are against the baseline. Every configuration must give the same labels as the baseline; the
script says so, or exits with status 1.
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
    ap.add_argument("--pairs", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2, help="runs per configuration (interleaved; best kept)")
    ap.add_argument("--pairs-tsv", type=Path, default=DEFAULT_TSV)
    args = ap.parse_args()
    console = Console()
    pairs = read_pairs(args.pairs_tsv, args.pairs)
    judge = EmbeddedJudge()
    judge.judge(pairs[:4])  # warm-up: first forward passes allocate

    # Interleave the configurations and keep each one's best time: the machine may be shared.
    best: dict[str, tuple[float, list]] = {}
    configs = [("baseline (one pair per call)", 64, lambda: [judge.judge([p])[0] for p in pairs]),
               ("batched-64", 64, lambda: judge.judge(pairs)),
               ("batched-16", 16, lambda: judge.judge(pairs))]
    for _ in range(args.repeats):
        for name, batch_size, fn in configs:
            judge.encoder.batch_size = batch_size
            secs, out = timed(fn)
            if name not in best or secs < best[name][0]:
                best[name] = (secs, out)
    results = [(name, *best[name]) for name, _, _ in configs]
    base_s, base = best[configs[0][0]]

    table = Table(title=f"embedded judge, {len(pairs)} pairs from {args.pairs_tsv.name} ({judge.id})")
    for col in ("configuration", "seconds", "judgements/s", "ratio vs baseline", "same labels"):
        table.add_column(col)
    ok = True
    for name, secs, out in results:
        same = [v.label for v in out] == [v.label for v in base]
        ok &= same
        table.add_row(name, f"{secs:.2f}", f"{len(pairs) / secs:.1f}", f"{base_s / secs:.2f}x", "yes" if same else "NO")
    console.print(table)
    if not ok:
        console.print("[red]a configuration changed labels[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
