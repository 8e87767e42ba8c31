"""A judgement cache damaged past its header, or one of the wrong layout, is one line naming the file — never a
traceback from inside sqlite3."""

from __future__ import annotations

import sqlite3

import pytest

from berds.errors import BerdsError
from berds.evaluate.cache import JudgementCache, text_digest
from berds.types import JudgePair, Verdict


def _filled(path, batches=40, size=200):
    with JudgementCache(path) as cache:
        for b in range(batches):
            pairs = [JudgePair(perspective=f"p{b}", passage=f"passage {i} " * 20) for i in range(size)]
            cache.put_many("j", "v", pairs, [Verdict(label=bool(i % 2), raw=f"batch {b}") for i in range(size)])
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def test_a_cache_damaged_past_its_header_is_named_not_a_traceback(tmp_path):
    path = tmp_path / "c.sqlite"
    _filled(path)
    size = path.stat().st_size
    with open(path, "r+b") as handle:  # the header and schema page stay whole: the file opens
        for offset in range(size // 3, size - 4096, 4096):
            handle.seek(offset + 100)
            handle.write(b"\xff" * 300)
    cache = JudgementCache(path)
    with pytest.raises(BerdsError, match=r"c\.sqlite: reading the judgement cache failed .*damaged"):
        cache.lookup("j", "v", [text_digest(f"p{b}") for b in range(40)])
    with pytest.raises(BerdsError, match=r"c\.sqlite: .*judgement cache failed"):
        cache.put_many("j", "v", [JudgePair(f"p{b}", f"passage 1 " * 20) for b in range(40)], [Verdict(True)] * 40)
    with pytest.raises(BerdsError, match="damaged"):
        cache.judges()


def test_a_cache_of_another_layout_or_schema_is_refused_in_one_line(tmp_path):
    odd = tmp_path / "odd.sqlite"
    db = sqlite3.connect(odd)
    db.execute("CREATE TABLE judgements (judge TEXT, prompt TEXT, perspective BLOB, passage BLOB, label INTEGER)")
    db.close()
    with pytest.raises(BerdsError, match="not those of a berds judgement cache"):
        JudgementCache(odd)  # (was accepted; every lookup then failed inside sqlite3: no such column)
    text = tmp_path / "text.sqlite"
    db = sqlite3.connect(text)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('schema', 'v1')")
    db.commit()
    db.close()
    with pytest.raises(BerdsError, match="schema 'v1', this berds reads 1"):
        JudgementCache(text)  # (was a ValueError from int())

