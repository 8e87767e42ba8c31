"""A shared dense index must not choose code or weights to load (issue 15, item 1).

The index's ``meta.json`` is edited to point its encoder at a model folder whose ``configuration_*.py``
writes a marker file when Python imports it (what ``trust_remote_code`` does). Opening the index for
search must refuse before anything is imported, and say how to opt in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from berds.errors import BerdsError

pytest.importorskip("faiss")
pytest.importorskip("transformers")

from retrieval_fixtures import tiny_bert, word_store  # noqa: E402

CONFIG_CODE = '''
from pathlib import Path
from transformers import BertConfig

Path({marker!r}).write_text("remote code ran")


class EvilConfig(BertConfig):
    model_type = "evil-bert"
'''


def hostile_model(folder: Path, marker: Path) -> Path:
    """A tiny BERT whose config names a custom configuration class in a .py file beside it."""
    tiny_bert(folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    config["model_type"] = "evil-bert"
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_evil.py").write_text(CONFIG_CODE.format(marker=str(marker)))
    return folder


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory):
    """A real dense index (tiny BERT), whose meta.json is then rewritten as a hostile sharer would."""
    from berds.indexes.encoders import EncoderSpec
    from berds.indexes.faiss import build_dense_index

    root = tmp_path_factory.mktemp("shared")
    honest = tiny_bert(root / "bert")
    store = word_store(root / "store", n=40)
    index = root / "index"
    build_dense_index(store, index, encoder=EncoderSpec(name="tiny", model=str(honest), max_length=32), progress=False)
    marker = root / "MARKER"
    evil = hostile_model(root / "evil-model", marker)
    meta = json.loads((index / "meta.json").read_text())
    meta["encoder"].update(model=str(evil), trust_remote_code=True)
    meta.pop("encoder_files", None)  # (the honest model's fingerprint would give the swap away; a sharer drops it)
    (index / "meta.json").write_text(json.dumps(meta))
    return index, marker, evil


def test_an_index_cannot_enable_remote_code(shared_index):
    from berds.retrievers.dense import DenseRetriever

    index, marker, evil = shared_index
    with pytest.raises(BerdsError) as err:
        DenseRetriever(index=index)
    message = str(err.value)
    assert "you did not name" in message and str(evil) in message and "trust_remote_code" in message
    assert "-o trust_index_encoder=true" in message and "-o encoder=" in message  # how to opt in
    assert not marker.exists()


def test_an_index_cannot_pick_a_local_model_even_without_remote_code(shared_index, tmp_path):
    from berds.retrievers.dense import DenseRetriever

    index, marker, evil = shared_index
    quiet = tmp_path / "index"
    quiet.mkdir()
    for child in index.iterdir():
        if child.is_file():
            (quiet / child.name).write_bytes(child.read_bytes())
    meta = json.loads((quiet / "meta.json").read_text())
    meta["encoder"]["trust_remote_code"] = False
    (quiet / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BerdsError, match="asks for the model .*evil-model.*which you did not name"):
        DenseRetriever(index=quiet)
    assert not marker.exists()


def test_the_cli_refuses_with_the_opt_in_and_no_traceback(shared_index, tmp_path):
    import subprocess

    from conftest import berds_cmd, subprocess_env

    index, marker, _ = shared_index
    done = subprocess.run(berds_cmd("retrieve", "-r", "dense", "--index", str(index), "--questions", "demo",
                                    "--k", "3", "--out", str(tmp_path / "run")),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 2, done.stderr
    assert "trust_index_encoder=true" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists() and not (tmp_path / "run" / "manifest.json").exists()


def test_explicit_opt_in_does_load_it(shared_index):
    """The counter-check: the fixture's model really runs code when the user asks for it."""
    from berds.retrievers.dense import DenseRetriever

    index, marker, _ = shared_index
    try:
        DenseRetriever(index=index, trust_index_encoder=True)
    except Exception:  # noqa: BLE001 — the hostile config need not make a working model; the import is the point
        pass
    assert marker.read_text() == "remote code ran"
    marker.unlink()
