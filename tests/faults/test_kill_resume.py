"""kill -9 in the middle of a long command, then the same command again: nothing is lost, nothing is redone
twice, and the result equals an uninterrupted run (issue 15: "a SIGKILL/resume check per long command").

* ``berds eval``: ``tests/test_evaluate.py::test_killed_evaluation_resumes_and_judges_only_missing``
  (kept there, next to the other evaluation tests);
* ``berds index dense`` and ``berds corpus build web``: here.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import berds_cmd, subprocess_env

pytestmark = pytest.mark.slow


def wait_for(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the command ended (rc {proc.returncode}) before it could be killed: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the command to get going")
        time.sleep(0.02)


def test_index_dense_killed_mid_encoding_resumes_from_its_shards(tmp_path):
    pytest.importorskip("faiss")
    pytest.importorskip("transformers")
    from berds.indexes.embedding import ShardedEmbeddings
    from berds.indexes.encoders import Encoder, encoder_spec
    from retrieval_fixtures import tiny_bert, word_store

    bert = tiny_bert(tmp_path / "bert")
    store = word_store(tmp_path / "store", n=400)
    out = tmp_path / "index"

    def command(batch_size: int) -> list[str]:  # (the batch size is no part of the index: it may change on resume)
        return berds_cmd("index", "dense", str(tmp_path / "store"), "--encoder", f"transformers:{bert}", "--out", str(out),
                         "--shard-size", "50", "--batch-size", str(batch_size), "--keep-embeddings", "-q")

    proc = subprocess.Popen(command(4), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (out / "embeddings" / "shard-00001.npy").exists(), 120, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (out / "meta.json").exists(), "the kill must land mid-build"
    on_disk = len(list((out / "embeddings").glob("shard-*.npy")))
    assert 2 <= on_disk < 8

    done = subprocess.run(command(64), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["rows"] == 400 and meta["encoded_now"] == 400 - 50 * on_disk  # only what was missing
    assert (out / "docids.txt").read_text().split() == list(store.ids())
    # The shard written before the kill and the last one written after it match a fresh encoding.
    shards = ShardedEmbeddings(out / "embeddings", 400, 50)
    encoder = Encoder(encoder_spec(f"transformers:{bert}"), batch_size=64)
    passages = list(store)
    for i in (0, 7):
        fresh = encoder.encode_passages(passages[i * 50:(i + 1) * 50])
        np.testing.assert_allclose(np.asarray(shards.shard(i)), fresh, atol=1e-5)


def committed(building) -> bool:
    """Whether a store build in ``building`` has committed its first transaction (its ``state`` record, written
    with every commit, is readable by a second process: LMDB readers see only committed data)."""
    import lmdb

    if not (building / "data.mdb").is_file():
        return False
    try:
        env = lmdb.open(str(building), readonly=True, lock=False, max_dbs=3)
    except lmdb.Error:
        return False
    try:
        with env.begin() as txn:
            return txn.get(b"state", db=env.open_db(b"meta", txn=txn, create=False)) is not None
    except lmdb.Error:
        return False
    finally:
        env.close()


def test_corpus_build_killed_mid_input_resumes_to_the_same_store(tmp_path):
    """kill -9 once the build has checkpointed a shard (HTML cleaning keeps it busy long enough); then
    ``--resume`` gives exactly the store an uninterrupted build gives."""
    from berds.corpora.docstore import PassageStore

    paragraph = "<p>" + " ".join(f"word{j}" for j in range(60)) + "</p>"
    records = [{"id": f"doc{i}", "title": f"Title {i}",
                "text": f"<html><body><nav>menu</nav><article><h1>Doc {i}</h1>{paragraph * (1 + i % 3)}</article></body></html>"}
               for i in range(600)]
    source = tmp_path / "input.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "store"

    def command(target) -> list[str]:
        return berds_cmd("corpus", "build", "web", "--jsonl", str(source), "--html", "--out", str(target),
                         "--shard-size", "100", "-q")

    proc = subprocess.Popen(command(out), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: committed(tmp_path / "store.building"), 120, proc)  # a transaction of passages is committed
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with pytest.raises(Exception):
        PassageStore.open(out)  # no half store where the finished one will be

    done = subprocess.run([*command(out), "--resume"], env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kept from the interrupted build" in done.stdout + done.stderr  # it did resume, not start over
    reference = tmp_path / "reference"
    again = subprocess.run(command(reference), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    resumed, fresh = PassageStore.open(out), PassageStore.open(reference)
    assert len(resumed) == len(fresh) > 500 and resumed.fingerprint == fresh.fingerprint
    assert list(resumed) == list(fresh)


def test_retrieve_killed_mid_run_resumes_from_its_finished_batches(tmp_path):
    """``berds retrieve --out`` appends each finished batch to ``.partial.jsonl``; after kill -9 the same command
    searches only the questions not yet done and writes the same run as an uninterrupted one."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {i}?", "perspectives": ["a", "b"]}) + "\n"
                                 for i in range(40)))
    log = tmp_path / "asked.txt"

    def command(out, delay: float = 0.3) -> list[str]:  # the options are part of the run's identity: same on resume
        return berds_cmd("retrieve", "-r", "slow_retriever:SlowRetriever", "--questions", str(questions), "--k", "3",
                         "--batch-size", "4", "--out", str(out), "-o", f"delay={delay}", "-o", f"log={log}", "-q")

    out = tmp_path / "run"
    proc = subprocess.Popen(command(out), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    partial = out / ".partial.jsonl"
    # three batches committed (header + 12 questions): the asked-log alone runs ahead of what was written down
    wait_for(lambda: partial.exists() and partial.read_text().count("\n") >= 13, 120, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (out / "manifest.json").exists(), "the kill must land mid-run"
    asked_before = log.read_text().split()

    done = subprocess.run(command(out), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    asked_after = log.read_text().split()[len(asked_before):]
    assert sorted(set(asked_before) | set(asked_after)) == sorted(f"q{i}" for i in range(40))
    assert len(asked_after) < 40, "the resumed run must not search every question again"
    assert json.loads((out / "manifest.json").read_text())["timing"]["resumed"] >= 12

    reference = tmp_path / "reference"
    again = subprocess.run(command(reference), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert (out / "run.trec").read_text() == (reference / "run.trec").read_text()
    assert (out / "run.ctxs.jsonl").read_text() == (reference / "run.ctxs.jsonl").read_text()


@pytest.mark.java
def test_index_bm25_killed_mid_build_is_rebuilt_and_never_half_used(tmp_path):
    """A Lucene build cannot resume mid-way: kill -9 leaves ``lucene.partial/`` and no ``meta.json`` (so nothing
    opens the half index), and the same command again rebuilds it into an index equal to an uninterrupted one."""
    from berds.indexes.base import read_index_meta
    from berds.retrievers.bm25 import BM25Retriever
    from berds.types import Question
    from retrieval_fixtures import word_store

    word_store(tmp_path / "store", n=30000)
    out = tmp_path / "index"

    def command(target) -> list[str]:
        return berds_cmd("index", "bm25", str(tmp_path / "store"), "--out", str(target), "-q")

    proc = subprocess.Popen(command(out), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (out / "lucene.partial").is_dir(), 120, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (out / "meta.json").exists(), "the kill must land mid-build"
    with pytest.raises(Exception):
        read_index_meta(out, "bm25")  # a half-built index is never opened as if finished

    done = subprocess.run(command(out), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not (out / "lucene.partial").exists()
    reference = tmp_path / "reference"
    again = subprocess.run(command(reference), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert read_index_meta(out, "bm25")["documents"] == read_index_meta(reference, "bm25")["documents"] == 30000
    questions = [Question(f"q{i}", text, ("x",)) for i, text in enumerate(["apple river", "storm harbor quince", "kiwi"])]
    resumed, fresh = BM25Retriever(index=str(out)).search(questions, k=10), BM25Retriever(index=str(reference)).search(questions, k=10)
    assert all(len(hits) == 10 for hits in resumed)
    assert [[(h.passage.id, round(h.score, 4)) for h in hits] for hits in resumed] == \
           [[(h.passage.id, round(h.score, 4)) for h in hits] for hits in fresh]
