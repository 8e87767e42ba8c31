"""The DPR splitter: disjoint 100-word windows, title on every passage, stable ids."""

from __future__ import annotations

import pytest

from berds.corpora.split import Document, DprCounterIds, split_document, split_documents, word_windows
from berds.types import Passage


def words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(1, n + 1)]


def test_dpr_rule_on_a_sample_article():
    """DPR's rule, written out by hand for a 250-word article titled "Aaron".

    DPR's Wikipedia text starts with the article title (its first passage reads "Aaron Aaron ( or ; ..."),
    the words are cut into disjoint 100-word windows, the last window keeps the rest however short,
    and every passage carries the title in its own field. Ids count passages over the corpus from 1.
    """
    body = words("w", 250)
    article = Document(id="12", title="Aaron", text="( or ; ) is a prophet\n\n" + " ".join(body[6:]))
    # The article's words: "Aaron" (title line), then "(" "or" ";" ")" "is" "a" "prophet", then w7..w250.
    all_words = ["Aaron", "(", "or", ";", ")", "is", "a", "prophet"] + body[6:]
    assert len(all_words) == 252
    expected = [
        Passage(id="1", text=" ".join(all_words[0:100]), title="Aaron", source="12"),
        Passage(id="2", text=" ".join(all_words[100:200]), title="Aaron", source="12"),
        Passage(id="3", text=" ".join(all_words[200:252]), title="Aaron", source="12"),
    ]
    got = split_document(article, title_in_text=True, passage_id=DprCounterIds())
    assert got == expected
    assert got[0].text.startswith("Aaron ( or ; ) is a prophet w7 w8")
    assert got[2].text.split() == body[198:]  # the 52 last words, w199..w250
    assert [len(p.text.split()) for p in got] == [100, 100, 52]


def test_default_ids_are_per_document_and_stable():
    a = Document(id="docA", text=" ".join(words("a", 150)), title="A")
    b = Document(id="docB", text=" ".join(words("b", 20)), title="B", source="http://b.example")
    alone = split_document(b)
    together = list(split_documents([a, b]))
    assert [p.id for p in together] == ["docA-0", "docA-1", "docB-0"]
    assert together[-1] == alone[0]  # the same document gives the same passage whatever precedes it
    assert together[-1].source == "http://b.example" and together[0].source == "docA"
    assert all(p.title == "A" for p in together[:2])


def test_counter_ids_continue_across_documents_and_resume():
    docs = [Document(id=str(i), text=" ".join(words("x", 120)), title=f"T{i}") for i in range(3)]
    assert [p.id for p in split_documents(docs, passage_id=DprCounterIds())] == ["1", "2", "3", "4", "5", "6"]
    assert [p.id for p in split_documents(docs[1:], passage_id=DprCounterIds(start=3))] == ["3", "4", "5", "6"]


@pytest.mark.parametrize(
    "n_words, sizes",
    [(1, [1]), (99, [99]), (100, [100]), (101, [100, 1]), (200, [100, 100]), (250, [100, 100, 50])],
)
def test_window_sizes(n_words, sizes):
    assert [len(w.split()) for w in word_windows(" ".join(words("w", n_words)))] == sizes


def test_empty_and_whitespace_only_text_give_no_passages():
    assert word_windows("") == []
    assert word_windows(" \n\t\u00a0 ") == []
    assert split_document(Document(id="e", text="   ", title="Empty")) == []
    # With the title in the text, a body-less article is just its title.
    assert [p.text for p in split_document(Document(id="e", text="", title="Only Title"), title_in_text=True)] == ["Only Title"]


def test_any_whitespace_separates_words_and_windows_use_single_spaces():
    text = "one\ttwo\n\nthree   four\u00a0five\u2003six\r\nseven"
    assert word_windows(text, 3) == ["one two three", "four five six", "seven"]


def test_unicode_words_are_kept_intact():
    text = "naïve café Zürich 日本語の文 ελληνικά 🙂 done"
    assert word_windows(text, 4) == ["naïve café Zürich 日本語の文", "ελληνικά 🙂 done"]


def test_window_size_is_configurable_and_validated():
    assert [len(w.split()) for w in word_windows(" ".join(words("w", 10)), 4)] == [4, 4, 2]
    with pytest.raises(ValueError, match="at least 1"):
        word_windows("a b", 0)
