"""Judgements per second of the LLM judge beside the strongest raw way to do the same job, taking turns.

    python benchmarks/bench_llm_judge.py --torch-threads 1     # a tiny random Mistral built on the fly
    python benchmarks/bench_llm_judge.py --model /models/mistral-7b-instruct --adapter /models/berds-lora \\
        --pairs 256 --batch-size 16                            # the study's evaluator (GPU)

Contestants, on the same pairs and the same loaded weights, one round each in turn (``benchmarks/turns.py``):
  raw            a hand-written job: the chat template applied by the tokenizer, prompts sorted by length,
                 left-padded batches of --batch-size through ``model.generate`` (greedy), replies decoded and
                 read Yes/No by their first word -- what a user would write without berds
  berds          ``LLMJudge`` on ``TransformersLLM(batch_size=--batch-size)``: the same work plus berds' prompt
                 rendering, context checks, the study's answer rule and P(Yes) bookkeeping
  berds, batch 1 one prompt per ``generate()`` call (the study's own loop did this)
  HTTP serial / HTTP parallel
                 ``OpenAILLM`` (concurrency 1 / --concurrency) -> berds' ChatServer on 127.0.0.1 -> the batched
                 model: the cost of serving the judge over HTTP
Medians (min-max) over --rounds; the ratio column is each round's time over raw's in that round. Every
contestant must give the raw job's replies (greedy decoding): the script says so, or exits with status 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from turns import spread, take_turns  # noqa: E402


def make_pairs(n: int, seed: int = 0):
    from berds.types import JudgePair

    words = ("cities bike lanes safer streets shops sales vaccines work taxes should be raised lowered school "
             "uniforms help students the a of to is are and not it this that").split()
    rng = random.Random(seed)
    return [JudgePair(perspective=" ".join(rng.choices(words, k=rng.randint(5, 10))).capitalize() + ".",
                      passage=" ".join(rng.choices(words, k=rng.randint(40, 100))).capitalize() + ".")
            for _ in range(n)]


def raw_job(model, tokenizer, conversations, batch_size: int) -> list[str]:
    """The job without berds: template, sort by length, left-pad, greedy generate, decode."""
    import torch

    ids = [tokenizer.apply_chat_template(c, tokenize=True, add_generation_prompt=True) for c in conversations]
    ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    replies = [""] * len(ids)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(ids[i]) for i in chunk)
        input_ids = torch.tensor([[pad] * (width - len(ids[i])) + ids[i] for i in chunk], device=model.device)
        mask = torch.tensor([[0] * (width - len(ids[i])) + [1] * len(ids[i]) for i in chunk], device=model.device)
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=16, do_sample=False,
                                 num_beams=1, pad_token_id=pad)
        for row, i in enumerate(chunk):
            replies[i] = tokenizer.decode(out[row, width:], skip_special_tokens=True).strip()
    return replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model path or hub name (default: build a tiny random Mistral)")
    parser.add_argument("--adapter", help="LoRA adapter path or hub name")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each contestant once per round, in turn")
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
    batched = TransformersLLM(model, batch_size=args.batch_size, **options).load()
    # batch 1 shares the loaded weights (no second copy in memory)
    single = TransformersLLM(model, batch_size=1, **options)
    single._torch, single._tokenizer, single._model = batched._torch, batched.tokenizer, batched.model
    single.device, single.dtype = batched.device, batched.dtype
    judge = LLMJudge(batched)
    conversations = [judge.render(p) for p in pairs]  # the same prompt text on every side

    def replies(verdicts) -> list[str]:
        return [v.raw for v in verdicts]

    rounds: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    answers: dict[str, list[str]] = {}
    with ChatServer(batched, port=0, served_model_name="bench", max_batch_size=args.batch_size,
                    batch_wait=0.005) as server:
        serial = LLMJudge(OpenAILLM("bench", base_url=server.url, concurrency=1, id="bench"))
        parallel = LLMJudge(OpenAILLM("bench", base_url=server.url, concurrency=args.concurrency, id="bench"))
        calls = {
            "raw: template + sorted padded batches + generate": lambda: raw_job(batched.model, batched.tokenizer,
                                                                                 conversations, args.batch_size),
            f"berds: LLMJudge, transformers batch {args.batch_size}": lambda: replies(judge.judge(pairs)),
            "berds: transformers batch 1": lambda: replies(LLMJudge(single).judge(pairs)),
            "berds: HTTP server, client concurrency 1": lambda: replies(serial.judge(pairs)),
            f"berds: HTTP server, client concurrency {args.concurrency}": lambda: replies(parallel.judge(pairs)),
        }
        raw_name = next(iter(calls))
        for turn in range(args.rounds):
            done = take_turns(calls, turn)
            for name, (result, seconds) in done.items():
                rounds.setdefault(name, []).append(seconds)
                ratios.setdefault(name, []).append(seconds / done[raw_name][1])
                answers.setdefault(name, result)

    table = Table(title=f"LLM judge throughput: {args.pairs} pairs, {batched.id} on {batched.device} "
                        f"({batched.dtype}), {args.rounds} rounds in turn")
    for column in ("contestant", "seconds", "judgements/s", "time / raw", "raw's replies"):
        table.add_column(column, justify="left" if column == "contestant" else "right")
    same_everywhere = True
    for name in calls:
        same = answers[name] == answers[raw_name]
        same_everywhere &= same
        table.add_row(name, spread(rounds[name]), spread([args.pairs / s for s in rounds[name]], "{:.1f}"),
                      spread(ratios[name]) + "x", "yes" if same else "NO")
    Console().print(table)
    if not same_everywhere:
        sys.exit("replies differ from the raw job's: batching or serving changed greedy answers")


if __name__ == "__main__":
    main()
