"""The second new-user walk of the README from a fresh clone: messages that pointed nowhere or were cut mid-word."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from berds.cli import main
from berds.errors import BerdsError
from http_fixtures import PageHandler, serving

ROOT = Path(__file__).resolve().parents[1]


def cli(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """Run the CLI in this process; (exit status, stderr) with lines unwrapped."""
    monkeypatch.setenv("COLUMNS", "1000")
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    return code, capsys.readouterr().err


@pytest.mark.parametrize("option", ["--jsonl", "--warc"])
def test_a_glob_that_matched_nothing_is_called_a_pattern(tmp_path, capsys, monkeypatch, option):
    # the shell hands an unmatched `sphere-shard-*.jsonl` over as its literal text
    monkeypatch.chdir(tmp_path)
    code, err = cli(capsys, monkeypatch, "corpus", "build", "web", option, "shard-*.jsonl", "--out", "c")
    assert code == 2
    assert "shard-*.jsonl: no file matches this pattern" in err
    code, err = cli(capsys, monkeypatch, "corpus", "build", "web", option, "one.jsonl", "--out", "c")
    assert code == 2 and "one.jsonl: file not found" in err


@pytest.mark.parametrize("option, expected", [("--dpr-tsv", "psgs_w100.tsv from the DPR release"),
                                              ("--dump", "pages-articles XML dump")])
def test_a_missing_wikipedia_input_says_what_the_option_takes(tmp_path, capsys, monkeypatch, option, expected):
    monkeypatch.chdir(tmp_path)
    code, err = cli(capsys, monkeypatch, "corpus", "build", "wikipedia", option, "psgs_w100.tsv", "--out", "w")
    assert code == 2
    assert "psgs_w100.tsv: file not found — " in err and expected in err and option in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Missing(PageHandler):
    def do_GET(self):
        self._send(404, b"no such file", "text/plain")


def test_a_failed_delphi_download_says_why_in_a_few_words(tmp_path, monkeypatch):
    from berds.questions import load_questions

    monkeypatch.setenv("BERDS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BERDS_DATA_DIR", raising=False)
    for var in ("BERDS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    # requests' own text nests urllib3's and was cut at 200 characters, mid-word
    monkeypatch.setenv("BERDS_DELPHI_URL", f"http://127.0.0.1:{_free_port()}/delphi.jsonl")
    with pytest.raises(BerdsError) as refused:
        load_questions("delphi", require_perspectives=False)
    assert "connection refused by 127.0.0.1:" in str(refused.value)
    assert "HTTPConnectionPool" not in str(refused.value) and "Caused by" not in str(refused.value)
    with serving(Missing) as server:
        monkeypatch.setenv("BERDS_DELPHI_URL", f"http://127.0.0.1:{server.server_port}/delphi.jsonl")
        with pytest.raises(BerdsError, match=r"delphi.jsonl: HTTP 404 Not Found — download the file"):
            load_questions("delphi", require_perspectives=False)


def test_split_dev_pairs_without_the_study_file_prints_one_line(tmp_path):
    # the docs run it on ../shared, which a fresh clone does not have
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "split_dev_pairs.py"),
                           str(tmp_path / "dev_pairs.tsv"), "--out", str(tmp_path / "split")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'dev_pairs.tsv'}: file not found — give the study's human-labelled dev pairs "
        "(dev_pairs.tsv, not shipped with berds)"]
