"""The serper.dev client against a hostile search endpoint (real servers on 127.0.0.1): its key goes to no other
host and never into a file, and its answer is bounded in size and time like a page fetch."""

from __future__ import annotations

import json
import threading
import time

import pytest

from berds.corpora.search import SearchError, SerperProvider, build_search_corpus
from berds.types import Question
from http_fixtures import PageHandler, QuietServer

pytestmark = pytest.mark.network

KEY = "serper-key-0123456789abcdef"


class Elsewhere(PageHandler):
    """Another host (another port): records the headers of every request it gets."""

    seen: list[dict] = []

    def do_POST(self):  # noqa: N802
        Elsewhere.seen.append(dict(self.headers))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(200, json.dumps({"organic": []}).encode(), "application/json")


class Hostile(PageHandler):
    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = self.path.strip("/").split("/")[0]
        if mode == "redirect":
            return self._send(int(self.path.split("/")[2]), b"", None, Location=self.server.elsewhere + "/search")
        if mode == "echo":  # an error body that echoes the key it was sent
            return self._send(400, f"bad query for key {self.headers['X-API-KEY']}".encode(), "text/plain")
        if mode == "endless":  # a JSON answer that never ends (no Content-Length, close-delimited)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(b'{"organic": [')
                while True:
                    self.wfile.write(b'{"link": "http://example.com/' + b"a" * 1000 + b'"},' * 100)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
            return None
        if mode == "drip":  # the status line and headers a few bytes at a time, each within the read timeout
            try:
                for i, byte in enumerate(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * 400):
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.02)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
            return None
        return self._send(404, b"", "text/plain")


@pytest.fixture()
def servers():
    Elsewhere.seen = []
    other = QuietServer(("127.0.0.1", 0), Elsewhere)
    hostile = QuietServer(("127.0.0.1", 0), Hostile)
    hostile.elsewhere = f"http://localhost:{other.server_port}"
    for srv in (other, hostile):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{hostile.server_port}"
    for srv in (other, hostile):
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_the_key_does_not_follow_a_redirect_to_another_host(servers, status):
    provider = SerperProvider(api_key=KEY, base_url=f"{servers}/redirect/{status}", retries=0)
    with pytest.raises(SearchError, match=rf"answered HTTP {status} \(a redirect\), which is not followed"):
        provider.search("a question", num=3)
    assert Elsewhere.seen == []  # (requests used to re-send the POST, X-API-KEY and all, on 307/308)


def test_an_error_body_echoing_the_key_is_scrubbed_before_failures_jsonl(servers, tmp_path):
    provider = SerperProvider(api_key=KEY, base_url=f"{servers}/echo", retries=0)
    out = tmp_path / "c"
    _, report = build_search_corpus([Question("q1", "a question", ("a", "b"))], out, provider=provider, top=3,
                                    cache_dir=tmp_path / "cache", progress=False)
    failures = (out / "failures.jsonl").read_text()
    assert "answered HTTP 400: bad query for key REDACTED" in failures
    for path in [*out.rglob("*"), *(tmp_path / "cache").rglob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_an_endless_answer_is_cut_at_its_size_limit(servers):
    provider = SerperProvider(api_key=KEY, base_url=f"{servers}/endless", retries=0, timeout=30,
                              max_response_bytes=1_000_000)
    started = time.monotonic()
    with pytest.raises(SearchError, match=r"answered more than 1,000,000 bytes — not a search response"):
        provider.search("a question", num=3)
    assert time.monotonic() - started < 10  # (it used to read until the server stopped: GBs)


def test_headers_that_drip_in_are_cut_at_the_timeout(servers):
    provider = SerperProvider(api_key=KEY, base_url=f"{servers}/drip", retries=0, timeout=1.5)
    started = time.monotonic()
    with pytest.raises(SearchError, match=r"failed after 1 attempts \(the answer was still arriving after the 1.5 s"):
        provider.search("a question", num=3)
    assert time.monotonic() - started < 5  # the drip lasts 8+ s; each byte comes well within the read timeout
