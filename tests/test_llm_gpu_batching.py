"""GPU batching of the transformers backend, tested on CPU through the same code path: the out-of-memory
halving (an injected ``torch.cuda.OutOfMemoryError``, which torch builds without a GPU), the memory-based
batch-size estimate, and that nothing changes on CPU."""

from __future__ import annotations

import pytest

from llm_fixtures import tiny_mistral  # noqa: F401

pytest.importorskip("transformers")

QUESTIONS = ["Should cities build bike lanes?", "Do vaccines work?", "Are school uniforms good?",
             "Should taxes be raised?", "Is this safer?", "Hello world", "Bike lanes make streets safer and help shops?",
             "Do uniforms help students or not?", "Yes or No?", "Taxes should be lowered, is that it?"]


def _prompts():
    return [[{"role": "user", "content": q}] for q in QUESTIONS]


def test_an_out_of_memory_batch_is_halved_and_no_prompt_is_lost_or_answered_twice(tiny_mistral):
    import torch

    from berds.llm.transformers_backend import TransformersLLM

    plain = TransformersLLM(str(tiny_mistral), device="cpu", batch_size=8).generate(_prompts(), top_logprobs=5)
    llm = TransformersLLM(str(tiny_mistral), device="cpu", batch_size=8).load()
    real = llm._generate_batch
    answered: list[list[int]] = []
    refused: list[int] = []

    def tight_memory(prompts_ids, *args):
        if len(prompts_ids) > 3:  # a GPU with room for 3
            refused.append(len(prompts_ids))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        answered.append([tuple(p) for p in prompts_ids])
        return real(prompts_ids, *args)

    llm._generate_batch = tight_memory
    split = llm.generate(_prompts(), top_logprobs=5)
    assert refused == [8, 4]  # 8 -> 4 -> 2, and 2 is then remembered
    assert llm.batch_ceiling == 2
    assert [len(b) for b in answered] == [2] * 5
    flat = [ids for batch in answered for ids in batch]
    assert len(flat) == len(set(flat)) == len(QUESTIONS)  # each prompt run once
    assert [g.text for g in split] == [g.text for g in plain]  # in input order, same answers
    for a, b in zip(split, plain):
        assert a.first_token_logprobs.keys() == b.first_token_logprobs.keys()
        assert all(abs(a.first_token_logprobs[t] - b.first_token_logprobs[t]) < 1e-4 for t in a.first_token_logprobs)
    # the size that worked is kept for the next call: no batch above it is tried again
    refused.clear()
    llm.generate(_prompts()[:5])
    assert refused == []


def test_the_batches_answered_before_an_out_of_memory_error_are_kept(tiny_mistral):
    import torch

    from berds.llm.transformers_backend import run_in_batches

    class State:
        batch_ceiling = None

    calls: list[list[int]] = []
    failures = iter([False, True, False, False, False, False])  # the second batch runs out of memory once

    def run(chunk):
        if next(failures):
            raise torch.cuda.OutOfMemoryError("out of memory")
        calls.append(chunk)
        return [f"answer {i}" for i in chunk]

    state = State()
    done = run_in_batches(list(range(10)), lambda rest: state.batch_ceiling or 4, run, state)
    assert calls[0] == [0, 1, 2, 3] and calls[1] == [4, 5]  # the first batch is never run again
    assert sorted(done) == [(i, f"answer {i}") for i in range(10)]
    assert state.batch_ceiling == 2


def test_one_prompt_that_does_not_fit_is_one_clear_error():
    import torch

    from berds.errors import BerdsError
    from berds.llm.transformers_backend import run_in_batches

    class State:
        batch_ceiling = None

    def run(chunk):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

    with pytest.raises(BerdsError, match="one prompt alone does not fit in GPU memory"):
        run_in_batches([0, 1, 2], lambda rest: 2, run, State())


def test_other_errors_are_not_taken_for_out_of_memory():
    from berds.llm.transformers_backend import run_in_batches

    class State:
        batch_ceiling = None

    def run(chunk):
        raise RuntimeError("CUDA error: device-side assert triggered")

    with pytest.raises(RuntimeError, match="device-side assert"):
        run_in_batches([0, 1], lambda rest: 2, run, State())


def test_auto_batch_size_follows_free_memory_prompt_length_and_model_shape():
    from transformers import MistralConfig

    from berds.llm.transformers_backend import auto_batch_size

    # Mistral-7B-Instruct-v0.2's shape: 32 layers, 8 KV heads of 128, hidden 4096, MLP 14336, vocab 32000
    mistral = MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                            num_key_value_heads=8, vocab_size=32000)
    kv = 2 * 32 * 8 * 128 * 2  # bytes of KV cache per token in bf16
    act = (4 * 4096 + 3 * 14336) * 2
    per_seq = 227 * (kv + act) + 2 * 16 * 32000 * 4
    gib = 1 << 30
    assert auto_batch_size(10 * gib, mistral, tokens=227, logits_steps=16, cap=10**6) == int(10 * gib * 0.8 // per_seq)
    # more memory or shorter prompts: larger batches; never above the cap, never below 1
    assert auto_batch_size(20 * gib, mistral, tokens=227, logits_steps=16, cap=10**6) > \
        auto_batch_size(10 * gib, mistral, tokens=227, logits_steps=16, cap=10**6)
    assert auto_batch_size(10 * gib, mistral, tokens=100, logits_steps=16, cap=10**6) > \
        auto_batch_size(10 * gib, mistral, tokens=227, logits_steps=16, cap=10**6)
    assert auto_batch_size(60 * gib, mistral, tokens=227, logits_steps=16) == 128
    assert auto_batch_size(1, mistral, tokens=227, logits_steps=16) == 1


def test_auto_batch_on_cpu_is_the_old_fixed_eight(tiny_mistral):
    from berds.errors import BerdsError
    from berds.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(str(tiny_mistral), device="cpu").load()
    assert llm.batch_size == "auto" and llm._batch_size_for(500, 16) == 8
    assert TransformersLLM(str(tiny_mistral), device="cpu", batch_size=3).load()._batch_size_for(500, 16) == 3
    # batch size never enters the id (it does not change answers beyond float noise)
    assert llm.id == TransformersLLM(str(tiny_mistral), device="cpu", batch_size=3).id
    for bad in (0, "many", True):
        with pytest.raises(BerdsError, match="batch_size must be a positive integer or auto"):
            TransformersLLM(str(tiny_mistral), batch_size=bad)


def test_mistral_berds_names_how_its_weights_are_loaded_and_each_way_has_its_own_id():
    from berds.errors import BerdsError
    from berds.judges.catalogue import load_judge
    from berds.judges.validation import judge_warning

    merged, adapter, full = (load_judge("mistral-berds", weights=w) for w in ("merged", "adapter", "full"))
    assert load_judge("mistral-berds").id == merged.id  # merged at load is the default
    assert merged.llm.merge_adapter and merged.llm.adapter == "timchen0618/Mistral_BERDS_evaluator"
    assert not adapter.llm.merge_adapter
    assert full.llm.adapter is None and full.llm.model_name == "timchen0618/Mistral_BERDS_evaluator_full"
    assert load_judge("mistral-berds-full").id == full.id
    # merged bf16 weights round differently from the unmerged sum: never one cache key for both
    assert len({merged.id, adapter.id, full.id}) == 3
    # the unmerged id is the one berds always used, so earlier verdicts are found again
    assert adapter.id == ("transformers:mistralai/Mistral-7B-Instruct-v0.2+adapter=timchen0618/Mistral_BERDS_evaluator"
                          "|parse=berds-study")
    assert all(judge_warning(j.id) is None for j in (merged, adapter, full))  # all three are the study's evaluator
    assert merged.prompt_version == adapter.prompt_version == full.prompt_version
    with pytest.raises(BerdsError, match="unknown weights 'lora'"):
        load_judge("mistral-berds", weights="lora")
    with pytest.raises(BerdsError, match="weights=full .* takes no adapter"):
        load_judge("mistral-berds", weights="full", adapter="/models/lora")


def test_the_shared_prefix_cache_gives_the_plain_paths_verdicts(tiny_mistral):
    """With shared_prefix the tokens every prompt starts with (the one-shot prompt's example turn) are run once
    and their key-value cache copied into each batch, pads placed after it: same texts, same P(Yes). The study's
    zero-shot prompt shares next to nothing at its start (the document comes first, the instruction after it),
    so there the plain path runs."""
    from berds.judges.llm_judge import LLMJudge
    from berds.llm.transformers_backend import TransformersLLM
    from berds.types import JudgePair

    pairs = [JudgePair(persp, doc) for persp in ("bike lanes are safer", "taxes should be raised", "vaccines work")
             for doc in ("Cities that built bike lanes saw fewer crashes.", "the school uniforms help students",
                         "Raising taxes would fund schools and roads, it is said, and shops see more sales.")]
    plain = TransformersLLM(str(tiny_mistral), device="cpu", batch_size=4)
    shared = TransformersLLM(str(tiny_mistral), device="cpu", batch_size=4, shared_prefix=True)
    calls: list[int] = []
    shared.load()
    real = shared._shared_prefix_cache

    def counting(prompts_ids):
        found = real(prompts_ids)
        calls.append(len(found[0]) if found else 0)
        return found

    shared._shared_prefix_cache = counting
    LLMJudge(shared).judge(pairs)
    assert calls == [0]  # zero-shot: "<s>[INST] Document:" is all the prompts share
    calls.clear()
    a = LLMJudge(plain, prompt="one-shot").judge(pairs)
    b = LLMJudge(shared, prompt="one-shot").judge(pairs)
    assert len(calls) == 1 and calls[0] > 50  # the example turn: computed once for the call's three batches
    assert [v.raw for v in a] == [v.raw for v in b] and [v.label for v in a] == [v.label for v in b]
    assert all((x.p_yes is None) == (y.p_yes is None) for x, y in zip(a, b))
    assert all(abs(x.p_yes - y.p_yes) < 1e-5 for x, y in zip(a, b) if x.p_yes is not None)
    # first-token log-probabilities of the whole top 5 agree too
    ga = plain.generate(LLMJudge(plain, prompt="one-shot").prompts_for(pairs), top_logprobs=5)
    gb = shared.generate(LLMJudge(shared, prompt="one-shot").prompts_for(pairs), top_logprobs=5)
    for x, y in zip(ga, gb):
        assert x.first_token_logprobs.keys() == y.first_token_logprobs.keys()
        assert all(abs(x.first_token_logprobs[t] - y.first_token_logprobs[t]) < 1e-4 for t in x.first_token_logprobs)
    assert plain.id == shared.id


def test_auto_batch_on_a_cuda_device_reads_free_memory_and_halves_what_does_not_fit(tiny_mistral, monkeypatch):
    """The branch only a GPU takes, run on CPU: the backend believes it is on ``cuda`` (its weights stay on the
    CPU, where the inputs follow them), torch's memory queries answer a 24 GiB card with 3 GiB free and 1 GiB
    cached by torch but unused, and batches above 3 prompts run out of memory. The sizes asked for are the
    estimate from that memory (torch's real function names: monkeypatch refuses names torch lacks), the
    halving takes over, and the answers are the plain path's."""
    import torch

    from berds.llm.transformers_backend import TransformersLLM, auto_batch_size

    gib = 1 << 30
    asked: list = []

    def mem_get_info(device=None):
        asked.append(("mem_get_info", torch.device(device).type))
        return 3 * gib, 24 * gib

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 5 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 4 * gib)

    plain = TransformersLLM(str(tiny_mistral), device="cpu", batch_size=8).generate(_prompts(), top_logprobs=5)
    llm = TransformersLLM(str(tiny_mistral), device="cpu", max_batch_size=6).load()
    llm.device = "cuda"  # what load() sets on a GPU machine
    config = llm.model.config
    tokens = 40
    expected = auto_batch_size(4 * gib, config, tokens=tokens, logits_steps=16, dtype_bytes=4, cap=6)
    assert llm._batch_size_for(tokens, 16) == expected == 6  # tiny model: the cap binds
    assert asked == [("mem_get_info", "cuda")]
    # a bigger model's shape on the same memory: the estimate, not the cap, decides
    monkeypatch.setattr(config, "hidden_size", 4096)
    monkeypatch.setattr(config, "intermediate_size", 14336)
    monkeypatch.setattr(config, "num_hidden_layers", 32)
    monkeypatch.setattr(config, "head_dim", 128)
    monkeypatch.setattr(config, "num_key_value_heads", 8)
    big = auto_batch_size(4 * gib, config, tokens=1500, logits_steps=16, dtype_bytes=4, cap=6)
    # 4 GiB: the 3 free plus the 1 torch caches unused (3 GiB alone would give 3)
    assert big == 4 and llm._batch_size_for(1500, 16) == 4
    monkeypatch.undo()  # (the tiny shape again; torch's own functions back for the rest of the test)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * gib, 24 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 5 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 4 * gib)

    real = llm._generate_batch
    sizes: list[int] = []

    def three_fit(prompts_ids, *args):
        sizes.append(len(prompts_ids))
        if len(prompts_ids) > 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real(prompts_ids, *args)

    llm._generate_batch = three_fit
    answers = llm.generate(_prompts(), top_logprobs=5)
    assert sizes[0] == 6 and sizes[1] == 3 and all(s <= 3 for s in sizes[1:])  # 6 -> 3, then 3 at most
    assert sum(s for s in sizes if s <= 3) == len(QUESTIONS)
    assert llm.batch_ceiling == 3
    assert [g.text for g in answers] == [g.text for g in plain]
    for a, b in zip(answers, plain):
        assert all(abs(a.first_token_logprobs[t] - b.first_token_logprobs[t]) < 1e-4 for t in a.first_token_logprobs)
