"""Size and opening time of `berds report --html` for a large evaluation (default 800 questions x 3 runs, k 5,10).

Generates questions (2-4 perspectives), three runs of 100-word passages drawn from a shared pool per question
(so runs overlap, as real runs do) and random support matrices, builds the page with
``berds.evaluate.report_html`` and, when Chromium is there, opens it headless and times: the page ready (the
leaderboard and every question's summary built), and the first question opened (the passages unpacked then).

    python benchmarks/bench_report_html.py [--questions 800] [--runs 3] [--k 5,10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from berds.evaluate.report_html import page_data, write_html_report  # noqa: E402
from berds.types import Hit, Passage, Question, Run  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def synthetic(n_questions: int, n_runs: int, depth: int, seed: int = 0):
    rng = random.Random(seed)
    vocab = [f"{a}{b}" for a in ("ta", "re", "mo", "li", "sun", "ka", "pe", "dor", "vi", "nu", "gra", "che")
             for b in ("n", "ro", "les", "tic", "mar", "ven", "do", "ple", "sta", "ri", "ga", "ble", "ton", "ka")]
    vocab += "the of and to in a is that for it as with was on be by this are from".split() * 8
    questions = [Question(f"q{i:04d}", " ".join(rng.choices(vocab, k=10)) + "?",
                          tuple(" ".join(rng.choices(vocab, k=12)) for _ in range(rng.randint(2, 4))), "synthetic")
                 for i in range(n_questions)]
    pools = {q.id: [Passage(f"{q.id}-p{j:03d}", " ".join(rng.choices(vocab, k=100)),
                            title=" ".join(rng.choices(vocab, k=3))) for j in range(2 * depth)]
             for q in questions}
    runs, results = [], []
    nrng = np.random.default_rng(seed)
    for r in range(n_runs):
        hits = [[Hit(p, float(depth - i)) for i, p in enumerate(rng.sample(pools[q.id], depth))] for q in questions]
        runs.append(Run.from_lists(questions, hits, name=f"run{r}"))
        results.append(SimpleNamespace(support={q.id: nrng.random((len(q.perspectives), depth)) < 0.25
                                                for q in questions}))
    return runs, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=800)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--k", default="5,10")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    runs, results = synthetic(args.questions, args.runs, max(ks))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        build = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            data = page_data([r.name for r in runs], runs, results, ks, judge_id="synthetic")
            write_html_report(path, data)
            build.append(time.perf_counter() - t0)
        size = path.stat().st_size
        raw = sum(len(p.passage.text) + len(p.passage.title) for r in runs for hs in r.hits.values() for p in hs)
        print(f"{args.questions} questions x {args.runs} runs, top {max(ks)}: {data['passages']:,} distinct passages "
              f"({raw / 1e6:.1f} MB of text over all runs)")
        print(f"page: {size / 1e6:.2f} MB; built and written in {statistics.median(build):.2f} s "
              f"(median of {args.rounds}; {', '.join(f'{b:.2f}' for b in build)})")
        if not Path(args.chromium).exists():
            print(f"no {args.chromium}: browser timings skipped")
            return 0
        from playwright.sync_api import sync_playwright

        ready, first_open, load_event = [], [], []
        with sync_playwright() as p:
            for i in range(args.rounds):
                context = p.chromium.launch_persistent_context(str(Path(tmp) / f"profile{i}"), headless=True,
                                                               executable_path=args.chromium, args=FLAGS)
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(path.as_uri())
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                timing = page.evaluate("() => [window.berdsReadyMs,"
                                       " performance.getEntriesByType('navigation')[0].loadEventEnd]")
                ready.append(timing[0] / 1000)
                load_event.append(timing[1] / 1000)
                t0 = time.perf_counter()
                page.click("details.q[data-index='0'] summary")
                page.click("details.q[data-index='0'] td.cell[data-rank='1']")
                page.locator("details.q[data-index='0'] .passage").wait_for(state="visible")
                first_open.append(time.perf_counter() - t0)
                context.close()
                if errors:
                    print("page errors:", errors)
                    return 1
        print(f"Chromium (headless): page ready (its script done) {statistics.median(ready):.2f} s, load event "
              f"{statistics.median(load_event):.2f} s after navigation; first passage shown "
              f"{statistics.median(first_open):.2f} s after the first click (medians of {args.rounds}; ready: "
              f"{', '.join(f'{x:.2f}' for x in ready)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
