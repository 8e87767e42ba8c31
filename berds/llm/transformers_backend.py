"""LLM backend on Hugging Face transformers ``generate()``, with LoRA adapters through peft.

This is how the BERDS study ran its evaluator: Mistral-7B-Instruct-v0.2 plus the published LoRA adapter,
greedy decoding, 16 new tokens, bf16 on a GPU. A merged checkpoint (adapter already folded into the
weights) is just another model path with ``adapter=None``.

The model loads on first use (``load()``), so building a judge whose answers are all cached costs
nothing; the model path is checked at once.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Sequence

from berds.errors import BerdsError
from berds.lazy import require
from berds.llm.base import ContinuationScore, Generation, Prompt, context_overrun
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

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}


def _resolved_dtype(requested: str, device: str | None) -> str:
    """The precision ``load()`` runs the weights in: ``auto`` is bfloat16 on GPUs, float32 elsewhere."""
    if requested != "auto":
        return _DTYPES[requested]
    if device is None:  # (as load() decides it)
        try:
            import torch
        except ImportError:  # nothing can load without it; load() says so
            return "float32"
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "bfloat16" if device == "auto" or device.startswith("cuda") else "float32"


class TransformersLLM:
    """A local causal LM (hub name or local path) behind ``berds.llm.base.LLM``.

    * ``adapter``: a LoRA adapter (hub name or local folder) applied with ``peft.PeftModel``;
      ``merge_adapter=True`` folds it into the weights after loading (faster, tiny numeric differences).
    * ``device``: ``"cuda"`` when available else ``"cpu"``; ``"auto"`` spreads the model over all GPUs.
    * ``dtype``: ``"auto"`` = bfloat16 on GPU, float32 on CPU; or ``bfloat16``/``float16``/``float32``.
    * ``batch_size``: prompts per ``generate()`` call, or ``"auto"`` (default): on a CUDA device the size is
      chosen per batch from the free GPU memory and the prompts' lengths (``auto_batch_size``), at most
      ``max_batch_size``; on CPU ``"auto"`` is 8, as before. Prompts are sorted by length before batching (less
      padding) and results returned in input order. Batches are left-padded. A batch that runs out of GPU memory
      is halved and retried; the batches already answered are kept, and the smaller size is remembered for the
      rest of this object's life (``run_in_batches``).
    * ``shared_prefix`` (off by default): the tokens every prompt of a ``generate()`` call starts with (the
      study's instruction) are run through the model once per call; each batch starts from a copy of their
      key-value cache (``_shared_prefix_cache``). Verdicts equal the plain path's up to float rounding (tested
      on CPU); whether it is faster is for the GPU benchmark to show, so it is not the default.
    * ``gguf_file``: load a GGUF file inside ``model`` (dequantised by transformers; needs ``gguf``).
    * ``chat_template``: a Jinja template for tokenizers that lack one.
    * ``special_tokens``: ``"split"`` (default) reads control-token strings in the prompt's text (``</s>``,
      ``[INST]`` in a passage) as plain text, so the text judged cannot forge a chat turn; ``"parse"`` is the
      BERDS study's tokenisation, which makes them control tokens (``berds.llm.shared.prompt_token_ids``).

    Decoding is greedy (``temperature=0``) unless a temperature is given. With ``top_logprobs=N`` each
    ``Generation`` carries the N most likely first tokens (decoded strings -> natural-log probabilities of
    the unmodified softmax over the whole vocabulary).

    ``score(prompts, continuations)`` returns the log-probability of every token of each continuation
    given its prompt (one forward pass per batch, no generation): what DebateQA's P.D. needs.
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        revision: str | None = None,
        adapter_revision: str | None = None,
        merge_adapter: bool = False,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int | str = "auto",
        max_batch_size: int = 128,
        shared_prefix: bool = False,
        gguf_file: str | None = None,
        trust_remote_code: bool = False,
        chat_template: str | None = None,
        seed: int = 0,
        special_tokens: str = "split",
    ):
        if batch_size != "auto" and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise BerdsError(f"batch_size must be a positive integer or auto, got {batch_size!r}")
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise BerdsError(f"max_batch_size must be a positive integer, got {max_batch_size!r}")
        if dtype != "auto" and dtype not in _DTYPES:
            raise BerdsError(f"unknown dtype {dtype!r}; use auto, {', '.join(sorted(set(_DTYPES.values())))}")
        self.model_name = str(model)
        self.adapter = str(adapter) if adapter else None
        base = _adapter_folder_base(self.model_name) if not self.adapter else None
        if base:  # a LoRA folder alone (`berds judge train` writes one): its base model + it as the adapter
            self.model_name, self.adapter = base, self.model_name
        self.revision = revision
        self.adapter_revision = adapter_revision
        self.merge_adapter = merge_adapter
        self.requested_device = device
        self.requested_dtype = dtype
        self.batch_size = batch_size
        self.max_batch_size = max_batch_size
        if not isinstance(shared_prefix, bool):
            raise BerdsError(f"shared_prefix must be true or false, got {shared_prefix!r}")
        self.shared_prefix = shared_prefix
        # The largest batch known to fit since an out-of-memory error (None: none seen); it only ever shrinks.
        self.batch_ceiling: int | None = None
        self.gguf_file = gguf_file
        self.trust_remote_code = trust_remote_code
        self.chat_template = chat_template
        self.seed = seed
        self.special_tokens = check_special_tokens_mode(special_tokens)
        # Raises at once for a local path that does not exist. The precision and a chat template of one's own
        # change answers, so they are in the id (it keys the judgement cache).
        self.id = model_identity("transformers", self.model_name, revision=revision, adapter=self.adapter,
                                 adapter_revision=adapter_revision, gguf_file=gguf_file,
                                 dtype=_resolved_dtype(dtype, device), chat_template=chat_template,
                                 merged=merge_adapter, special_tokens=special_tokens)
        self._model: Any = None
        self._tokenizer: Any = None
        self.device: str | None = None
        self.dtype: str | None = None

    def __repr__(self) -> str:
        return f"TransformersLLM({self.id!r}, loaded={self._model is not None})"

    # ------------------------------------------------------------------------------------ loading

    def load(self) -> "TransformersLLM":
        """Load tokenizer, model and adapter (idempotent). Called by the first ``generate()``."""
        if self._model is not None:
            return self
        torch = require("torch", extra="llm", purpose="the transformers LLM backend")
        transformers = require("transformers", extra="llm", purpose="the transformers LLM backend")
        if self.gguf_file:
            require("gguf", extra="llm", purpose=f"loading the GGUF file {self.gguf_file}")

        device = self.requested_device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda"):  # one line, not torch's "not compiled with CUDA" assertion
            from berds.lazy import check_device

            check_device(device)
        dtype = _resolved_dtype(self.requested_dtype, device)
        common: dict[str, Any] = {"revision": self.revision, "trust_remote_code": self.trust_remote_code}
        if self.gguf_file:
            common["gguf_file"] = self.gguf_file
        where = self.model_name + (f" (revision {self.revision})" if self.revision else "")

        tokenizer = _load_or_explain(transformers.AutoTokenizer.from_pretrained, self.model_name, where,
                                     "tokenizer", **common)
        tokenizer.padding_side = "left"  # decoder-only models generate after the prompt's last token
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token

        # device_map puts weights straight onto the device (no full copy in CPU memory first). transformers'
        # "Loading weights" bar is silenced: it would print into berds' own progress (judging, training).
        from berds.lazy import quiet_model_loading

        with quiet_model_loading():
            model = _load_or_explain(transformers.AutoModelForCausalLM.from_pretrained, self.model_name, where,
                                     "model", dtype=getattr(torch, dtype), device_map=device, **common)
        if self.adapter:
            peft = require("peft", extra="llm", purpose=f"the LoRA adapter {self.adapter}")
            adapter_where = self.adapter + (f" (revision {self.adapter_revision})" if self.adapter_revision else "")
            from berds.lazy import quiet_peft

            with quiet_peft():
                model = _load_or_explain(peft.PeftModel.from_pretrained, self.adapter, adapter_where, "LoRA adapter",
                                         model, revision=self.adapter_revision, first_positional=False)
            if self.merge_adapter:
                model = model.merge_and_unload()
        model.eval()
        self._torch, self._tokenizer, self._model = torch, tokenizer, model
        self.device, self.dtype = device, dtype
        return self

    @property
    def tokenizer(self) -> Any:
        return self.load()._tokenizer

    @property
    def model(self) -> Any:
        return self.load()._model

    # ---------------------------------------------------------------------------------- generation

    def render(self, prompt: Prompt) -> str:
        """The exact text the model sees for one chat prompt (chat template applied)."""
        return render_chat(self.tokenizer, normalise_prompts([prompt])[0], chat_template=self.chat_template)

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        max_new_tokens: int = 16,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        cancel: Sequence[Any] | None = None,
    ) -> list[Generation]:
        """One completion per prompt, in input order (see the class docstring).

        ``cancel`` (one ``threading.Event`` per prompt; ``berds llm serve`` passes them): a prompt whose event is
        set stops generating at the next step, keeping the text it has, without changing the other prompts in its
        batch; a batch whose prompts are all cancelled is not run (their texts are empty)."""
        messages = normalise_prompts(prompts)
        check_generation_options(max_new_tokens, temperature, top_logprobs)
        if cancel is not None and len(cancel) != len(messages):
            raise BerdsError(f"cancel has {len(cancel)} events for {len(messages)} prompts")
        if not messages:
            return []
        self.load()
        prompts_ids = [prompt_token_ids(self._tokenizer, m, chat_template=self.chat_template,
                                        special_tokens=self.special_tokens) for m in messages]
        lengths = [len(ids) for ids in prompts_ids]
        context = self._context_length()
        over = [i for i, n in enumerate(lengths) if context_overrun("", n, context, max_new_tokens)]
        if over:
            why = context_overrun(f"prompt {over[0]}", lengths[over[0]], context, max_new_tokens)
            raise BerdsError(f"{why} ({len(over)} of {len(prompts_ids)} prompts) — shorten it, or use a model that reads more")
        # Longest first: similar lengths share a batch (less padding) and memory peaks show up early.
        order = sorted(range(len(prompts_ids)), key=lambda i: -lengths[i])
        results: list[Generation | None] = [None] * len(prompts_ids)
        steps_kept = max_new_tokens if top_logprobs > 0 else 1  # output_logits keeps every step's logits

        prefix = self._shared_prefix_cache(prompts_ids) if self.shared_prefix and temperature == 0 else None

        def run(chunk: list[int]) -> list[Generation]:
            flags = None if cancel is None else [cancel[i] for i in chunk]
            if flags is not None and all(flag.is_set() for flag in flags):
                return [Generation("", None) for _ in chunk]
            return self._generate_batch([prompts_ids[i] for i in chunk], max_new_tokens, temperature, top_logprobs,
                                        flags, prefix)

        def size_for(rest: list[int]) -> int:  # rest is longest first: its first prompt bounds the batch's width
            return self._batch_size_for(lengths[rest[0]] + max_new_tokens, steps_kept)

        for index, generation in run_in_batches(order, size_for, run, self):
            results[index] = generation
        return results  # type: ignore[return-value]

    # ---------------------------------------------------------------------------------- batch sizes

    def _batch_size_for(self, tokens: int, logits_steps: int) -> int:
        """Prompts per batch for sequences of at most ``tokens`` tokens: the fixed ``batch_size``, or (``auto``)
        the estimate from free GPU memory on CUDA and 8 elsewhere; never above a size that ran out of memory."""
        if isinstance(self.batch_size, int):
            size = self.batch_size
        elif self.device is None or not str(self.device).startswith("cuda"):
            size = 8  # CPU: what berds always used (memory is rarely the limit; larger batches are not faster)
        else:
            torch = self._torch
            device = torch.device(self._model.device) if str(self.device) == "auto" else torch.device(self.device)
            free, _ = torch.cuda.mem_get_info(device)
            # memory torch holds in its cache but no tensor uses is free to this process too
            free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
            size = auto_batch_size(free, self._model.config, tokens=tokens, logits_steps=logits_steps,
                                   dtype_bytes=torch.finfo(getattr(torch, self.dtype or "float32")).bits // 8,
                                   cap=self.max_batch_size)
        return max(1, min(size, self.batch_ceiling or size))

    def _shared_prefix_cache(self, prompts_ids: list[list[int]]) -> tuple[list[int], Any] | None:
        """``(prefix ids, their key-value cache)`` for the tokens all prompts start with, computed once; None when
        there is nothing worth sharing (fewer than 2 prompts or 8 common tokens). Every prompt keeps at least
        one token of its own (generation starts after the last prompt token, which must be fed)."""
        if len(prompts_ids) < 2:
            return None
        first, common = prompts_ids[0], min(len(ids) for ids in prompts_ids) - 1
        for ids in prompts_ids[1:]:
            common = next((j for j in range(common) if ids[j] != first[j]), common)
        if common < 8:
            return None
        torch, model = self._torch, self._model
        prefix = first[:common]
        with torch.inference_mode():
            cache = model(input_ids=torch.tensor([prefix], device=model.device), use_cache=True).past_key_values
        return prefix, cache

    def _generate_batch(
        self, prompts_ids: list[list[int]], max_new_tokens: int, temperature: float, top_logprobs: int,
        cancel: list[Any] | None = None, prefix: tuple[list[int], Any] | None = None,
    ) -> list[Generation]:
        torch, tokenizer, model = self._torch, self._tokenizer, self._model
        # Token ids as prompt_token_ids built them (BOS written once), left-padded: decoder-only models generate
        # after the prompt's last token
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0  # (masked out: any id does)
        shared: dict[str, Any] = {}
        if prefix is None:
            width = max(len(ids) for ids in prompts_ids)
            rows = [[pad] * (width - len(ids)) + ids for ids in prompts_ids]
            masks = [[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts_ids]
        else:
            # Shared prefix: [prefix][pads][own tokens]. The pads sit *after* the prefix and are masked; position
            # ids come from the mask's running sum (generate() derives them so), so each prompt's own tokens get
            # the positions they have in the plain layout and every token attends to the same tokens as there.
            import copy

            ids_prefix, cache = prefix
            n = len(ids_prefix)
            width = max(len(ids) - n for ids in prompts_ids)
            rows = [ids_prefix + [pad] * (width - len(ids) + n) + ids[n:] for ids in prompts_ids]
            masks = [[1] * n + [0] * (width - len(ids) + n) + [1] * (len(ids) - n) for ids in prompts_ids]
            batch_cache = copy.deepcopy(cache)  # (generate() appends to the cache it is given)
            batch_cache.batch_repeat_interleave(len(prompts_ids))
            shared = {"past_key_values": batch_cache}
        encoded = {"input_ids": torch.tensor(rows), "attention_mask": torch.tensor(masks)}
        encoded = {k: v.to(model.device) for k, v in encoded.items()}
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            torch.manual_seed(self.seed)
            sampling = {"do_sample": True, "temperature": float(temperature), "top_k": 0, "top_p": 1.0}
        with torch.inference_mode(), warnings.catch_warnings():
            # (transformers 5.x renames generate's past_key_values to cache; the old name is what every version
            # from the lower bound on takes, so its deprecation notice is not the user's to act on)
            warnings.filterwarnings("ignore", message=r".*past_key_values.* is deprecated", category=FutureWarning)
            out = model.generate(
                **encoded, max_new_tokens=max_new_tokens, **sampling,
                # Greedy is the point; silence model generation_config defaults (top_p etc.).
                num_beams=1, pad_token_id=tokenizer.pad_token_id,
                return_dict_in_generate=True, output_logits=top_logprobs > 0,
                stopping_criteria=None if cancel is None else _cancelled_rows(cancel), **shared,
            )
        prompt_width = encoded["input_ids"].shape[1]
        new_tokens = out.sequences[:, prompt_width:]
        first_step = None
        if top_logprobs > 0:
            # Raw logits of the first step (before any logits processor) -> log-softmax over the vocabulary.
            log_probs = torch.log_softmax(out.logits[0].float(), dim=-1)
            k = min(top_logprobs, log_probs.shape[-1])
            first_step = torch.topk(log_probs, k, dim=-1)
        generations = []
        for row in range(len(prompts_ids)):
            text = tokenizer.decode(new_tokens[row], skip_special_tokens=True).strip()
            pairs = None
            if first_step is not None:
                values = first_step.values[row].tolist()
                ids = first_step.indices[row].tolist()
                pairs = [(tokenizer.decode([i]), v) for i, v in zip(ids, values) if not math.isinf(v)]
            generations.append(generation_from_token_logprobs(text, pairs, top_logprobs))
        return generations

    # ------------------------------------------------------------------------------------ scoring

    def score(self, prompts: Sequence[Prompt | str], continuations: Sequence[str]) -> list[ContinuationScore]:
        """Per-token log-probabilities of each continuation given its prompt, in input order.

        A chat prompt is rendered with the chat template (generation prompt added; no extra special tokens);
        a string prompt is used verbatim with the tokenizer's own special tokens (e.g. BOS). The
        continuation is tokenised on its own and appended, so its tokens are exactly those scored. A
        prompt too long for the model's context is cut from the left (``truncated=True``).
        """
        if isinstance(prompts, (list, tuple)) and isinstance(continuations, (list, tuple)) and not prompts + continuations:
            return []
        self.load()
        tokenizer = self._tokenizer
        rows, truncated = score_token_rows(tokenizer, prompts, continuations, chat_template=self.chat_template,
                                           context=self._context_length(), special_tokens=self.special_tokens)
        values = self._continuation_logprobs([p + c for p, c in rows], [len(p) for p, _ in rows])
        return [ContinuationScore(tuple(tokenizer.decode([t]) for t in cont_ids), tuple(v), truncated[i])
                for i, ((_, cont_ids), v) in enumerate(zip(rows, values))]

    def echo_logprobs(self, text: str) -> tuple[list[str], list[int], list[float | None]]:
        """``(tokens, character offsets, log-probabilities)`` of every token of ``text`` (the first has None):
        what an OpenAI ``/v1/completions`` request with ``echo=true, logprobs`` returns (``berds llm serve``)."""
        self.load()
        tokenizer = self._tokenizer
        split = {"split_special_tokens": True} if self.special_tokens == "split" else {}
        encoded = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True, **split)
        ids, offsets = list(encoded["input_ids"]), [int(a) for a, _ in encoded["offset_mapping"]]
        if not ids:
            return [], [], []
        why = context_overrun("the text", len(ids), self._context_length())
        if why:
            raise BerdsError(why)
        values = self._continuation_logprobs([ids], [1])[0] if len(ids) > 1 else []
        return [tokenizer.decode([t]) for t in ids], offsets, [None, *values]

    def context_length(self) -> int | None:
        """The most tokens the model reads (``max_position_embeddings``; None when its config does not say)."""
        self.load()
        return self._context_length()

    def _context_length(self) -> int | None:
        limit = getattr(self._model.config, "max_position_embeddings", None)
        return int(limit) if isinstance(limit, int) and limit > 0 else None

    def _continuation_logprobs(self, sequences: list[list[int]], starts: list[int]) -> list[list[float]]:
        """Log-probabilities of ``sequence[start:]`` for each sequence (right-padded batches, longest first)."""
        torch, tokenizer, model = self._torch, self._tokenizer, self._model
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
        out: list[list[float]] = [[] for _ in sequences]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

        def run(chunk: list[int]) -> list[list[float]]:
            width = max(len(sequences[i]) for i in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                ids[row, :len(sequences[i])] = torch.tensor(sequences[i])
                mask[row, :len(sequences[i])] = 1
            values = []
            with torch.inference_mode():
                logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits
                for row, i in enumerate(chunk):
                    start, end = starts[i], len(sequences[i])
                    # Position t predicts token t+1; log-softmax only the rows needed (vocabularies are large).
                    step = torch.log_softmax(logits[row, start - 1:end - 1].float(), dim=-1)
                    target = ids[row, start:end].to(step.device).unsqueeze(-1)
                    values.append(step.gather(-1, target).squeeze(-1).tolist())
            return values

        def size_for(rest: list[int]) -> int:  # a forward pass keeps every position's logits
            return self._batch_size_for(len(sequences[rest[0]]), len(sequences[rest[0]]))

        for i, values in run_in_batches(order, size_for, run, self):
            out[i] = values
        return out


def auto_batch_size(free_bytes: int, config: Any, *, tokens: int, logits_steps: int, dtype_bytes: int = 2,
                    cap: int = 128, headroom: float = 0.8) -> int:
    """How many sequences of ``tokens`` tokens fit in ``free_bytes`` of GPU memory (at least 1, at most ``cap``).

    Per sequence: its key-value cache (``2 x layers x kv heads x head dim x dtype bytes`` per token), the
    largest transient activations of one layer during the prompt's forward pass (hidden states, attention
    projections and the MLP's gate/up/act tensors, ``(4 x hidden + 3 x intermediate) x dtype bytes`` per
    token) and the float32 logits kept (``logits_steps x vocab x 4``, twice: the logits and their log-softmax).
    Only ``headroom`` of the free memory is planned for (the allocator fragments; kernels take workspace). An
    estimate, not a promise: an out-of-memory batch is halved and retried (``run_in_batches``).
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(getattr(text, "num_attention_heads", 0) or 1)
    hidden = int(getattr(text, "hidden_size", 0) or 4096)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    layers = int(getattr(text, "num_hidden_layers", 0) or 32)
    intermediate = int(getattr(text, "intermediate_size", 0) or 4 * hidden)
    vocab = int(getattr(text, "vocab_size", 0) or 32000)
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes + (4 * hidden + 3 * intermediate) * dtype_bytes
    per_sequence = tokens * per_token + 2 * logits_steps * vocab * 4
    return int(max(1, min(cap, (free_bytes * headroom) // max(per_sequence, 1))))


def out_of_memory_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "this batch did not fit" (torch's CUDA OOM; constructible without a GPU)."""
    import torch

    return (torch.cuda.OutOfMemoryError,)


def run_in_batches(order: list[int], size_for: Any, run: Any, state: Any) -> list[tuple[int, Any]]:
    """Run ``run(chunk)`` over consecutive chunks of ``order``; return ``(index, result)`` for every index, once.

    ``size_for(rest)`` says how many of the remaining indices ``rest`` the next chunk takes. A chunk whose
    ``run`` raises an out-of-memory error is halved and retried (the GPU cache emptied first); chunks already
    answered are kept, never run again, and ``state.batch_ceiling`` remembers the size that worked, so later
    batches (and later calls on the same ``state``) start there. One prompt that does not fit is an error.
    """
    oom = out_of_memory_errors()
    done: list[tuple[int, Any]] = []
    position = 0
    while position < len(order):
        rest = order[position:]
        size = max(1, min(size_for(rest), len(rest), state.batch_ceiling or len(rest)))
        chunk = rest[:size]
        try:
            answers = run(chunk)
        except oom as exc:
            _empty_gpu_cache()
            if size == 1:
                raise BerdsError(f"one prompt alone does not fit in GPU memory ({str(exc).splitlines()[0][:200]}) — "
                                 "free the GPU, use a shorter prompt, or a smaller dtype") from None
            state.batch_ceiling = size // 2
            import sys

            print(f"note: a batch of {size} ran out of GPU memory; retrying with {size // 2} (batches already "
                  "answered are kept)", file=sys.stderr)
            continue
        if len(answers) != len(chunk):  # (a bug, not a user error: keep the traceback)
            raise RuntimeError(f"a batch of {len(chunk)} gave {len(answers)} answers")
        done.extend(zip(chunk, answers))
        position += size
    return done


def _empty_gpu_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _adapter_folder_base(path: str) -> str | None:
    """The base model a local peft adapter folder names (``adapter_config.json`` without a ``config.json``),
    else None. A folder whose adapter config names no base is an error saying so."""
    import json
    from pathlib import Path

    if not looks_like_local_path(path):
        return None
    folder = Path(path).expanduser()
    config = folder / "adapter_config.json"
    if not config.is_file() or (folder / "config.json").exists():
        return None
    try:
        base = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise BerdsError(f"{config}: not a readable adapter config ({exc})") from None
    if not isinstance(base, str) or not base:
        raise BerdsError(f"{config} names no base_model_name_or_path — load it as transformers:BASE -o adapter={path}")
    return base


def _cancelled_rows(flags: list[Any]) -> Any:
    """A stopping criterion that finishes each row whose event is set (generate() checks it after every step;
    finished rows are padded while the others go on, and the call ends once every row is finished)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Cancelled(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.tensor([flag.is_set() for flag in flags], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Cancelled()])


def _load_or_explain(loader: Any, name: str, where: str, what: str, *args: Any,
                     first_positional: bool = True, **kwargs: Any) -> Any:
    """Call a ``from_pretrained`` loader; turn "not found / offline" failures into one clear message."""
    from berds.llm.shared import ensure_model_available

    option = ("-o adapter=PATH" if what == "LoRA adapter"  # the option names where a judge/llm takes the folder
              else "-o model=PATH (mistral-berds) or as the model name (transformers:PATH, nli:PATH, llm -m PATH)")
    ensure_model_available(name, what=what, option=option)  # seconds, not minutes of retries
    try:
        return loader(name, *args, **kwargs) if first_positional else loader(*args, name, **kwargs)
    except (OSError, ValueError) as exc:
        if looks_like_local_path(name):
            fix = (f"check that {name} holds a complete {what} (config and weights as written by "
                   "save_pretrained)")
        elif os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
            fix = (f"HF_HUB_OFFLINE is set and {name!r} is not in the local Hugging Face cache — download it "
                   f"first (hf download {name}) or pass a local path")
        else:
            fix = (f"{name!r} is neither a local path nor reachable on the Hugging Face hub — check the name, "
                   "your network, or pass a local path (set HF_HUB_OFFLINE=1 to fail fast offline)")
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BerdsError(f"cannot load {what} {where}: {first_line} — {fix}") from exc
