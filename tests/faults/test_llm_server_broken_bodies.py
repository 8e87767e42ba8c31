"""`berds llm serve` and request bodies that break off: a chunked body h11 cannot parse part-way through, and a
client that leaves in the middle of its body. Real server processes on 127.0.0.1, raw sockets."""

from __future__ import annotations

import json
import socket
import time

import pytest

from judge_trust_fixtures import port_of, read_until_eof, served

pytestmark = pytest.mark.network

HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")


def server_has_closed(sock: socket.socket) -> bool:
    """True when the server closed its side for good: bytes sent to a closed socket are answered with a reset."""
    try:
        sock.sendall(b"more")
        time.sleep(0.3)
        sock.sendall(b"more")
        time.sleep(0.3)
        sock.recv(1)
    except (ConnectionResetError, BrokenPipeError):
        return True
    return False


def test_a_chunked_body_h11_cannot_parse_is_answered_and_the_connection_and_request_let_go(tmp_path):
    """The 400 for a malformed chunk arrived, but the request being read went on waiting for its body: the
    socket stayed open as long as the client kept it, and at the body timeout the 408 was written after the
    server's FIN ('Cannot call write() after write_eof()', a traceback in the log)."""
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path,
                extra_args=["--body-timeout", "1", "--header-timeout", "3"]) as url:
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as sock:
            sock.sendall(HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\nzz\r\n")
            answer = read_until_eof(sock)
            assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1 4") == 1
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "bad_request"
            time.sleep(3.5)  # past the body timeout, then the header timeout
            assert server_has_closed(sock)
    log = (tmp_path / "server-stderr.txt").read_text()
    assert "Traceback" not in log and "write_eof" not in log, log[-2000:]


def test_a_client_leaving_in_the_middle_of_its_body_leaves_no_traceback(tmp_path):
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path) as url:
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as sock:
            sock.sendall(HEAD + b"Content-Length: 100\r\n\r\n{\"model\":")
            time.sleep(0.5)
        time.sleep(1)
    log = (tmp_path / "server-stderr.txt").read_text()
    assert "Traceback" not in log, log[-2000:]
