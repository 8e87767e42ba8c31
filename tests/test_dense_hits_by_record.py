"""Dense search reads its hits' passages by record number when the index proves its rows are the store's
records (issue 36 item 2): the same hits as the lookup by id, never another passage, and the lookup by id for
an index that does not record its row order."""

from __future__ import annotations

import json

import pytest

from berds.corpora.docstore import PassageStore
from berds.errors import BerdsError
from berds.indexes.encoders import EncoderSpec
from berds.indexes.faiss import build_dense_index
from berds.retrievers.base import hits_from_records, hits_from_store
from berds.types import Question
from retrieval_fixtures import tiny_bert, word_store

pytest.importorskip("faiss")
pytest.importorskip("transformers")

QUESTIONS = [Question(f"q{i}", text, ("x",)) for i, text in
             enumerate(["apple river storm", "market harbor bridge kiwi", "storm", "kiwi apple"])]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dense-rows")
    spec = EncoderSpec(name="tiny-bert", model=str(tiny_bert(folder / "bert")), pooling="mean", max_length=32)
    word_store(folder / "store", n=200)
    build_dense_index(folder / "store", folder / "idx", encoder=spec, shard_size=64, progress=False)
    return folder, spec


def test_get_records_reads_by_record_number(built):
    store = PassageStore.open(built[0] / "store")
    every = list(store)
    assert store.get_records([5, 0, 199, 5]) == [every[5], every[0], every[199], every[5]]
    assert store.get_records([]) == []
    for bad in (200, -1, 2.5, "3"):
        with pytest.raises(BerdsError, match=rf"record number {bad!r} is not in this store \(200 passages: 0 to 199\)"):
            store.get_records([1, bad])


def test_dense_search_by_record_gives_the_hits_of_the_lookup_by_id(built):
    from berds.retrievers.dense import DenseRetriever

    folder, spec = built
    retriever = DenseRetriever(index=folder / "idx", encoder=spec)
    assert retriever.index.meta["row_order"] == "store records" and retriever._rows_are_records
    for k in (1, 7, 50, 200):
        vectors = retriever.encoder.encode_queries([q.text for q in QUESTIONS])
        by_id = hits_from_store(retriever.store, retriever.index.search(vectors, k))
        found, rows = retriever.index.search_rows(vectors, k)
        assert found == retriever.index.search(vectors, k)
        assert [[retriever.index.ids[r] for r in rs] for rs in rows] == [[pid for pid, _ in q] for q in found]
        assert hits_from_records(retriever.store, found, rows) == by_id
        assert retriever.search(QUESTIONS, k=k) == by_id  # (the retriever takes the record path)


def test_an_index_without_its_row_order_is_read_by_id(built, tmp_path, monkeypatch):
    import shutil

    from berds.retrievers.dense import DenseRetriever
    import berds.retrievers.dense as dense

    folder, spec = built
    shutil.copytree(folder / "idx", tmp_path / "idx")
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    del meta["row_order"]  # (an index built before this change, or imported)
    (tmp_path / "idx" / "meta.json").write_text(json.dumps(meta))
    retriever = DenseRetriever(index=tmp_path / "idx", encoder=spec, corpus=folder / "store")
    assert not retriever._rows_are_records

    def no_records(*args, **kwargs):
        raise AssertionError("read by record number without the index's word for it")

    expected = DenseRetriever(index=folder / "idx", encoder=spec).search(QUESTIONS, k=10)
    monkeypatch.setattr(dense, "hits_from_records", no_records)
    assert retriever.search(QUESTIONS, k=10) == expected


def test_a_changed_docids_txt_is_an_error_not_another_passage(built, tmp_path):
    import shutil

    from berds.retrievers.dense import DenseRetriever

    folder, spec = built
    shutil.copytree(folder / "idx", tmp_path / "idx")
    ids = (tmp_path / "idx" / "docids.txt").read_text().splitlines()
    ids[3], ids[4] = ids[4], ids[3]  # two rows' ids swapped: same size, same count
    (tmp_path / "idx" / "docids.txt").write_text("\n".join(ids) + "\n")
    retriever = DenseRetriever(index=tmp_path / "idx", encoder=spec, corpus=folder / "store")
    with pytest.raises(BerdsError, match=r"says row [34] is passage .* but record [34] of the passage store .* holds "
                                         r".*rebuild the index"):
        retriever.search(QUESTIONS, k=200)
