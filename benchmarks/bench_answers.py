"""DebateQA P.D. scoring: (partial answer, model answer) pairs per second with a tiny causal LM on CPU.

    python benchmarks/bench_answers.py --torch-threads 1            # a tiny random Mistral built on the fly
    python benchmarks/bench_answers.py --model /models/qwen2-0.5b   # a real evaluator (the paper's Qwen2 0.5B)

Measured in one process on the same pairs:
  baseline            a plain transformers forward pass per pair (prompt + continuation ids, log-softmax, gather)
  hand-batched        the strongest raw way: the same, N pairs per forward pass (padded, attention mask)
  score, batch 1      TransformersLLM.score() one pair per forward pass
  score, batch N      TransformersLLM.score() N pairs per forward pass (right-padded, longest first)
  P.D. cold cache     berds.answers.perspective_diversity(): rendering, scoring, writing the sqlite cache
  P.D. warm cache     the same call again, answered from the cache
The four configurations above alternate round by round (medians of ``--repeats``). Ratios are against the
baseline, and as time / the hand-batched baseline. Every configuration must give the baseline's perplexities (within 1e-4
relative); the script says so, or fails. The length correlation of P.D. on these synthetic answers (random
weights: a check of the mechanics, not of language) is printed at the end.
"""

from __future__ import annotations

import argparse
import math
import statistics
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

WORDS = ("cities bike lanes safer streets shops sales vaccines work taxes should be raised lowered school "
         "uniforms help students the a of to is are and not it this that").split()


def make_items(n_answers: int, golds_per_answer: int, seed: int = 0):
    """(answer, [partial answers]) with answers of 20..200 words and partial answers of 15..40 words."""
    rng = random.Random(seed)
    sentence = lambda k: " ".join(rng.choices(WORDS, k=k)).capitalize() + "."  # noqa: E731
    return [(sentence(rng.randint(20, 200)), [sentence(rng.randint(15, 40)) for _ in range(golds_per_answer)])
            for _ in range(n_answers)]


def baseline_perplexities(model, tokenizer, prompts, continuations):
    """One plain forward pass per pair: what a user would write without berds."""
    import torch

    out = []
    for prompt, continuation in zip(prompts, continuations):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        cont_ids = tokenizer(continuation, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = model(torch.tensor([prompt_ids + cont_ids])).logits[0]
        logprobs = torch.log_softmax(logits[len(prompt_ids) - 1:-1].float(), dim=-1)
        values = logprobs.gather(-1, torch.tensor(cont_ids).unsqueeze(-1)).squeeze(-1)
        out.append(math.exp(-float(values.mean())))
    return out


def batched_baseline_perplexities(model, tokenizer, prompts, continuations, batch_size: int):
    """The strongest raw way: the same pairs, ``batch_size`` per forward pass (longest first, right-padded, an
    attention mask), each continuation's log-probabilities gathered from its own row."""
    import torch

    seqs = []
    for prompt, continuation in zip(prompts, continuations):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        seqs.append((tokenizer(text, add_special_tokens=False)["input_ids"],
                     tokenizer(continuation, add_special_tokens=False)["input_ids"]))
    order = sorted(range(len(seqs)), key=lambda i: -(len(seqs[i][0]) + len(seqs[i][1])))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = [0.0] * len(seqs)
    for lo in range(0, len(order), batch_size):
        idx = order[lo:lo + batch_size]
        width = max(len(seqs[i][0]) + len(seqs[i][1]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            tokens = seqs[i][0] + seqs[i][1]
            ids[row, :len(tokens)] = torch.tensor(tokens)
            mask[row, :len(tokens)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=mask).logits
        for row, i in enumerate(idx):
            p, c = seqs[i]
            logprobs = torch.log_softmax(logits[row, len(p) - 1:len(p) + len(c) - 1].float(), dim=-1)
            values = logprobs.gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)
            out[i] = math.exp(-float(values.mean()))
    return out


def timed(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="causal LM path or hub name (default: build a tiny random Mistral)")
    parser.add_argument("--answers", type=int, default=32)
    parser.add_argument("--golds", type=int, default=3, help="partial answers per answer")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="alternated rounds (medians printed)")
    parser.add_argument("--torch-threads", type=int, default=None)
    args = parser.parse_args()
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    from rich.console import Console
    from rich.table import Table

    from berds.answers.evaluation import AnswerEvalOptions, length_adjust, pd_inputs, perspective_diversity
    from berds.answers.prompts import pd_prompt
    from berds.evaluate.cache import JudgementCache
    from berds.llm.transformers_backend import TransformersLLM

    model = args.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from llm_fixtures import build_tiny_mistral

        model = str(build_tiny_mistral(Path(tempfile.mkdtemp(prefix="berds-bench-")) / "tiny-mistral"))
    items = make_items(args.answers, args.golds)
    prompt = pd_prompt("pd1")
    prompts = [pd_inputs(prompt, "chat", answer) for answer, golds in items for _ in golds]
    continuations = [g for _, golds in items for g in golds]
    n = len(prompts)

    single = TransformersLLM(model, batch_size=1).load()
    batched = TransformersLLM(model, batch_size=args.batch_size).load()
    to_ppl = lambda scores: [s.perplexity for s in scores]  # noqa: E731
    calls = {
        "baseline: plain forward per pair": lambda: baseline_perplexities(single.model, single.tokenizer, prompts,
                                                                           continuations),
        f"baseline: hand-batched forward, batch {args.batch_size}": lambda: batched_baseline_perplexities(
            single.model, single.tokenizer, prompts, continuations, args.batch_size),
        "score(), batch 1": lambda: to_ppl(single.score(prompts, continuations)),
        f"score(), batch {args.batch_size}": lambda: to_ppl(batched.score(prompts, continuations)),
    }
    # Configurations take turns, each round led by another (benchmarks/turns.py); the median of the rounds counts.
    from turns import take_turns

    times: dict[str, list[float]] = {name: [] for name in calls}
    results: dict = {}
    for turn in range(args.repeats):
        for name, (out, secs) in take_turns(calls, turn).items():
            times[name].append(secs)
            results[name] = out
    rows = [(name, statistics.median(times[name]), results[name]) for name in calls]
    base_time, base = rows[0][1], rows[0][2]
    strongest = rows[1][1]
    cache_dir = Path(tempfile.mkdtemp(prefix="berds-bench-cache-"))
    options = AnswerEvalOptions(metrics=("pd",), template="chat", batch_size=args.batch_size, progress=False)
    flat = lambda results: [p for r in results for p in r.perplexities]  # noqa: E731
    with JudgementCache(cache_dir / "cold.sqlite") as cache:
        rows.append(("P.D. cold cache (score + sqlite)",
                     *timed(lambda: flat(perspective_diversity(batched, items, options, cache)), 1)))
        rows.append(("P.D. warm cache", *timed(lambda: flat(perspective_diversity(batched, items, options, cache)),
                                                args.repeats)))

    table = Table(title=f"P.D. scoring: {n} pairs ({args.answers} answers x {args.golds} partial answers), "
                        f"{single.id} on {single.device}, torch threads {torch.get_num_threads()}")
    for column in ("configuration", "seconds", "pairs/s", "vs baseline", "time / hand-batched", "same PPL"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    same_everywhere = True
    for name, seconds, ppl in rows:
        same = all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(ppl, base)) and len(ppl) == len(base)
        same_everywhere &= same
        table.add_row(name, f"{seconds:.3f}", f"{n / seconds:,.1f}", f"{base_time / seconds:.2f}x",
                      f"{seconds / strongest:.2f}x", "yes" if same else "NO")
    Console().print(table)
    results = perspective_diversity(batched, items, options, None)
    fit = length_adjust([r.pd_mean for r in results], [len(a.split()) for a, _ in items])
    print(f"P.D./n vs answer words over {fit['n']} synthetic answers: Pearson r (log-log) = "
          f"{fit['pearson_log_length']:+.3f}, slope {fit['slope']:+.3f}; after length adjustment r = "
          f"{fit['pearson_log_length_adjusted']:+.3f}")
    if not same_everywhere:
        sys.exit("perplexities differ from the baseline")


if __name__ == "__main__":
    main()
