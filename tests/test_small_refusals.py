"""The smaller items of issue 33 (item 12), each refused or said where it was silent or misleading."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from importlib import metadata

import pytest

from berds.errors import BerdsError, InputError


def test_a_dangling_out_symlink_is_named_as_one(tmp_path):
    from berds.io import check_writable

    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone" / "run")
    with pytest.raises(InputError, match=r"out: is a symbolic link to .*gone/run, which does not exist — create"):
        check_writable(link, folder=True)


def _store(tmp_path, n=10):
    from berds.corpora.docstore import write_passage_store
    from berds.types import Passage

    write_passage_store([Passage(f"d{i}", f"text {i}") for i in range(n)], tmp_path / "s").close()
    return tmp_path / "s" / "manifest.json"


def test_a_wrong_passage_count_in_a_store_manifest_is_refused_on_open(tmp_path):
    from berds.corpora.docstore import PassageStore

    path = _store(tmp_path)
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "passages": 11}))
    with pytest.raises(InputError, match=r"manifest.json says 11 passages, but data.mdb holds 10 passages and 10 ids"):
        PassageStore.open(tmp_path / "s")  # (an index built on it blamed itself: "the index is incomplete")


def test_a_placeholder_fingerprint_is_refused(tmp_path):
    from berds.corpora.docstore import PassageStore

    path = _store(tmp_path)
    manifest = json.loads(path.read_text())
    for fake in ("0" * 64, "abc", "G" * 64):
        path.write_text(json.dumps({**manifest, "fingerprint": fake}))
        with pytest.raises(InputError, match=r"manifest.json is damaged \('fingerprint' is .* not a SHA-256"):
            PassageStore.open(tmp_path / "s")


def test_an_entry_point_with_a_built_in_name_is_warned_about_and_a_failing_one_names_itself(tmp_path, monkeypatch):
    from berds.registry import Catalogue

    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('the plug-in fails at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [metadata.EntryPoint(name="mmr", value="somewhere:Mmr", group="berds.rerankers"),
           metadata.EntryPoint(name="broken", value="broken_plugin:Reranker", group="berds.rerankers"),
           metadata.EntryPoint(name="missing", value="no_such_module_here:Reranker", group="berds.rerankers")]
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: eps if group == "berds.rerankers" else [])
    catalogue = Catalogue("reranker", entry_point_group="berds.rerankers")
    catalogue.add("mmr", "berds.rerank.mmr:MMR")
    with pytest.warns(UserWarning, match=r"entry point mmr = somewhere:Mmr .* has the name of a built-in reranker: "
                                         r"the built-in one is used"):
        assert catalogue.spec("mmr").loader == "berds.rerank.mmr:MMR"
    with pytest.raises(RuntimeError, match="fails at import") as info:
        catalogue.create("broken")
    assert "while importing the reranker 'broken' from the entry point broken = broken_plugin:Reranker" \
           in "".join(info.value.__notes__)
    with pytest.raises(BerdsError, match=r"reranker 'missing', from the entry point missing = no_such_module_here:"
                                         r"Reranker \(group berds.rerankers\): cannot import module"):
        catalogue.create("missing")


def test_sigterm_ends_a_long_command_with_the_line_that_says_what_is_kept(tmp_path):
    # a retrieval through a plug-in that takes its time: SIGTERM (a scheduler's limit) used to end it silently
    (tmp_path / "slow_plugin.py").write_text(textwrap.dedent("""
        import sys, time
        class Slow:
            name = "slow"
            def search(self, questions, *, k):
                print("searching", file=sys.stderr, flush=True)
                time.sleep(60)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "berds", "retrieve", "-r", "slow_plugin:Slow", "--questions", "demo",
                             "--out", str(tmp_path / "run"), "-q"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr.readline().strip() == "searching"
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped (SIGTERM): finished batches are kept in OUT/.partial.jsonl" in err and "Traceback" not in err


@pytest.mark.network
def test_the_server_refuses_a_request_head_over_64_kb_even_sent_at_once(tmp_path):
    from judge_trust_fixtures import port_of, read_until_eof, served

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).encode()

    def exchange(port, pad):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"X-Pad: " + b"a" * pad + b"\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
                         + body)
            return read_until_eof(sock)

    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path) as url:
        assert exchange(port_of(url), 60_000).startswith(b"HTTP/1.1 200")
        refused = exchange(port_of(url), 100_000)
        assert refused.startswith(b"HTTP/1.1 400") and b"request head over 64 KB" in refused
        time.sleep(0.1)
        assert exchange(port_of(url), 10).startswith(b"HTTP/1.1 200")  # (the server goes on)
