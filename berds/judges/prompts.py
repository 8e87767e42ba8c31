"""Perspective-detection prompts, each with a version id that keys the judgement cache.

The default prompts are the BERDS study's own files (Table 14 of the paper), shipped byte for byte in
``berds/data/study_prompts/`` (see its PROVENANCE.md) and turned into messages exactly as the study's code
did:

* chat form (``zero-shot``, ``one-shot``): the file is split at each ``<|im_end|>``; a piece's first line
  names the role after ``<|im_start|>``, the remaining lines, stripped as a whole, are the content;
  ``[Doc 1]`` is replaced by the document and ``[Doc 2]`` by the perspective (the "statement"). The study
  gave GPT-4 every turn and Mistral every turn *after* the system turn (``render(..., drop_system=True)``).
* plain form (``plain``, ``plain-one-shot``): the same instruction without chat markup, for base models;
  rendered as one ``berds.llm.base.plain_prompt`` that backends send with no chat template.

Earlier berds prompts (a shorter paraphrase; an invented one-shot example) are kept under the names
``paraphrase-zero-shot`` / ``paraphrase-one-shot`` with their old version ids, so their cached verdicts stay
theirs. The version id changes whenever the wording changes, so answers are never reused across wordings.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from berds.llm.base import plain_prompt

STUDY_PROMPT_DIR = Path(__file__).resolve().parent.parent / "data" / "study_prompts"
FORMS = ("format", "study-chat", "study-plain")
_STUDY_SLOTS = re.compile(r"\[Doc 1\]|\[Doc 2\]")


@lru_cache(maxsize=None)
def study_prompt_text(filename: str) -> str:
    """A shipped study prompt file, exactly as released (no newline translation)."""
    with open(STUDY_PROMPT_DIR / filename, encoding="utf-8", newline="") as f:
        return f.read()


def split_chat(text: str) -> list[dict[str, str]]:
    """The study's chat file -> messages: split at each ``<|im_end|>``; in each piece the first line is
    ``<|im_start|>ROLE`` and the remaining lines, stripped as a whole, are the content."""
    from berds.errors import BerdsError

    messages = []
    for piece in text.split("<|im_end|>"):
        piece = piece.strip()
        if not piece:
            continue
        head, _, body = piece.partition("\n")
        if not head.startswith("<|im_start|>"):
            raise BerdsError(f"chat prompt piece does not start with <|im_start|>ROLE: {head[:60]!r}")
        messages.append({"role": head[len("<|im_start|>"):].strip(), "content": body.strip()})
    return messages


def fill_study_slots(text: str, *, document: str, perspective: str) -> str:
    """``[Doc 1]`` -> document, ``[Doc 2]`` -> perspective, in one pass (text inside the document that
    happens to read ``[Doc 2]`` is left alone)."""
    return _STUDY_SLOTS.sub(lambda m: document if m.group(0) == "[Doc 1]" else perspective, text)


@dataclass(frozen=True)
class PromptTemplate:
    """A perspective-detection prompt.

    ``form`` says how ``template`` is read: ``format`` — a ``str.format`` string with ``{document}`` and
    ``{perspective}`` slots (each at least once) and no others (checked when the prompt is made), sent as one
    user turn after the optional ``system`` message; ``study-chat`` — the study's chat file
    (``<|im_start|>ROLE`` ... ``<|im_end|>`` turns, ``[Doc 1]``/``[Doc 2]`` slots); ``study-plain`` — the
    study's plain file, sent as raw text.
    """

    version: str
    template: str
    system: str | None = None
    description: str = ""
    form: str = "format"
    source: str = ""
    # Slots besides {document} and {perspective} that the code rendering this template fills (the debate
    # critic's {answer}); judging prompts have none
    extra_slots: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from berds.errors import BerdsError

        if not isinstance(self.version, str) or not self.version.strip():
            raise BerdsError(f"a prompt needs a version name (it keys the judgement cache), got {self.version!r}")
        if self.form not in FORMS:
            raise BerdsError(f"prompt {self.version!r}: unknown form {self.form!r}; use one of {', '.join(FORMS)}")
        if self.form != "format":
            return
        try:
            slots = [name for _, name, _, _ in string.Formatter().parse(self.template) if name is not None]
        except ValueError as e:
            raise BerdsError(f"prompt {self.version!r}: the template is not a str.format string ({e}); "
                             "write a literal brace as {{ or }}") from None
        # A verdict is cached by (perspective, passage) alone and evaluation puts no question in its pairs, so a
        # {question} slot would be filled with nothing there and share one verdict across questions elsewhere
        if "question" in slots:
            raise BerdsError(f"prompt {self.version!r}: a {{question}} slot is not supported — verdicts are cached "
                             "by (perspective, passage) only, so a prompt must not depend on the question")
        unknown = sorted(set(slots) - {"document", "perspective", *self.extra_slots})
        if unknown:
            raise BerdsError(f"prompt {self.version!r}: unknown template slot(s) {', '.join(map(repr, unknown))}; the "
                             "slots are {document} and {perspective} (write a literal brace as {{ or }})")
        # (a slot may repeat: "... Perspective: {perspective} ... Does the document support {perspective}?")
        for name in ("document", "perspective"):
            if name not in slots:
                raise BerdsError(f"prompt {self.version!r}: the template has no {{{name}}} slot")

    @property
    def plain(self) -> bool:
        return self.form == "study-plain"

    @property
    def has_system_turn(self) -> bool:
        return self.system is not None or (self.form == "study-chat" and split_chat(self.template)[0]["role"] == "system")

    def render(self, *, document: str, perspective: str, drop_system: bool = False) -> list[dict[str, str]]:
        """The messages for one (document, perspective) pair. ``drop_system`` leaves out the system turn
        (the study's Mistral path)."""
        if self.form == "study-chat":
            messages = [{"role": m["role"], "content": fill_study_slots(m["content"], document=document,
                                                                         perspective=perspective)}
                        for m in split_chat(self.template)]
        elif self.form == "study-plain":
            return plain_prompt(fill_study_slots(self.template, document=document, perspective=perspective))
        else:
            text = self.template.format(document=document, perspective=perspective)
            messages = [{"role": "system", "content": self.system}] if self.system else []
            messages.append({"role": "user", "content": text})
        if drop_system:
            messages = [m for m in messages if m["role"] != "system"]
        return messages


def _study(version: str, filename: str, form: str, description: str) -> PromptTemplate:
    return PromptTemplate(version=version, template=study_prompt_text(filename), form=form,
                          description=description, source=f"berds/data/study_prompts/{filename}")


ZERO_SHOT = _study("berds-study-chat-v1", "perspective-detection.chat.txt", "study-chat",
                   "The study's zero-shot perspective-detection prompt (Table 14), chat form, from its released code.")
ONE_SHOT = _study("berds-study-chat-1shot-v1", "perspective-detection.chat.1shot.txt", "study-chat",
                  "The study's one-shot prompt (the 'Prop. 19' example, answer No), chat form (its GPT-4 judge).")
PLAIN = _study("berds-study-plain-v1", "perspective-detection.plain.txt", "study-plain",
               "The study's zero-shot prompt without chat markup, sent with no chat template (base models).")
PLAIN_ONE_SHOT = _study("berds-study-plain-1shot-v1", "perspective-detection.plain.1shot.txt", "study-plain",
                        "The study's one-shot prompt without chat markup, sent with no chat template.")

# berds' earlier prompts (before issue 14): a paraphrase of Table 14 and an invented one-shot example.
PARAPHRASE_ZERO_SHOT = PromptTemplate(
    version="berds-t14-zeroshot-v1",
    description="berds' earlier paraphrase of Table 14 (not the study's wording), zero-shot.",
    template=(
        "Given a document and a perspective, determine whether the document supports the perspective. "
        "Answer with \"Yes\" or \"No\" only.\n\n"
        "Document: {document}\n\n"
        "Perspective: {perspective}\n\n"
        "Does the document support the perspective? Answer:"
    ),
)

_PARAPHRASE_EXAMPLE = (
    "Here is an example.\n\n"
    "Document: Cities that added protected bike lanes saw cycling injuries fall by a third, and local "
    "shops on those streets reported steady or rising sales after the change.\n\n"
    "Perspective: Protected bike lanes make streets safer without hurting local business.\n\n"
    "Does the document support the perspective? Answer: Yes\n\n"
    "Now the real task.\n\n"
)

PARAPHRASE_ONE_SHOT = PromptTemplate(
    version="berds-t14-oneshot-v1",
    description="berds' earlier paraphrase with an invented worked example (answer Yes); not the study's.",
    template=PARAPHRASE_ZERO_SHOT.template.replace("Document: {document}", _PARAPHRASE_EXAMPLE + "Document: {document}", 1),
)

PROMPTS: dict[str, PromptTemplate] = {
    p.version: p for p in (ZERO_SHOT, ONE_SHOT, PLAIN, PLAIN_ONE_SHOT, PARAPHRASE_ZERO_SHOT, PARAPHRASE_ONE_SHOT)
}
PROMPT_ALIASES = {
    "zero-shot": ZERO_SHOT.version, "one-shot": ONE_SHOT.version,
    "plain": PLAIN.version, "plain-one-shot": PLAIN_ONE_SHOT.version,
    "paraphrase-zero-shot": PARAPHRASE_ZERO_SHOT.version, "paraphrase-one-shot": PARAPHRASE_ONE_SHOT.version,
}


def get_prompt(name: str) -> PromptTemplate:
    """A prompt by version id or alias (``zero-shot``, ``one-shot``, ``plain``, ``plain-one-shot``,
    ``paraphrase-zero-shot``, ``paraphrase-one-shot``)."""
    from berds.errors import UnknownNameError

    key = PROMPT_ALIASES.get(name, name)
    if key not in PROMPTS:
        raise UnknownNameError("prompt", name, list(PROMPT_ALIASES) + list(PROMPTS))
    return PROMPTS[key]
