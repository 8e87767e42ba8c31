"""Small, deterministic parts for the expansion / analysis / report / notebook tests.

* ``OverlapRetriever`` — a real (if simple) lexical retriever: scores a passage by the number of content
  words it shares with the query. Importable as ``analysis_fixtures:OverlapRetriever`` (tests/ is on the
  path), takes ``corpus=PATH`` (jsonl of ``{"id", "title", "text"}``) like the built-in retrievers.
* ``ScriptedLLM`` — an object with the ``berds.llm`` interface whose answers are scripted by the test:
  a function of the prompt text. It records every prompt it saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from berds.llm.base import Generation
from berds.types import Hit, Passage, Question, rank_hits
from judges_for_tests import content_words


class OverlapRetriever:
    def __init__(self, *, corpus: str | Path | None = None, passages: Sequence[Passage] = (), name: str = "overlap"):
        self.name = name
        self.passages = list(passages)
        if corpus is not None:
            with open(corpus, encoding="utf-8") as f:
                self.passages += [Passage(str(r["id"]), r["text"], r.get("title", "")) for r in map(json.loads, f) if r]
        self._words = [content_words(p.title + " " + p.text) for p in self.passages]
        self.queries: list[str] = []

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        out = []
        for q in questions:
            self.queries.append(q.text)
            want = content_words(q.text)
            hits = [Hit(p, float(len(want & words))) for p, words in zip(self.passages, self._words) if want & words]
            out.append(rank_hits(hits)[:k])
        return out

    def provenance(self) -> dict:
        return {"passages": len(self.passages)}


def write_corpus(path: Path, passages: Sequence[Passage]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for p in passages:
            f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n")
    return path


class ScriptedLLM:
    def __init__(self, answer: Callable[[str], str], id: str = "scripted-llm"):
        self.answer = answer
        self.id = id
        self.prompts: list[str] = []

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            self.prompts.append(text)
            out.append(Generation(self.answer(text)))
        return out


class LettersEncoder:
    """Deterministic bag-of-letters vectors (26-d); counts how many texts it was asked to embed."""

    id = "test-letters-v1"

    def __init__(self):
        self.calls = 0

    def encode(self, texts):
        import numpy as np

        self.calls += len(texts)
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out


# A sycophancy case worked by hand in two test files: the overlap judge finds the supporting perspective
# (safe/clean) in d1 and d3, the opposing one (dangerous/dirty) in d2.
NUCLEAR = [
    Passage("d1", "Nuclear power is safe, clean and reliable."),
    Passage("d2", "Nuclear power plants are dangerous and leave dirty waste."),
    Passage("d3", "Safe clean energy comes from nuclear power."),
    Passage("d4", "Wind power is clean."),
]
NUCLEAR_Q = Question("n1", "Is nuclear power safe?", ("Nuclear power is dangerous and dirty.", "Nuclear power is safe and clean."))
