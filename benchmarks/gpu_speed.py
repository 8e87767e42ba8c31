"""The speed sections of benchmarks/gpu_check.py: the study's evaluator shape judged every way berds offers,
its fine-tuning, and dense encoding of a Contriever-shaped (BERT-base) model — each beside the plain library
call measured in the same run, so the ratio is what counts.

Weights are random (nothing is downloaded): a Mistral-7B-Instruct-v0.2 shape (32 layers, hidden 4096, 8 KV
heads, MLP 14336, vocab 32000) in bf16 with a study-shaped LoRA (r 64, alpha 16, seven projections), and a
BERT-base shape (12 layers, hidden 768) for dense encoding. Random weights never emit EOS, so "16 new" is the
worst case of the judge and "2 new" approximates a real "Yes</s>". On ``--device cpu`` (the dry run the
tests run) the same code runs on tiny shapes; its figures mean nothing.

The loaded models are handed to berds' own objects (``TransformersLLM`` with the weights attached instead of
read from disk: loading is not what is timed), so every row goes through berds' batching, prompt building and
answer parsing exactly as ``berds eval`` does.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

MISTRAL_7B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768, sliding_window=None)
TINY_MISTRAL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096, sliding_window=None)
SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _sync(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _peak_reset(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(torch, device):
    return round(torch.cuda.max_memory_allocated() / 1e9, 1) if str(device).startswith("cuda") else None


def _attached_llm(tokenizer_folder: Path, model, device: str, dtype: str, **options):
    """A berds ``TransformersLLM`` whose tokenizer comes from ``tokenizer_folder`` and whose model is ``model``."""
    import torch

    from berds.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(str(tokenizer_folder), device="cpu", dtype="float32", **options).load()
    llm._model, llm.device, llm.dtype, llm._torch = model, device, dtype, torch
    return llm


def build_judge_model(device: str, *, full: bool, dtype: str = "bfloat16"):
    """The study's evaluator shape (``full``; else a tiny one) with random weights, in eval mode. Built under
    ``torch.device(device)``: every parameter and buffer is created where it runs, so the 7B shape (14.5 GB in
    bf16) never passes through CPU memory and its random init runs on the GPU (tested on the meta device)."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(**(MISTRAL_7B if full else TINY_MISTRAL), bos_token_id=1, eos_token_id=2,
                           tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device(device):
        model = MistralForCausalLM._from_config(config, dtype=getattr(torch, dtype))
    return model.eval()


def judge_tokenizer() -> Path:
    """A folder with the tests' tiny Mistral-style tokenizer and chat template (its tiny model goes unused: the
    weights timed are ``build_judge_model``'s)."""
    from llm_fixtures import build_tiny_mistral

    return build_tiny_mistral(Path(tempfile.mkdtemp(prefix="gpu-speed-")) / "tokenizer")


def past(deadline: float | None) -> bool:
    """Whether the run's time limit (a ``time.monotonic()`` value; None: no limit) has passed."""
    return deadline is not None and time.monotonic() >= deadline


def judge_throughput(device: str, pairs, *, full: bool, dtype: str | None = None,
                     deadline: float | None = None) -> dict:
    """pairs/s and peak GB of the study's judge: the study's loop, berds before and now, merged and unmerged,
    and a plain batched ``model.generate`` on the same weights.

    ``dtype``: the weights' precision (default bfloat16 on the 7B shape, float32 on the tiny one; a test runs
    the tiny one in bfloat16 on CPU, the GPU's precision path). A row not started by ``deadline`` (a
    ``time.monotonic()`` value) is listed as skipped; the rows before it keep their figures."""
    import torch
    from peft import LoraConfig, get_peft_model

    from berds.judges.llm_judge import LLMJudge
    from berds.llm.shared import prompt_token_ids

    tokenizer_folder = judge_tokenizer()
    dtype_name = dtype or ("bfloat16" if full else "float32")
    started = time.perf_counter()
    model = build_judge_model(device, full=full, dtype=dtype_name)
    _sync(torch, device)
    build_s = time.perf_counter() - started
    lora = LoraConfig(r=64, lora_alpha=16, lora_dropout=0.0, target_modules=SEVEN, init_lora_weights=False,
                      task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)  # unmerged: the study's way (adapter weights float32, peft's autocast)
    out: dict = {"model_params_b": round(sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n) / 1e9, 2),
                 "build_seconds": round(build_s, 1), "dtype": dtype_name}
    n_all = len(pairs)
    n_slow = min(n_all, 128 if full else 4)
    n_loop = min(n_all, 12 if full else 2)
    rows: list[dict] = []
    texts: dict[str, list[str]] = {}  # the 16-new-token replies of each row, to compare paths

    def timed(name: str, llm, n: int, new_tokens=(16, 2), batch=None, prompt="zero-shot"):
        if past(deadline):
            rows.append({"path": name, "pairs": n, "skipped": "time limit"})
            print(f"  skipped (time limit): {name}", flush=True)
            return
        sizes: list[int] = []
        real = llm._generate_batch

        def counting(prompts_ids, *args):
            sizes.append(len(prompts_ids))
            return real(prompts_ids, *args)

        llm._generate_batch = counting
        row = {"path": name, "pairs": n}
        judge_pairs = pairs[:n]
        for k in new_tokens:
            judge = LLMJudge(llm, prompt=prompt, system="drop", parse="berds-study", max_new_tokens=k)
            judge.judge(judge_pairs[:2])  # warm-up (kernels, allocator)
            sizes.clear()
            _peak_reset(torch, device)
            t = time.perf_counter()
            verdicts = judge.judge(judge_pairs)
            _sync(torch, device)
            row[f"pairs_per_s_{k}_new"] = round(n / (time.perf_counter() - t), 2)
            row[f"peak_gb_{k}_new"] = _peak_gb(torch, device)
            row["largest_batch"] = max(sizes) if batch is None else batch
            assert len(verdicts) == n
            if k == 16:
                texts[name] = [v.raw for v in verdicts]
        rows.append(row)
        print(f"  {_row_line(row)}", flush=True)  # (as it goes: a run cut short still shows what it measured)

    timed("the study's loop (one at a time, adapter)", _attached_llm(tokenizer_folder, model, device, dtype_name,
          batch_size=1), n_loop, new_tokens=(16,))
    timed("before: adapter unmerged, batch 8", _attached_llm(tokenizer_folder, model, device, dtype_name,
          batch_size=8), n_slow)
    timed("adapter unmerged, batch auto", _attached_llm(tokenizer_folder, model, device, dtype_name), n_all)
    model = model.merge_and_unload()  # what mistral-berds does at load now (weights=merged)
    timed("mistral-berds now: merged, batch auto", _attached_llm(tokenizer_folder, model, device, dtype_name), n_all)
    timed("merged, batch 64", _attached_llm(tokenizer_folder, model, device, dtype_name, batch_size=64), n_all)
    # The zero-shot prompt starts with the document (the instruction follows it): nothing to share. The one-shot
    # prompt starts with its example turn, the case the shared prefix is for: timed with and without it.
    timed("one-shot prompt, merged, batch auto", _attached_llm(tokenizer_folder, model, device, dtype_name), n_all,
          prompt="one-shot")
    timed("one-shot prompt, merged, auto, shared prefix", _attached_llm(tokenizer_folder, model, device, dtype_name,
          shared_prefix=True), n_all, prompt="one-shot")

    def same_replies(a: str, b: str) -> str:
        if a not in texts or b not in texts:
            return "not run (time limit)"
        return f"{sum(x == y for x, y in zip(texts[a], texts[b]))} of {len(texts[a])}"

    out["shared_prefix_same_replies"] = same_replies("one-shot prompt, merged, batch auto",
                                                     "one-shot prompt, merged, auto, shared prefix")
    out["merged_auto_vs_batch64_same_replies"] = same_replies("mistral-berds now: merged, batch auto",
                                                              "merged, batch 64")

    # A plain batched generate on the same merged weights and the same token ids (no berds in the loop).
    llm = _attached_llm(tokenizer_folder, model, device, dtype_name)
    tokenizer = llm.tokenizer
    shaping = LLMJudge(llm, prompt="zero-shot", system="drop")
    ids = [prompt_token_ids(tokenizer, shaping.render(p)) for p in pairs]
    ids.sort(key=len, reverse=True)
    out["prompt_tokens_mean"] = round(sum(map(len, ids)) / len(ids), 1)
    raw = {"path": "raw transformers generate (merged, batch 64)", "pairs": n_all, "largest_batch": 64}
    for k in (16, 2) if not past(deadline) else ():
        _peak_reset(torch, device)
        t = time.perf_counter()
        for b in range(0, len(ids), 64):
            chunk = ids[b:b + 64]
            width = max(map(len, chunk))
            input_ids = torch.tensor([[0] * (width - len(c)) + c for c in chunk], device=model.device)
            mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk], device=model.device)
            with torch.inference_mode():
                model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=k, do_sample=False,
                               num_beams=1, pad_token_id=0)
        _sync(torch, device)
        raw[f"pairs_per_s_{k}_new"] = round(n_all / (time.perf_counter() - t), 2)
        raw[f"peak_gb_{k}_new"] = _peak_gb(torch, device)
    if "pairs_per_s_16_new" not in raw:
        raw["skipped"] = "time limit"
    rows.append(raw)
    print(f"  {_row_line(raw)}", flush=True)
    out["rows"] = rows
    out["table"] = judge_table(rows)
    return out, model, tokenizer_folder


def judge_table(rows: list[dict]) -> str:
    lines = ["| path | batch | pairs/s, 16 new | pairs/s, 2 new | peak GB (16 new) |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['path']} | – | skipped ({r['skipped']}) | – | – |")
            continue
        lines.append(f"| {r['path']} | {r.get('largest_batch', '')} | {r.get('pairs_per_s_16_new', '–')} | "
                     f"{r.get('pairs_per_s_2_new', '–')} | {r.get('peak_gb_16_new') or '–'} |")
    return "\n".join(lines)


def _row_line(r: dict) -> str:
    if r.get("skipped"):
        return f"{r['path']}: skipped ({r['skipped']})"
    return (f"{r['path']}: batch {r.get('largest_batch')}, {r.get('pairs_per_s_16_new')} pairs/s at 16 new, "
            f"{r.get('pairs_per_s_2_new', '–')} at 2 new, peak {r.get('peak_gb_16_new') or '–'} GB")


def train_speed(device: str, model, tokenizer_folder: Path, pairs, *, steps: int) -> dict:
    """tokens/s of ``berds judge train``'s loop (``berds.trust.training.lora_train``) on ``model`` (the 7B shape
    on a GPU), batch 8, the study's LoRA shape, a few steps."""
    import torch

    from berds.judges.llm_judge import LLMJudge
    from berds.trust.training import TrainSettings, lora_train, training_example

    llm = _attached_llm(tokenizer_folder, model, device, "bfloat16")
    shaping = LLMJudge(llm, prompt="zero-shot", system="drop")
    examples = [training_example(llm.tokenizer, shaping.render(p), "Yes" if i % 2 else "No")
                for i, p in enumerate(pairs[:8 * (steps + 1)])]
    settings = TrainSettings(batch_size=8, max_steps=1, device=device)
    _peak_reset(torch, device)
    warm, _, _, _ = lora_train(model, examples[:8], settings, pad_id=llm.tokenizer.pad_token_id)  # warm-up step
    model = warm.unload()  # the LoRA off again: the timed run wraps a fresh one
    settings = TrainSettings(batch_size=8, max_steps=steps, device=device)
    trained, losses, tokens, seconds = lora_train(model, examples, settings, pad_id=llm.tokenizer.pad_token_id)
    return {"steps": len(losses), "batch": 8, "tokens": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1), "examples_per_s": round(8 * len(losses) / seconds, 2),
            "peak_gb": _peak_gb(torch, device), "losses_finite": all(l == l for l in losses)}


def dense_encoding(device: str, *, full: bool, passages_n: int) -> dict:
    """passages/s of a Contriever-shaped encoder (BERT-base, mean pooling, 100-word passages): berds' encoder
    (what ``berds index dense --device cuda`` runs) beside a plain transformers forward pass, fp32 and fp16,
    and what 21 million Wikipedia passages (the study's DPR split) would take at that rate."""
    import random

    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, BertTokenizer

    from berds.indexes.encoders import EncoderSpec, load_encoder
    from berds.types import Passage
    from retrieval_fixtures import SPECIALS, WORDS

    folder = Path(tempfile.mkdtemp(prefix="gpu-speed-bert-"))
    BertTokenizer(vocab={w: i for i, w in enumerate(SPECIALS + list(WORDS))}).save_pretrained(folder)
    config = BertConfig() if full else BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    rng = random.Random(0)
    passages = [Passage(f"p{i}", " ".join(rng.choices(WORDS, k=100)), title=rng.choice(WORDS))
                for i in range(passages_n)]
    spec = EncoderSpec(name="contriever-shape", model=str(folder), pooling="mean", max_length=512)
    out: dict = {"passages": passages_n, "rows": []}
    for dtype in ("float32", "float16"):
        for batch in (32, 128):  # 32: `berds index dense`'s default --batch-size
            encoder = load_encoder(spec, device=device, batch_size=batch, dtype=None if dtype == "float32" else dtype)
            encoder.encode_passages(passages[:batch])  # load + warm-up
            _peak_reset(torch, device)
            t = time.perf_counter()
            vectors = encoder.encode_passages(passages)
            rate = passages_n / (time.perf_counter() - t)
            out["rows"].append({"path": f"berds encoder, batch {batch}", "dtype": dtype,
                                "passages_per_s": round(rate, 1), "hours_for_21m": round(21e6 / rate / 3600, 2),
                                "peak_gb": _peak_gb(torch, device)})
            assert vectors.shape[0] == passages_n and np.isfinite(vectors).all()
        # plain transformers: same texts ("title text"), same batch, mean pooling, vectors back on the host
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()
        texts = [f"{p.title} {p.text}" for p in passages]
        _peak_reset(torch, device)
        t = time.perf_counter()
        with torch.inference_mode():
            for b in range(0, len(texts), 128):
                enc = tokenizer(texts[b:b + 128], padding=True, truncation=True, max_length=512,
                                return_tensors="pt").to(device)
                hidden = model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                ((hidden * m).sum(1) / m.sum(1)).float().cpu().numpy()
        rate = passages_n / (time.perf_counter() - t)
        out["rows"].append({"path": "raw transformers, batch 128", "dtype": dtype, "passages_per_s": round(rate, 1),
                            "hours_for_21m": round(21e6 / rate / 3600, 2), "peak_gb": _peak_gb(torch, device)})
        del model
    return out
