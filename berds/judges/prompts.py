"""Perspective-detection prompts, each with a version id that keys the judgement cache.

The study's judge (its Table 14) is asked, for one document and one perspective, whether the document
supports the perspective, and answers Yes or No; the one-shot variant prepends a worked example. The
version id changes whenever the wording changes, so cached answers are never reused across wordings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptTemplate:
    """A chat prompt with ``{document}`` and ``{perspective}`` slots (``{question}`` optional)."""

    version: str
    template: str
    system: str | None = None
    description: str = ""

    def render(self, *, document: str, perspective: str, question: str = "") -> list[dict[str, str]]:
        text = self.template.format(document=document, perspective=perspective, question=question)
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": text})
        return messages


ZERO_SHOT = PromptTemplate(
    version="berds-t14-zeroshot-v1",
    description="The study's Yes/No perspective-detection instruction (Table 14), zero-shot.",
    template=(
        "Given a document and a perspective, determine whether the document supports the perspective. "
        "Answer with \"Yes\" or \"No\" only.\n\n"
        "Document: {document}\n\n"
        "Perspective: {perspective}\n\n"
        "Does the document support the perspective? Answer:"
    ),
)

_ONE_SHOT_EXAMPLE = (
    "Here is an example.\n\n"
    "Document: Cities that added protected bike lanes saw cycling injuries fall by a third, and local "
    "shops on those streets reported steady or rising sales after the change.\n\n"
    "Perspective: Protected bike lanes make streets safer without hurting local business.\n\n"
    "Does the document support the perspective? Answer: Yes\n\n"
    "Now the real task.\n\n"
)

ONE_SHOT = PromptTemplate(
    version="berds-t14-oneshot-v1",
    description="The same instruction with one worked example (the study's one-shot GPT-4 judge).",
    template=ZERO_SHOT.template.replace("Document: {document}", _ONE_SHOT_EXAMPLE + "Document: {document}", 1),
)

PROMPTS: dict[str, PromptTemplate] = {p.version: p for p in (ZERO_SHOT, ONE_SHOT)}
PROMPT_ALIASES = {"zero-shot": ZERO_SHOT.version, "one-shot": ONE_SHOT.version}


def get_prompt(name: str) -> PromptTemplate:
    """A prompt by version id or alias (``zero-shot`` / ``one-shot``)."""
    from berds.errors import UnknownNameError

    key = PROMPT_ALIASES.get(name, name)
    if key not in PROMPTS:
        raise UnknownNameError("prompt", name, list(PROMPTS) + list(PROMPT_ALIASES))
    return PROMPTS[key]
