"""The paths of benchmarks/gpu_check.py's speed sections (benchmarks/gpu_speed.py) that its CPU dry run does not
take, taken here on CPU: the 7B shape built where it runs (on the meta device: every tensor lands there, none
in CPU memory), the GPU's precision (bfloat16 weights with peft's float32 adapter, merged, then trained), the
time limit that keeps a one-shot GPU lease from ending with nothing, and the results file written as each
section ends. A GPU session gets one run of a few minutes: what can break there should break here first."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("peft")


@pytest.fixture(scope="module")
def speed():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
        import gpu_speed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return gpu_speed, gpu_check


def test_the_7b_judge_shape_is_built_on_its_device_never_in_cpu_memory(speed):
    """On a GPU the 14.5 GB of bf16 weights must be created there (a CPU copy first: 29 GB of float32 random
    init and minutes of a 10-minute lease). Built on the meta device through the same function, every
    parameter and buffer is on meta: any tensor made outside the device context would sit on the CPU."""
    import torch
    from torch.overrides import TorchFunctionMode

    gpu_speed, _ = speed
    big_on_cpu: list[tuple[str, tuple]] = []

    class WatchCpuTensors(TorchFunctionMode):  # every torch call's result: a big CPU tensor is a copy in RAM
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.numel() > 1_000_000:
                big_on_cpu.append((getattr(func, "__name__", str(func)), tuple(out.shape)))
            return out

    with WatchCpuTensors():
        torch.empty(2000, 1000)  # (the watch sees one)
        assert big_on_cpu == [("empty", (2000, 1000))]
        big_on_cpu.clear()
        model = gpu_speed.build_judge_model("meta", full=True)
    assert big_on_cpu == []
    params = list(model.parameters())
    assert sum(p.numel() for p in params) == 7_241_732_096  # Mistral-7B-Instruct-v0.2's count
    assert {p.device.type for p in params} == {b.device.type for b in model.buffers()} == {"meta"}
    assert {p.dtype for p in params} == {torch.bfloat16}
    assert not model.training and model.config.num_hidden_layers == 32 and model.config.num_key_value_heads == 8


@pytest.mark.slow
def test_the_judge_and_train_rows_in_bfloat16_with_a_float32_adapter(speed):
    """What only the GPU run did: bf16 base weights, the LoRA in float32 (peft's autocast), the adapter merged
    into bf16, then a fresh LoRA trained on the merged bf16 model — here on CPU, tiny shape."""
    import torch

    gpu_speed, gpu_check = speed
    pairs = gpu_check.demo_pairs()[:4]
    figures, model, tokenizer_folder = gpu_speed.judge_throughput("cpu", pairs, full=False, dtype="bfloat16")
    assert figures["dtype"] == "bfloat16"
    assert [r["path"] for r in figures["rows"]][-1] == "raw transformers generate (merged, batch 64)"
    assert all(r["pairs_per_s_16_new"] > 0 and not r.get("skipped") for r in figures["rows"])
    assert figures["shared_prefix_same_replies"].endswith("of 4")
    # merged: no adapter left, every weight still bf16 (the float32 LoRA folded in, not upcasting the base)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    trained = gpu_speed.train_speed("cpu", model, tokenizer_folder, pairs, steps=2)
    assert trained["steps"] == 2 and trained["losses_finite"] and trained["tokens"] > 0


def test_judge_rows_past_the_time_limit_are_listed_as_skipped_not_lost(speed):
    gpu_speed, gpu_check = speed
    pairs = gpu_check.demo_pairs()[:2]
    figures, model, _ = gpu_speed.judge_throughput("cpu", pairs, full=False, deadline=time.monotonic())
    assert len(figures["rows"]) == 8 and all(r.get("skipped") == "time limit" for r in figures["rows"])
    assert figures["shared_prefix_same_replies"] == "not run (time limit)"
    assert "skipped (time limit)" in figures["table"]
    assert model is not None  # (the train section can still use it)


def test_every_section_is_written_to_out_as_it_ends(speed, tmp_path, monkeypatch):
    """A run stopped from outside (a lease's time out) keeps the sections that ended; a section that raises
    (a CUDA error, say) is recorded as failed with its message, and the next one still runs."""
    _, gpu_check = speed
    out = tmp_path / "gpu_check.json"
    monkeypatch.setattr(gpu_check, "RESULTS", {})
    monkeypatch.setattr(gpu_check, "OUT", out)

    @gpu_check.section("a check that breaks")
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    @gpu_check.section("a check that passes")
    def fine():
        saved = json.loads(out.read_text())  # the broken one is on disk before the next section starts
        return {"ok": "illegal memory access" in saved["a check that breaks"]["error"]}

    broken()
    fine()
    saved = json.loads(out.read_text())
    assert saved["a check that breaks"]["ok"] is False and saved["a check that passes"]["ok"] is True
    assert not list(tmp_path.glob("*.partial"))
    monkeypatch.setattr(gpu_check, "DEADLINE", time.monotonic())
    fine()  # past the limit: recorded as skipped, not run
    assert json.loads(out.read_text())["a check that passes"] == {"ok": None, "skipped": "time limit"}
