"""LLM backends behind one interface (``berds.llm.base.LLM``).

=============  ======================================================  =========================
backend        what                                                    extra
=============  ======================================================  =========================
transformers   local HF model (+ LoRA adapter via peft, or merged)     ``berds[llm]``
vllm           vLLM offline batch inference, prefix caching (GPU)      ``berds[vllm]``
openai         any OpenAI-compatible HTTP endpoint                     core (requests)
=============  ======================================================  =========================

``load_llm(backend, model, **options)`` builds one; model is a hub name or a local path.
"""

from __future__ import annotations

from typing import Any

from berds.llm.base import LLM, Generation, Prompt, user_prompt
from berds.registry import Catalogue, Spec

LLMS: Catalogue[LLM] = Catalogue("LLM backend", entry_point_group="berds.llms")
LLMS.register(Spec("transformers", "berds.llm.transformers_backend:TransformersLLM",
                   "Hugging Face transformers generate() (+ peft LoRA adapters); CPU or GPU."))
LLMS.register(Spec("vllm", "berds.llm.vllm_backend:VLLMLLM",
                   "vLLM offline batch inference with prefix caching (GPU machines)."))
LLMS.register(Spec("openai", "berds.llm.openai_backend:OpenAILLM",
                   "OpenAI-compatible chat completions over HTTP (vllm serve, llama.cpp server, hosted)."))


def load_llm(backend: str, model: str, **options: Any) -> LLM:
    """Build an LLM backend by name for ``model`` (hub name or local path)."""
    return LLMS.create(backend, model=model, **options)


__all__ = ["LLM", "Generation", "Prompt", "user_prompt", "LLMS", "load_llm"]
