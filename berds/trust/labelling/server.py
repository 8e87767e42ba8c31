"""``berds label serve``: the labelling page, on Starlette + uvicorn, bound to 127.0.0.1 by default.

The page (``berds/data/label_page/``) asks for the annotator's name, then shows one pair at a time: question,
perspective and passage side by side, keys Y / N / S (skip) / U or Backspace (undo), progress. Every answer is
one POST that is committed to ``TASK/labels.sqlite`` before the reply (``berds.trust.labelling.store``).

Bounds, as ``berds llm serve`` keeps them: request bodies are read up to ``MAX_BODY`` bytes and within
``BODY_TIMEOUT`` seconds (413 / 408 past them), uvicorn holds at most ``MAX_CONNECTIONS`` at once and closes
idle keep-alive sockets. Writes must be JSON (``Content-Type: application/json``) and, when the browser says
where it comes from, come from this server's own origin: another web page open in the same browser cannot
post labels here. On 127.0.0.1 only requests for ``127.0.0.1`` or ``localhost`` are answered (a page that points
its own domain at 127.0.0.1 — DNS rebinding — is refused). The page's answer never carries the judge's verdict unless the annotator asks for it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from importlib import resources
from typing import Any

from berds.errors import BerdsError
from berds.llm.serving import ThreadedUvicorn
from berds.trust.labelling.store import LabelStore, check_annotator, next_pair
from berds.trust.labelling.task import LabelTask

MAX_BODY = 16 * 1024      # a label request is a few hundred bytes
BODY_TIMEOUT = 10.0       # seconds for the whole body to arrive
MAX_CONNECTIONS = 64
KEEP_ALIVE = 5
PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"), "/label.js": ("label.js", "text/javascript"),
              "/label.css": ("label.css", "text/css")}
SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
                    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


class _Refused(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _page_file(name: str) -> bytes:
    return resources.files("berds").joinpath("data", "label_page", name).read_bytes()


def split_title(document: str, title: str) -> tuple[str, str]:
    """``(title, body)`` of the judge's text when it is ``body + " " + title`` (or ``title + " " + body``), so the
    page shows the title apart: glued to the last sentence it read as part of it. Else ``("", document)``."""
    if title and document.endswith(" " + title):
        return title, document[: -len(title) - 1]
    if title and document.startswith(title + " "):
        return title, document[len(title) + 1:]
    return "", document


def pair_payload(task: LabelTask, store: LabelStore, annotator: str, *, show_judge: bool) -> dict[str, Any]:
    """What the page shows next for ``annotator``: the pair (or ``done``) and their progress."""
    mine = store.of(annotator)
    order = [p["pair"] for p in task.pairs]
    labelled = sum(mine.get(p) in ("yes", "no") for p in order)
    skipped = sum(mine.get(p) == "skip" for p in order)
    pair_id = next_pair(order, mine)
    pair = None
    if pair_id is not None:
        p = task.by_id()[pair_id]
        title, body = split_title(p["document"], p.get("title") or "")
        pair = {"pair": p["pair"], "qid": p["qid"], "question": p["question"], "perspective": p["perspective"],
                "passage": body, "title": title, "skipped_before": mine.get(pair_id) == "skip"}
        if show_judge:
            pair["judge"] = {"id": task.judge_id, "label": "yes" if p["judge_label"] else "no"}
    return {"annotator": annotator, "pair": pair, "done": pair_id is None,
            "progress": {"labelled": labelled, "skipped": skipped, "total": len(order)}}


def allowed_hosts(host: str) -> list[str]:
    """The ``Host`` headers the server answers: its own name for a loopback address (a web page that rebinds its
    own domain to 127.0.0.1 sends its domain and is refused), any when bound to every interface or IPv6."""
    if host in ("127.0.0.1", "localhost"):
        return ["127.0.0.1", "localhost"]
    if host in ("0.0.0.0", "") or ":" in host:
        return ["*"]
    return [host]


def build_app(task: LabelTask, store: LabelStore, *, hosts: list[str] | None = None) -> Any:
    """The Starlette application for one task (answering only requests whose ``Host`` is in ``hosts``)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    pages = {path: (_page_file(name), kind) for path, (name, kind) in PAGE_FILES.items()}
    pair_ids = set(task.by_id())
    info = {"pairs": len(task.pairs), "questions": len(task.manifest["questions"]), "k": task.manifest["k"],
            "judge": task.judge_id, "task": task.folder.name}

    def reply(payload: Any, status: int = 200) -> Any:
        return JSONResponse(payload, status_code=status, headers=SECURITY_HEADERS)

    async def page(request: Request) -> Any:
        body, kind = pages[request.url.path]
        return Response(body, media_type=kind, headers=SECURITY_HEADERS)

    async def read_json(request: Request) -> dict[str, Any]:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise _Refused("send JSON (Content-Type: application/json)", 415)
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
            raise _Refused("labels are accepted only from this server's own page", 403)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            raise _Refused(f"the request body is larger than {MAX_BODY} bytes", 413)
        chunks, size, deadline = [], 0, time.monotonic() + BODY_TIMEOUT
        stream = request.stream().__aiter__()
        while True:
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), max(0.001, deadline - time.monotonic()))
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise _Refused("the request body did not arrive in time", 408) from None
            except ClientDisconnect:
                raise _Refused("the client left before its request arrived") from None
            size += len(chunk)
            if size > MAX_BODY:
                raise _Refused(f"the request body is larger than {MAX_BODY} bytes", 413)
            chunks.append(chunk)
        try:
            body = json.loads(b"".join(chunks))
        except (ValueError, RecursionError):
            raise _Refused("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise _Refused("expected a JSON object")
        return body

    def annotator_of(value: Any) -> str:
        try:
            return check_annotator(value)
        except BerdsError as exc:
            raise _Refused(str(exc)) from None

    async def handle(request: Request, work: Any) -> Any:
        try:
            return reply(await work(request))
        except _Refused as exc:
            return reply({"error": str(exc)}, exc.status)

    async def task_info(request: Request) -> Any:
        return reply(info)

    async def next_(request: Request) -> Any:
        async def work(request: Request) -> Any:
            annotator = annotator_of(request.query_params.get("annotator"))
            show = request.query_params.get("judge") == "1"
            return await asyncio.to_thread(pair_payload, task, store, annotator, show_judge=show)
        return await handle(request, work)

    async def label(request: Request) -> Any:
        async def work(request: Request) -> Any:
            body = await read_json(request)
            annotator = annotator_of(body.get("annotator"))
            if body.get("pair") not in pair_ids:
                raise _Refused(f"pair {str(body.get('pair'))[:40]!r} is not in this task")
            if body.get("value") not in ("yes", "no", "skip"):
                raise _Refused("value must be yes, no or skip")
            await asyncio.to_thread(store.put, body["pair"], annotator, body["value"])
            return await asyncio.to_thread(pair_payload, task, store, annotator, show_judge=body.get("judge") is True)
        return await handle(request, work)

    async def undo(request: Request) -> Any:
        async def work(request: Request) -> Any:
            body = await read_json(request)
            annotator = annotator_of(body.get("annotator"))
            undone = await asyncio.to_thread(store.undo, annotator)
            payload = await asyncio.to_thread(pair_payload, task, store, annotator,
                                              show_judge=body.get("judge") is True)
            return {**payload, "undone": undone}
        return await handle(request, work)

    async def no_icon(request: Request) -> Any:
        return Response(status_code=204)  # (a 404 for the browser's own favicon request is a console error)

    routes = [Route(path, page) for path in pages] + [Route("/favicon.ico", no_icon)]
    routes += [Route("/api/task", task_info), Route("/api/next", next_), Route("/api/label", label, methods=["POST"]),
               Route("/api/undo", undo, methods=["POST"])]
    return Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts or ["*"])])


class LabelServer(ThreadedUvicorn):
    """The labelling page for ``task`` on ``host:port`` (``port=0``: any free port; read ``.url``). The socket
    is listening when the constructor returns; ``start()`` serves from a thread, ``serve_forever()`` blocks."""

    THREAD_NAME = "berds-label-server"
    WHAT = "the labelling server"

    def __init__(self, task: LabelTask, *, host: str = "127.0.0.1", port: int = 8765):
        import socket

        from berds.lazy import require

        require("uvicorn", extra="label", purpose="berds label serve")
        require("starlette", extra="label", purpose="berds label serve")
        if not 0 <= int(port) <= 65535:
            raise BerdsError(f"--port must be between 0 and 65535 (0 picks a free port), got {port}")
        self.task = task
        self.store = LabelStore(task.db_path, task.id)
        self.app = build_app(task, self.store, hosts=allowed_hosts(host))
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise BerdsError(f"cannot listen on {host}:{port}: {exc.strerror or exc} — pick another --port "
                             "(0 = any free port)") from None
        self.socket = sock
        self.port = sock.getsockname()[1]
        self._uvicorn: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def _make_uvicorn(self) -> Any:
        import uvicorn

        config = uvicorn.Config(self.app, lifespan="off", limit_concurrency=MAX_CONNECTIONS,
                                timeout_keep_alive=KEEP_ALIVE, timeout_graceful_shutdown=5,
                                h11_max_incomplete_event_size=MAX_BODY, access_log=False, log_level="warning",
                                server_header=False)
        return uvicorn.Server(config)

