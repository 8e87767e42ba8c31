"""Files berds writes follow the umask, so runs, metrics and indexes can be shared (issue 15, item 8).

``atomic_write`` used ``tempfile.mkstemp``, which creates files 0600 whatever the umask; renamed into
place they stayed private. The umask is a process-wide setting, so each case sets it and restores it.
"""

from __future__ import annotations

import os
import stat

import pytest

from berds.io import atomic_write, write_json, write_jsonl, write_text
from berds.runs import save_run
from conftest import make_run


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=["umask-022", "umask-002", "umask-077"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_respect_the_umask(tmp_path, umask):
    want = 0o666 & ~umask
    write_text(tmp_path / "a.txt", "x")
    write_json(tmp_path / "b.json", {"a": 1})
    write_jsonl(tmp_path / "c.jsonl", [{"a": 1}])
    with atomic_write(tmp_path / "d.bin", "wb", encoding=None) as f:
        f.write(b"\0")
    for name in ("a.txt", "b.json", "c.jsonl", "d.bin"):
        assert mode(tmp_path / name) == want, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.json", "c.jsonl", "d.bin"]  # no temp files left


def test_a_saved_run_is_readable_by_the_group_and_others_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        folder = save_run(make_run(), tmp_path / "run")
    finally:
        os.umask(old)
    assert {p.name: oct(mode(p)) for p in folder.iterdir()} == {
        "manifest.json": "0o644", "run.trec": "0o644", "run.ctxs.jsonl": "0o644"}


def test_a_faiss_index_file_respects_the_umask(tmp_path):
    faiss = pytest.importorskip("faiss")
    from berds.indexes.faiss import write_faiss

    old = os.umask(0o022)
    try:
        write_faiss(faiss.IndexFlatIP(4), tmp_path / "faiss.index")
    finally:
        os.umask(old)
    assert mode(tmp_path / "faiss.index") == 0o644


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text("{}")
    os.chmod(target, 0o640)  # the user's choice for this file
    old = os.umask(0o022)
    try:
        write_json(target, {"new": True})
    finally:
        os.umask(old)
    assert mode(target) == 0o640 and target.read_text().startswith('{\n  "new"')


def test_a_link_keeps_pointing_and_a_pipe_is_written_not_replaced(tmp_path):
    import threading

    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"  # the link was not swapped for a file
    # something that is not a file (a pipe here; /dev/full or /dev/stdout for a user) is written to, never renamed
    # over: as root, renaming a temp file onto --out /dev/full replaced the device
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(IsADirectoryError):
        write_text(tmp_path, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "pipe", "real.txt"]  # no temp files left


def test_stdout_redirected_to_a_file_is_written_through_not_replaced(tmp_path):
    """/dev/stdout (here its target, /proc/self/fd/1: a test never writes under /dev) resolves to the file stdout
    was redirected to; that file was replaced by a rename, so `>> log` lost the log and what was printed around
    the --out went to the replaced file, nowhere."""
    import subprocess
    import sys

    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    code = ("from berds.io import write_text\nprint('before', flush=True)\n"
            "write_text('/proc/self/fd/1', 'the output\\n')\nprint('after')")
    with open(log, "a") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True, timeout=60)
    assert log.read_text() == "earlier line\nbefore\nthe output\nafter\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.txt"]


def test_a_write_the_system_refuses_names_the_users_file(tmp_path, monkeypatch):
    """A full disk shows in a write, flush or fsync with no file name: the CLI's one 'error:' line then named no
    file. Such errors now name the --out given (a link's own name, not its target or the temporary file)."""
    import errno

    real = tmp_path / "real.json"
    link = tmp_path / "out.json"
    link.symlink_to(real.name)
    with pytest.raises(OSError) as refused:
        with atomic_write(link) as f:
            raise OSError(errno.ENOSPC, "No space left on device")  # (as f.write raises it)
    assert refused.value.filename == str(link) and refused.value.errno == errno.ENOSPC

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as refused:
        write_text(link, "small enough to be buffered")
    assert refused.value.filename == str(link)
    with pytest.raises(ValueError):  # anything else passes unchanged
        with atomic_write(link) as f:
            raise ValueError("not a write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"] and not real.exists()
