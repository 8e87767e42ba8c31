"""Cutting documents into passages the way DPR cut Wikipedia.

DPR's rule (Karpukhin et al. 2020, used for its 21M-passage ``psgs_w100.tsv`` and by the BERDS study for
every corpus): split the document text on whitespace into words, cut the word list into *disjoint*
windows of 100 words (the last window keeps whatever is left, however short), join each window's words
with single spaces, and store the document title with every passage (as a separate field, not inside
the passage text). In DPR's Wikipedia the article text began with the title line, which is why its
passages often start with the title; ``title_in_text=True`` reproduces that.

Passage ids are stable: by default ``"{doc_id}-{n}"`` with ``n`` counting windows from 0, so the same
document always yields the same ids whatever else is in the corpus. ``DprCounterIds`` gives DPR's own
scheme instead (a corpus-wide counter starting at 1), which is stable only for the same input in the
same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from berds.types import Passage

DEFAULT_WORDS = 100


@dataclass(frozen=True)
class Document:
    """A whole document before splitting. ``source`` is its url or original id (kept on every passage)."""

    id: str
    text: str
    title: str = ""
    source: str = ""


def word_windows(text: str, words_per_passage: int = DEFAULT_WORDS) -> list[str]:
    """``text`` as disjoint windows of ``words_per_passage`` whitespace-separated words.

    Any run of whitespace (spaces, tabs, newlines, non-breaking spaces: whatever ``str.split()`` treats
    as whitespace) separates words; each window is its words joined by one space. Empty or
    whitespace-only text gives no windows.
    """
    if words_per_passage < 1:
        raise ValueError(f"words_per_passage must be at least 1, got {words_per_passage}")
    words = text.split()
    return [" ".join(words[i : i + words_per_passage]) for i in range(0, len(words), words_per_passage)]


def doc_ids(doc: Document, n: int) -> str:
    """The default passage id: ``"{doc.id}-{n}"`` (``n`` from 0)."""
    return f"{doc.id}-{n}"


class DprCounterIds:
    """DPR's passage ids: one counter over the whole corpus, as strings ``"1"``, ``"2"``, ...

    Pass an instance as ``passage_id=`` to ``split_document``; ``start`` lets a resumed build continue.
    """

    def __init__(self, start: int = 1):
        self.next = start

    def __call__(self, doc: Document, n: int) -> str:
        pid = str(self.next)
        self.next += 1
        return pid


def split_document(
    doc: Document,
    *,
    words_per_passage: int = DEFAULT_WORDS,
    title_in_text: bool = False,
    passage_id: Callable[[Document, int], str] = doc_ids,
) -> list[Passage]:
    """Cut one document into passages (see the module docstring for the rule).

    ``title_in_text`` puts the title in front of the text before cutting, as DPR's Wikipedia text had
    it (the title's words then count toward the first window). The title is always carried on every
    passage's ``title`` field; ``source`` is ``doc.source`` or, when empty, ``doc.id``.
    """
    text = f"{doc.title}\n{doc.text}" if title_in_text and doc.title else doc.text
    source = doc.source or doc.id
    return [
        Passage(id=passage_id(doc, n), text=window, title=doc.title, source=source)
        for n, window in enumerate(word_windows(text, words_per_passage))
    ]


def split_documents(
    docs: Iterable[Document],
    *,
    words_per_passage: int = DEFAULT_WORDS,
    title_in_text: bool = False,
    passage_id: Callable[[Document, int], str] = doc_ids,
) -> Iterator[Passage]:
    """``split_document`` over a stream of documents, lazily."""
    for doc in docs:
        yield from split_document(doc, words_per_passage=words_per_passage, title_in_text=title_in_text, passage_id=passage_id)


def split_documents_batch(documents: Sequence[Any], **options: Any) -> list[Any]:
    """Corpus building on an engine: a batch of ``Document`` -> the list of their passages, in order.

    Use it as ``Recipe.function("berds.corpora.split:split_documents_batch", words_per_passage=100)``
    with ``ordered=True`` so the store is written in input order whatever the number of workers. The
    default passage ids (``"{doc_id}-{n}"``) depend only on the document, so they are the same on any
    worker; a corpus-wide counter (``DprCounterIds``) cannot be split across workers.
    """
    out: list[Any] = []
    for doc in documents:
        out.extend(split_document(doc, **options))
    return out
