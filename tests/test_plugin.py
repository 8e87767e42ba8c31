"""A third-party retriever in its own installed package (tests/plugin_pkg), found through its entry point."""

from __future__ import annotations

from importlib import metadata

import pytest

from berds.retrievers import RETRIEVERS, load_retriever, retrieve
from berds.runs import load_run
from berds.testing import assert_retriever_contract, tiny_corpus, tiny_questions


@pytest.fixture(scope="module", autouse=True)
def plugin_installed():
    try:
        metadata.distribution("berds-example-plugin")
    except metadata.PackageNotFoundError:
        pytest.fail("the example plug-in is not installed: pip install -e tests/plugin_pkg (make setup does it)")


def test_the_entry_point_registers_the_plugin_without_importing_it():
    import sys

    spec = RETRIEVERS.spec("word-overlap")
    assert spec.source == "entry point (berds-example-plugin)"
    assert spec.loader == "berds_example_plugin:WordOverlapRetriever"
    assert "word-overlap" in RETRIEVERS.names()
    import subprocess

    code = ("import sys; from berds.retrievers import RETRIEVERS; RETRIEVERS.names(); "
            "print('berds_example_plugin' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_the_plugin_passes_the_contract_test(tmp_path):
    report = assert_retriever_contract("word-overlap", workdir=tmp_path)
    assert all(c.status == "pass" for c in report.checks), report.summary()


def test_the_plugin_runs_through_retrieve_and_the_cli(tmp_path, capsys):
    from berds.cli import main

    corpus = tiny_corpus(tmp_path)
    retriever = load_retriever("word-overlap", corpus=str(corpus))
    run = retrieve(retriever, tiny_questions(), k=2, out=tmp_path / "api-run", progress=False)
    assert run.hits["q-tides"][0].passage.id == "tides-1"
    assert run.manifest["corpus"]["fingerprint"] == retriever.store.fingerprint
    (tmp_path / "q.jsonl").write_text('{"id": "x1", "question": "How do chess castling rules move the king?", "perspectives": ["a"]}\n')
    main(["retrieve", "--retriever", "word-overlap", "--corpus", str(corpus), "--questions", str(tmp_path / "q.jsonl"),
          "--k", "2", "--out", str(tmp_path / "cli-run"), "-q"])
    cli_run = load_run(tmp_path / "cli-run")
    assert cli_run.hits["x1"][0].passage.id == "chess-2"
    main(["retrievers", "list"])
    assert "word-overlap" in capsys.readouterr().out
