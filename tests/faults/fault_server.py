"""A misbehaving web server on 127.0.0.1 for the fetcher's fault tests (a real socket server in a thread).

Paths:
  /drip          Content-Length 20,000, then one byte every ``DRIP_INTERVAL`` s (each inside any read timeout)
  /png           a PNG body with no Content-Type header
  /octets        random binary bytes with no Content-Type header
  /binary-text   binary bytes labelled text/plain
  /latin1        a French page in latin-1, ``text/html`` with no charset
  /latin1-bare   the same page with no Content-Type header at all
  /busy          429 with ``Retry-After: 1`` on the first request, then the page
  /busy-long     429 with ``Retry-After: 3600`` always
  /busy-date     503 with ``Retry-After`` as an HTTP date 1 s ahead on the first request, then the page
Every request is logged as ``(monotonic time, path)`` in ``FaultHandler.log``.
"""

from __future__ import annotations

import email.utils
import os
import threading
import time

from http_fixtures import PageHandler, QuietServer

DRIP_INTERVAL = 0.05
LATIN1_TEXT = ("Le caf\u00e9 co\u00fbte tr\u00e8s cher \u00e0 Z\u00fcrich, o\u00f9 les \u00e9l\u00e8ves "
               "fran\u00e7ais d\u00e9jeunent. ")
LATIN1_PAGE = ("<html><head><title>D\u00e9bat</title></head><body><article><p>" + LATIN1_TEXT * 12
               + "</p></article></body></html>").encode("latin-1")
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(3000)


class FaultHandler(PageHandler):
    log: list[tuple[float, str]] = []
    calls: dict[str, int] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path
        FaultHandler.log.append((time.monotonic(), path))
        n = FaultHandler.calls[path] = FaultHandler.calls.get(path, 0) + 1
        if path == "/drip":
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", "20000")
            self.end_headers()
            try:
                for _ in range(20000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(DRIP_INTERVAL)
            except (BrokenPipeError, ConnectionResetError):
                return
        elif path == "/png":
            self._send(200, PNG, None)
        elif path == "/octets":
            self._send(200, bytes(range(256)) * 8, None)
        elif path == "/binary-text":
            self._send(200, b"\x00\x01\x02binary\x03" * 50, "text/plain")
        elif path == "/latin1":
            self._send(200, LATIN1_PAGE, "text/html")
        elif path == "/latin1-bare":
            self._send(200, LATIN1_PAGE, None)
        elif path == "/busy":
            if n == 1:
                self._send(429, b"slow down", "text/plain", Retry_After="1")
            else:
                self._send(200, LATIN1_PAGE, "text/html; charset=iso-8859-1")
        elif path == "/busy-long":
            self._send(429, b"come back tomorrow", "text/plain", Retry_After="3600")
        elif path == "/busy-date":
            if n == 1:
                when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1-2 s ahead
                self._send(503, b"maintenance", "text/plain", Retry_After=when)
            else:
                self._send(200, LATIN1_PAGE, "text/html; charset=iso-8859-1")
        else:
            self._send(404, b"", "text/plain")


def start() -> tuple[QuietServer, str]:
    FaultHandler.log, FaultHandler.calls = [], {}
    server = QuietServer(("127.0.0.1", 0), FaultHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"
