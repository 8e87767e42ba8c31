"""One interface for every LLM backend (transformers, vLLM, OpenAI-compatible HTTP, ...).

A prompt is a list of chat messages ``[{"role": "user", "content": "..."}]``; the backend applies the
model's chat template. ``plain_prompt(text)`` (one message with role ``plain``) is sent as raw text instead. Generation is greedy unless ``temperature > 0``. When ``top_logprobs > 0`` and the
backend can, each ``Generation`` carries the log-probabilities of the most likely *first* tokens, which
the judge turns into P(Yes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence, runtime_checkable

Message = Mapping[str, str]
Prompt = Sequence[Message]


@dataclass(frozen=True)
class Generation:
    """The text a model generated, and (optionally) top log-probabilities of its first token.

    ``first_token_logprobs`` maps token strings (as the tokenizer decodes them, e.g. ``"Yes"``,
    ``" yes"``) to natural-log probabilities.
    """

    text: str
    first_token_logprobs: Mapping[str, float] | None = None


@runtime_checkable
class LLM(Protocol):
    """What every backend provides. ``id`` names the model and its revision (it keys judge caches)."""

    id: str

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        max_new_tokens: int = 16,
        temperature: float = 0.0,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """Generate one completion per prompt, in order."""
        ...


PLAIN_ROLE = "plain"


def plain_prompt(text: str) -> list[dict[str, str]]:
    """A prompt sent as raw text, with *no* chat template (for base models and the study's ``.plain`` prompt
    files): one message with role ``plain``. Local backends put only the tokenizer's BOS before it."""
    return [{"role": PLAIN_ROLE, "content": text}]


def is_plain(prompt: Prompt) -> bool:
    return len(prompt) == 1 and prompt[0].get("role") == PLAIN_ROLE


def user_prompt(text: str, system: str | None = None) -> list[dict[str, str]]:
    """A one-turn chat prompt."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    return messages


@dataclass(frozen=True)
class ContinuationScore:
    """Natural-log probabilities a model gives each token of a continuation, conditioned on a prompt.

    ``tokens[i]`` is the decoded i-th continuation token and ``logprobs[i]`` its log-probability given the
    prompt and the tokens before it (DebateQA's P.D. is built from these, ``berds.answers``).
    """

    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    truncated: bool = False  # the prompt was cut from the left to fit the model's context

    @property
    def total(self) -> float:
        return float(sum(self.logprobs))

    @property
    def mean(self) -> float:
        return self.total / len(self.logprobs) if self.logprobs else float("nan")

    @property
    def perplexity(self) -> float:
        """``exp(-mean log-prob)``: DebateQA's conditional perplexity PPL(Y|X) (their eq. 2)."""
        import math

        return math.exp(-self.mean) if self.logprobs else float("nan")


@runtime_checkable
class Scorer(Protocol):
    """A backend that can score a given continuation (``transformers``, ``vllm``; ``openai`` against servers
    with ``/v1/completions`` echo+logprobs, such as ``vllm serve`` and ``berds llm serve``).

    A prompt is a chat prompt (rendered with the model's chat template, as for ``generate``) or a plain
    string used verbatim. Continuations must be non-empty.
    """

    id: str

    def score(self, prompts: Sequence[Prompt | str], continuations: Sequence[str]) -> list[ContinuationScore]:
        ...


def require_scorer(llm: object, purpose: str) -> Scorer:
    """``llm`` when it can score continuations, else a ``BerdsError`` saying which backends can."""
    if callable(getattr(llm, "score", None)):
        return llm  # type: ignore[return-value]
    from berds.errors import BerdsError

    raise BerdsError(f"{purpose} needs token log-probabilities of a given text, and the LLM "
                     f"{getattr(llm, 'id', type(llm).__name__)!r} cannot score continuations — use "
                     "transformers:MODEL, vllm:MODEL, or openai:MODEL against a server with /v1/completions "
                     "echo+logprobs (vllm serve, berds llm serve)")


def context_overrun(what: str, tokens: int, context: int | None, more: int = 0) -> str | None:
    """Why ``what`` (``tokens`` long, asking for up to ``more`` new ones) does not fit a model that reads ``context``
    tokens; None when it fits or the context is unknown. The backends and ``berds llm serve`` refuse such texts: past
    the context the model is at positions it never learned (vLLM refuses them too)."""
    if context is None or tokens + more <= context:
        return None
    asks = f" and asks for up to {more} more" if more else ""
    return f"{what} has {tokens} tokens{asks}, more than the model's context of {context} tokens"
