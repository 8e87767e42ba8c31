"""A full disk or the file-size limit ends a command with one line naming the file and the space (issue 33, item
8): no `OSError: N requested and M written` or `lmdb.Error` traceback, no bare "No space left on device". The
limit is a real one: RLIMIT_FSIZE set in a child process, as `ulimit -f` does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")
LIMIT = 256 * 1024


def _limited(args, cwd, **kw):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run(args, cwd=cwd, preexec_fn=limit, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"}, **kw)


def test_a_store_build_past_the_file_size_limit_names_the_file_and_resumes(tmp_path):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    with open(tmp_path / "docs.jsonl", "w") as f:
        for i in range(4000):
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(words[(i + j) % 10] for j in range(60))}) + "\n")
    command = [sys.executable, "-m", "berds", "corpus", "build", "web", "--jsonl", "docs.jsonl", "--as-passages",
               "--shard-size", "200", "--out", "store"]
    done = _limited(command, tmp_path)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert errors[0].startswith("error: ") and "store.building/data.mdb: File too large" in errors[0]
    assert f"files may grow to {LIMIT:,} bytes here (ulimit -f)" in errors[0] and "bytes free on its disk" in errors[0]
    resumed = subprocess.run(command + ["--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    from berds.corpora.docstore import PassageStore

    assert len(PassageStore.open(tmp_path / "store")) == 4000


def test_a_short_write_through_numpy_names_the_file(tmp_path):
    # np.save writes with fwrite: past the limit it raises "OSError: 1048576 requested and 262016 written"
    script = textwrap.dedent("""
        import numpy as np
        from berds.io import atomic_write
        with atomic_write("vectors.npy", "wb", encoding=None) as f:
            np.save(f, np.zeros((512, 512), dtype=np.float32))
    """)
    done = _limited([sys.executable, "-c", script], tmp_path)
    last = done.stderr.strip().splitlines()[-1]
    # (the CLI prints it as "error: vectors.npy: File too large (...)", see the test above)
    assert re.search(r"OSError: \[Errno 27\] File too large \(a write of [\d,]+ bytes stopped after [\d,]+; .*"
                     r"'vectors.npy'$", last), last
    assert "(ulimit -f)" in last
    assert not list(tmp_path.glob(".vectors.npy.*"))  # the temporary file went
