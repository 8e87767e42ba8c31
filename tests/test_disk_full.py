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


def _limited(args, cwd, limit_bytes=LIMIT, **kw):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run(args, cwd=cwd, preexec_fn=limit, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"}, **kw)


def _docs(tmp_path):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    with open(tmp_path / "docs.jsonl", "w") as f:
        for i in range(4000):
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(words[(i + j) % 10] for j in range(60))}) + "\n")


def test_a_store_build_past_the_file_size_limit_names_the_file_and_resumes(tmp_path):
    _docs(tmp_path)
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


@pytest.mark.java
def test_a_bm25_build_past_the_file_size_limit_is_named_not_opened(tmp_path):
    # Anserini's indexer drops Lucene's write errors: the build went on to open a folder with no commit point and
    # ended in a Java traceback ("no segments* file found")
    pytest.importorskip("pyserini")
    import random

    rnd = random.Random(0)  # (words Lucene cannot compress away: its term files pass 128 KB)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(20000)]
    with open(tmp_path / "docs.jsonl", "w") as f:
        for i in range(4000):
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(rnd.choice(vocab) for _ in range(60))}) + "\n")
    subprocess.run([sys.executable, "-m", "berds", "corpus", "build", "web", "--jsonl", "docs.jsonl", "--as-passages",
                    "--out", "store", "-q"], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    done = _limited([sys.executable, "-m", "berds", "index", "bm25", "store", "--out", "idx", "-q"], tmp_path,
                    limit_bytes=128 * 1024)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.search(r"^error: \S*idx/lucene.partial: Lucene could not finish writing the index \(no segments file: "
                     r"a write failed; .*\(ulimit -f\)\)", done.stderr, re.M), done.stderr
    assert not (tmp_path / "idx" / "meta.json").exists()


def test_a_faiss_write_past_the_file_size_limit_names_the_file(tmp_path):
    pytest.importorskip("faiss")
    script = textwrap.dedent("""
        import numpy as np, faiss
        from pathlib import Path
        from berds.indexes.faiss import write_faiss
        index = faiss.IndexFlatIP(64)
        index.add(np.zeros((4000, 64), dtype="float32"))
        write_faiss(index, Path("faiss.index"))
    """)
    last = _limited([sys.executable, "-c", script], tmp_path).stderr.strip().splitlines()[-1]
    assert re.search(r"OSError: \[Errno 27\] File too large \(.*\(ulimit -f\)\).*'faiss.index'$", last), last
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # (its temporary file went)
