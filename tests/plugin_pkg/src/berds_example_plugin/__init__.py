"""An example berds retriever plug-in: rank passages by how many distinct question words they contain.

Not a good retriever; a readable one. It takes its corpus as ``corpus=`` (a berds passage store folder),
which is also how ``berds.testing.check_retriever`` hands it the tiny contract-test corpus.
"""

from __future__ import annotations

import re
from typing import Sequence

from berds.corpora.docstore import PassageStore
from berds.types import Hit, Question, rank_hits

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    """Lower-cased words of three letters or more (a crude way to skip 'a', 'of', 'to')."""
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3}


class WordOverlapRetriever:
    """Score = number of distinct question words found in the passage's title and text."""

    def __init__(self, *, corpus: str, name: str = "word-overlap"):
        self.store = PassageStore.open(corpus)
        self.name = name
        self._words = [(p, words(f"{p.title} {p.text}")) for p in self.store]

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        results = []
        for q in questions:
            wanted = words(q.text)
            scored = [Hit(p, float(len(wanted & ws))) for p, ws in self._words if wanted & ws]
            results.append(rank_hits(scored)[:k])
        return results

    def provenance(self) -> dict:
        return {"corpus": {"path": str(self.store.path), "fingerprint": self.store.fingerprint,
                           "passages": len(self.store)}}
