"""`berds rerank` locks its --out as `retrieve` does (issue 33, item 9): a second rerank into a folder another one
is writing is refused at once, before any reranking, instead of both computing to the end."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from berds.errors import InputError
from berds.io import lock_folder
from berds.rerank.catalogue import rerank_file
from berds.runs import save_run
from conftest import make_run


class _NeverReranks:
    name = "never"

    def rerank(self, run, **_):
        raise AssertionError("reranked into a folder another rerank holds")


def test_a_rerank_into_a_folder_another_one_holds_is_refused_before_reranking(tmp_path):
    run_dir = save_run(make_run(n_questions=2, depth=5, name="tiny"), tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    # the other rerank is another process (flock is held per open file, by whoever holds it)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from berds.io import lock_folder
        lock_folder({str(out)!r}, what="berds rerank")
        print("locked", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(InputError, match="another berds rerank is writing into this folder right now"):
            rerank_file(_NeverReranks(), run_dir, out)
    finally:
        holder.communicate("")
    fd = lock_folder(out, what="test")  # released when the holder ended, and rerank_file kept no lock of its own
    os.close(fd)
