#!/usr/bin/env python
"""Split a human-labelled pairs TSV into the embedded judge's question-disjoint parts.

``test``  the 3 questions whose sha256(question text) hex digest sorts first — fixed before any model
          work on issue 10 and read only for the final measurement of the shipped judge;
``rest``  the other questions — the only labelled pairs used to calibrate and choose the judge.

    python scripts/split_dev_pairs.py ../shared/data/perspective-detection/dev_pairs.tsv --out /tmp/dev-split
    berds judge validate --labels /tmp/dev-split/dev_pairs.test.tsv --judge embedded --judge embedded:v1

Rows are copied unchanged (header included).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_embedded_judge import test_questions  # noqa: E402

from berds.errors import InputError  # noqa: E402
from berds.io import atomic_write  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labels", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not args.labels.is_file():
        raise InputError("file not found", path=args.labels,
                         fix="give the study's human-labelled dev pairs (dev_pairs.tsv, not shipped with berds)")
    # Lines are copied byte for byte (the file is read the way berds reads it: tab-separated, no quoting).
    lines = args.labels.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split("\t") if lines else []
    if "question" not in header:
        raise InputError("no 'question' column", path=args.labels, line=1, fix="the split is by question text")
    col = header.index("question")
    rows = [line for line in lines[1:] if line.strip()]
    held = test_questions([r.split("\t")[col] for r in rows])
    args.out.mkdir(parents=True, exist_ok=True)
    for part, keep in (("test", True), ("rest", False)):
        path = args.out / f"{args.labels.stem}.{part}.tsv"
        chosen = [r for r in rows if (r.split("\t")[col] in held) == keep]
        with atomic_write(path) as out:
            out.write(lines[0] + "".join(chosen))
        print(f"{part}: {len(chosen)} pairs, {len({r.split(chr(9))[col] for r in chosen})} questions -> {path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as exc:  # one line and exit 2, as berds' commands do
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
