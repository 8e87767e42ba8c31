"""vLLM ids name the precision: with dtype=auto vLLM runs a float16/float32 checkpoint in float16, so an auto run
and an explicit bfloat16 run of the same model must not share cached verdicts (both ids named nothing)."""

from __future__ import annotations

from berds.judges.catalogue import JUDGES
from berds.llm.vllm_backend import vllm_identity


def test_auto_precision_is_not_bfloat16s_id():
    assert vllm_identity("org/m") != vllm_identity("org/m", dtype="bfloat16") == "vllm:org/m"
    assert vllm_identity("org/m", dtype="float16") not in (vllm_identity("org/m"), vllm_identity("org/m", dtype="bfloat16"))


def test_the_study_judge_on_vllm_keeps_its_id():
    options = JUDGES.spec("mistral-berds-vllm").options
    assert vllm_identity(options["model"], adapter=options["adapter"], dtype=options["dtype"]) == (
        "vllm:mistralai/Mistral-7B-Instruct-v0.2+adapter=timchen0618/Mistral_BERDS_evaluator")
