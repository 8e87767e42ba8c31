"""The passage store: round trips, lookups, groups, fingerprints, atomicity, resume and error messages."""

from __future__ import annotations

import hashlib
import json

import pytest

from berds.corpora.docstore import (
    PassageNotFoundError,
    PassageStore,
    PassageStoreWriter,
    load_passages_jsonl,
    write_passage_store,
)
from berds.errors import BerdsError, InputError
from berds.types import Passage


def make_passages(n: int, prefix: str = "p") -> list[Passage]:
    return [
        Passage(id=f"{prefix}{i}", text=f"text number {i} " + "word " * (i % 7), title=f"Title {i % 5}", source=f"doc{i // 3}")
        for i in range(n)
    ]


@pytest.mark.parametrize("compression", ["zlib", "none"])
def test_round_trip_across_shards_and_blocks(tmp_path, compression):
    passages = make_passages(257)
    # Tiny shards and blocks so the test crosses many of both.
    store = write_passage_store(passages, tmp_path / "s", shard_size=50, block_bytes=200, compression=compression)
    assert len(store) == 257
    assert list(store) == passages
    assert list(store.ids()) == [p.id for p in passages]
    assert len(store.manifest["shards"]) == 6  # 5 full shards of 50 + one of 7
    assert [s["passages"] for s in store.manifest["shards"]] == [50, 50, 50, 50, 50, 7]
    for i in (0, 49, 50, 123, 256):
        assert store.get(f"p{i}") == passages[i]
        assert store[f"p{i}"] == passages[i]
        assert f"p{i}" in store
    assert "p257" not in store and 17 not in store
    assert store.get_many(["p200", "p3", "p200", "p77"]) == [passages[200], passages[3], passages[200], passages[77]]
    batches = list(store.iter_batches(100))
    assert [len(b) for b in batches] == [100, 100, 57]
    assert [p for b in batches for p in b] == passages


def test_fingerprint_is_stable_and_content_defined(tmp_path):
    passages = make_passages(40)
    a = write_passage_store(passages, tmp_path / "a", shard_size=7, block_bytes=64)
    b = write_passage_store(passages, tmp_path / "b", shard_size=1000, compression="none")
    assert a.fingerprint == b.fingerprint  # independent of layout
    expected = hashlib.sha256()
    for p in passages:
        expected.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    assert a.fingerprint == expected.hexdigest()
    changed = passages[:-1] + [Passage(id="p39", text=passages[-1].text + "!", title=passages[-1].title)]
    c = write_passage_store(changed, tmp_path / "c")
    assert c.fingerprint != a.fingerprint
    # source is provenance, not content
    d = write_passage_store([Passage(p.id, p.text, p.title, "elsewhere") for p in passages], tmp_path / "d")
    assert d.fingerprint == a.fingerprint


def test_unicode_and_special_characters_survive(tmp_path):
    tricky = [
        Passage(id="ü/1", text="naïve café — 日本語 \u2028 line\nbreak\r\ttab \"quotes\"", title="Zürich"),
        Passage(id="emoji", text="🙂 " * 10, title=""),
        Passage(id="empty", text="", title="only a title"),
    ]
    store = write_passage_store(tricky, tmp_path / "s", block_bytes=16)
    assert list(store) == tricky
    assert store.get("ü/1") == tricky[0]


def test_duplicate_id_is_rejected_at_add(tmp_path):
    with PassageStoreWriter(tmp_path / "s", block_bytes=100, shard_size=10) as w:
        w.add_many(make_passages(30))
        with pytest.raises(InputError, match=r"duplicate passage id 'p3' \(first added as passage number 4\)"):
            w.add(Passage(id="p3", text="again"))
        with pytest.raises(InputError, match="duplicate passage id 'p29'"):  # still in the open block
            w.add(Passage(id="p29", text="again"))
    assert len(PassageStore.open(tmp_path / "s")) == 30


def test_duplicate_found_after_hash_merge(tmp_path):
    w = PassageStoreWriter(tmp_path / "s")
    w._hashes._merge_every = 8  # force the sorted-array path
    w.add_many(make_passages(20))
    with pytest.raises(InputError, match="duplicate passage id 'p1'"):
        w.add(Passage(id="p1", text="x"))
    w.close()


def test_missing_id_error_names_id_and_store(tmp_path):
    store = write_passage_store(make_passages(3), tmp_path / "s")
    with pytest.raises(PassageNotFoundError) as info:
        store.get("nope")
    assert isinstance(info.value, KeyError) and isinstance(info.value, InputError)
    message = str(info.value)
    assert "'nope'" in message and str(tmp_path / "s") in message and "3 passages" in message
    with pytest.raises(KeyError):
        store.get_many(["p0", "nope"])


def test_groups(tmp_path):
    with PassageStoreWriter(tmp_path / "s", block_bytes=50) as w:
        w.add(Passage(id="free", text="no group"))
        w.add_many([Passage(id="q1-a", text="a"), Passage(id="q1-b", text="b")], group="q1")
        w.add(Passage(id="q2-a", text="c"), group="q2")
        w.add(Passage(id="q1-c", text="d"), group="q1")
    store = PassageStore.open(tmp_path / "s")
    assert store.groups() == ["q1", "q2"]
    assert store.group_ids("q1") == ["q1-a", "q1-b", "q1-c"]
    assert store.group_ids("q2") == ["q2-a"]
    assert store.group_of("free") is None and store.group_of("q2-a") == "q2"
    assert store.manifest["groups"] == {"q1": 3, "q2": 1}
    with pytest.raises(InputError, match="group 'q3' is not in this store"):
        store.group_ids("q3")
    # Groups are part of the content: regrouping changes the fingerprint.
    plain = write_passage_store(list(store), tmp_path / "plain")
    assert plain.fingerprint != store.fingerprint


def test_open_rejects_non_stores(tmp_path):
    with pytest.raises(InputError, match="folder not found"):
        PassageStore.open(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a passage store \\(no manifest.json\\)"):
        PassageStore.open(tmp_path / "empty")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"kind": "run"}')
    with pytest.raises(InputError, match="describes a 'run'"):
        PassageStore.open(tmp_path / "other")


def test_existing_output_needs_overwrite_and_failed_build_leaves_old_store(tmp_path):
    out = tmp_path / "s"
    first = write_passage_store(make_passages(5), out)
    with pytest.raises(InputError, match="already exists"):
        PassageStoreWriter(out)
    with pytest.raises(RuntimeError):
        with PassageStoreWriter(out, overwrite=True) as w:
            w.add_many(make_passages(3, prefix="new"))
            raise RuntimeError("crash mid-build")
    # The old store is untouched by the failed overwrite.
    assert PassageStore.open(out).fingerprint == first.fingerprint
    second = write_passage_store(make_passages(3, prefix="new"), out, overwrite=True)
    assert list(second.ids()) == ["new0", "new1", "new2"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not a passage store; refusing"):
        PassageStoreWriter(tmp_path / "notes", overwrite=True)


def test_resume_after_crash_gives_the_same_store(tmp_path):
    passages = make_passages(95)
    groups = [None if i % 4 == 0 else f"g{i % 3}" for i in range(95)]
    reference = tmp_path / "ref"
    with PassageStoreWriter(reference, shard_size=20, block_bytes=100) as w:
        for p, g in zip(passages, groups):
            w.add(p, group=g)
    out = tmp_path / "s"
    with pytest.raises(RuntimeError):
        with PassageStoreWriter(out, shard_size=20, block_bytes=100) as w:
            for p, g in zip(passages[:67], groups[:67]):
                w.add(p, group=g)
            raise RuntimeError("killed")
    assert not out.exists()
    w = PassageStoreWriter(out, shard_size=20, block_bytes=100, resume=True)
    assert w.resumed_passages == 60  # three finished shards; the open one is redone
    for p, g in zip(passages[60:], groups[60:]):
        w.add(p, group=g)
    with pytest.raises(InputError, match="duplicate passage id 'p5'"):
        w.add(passages[5])  # the resumed hashes catch duplicates too
    store = w.close()
    ref = PassageStore.open(reference)
    assert store.fingerprint == ref.fingerprint
    assert list(store) == passages
    assert store.group_ids("g1") == ref.group_ids("g1")
    assert not (tmp_path / "s.building").exists()


def test_resume_with_other_options_is_refused(tmp_path):
    with pytest.raises(RuntimeError):
        with PassageStoreWriter(tmp_path / "t", shard_size=20) as w:
            w.add_many(make_passages(25))
            raise RuntimeError("stop")
    with pytest.raises(InputError, match="resume with the same options"):
        PassageStoreWriter(tmp_path / "t", shard_size=10, resume=True)


def test_empty_store(tmp_path):
    store = write_passage_store([], tmp_path / "s")
    assert len(store) == 0 and list(store) == [] and "x" not in store and store.groups() == []


def test_writer_rejects_bad_values(tmp_path):
    with pytest.raises(BerdsError, match="compression"):
        PassageStoreWriter(tmp_path / "s", compression="lz4")
    with PassageStoreWriter(tmp_path / "s") as w:
        with pytest.raises(InputError, match="expected a berds.types.Passage"):
            w.add({"id": "x", "text": "y"})


def test_load_passages_jsonl(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "text": "alpha", "title": "A"}\n\n{"id": 7, "text": "seven", "url": "http://x"}\n')
    assert list(load_passages_jsonl(path)) == [Passage("a", "alpha", "A"), Passage("7", "seven", "", "http://x")]
    path.write_text('{"id": "a", "text": "alpha"}\n{"id": "b"}\n')
    with pytest.raises(InputError, match=r"p.jsonl, line 2, record 'b': \"text\" must be a string"):
        list(load_passages_jsonl(path))
    path.write_text('{"text": "alpha"}\n')
    with pytest.raises(InputError, match=r"line 1: missing or empty \"id\""):
        list(load_passages_jsonl(path))


def test_hash_collisions_are_resolved_by_the_stored_id(tmp_path, monkeypatch):
    """Ids are indexed by a 64-bit hash; force every id onto a handful of hashes and check nothing mixes up."""
    import berds.corpora.docstore as docstore

    monkeypatch.setattr(docstore, "id_hash", lambda pid: len(pid) % 3)
    passages = make_passages(60)
    with PassageStoreWriter(tmp_path / "s", block_bytes=120, shard_size=25) as w:
        w.add_many(passages)
        with pytest.raises(InputError, match="duplicate passage id 'p42'"):
            w.add(Passage(id="p42", text="clash"))
    store = PassageStore.open(tmp_path / "s")
    assert [store.get(p.id) for p in passages] == passages
    assert store.get_many([p.id for p in reversed(passages)]) == passages[::-1]
    assert "p60" not in store
    with pytest.raises(PassageNotFoundError, match="'p61'"):
        store.get_many(["p1", "p61"])


def test_group_numbers_follow_store_order(tmp_path):
    with PassageStoreWriter(tmp_path / "s") as w:
        w.add(Passage(id="a", text="x"), group="g2")
        w.add(Passage(id="b", text="x"))
        w.add(Passage(id="c", text="x"), group="g1")
        w.add(Passage(id="d", text="x"), group="g2")
    store = PassageStore.open(tmp_path / "s")
    assert store.groups() == ["g2", "g1"]
    assert store.group_numbers().tolist() == [0, -1, 1, 0]
    assert write_passage_store(make_passages(3), tmp_path / "t").group_numbers().tolist() == [-1, -1, -1]


def test_size_estimate_and_disk_check(tmp_path):
    from berds.corpora.build import check_disk_and_announce
    from berds.corpora.docstore import estimate_store_size

    est = estimate_store_size(1000, 620)
    assert est == {"disk_bytes": 295238 + 12000, "data_bytes": 295238, "index_bytes": 12000, "writer_memory_bytes": 48000}
    assert estimate_store_size(1000, 620, compression="none")["data_bytes"] == 620_000

    from rich.console import Console

    console = Console(record=True, width=200)
    check_disk_and_announce(tmp_path / "s", input_bytes=300_000_000, avg_passage_bytes=600, console=console)
    assert "estimate: ~500,000 passages" in console.export_text()
    with pytest.raises(BerdsError, match="not enough disk"):
        check_disk_and_announce(tmp_path / "s", input_bytes=10**17, avg_passage_bytes=600)
