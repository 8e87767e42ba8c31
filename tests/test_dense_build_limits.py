"""A dense build refused at the start (an encoder option the model cannot take) tells the fix, and the corrected
command then builds into the same folder."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.indexes.encoders import EncoderSpec
from retrieval_fixtures import tiny_bert, word_store


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("limits-bert") / "model")  # 64 positions


def test_a_max_length_beyond_the_models_positions_is_one_line_naming_the_option(tmp_path, bert):
    from berds.indexes.faiss import build_dense_index

    from berds.corpora.docstore import PassageStoreWriter
    from berds.types import Passage

    with PassageStoreWriter(tmp_path / "store") as w:  # one passage longer than the model's 64 positions
        w.add(Passage("short", "apple banana"))
        w.add(Passage("long", " ".join(["apple banana cherry"] * 40)))
    too_long = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=512)
    with pytest.raises(BerdsError, match=r"a passage of \d+ tokens is longer than the 64 positions .* "
                                         r"max_length is 512 — pass --encoder-option max_length=64"):
        build_dense_index(tmp_path / "store", tmp_path / "index", encoder=too_long, progress=False)
    fits = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=64)
    build_dense_index(tmp_path / "store", tmp_path / "index2", encoder=fits, progress=False)


def test_a_build_refused_before_writing_anything_does_not_block_the_corrected_command(tmp_path, bert):
    from berds.indexes.faiss import build_dense_index

    store = word_store(tmp_path / "store", n=20)
    wrong = EncoderSpec(name="tiny", model=str(tmp_path / "no-model-here"), pooling="mean", max_length=32)
    with pytest.raises(BerdsError):
        build_dense_index(store.path, tmp_path / "index", encoder=wrong, progress=False)
    right = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=32)
    meta = build_dense_index(store.path, tmp_path / "index", encoder=right, progress=False)
    assert meta["encoder"]["model"] == str(bert)


def test_a_run_manifest_names_the_index_build_it_searched(tmp_path, bert):
    from berds.indexes.faiss import build_dense_index
    from berds.io import sha256_file
    from berds.retrievers import retrieve
    from berds.types import Question

    store = word_store(tmp_path / "store", n=20)
    spec = EncoderSpec(name="tiny", model=str(bert), pooling="mean", max_length=32)
    build_dense_index(store.path, tmp_path / "index", encoder=spec, progress=False)
    run = retrieve("dense", [Question("q1", "apple river", ("a", "b"))], k=2, progress=False,
                   options={"index": str(tmp_path / "index"), "encoder": spec})
    assert run.manifest["retriever"]["index_meta_sha256"] == sha256_file(tmp_path / "index" / "meta.json")
