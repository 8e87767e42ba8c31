"""DebateQA's prompts, read from the files shipped in ``berds/data/debateqa/`` (see PROVENANCE.md there).

* P.D. (perspective diversity): ``PD_PROMPTS`` -- Table 12's five wrappers of the answer; eq. (1) uses
  ``pd1`` ("{response} Please restate.").
* D.A. (dispute awareness): ``DA_PROMPTS`` -- Table 13's p_D.A. (``table13``) and its zero-shot version
  (``zero-shot``).

Each prompt has a version string; cached scores and replies are keyed by it, so editing a prompt file must
change its version here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from berds.errors import UnknownNameError

DATA = Path(__file__).resolve().parents[1] / "data" / "debateqa"
_FIELD = re.compile(r"\{(question|answer|response)\}")


@dataclass(frozen=True)
class AnswerPrompt:
    name: str
    version: str
    template: str
    source: str

    def fill(self, **fields: str) -> str:
        """The template with ``{question}``/``{answer}``/``{response}`` replaced in one pass (texts holding
        braces or those very field names stay as they are)."""
        return _FIELD.sub(lambda m: fields[m.group(1)], self.template)


@lru_cache(maxsize=None)
def pd_prompts() -> dict[str, AnswerPrompt]:
    raw = json.loads((DATA / "pd_prompts.json").read_text(encoding="utf-8"))
    return {name: AnswerPrompt(name, f"debateqa-{name}-v1", text, f"DebateQA Table 12 p_P.D.{name[-1]}")
            for name, text in raw.items()}


@lru_cache(maxsize=None)
def da_prompts() -> dict[str, AnswerPrompt]:
    return {
        "table13": AnswerPrompt("table13", "debateqa-da-table13-2shot-v1",
                                (DATA / "da_prompt.txt").read_text(encoding="utf-8").rstrip("\n"),
                                "DebateQA Table 13 p_D.A. (the 2 of 5 demonstrations the paper prints)"),
        "zero-shot": AnswerPrompt("zero-shot", "debateqa-da-zero-shot-v1",
                                  (DATA / "da_prompt_zero_shot.txt").read_text(encoding="utf-8").rstrip("\n"),
                                  "DebateQA Table 13 p_D.A.-ZS (demonstrations omitted)"),
    }


def pd_prompt(name: str) -> AnswerPrompt:
    prompts = pd_prompts()
    if name not in prompts:
        raise UnknownNameError("P.D. prompt", name, list(prompts))
    return prompts[name]


def da_prompt(name: str) -> AnswerPrompt:
    prompts = da_prompts()
    if name not in prompts:
        raise UnknownNameError("D.A. prompt", name, list(prompts))
    return prompts[name]
