"""LLM backends behind one interface (``berds.llm.base.LLM``).

=============  ======================================================  =========================
backend        what                                                    extra
=============  ======================================================  =========================
transformers   local HF model (+ LoRA adapter via peft, or merged)     ``berds[llm]``
vllm           vLLM offline batch inference, prefix caching (GPU)      ``berds[vllm]``
openai         any OpenAI-compatible HTTP endpoint                     core (requests)
=============  ======================================================  =========================

``load_llm(backend, model, **options)`` builds one; model is a hub name or a local path.
``load_llm_by_name("BACKEND:MODEL")`` is the one place where a name becomes an LLM (judges, expansion, stance).
"""

from __future__ import annotations

from typing import Any

from berds.errors import BerdsError
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


def load_llm_by_name(name: str, **options: Any) -> Any:
    """``BACKEND:MODEL`` (``openai:gpt-4``, ``transformers:/models/qwen``, ``vllm:...``) -> an LLM backend."""
    backend, sep, model = name.partition(":")
    if not sep or not model:
        raise BerdsError(f"LLM {name!r} must look like BACKEND:MODEL, e.g. openai:gpt-4 or transformers:/path/to/model "
                         f"(backends: {', '.join(LLMS.names())})")
    return load_llm(backend, model, **options)


__all__ = ["LLM", "Generation", "Prompt", "user_prompt", "LLMS", "load_llm", "load_llm_by_name"]
