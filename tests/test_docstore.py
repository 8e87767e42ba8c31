"""The passage store: round trips, lookups, groups, fingerprints, atomicity, resume and error messages."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from berds.corpora.docstore import (
    PassageNotFoundError,
    PassageStore,
    PassageStoreWriter,
    load_passages_jsonl,
    upgrade_passage_store,
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
def test_round_trip_across_commits(tmp_path, compression):
    passages = make_passages(257)
    # Tiny commits so the test crosses many of them.
    store = write_passage_store(passages, tmp_path / "s", shard_size=50, compression=compression)
    assert len(store) == 257
    assert list(store) == passages
    assert list(store.ids()) == [p.id for p in passages]
    assert store.manifest["format"] == 3 and store.manifest["compression"] == compression
    assert store.manifest["files"] == {"data.mdb": (tmp_path / "s" / "data.mdb").stat().st_size}
    assert not (tmp_path / "s" / "lock.mdb").exists()
    # readers map the file's size (plus a margin), not the 1 TB the writer reserved
    assert store._env.info()["map_size"] <= max(10 << 20, (tmp_path / "s" / "data.mdb").stat().st_size + (4 << 20))
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
    a = write_passage_store(passages, tmp_path / "a", shard_size=7, compression="zlib")
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
    store = write_passage_store(tricky, tmp_path / "s", shard_size=2)
    assert list(store) == tricky
    assert store.get("ü/1") == tricky[0]
    expected = hashlib.sha256()  # the fingerprint's definition, with escapes, control characters and non-BMP text
    for p in tricky:
        expected.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    assert store.fingerprint == expected.hexdigest()


@pytest.mark.parametrize("compression", ["zlib", "none"])
def test_utf8_batches_are_the_passages_fields_encoded(tmp_path, compression):
    # ASCII records are sliced as stored, others decoded: both must give each field's own UTF-8
    passages = make_passages(5) + [
        Passage(id="ü/1", text="naïve café — 日本語 \u2028 line\nbreak", title="Zürich", source="größe"),
        Passage(id="emoji", text="🙂 " * 3, title="", source="s"),
        Passage(id="ascii-after-é", text="plain", title="", source="é"),
    ]
    store = write_passage_store(passages, tmp_path / "s", shard_size=3, compression=compression)
    batches = list(store.iter_utf8_batches(3))
    assert [len(b) for b in batches] == [3, 3, 2]
    assert [t for b in batches for t in b] == [(p.id.encode(), p.title.encode(), p.text.encode()) for p in passages]
    with pytest.raises(BerdsError, match="batch_size"):
        next(store.iter_utf8_batches(0))


def test_fingerprint_fast_path_matches_its_definition_with_groups(tmp_path):
    """The writer skips json's escaper when no field needs escaping; every mix of plain and escaped fields, with and
    without groups (a quote only in ``source``, which the fingerprint leaves out, included) hashes as defined."""
    pieces = ["plain", 'q"uote', "back\\slash", "ctl\x01", "tab\t", "naïve", "🙂", ""]
    passages, groups = [], []
    for i, (a, b, c) in enumerate(itertools.product(pieces, repeat=3)):
        passages.append(Passage(id=f"p{i}{a}", title=b, text=c, source=pieces[i % len(pieces)]))
        groups.append(None if i % 3 == 0 else f"g{i % 5}" + pieces[i % 4])
    out = tmp_path / "s"
    with PassageStoreWriter(out) as writer:
        for p, g in zip(passages, groups):
            writer.add(p, group=g)
    expected = hashlib.sha256()
    for p, g in zip(passages, groups):
        fields = [p.id, p.title, p.text] + ([g] if g is not None else [])
        expected.update(json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    store = PassageStore.open(out)
    assert store.fingerprint == expected.hexdigest() and list(store) == passages
    assert store.verify()["verified"]


def test_ids_longer_than_an_lmdb_key(tmp_path):
    """LMDB keys stop at 511 bytes; longer ids (long URLs) are keyed by their sha256 and still found exactly."""
    long_a, long_b = "https://example.org/" + "a" * 600, "https://example.org/" + "a" * 599 + "b"
    passages = [Passage(id=long_a, text="first"), Passage(id=long_b, text="second"), Passage(id="é" * 200, text="third")]
    with PassageStoreWriter(tmp_path / "s") as w:
        w.add_many(passages)
        with pytest.raises(InputError, match="first added as passage number 1"):
            w.add(Passage(id=long_a, text="again"))
    store = PassageStore.open(tmp_path / "s")
    assert [store.get(p.id) for p in passages] == passages
    assert store.get_many([long_b, long_a, "é" * 200]) == [passages[1], passages[0], passages[2]]
    assert long_a[:-1] not in store and list(store.ids()) == [p.id for p in passages]
    assert store.verify()["verified"]


def test_duplicate_id_is_rejected_at_add(tmp_path):
    with PassageStoreWriter(tmp_path / "s", shard_size=10) as w:
        w.add_many(make_passages(35))
        with pytest.raises(InputError, match=r"duplicate passage id 'p3' \(first added as passage number 4\)"):
            w.add(Passage(id="p3", text="again"))  # committed long ago
        with pytest.raises(InputError, match="duplicate passage id 'p34'"):  # still in the open transaction
            w.add(Passage(id="p34", text="again"))
        with pytest.raises(InputError, match="group must be a non-empty string"):
            w.add(Passage(id="new", text="x"), group="")
        w.add(Passage(id="new", text="x"))  # a rejected add left nothing behind
    store = PassageStore.open(tmp_path / "s")
    assert len(store) == 36 and store.get("p3").text == make_passages(4)[3].text


def test_missing_id_error_names_id_and_store(tmp_path):
    store = write_passage_store(make_passages(3), tmp_path / "s")
    with pytest.raises(PassageNotFoundError) as info:
        store.get("nope")
    assert isinstance(info.value, KeyError) and isinstance(info.value, InputError)
    message = str(info.value)
    assert "'nope'" in message and str(tmp_path / "s") in message and "3 passages" in message
    with pytest.raises(PassageNotFoundError, match="'nope'"):
        store.get_many(["p0", "nope", "p1"])
    for bad in ("", 17, None):
        with pytest.raises(PassageNotFoundError):
            store.get(bad)
        with pytest.raises(PassageNotFoundError):
            store.get_many(["p0", bad])
        assert bad not in store


def test_groups(tmp_path):
    with PassageStoreWriter(tmp_path / "s", shard_size=2) as w:
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
    with PassageStoreWriter(reference, shard_size=20) as w:
        for p, g in zip(passages, groups):
            w.add(p, group=g)
    out = tmp_path / "s"
    with pytest.raises(RuntimeError):
        with PassageStoreWriter(out, shard_size=20) as w:
            for p, g in zip(passages[:67], groups[:67]):
                w.add(p, group=g)
            raise RuntimeError("killed")
    assert not out.exists()
    w = PassageStoreWriter(out, shard_size=20, resume=True)
    assert w.resumed_passages == 60  # three committed transactions; the open one is redone
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
        with PassageStoreWriter(tmp_path / "t", shard_size=20, compression="zlib") as w:
            w.add_many(make_passages(25))
            raise RuntimeError("stop")
    with pytest.raises(InputError, match="resume with the same options"):
        PassageStoreWriter(tmp_path / "t", shard_size=10, compression="none", resume=True)


def test_resume_after_a_killed_process(tmp_path):
    """SIGKILL mid-build (no cleanup runs at all): the committed passages survive and the build resumes."""
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "s"
    code = (
        "import os, signal\n"
        "from berds.corpora.docstore import PassageStoreWriter\n"
        "from berds.types import Passage\n"
        f"w = PassageStoreWriter({str(out)!r}, shard_size=25)\n"
        "for i in range(90):\n"
        "    w.add(Passage(id=f'p{i}', text=f'text {i}'))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ}, timeout=120)
    assert proc.returncode == -signal.SIGKILL and not out.exists()
    w = PassageStoreWriter(out, shard_size=25, resume=True)
    assert w.resumed_passages == 75
    w.add_many(Passage(id=f"p{i}", text=f"text {i}") for i in range(75, 100))
    store = w.close()
    fresh = write_passage_store([Passage(id=f"p{i}", text=f"text {i}") for i in range(100)], tmp_path / "fresh")
    assert store.fingerprint == fresh.fingerprint and store.verify()["passages"] == 100


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


def test_get_many_keeps_order_and_repeats(tmp_path):
    passages = make_passages(60)
    store = write_passage_store(passages, tmp_path / "s", shard_size=25)
    assert [store.get(p.id) for p in passages] == passages
    assert store.get_many([p.id for p in reversed(passages)]) == passages[::-1]
    assert store.get_many(["p5", "p5", "p0"]) == [passages[5], passages[5], passages[0]]
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
    assert est == {"disk_bytes": 726_000 + 60_000, "data_bytes": 726_000, "index_bytes": 60_000,
                   "writer_memory_bytes": 726_000 + 4000}
    assert estimate_store_size(1000, 620, compression="zlib")["data_bytes"] < est["data_bytes"] * 0.6
    # The writer's memory is one transaction (capped) plus 4 bytes a passage, not the passages themselves.
    assert estimate_store_size(21_000_000, 620)["writer_memory_bytes"] == (64 << 20) + 84_000_000
    # The estimate holds against a real store of DPR-sized passages (within 25%).
    passages = [Passage(id=str(i), text=" ".join(f"w{(i * 7 + j) % 5000}" for j in range(100)), title=f"Title {i // 10}")
                for i in range(3000)]
    avg = sum(len(p.text.encode()) + len(p.title.encode()) for p in passages) / len(passages)
    store = write_passage_store(passages, tmp_path / "real")
    predicted = estimate_store_size(3000, avg)["disk_bytes"]
    assert 0.75 < store.info()["disk_bytes"] / predicted < 1.25, (store.info()["disk_bytes"], predicted)

    from rich.console import Console

    console = Console(record=True, width=200)
    check_disk_and_announce(tmp_path / "s", input_bytes=300_000_000, avg_passage_bytes=600, console=console)
    assert "estimate: ~500,000 passages" in console.export_text()
    with pytest.raises(BerdsError, match="not enough disk"):
        check_disk_and_announce(tmp_path / "s", input_bytes=10**17, avg_passage_bytes=600)


FORMAT1 = Path(__file__).parent / "data" / "store-format1"  # written by berds' previous hand-made format


def test_old_format_store_names_the_upgrade_and_upgrades_to_the_same_fingerprint(tmp_path):
    old = tmp_path / "old"
    shutil.copytree(FORMAT1, old)
    fingerprint = json.loads((old / "manifest.json").read_text())["fingerprint"]
    with pytest.raises(InputError, match=r"older berds \(store format 1\).*berds corpus upgrade"):
        PassageStore.open(old)
    store = upgrade_passage_store(old)
    assert store.fingerprint == fingerprint and len(store) == 30 and store.manifest["format"] == 3
    assert store.get("p7").text.endswith("naïve café") and store.group_of("p7") == "g1" and store.group_of("p8") is None
    assert store.manifest["metadata"]["source"] == "tests/test_docstore.py"
    assert sorted(p.name for p in old.iterdir()) == ["data.mdb", "groups.npy", "manifest.json"]
    assert not (tmp_path / "old.building").exists()
    assert upgrade_passage_store(old).fingerprint == fingerprint  # already current: nothing to do


def test_upgrade_refuses_a_damaged_old_store_and_leaves_it(tmp_path):
    old = tmp_path / "old"
    shutil.copytree(FORMAT1, old)
    shard = old / "passages-00001.bin"
    shard.write_bytes(shard.read_bytes()[:-40])
    with pytest.raises(InputError, match="cannot read the old-format store"):
        upgrade_passage_store(old)
    assert (old / "passages-00000.bin").exists() and json.loads((old / "manifest.json").read_text())["format"] == 1


def test_truncated_store_is_refused_on_open(tmp_path):
    write_passage_store(make_passages(500), tmp_path / "s", metadata={"source": "wiki.xml.bz2"})
    data = tmp_path / "s" / "data.mdb"
    data.write_bytes(data.read_bytes()[:-4096])
    with pytest.raises(InputError, match=r"data.mdb is .* bytes but was written as .*truncated.*rebuild it from its source \(wiki.xml.bz2\)"):
        PassageStore.open(tmp_path / "s")
    data.unlink()
    with pytest.raises(InputError, match="data.mdb is missing"):
        PassageStore.open(tmp_path / "s")


def test_verify_finds_a_damaged_passage(tmp_path):
    passages = make_passages(200)
    store = write_passage_store(passages, tmp_path / "s")
    assert store.verify() == {"passages": 200, "fingerprint": store.fingerprint, "verified": True}
    store.close()
    data = tmp_path / "s" / "data.mdb"
    needle = passages[123].text.encode()
    # Same size, so only reading everything back can tell. Every copy: LMDB's free pages may hold stale ones.
    data.write_bytes(data.read_bytes().replace(needle, b"X" + needle[1:]))
    damaged = PassageStore.open(tmp_path / "s")
    # format 3: the record's checksum finds it on every read, and names it
    named = r"damaged: record 123 \(passage 'p123'\) fails its checksum .*corpus info --verify"
    with pytest.raises(InputError, match=named):
        damaged.get("p123")
    with pytest.raises(InputError, match=named):
        damaged.verify()


@pytest.mark.parametrize("compression", ["zlib", "none"])
def test_a_damaged_record_is_reported_as_damage_by_every_read(tmp_path, compression):
    # a flipped bit in a record's header (its id length) or in its text: every way of reading it says the store
    # is damaged (never a raw UnicodeDecodeError/zlib.error, never passages with their fields shifted)
    passages = make_passages(40)
    store = write_passage_store(passages, tmp_path / "s", compression=compression)
    store.close()
    data = tmp_path / "s" / "data.mdb"
    raw = bytearray(data.read_bytes())
    head = struct.Struct("<iIII")
    # every record of p10..p29 (3-character id, "Title N", "docN"), every copy: LMDB's free pages may hold stale ones
    for value_at in [i for i in range(len(raw) - head.size) if raw[i:i + head.size] == head.pack(-1, 3, 7, 4)]:
        raw[value_at + 4] ^= 0x80  # the id length: 3 -> 131 characters, past the end of the record
    assert raw != bytearray(data.read_bytes())
    data.write_bytes(bytes(raw))
    damaged = PassageStore.open(tmp_path / "s")
    reads = [lambda: list(damaged), lambda: list(damaged.iter_batches(7)), lambda: list(damaged.iter_utf8_batches(7)),
             lambda: damaged.get_many([p.id for p in passages])]
    for read in reads:
        with pytest.raises(InputError, match="passage store is damaged"):
            read()


def test_a_lone_surrogate_is_refused_by_name(tmp_path):
    # JSON's "\ud800" escape decodes to a lone surrogate, which UTF-8 has no bytes for
    with pytest.raises(InputError, match="'bad' holds a lone surrogate") as info:
        write_passage_store([Passage("ok", "fine"), Passage("bad", "broken \ud800 escape")], tmp_path / "s")
    assert info.value.record == "bad"


def test_store_is_shared_across_threads_pickle_and_fork(tmp_path):
    import pickle
    import subprocess
    import sys
    import textwrap
    from concurrent.futures import ThreadPoolExecutor

    passages = make_passages(300)
    store = write_passage_store(passages, tmp_path / "s")
    store.get("p1")  # this thread's transaction exists before the fork
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: store.get_many([f"p{j}" for j in range(i, 300, 4)]), range(4)))
    assert [p for i in range(4) for p in got[i]] == [p for i in range(4) for p in passages[i::4]]
    assert pickle.loads(pickle.dumps(store)).get("p299") == passages[299]
    # Forked readers, in a fresh interpreter: forking this test process (which by now runs threads of torch,
    # tokenizers and Ray from other tests) can deadlock the children in those libraries' locks, not berds'.
    script = textwrap.dedent(f"""
        import multiprocessing
        from berds.corpora.docstore import PassageStore
        store = PassageStore.open({str(tmp_path / "s")!r})
        store.get("p1")  # this process's read transaction exists before the fork
        with multiprocessing.get_context("fork").Pool(2) as pool:
            print([p.id for p in pool.map(store.get, ["p0", "p150", "p299"])])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['p0', 'p150', 'p299']"
    assert store.get("p42") == passages[42]


def test_cli_upgrade_then_info_verify(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    old = tmp_path / "old"
    shutil.copytree(FORMAT1, old)
    fingerprint = json.loads((old / "manifest.json").read_text())["fingerprint"]
    runner = CliRunner()
    refused = runner.invoke(app, ["corpus", "info", str(old)])
    assert refused.exit_code != 0 and "berds corpus upgrade" in str(refused.exception)
    result = runner.invoke(app, ["corpus", "upgrade", str(old)])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())  # rich wraps long lines
    assert "30 passages in store format 3" in flat and f"fingerprint {fingerprint[:16]} unchanged" in flat
    result = runner.invoke(app, ["corpus", "info", "--verify", "--json", str(old)])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["verified"] is True and info["fingerprint"] == fingerprint and info["passages"] == 30
    data = old / "data.mdb"
    data.write_bytes(data.read_bytes().replace("naïve café".encode(), "Naïve café".encode()))
    damaged = runner.invoke(app, ["corpus", "info", "--verify", str(old)])
    assert damaged.exit_code != 0
    assert re.search(r"record \d+ \(passage 'p\d+'\) fails its checksum", str(damaged.exception))
    assert "rebuild it" in str(damaged.exception)


def test_sibling_folders_berds_did_not_make_are_never_deleted(tmp_path):
    out = tmp_path / "mydata"
    building = tmp_path / "mydata.building"
    building.mkdir()
    (building / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match=r"mydata.building: is in the way of the build: .*\(notes.txt\)"):
        PassageStoreWriter(out)
    with pytest.raises(InputError, match="is in the way"):
        PassageStoreWriter(out, resume=True)
    (building / "data.mdb").write_bytes(b"not lmdb " * 100)  # a data.mdb is not enough: it must be berds' database
    (building / "notes.txt").unlink()
    with pytest.raises(InputError, match=r"is in the way .*data.mdb is not a berds build database"):
        PassageStoreWriter(out)
    assert (building / "data.mdb").read_bytes() == b"not lmdb " * 100
    shutil.rmtree(building)
    building.write_text("a file")
    with pytest.raises(InputError, match=r"mydata.building: is in the way"):
        PassageStoreWriter(out)
    assert building.read_text() == "a file"
    building.unlink()
    # berds' own leftovers are replaced: an empty folder, and an interrupted build (without --resume)
    building.mkdir()
    write_passage_store(make_passages(3), out)
    with pytest.raises(RuntimeError):
        with PassageStoreWriter(tmp_path / "other", shard_size=2) as w:
            w.add_many(make_passages(5))
            raise RuntimeError("killed")
    store = write_passage_store(make_passages(4), tmp_path / "other")
    assert len(store) == 4 and not (tmp_path / "other.building").exists()
    # --overwrite moves the old store aside under a name of its own: a user's mydata.old stays, file or folder
    (tmp_path / "mydata.old").mkdir()
    (tmp_path / "mydata.old" / "keep.txt").write_text("mine")
    write_passage_store(make_passages(2, prefix="n"), out, overwrite=True)
    (tmp_path / "mydata.old" / "keep.txt").unlink()
    (tmp_path / "mydata.old").rmdir()
    (tmp_path / "mydata.old").write_text("a file")
    assert list(write_passage_store(make_passages(1, prefix="m"), out, overwrite=True).ids()) == ["m0"]
    assert (tmp_path / "mydata.old").read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydata", "mydata.old", "other"]


def test_a_manifest_with_fields_of_the_wrong_type_is_damage(tmp_path):
    write_passage_store(make_passages(3), tmp_path / "s", metadata={"source": "wiki.xml"})
    path = tmp_path / "s" / "manifest.json"
    good = json.loads(path.read_text())
    for key, value in [("files", "x"), ("groups", None), ("files", {"data.mdb": "12"}), ("passages", "3"),
                       ("fingerprint", 7), ("metadata", "x")]:
        path.write_text(json.dumps({**good, key: value}))
        with pytest.raises(InputError, match=rf"manifest.json is damaged \('{key}' is .*rebuild it"):
            PassageStore.open(tmp_path / "s")
    path.write_text(json.dumps(good))
    assert len(PassageStore.open(tmp_path / "s")) == 3


def test_an_out_of_range_group_number_is_damage(tmp_path):
    with PassageStoreWriter(tmp_path / "s") as w:
        w.add(Passage(id="a", text="x"), group="q1")
        w.add(Passage(id="b", text="y"), group="q2")
        w.add(Passage(id="c", text="z"))
    groups = tmp_path / "s" / "groups.npy"
    raw = groups.read_bytes()
    assert raw.endswith(struct.pack("<iii", 0, 1, -1))
    groups.write_bytes(raw[:-12] + struct.pack("<iii", 0, 7, -5))  # same size: only the numbers can tell
    store = PassageStore.open(tmp_path / "s")
    assert store.group_of("a") == "q1"
    for pid, number in (("b", 7), ("c", -5)):
        with pytest.raises(InputError, match=rf"groups.npy: the passage store is damaged \(passage '{pid}', record \d, "
                                             rf"has group number {number}; the store has 2 groups\).*rebuild"):
            store.group_of(pid)
    with pytest.raises(InputError, match=r"groups.npy: the passage store is damaged \(groups.npy holds 3 group numbers for "
                                         r"3 passages, or numbers outside its 2 groups\)"):
        store.group_numbers()  # (what BM25 indexing of a per-question corpus reads)


def test_a_second_build_of_the_same_store_at_once_is_refused(tmp_path):
    # two builds of one --out both wrote into <out>.building (LMDB lets writers take turns; the second cleared
    # the first's folder or resumed into it), and the first to finish moved it into place under the other
    out = tmp_path / "store"
    with PassageStoreWriter(out, shard_size=1) as first:
        first.add(Passage("a", "some text"))
        for resume in (False, True):
            with pytest.raises(InputError, match=r"store.building: another berds build is writing into this folder"):
                PassageStoreWriter(out, resume=resume)
        first.add(Passage("b", "more text"))
    store = PassageStore.open(out)
    assert [p.id for p in store] == ["a", "b"]
    store.verify()
    with pytest.raises(RuntimeError):  # a build that stops lets go of the folder: it can be resumed
        with PassageStoreWriter(tmp_path / "again", shard_size=1) as w:
            w.add(Passage("a", "some text"))
            raise RuntimeError
    with PassageStoreWriter(tmp_path / "again", shard_size=1, resume=True) as w:
        assert w.resumed_passages == 1
    with PassageStoreWriter(out, overwrite=True) as w:  # and a finished one too
        w.add(Passage("c", "other text"))
    assert [p.id for p in PassageStore.open(out)] == ["c"]


# -- add_many's batched writes (issue 36 item 3): the same store as add, byte for byte ---------------------------
def _database(folder) -> dict:
    """Every (key, value) of the store's three LMDB tables, as stored."""
    from berds.corpora.docstore import _reader_env

    env = _reader_env(Path(folder))  # (the store's own: LMDB opens a file once per process)
    out = {}
    for name in (b"passages", b"ids", b"meta"):
        with env.begin(db=env.open_db(name, create=False)) as txn:
            out[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor().iternext()]
    return out


def _mixed_passages(n: int) -> list[Passage]:
    texts = ["plain ascii words", 'a "quote" and a \\ backslash', "line\nbreak\ttab", "café ünïcode", "東京 𝄞", "\x01ctl", ""]
    return [Passage(("long-" + "x" * 600 + str(i)) if i % 23 == 5 else f"d{i}", texts[i % len(texts)] + f" {i}",
                    title=texts[(i + 2) % len(texts)], source=f"src{i % 4}") for i in range(n)]


@pytest.mark.parametrize("compression", ["none", "zlib"])
@pytest.mark.parametrize("grouped", [False, True])
def test_add_many_writes_the_same_bytes_as_add_one_by_one(tmp_path, compression, grouped, monkeypatch):
    import berds.corpora.docstore as docstore

    monkeypatch.setattr(docstore, "_WRITE_BATCH", 10)  # batches cut by commits (shard_size 7) and by each other
    passages = _mixed_passages(120)
    runs = [(0, 25, None), (25, 60, "qa" if grouped else None), (60, 61, None), (61, 120, "qb" if grouped else None)]
    with PassageStoreWriter(tmp_path / "one", shard_size=7, compression=compression) as w:
        for start, end, group in runs:
            for p in passages[start:end]:
                w.add(p, group=group)
    with PassageStoreWriter(tmp_path / "many", shard_size=7, compression=compression) as w:
        monkeypatch.setattr(w, "add", None)  # (the batched path, not add one by one)
        for start, end, group in runs:
            assert w.add_many(iter(passages[start:end]), group=group) == end - start
    one, many = PassageStore.open(tmp_path / "one"), PassageStore.open(tmp_path / "many")
    assert many.fingerprint == one.fingerprint and many.manifest["groups"] == one.manifest["groups"]
    assert _database(tmp_path / "many") == _database(tmp_path / "one")
    assert (tmp_path / "many" / "groups.npy").exists() == grouped
    if grouped:
        assert (tmp_path / "many" / "groups.npy").read_bytes() == (tmp_path / "one" / "groups.npy").read_bytes()
    assert list(many) == passages and [many.group_of(p.id) for p in passages] == [one.group_of(p.id) for p in passages]


def test_add_many_keeps_the_fingerprint_of_stores_written_before_it():
    # the format-2 fixture was written (and its fingerprint computed) by the per-passage writer of before
    fixture = Path(__file__).parent / "data" / "store-format2"
    store = PassageStore.open(fixture)
    pairs = [(p, store.group_of(p.id)) for p in store]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        with PassageStoreWriter(Path(tmp) / "s") as w:
            for group, run in itertools.groupby(pairs, key=lambda pair: pair[1]):
                w.add_many([p for p, _ in run], group=group)
        assert w.fingerprint == store.fingerprint == json.loads((fixture / "manifest.json").read_text())["fingerprint"]


@pytest.mark.parametrize("bad, error", [
    (Passage("d3", "again"), r"duplicate passage id 'd3' \(first added as passage number 4\)"),
    (Passage("dX", "x" * 101), r"passage 'dX' has 101 characters of text, over the limit of 100"),
    (Passage("dX", "a lone \ud800 surrogate"), r"passage 'dX' holds a lone surrogate"),
    ("not a passage", r"expected a berds.types.Passage, got str"),
])
def test_add_many_refuses_what_add_refuses_at_the_same_passage(tmp_path, monkeypatch, bad, error):
    monkeypatch.setenv("BERDS_MAX_TEXT_CHARS", "100")
    batch = [Passage(f"d{i}", f"text {i}") for i in range(8)] + [bad] + [Passage(f"e{i}", "more") for i in range(5)]
    with PassageStoreWriter(tmp_path / "s", shard_size=3) as w:
        with pytest.raises(InputError, match=error):
            w.add_many(batch)
        assert len(w) == 8  # the passages before it are in, as with add; nothing after it
        assert w.add_many([Passage("z", "after the error, the writer goes on")]) == 1
    store = PassageStore.open(tmp_path / "s")
    assert [p.id for p in store] == [f"d{i}" for i in range(8)] + ["z"] and store.verify()["verified"]


def test_add_many_refuses_an_id_repeated_inside_one_batch_and_undoes_the_batch(tmp_path):
    with PassageStoreWriter(tmp_path / "s") as w:
        w.add_many([Passage("a", "1")])
        with pytest.raises(InputError, match=r"duplicate passage id 'b' \(first added as passage number 3\)"):
            w.add_many([Passage("x", "2"), Passage("b", "3"), Passage("y", "4"), Passage("b", "5")])
        assert len(w) == 4
    store = PassageStore.open(tmp_path / "s")
    assert [p.id for p in store] == ["a", "x", "b", "y"] and store.verify()["verified"]


def test_the_record_checksum_is_zlibs_crc32_whichever_library_computes_it(tmp_path, monkeypatch):
    # ISA-L's CRC-32 (a core dependency, ~3x faster) is zlib's function: stores written with one read with the other
    import os
    import zlib

    from isal.isal_zlib import crc32 as isal_crc32

    from berds.corpora import docstore

    assert docstore._crc32 is isal_crc32  # (installed from the lock: the fast one is the one in use)
    for size in (0, 1, 15, 16, 17, 500, 4096, 100_003):
        data, start = os.urandom(size), int.from_bytes(os.urandom(4), "little")
        assert isal_crc32(data) == zlib.crc32(data) and isal_crc32(data, start) == zlib.crc32(data, start)
    passages = make_passages(50)
    write_passage_store(passages, tmp_path / "isal")
    monkeypatch.setattr(docstore, "_crc32", zlib.crc32)
    write_passage_store(passages, tmp_path / "zlib")
    assert (PassageStore.open(tmp_path / "isal").fingerprint == PassageStore.open(tmp_path / "zlib").fingerprint)
    assert list(PassageStore.open(tmp_path / "isal")) == passages  # read back, checked with zlib's
    assert PassageStore.open(tmp_path / "isal").get_records(list(range(50))) == passages
