"""Qrels export of 175k judgements (875 questions x 100 passages x 2 perspectives), and diversity measures on them.

    python benchmarks/bench_qrels.py [--questions 875 --depth 100 --perspectives 2]

Writes a ``judgements.jsonl`` the way ``berds eval`` does (``write_eval_outputs`` of a synthetic evaluation), then
times in one process:
  baseline          csv.writer writing the same (qid, subtopic, docid, rel) rows, already in memory, to a file
  write_qrels       berds' writer on the same in-memory rows
  export_qrels      ``berds export qrels``: read judgements.jsonl, deduplicate, write the qrels file
  measures          alpha_nDCG@10 + ERR_IA@10 + StRecall@10 through ir_measures (pyndeval) on those qrels
  berds measures    MRecall@5/@10 + BERDS_P@5/@10 through ir_measures (runtime provider, berds/evaluate/measures.py),
                    checked equal to berds' own metrics of the same support matrices
Ratios are against the baseline; the qrels files must hold the same lines.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from berds.evaluate.evaluation import EvalResult, JudgeStats, write_eval_outputs  # noqa: E402
from berds.evaluate.qrels import compute_measures, export_qrels, read_judgements, write_qrels  # noqa: E402
from berds.types import Hit, Passage, Question, Run  # noqa: E402


def synthetic_evaluation(n_questions: int, depth: int, n_perspectives: int) -> tuple[EvalResult, Run]:
    rng = np.random.default_rng(0)
    questions = [Question(f"q{i}", f"question {i}?", tuple(f"perspective {i}-{j}" for j in range(n_perspectives)))
                 for i in range(n_questions)]
    hits = [[Hit(Passage(f"d{i}-{r}", "text"), float(depth - r)) for r in range(depth)] for i in range(n_questions)]
    run = Run.from_lists(questions, hits, name="bench")
    support = {q.id: rng.random((n_perspectives, depth)) < 0.15 for q in questions}
    p_yes = {q.id: np.full((n_perspectives, depth), np.nan) for q in questions}
    result = EvalResult("bench", "bench-judge", "v1", (depth,), depth, support, p_yes, {}, {}, JudgeStats())
    return result, run


def timed(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=875)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--perspectives", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    work = Path(tempfile.mkdtemp(prefix="berds-bench-qrels-"))
    result, run = synthetic_evaluation(args.questions, args.depth, args.perspectives)
    write_eval_outputs(result, run, work / "eval")
    rows, ranking = read_judgements(work / "eval")
    n = len(rows)

    def baseline() -> None:
        with open(work / "baseline.qrels", "w", newline="") as f:
            csv.writer(f, delimiter=" ", lineterminator="\n").writerows(rows)

    timings = [("baseline: csv.writer, rows in memory", *timed(baseline, args.repeats)),
               ("write_qrels, rows in memory", *timed(lambda: write_qrels(rows, work / "berds.qrels"), args.repeats)),
               ("export_qrels: judgements.jsonl -> qrels", *timed(lambda: export_qrels(work / "eval", work / "export.qrels"),
                                                                  args.repeats))]
    measures = ["alpha_nDCG@10", "ERR_IA@10", "StRecall@10"]
    timings.append(("measures: " + ", ".join(measures), *timed(lambda: compute_measures(measures, rows, ranking), 1)))
    ours = ["MRecall@5", "MRecall@10", "BERDS_P@5", "BERDS_P@10"]
    timings.append(("measures: " + ", ".join(ours), *timed(lambda: compute_measures(ours, rows, ranking), 1)))
    from berds.evaluate.metrics import mean_metrics, question_metrics

    own = mean_metrics(question_metrics(m, (5, 10)) for m in result.support.values())
    berds_equal = all(abs(timings[-1][2][0][f"{m}@{k}"] - own[f"{o}@{k}"]) < 1e-12
                      for m, o in (("MRecall", "mrecall"), ("BERDS_P", "precision")) for k in (5, 10))
    same = (sorted((work / "baseline.qrels").read_text().splitlines()) == sorted((work / "berds.qrels").read_text().splitlines())
            == sorted((work / "export.qrels").read_text().splitlines()))
    table = Table(title=f"qrels of {n:,} judgements ({args.questions} questions x {args.depth} passages x "
                        f"{args.perspectives} perspectives)")
    for column in ("step", "seconds", "judgements/s", "vs baseline"):
        table.add_column(column, justify="left" if column == "step" else "right")
    base = timings[0][1]
    for name, seconds, _ in timings:
        table.add_row(name, f"{seconds:.3f}", f"{n / seconds:,.0f}", f"{seconds / base:.2f}x the time")
    Console().print(table)
    means = {**timings[-2][2][0], **timings[-1][2][0]}
    print("means:", ", ".join(f"{k} = {v:.4f}" for k, v in means.items()), "| same qrels lines:", "yes" if same else "NO",
          "| MRecall/BERDS_P equal to berds' metrics:", "yes" if berds_equal else "NO")
    if not same:
        sys.exit("the qrels files differ")
    if not berds_equal:
        sys.exit("MRecall / BERDS_P differ from berds' own metrics")


if __name__ == "__main__":
    main()
