"""A damaged passage store is never served or indexed silently (issue 33, items 2 and 3): a lookup checks
that the record it found carries the id asked for; a format-3 record carries a CRC-32 that every read checks
(lookups, scans, BM25 indexing, dense encoding), so a changed byte is an error naming the record and its passage;
a format-2 store's whole-store reads recompute the fingerprint on the way and stop before finishing."""

from __future__ import annotations

import random
import re
import shutil
import struct
from pathlib import Path

import lmdb
import pytest

from berds.corpora.docstore import PassageStore, StoreDamagedError, upgrade_passage_store
from berds.errors import InputError
from berds.types import Passage
from cli_fixtures import cli
from retrieval_fixtures import tiny_bert

FORMAT2 = Path(__file__).parent / "data" / "store-format2"  # written by berds before record checksums
FORMAT2_ZLIB = Path(__file__).parent / "data" / "store-format2-zlib"


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


NAMED_33 = r"damaged: record 33 \(passage 'd-0033'\) fails its checksum .*corpus info --verify .*rebuild it"


def _every_read(store):
    """Every way of reading records: lookups, scans (verified and not), groups, the full check."""
    reads = [lambda: store.get("d-0033"), lambda: store.get_many(["d-0001", "d-0033"]), store.verify,
             lambda: store.get_records([1, 33]), lambda: store.get_hits([1, 33], [1.0, 0.5])]
    for verify in (False, True):
        reads += [lambda v=verify: list(store.iter_batches(7, verify=v)),
                  lambda v=verify: list(store.iter_utf8_batches(7, verify=v)),
                  lambda v=verify: list(store.iter_passages(verify=v))]
    if store.groups():
        reads.append(lambda: [store.group_passages(g) for g in store.groups()])
    return reads


@pytest.mark.parametrize("compression", ["none", "zlib"])
@pytest.mark.parametrize("groups", [None, ["qa", "qb"]])
def test_every_read_names_a_changed_record_by_its_checksum(tmp_path, groups, compression):
    from berds.corpora.docstore import PassageStoreWriter

    with PassageStoreWriter(tmp_path / "s", compression=compression) as w:
        for i in range(60):
            w.add(Passage(f"d-{i:04d}", f"text number {i} about apples and rivers {'x' * (i % 7)}", title=f"T{i}"),
                  group=groups[i % 2] if groups else None)
    clean = PassageStore.open(tmp_path / "s")
    assert clean.format == 3 and clean.info()["format"] == 3
    assert sum(map(len, clean.iter_batches(7, verify=True))) == 60
    assert sum(map(len, clean.iter_utf8_batches(7, verify=True))) == 60
    clean.close()
    # one flipped bit in record 33's stored value (its text, or its compressed bytes)
    with lmdb.open(str(tmp_path / "s"), readonly=True, lock=False, max_dbs=3) as env:
        with env.begin(db=env.open_db(b"passages", create=False)) as txn:
            value = txn.get(struct.pack(">Q", 33))
    damaged = bytearray(value)
    damaged[len(damaged) - 8] ^= 0x04
    _change_text(tmp_path / "s", value, bytes(damaged))
    store = PassageStore.open(tmp_path / "s")
    for read in _every_read(store):
        with pytest.raises(StoreDamagedError, match=NAMED_33):
            read()
    assert store.get("d-0032").id == "d-0032"  # the others still read


@pytest.mark.parametrize("fixture", [FORMAT2, FORMAT2_ZLIB])
def test_a_format_2_store_reads_keeps_its_store_level_check_and_upgrades_to_3(tmp_path, fixture, capsys, monkeypatch):
    old = tmp_path / "old"
    shutil.copytree(fixture, old)
    store = PassageStore.open(old)
    assert store.format == 2 and store.info()["format"] == 2
    fingerprint, passages = store.fingerprint, list(store)
    groups = {p.id: store.group_of(p.id) for p in passages}
    assert len(passages) == 30 and store.get("p7").text.endswith("naïve café")
    assert store.verify()["verified"] and sum(map(len, store.iter_utf8_batches(7, verify=True))) == 30
    store.close()

    damaged = tmp_path / "damaged"
    shutil.copytree(fixture, damaged)
    if fixture == FORMAT2:  # a changed text: no record checksum, so the streamed fingerprint finds it at the end
        _change_text(damaged, "naïve café".encode(), "Naïve café".encode())
        bad = PassageStore.open(damaged)
        assert bad.get("p7").text.endswith("Naïve café")  # (a lookup cannot tell in format 2)
        for read in (lambda: list(bad.iter_batches(7, verify=True)), lambda: list(bad.iter_utf8_batches(7, verify=True)),
                     lambda: list(bad.iter_passages(verify=True))):
            with pytest.raises(StoreDamagedError, match=r"the 30 passages read do not give the fingerprint .*"
                                                        r"corpus info --verify"):
                read()
        with pytest.raises(InputError, match="upgraded copy has fingerprint"):
            upgrade_passage_store(damaged)  # never a format-3 store with a checksum over damaged text
        assert PassageStore.open(damaged).format == 2

    code, out, _ = cli(capsys, monkeypatch, "corpus", "info", old)
    assert code == 0 and "2 (records without checksums: `berds corpus upgrade" in out  # (the table's format row)
    code, out, _ = cli(capsys, monkeypatch, "corpus", "upgrade", old)  # (keeps the store's compression)
    assert code == 0 and "30 passages in store format 3" in out and f"fingerprint {fingerprint[:16]} unchanged" in out
    code, out, _ = cli(capsys, monkeypatch, "corpus", "info", old)
    assert code == 0 and "3 (each record carries a checksum)" in out
    upgraded = PassageStore.open(old)
    assert upgraded.format == 3 and upgraded.fingerprint == fingerprint
    assert upgraded.manifest["compression"] == ("zlib" if fixture == FORMAT2_ZLIB else "none")
    assert upgraded.manifest["metadata"]["upgraded_from"]["format"] == 2
    assert list(upgraded) == passages and {p.id: upgraded.group_of(p.id) for p in passages} == groups
    assert upgraded.verify()["verified"]
    assert not (tmp_path / "old.building").exists()


@pytest.mark.java
def test_index_bm25_refuses_a_damaged_store_and_finishes_nothing(tmp_path):
    pytest.importorskip("pyserini")
    from berds.indexes.bm25 import build_bm25_index

    _store(tmp_path)
    _change_text(tmp_path / "s", b"text number 33 about", b"text number 38 about")
    with pytest.raises(StoreDamagedError, match=NAMED_33):
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
    with pytest.raises(StoreDamagedError, match=NAMED_33):
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


def _stored_values(folder) -> list[bytes]:
    """Every record of the store's passage table as stored, in store order (read straight from LMDB)."""
    with lmdb.open(str(folder), readonly=True, lock=False, max_dbs=3) as env:
        with env.begin(db=env.open_db(b"passages", create=False)) as txn:
            return [bytes(v) for v in txn.cursor().iternext(keys=False, values=True)]


@pytest.mark.java
def test_random_bit_flips_and_zeroed_bytes_in_data_mdb_stop_index_bm25_naming_the_record(tmp_path, capsys, monkeypatch):
    # issue 33 item 3: 10 of 24 random bit flips (and 64 zero bytes) in data.mdb went through `index bm25` with
    # exit 0. Each trial damages one record where it lies in data.mdb (a flipped bit, or up to 64 zero bytes from
    # a random place) and the real Lucene build must stop with an error naming that record, finishing nothing.
    pytest.importorskip("pyserini")
    _store(tmp_path)
    values = _stored_values(tmp_path / "s")
    rng = random.Random(33)
    for trial, kind in enumerate(["bit"] * 6 + ["zeros"] * 2):
        n = rng.randrange(len(values))
        value, damaged = values[n], bytearray(values[n])
        start = rng.randrange(len(value))
        if kind == "bit":
            damaged[start] ^= 1 << rng.randrange(8)
        else:
            damaged[start:start + 64] = bytes(len(damaged[start:start + 64]))
        if bytes(damaged) == value:  # (zeros over zeros)
            continue
        folder = tmp_path / f"s{trial}"
        shutil.copytree(tmp_path / "s", folder)
        _change_text(folder, value, bytes(damaged))
        code, _, err = cli(capsys, monkeypatch, "index", "bm25", folder, "--out", tmp_path / f"idx{trial}", "-q")
        err = " ".join(err.split())
        assert code != 0, (trial, kind, n, start)
        named = re.search(rf"damaged: record {n} (\(passage 'd-{n:04d}'\) )?fails its checksum", err)
        assert named, (trial, kind, n, start, err)
        id_end = 16 + len(f"d-{n:04d}")  # header, then the id: damage after them leaves the id readable
        if start >= id_end:
            assert f"(passage 'd-{n:04d}')" in err, (trial, err)
        assert "corpus info --verify" in err
        assert not (tmp_path / f"idx{trial}" / "meta.json").exists()
        assert not (tmp_path / f"idx{trial}" / "lucene").exists()
        store = PassageStore.open(folder)
        with pytest.raises(StoreDamagedError, match=rf"record {n}\b"):
            list(store.iter_passages())  # (what any other whole-store reader, an export, streams)
        store.close()
