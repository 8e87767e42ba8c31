"""Judgements per second of the LLM judge on each way of running a local model, side by side.

    python benchmarks/bench_llm_judge.py --torch-threads 1     # a tiny random Mistral built on the fly
    python benchmarks/bench_llm_judge.py --model /models/mistral-7b-instruct --adapter /models/berds-lora \\
        --pairs 256 --batch-size 16                            # the study's evaluator (GPU)

Measured in one process on the same pairs:
  baseline       TransformersLLM, batch_size=1 (one prompt per generate() call)
  batched        TransformersLLM, batch_size=--batch-size
  http-serial    OpenAILLM(concurrency=1) -> berds ChatServer (real HTTP on 127.0.0.1) -> batched model
  http-parallel  OpenAILLM(concurrency=--concurrency) -> the same server, which gathers requests into batches
Ratios are against the baseline. Every configuration must return the same labels as the baseline
(greedy decoding); the script says so, or fails.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path


def make_pairs(n: int, seed: int = 0):
    from berds.types import JudgePair

    words = ("cities bike lanes safer streets shops sales vaccines work taxes should be raised lowered school "
             "uniforms help students the a of to is are and not it this that").split()
    rng = random.Random(seed)
    return [JudgePair(perspective=" ".join(rng.choices(words, k=rng.randint(5, 10))).capitalize() + ".",
                      passage=" ".join(rng.choices(words, k=rng.randint(40, 100))).capitalize() + ".")
            for _ in range(n)]


def timed(judge, pairs, repeats: int):
    best, verdicts = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        verdicts = judge.judge(pairs)
        best = min(best, time.perf_counter() - start)
    return best, verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model path or hub name (default: build a tiny random Mistral)")
    parser.add_argument("--adapter", help="LoRA adapter path or hub name")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2, help="best of N timings per configuration")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch intra-op threads (1 is fastest for the tiny model on a busy CPU)")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    from rich.console import Console
    from rich.table import Table

    from berds.judges.llm_judge import LLMJudge
    from berds.llm.openai_backend import OpenAILLM
    from berds.llm.server import ChatServer
    from berds.llm.transformers_backend import TransformersLLM

    model = args.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from llm_fixtures import build_tiny_mistral

        model = str(build_tiny_mistral(Path(tempfile.mkdtemp(prefix="berds-bench-")) / "tiny-mistral"))

    pairs = make_pairs(args.pairs)
    options = {"adapter": args.adapter} if args.adapter else {}
    single = TransformersLLM(model, batch_size=1, **options).load()
    batched = TransformersLLM(model, batch_size=args.batch_size, **options).load()
    rows = []
    base_time, base_verdicts = timed(LLMJudge(single), pairs, args.repeats)
    rows.append(("baseline: transformers, batch 1", base_time, base_verdicts))
    rows.append((f"transformers, batch {args.batch_size}", *timed(LLMJudge(batched), pairs, args.repeats)))
    with ChatServer(batched, port=0, served_model_name="bench", max_batch_size=args.batch_size,
                    batch_wait=0.005) as server:
        for concurrency in (1, args.concurrency):
            client = OpenAILLM("bench", base_url=server.url, concurrency=concurrency, id="bench")
            rows.append((f"HTTP server, client concurrency {concurrency}",
                         *timed(LLMJudge(client), pairs, args.repeats)))

    table = Table(title=f"LLM judge throughput: {args.pairs} pairs, {single.id} on {single.device} ({single.dtype})")
    for column in ("configuration", "seconds", "judgements/s", "vs baseline", "same labels"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    same_everywhere = True
    for name, seconds, verdicts in rows:
        same = [v.label for v in verdicts] == [v.label for v in base_verdicts]
        same_everywhere &= same
        table.add_row(name, f"{seconds:.2f}", f"{len(pairs) / seconds:.1f}", f"{base_time / seconds:.2f}x",
                      "yes" if same else "NO")
    Console().print(table)
    if not same_everywhere:
        sys.exit("labels differ from the baseline: batching changed greedy answers")


if __name__ == "__main__":
    main()
