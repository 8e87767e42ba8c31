#!/usr/bin/env python
"""Does a judge see stance? MRecall@5 of three synthetic runs on a BERDS question file.

For every question with exactly two perspectives (A, B) three top-5 runs are built and scored through
the real evaluation (``evaluate_run``, the same path as ``berds eval``):

  first-only   the five passages state only A, verbatim            -> a stance-aware judge gives ~0
  both-sides   the passages are A, B, A, B, A                      -> ~1
  unrelated    the first perspectives of the next 5 questions      -> ~0

Acceptance for the embedded judge (issue 10, kialo dev questions): first-only <= 0.3, both-sides >= 0.8,
unrelated <= 0.1. The script exits 1 when a bound is missed.

    python scripts/stance_check.py --questions ../shared/data/berds-dev/kialo.dev.jsonl --judge embedded
    python scripts/stance_check.py --questions ... --judge embedded:v1       # the old head, for comparison

``--write-runs DIR`` also saves the three runs as BERDS ``ctxs.jsonl`` files, so
``berds eval DIR/first-only.ctxs.jsonl --judge embedded --k 5`` reproduces a row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from berds.questions import read_questions  # noqa: E402
from berds.errors import BerdsError  # noqa: E402
from berds.evaluate.evaluation import evaluate_run  # noqa: E402
from berds.judges import load_judge  # noqa: E402
from berds.registry import parse_options  # noqa: E402
from berds.runs import write_ctxs_jsonl  # noqa: E402
from berds.types import Hit, Passage, Question, Run  # noqa: E402

K = 5
BOUNDS = {"first-only": ("<=", 0.3), "both-sides": (">=", 0.8), "unrelated": ("<=", 0.1)}


def stance_runs(questions: list[Question], k: int = K) -> dict[str, Run]:
    """The three runs of the module docstring over the two-perspective questions."""
    two = [q for q in questions if len(q.perspectives) == 2]
    if len(two) <= k:
        raise BerdsError(f"need more than {k} questions with exactly two perspectives, found {len(two)}")
    texts: dict[str, dict[str, list[str]]] = {"first-only": {}, "both-sides": {}, "unrelated": {}}
    for i, q in enumerate(two):
        a, b = q.perspectives
        texts["first-only"][q.id] = [a] * k
        texts["both-sides"][q.id] = [(a, b)[j % 2] for j in range(k)]
        texts["unrelated"][q.id] = [two[(i + 1 + j) % len(two)].perspectives[0] for j in range(k)]
    runs = {}
    for name, by_question in texts.items():
        hits = {qid: [Hit(Passage(f"{qid}-{name}-{j}", t), float(k - j)) for j, t in enumerate(ts)]
                for qid, ts in by_question.items()}
        runs[name] = Run({q.id: q for q in two}, hits, manifest={"kind": "run", "stance_check": name}, name=name)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=Path, required=True, help="BERDS questions jsonl (id, question, perspectives)")
    ap.add_argument("--judge", action="append", default=[], help="judge name (repeatable; default: embedded)")
    ap.add_argument("--judge-option", "-o", action="append", default=[], help="key=value passed to every judge")
    ap.add_argument("--write-runs", type=Path, default=None, help="also save the runs as ctxs.jsonl files here")
    args = ap.parse_args(argv)
    console = Console()
    try:
        runs = stance_runs(read_questions(args.questions))
        if args.write_runs:
            args.write_runs.mkdir(parents=True, exist_ok=True)
            for name, run in runs.items():
                write_ctxs_jsonl(run, args.write_runs / f"{name}.ctxs.jsonl")
        options = parse_options(args.judge_option)
        table = Table(title=f"stance check: MRecall@{K} on {len(next(iter(runs.values())).questions)} "
                            f"two-perspective questions of {args.questions.name}")
        table.add_column("judge")
        for name, (op, bound) in BOUNDS.items():
            table.add_column(f"{name} ({op} {bound})", justify="right")
        ok = True
        for judge_name in args.judge or ["embedded"]:
            judge = load_judge(judge_name, **options)
            cells = []
            for name, run in runs.items():
                # (a judging bar per run: a CPU judge takes minutes over 232 questions)
                score = evaluate_run(run, judge, ks=(K,), progress=True
                                     ).averages["all"][f"mrecall@{K}"]
                op, bound = BOUNDS[name]
                passed = score <= bound if op == "<=" else score >= bound
                ok &= passed
                cells.append(f"{score:.3f} {'ok' if passed else 'MISSED'}")
            table.add_row(judge_name, *cells)
        console.print(table)
    except BerdsError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)  # (a path stays whole)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
