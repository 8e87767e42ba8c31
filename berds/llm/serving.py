"""A uvicorn server served from a daemon thread on a socket that is already listening: the lifecycle berds'
two servers share (``berds llm serve``'s ChatServer, ``berds label serve``'s LabelServer)."""

from __future__ import annotations

import threading
import time
from typing import Any

from berds.errors import BerdsError


class ThreadedUvicorn:
    """Subclasses set ``socket`` (bound and listening), ``_uvicorn = None``, ``_thread = None``, and define
    ``_make_uvicorn()``; ``THREAD_NAME`` names the thread and ``WHAT`` the server in errors; ``_closed()``
    releases what the subclass holds once serving ends."""

    THREAD_NAME = "berds-server"
    WHAT = "the berds server"
    socket: Any
    url: str
    _uvicorn: Any
    _thread: threading.Thread | None

    def _make_uvicorn(self) -> Any:
        raise NotImplementedError

    def _closed(self) -> None:
        """Called when serving has ended, before the socket is closed."""

    def serve_forever(self) -> None:
        """Serve until ``shutdown()`` (or SIGINT/SIGTERM when run on the main thread)."""
        self._uvicorn = self._uvicorn or self._make_uvicorn()
        try:
            self._uvicorn.run(sockets=[self.socket])
        finally:
            self._closed()
            self.socket.close()

    def start(self) -> Any:
        """Serve from a daemon thread; returns once the server accepts requests."""
        self._uvicorn = self._make_uvicorn()
        self._thread = threading.Thread(target=self.serve_forever, name=self.THREAD_NAME, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._uvicorn.started:
            raise BerdsError(f"{self.WHAT} on {self.url} did not start")
        return self

    def shutdown(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
