"""berds' GPU code paths against their CPU twins, side by side in one process, plus GPU throughput.

Every check runs the same berds object twice, ``device="cpu"`` and ``device=DEVICE``, on the same inputs,
and compares what comes back (texts, verdicts, P(Yes), vectors). Models are the tiny random-weight ones the
tests build (tests/llm_fixtures.py, tests/retrieval_fixtures.py), so nothing is downloaded; ``--minilm``
adds the embedded judge and the MiniLM encoder on a real all-MiniLM-L6-v2 folder.

    python benchmarks/gpu_check.py [--minilm PATH] [--out gpu_check.json] [--sections parity,judge,train,dense]
                                   [--time-limit SECONDS]

The speed sections (benchmarks/gpu_speed.py; ``--sections judge,train,dense``) time the study's evaluator shape
(Mistral-7B, random bf16 weights) every way berds judges — the study's one-at-a-time loop and a plain batched
``generate`` beside them — its fine-tuning (``berds judge train``'s loop) and dense encoding of a BERT-base
(Contriever) shape, berds' encoder beside plain transformers. Sized for about 7 minutes on one H100 (an estimate
from the shapes, not yet a measurement); ``--pairs``, ``--train-steps``, ``--passages`` and ``--time-limit`` cap it.

Exit status 1 when any parity check fails (a section that raises counts as failed). ``--out`` is rewritten
after every section, so a run stopped from outside keeps what it measured; ``--time-limit`` starts no section
(and no row of the judge table) once that many seconds have passed, and lists them as skipped. Not part of
the test suite: CI has no GPU (tests/test_gpu_check_script.py runs it on CPU). Needs torch with CUDA,
transformers, peft and (for --minilm) sentence-transformers; the TART check also imports lmdb (berds' passage
store) through berds.retrievers. docs/benchmarks.md (issue 31) gives the command for a one-shot GPU lease.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]
from gpu_speed import past  # noqa: E402  (the time limit, as the judge rows check it)

PROMPTS = [
    [{"role": "user", "content": "Should cities build bike lanes? Yes or No"}],
    [{"role": "user", "content": "Are school uniforms good for students?"}],
    [{"role": "user", "content": "Should taxes be raised or lowered?"}],
    [{"role": "user", "content": "Hello world, is this safer?"}],
    [{"role": "user", "content": "Do vaccines work? Answer Yes or No."}],
    [{"role": "user", "content": "Bike lanes make streets safer and help shops. Yes?"}],
]
PERSPECTIVE_PAIRS = [
    ("Bike lanes make streets safer.", "Cities that built bike lanes saw fewer crashes."),
    ("School uniforms help students.", "Uniforms cost families money and limit expression."),
    ("Taxes should be raised.", "Raising taxes would fund schools and roads."),
    ("Vaccines work.", "The recipe calls for two cups of flour."),
]

RESULTS: dict[str, dict] = {}
DEVICE = "cuda"  # --device cpu: a dry run of this script on a machine without a GPU (CPU against CPU)
OUT: Path | None = None  # --out: rewritten after every section
DEADLINE: float | None = None  # --time-limit, as a time.monotonic() value


def save() -> None:
    """Write every figure so far to --out (atomically: a run killed mid-write leaves the previous file)."""
    if OUT is not None:
        from berds.io import write_json  # (stdlib only: importable on a stock GPU image)

        write_json(OUT, RESULTS)


def free_gpu() -> None:
    """Drop unreachable objects (models sit in reference cycles) and hand cached blocks back, so what the next
    section allocates and reports as its peak is its own."""
    gc.collect()
    if DEVICE.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def section(name):
    """Run one check; record its figures, or the error that stopped it (as a failed check)."""
    def wrap(fn):
        def run(*args, **kwargs):
            if past(DEADLINE):
                RESULTS[name] = {"ok": None, "skipped": "time limit"}
                print(f"[skipped: time limit] {name}", flush=True)
                save()
                return
            started = time.perf_counter()
            try:
                figures = fn(*args, **kwargs)
            except Exception as exc:  # a GPU check must report every section, not stop at the first
                figures = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                           "traceback": traceback.format_exc().splitlines()[-6:]}
            figures["seconds"] = round(time.perf_counter() - started, 2)
            RESULTS[name] = figures
            print(f"[{'ok' if figures.get('ok') else 'FAILED'}] {name}: "
                  + json.dumps({k: v for k, v in figures.items() if k != "traceback"}), flush=True)
            save()
        return run
    return wrap


def fixture(tmp: Path, name: str) -> Path:
    """The tiny model ``name`` under ``tmp``, built on first use, inside the check that needs it: a fixture that
    cannot be built (a package missing on the GPU machine) fails that check, not the whole run."""
    folder = tmp / name
    if folder.exists():
        return folder
    from llm_fixtures import build_tiny_lora, build_tiny_mistral, build_tiny_nli, build_tiny_t5_nli
    from retrieval_fixtures import tiny_bert, tiny_t5_classifier

    builders = {"mistral": build_tiny_mistral, "lora": lambda f: build_tiny_lora(fixture(tmp, "mistral"), f),
                "nli": build_tiny_nli, "t5": build_tiny_t5_nli, "bert": tiny_bert, "t5-tart": tiny_t5_classifier}
    try:
        builders[name](folder)
    except BaseException:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)  # (never a half-built folder for the next check)
        raise
    return folder


def max_logprob_gap(a, b) -> float:
    gaps = [abs(x.first_token_logprobs[t] - y.first_token_logprobs[t])
            for x, y in zip(a, b) for t in x.first_token_logprobs.keys() & y.first_token_logprobs.keys()]
    return float(max(gaps)) if gaps else 0.0


@section("transformers LLM: cuda float32 vs cpu float32 (greedy texts, first-token log-probs, score)")
def check_llm(tmp: Path):
    from berds.llm.transformers_backend import TransformersLLM

    model, adapter = fixture(tmp, "mistral"), fixture(tmp, "lora")

    cpu = TransformersLLM(str(model), device="cpu", batch_size=8)
    gpu = TransformersLLM(str(model), device=DEVICE, dtype="float32", batch_size=8)
    gpu_single = TransformersLLM(str(model), device=DEVICE, dtype="float32", batch_size=1)
    a = cpu.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    b = gpu.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    c = gpu_single.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    texts = [x.text for x in a] == [x.text for x in b]
    batch_invariant = [x.text for x in b] == [x.text for x in c]
    gap = max_logprob_gap(a, b)
    continuations = ["Yes", "No, it is not", "maybe", "Yes", "No", "the streets"]
    sa, sb = cpu.score(PROMPTS, continuations), gpu.score(PROMPTS, continuations)
    score_gap = max(abs(x - y) for u, v in zip(sa, sb) for x, y in zip(u.logprobs, v.logprobs))
    lora_cpu = TransformersLLM(str(model), adapter=str(adapter), device="cpu", batch_size=8)
    lora_gpu = TransformersLLM(str(model), adapter=str(adapter), device=DEVICE, dtype="float32", batch_size=8)
    la, lb = (x.generate(PROMPTS, max_new_tokens=8, top_logprobs=5) for x in (lora_cpu, lora_gpu))
    lora_texts = [x.text for x in la] == [x.text for x in lb]
    lora_changes = [x.text for x in la] != [x.text for x in a]
    bf16 = TransformersLLM(str(model), device=DEVICE, batch_size=8)  # dtype auto: bfloat16 on a GPU
    d = bf16.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    ok = (texts and batch_invariant and gap < 1e-3 and score_gap < 1e-3 and lora_texts and lora_changes
          and (bf16.load().dtype == "bfloat16" or DEVICE == "cpu") and gpu.load().device == DEVICE)
    return {"ok": ok, "texts_equal": texts, "gpu_batch1_equals_batch8": batch_invariant,
            "max_first_token_logprob_gap": gap, "max_score_logprob_gap": float(score_gap),
            "lora_texts_equal": lora_texts, "lora_changes_the_answers": lora_changes,
            "auto_dtype_on_gpu": bf16.dtype, "bf16_texts_equal_fp32": sum(x.text == y.text for x, y in zip(a, d)),
            "of": len(PROMPTS)}


@section("transformers ids name the precision the weights run in (dtype=auto: bf16 on a GPU, float32 on a CPU)")
def check_llm_ids(tmp: Path):
    from berds.llm.transformers_backend import TransformersLLM

    model = fixture(tmp, "mistral")

    out, ok = {}, True
    for name, kwargs, suffix in (("auto_default_device", {}, None),
                                 ("auto_cpu", {"device": "cpu"}, "+dtype=float32"),
                                 ("bf16_cpu", {"device": "cpu", "dtype": "bfloat16"}, ""),
                                 ("auto_gpu", {"device": DEVICE}, "" if DEVICE != "cpu" else "+dtype=float32")):
        llm = TransformersLLM(str(model), **kwargs)
        ran = llm.load().dtype
        named = "+dtype=" in llm.id
        out[name] = {"ran": ran, "id_names_dtype": named}
        expected_named = (ran != "bfloat16") if suffix is None else bool(suffix)
        ok = ok and named == expected_named and (f"+dtype={ran}" in llm.id) == named
    return {"ok": ok, **out}


@section("study judge (LLMJudge, zero-shot prompt) on the transformers backend: cuda vs cpu verdicts")
def check_llm_judge(tmp: Path):
    from berds.judges.llm_judge import LLMJudge
    from berds.llm.transformers_backend import TransformersLLM
    from berds.types import JudgePair

    model = fixture(tmp, "mistral")

    pairs = [JudgePair(perspective=p, passage=d) for p, d in PERSPECTIVE_PAIRS]
    cpu = LLMJudge(TransformersLLM(str(model), device="cpu", batch_size=8), top_logprobs=5, max_new_tokens=3)
    gpu = LLMJudge(TransformersLLM(str(model), device=DEVICE, dtype="float32", batch_size=8), top_logprobs=5,
                   max_new_tokens=3)
    a, b = cpu.judge(pairs), gpu.judge(pairs)
    same = [(x.label, x.raw) for x in a] == [(y.label, y.raw) for y in b]
    gap = max((abs(x.p_yes - y.p_yes) for x, y in zip(a, b) if x.p_yes is not None and y.p_yes is not None),
              default=0.0)
    return {"ok": same and gap < 1e-3, "labels_and_answers_equal": same, "max_p_yes_gap": float(gap),
            "pairs": len(pairs), "same_judge_id": cpu.id == gpu.id}


@section("nli: judges (BERT classifier, T5 seq2seq): cuda vs cpu P(entail)")
def check_nli(tmp: Path):
    from berds.judges.nli import NLIJudge
    from berds.types import JudgePair

    bert_nli, t5_nli = fixture(tmp, "nli"), fixture(tmp, "t5")

    pairs = [JudgePair("cats are great pets", "cats are great pets the"), JudgePair("fish need clean water", "dogs sing"),
             JudgePair("birds sing", "birds not sing the a")] * 7
    out = {}
    ok = True
    for name, folder in (("bert", bert_nli), ("t5", t5_nli)):
        a = NLIJudge(str(folder), device="cpu", batch_size=4).judge(pairs)
        b = NLIJudge(str(folder), device=DEVICE, batch_size=4).judge(pairs)
        gap = max(abs(x.p_yes - y.p_yes) for x, y in zip(a, b))
        same = [x.label for x in a] == [y.label for y in b]
        out[f"{name}_max_p_gap"], out[f"{name}_labels_equal"] = float(gap), same
        ok = ok and same and gap < 1e-4
    return {"ok": ok, **out}


@section("dense encoder (tiny BERT, transformers backend): cuda vs cpu vectors")
def check_encoder(tmp: Path):
    from berds.indexes.encoders import EncoderSpec, load_encoder
    from berds.types import Passage

    bert = fixture(tmp, "bert")

    spec = EncoderSpec(name="tiny-bert", model=str(bert), pooling="mean", max_length=32)
    texts = ["apple river storm", "market harbor bridge kiwi", "storm"] * 20
    passages = [Passage(f"p{i}", t, title="river") for i, t in enumerate(texts)]
    a = load_encoder(spec, device="cpu").encode_passages(passages)
    b = load_encoder(spec, device=DEVICE, batch_size=7).encode_passages(passages)
    h = load_encoder(spec, device=DEVICE, dtype="float16").encode_passages(passages)
    cos = (h * b).sum(1) / np.linalg.norm(h, axis=1) / np.linalg.norm(b, axis=1)
    gap = float(np.abs(a - b).max())
    return {"ok": gap < 1e-4 and a.dtype == b.dtype == np.float32 and float(cos.min()) > 0.99,
            "max_abs_gap_fp32": gap, "min_cosine_fp16_vs_fp32": float(cos.min()), "vectors": len(texts)}


@section("TART scorer (tiny EncT5) and the MMR sentence encoder (tiny BERT): cuda vs cpu")
def check_tart_and_mmr_encoder(tmp: Path):
    from berds.rerank.embeddings import SentenceEncoder
    from berds.retrievers.tart import TartScorer
    from berds.testing import rankings_agree

    t5, bert = fixture(tmp, "t5-tart"), fixture(tmp, "bert")

    passages = ["apple river storm", "market harbor bridge kiwi", "storm", "river kiwi apple market"] * 5
    a = np.array(TartScorer(str(t5), device="cpu").score("apple storm", passages))
    b = np.array(TartScorer(str(t5), device=DEVICE, batch_size=3).score("apple storm", passages))
    tart_gap = float(np.abs(a - b).max())
    # Up to ties: the passages repeat, and duplicates' scores differ by float noise between batchings.
    same_order = rankings_agree([(i, a[i]) for i in np.argsort(-a, kind="stable")],
                                [(i, b[i]) for i in np.argsort(-b, kind="stable")], tol=1e-5)
    u = SentenceEncoder(str(bert), pooling="cls", device="cpu").encode(passages)
    v = SentenceEncoder(str(bert), pooling="cls", device=DEVICE).encode(passages)
    mmr_gap = float(np.abs(u - v).max())
    return {"ok": tart_gap < 1e-5 and same_order and mmr_gap < 1e-4, "tart_max_p_gap": tart_gap,
            "tart_same_order_up_to_ties": same_order, "mmr_encoder_max_abs_gap": mmr_gap, "passages": len(passages)}


def demo_pairs():
    from berds.trust.labels import read_labelled_pairs

    return read_labelled_pairs(ROOT / "berds" / "data" / "demo" / "labelled_pairs.tsv").judge_pairs()


@section("MiniLM encoder (sentence-transformers backend): cuda vs cpu vectors")
def check_minilm_encoder(minilm: Path):
    from berds.indexes.encoders import encoder_spec, load_encoder

    spec = encoder_spec("minilm", model=str(minilm))
    texts = [p.passage for p in demo_pairs()[:200]]
    a = load_encoder(spec, device="cpu").encode_queries(texts)
    b = load_encoder(spec, device=DEVICE).encode_queries(texts)
    gap = float(np.abs(a - b).max())
    return {"ok": gap < 1e-4, "max_abs_gap": gap, "texts": len(texts)}


@section("embedded judge v2 and v1: cuda vs cpu on the 650 demo labelled pairs, and throughput")
def check_embedded(minilm: Path, repeats: int):
    import torch

    from berds.judges.embedded import EmbeddedJudge

    pairs = demo_pairs()
    out = {"pairs": len(pairs)}
    ok = True
    for version in ("v2", "v1"):
        cpu = EmbeddedJudge(version=version, model=minilm, device="cpu")
        gpu = EmbeddedJudge(version=version, model=minilm, device=DEVICE)
        a, b = cpu.scores(pairs), gpu.scores(pairs)
        gap = float(np.abs(a - b).max())
        flips = int(((a >= cpu.threshold) != (b >= gpu.threshold)).sum())
        near = int((np.abs(a - cpu.threshold) < 1e-4).sum())  # a flip only counts as a fault away from the threshold
        out[f"{version}_max_p_yes_gap"], out[f"{version}_label_flips"] = gap, flips
        out[f"{version}_same_id"] = cpu.id == gpu.id
        ok = ok and gap < 1e-4 and flips <= near and cpu.id == gpu.id
    many = pairs * repeats
    for device in ("cpu", DEVICE):
        for batch in ((32, 256) if device == DEVICE else (32,)):
            judge = EmbeddedJudge(model=minilm, device=device, batch_size=batch)
            judge.scores(many[:64])  # load and warm up
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            started = time.perf_counter()
            judge.scores(many)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            out[f"v2_pairs_per_s_{device}_batch{batch}"] = round(len(many) / (time.perf_counter() - started), 1)
    out["timed_pairs"] = len(many)
    out["cpu_threads"] = torch.get_num_threads()
    return {"ok": ok, **out}


# ------------------------------------------------------------------------------ speed (benchmarks/gpu_speed.py)


def run_speed_sections(sections: set[str], args) -> None:
    """The judge, train and dense speed sections; a dry run (--device cpu) uses tiny shapes and few items."""
    import gpu_speed

    full = DEVICE.startswith("cuda")
    pairs = demo_pairs()[:args.pairs if full else 6]
    held: dict = {}

    @section("judge throughput: Mistral-7B shape, random bf16 weights, study-shaped LoRA (pairs/s, peak GB)")
    def judge():
        figures, model, tokenizer_folder = gpu_speed.judge_throughput(DEVICE, pairs, full=full, deadline=DEADLINE)
        held.update(model=model, tokenizer_folder=tokenizer_folder)
        print(figures["table"], flush=True)
        return {"ok": True, **figures}

    @section("judge train speed: Mistral-7B shape, LoRA r64 on seven projections, batch 8 (tokens/s)")
    def train():
        if "model" not in held:  # (train without judge, or after it failed: the same shape, built afresh)
            free_gpu()
            held["model"] = gpu_speed.build_judge_model(DEVICE, full=full, dtype="bfloat16" if full else "float32")
            held["tokenizer_folder"] = gpu_speed.judge_tokenizer()
        figures = gpu_speed.train_speed(DEVICE, held["model"], held["tokenizer_folder"], pairs,
                                        steps=args.train_steps if full else 1)
        return {"ok": figures["losses_finite"], **figures}

    @section("dense encoding: BERT-base (Contriever) shape, berds encoder vs raw transformers, fp32/fp16")
    def dense():
        figures = gpu_speed.dense_encoding(DEVICE, full=full, passages_n=args.passages if full else 16)
        for row in figures["rows"]:
            print(f"  {row['path']:<28} {row['dtype']:<8} {row['passages_per_s']:>9} passages/s  "
                  f"21M passages: {row['hours_for_21m']} h", flush=True)
        return {"ok": True, **figures}

    if "judge" in sections:
        judge()
    if "train" in sections:
        train()
    held.clear()
    free_gpu()  # (the 7B model is gone before dense encoding measures its own peak)
    if "dense" in sections:
        dense()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minilm", type=Path, help="an all-MiniLM-L6-v2 folder (embedded judge, MiniLM encoder)")
    parser.add_argument("--repeats", type=int, default=4, help="times the 650 demo pairs are judged for timing")
    parser.add_argument("--out", type=Path, help="write every figure here as JSON")
    parser.add_argument("--device", default="cuda", help="the device under test (cpu: a dry run of the script)")
    parser.add_argument("--sections", default="parity,judge,train,dense",
                        help="comma list: parity (GPU vs CPU checks), judge (7B judge pairs/s), train (7B judge train "
                             "tokens/s), dense (BERT-base encoding passages/s)")
    parser.add_argument("--pairs", type=int, default=640, help="demo pairs judged per fast row of the judge section")
    parser.add_argument("--train-steps", type=int, default=10, help="timed steps of the training-speed row")
    parser.add_argument("--passages", type=int, default=20000, help="passages encoded per row of the dense section")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="start no section or judge row after this many seconds (they are listed as skipped); "
                             "a lease's one shot: leave room for the section running when it passes")
    args = parser.parse_args()
    global DEVICE, OUT, DEADLINE
    DEVICE, OUT = args.device, args.out
    if args.time_limit is not None:
        DEADLINE = time.monotonic() + args.time_limit

    import torch
    import transformers

    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA GPU visible: this script compares GPU paths with CPU ones", file=sys.stderr)
        return 2
    RESULTS["machine"] = machine(torch, transformers)
    print(RESULTS["machine"], flush=True)
    save()
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - {"parity", "judge", "train", "dense"}
    if unknown:
        print(f"unknown section(s) {', '.join(sorted(unknown))}; use parity, judge, train, dense", file=sys.stderr)
        return 2
    if sections & {"judge", "train", "dense"}:
        run_speed_sections(sections, args)
    if "parity" not in sections:
        return finish(args)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        check_llm(tmp)
        check_llm_ids(tmp)
        check_llm_judge(tmp)
        check_nli(tmp)
        check_encoder(tmp)
        check_tart_and_mmr_encoder(tmp)
        if args.minilm:
            check_minilm_encoder(args.minilm)
            check_embedded(args.minilm, args.repeats)
    return finish(args)


def machine(torch, transformers) -> dict:
    """What the figures were measured on (the README quotes them with the date and the card)."""
    from importlib.metadata import PackageNotFoundError, version

    info = {"ok": True, "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "gpu": "none (dry run)", "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0]}
    for package in ("peft", "sentence-transformers", "accelerate"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    if DEVICE.startswith("cuda"):
        index = torch.device(DEVICE).index or 0
        info.update(gpu=torch.cuda.get_device_name(index), cuda=torch.version.cuda,
                    gpu_memory_gb=round(torch.cuda.get_device_properties(index).total_memory / 1e9, 1))
    return info


def finish(args) -> int:
    skipped = [name for name, figures in RESULTS.items() if figures.get("skipped")]
    failed = [name for name, figures in RESULTS.items() if not figures.get("ok") and name not in skipped]
    save()
    ran = len(RESULTS) - len(skipped)
    print(f"\n{ran - len(failed)} of {ran} passed" + (f"; FAILED: {failed}" if failed else "")
          + (f"; skipped (time limit): {skipped}" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
