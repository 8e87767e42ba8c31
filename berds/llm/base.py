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
