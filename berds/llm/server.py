"""A small OpenAI-compatible HTTP server in front of any berds LLM backend.

    python -m berds.llm.server --backend transformers --model /models/mistral \\
        --option adapter=/models/berds-lora --port 8000
    berds llm serve --backend transformers --model /models/mistral --port 8000

Endpoints: ``POST /v1/chat/completions`` (with ``logprobs``/``top_logprobs``), ``GET /v1/models`` and
``GET /health``; ``POST /v1/completions`` answers scoring requests only (``echo=true`` with ``logprobs``, the
prompt's per-token log-probabilities; nothing is generated) for backends that can score (transformers). Concurrent requests are gathered into batches (up to ``max_batch_size``, waiting at most
``batch_wait`` seconds for company) and run through the backend's batched ``generate()`` on one worker
thread, so a client with many requests in flight (``OpenAILLM(concurrency=8)``) gets batched inference.

What it does not do, by design: streaming, ``n > 1``, tool calls. Log-probabilities cover the *first*
generated token only (that is what ``berds.llm.base.Generation`` carries and what the judge needs);
``usage`` is ``null`` and ``finish_reason`` is always ``"stop"``. The stdlib HTTP server is enough for
tests, a lab machine or a notebook; put a real server (``vllm serve``) in front of heavy traffic.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from berds.errors import BerdsError

ROLE_ALIASES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class RequestError(Exception):
    """A bad request: becomes an OpenAI-style error body with this HTTP status."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


@dataclass
class _Job:
    messages: list[dict[str, str]]
    max_new_tokens: int
    temperature: float
    top_logprobs: int
    result: Future = field(default_factory=Future)

    @property
    def options(self) -> tuple[int, float, int]:
        return (self.max_new_tokens, self.temperature, self.top_logprobs)


class _Batcher:
    """One worker thread that runs queued jobs through ``llm.generate`` in batches of equal options."""

    def __init__(self, llm: Any, max_batch_size: int, batch_wait: float):
        self.llm, self.max_batch_size, self.batch_wait = llm, max_batch_size, batch_wait
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.batches_run = 0
        self._thread = threading.Thread(target=self._run, name="berds-llm-batcher", daemon=True)
        self._thread.start()

    def submit(self, job: _Job) -> Future:
        self.jobs.put(job)
        return job.result

    def stop(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.batch_wait
            while len(batch) < self.max_batch_size:
                try:
                    job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self.jobs.put(None)  # stop after this batch
                    break
                batch.append(job)
            groups: dict[tuple[int, float, int], list[_Job]] = {}
            for job in batch:
                groups.setdefault(job.options, []).append(job)
            for (max_new_tokens, temperature, top_logprobs), jobs in groups.items():
                try:
                    generations = self.llm.generate([j.messages for j in jobs], max_new_tokens=max_new_tokens,
                                                    temperature=temperature, top_logprobs=top_logprobs)
                except BaseException as exc:  # delivered to each waiting request; the worker keeps going
                    for job in jobs:
                        job.result.set_exception(exc)
                else:
                    for job, generation in zip(jobs, generations):
                        job.result.set_result(generation)
                self.batches_run += 1


class ChatServer:
    """An OpenAI-compatible server for ``llm`` (any ``berds.llm.base.LLM``) on ``host:port``.

    ``port=0`` picks a free port (read it back from ``.port`` / ``.url``). When ``api_key`` is set,
    requests must carry ``Authorization: Bearer <api_key>``. Use ``start()`` to serve from a background
    thread (tests, notebooks) or ``serve_forever()`` to block.
    """

    def __init__(
        self,
        llm: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        served_model_name: str | None = None,
        api_key: str | None = None,
        max_batch_size: int = 8,
        batch_wait: float = 0.01,
        max_top_logprobs: int = 20,
        default_max_tokens: int = 256,
        default_temperature: float = 0.0,
        log_requests: bool = False,
    ):
        self.llm = llm
        self.served_model_name = served_model_name or getattr(llm, "model_name", None) or llm.id
        self.api_key = api_key
        self.max_top_logprobs = max_top_logprobs
        self.default_max_tokens = default_max_tokens
        self.default_temperature = default_temperature
        self.log_requests = log_requests
        self.created = int(time.time())
        self.batcher = _Batcher(llm, max_batch_size, batch_wait)
        self.score_lock = threading.Lock()  # scoring requests run one at a time, beside the batcher
        try:
            self.httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        except OSError as exc:
            self.batcher.stop()
            raise BerdsError(f"cannot listen on {host}:{port}: {exc.strerror or exc} — pick another --port "
                             "(0 = any free port)") from exc
        self.httpd.daemon_threads = True
        self.host = host
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API root clients use as ``base_url``, e.g. ``http://127.0.0.1:8000/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def model_names(self) -> list[str]:
        names = [self.served_model_name]
        if self.llm.id not in names:
            names.append(self.llm.id)
        return names

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.batcher.stop()
            self.httpd.server_close()

    def start(self) -> "ChatServer":
        """Serve from a daemon thread; returns at once."""
        self._thread = threading.Thread(target=self.serve_forever, name="berds-llm-server", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self.httpd.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # ------------------------------------------------------------------------ request handling

    def models_payload(self) -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "berds"}
            for name in self.model_names()
        ]}

    def parse_chat_request(self, body: Any) -> _Job:
        """Validate an OpenAI chat-completions body; raise ``RequestError`` naming the bad parameter."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        model = body.get("model")
        if model not in self.model_names():
            raise RequestError(f"The model `{model}` does not exist; this server serves "
                               f"{', '.join(self.model_names())}", status=404, param="model", code="model_not_found")
        if body.get("stream"):
            raise RequestError("streaming is not supported by the berds server", param="stream")
        if body.get("n", 1) != 1:
            raise RequestError("only n=1 is supported", param="n")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise RequestError("'messages' must be a non-empty list", param="messages")
        messages = [_parse_message(m, i) for i, m in enumerate(raw_messages)]

        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = self.default_max_tokens if max_tokens is None else max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise RequestError(f"max_tokens must be a positive integer, got {max_tokens!r}", param="max_tokens")
        temperature = body.get("temperature")
        temperature = self.default_temperature if temperature is None else temperature
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise RequestError(f"temperature must be a number in [0, 2], got {temperature!r}", param="temperature")
        top_logprobs = body.get("top_logprobs")
        if top_logprobs is not None and not body.get("logprobs"):
            raise RequestError("top_logprobs requires logprobs=true", param="top_logprobs")
        if body.get("logprobs"):
            top_logprobs = 1 if top_logprobs is None else top_logprobs
            if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= self.max_top_logprobs:
                raise RequestError(f"top_logprobs must be an integer in [0, {self.max_top_logprobs}], got "
                                   f"{top_logprobs!r}", param="top_logprobs")
            top_logprobs = max(1, top_logprobs)  # logprobs=true alone still reports the chosen token
        return _Job(messages, max_tokens, float(temperature), int(top_logprobs or 0))

    def chat_payload(self, job: _Job, generation: Any, top_logprobs_requested: int) -> dict[str, Any]:
        logprobs = None
        if job.top_logprobs and generation.first_token_logprobs:
            ranked = sorted(generation.first_token_logprobs.items(), key=lambda kv: kv[1], reverse=True)
            token, logprob = ranked[0]
            logprobs = {"content": [{
                "token": token, "logprob": logprob, "bytes": list(token.encode("utf-8")),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))}
                                 for t, lp in ranked[:top_logprobs_requested]],
            }]}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.served_model_name, "system_fingerprint": self.llm.id,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": generation.text},
                         "logprobs": logprobs, "finish_reason": "stop"}],
            "usage": None,
        }


    def completion_payload(self, body: Any) -> dict[str, Any]:
        """Answer a legacy completions request that asks to score its prompt (``echo=true`` + ``logprobs``)."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if body.get("model") not in self.model_names():
            raise RequestError(f"The model `{body.get('model')}` does not exist; this server serves "
                               f"{', '.join(self.model_names())}", status=404, param="model", code="model_not_found")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise RequestError("'prompt' must be one non-empty string", param="prompt")
        if not body.get("echo") or body.get("logprobs") is None:
            raise RequestError("this server's /v1/completions only scores prompts: send echo=true and logprobs=0 "
                               "(use /v1/chat/completions to generate)", param="echo")
        scorer = getattr(self.llm, "echo_logprobs", None)
        if not callable(scorer):
            raise RequestError(f"the backend {self.llm.id!r} cannot score prompts (no echo_logprobs)", status=501)
        with self.score_lock:
            tokens, offsets, values = scorer(prompt)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
            "model": self.served_model_name, "system_fingerprint": self.llm.id,
            "choices": [{"index": 0, "text": prompt, "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": values, "text_offset": offsets,
                                      "top_logprobs": None}}],
            "usage": None,
        }


def _parse_message(message: Any, index: int) -> dict[str, str]:
    if not isinstance(message, dict):
        raise RequestError(f"messages[{index}] must be an object with 'role' and 'content'", param="messages")
    role = ROLE_ALIASES.get(message.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise RequestError(f"messages[{index}].role must be one of {', '.join(ROLE_ALIASES)}, got "
                           f"{message.get('role')!r}", param="messages")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"messages[{index}].content: only text parts are supported", param="messages")
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise RequestError(f"messages[{index}].content must be a string or a list of text parts", param="messages")
    return {"role": role, "content": content}


def _make_handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
        server_version = "berds-llm-server"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as two writes; without TCP_NODELAY, Nagle's algorithm plus the
            # client's delayed ACK stall every response by ~40 ms.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            if server.log_requests:
                sys.stderr.write(f"{self.address_string()} {format % args}\n")

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, error: RequestError) -> None:
            kind = "invalid_request_error" if error.status < 500 else "server_error"
            self._send(error.status, {"error": {"message": str(error), "type": kind, "param": error.param,
                                                "code": error.code}})

        def _authorised(self) -> bool:
            if not server.api_key:
                return True
            if self.headers.get("Authorization", "") == f"Bearer {server.api_key}":
                return True
            self._error(RequestError("missing or wrong API key (Authorization: Bearer ...)", status=401,
                                     code="invalid_api_key"))
            return False

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            path = self.path.split("?")[0].rstrip("/")
            if path == "/health":
                self._send(200, {"status": "ok", "model": server.served_model_name})
            elif path == "/v1/models":
                if self._authorised():
                    self._send(200, server.models_payload())
            else:
                self._error(RequestError(f"no route GET {self.path}", status=404))

        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            route = self.path.split("?")[0].rstrip("/")
            if route not in ("/v1/chat/completions", "/v1/completions"):
                self._error(RequestError(f"no route POST {self.path}; use /v1/chat/completions", status=404))
                return
            if not self._authorised():
                return
            if route == "/v1/completions":
                self._score(raw)
                return
            try:
                body = json.loads(raw.decode("utf-8"))
                job = server.parse_chat_request(body)
            except (ValueError, UnicodeDecodeError) as exc:
                self._error(RequestError(f"the request body is not valid JSON: {exc}"))
                return
            except RequestError as exc:
                self._error(exc)
                return
            try:
                generation = server.batcher.submit(job).result()
            except BerdsError as exc:
                self._error(RequestError(str(exc), status=400))
                return
            except Exception as exc:  # the model failed: report it, keep serving
                self._error(RequestError(f"generation failed: {type(exc).__name__}: {exc}", status=500))
                return
            requested = (body.get("top_logprobs") or 0) if body.get("logprobs") else 0
            self._send(200, server.chat_payload(job, generation, requested))

        def _score(self, raw: bytes) -> None:
            try:
                payload = server.completion_payload(json.loads(raw.decode("utf-8")))
            except (ValueError, UnicodeDecodeError) as exc:
                self._error(RequestError(f"the request body is not valid JSON: {exc}"))
                return
            except RequestError as exc:
                self._error(exc)
                return
            except BerdsError as exc:
                self._error(RequestError(str(exc), status=400))
                return
            except Exception as exc:  # the model failed: report it, keep serving
                self._error(RequestError(f"scoring failed: {type(exc).__name__}: {exc}", status=500))
                return
            self._send(200, payload)

    return Handler


# ------------------------------------------------------------------------------------ entry point


def serve(
    backend: str,
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    options: dict[str, Any] | None = None,
    api_key_env: str | None = None,
    max_batch_size: int = 8,
    batch_wait: float = 0.01,
    max_top_logprobs: int = 20,
    log_requests: bool = False,
    ready_message: bool = True,
) -> None:
    """Load ``backend:model`` and serve it until SIGINT/SIGTERM. Prints one readiness line with the URL
    (``berds llm server ready: http://HOST:PORT/v1 ...``) once the model is loaded."""
    import os

    from berds.llm import load_llm

    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise BerdsError(f"--api-key-env {api_key_env}: that environment variable is empty — set it to the "
                             "key clients must send, or leave the option out for an open local server")
    if not 0 <= int(port) <= 65535:  # checked before the (slow) model load
        raise BerdsError(f"--port must be between 0 and 65535 (0 picks a free port), got {port}")
    llm = load_llm(backend, model, **(options or {}))
    if hasattr(llm, "load"):
        llm.load()  # load before announcing readiness, not on the first request
    server = ChatServer(llm, host=host, port=port, served_model_name=served_model_name or model, api_key=api_key,
                        max_batch_size=max_batch_size, batch_wait=batch_wait, max_top_logprobs=max_top_logprobs,
                        log_requests=log_requests)

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    if ready_message:
        print(f"berds llm server ready: {server.url} model={server.served_model_name!r} id={llm.id!r}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m berds.llm.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", "-b", default="transformers", help="LLM backend: transformers, vllm, openai")
    parser.add_argument("--model", "-m", required=True, help="hub name or local path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 = any free port (printed when ready)")
    parser.add_argument("--served-model-name", default=None, help="the name clients send (default: --model)")
    parser.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                        help="backend option, e.g. adapter=/path, dtype=bfloat16, batch_size=16 (repeatable)")
    parser.add_argument("--api-key-env", default=None, help="env variable holding the key clients must send")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long a batch waits for company")
    parser.add_argument("--max-top-logprobs", type=int, default=20)
    parser.add_argument("--log-requests", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from berds.registry import parse_options

    args = build_parser().parse_args(argv)
    try:
        serve(args.backend, args.model, host=args.host, port=args.port, served_model_name=args.served_model_name,
              options=parse_options(args.option), api_key_env=args.api_key_env, max_batch_size=args.max_batch_size,
              batch_wait=args.batch_wait_ms / 1000, max_top_logprobs=args.max_top_logprobs,
              log_requests=args.log_requests)
    except BerdsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
