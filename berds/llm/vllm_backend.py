"""LLM backend on vLLM offline batch inference (GPU machines), with prefix caching and LoRA adapters.

The study's judge asks one long instruction thousands of times with different passages; vLLM's prefix
cache reuses the shared instruction's attention state and its scheduler batches every prompt at once.

Prompts are rendered by the *same* code as the transformers backend (``berds.llm.shared.prompt_token_ids``,
including the fallback for chat templates that reject system messages) and handed to vLLM as token ids,
so both backends feed the model identical tokens (``LLM.chat`` would apply the template its own way and
re-add BOS). vLLM pins its own transformers version: install ``berds[vllm]`` in its own environment, or
run ``vllm serve`` and use the ``openai`` backend.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError
from berds.lazy import require
from berds.llm.base import ContinuationScore, Generation, Prompt
from berds.llm.shared import (
    check_generation_options,
    check_special_tokens_mode,
    generation_from_token_logprobs,
    looks_like_local_path,
    model_identity,
    normalise_prompts,
    prompt_token_ids,
    render_chat,
    score_token_rows,
)

# LoRA ranks vLLM compiles kernels for; an adapter's rank is rounded up to the next one.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


class VLLMLLM:
    """vLLM offline inference behind ``berds.llm.base.LLM`` (needs ``pip install 'berds[vllm]'`` and a GPU).

    * ``adapter``: a LoRA adapter (hub name or local folder) served through ``LoRARequest``;
      ``max_lora_rank`` defaults to the adapter's own rank (rounded up to one vLLM supports).
    * ``tensor_parallel_size``, ``gpu_memory_utilization``, ``enable_prefix_caching``, ``max_model_len``,
      ``dtype``: passed to ``vllm.LLM``; ``engine_options`` passes anything else.

    The engine starts on the first ``generate()`` (or ``load()``), so a fully cached evaluation never
    starts it. With ``top_logprobs=N`` each ``Generation`` carries vLLM's N most likely first tokens.
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        revision: str | None = None,
        adapter_revision: str | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        enable_prefix_caching: bool = True,
        max_model_len: int | None = None,
        dtype: str = "auto",
        max_lora_rank: int | None = None,
        trust_remote_code: bool = False,
        chat_template: str | None = None,
        seed: int = 0,
        show_progress: bool = True,
        engine_options: Mapping[str, Any] | None = None,
        special_tokens: str = "split",
    ):
        require("vllm", extra="vllm", purpose="the vLLM LLM backend (GPU machines)")
        if not 0.0 < float(gpu_memory_utilization) <= 1.0:
            raise BerdsError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
        self.model_name = str(model)
        self.adapter = str(adapter) if adapter else None
        self.revision = revision
        self.adapter_revision = adapter_revision
        self.engine_args = vllm_engine_args(
            self.model_name, revision=revision, tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=enable_prefix_caching,
            max_model_len=max_model_len, dtype=dtype, trust_remote_code=trust_remote_code, seed=seed,
            engine_options=engine_options,
        )
        self.max_lora_rank = max_lora_rank
        self.chat_template = chat_template
        self.show_progress = show_progress
        self.special_tokens = check_special_tokens_mode(special_tokens)  # (as in TransformersLLM)
        # precision, a chat template of one's own and extra engine arguments (quantization=...) change answers
        self.id = vllm_identity(self.model_name, revision=revision, adapter=self.adapter,
                                adapter_revision=adapter_revision, dtype=dtype, chat_template=chat_template,
                                engine_options=engine_options, special_tokens=special_tokens)
        self._engine: Any = None
        self._lora_request: Any = None
        self._tokenizer: Any = None

    def __repr__(self) -> str:
        return f"VLLMLLM({self.id!r}, started={self._engine is not None})"

    def load(self) -> "VLLMLLM":
        """Start the vLLM engine (idempotent)."""
        if self._engine is not None:
            return self
        vllm = require("vllm", extra="vllm", purpose="the vLLM LLM backend")
        args = dict(self.engine_args)
        if self.adapter:
            adapter_path = resolve_adapter_folder(self.adapter, self.adapter_revision)
            rank = self.max_lora_rank or lora_rank(adapter_path)
            args.update(enable_lora=True, max_lora_rank=vllm_lora_rank(rank), max_loras=1)
            lora_module = require("vllm.lora.request", extra="vllm", purpose="LoRA adapters in vLLM")
            self._lora_request = lora_module.LoRARequest("berds-adapter", 1, str(adapter_path))
        try:
            self._engine = vllm.LLM(**args)
        except (OSError, ValueError, RuntimeError) as exc:
            raise BerdsError(f"vLLM could not start {self.model_name}: {str(exc).strip().splitlines()[0]} — "
                             "check the model name/path, the GPU, and gpu_memory_utilization") from exc
        self._tokenizer = self._engine.get_tokenizer()
        return self

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        max_new_tokens: int = 16,
        temperature: float = 0.0,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """One completion per prompt, in input order; vLLM schedules the whole list as one batch."""
        messages = normalise_prompts(prompts)
        check_generation_options(max_new_tokens, temperature, top_logprobs)
        if not messages:
            return []
        self.load()
        vllm = require("vllm", extra="vllm")
        token_prompts = [{"prompt_token_ids": prompt_token_ids(self._tokenizer, m, chat_template=self.chat_template,
                                                               special_tokens=self.special_tokens)}
                         for m in messages]
        params = vllm.SamplingParams(**sampling_options(max_new_tokens, temperature, top_logprobs,
                                                        seed=self.engine_args.get("seed")))
        outputs = self._engine.generate(token_prompts, params, use_tqdm=self.show_progress,
                                        lora_request=self._lora_request)
        return [generation_from_vllm_completion(out.outputs[0], top_logprobs) for out in outputs]

    def render(self, prompt: Prompt) -> str:
        """The exact text the model sees for one chat prompt (starts the engine for its tokenizer)."""
        return render_chat(self.load()._tokenizer, normalise_prompts([prompt])[0], chat_template=self.chat_template)

    def score(self, prompts: Sequence[Prompt | str], continuations: Sequence[str]) -> list[ContinuationScore]:
        """Per-token log-probabilities of each continuation given its prompt (vLLM ``prompt_logprobs``).

        Inputs are built like the transformers backend's (``score_token_rows``: same tokens); the whole list
        is one vLLM batch. A prompt longer than ``max_model_len`` is vLLM's error, not cut."""
        if isinstance(prompts, (list, tuple)) and isinstance(continuations, (list, tuple)) and not prompts + continuations:
            return []
        self.load()
        vllm = require("vllm", extra="vllm")
        rows, _ = score_token_rows(self._tokenizer, prompts, continuations, chat_template=self.chat_template,
                                   special_tokens=self.special_tokens)
        params = vllm.SamplingParams(max_tokens=1, temperature=0.0, n=1, prompt_logprobs=0)
        outputs = self._engine.generate([{"prompt_token_ids": p + c} for p, c in rows], params,
                                        use_tqdm=self.show_progress, lora_request=self._lora_request)
        return [continuation_from_prompt_logprobs(out.prompt_logprobs, len(p), c) for out, (p, c) in zip(outputs, rows)]


# ----------------------------------------------------------------- pure helpers (tested on CPU)


def vllm_identity(model: str, *, dtype: str = "auto", engine_options: Mapping[str, Any] | None = None,
                  **identity: Any) -> str:
    """The ``id`` of a ``VLLMLLM``. ``dtype="auto"`` is named too: vLLM runs a float16 or float32 checkpoint in
    float16 (a bfloat16 one in bfloat16), so auto and an explicit bfloat16 (which adds nothing) may differ."""
    return model_identity("vllm", model, dtype=str(dtype), options=engine_options, **identity)


def vllm_engine_args(
    model: str,
    *,
    revision: str | None = None,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    enable_prefix_caching: bool = True,
    max_model_len: int | None = None,
    dtype: str = "auto",
    trust_remote_code: bool = False,
    seed: int = 0,
    engine_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``; ``None`` values are left to vLLM's defaults."""
    args: dict[str, Any] = {
        "model": model, "revision": revision, "tensor_parallel_size": int(tensor_parallel_size),
        "gpu_memory_utilization": float(gpu_memory_utilization),
        "enable_prefix_caching": bool(enable_prefix_caching), "max_model_len": max_model_len,
        "dtype": dtype, "trust_remote_code": trust_remote_code, "seed": seed,
    }
    args.update(engine_options or {})
    return {k: v for k, v in args.items() if v is not None}


def sampling_options(max_new_tokens: int, temperature: float, top_logprobs: int,
                     seed: int | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams``: greedy at temperature 0, logprobs when asked."""
    options: dict[str, Any] = {"max_tokens": max_new_tokens, "temperature": float(temperature), "n": 1}
    if temperature > 0 and seed is not None:
        options["seed"] = seed
    if top_logprobs > 0:
        options["logprobs"] = top_logprobs
    return options


def generation_from_vllm_completion(completion: Any, top_logprobs: int) -> Generation:
    """A ``Generation`` from a vLLM ``CompletionOutput``.

    ``completion.logprobs`` is a list (one entry per generated token) of ``{token_id: Logprob}`` where a
    ``Logprob`` has ``.logprob`` and ``.decoded_token``; it holds the top N plus the sampled token.
    """
    steps = getattr(completion, "logprobs", None)
    first = steps[0] if steps else None
    return generation_from_token_logprobs(completion.text.strip(), vllm_step_pairs(first), top_logprobs)


def continuation_from_prompt_logprobs(prompt_logprobs: Sequence[Mapping[int, Any] | None], start: int,
                                      continuation_ids: Sequence[int]) -> ContinuationScore:
    """A ``ContinuationScore`` from vLLM's ``RequestOutput.prompt_logprobs`` (one ``{token_id: Logprob}`` per
    prompt position, ``None`` first), for the tokens from ``start`` on; each position holds the prompt's own
    token (vLLM adds it to the top-0 list)."""
    tokens, values = [], []
    for offset, token_id in enumerate(continuation_ids):
        step = prompt_logprobs[start + offset] if start + offset < len(prompt_logprobs) else None
        entry = step.get(token_id) if step else None
        if entry is None:
            raise BerdsError(f"vLLM returned no log-probability for continuation token {offset} (id {token_id}) — "
                             "is prompt_logprobs supported by this vLLM version?")
        text = getattr(entry, "decoded_token", None)
        tokens.append(text if text is not None else f"<id {token_id}>")
        values.append(float(entry.logprob))
    return ContinuationScore(tuple(tokens), tuple(values))


def vllm_step_pairs(step: Mapping[int, Any] | None) -> list[tuple[str, float]] | None:
    """``{token_id: Logprob}`` -> ``[(decoded token, logprob), ...]`` (ids without text keep ``<id N>``)."""
    if step is None:
        return None
    pairs: list[tuple[str, float]] = []
    for token_id, entry in step.items():
        text = getattr(entry, "decoded_token", None)
        pairs.append((text if text is not None else f"<id {token_id}>", float(entry.logprob)))
    return pairs


def lora_rank(adapter_folder: str | os.PathLike[str]) -> int:
    """The rank ``r`` in an adapter's ``adapter_config.json``."""
    path = Path(adapter_folder) / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        return int(config["r"])
    except FileNotFoundError:
        raise BerdsError(f"{path}: not found — an adapter folder holds adapter_config.json "
                         "(written by peft's save_pretrained)") from None
    except (KeyError, ValueError, TypeError) as exc:
        raise BerdsError(f"{path}: expected a JSON object with an integer 'r' (the LoRA rank): {exc}") from None


def vllm_lora_rank(rank: int) -> int:
    """Round a LoRA rank up to one vLLM supports (8, 16, 32, 64, 128, 256, 320, 512)."""
    for supported in VLLM_LORA_RANKS:
        if rank <= supported:
            return supported
    raise BerdsError(f"LoRA rank {rank} is larger than vLLM supports ({VLLM_LORA_RANKS[-1]}); "
                     "merge the adapter into the model and load the merged checkpoint instead")


def resolve_adapter_folder(adapter: str, revision: str | None = None) -> Path:
    """A local folder for an adapter: the path itself, or its snapshot in the Hugging Face cache
    (downloaded unless ``HF_HUB_OFFLINE`` is set) — vLLM's ``LoRARequest`` wants a local path."""
    if looks_like_local_path(adapter):
        path = Path(adapter).expanduser()
        if not path.is_dir():
            raise BerdsError(f"adapter folder {adapter!r} does not exist — pass a folder written by peft's "
                             "save_pretrained or a hub name")
        return path
    hub = require("huggingface_hub", extra="vllm", purpose="fetching a LoRA adapter by hub name")
    try:
        return Path(hub.snapshot_download(adapter, revision=revision))
    except Exception as exc:  # offline/not found errors come in several huggingface_hub types
        raise BerdsError(f"cannot fetch LoRA adapter {adapter!r}: {str(exc).strip().splitlines()[0]} — "
                         "download it first (hf download NAME) or pass a local folder") from exc
