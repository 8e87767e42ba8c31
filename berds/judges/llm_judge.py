"""The study's kind of judge: a Yes/No perspective-detection prompt put to an LLM, the reply parsed.

``LLMJudge`` works over any ``berds.llm`` backend (transformers, vLLM, OpenAI-compatible HTTP);
``llm_judge(backend=..., model=...)`` builds one, splitting options between judge and backend.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Sequence

from berds.errors import BerdsError
from berds.judges.prompts import PromptTemplate, get_prompt
from berds.types import JudgePair, Verdict

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
        from berds.llm.secrets import redact_text

        # The id keys the cache and is written to every output: never let a backend's credential into it.
        self.name = redact_text(name or llm.id)
        suffix = f"|parse={parse}" + (f"|threshold={threshold:g}" if threshold is not None else "")
        self.id = redact_text(f"{llm.id}{suffix}")
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


_JUDGE_KEYS = {"prompt", "parse", "max_new_tokens", "top_logprobs", "threshold", "name"}


def llm_judge(*, backend: str, model: str, **options: Any) -> LLMJudge:
    """Build an ``LLMJudge`` on ``backend``; options split between the judge and the backend."""
    from berds.llm import load_llm

    judge_opts = {k: v for k, v in options.items() if k in _JUDGE_KEYS}
    llm_opts = {k: v for k, v in options.items() if k not in _JUDGE_KEYS}
    return LLMJudge(load_llm(backend, model, **llm_opts), **judge_opts)



def unwrap_llm_judge(judge: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """The ``LLMJudge``-like object inside ``judge`` and a function re-applying the wrappers around a
    replacement; None when there is none (a non-LLM judge)."""
    from berds.judges.base import LazyJudge
    from berds.judges.threshold import ThresholdJudge

    if isinstance(judge, LazyJudge):
        return unwrap_llm_judge(judge.inner)
    if isinstance(judge, ThresholdJudge):
        found = unwrap_llm_judge(judge.inner)
        if found is None:
            return None
        inner, rewrap = found
        return inner, lambda j: ThresholdJudge(rewrap(j), judge.threshold, source=judge.source)
    if all(hasattr(judge, a) for a in ("llm", "prompt", "parse", "max_new_tokens", "top_logprobs")):
        return judge, lambda j: j
    return None
