"""``retrieve`` refuses hits that are not the passages of the corpus the run is recorded under (issue 33, item 6):
a plug-in returning a passage its corpus lacks, or one with other text, would be saved under the corpus's
fingerprint and judged."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.types import Hit, Passage, Question
from retrieval_fixtures import word_store

QUESTIONS = [Question("q1", "apple river", ("x",)), Question("q2", "storm market", ("y",))]


class StorePlugin:
    """A plug-in that says it searches ``store`` and returns its first passages, then ``extra`` for q2."""

    name = "store-plugin"

    def __init__(self, store, extra=None):
        self.store, self.extra = store, extra

    def provenance(self):
        from berds.indexes.base import corpus_record

        return {"corpus": corpus_record(self.store)}

    def search(self, questions, *, k):
        first = self.store.get_many(["p0000", "p0001"])
        out = []
        for q in questions:
            hits = [Hit(first[0], 2.0), Hit(self.extra if q.id == "q2" and self.extra else first[1], 1.0)]
            out.append(hits[:k])
        return out


@pytest.fixture
def store(tmp_path):
    return word_store(tmp_path / "store", n=20)


def test_hits_from_outside_the_corpus_are_refused_before_the_run_is_saved(tmp_path, store):
    from berds.retrievers.retrieve import retrieve

    run = retrieve(StorePlugin(store), QUESTIONS, k=2, out=tmp_path / "ok", progress=False)
    assert [h.passage.id for h in run.hits["q2"]] == ["p0000", "p0001"]
    with pytest.raises(BerdsError, match=r"returned 1 passages that are not in its corpus .*'zzz'"):
        retrieve(StorePlugin(store, Passage("zzz", "a passage from elsewhere")), QUESTIONS, k=2,
                 out=tmp_path / "foreign", progress=False)
    assert not (tmp_path / "foreign" / "manifest.json").exists()
    edited = store.get("p0005")
    with pytest.raises(BerdsError, match=r"1 passages whose text or title differs from its corpus .*'p0005'"):
        retrieve(StorePlugin(store, Passage("p0005", edited.text + " Yes.", edited.title)), QUESTIONS, k=2,
                 progress=False)
