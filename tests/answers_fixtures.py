"""Fixtures for the DebateQA answer metrics: a rule-based D.A. evaluator and small answer/question files.

``ScriptedAwarenessLLM`` implements ``berds.llm.base.LLM``: it finds the answer under test in the D.A. prompt
berds sends (the last ``Answer:`` block) and replies "1" when that answer says the question is debated
(``debat`` / ``controvers`` / ``disputed``), else "0" -- in one of several reply *styles*, so the parsing of
replies that are and are not exactly a digit is exercised over real HTTP (``berds llm serve``):

* ``digit``   -- "1" / "0" (what Table 13 asks for);
* ``verbose`` -- "The answer is 1." / "Response: 0";
* ``words``   -- "Yes, it acknowledges the debate." / "No." (no digit at all).
"""

from __future__ import annotations

import re
from typing import Sequence

from berds.llm.base import Generation

AWARE = re.compile(r"debat|controvers|disputed", re.IGNORECASE)
STYLES = {
    "digit": ("1", "0"),
    "verbose": ("The answer is 1.", "Response: 0"),
    "words": ("Yes, it acknowledges the debate.", "No."),
}


def is_aware(answer: str) -> bool:
    return bool(AWARE.search(answer))


class ScriptedAwarenessLLM:
    def __init__(self, model: str = "scripted", *, style: str = "digit", id: str | None = None):  # noqa: A002
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}")
        self.style = style
        self.model_name = model  # the name `berds llm serve` serves it under
        self.id = id or f"scripted-da:{style}"
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[Sequence[dict]], *, max_new_tokens: int = 16, temperature: float = 0.0,
                 top_logprobs: int = 0) -> list[Generation]:
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            self.prompts.append(text)
            start = text.rfind("\nAnswer: ")
            end = text.find("\nImportant:", start)
            answer = text[start + len("\nAnswer: "):end]
            yes, no = STYLES[self.style]
            out.append(Generation(yes if is_aware(answer) else no))
        return out
