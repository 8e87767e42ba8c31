"""``berds llm serve`` takes every option ``python -m berds.llm.server`` takes, and passes the bounds through: it
had no ``--body-timeout`` (docs/llm.md lists it), so a server started from the CLI kept the 30 s default."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from judge_trust_fixtures import read_until_eof

pytestmark = pytest.mark.network


def test_the_cli_takes_every_option_of_the_module_entry_point():
    import typer.main

    from berds.cli.llm import serve_command
    from berds.llm.server import build_parser

    module_options = {o for action in build_parser()._actions for o in action.option_strings if o.startswith("--")}
    command = typer.main.get_command_from_info(typer.models.CommandInfo(callback=serve_command),
                                               pretty_exceptions_short=True, rich_markup_mode=None)
    cli_options = {o for param in command.params for o in param.opts if o.startswith("--")}
    missing = module_options - {"--help"} - cli_options
    assert not missing, sorted(missing)


def test_berds_llm_serve_applies_its_body_timeout(tmp_path):
    tests_dir = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH", "")) if p)}
    stderr = open(tmp_path / "stderr.txt", "w")
    process = subprocess.Popen([sys.executable, "-m", "berds", "llm", "serve", "--backend", "llm_fixtures:SleepyLLM",
                                "-m", "m", "-o", "delay=0", "--port", "0", "--body-timeout", "1",
                                "--request-timeout", "60"], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not any("ready:" in line for line in lines) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        ready = re.search(r"ready: http://127\.0\.0\.1:(\d+)/v1", "".join(lines))
        assert ready, (tmp_path / "stderr.txt").read_text()[-2000:]
        port = int(ready.group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"model\":")  # and nothing more
            started = time.monotonic()
            answer = read_until_eof(sock)  # (the 408 closes the connection)
            waited = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 ") and b"--body-timeout" in answer, answer
        assert waited < 10, waited  # (the 30 s default: our 15 s socket timeout ran out first)
    finally:
        process.terminate()
        process.wait(timeout=30)
        stderr.close()
