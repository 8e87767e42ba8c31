"""Pieces shared by the tests' local web servers on 127.0.0.1 (search pages, misbehaving servers)."""

from __future__ import annotations

import contextlib
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class PageHandler(BaseHTTPRequestHandler):
    """A handler with a quiet log and ``_send(status, body, content_type, **headers)`` (``Retry_After=`` becomes
    the header ``Retry-After``); subclasses write ``do_GET``/``do_POST``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, content_type: str | None = "text/html", **headers: str) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        self.wfile.write(body)


class QuietServer(ThreadingHTTPServer):
    """A threaded server that does not report a client's broken pipe: the tests' clients give up on slow pages
    by design."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serving(handler: type, host: str = "127.0.0.1") -> Iterator[QuietServer]:
    """A ``QuietServer`` for ``handler`` answering on a free port of ``host`` in a thread, shut down on leaving."""
    server = QuietServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()

