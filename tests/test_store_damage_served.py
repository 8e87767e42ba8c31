"""A damaged passage store is never served or indexed silently (issue 33, items 2 and 3): a lookup checks
that the record it found carries the id asked for, and every read of the whole store that builds something
(BM25 indexing, dense encoding) recomputes the fingerprint on the way and stops before finishing."""

from __future__ import annotations

import struct

import pytest

from berds.corpora.docstore import PassageStore, StoreDamagedError
from berds.errors import InputError
from berds.types import Passage
from retrieval_fixtures import tiny_bert


def _store(tmp_path, n=60, groups=None):
    passages = [Passage(f"d-{i:04d}", f"text number {i} about apples and rivers {'x' * (i % 7)}", title=f"T{i}")
                for i in range(n)]
    from berds.corpora.docstore import PassageStoreWriter

    with PassageStoreWriter(tmp_path / "s") as w:
        for i, p in enumerate(passages):
            w.add(p, group=groups[i % len(groups)] if groups else None)
    return passages


def _point_id_at(folder, pid, other):
    """What flipped bits in the id table do: the id's entry (an LMDB node: key, then the 8-byte big-endian record
    number) names another passage's record. Every copy: LMDB's free pages may hold stale ones."""
    data = folder / "data.mdb"
    raw = data.read_bytes()
    old = pid.encode() + struct.pack(">Q", int(pid[2:]))
    assert old in raw
    data.write_bytes(raw.replace(old, pid.encode() + struct.pack(">Q", int(other[2:]))))


def _change_text(folder, old: bytes, new: bytes):
    """A same-size change inside a record's text (every copy: LMDB's free pages may hold stale ones)."""
    data = folder / "data.mdb"
    raw = data.read_bytes()
    assert old in raw and len(old) == len(new)
    data.write_bytes(raw.replace(old, new))


def test_a_damaged_id_table_never_serves_another_passage(tmp_path):
    _store(tmp_path)
    _point_id_at(tmp_path / "s", "d-0016", "d-0024")
    store = PassageStore.open(tmp_path / "s")  # (the files' sizes are unchanged: open cannot tell)
    assert store.get("d-0024").id == "d-0024"
    with pytest.raises(InputError, match=r"damaged .*sends passage id 'd-0016' to record 24, which holds passage "
                                         r"'d-0024'.*rebuild it"):
        store.get("d-0016")
    with pytest.raises(InputError, match=r"sends passage id 'd-0016' to record 24"):
        store.get_many(["d-0001", "d-0016", "d-0002"])
    assert [p.id for p in store.get_many(("d-0001", "d-0024", "d-0001"))] == ["d-0001", "d-0024", "d-0001"]


@pytest.mark.parametrize("groups", [None, ["qa", "qb"]])
def test_a_whole_store_read_finds_a_changed_text_when_it_ends(tmp_path, groups):
    _store(tmp_path, groups=groups)
    clean = PassageStore.open(tmp_path / "s")
    assert sum(map(len, clean.iter_batches(7, verify=True))) == 60
    assert sum(map(len, clean.iter_utf8_batches(7, verify=True))) == 60
    clean.close()
    _change_text(tmp_path / "s", b"text number 33 about", b"text number 38 about")
    store = PassageStore.open(tmp_path / "s")
    assert store.get("d-0033").text.startswith("text number 38")  # (a lookup cannot tell: no per-record checksum)
    for read in (lambda: list(store.iter_batches(7, verify=True)), lambda: list(store.iter_utf8_batches(7, verify=True)),
                 lambda: list(store.iter_passages(verify=True))):
        with pytest.raises(StoreDamagedError, match=r"the 60 passages read do not give the fingerprint .*"
                                                    r"corpus info --verify"):
            read()
    assert len(list(store.iter_batches(7))) == 9  # unverified reads (searching, showing) stay as they were


@pytest.mark.java
def test_index_bm25_refuses_a_damaged_store_and_finishes_nothing(tmp_path):
    pytest.importorskip("pyserini")
    from berds.indexes.bm25 import build_bm25_index

    _store(tmp_path)
    _change_text(tmp_path / "s", b"text number 33 about", b"text number 38 about")
    with pytest.raises(StoreDamagedError, match="do not give the fingerprint"):
        build_bm25_index(tmp_path / "s", tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx" / "meta.json").exists() and not (tmp_path / "idx" / "lucene").exists()


def test_index_dense_refuses_a_damaged_store_and_keeps_no_shard_to_resume_from(tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import build_dense_index

    spec = EncoderSpec(name="tiny-bert", model=str(tiny_bert(tmp_path / "bert")), pooling="mean", max_length=32)
    _store(tmp_path)
    _change_text(tmp_path / "s", b"text number 33 about", b"text number 38 about")
    import berds.indexes.faiss as faiss_module

    def no_encoding(*args, **kwargs):
        raise AssertionError("an encoder was made for a damaged store")

    monkeypatch.setattr(faiss_module, "Encoder", no_encoding)  # the whole store is checked before any encoding
    with pytest.raises(StoreDamagedError, match="do not give the fingerprint"):
        build_dense_index(tmp_path / "s", tmp_path / "idx", encoder=spec, shard_size=16, progress=False)
    assert not (tmp_path / "idx" / "meta.json").exists()
    assert not list((tmp_path / "idx").rglob("shard-*"))  # a rebuilt store has the same fingerprint: no resume


@pytest.mark.parametrize("compression", ["none", "zlib"])
def test_a_clean_store_of_any_text_passes_the_verified_reads(tmp_path, compression):
    # the fast path (ASCII, nothing to escape) and the general one must both give the manifest's fingerprint
    from berds.corpora.docstore import PassageStoreWriter

    texts = ["plain ascii", 'a "quote" and a \\ backslash', "line\nbreak\ttab", "café ünïcode", "東京 𝄞", "\x01ctl"]
    with PassageStoreWriter(tmp_path / "s", compression=compression) as w:
        for i, text in enumerate(texts * 5):
            w.add(Passage(f"d{i}", text, title=texts[(i + 1) % len(texts)]), group=["g1", "g2", None][i % 3])
    store = PassageStore.open(tmp_path / "s")
    assert sum(map(len, store.iter_batches(4, verify=True))) == 30
    assert sum(map(len, store.iter_utf8_batches(4, verify=True))) == 30
