"""The digests of large model files kept in $BERDS_HOME/fingerprints.json: a memo that only saves time, so a
damaged or hostile one, a file changed twice within its timestamps' granularity and years of checkpoints must
never change a local model's id nor end a run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from berds.llm import shared
from berds.llm.shared import local_fingerprint


def memo_file() -> Path:
    return Path(os.environ["BERDS_HOME"]) / "fingerprints.json"


def large_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "mistral"}')
    weights = folder / "model.safetensors"
    weights.write_bytes(os.urandom(shared._DigestMemo.SMALL + 4096))  # past the size whose digest is kept
    return weights


def test_a_damaged_or_hostile_memo_neither_ends_the_run_nor_changes_the_id(tmp_path, monkeypatch):
    monkeypatch.setattr(shared._DigestMemo, "SETTLE_NS", 0, raising=False)
    weights = large_model(tmp_path / "judge")
    memo_file().unlink(missing_ok=True)
    true_id = local_fingerprint(tmp_path / "judge")
    st = weights.stat()
    stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
    key = str(weights.resolve())
    for text in ("[" * 200_000 + "]" * 200_000,  # nested past Python's stack: was a RecursionError traceback
                 json.dumps({key: stamp + ["ab"]}),  # a digest one byte long under the file's own stamp
                 json.dumps({key: stamp + ["zz" * 32]}), json.dumps({key: stamp[:3] + [None, {}, 7]}),
                 json.dumps({key: "x"}), "[1, 2]", "null", "{", "\udcff"):
        memo_file().write_text(text, errors="surrogateescape")
        assert local_fingerprint(tmp_path / "judge") == true_id, text[:40]


def test_a_file_changed_moments_ago_is_not_remembered(tmp_path, monkeypatch):
    """Where timestamps are coarse (1 s, FAT's 2 s, a clock tick), weights rewritten in place within the tick of
    the last change leave size, inode and times as they were: a digest remembered then would be served for the
    new bytes. A file changed in the last SETTLE_NS is hashed again next time instead."""
    weights = large_model(tmp_path / "judge")
    key = str(weights.resolve())
    first = local_fingerprint(tmp_path / "judge")
    assert not memo_file().exists() or key not in json.loads(memo_file().read_text())
    monkeypatch.setattr(shared._DigestMemo, "SETTLE_NS", 0, raising=False)  # (a file changed long enough ago)
    assert local_fingerprint(tmp_path / "judge") == first
    remembered = json.loads(memo_file().read_text())[key]
    st = weights.stat()
    assert remembered[:5] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
    assert local_fingerprint(tmp_path / "judge") == first


def test_the_memo_keeps_the_most_recently_used_files_only(tmp_path, monkeypatch):
    monkeypatch.setattr(shared._DigestMemo, "SETTLE_NS", 0, raising=False)
    monkeypatch.setattr(shared._DigestMemo, "MAX_ENTRIES", 3, raising=False)
    files = [large_model(tmp_path / f"checkpoint-{i}") for i in range(5)]
    for weights in files:
        local_fingerprint(weights.parent)
    assert list(json.loads(memo_file().read_text())) == [str(f.resolve()) for f in files[2:]]


def test_a_large_file_shows_a_progress_bar_while_it_is_first_hashed(tmp_path, monkeypatch, capsys):
    """Fingerprinting a 14 GB model reads it whole once: a minute or so with nothing on the screen."""
    monkeypatch.setattr(shared._DigestMemo, "SHOWN", 2 << 20)  # (as if 2 MiB were large)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    (model / "small.safetensors").write_bytes(b"\1" * (3 << 19))  # 1.5 MiB: hashed through the memo, no bar
    first = local_fingerprint(model)
    shown = capsys.readouterr().err
    assert "fingerprinting model.safetensors" in shown and "small.safetensors" not in shown
    assert local_fingerprint(model) == first  # (the bar changes nothing about the digest)
