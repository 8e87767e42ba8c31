"""LLM backends through the one ``berds.llm.base.LLM`` interface, on CPU.

* transformers: a tiny random-weight Mistral model built in the session (``llm_fixtures``), with and
  without a LoRA adapter, checked against a hand-run forward pass;
* openai: against the real ``python -m berds.llm.server`` process serving that model, and against scripted
  local HTTP servers that answer 429/5xx/400 to exercise retries and degradation;
* vllm: its pure helpers (vLLM itself needs a GPU and its own environment);
* the perspective judge (``berds.judges.catalogue.LLMJudge``) end to end on transformers and over HTTP.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

import pytest
from judge_trust_fixtures import served
from llm_fixtures import ScriptedServer, tiny_lora, tiny_mistral  # noqa: F401 - pytest fixtures

from berds.errors import BerdsError, MissingExtraError
from berds.judges.llm_judge import LLMJudge, p_yes_from_logprobs, parse_answer
from berds.llm import LLM, Generation, load_llm, user_prompt
from berds.llm.shared import (
    fold_system_into_user,
    generation_from_token_logprobs,
    merge_logprobs,
    model_identity,
    normalise_prompts,
)
from berds.types import JudgePair

REPO = Path(__file__).resolve().parents[1]

PROMPTS = [
    user_prompt("Hello world"),
    user_prompt("Do protected bike lanes make streets safer?", system="Answer Yes or No only."),
    user_prompt("Should taxes be raised?"),
    user_prompt("Cities that added bike lanes saw injuries fall and shops reported rising sales. Is this safer?"),
]

PAIRS = [
    JudgePair(perspective="Protected bike lanes make streets safer.",
              passage="Cities that added protected bike lanes saw cycling injuries fall by a third."),
    JudgePair(perspective="Taxes should be raised.", passage="School uniforms help students focus."),
    JudgePair(perspective="Vaccines work.", passage="Hello world"),
]


# ----------------------------------------------------------------------------- shared helpers


def test_merge_logprobs_sums_probabilities_of_duplicate_strings():
    merged = merge_logprobs([("Yes", math.log(0.2)), ("No", math.log(0.1)), ("Yes", math.log(0.3))])
    assert merged.keys() == {"Yes", "No"}
    assert math.exp(merged["Yes"]) == pytest.approx(0.5)
    assert math.exp(merged["No"]) == pytest.approx(0.1)


def test_generation_from_token_logprobs_keeps_the_top_n_after_sorting():
    pairs = [("c", -3.0), ("a", -0.5), ("sampled", -7.0), ("b", -1.0)]  # vLLM appends the sampled token
    generation = generation_from_token_logprobs("a b", pairs, top_n=2)
    assert generation == Generation("a b", {"a": -0.5, "b": -1.0})
    assert generation_from_token_logprobs("a", pairs, top_n=0).first_token_logprobs is None
    assert generation_from_token_logprobs("a", None, top_n=5).first_token_logprobs is None


def test_prompts_are_checked_with_messages_that_say_where():
    with pytest.raises(BerdsError, match="user_prompt"):
        normalise_prompts("just a string")
    with pytest.raises(BerdsError, match=r"prompt 1, message 0: expected \{'role'"):
        normalise_prompts([user_prompt("ok"), [{"role": "robot", "content": "x"}]])
    with pytest.raises(BerdsError, match="prompt 0: expected a non-empty list"):
        normalise_prompts([[]])


def test_system_text_is_folded_into_the_first_user_turn():
    folded = fold_system_into_user([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                                    {"role": "assistant", "content": "A"}, {"role": "user", "content": "Q2"}])
    assert folded == [{"role": "user", "content": "S\n\nQ"}, {"role": "assistant", "content": "A"},
                      {"role": "user", "content": "Q2"}]


def test_local_model_identity_follows_content_not_location(tmp_path):
    def fake_model(folder: Path, weight_bytes: bytes) -> Path:
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"model_type": "mistral"}')
        (folder / "model.safetensors").write_bytes(weight_bytes)
        return folder

    first = fake_model(tmp_path / "a" / "judge", b"\x01" * 300_000)
    same_size_other_weights = fake_model(tmp_path / "b" / "judge", b"\x01" * 200_000 + b"\x02" * 100_000)
    copy = tmp_path / "c" / "judge"
    shutil.copytree(first, copy)

    id_first = model_identity("transformers", str(first))
    assert re.fullmatch(r"transformers:judge#[0-9a-f]{12}", id_first)
    assert model_identity("transformers", str(copy)) == id_first  # a copied model keeps its cache entries
    assert model_identity("transformers", str(same_size_other_weights)) != id_first
    assert model_identity("transformers", "mistralai/Mistral-7B-Instruct-v0.2", revision="abc123",
                          adapter="timchen0618/Mistral_BERDS_evaluator") == (
        "transformers:mistralai/Mistral-7B-Instruct-v0.2@abc123+adapter=timchen0618/Mistral_BERDS_evaluator")
    with pytest.raises(BerdsError, match="does not exist"):
        model_identity("transformers", str(tmp_path / "missing"))


def test_weights_replaced_in_place_change_a_local_model_identity(tmp_path):
    """A model retrained at the same path (same file sizes, only inner tensors changed) kept its id: only the
    first and last 64 KiB of each file were hashed, so its cached verdicts were served for the new weights."""
    import os

    folder = tmp_path / "judge"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "mistral"}')
    small, large = folder / "adapter_model.safetensors", folder / "model.safetensors"
    small.write_bytes(os.urandom(300_000))
    large.write_bytes(os.urandom(3_000_000))  # past the size whose digest is remembered across processes
    before = model_identity("transformers", str(folder))
    assert model_identity("transformers", str(folder)) == before

    for weights in (small, large):
        stat = weights.stat()
        with open(weights, "r+b") as handle:  # rewritten in place, as a retraining run saving there would
            handle.seek(stat.st_size // 2)
            handle.write(os.urandom(64))
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with its old modification time
        after = model_identity("transformers", str(folder))
        assert after != before, weights.name
        assert model_identity("transformers", str(folder)) == after  # (and stable)
        before = after
    copy = tmp_path / "elsewhere" / "judge"
    shutil.copytree(folder, copy)
    assert model_identity("transformers", str(copy)) == before  # a copy keeps its cache entries


# ---------------------------------------------------------------------------------- vLLM helpers


@dataclass
class VLLMLogprob:
    """The fields of ``vllm.sequence.Logprob`` that the backend reads."""

    logprob: float
    rank: int
    decoded_token: str | None


@dataclass
class VLLMCompletion:
    """The fields of ``vllm.outputs.CompletionOutput`` that the backend reads."""

    text: str
    logprobs: list | None


def test_vllm_completion_becomes_a_generation_with_top_n_first_token_logprobs():
    from berds.llm.vllm_backend import generation_from_vllm_completion

    first_step = {
        11: VLLMLogprob(math.log(0.6), 1, "Yes"), 12: VLLMLogprob(math.log(0.3), 2, "No"),
        13: VLLMLogprob(math.log(0.05), 3, " Yes"), 99: VLLMLogprob(math.log(0.01), 40, None),
    }
    completion = VLLMCompletion(" Yes, it does.", [first_step, {14: VLLMLogprob(-0.1, 1, ",")}])
    generation = generation_from_vllm_completion(completion, top_logprobs=3)
    assert generation.text == "Yes, it does."
    assert generation.first_token_logprobs.keys() == {"Yes", "No", " Yes"}
    assert p_yes_from_logprobs(generation.first_token_logprobs) == pytest.approx(0.65 / 0.95)
    no_logprobs = generation_from_vllm_completion(VLLMCompletion("No", None), top_logprobs=3)
    assert no_logprobs == Generation("No", None)


def test_vllm_options_and_lora_rank(tiny_lora):
    from berds.llm.vllm_backend import lora_rank, sampling_options, vllm_engine_args, vllm_lora_rank

    assert sampling_options(16, 0.0, 5) == {"max_tokens": 16, "temperature": 0.0, "n": 1, "logprobs": 5}
    assert sampling_options(8, 0.7, 0, seed=3) == {"max_tokens": 8, "temperature": 0.7, "n": 1, "seed": 3}
    args = vllm_engine_args("m", max_model_len=None, engine_options={"enforce_eager": True})
    assert args["enable_prefix_caching"] is True and args["enforce_eager"] is True
    assert "max_model_len" not in args and "revision" not in args
    assert lora_rank(tiny_lora) == 4
    assert [vllm_lora_rank(r) for r in (4, 8, 9, 64, 300)] == [8, 8, 16, 64, 320]
    with pytest.raises(BerdsError, match="merge the adapter"):
        vllm_lora_rank(1024)


def test_vllm_backend_without_vllm_names_the_extra():
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed here")
    with pytest.raises(MissingExtraError, match=r"berds\[vllm\]"):
        load_llm("vllm", "mistralai/Mistral-7B-Instruct-v0.2")


# ------------------------------------------------------------------------------ transformers


@pytest.fixture(scope="module")
def tiny_llm(tiny_mistral):
    from berds.llm.transformers_backend import TransformersLLM

    return TransformersLLM(str(tiny_mistral), batch_size=8, device="cpu").load()


def test_transformers_backend_on_cuda_without_a_gpu_is_one_line(tiny_mistral):
    # was torch's AssertionError "Torch not compiled with CUDA enabled", a traceback from inside torch
    import torch

    from berds.llm.transformers_backend import TransformersLLM

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(BerdsError, match="device 'cuda' asked for, but torch sees no CUDA GPU"):
        TransformersLLM(str(tiny_mistral), device="cuda").load()


def first_step_logprobs(llm, prompt):
    """Log-softmax of the next-token logits after ``prompt``, by a plain forward pass."""
    import torch

    encoded = llm.tokenizer(llm.render(prompt), add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        logits = llm.model(**encoded).logits[0, -1]
    return torch.log_softmax(logits.float(), dim=-1)


def test_transformers_backend_is_an_llm_with_a_content_based_id(tiny_llm, tiny_mistral):
    assert isinstance(tiny_llm, LLM)
    assert tiny_llm.device == "cpu" and tiny_llm.dtype == "float32"
    assert re.fullmatch(rf"transformers:{tiny_mistral.name}#[0-9a-f]{{12}}\+dtype=float32", tiny_llm.id)


def test_transformers_settings_that_change_answers_change_the_id(tiny_mistral, tiny_lora):
    """The id keys the judgement cache. Half or full precision and a chat template of one's own change the
    answers, yet shared the id (a CPU float32 run's verdicts were served to a bfloat16 GPU run of the same
    model); batch size and device at one precision do not change answers, and keep it."""
    from berds.llm.transformers_backend import TransformersLLM

    def llm_id(**options):
        return TransformersLLM(str(tiny_mistral), **options).id

    cpu = llm_id(device="cpu")
    assert llm_id(device="cpu", batch_size=1) == llm_id(device="cpu", dtype="float32", seed=3) == cpu
    assert llm_id(device="cpu", dtype="float16") != cpu != llm_id(device="cpu", dtype="bfloat16")
    # auto is bfloat16 on GPUs, the study's precision, whose ids stay as they were
    assert llm_id(device="cuda", dtype="auto") == llm_id(device="cpu", dtype="bf16") == cpu.replace("+dtype=float32", "")
    assert llm_id(device="cpu", chat_template="{{ messages[0]['content'] }}") != cpu
    assert llm_id(device="cpu", chat_template="{{ messages[-1]['content'] }}") != llm_id(
        device="cpu", chat_template="{{ messages[0]['content'] }}")
    adapted = llm_id(device="cpu", adapter=str(tiny_lora))
    assert llm_id(device="cpu", adapter=str(tiny_lora), merge_adapter=True) != adapted
    assert llm_id(device="cpu", merge_adapter=True) == cpu  # nothing to merge
    # vLLM: an explicit precision and extra engine arguments (quantization=...) are in the id too
    assert model_identity("vllm", "org/m", dtype="float16") == "vllm:org/m+dtype=float16"
    assert model_identity("vllm", "org/m", options={"quantization": "awq"}) != model_identity("vllm", "org/m")
    assert model_identity("vllm", "org/m", options={"a": 1, "b": 2}) == model_identity("vllm", "org/m",
                                                                                       options={"b": 2, "a": 1})


def test_greedy_generation_is_deterministic_and_batch_invariant(tiny_llm, tiny_mistral):
    from berds.llm.transformers_backend import TransformersLLM

    batched = tiny_llm.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    again = tiny_llm.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    assert batched == again
    assert len({g.text for g in batched}) > 1  # different prompts, different answers: not a constant

    one_by_one = TransformersLLM(str(tiny_mistral), batch_size=1, device="cpu")
    singles = one_by_one.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    assert [g.text for g in singles] == [g.text for g in batched]
    for single, batch in zip(singles, batched):
        one, many = single.first_token_logprobs, batch.first_token_logprobs
        for token in one.keys() & many.keys():
            assert many[token] == pytest.approx(one[token], abs=1e-4)
        # The top 5 is cut at a rank: a token tied (to float noise) with the fifth may be in one batching's
        # top 5 and not the other's; any other difference is a real one.
        cut = min(min(one.values()), min(many.values()))
        for token in one.keys() ^ many.keys():
            assert (one.get(token, many.get(token))) == pytest.approx(cut, abs=1e-4), (token, one, many)


def test_first_token_logprobs_match_a_plain_forward_pass(tiny_llm):
    import torch

    generations = tiny_llm.generate(PROMPTS, max_new_tokens=4, top_logprobs=5)
    for prompt, generation in zip(PROMPTS, generations):
        log_probs = first_step_logprobs(tiny_llm, prompt)
        top = torch.topk(log_probs, 5)
        expected = merge_logprobs((tiny_llm.tokenizer.decode([i]), v) for i, v in zip(top.indices.tolist(),
                                                                                     top.values.tolist()))
        assert generation.first_token_logprobs.keys() == expected.keys()
        for token, logprob in expected.items():
            assert generation.first_token_logprobs[token] == pytest.approx(logprob, abs=1e-4)
        greedy_first = tiny_llm.tokenizer.decode([int(top.indices[0])], skip_special_tokens=True).strip()
        assert generation.text.startswith(greedy_first)


def test_logprobs_over_the_whole_vocabulary_are_normalised(tiny_llm):
    vocab_size = tiny_llm.model.config.vocab_size
    generation = tiny_llm.generate(PROMPTS[:1], max_new_tokens=1, top_logprobs=vocab_size)[0]
    assert sum(math.exp(lp) for lp in generation.first_token_logprobs.values()) == pytest.approx(1.0, abs=1e-5)
    assert all(lp <= 0.0 for lp in generation.first_token_logprobs.values())
    # "▁Yes" and "Yes" are two ids that decode to one string: merged into one entry.
    assert len(generation.first_token_logprobs) < vocab_size


def test_max_new_tokens_cuts_the_same_greedy_continuation(tiny_llm):
    short = tiny_llm.generate(PROMPTS, max_new_tokens=2)
    long = tiny_llm.generate(PROMPTS, max_new_tokens=8)
    for s, g in zip(short, long):
        assert g.text.startswith(s.text) and len(g.text) >= len(s.text)
        assert s.first_token_logprobs is None  # not asked for


def test_system_message_is_folded_for_templates_that_reject_it(tiny_llm):
    assert tiny_llm.render(user_prompt("Q?", system="Be brief.")) == "<s>[INST] Be brief.\n\nQ? [/INST]"
    assert tiny_llm.render(user_prompt("Q?")) == "<s>[INST] Q? [/INST]"


def test_tokenizer_without_chat_template_is_a_clear_error(tiny_mistral):
    from berds.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(str(tiny_mistral), device="cpu").load()
    llm.tokenizer.chat_template = None
    with pytest.raises(BerdsError, match="has no chat template — pass chat_template="):
        llm.generate(PROMPTS[:1])
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %} Answer:"
    custom = TransformersLLM(str(tiny_mistral), device="cpu", chat_template=template)
    assert custom.render(user_prompt("Hello")) == "Hello Answer:"


def test_bad_options_and_missing_models_are_clear_errors(tmp_path):
    from berds.llm.transformers_backend import TransformersLLM

    with pytest.raises(BerdsError, match=r"model path '.*/nope' does not exist"):
        TransformersLLM(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BerdsError, match=r"cannot load tokenizer .*empty.* — check that .* holds a complete"):
        TransformersLLM(str(tmp_path / "empty")).load()
    with pytest.raises(BerdsError, match="batch_size"):
        TransformersLLM(str(tmp_path / "empty"), batch_size=0)
    with pytest.raises(BerdsError, match="unknown dtype"):
        TransformersLLM(str(tmp_path / "empty"), dtype="int3")


def test_missing_peft_names_the_extra(tiny_mistral, tiny_lora, monkeypatch):
    from berds.llm.transformers_backend import TransformersLLM

    monkeypatch.setitem(sys.modules, "peft", None)  # what an environment without peft looks like to import
    with pytest.raises(MissingExtraError, match=r"'peft' is not installed \(needed for the LoRA adapter .*"
                                                r"pip install 'berds\[llm\]'"):
        TransformersLLM(str(tiny_mistral), adapter=str(tiny_lora), device="cpu").load()


def test_hub_name_offline_fails_fast_with_the_fix():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": os.path.join(os.environ.get("TMPDIR", "/tmp"), "berds-no-hf")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from berds.cli import main; main()", "llm", "generate", "-m", "berds-test/no-such-model",
                           "hello"], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert "cannot load tokenizer berds-test/no-such-model" in done.stderr
    assert "HF_HUB_OFFLINE is set" in done.stderr and "hf download berds-test/no-such-model" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def test_lora_adapter_changes_outputs_and_equals_its_merged_checkpoint(tiny_llm, tiny_mistral, tiny_lora, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from berds.llm.transformers_backend import TransformersLLM

    adapted = TransformersLLM(str(tiny_mistral), adapter=str(tiny_lora), device="cpu")
    assert adapted.id == f"{tiny_llm.id}+adapter={model_identity('x', str(tiny_lora)).split(':', 1)[1]}"
    with_adapter = adapted.generate(PROMPTS, max_new_tokens=6, top_logprobs=5)
    assert with_adapter == adapted.generate(PROMPTS, max_new_tokens=6, top_logprobs=5)  # deterministic
    base = tiny_llm.generate(PROMPTS, max_new_tokens=6, top_logprobs=5)
    assert [g.text for g in with_adapter] != [g.text for g in base]
    assert all(a.first_token_logprobs != b.first_token_logprobs for a, b in zip(with_adapter, base))

    # A merged checkpoint (adapter folded into the weights, saved as a plain model) is the same model.
    merged_dir = tmp_path / "merged"
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_mistral, dtype=torch.float32),
                                      str(tiny_lora))
    model.merge_and_unload().save_pretrained(merged_dir)
    shutil.copy(tiny_mistral / "tokenizer.json", merged_dir)
    shutil.copy(tiny_mistral / "tokenizer_config.json", merged_dir)
    shutil.copy(tiny_mistral / "chat_template.jinja", merged_dir)
    for other in (TransformersLLM(str(merged_dir), device="cpu"),
                  TransformersLLM(str(tiny_mistral), adapter=str(tiny_lora), merge_adapter=True, device="cpu")):
        outputs = other.generate(PROMPTS, max_new_tokens=6, top_logprobs=5)
        assert [g.text for g in outputs] == [g.text for g in with_adapter]
        for o, a in zip(outputs, with_adapter):
            assert o.first_token_logprobs.keys() == a.first_token_logprobs.keys()
            assert all(o.first_token_logprobs[t] == pytest.approx(lp, abs=1e-4)
                       for t, lp in a.first_token_logprobs.items())


# ------------------------------------------------------------------------------- judge, in process


def expected_p_yes(llm, pair, prompt="zero-shot"):
    """P(Yes) renormalised over Yes/No, from a hand-run forward pass over the judge's prompt."""
    from berds.judges.prompts import get_prompt

    # the tiny model is a Mistral: like the study, the judge leaves the system turn out
    log_probs = first_step_logprobs(llm, get_prompt(prompt).render(document=pair.passage, perspective=pair.perspective,
                                                                   drop_system=True))
    words = {i: llm.tokenizer.decode([i]).strip().lower() for i in range(len(log_probs))}
    yes = sum(math.exp(log_probs[i]) for i, w in words.items() if w == "yes")  # ▁Yes, Yes, ▁yes
    no = sum(math.exp(log_probs[i]) for i, w in words.items() if w == "no")
    return yes / (yes + no)


def test_llm_judge_on_transformers_returns_verdicts_with_p_yes(tiny_llm):
    vocab_size = tiny_llm.model.config.vocab_size
    judge = LLMJudge(tiny_llm, top_logprobs=vocab_size)
    verdicts = judge.judge(PAIRS)
    assert len(verdicts) == len(PAIRS)
    for pair, verdict in zip(PAIRS, verdicts):
        assert 0.0 < verdict.p_yes < 1.0
        assert verdict.p_yes == pytest.approx(expected_p_yes(tiny_llm, pair), abs=1e-4)
        assert verdict.label == parse_answer(verdict.raw, "berds-study")[0]
    thresholded = LLMJudge(tiny_llm, top_logprobs=vocab_size, threshold=0.5).judge(PAIRS)
    assert [v.label for v in thresholded] == [v.p_yes >= 0.5 for v in verdicts]
    assert judge.id == f"{tiny_llm.id}|parse=berds-study|top_logprobs={vocab_size}"  # a non-default: it keys the cache
    assert LLMJudge(tiny_llm).id == f"{tiny_llm.id}|parse=berds-study"  # the study's 16 tokens and 5 log-probs add nothing
    assert judge.prompt_version == "berds-study-chat-v1+no-system+answer-rule-2"


# --------------------------------------------------------------------------- the server process


@pytest.fixture(scope="module")
def served_tiny(tiny_mistral, tmp_path_factory):
    """``python -m berds.llm.server`` serving the tiny model on a free port; yields its base URL."""
    with served("transformers", str(tiny_mistral), options=["batch_size=4", "device=cpu"], max_batch_size=8,
                extra_args=["--served-model-name", "tiny-mistral", "--max-top-logprobs", "500"],
                log_dir=tmp_path_factory.mktemp("server")) as url:
        yield url


@pytest.mark.network
def test_server_lists_its_model_and_is_healthy(served_tiny):
    import requests

    models = requests.get(f"{served_tiny}/models", timeout=10).json()
    names = [m["id"] for m in models["data"]]
    assert names[0] == "tiny-mistral" and names[1].startswith("transformers:")
    root = served_tiny.rsplit("/v1", 1)[0]
    assert requests.get(f"{root}/health", timeout=10).json()["status"] == "ok"


@pytest.mark.network
def test_openai_backend_over_the_server_matches_in_process_transformers(served_tiny, tiny_llm):
    from berds.llm.openai_backend import OpenAILLM

    client = OpenAILLM("tiny-mistral", base_url=served_tiny, concurrency=4, timeout=60)
    assert isinstance(client, LLM)
    remote = client.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    local = tiny_llm.generate(PROMPTS, max_new_tokens=8, top_logprobs=5)
    assert [g.text for g in remote] == [g.text for g in local]
    for r, g in zip(remote, local):
        assert r.first_token_logprobs.keys() == g.first_token_logprobs.keys()
        for token, logprob in g.first_token_logprobs.items():
            assert r.first_token_logprobs[token] == pytest.approx(logprob, abs=1e-4)
    plain = client.generate(PROMPTS[:2], max_new_tokens=8)
    assert [g.text for g in plain] == [g.text for g in local[:2]]
    assert all(g.first_token_logprobs is None for g in plain)


@pytest.mark.network
def test_llm_judge_over_http_matches_the_in_process_judge(served_tiny, tiny_llm):
    from berds.judges.catalogue import load_judge

    vocab_size = tiny_llm.model.config.vocab_size
    remote = load_judge("openai:tiny-mistral", base_url=served_tiny, top_logprobs=vocab_size).judge(PAIRS)
    local = LLMJudge(tiny_llm, top_logprobs=vocab_size).judge(PAIRS)
    for r, g in zip(remote, local):
        assert 0.0 < r.p_yes < 1.0
        assert r.p_yes == pytest.approx(g.p_yes, abs=1e-4)
        assert (r.label, r.raw) == (g.label, g.raw)


@pytest.mark.network
def test_server_rejects_bad_requests_in_openai_error_format(served_tiny):
    import requests

    from berds.llm.openai_backend import OpenAILLM

    with pytest.raises(BerdsError, match=rf"POST {re.escape(served_tiny)}/chat/completions answered HTTP 404: "
                                         r"The model `gpt-4` does not exist"):
        OpenAILLM("gpt-4", base_url=served_tiny, max_retries=0).generate(PROMPTS[:1])
    url = f"{served_tiny}/chat/completions"
    base = {"model": "tiny-mistral", "messages": [{"role": "user", "content": "hi"}]}
    for body, param in [({**base, "stream": True}, "stream"), ({**base, "top_logprobs": 3}, "top_logprobs"),
                        ({**base, "max_tokens": 0}, "max_tokens"), ({**base, "messages": []}, "messages"),
                        ({**base, "logprobs": True, "top_logprobs": 501}, "top_logprobs")]:
        answer = requests.post(url, json=body, timeout=10)
        assert answer.status_code == 400, body
        assert answer.json()["error"]["param"] == param
    broken = requests.post(url, data=b"{not json", headers={"Content-Type": "application/json"}, timeout=10)
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]
    # logprobs=true without top_logprobs: the chosen token's logprob, and an empty top list (as OpenAI does).
    answer = requests.post(url, json={**base, "logprobs": True, "max_tokens": 2}, timeout=10).json()
    first = answer["choices"][0]["logprobs"]["content"][0]
    assert first["top_logprobs"] == [] and first["logprob"] <= 0


@pytest.mark.network
def test_in_process_server_batches_concurrent_requests_and_checks_the_key(tiny_llm, monkeypatch):
    from berds.llm.openai_backend import OpenAILLM
    from berds.llm.server import ChatServer

    with ChatServer(tiny_llm, port=0, served_model_name="tiny", api_key="s3cret", batch_wait=0.2) as server:
        monkeypatch.setenv("BERDS_TEST_KEY", "wrong")
        with pytest.raises(BerdsError, match=r"HTTP 401: .* check the key in \$BERDS_TEST_KEY"):
            OpenAILLM("tiny", base_url=server.url, api_key_env="BERDS_TEST_KEY").generate(PROMPTS[:1])
        monkeypatch.setenv("BERDS_TEST_KEY", "s3cret")
        client = OpenAILLM("tiny", base_url=server.url, api_key_env="BERDS_TEST_KEY", concurrency=8)
        batches_before = server.batcher.batches_run
        prompts = PROMPTS * 2
        outputs = client.generate(prompts, max_new_tokens=4)
        assert [g.text for g in outputs] == [g.text for g in tiny_llm.generate(prompts, max_new_tokens=4)]
        assert server.batcher.batches_run - batches_before < len(prompts)  # requests shared batches


# ------------------------------------------------------------------ retries against scripted servers


def completion(text, top=None):
    logprobs = None
    if top:
        logprobs = {"content": [{"token": max(top, key=top.get), "logprob": max(top.values()),
                                 "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()]}]}
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                         "finish_reason": "stop"}]}


@pytest.mark.network
def test_retries_429_then_500_then_succeeds_honouring_retry_after():
    from berds.llm.openai_backend import OpenAILLM

    script = {1: (429, {"Retry-After": "1"}, {"error": {"message": "rate limited"}}),
              2: (500, {}, {"error": {"message": "boom"}})}

    def respond(body, n):
        return script.get(n, (200, {}, completion(" Yes", {"Yes": -0.2, "No": -1.8})))

    with ScriptedServer(respond) as server:
        client = OpenAILLM("m", base_url=server.url, backoff_base=0.01, backoff_max=0.05)
        [generation] = client.generate([user_prompt("q")], top_logprobs=2)
    assert generation == Generation("Yes", {"Yes": -0.2, "No": -1.8})
    times = [t for t, _, _ in server.requests]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.95  # Retry-After: 1 was honoured
    assert times[2] - times[1] < 0.5  # then a tiny exponential backoff
    body = server.requests[0][2]
    assert body["logprobs"] is True and body["top_logprobs"] == 2 and body["temperature"] == 0.0
    assert body["max_tokens"] == 16 and body["messages"] == [{"role": "user", "content": "q"}]


@pytest.mark.network
def test_gives_up_after_max_retries_naming_url_and_status():
    from berds.llm.openai_backend import OpenAILLM

    with ScriptedServer(lambda body, n: (503, {}, {"error": {"message": "overloaded"}})) as server:
        client = OpenAILLM("m", base_url=server.url, max_retries=2, backoff_base=0.001)
        with pytest.raises(BerdsError, match=rf"POST {re.escape(server.url)}/chat/completions failed after 3 "
                                             r"attempts; last answer: HTTP 503: overloaded"):
            client.generate([user_prompt("q")])
    assert len(server.requests) == 3


@pytest.mark.network
def test_client_errors_are_not_retried_and_connection_errors_are():
    from berds.llm.openai_backend import OpenAILLM

    with ScriptedServer(lambda body, n: (401, {}, {"error": {"message": "bad key"}})) as server:
        with pytest.raises(BerdsError, match=r"HTTP 401: bad key — no key was sent to this host: pass -o api_key_env"):
            OpenAILLM("m", base_url=server.url, backoff_base=0.001).generate([user_prompt("q")])
    assert len(server.requests) == 1

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{closed_port}/v1"
    with pytest.raises(BerdsError, match=rf"POST {re.escape(url)}/chat/completions failed after 2 attempts; "
                                         r"last answer: ConnectionError"):
        OpenAILLM("m", base_url=url, max_retries=1, backoff_base=0.001, timeout=5).generate([user_prompt("q")])


@pytest.mark.network
def test_one_failed_request_stops_the_others_retrying():
    from berds.llm.openai_backend import OpenAILLM

    def respond(body, n):
        if body["messages"][-1]["content"] == "bad":
            time.sleep(0.2)  # let the others start retrying first
            return 403, {}, {"error": {"message": "not allowed"}}
        return 503, {}, {"error": {"message": "busy"}}

    prompts = [user_prompt("bad")] + [user_prompt(str(i)) for i in range(3)]
    with ScriptedServer(respond) as server:
        client = OpenAILLM("m", base_url=server.url, concurrency=4, max_retries=1000, backoff_base=0.05,
                           backoff_max=0.05)
        started = time.monotonic()
        with pytest.raises(BerdsError, match="HTTP 403: not allowed"):
            client.generate(prompts)
        assert time.monotonic() - started < 5
        time.sleep(0.3)
        settled = len(server.requests)
        time.sleep(0.3)
    assert len(server.requests) == settled < 200  # nobody kept retrying after the failure


@pytest.mark.network
def test_max_tokens_field_for_newer_openai_models():
    from berds.llm.openai_backend import OpenAILLM

    with ScriptedServer(lambda body, n: (200, {}, completion("ok"))) as server:
        OpenAILLM("m", base_url=server.url, max_tokens_field="max_completion_tokens").generate(
            [user_prompt("q")], max_new_tokens=7)
    body = server.requests[0][2]
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body


@pytest.mark.network
def test_rejected_logprobs_degrade_to_text_only_with_one_warning():
    from berds.llm.openai_backend import OpenAILLM

    def respond(body, n):
        if "logprobs" in body:
            return 400, {}, {"error": {"message": "logprobs are not supported for this model"}}
        return 200, {}, completion("No")

    with ScriptedServer(respond) as server:
        client = OpenAILLM("m", base_url=server.url, concurrency=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            generations = client.generate([user_prompt("a"), user_prompt("b"), user_prompt("c")], top_logprobs=5)
    assert generations == [Generation("No", None)] * 3
    assert [("logprobs" in body) for _, _, body in server.requests] == [True, False, False, False]
    assert len([w for w in caught if "rejected logprobs" in str(w.message)]) == 1
    assert client.logprobs_supported is False


@pytest.mark.network
def test_concurrent_results_keep_prompt_order_and_send_the_key(monkeypatch):
    from berds.llm.openai_backend import OpenAILLM

    def respond(body, n):
        text = body["messages"][-1]["content"]
        time.sleep(0.03 * (int(text) % 3))  # later prompts often finish first
        return 200, {}, completion(f"echo {text}")

    monkeypatch.setenv("BERDS_TEST_KEY", "k-123")
    with ScriptedServer(respond) as server:
        client = OpenAILLM("m", base_url=server.url, concurrency=6, api_key_env="BERDS_TEST_KEY")
        generations = client.generate([user_prompt(str(i)) for i in range(12)])
    assert [g.text for g in generations] == [f"echo {i}" for i in range(12)]
    assert {headers.get("Authorization") for _, headers, _ in server.requests} == {"Bearer k-123"}


def test_openai_backend_options_are_checked_without_network(monkeypatch):
    from berds.llm.openai_backend import OpenAILLM, parse_retry_after

    monkeypatch.delenv("BERDS_TEST_NO_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(BerdsError, match="no API key for https://api.example.com/v1: the environment "
                                         "variable BERDS_TEST_NO_KEY"):
        OpenAILLM("gpt-4", base_url="https://api.example.com/v1", api_key_env="BERDS_TEST_NO_KEY")
    with pytest.raises(BerdsError, match="no API key for https://api.openai.com/v1: set the environment "
                                         "variable OPENAI_API_KEY"):
        OpenAILLM("gpt-4")
    with pytest.raises(BerdsError, match="not an http"):
        OpenAILLM("m", base_url="localhost:8000")
    local = OpenAILLM("m", base_url="http://localhost:8000/v1/")
    assert local.id == "openai:m@localhost:8000/v1" and local.url == "http://localhost:8000/v1/chat/completions"
    assert OpenAILLM("m", base_url="http://localhost:8000/v1", id="my-judge").id == "my-judge"

    assert parse_retry_after("2") == 2.0 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after(formatdate(time.time() + 30, usegmt=True)) == pytest.approx(30, abs=2)
    client = OpenAILLM("m", base_url="http://127.0.0.1:1/v1", backoff_base=1.0, backoff_max=6.0)
    delays = [client.backoff_delay(3) for _ in range(200)]
    assert 3.0 <= min(delays) and max(delays) <= 6.0  # capped at backoff_max, jitter in the upper half
    assert 0.5 <= client.backoff_delay(0) <= 1.0
    assert client.backoff_delay(5, retry_after=0.25) == 0.25
    capped = OpenAILLM("m", base_url="http://127.0.0.1:1/v1", max_retry_after=10)
    assert capped.backoff_delay(0, retry_after=3600) == 10  # a huge Retry-After does not stall a run for hours
    with pytest.raises(BerdsError, match="max_tokens_field"):
        OpenAILLM("m", base_url="http://127.0.0.1:1/v1", max_tokens_field="tokens")


# ------------------------------------------------------------------------------------------- CLI


def test_cli_llm_generate_prints_the_completion(tiny_mistral, tiny_llm):
    from typer.testing import CliRunner

    from berds.cli import app

    expected = tiny_llm.generate(PROMPTS[:1], max_new_tokens=4)[0].text
    result = CliRunner().invoke(app, ["llm", "generate", "-m", str(tiny_mistral), "Hello world",
                                      "--max-new-tokens", "4", "-o", "device=cpu"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert tiny_llm.id in result.output and expected in result.output


def test_a_retry_after_that_is_not_a_wait_leaves_the_backoff_in_place():
    from berds.llm.openai_backend import OpenAILLM, parse_retry_after

    llm = OpenAILLM("m", base_url="http://127.0.0.1:9/v1", backoff_base=1.0, backoff_max=8.0, max_retry_after=30)
    for odd in ("nan", "-5", "-inf"):
        assert parse_retry_after(odd) is None, odd  # (they were 0: a hostile server got retries at once)
        assert 0.5 <= llm.backoff_delay(0, parse_retry_after(odd)) <= 1.0
    assert llm.backoff_delay(0, parse_retry_after("inf")) == 30  # a wait beyond any cap is capped
    assert parse_retry_after("0") == 0.0 and parse_retry_after("1.5") == 1.5


def test_a_server_key_that_http_cannot_carry_reliably_is_refused_at_start(tiny_llm):
    """A non-ASCII key reached the server decoded as latin-1 but was compared as UTF-8, so no client could match it."""
    from berds.llm.server import ChatServer

    for key in ("clé-secrète", " padded ", "tab\tkey"):
        with pytest.raises(BerdsError, match="API key must be printable ASCII"):
            ChatServer(tiny_llm, port=0, api_key=key)
