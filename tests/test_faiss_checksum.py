"""A FAISS file whose bytes changed after the build is refused when it is read (issue 33, item 4): the build
records the file's SHA-256 in meta.json and ``read_faiss`` checks it while FAISS reads the file."""

from __future__ import annotations

import pytest

from berds.errors import InputError
from retrieval_fixtures import tiny_bert, word_store

pytest.importorskip("faiss")


def test_changed_vectors_in_faiss_index_are_refused_on_open(tmp_path):
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import DenseIndex, build_dense_index
    from berds.io import read_json, sha256_file

    spec = EncoderSpec(name="tiny-bert", model=str(tiny_bert(tmp_path / "bert")), pooling="mean", max_length=32)
    word_store(tmp_path / "store", n=40)
    meta = build_dense_index(tmp_path / "store", tmp_path / "idx", encoder=spec, progress=False)
    path = tmp_path / "idx" / "faiss.index"
    assert meta["faiss_sha256"] == sha256_file(path) == read_json(tmp_path / "idx" / "meta.json")["faiss_sha256"]
    DenseIndex(tmp_path / "idx").open(per_group=False)  # a clean index opens

    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 4] = b"\x00\x00\x80\x7f"  # 4 bytes of one vector: same size, still readable
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"faiss.index.*SHA-256 is not the one meta.json recorded.*"
                                         r"berds index dense .* --overwrite always"):
        DenseIndex(tmp_path / "idx").open(per_group=False)
    # (a very large index may skip the check: its cost is reading the file once more)
    DenseIndex(tmp_path / "idx", verify=False).open(per_group=False)
