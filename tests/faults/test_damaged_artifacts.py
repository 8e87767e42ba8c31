"""Damaged index files give a one-line error naming the file and the command that rebuilds it (issue 15, item 7).

Real indexes are built here (tiny BERT + FAISS, Lucene through pyserini), then damaged the way disks and
cut-short copies damage files: truncated, or overwritten with junk of the same size.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.types import Question
from conftest import berds_cmd, subprocess_env
from retrieval_fixtures import tiny_bert, word_store

QUESTIONS = [Question("g0", "apple river", ("x",)), Question("g1", "storm market", ("y",))]


def truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def scribble(path) -> None:
    """Same size, junk content (what a bad sector or a wrong copy leaves)."""
    path.write_bytes(b"\x5a" * path.stat().st_size)


def copy_index(src, dst):
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------------------ dense


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    pytest.importorskip("faiss")
    pytest.importorskip("transformers")
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import build_dense_index

    root = tmp_path_factory.mktemp("dense-damage")
    spec = EncoderSpec(name="tiny", model=str(tiny_bert(root / "bert")), max_length=32)
    flat = word_store(root / "store", n=60)
    grouped = word_store(root / "grouped", n=60, groups=["g0", "g1", "g2"])
    build_dense_index(flat, root / "flat", encoder=spec, shard_size=16, progress=False)
    build_dense_index(grouped, root / "grouped-index", encoder=spec, shard_size=16, progress=False)
    return root, spec, flat


@pytest.mark.parametrize("damage", [truncate, scribble], ids=["truncated", "scribbled"])
def test_a_damaged_faiss_index_is_named_with_the_rebuild_command(dense, tmp_path, damage):
    from berds.retrievers.dense import DenseRetriever

    root, spec, _ = dense
    index = copy_index(root / "flat", tmp_path / "index")
    damage(index / "faiss.index")
    with pytest.raises(InputError) as err:
        DenseRetriever(index=index, encoder=spec)
    message = str(err.value)
    assert str(index / "faiss.index") in message and "damaged index file" in message
    assert f"berds index dense {root / 'store'} --encoder tiny --out {index} --overwrite always" in message


def test_a_truncated_embedding_shard_is_named_before_any_question_is_encoded(dense, tmp_path):
    from berds.retrievers.dense import DenseRetriever

    root, spec, _ = dense
    index = copy_index(root / "grouped-index", tmp_path / "index")
    truncate(index / "embeddings" / "shard-00002.npy", keep=0.6)
    with pytest.raises(InputError) as err:
        DenseRetriever(index=index, encoder=spec)
    message = str(err.value)
    assert str(index / "embeddings" / "shard-00002.npy") in message and "damaged embedding shard" in message
    assert "berds index dense" in message and "--overwrite always" in message


def test_a_damaged_shard_is_encoded_again_when_a_build_resumes(dense, tmp_path):
    """An unfinished build whose shard on disk was cut short: the resumed build re-encodes that shard and
    ends with the same vectors as an uninterrupted one (never a partial index, never a late mmap error)."""
    from berds.indexes.embedding import ShardedEmbeddings
    from berds.indexes.faiss import build_dense_index

    root, spec, store = dense
    out = tmp_path / "index"
    done = build_dense_index(store, out, encoder=spec, shard_size=16, keep_embeddings=True, progress=False)
    want = np.concatenate(list(ShardedEmbeddings(out / "embeddings", 60, 16)))
    # Back to "unfinished", as if killed before the last step: the build marker holds the build's settings.
    (out / "meta.json").unlink()
    settings = {k: done[k] for k in ("type", "corpus_fingerprint", "encoder", "shard_size", "faiss", "dtype",
                                     "encoder_files") if k in done}
    (out / ".building.json").write_text(json.dumps(settings))
    truncate(out / "embeddings" / "shard-00001.npy", keep=0.5)
    meta = build_dense_index(store, out, encoder=spec, shard_size=16, keep_embeddings=True, progress=False)
    assert meta["encoded_now"] == 16  # only the damaged shard
    got = np.concatenate(list(ShardedEmbeddings(out / "embeddings", 60, 16)))
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_cli_reports_a_damaged_index_in_one_line(dense, tmp_path):
    root, _, _ = dense
    index = copy_index(root / "flat", tmp_path / "index")
    truncate(index / "faiss.index", keep=0.3)
    done = subprocess.run(berds_cmd("retrieve", "-r", "dense", "--index", str(index), "--questions", "demo", "--k", "3",
                                    "-o", "trust_index_encoder=true", "--out", str(tmp_path / "run")),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 2, done.stderr
    assert "faiss.index" in done.stderr and "--overwrite always" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_a_failed_faiss_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    import faiss

    from berds.indexes import faiss as faiss_module

    def broken_write(index, path):
        open(path, "wb").write(b"partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(faiss, "write_index", broken_write)
    with pytest.raises(RuntimeError, match="disk full"):
        faiss_module.write_faiss(faiss.IndexFlatIP(4), tmp_path / "faiss.index")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ bm25


@pytest.fixture(scope="module")
def bm25(tmp_path_factory):
    pytest.importorskip("jnius_config")  # (importing jnius itself would start a JVM without Anserini)
    from berds.indexes.bm25 import build_bm25_index

    root = tmp_path_factory.mktemp("bm25-damage")
    build_bm25_index(word_store(root / "store", n=50), root / "flat", progress=False)
    build_bm25_index(word_store(root / "grouped", n=50, groups=["g0", "g1"]), root / "grouped-index", progress=False)
    return root


@pytest.mark.java
def test_a_damaged_lucene_index_is_named_with_the_rebuild_command(bm25, tmp_path):
    from berds.retrievers.bm25 import BM25Retriever

    index = copy_index(bm25 / "flat", tmp_path / "index")
    biggest = max((index / "lucene").glob("_0*"), key=lambda p: p.stat().st_size)
    truncate(biggest)
    with pytest.raises(InputError) as err:
        BM25Retriever(index=index)
    message = str(err.value)
    assert "damaged index file" in message and str(index / "lucene") in message
    assert f"berds index bm25 {bm25 / 'store'} --out {index} --overwrite always" in message


@pytest.mark.java
def test_damaged_per_group_term_counts_are_named(bm25, tmp_path):
    from berds.retrievers.bm25 import BM25Retriever

    index = copy_index(bm25 / "grouped-index", tmp_path / "index")
    truncate(index / "groups" / "terms.npy", keep=0.4)
    with pytest.raises(BerdsError, match=r"groups/terms.npy: damaged index file .*berds index bm25"):
        BM25Retriever(index=index)
