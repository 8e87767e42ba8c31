"""An OpenAI-compatible HTTP server in front of any berds LLM backend, on uvicorn + Starlette.

    python -m berds.llm.server --backend transformers --model /models/mistral \\
        --option adapter=/models/berds-lora --port 8000
    berds llm serve --backend transformers --model /models/mistral --port 8000

Endpoints: ``POST /v1/chat/completions`` (with ``logprobs``/``top_logprobs``), ``GET /v1/models`` and
``GET /health``; ``POST /v1/completions`` answers *scoring* requests only (``echo=true`` with ``logprobs``: the
prompt's per-token log-probabilities, nothing generated) for backends that can score (transformers). Requests wait in a bounded queue for a fixed number of model worker threads, which
gather them into batches (up to ``max_batch_size``, waiting at most ``batch_wait`` seconds for company)
and run them through the backend's batched ``generate()``. The event loop never runs the model, so
``/health`` and ``/v1/models`` answer while a long generation runs. A request whose client closes its
connection (or whose time is up) is withdrawn: taken out of the queue if it has not started, and — with a
backend whose ``generate()`` takes ``cancel=`` (transformers) — stopped at the model's next step, the other
requests in its batch going on unchanged. ``/health`` answers anyone ``{"status": "ok"}``; the model's name
and the load are for callers with the key (or anyone, when the server has no key).

Every size is bounded (``ServerLimits``): the request body (refused with 413 from its ``Content-Length``
before a byte of it is read, and while it streams), the prompt in characters and — when the backend has a
tokenizer — in tokens, ``max_tokens``, ``top_logprobs``, the requests in flight (a full queue answers 503
with ``Retry-After``), the time a request may take, the time a client may take to send its request head,
and idle keep-alive sockets. Every error is an OpenAI-style JSON body ``{"error": {"message", "type",
"param", "code"}}``.

What it does not do, by design: streaming, ``n > 1``, tool calls. Log-probabilities cover the *first*
generated token only (that is what ``berds.llm.base.Generation`` carries and what the judge needs);
``usage`` is ``null`` and ``finish_reason`` is always ``"stop"``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import json
import math
import queue
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from berds.errors import BerdsError
from berds.llm.base import context_overrun
from berds.llm.limits import ServerLimits
from berds.llm.serving import ThreadedUvicorn

ROLE_ALIASES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class RequestError(Exception):
    """A bad request: becomes an OpenAI-style error body with this HTTP status."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.param, self.code, self.headers = status, param, code, headers or {}


def error_body(message: str, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind = {401: "authentication_error", 413: "invalid_request_error", 429: "rate_limit_error",
            503: "server_error"}.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(eq=False)  # compared by identity: the queue removes a withdrawn job, not an equal one
class _Job:
    messages: list[dict[str, str]]
    max_new_tokens: int
    temperature: float
    top_logprobs: int
    result: Future = field(default_factory=Future)
    withdrawn: threading.Event = field(default_factory=threading.Event)  # nobody waits for the answer any more

    @property
    def options(self) -> tuple[int, float, int]:
        return (self.max_new_tokens, self.temperature, self.top_logprobs)


def token_counter(llm: Any) -> Callable[[list[dict[str, str]]], int] | None:
    """A function counting a prompt's tokens after the chat template, for backends that expose
    ``render(prompt)`` and a ``tokenizer`` (transformers); None for the others."""
    render, tokenizer = getattr(llm, "render", None), getattr(llm, "tokenizer", None)
    if not callable(render) or tokenizer is None or not callable(tokenizer):
        return None

    mode = getattr(llm, "special_tokens", None)

    def count(messages: list[dict[str, str]]) -> int:
        if mode in ("split", "parse"):  # the ids the backend will give the model (text's control strings split)
            from berds.llm.shared import normalise_prompts, prompt_token_ids

            return len(prompt_token_ids(tokenizer, normalise_prompts([messages])[0],
                                        chat_template=getattr(llm, "chat_template", None), special_tokens=mode))
        return len(tokenizer(render(messages), add_special_tokens=False)["input_ids"])

    return count


class _JobQueue(queue.Queue):
    """A bounded queue from which a job can be taken out again (its client left before it ran)."""

    def discard(self, job: _Job) -> None:
        with self.mutex:
            try:
                self.queue.remove(job)
            except ValueError:  # already taken by a worker
                return
            self.not_full.notify()


def accepts_cancel(llm: Any) -> bool:
    """Whether ``llm.generate`` takes ``cancel=`` (one event per prompt that stops it between steps)."""
    import inspect

    try:
        return "cancel" in inspect.signature(llm.generate).parameters
    except (TypeError, ValueError):
        return False


class _Batcher:
    """``workers`` threads that run queued jobs through ``llm.generate`` in batches of equal options.

    The queue holds at most ``max_queue`` jobs; a withdrawn job (its client left, or its request timed out) is
    taken out of the queue, skipped if a worker already holds it, and — for backends whose ``generate`` takes
    ``cancel=`` (transformers) — stopped between generation steps while it runs. Prompts over
    ``max_prompt_tokens`` fail with a 400 before they reach the model.
    """

    def __init__(self, llm: Any, max_batch_size: int, batch_wait: float, *, workers: int = 1,
                 max_queue: int = 256, max_prompt_tokens: int | None = None):
        if max_batch_size < 1 or workers < 1:
            raise BerdsError(f"max_batch_size and workers must be at least 1, got {max_batch_size} and {workers}")
        self.llm, self.max_batch_size, self.batch_wait = llm, max_batch_size, batch_wait
        self.jobs: _JobQueue = _JobQueue(maxsize=max_queue)
        self.max_prompt_tokens = max_prompt_tokens
        self.count_tokens = token_counter(llm) if max_prompt_tokens else None
        self.cancellable = accepts_cancel(llm)
        self.batches_run = 0
        self._threads = [threading.Thread(target=self._run, name=f"berds-llm-worker-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, job: _Job) -> Future:
        """Queue ``job``; raises ``queue.Full`` when the queue is full."""
        self.jobs.put_nowait(job)
        return job.result

    def withdraw(self, job: _Job) -> None:
        """Nobody waits for ``job`` any more: free its queue slot, or stop its generation at the next step."""
        job.withdrawn.set()
        job.result.cancel()  # (a job a worker already runs stays running: the event stops it)
        self.jobs.discard(job)

    def stop(self) -> None:
        for _ in self._threads:
            try:
                self.jobs.put(None, timeout=1)
            except queue.Full:
                break
        for thread in self._threads:
            thread.join(timeout=5)

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
            live = [job for job in batch if job.result.set_running_or_notify_cancel()]
            live = [job for job in live if self._fits(job)]
            groups: dict[tuple[int, float, int], list[_Job]] = {}
            for job in live:
                groups.setdefault(job.options, []).append(job)
            for (max_new_tokens, temperature, top_logprobs), jobs in groups.items():
                jobs = [job for job in jobs if not job.withdrawn.is_set()]  # (left while an earlier group ran)
                if not jobs:
                    continue
                cancel = {"cancel": [job.withdrawn for job in jobs]} if self.cancellable else {}
                try:
                    generations = self.llm.generate([j.messages for j in jobs], max_new_tokens=max_new_tokens,
                                                    temperature=temperature, top_logprobs=top_logprobs, **cancel)
                except BaseException as exc:  # delivered to each waiting request; the worker keeps going
                    for job in jobs:
                        job.result.set_exception(exc)
                else:
                    if len(generations) != len(jobs):  # a broken backend must not leave requests waiting
                        error = RuntimeError(f"backend {getattr(self.llm, 'id', '?')!r} returned {len(generations)} "
                                           f"generations for {len(jobs)} prompts")
                        for job in jobs:
                            job.result.set_exception(error)
                    else:
                        for job, generation in zip(jobs, generations):
                            job.result.set_result(generation)
                self.batches_run += 1

    def _fits(self, job: _Job) -> bool:
        """Count the prompt's tokens (on this worker thread: tokenizers are not shared across threads)."""
        if self.count_tokens is None:
            return True
        try:
            n = self.count_tokens(job.messages)
        except Exception as exc:  # a prompt the template rejects: the backend's own error says why
            job.result.set_exception(exc)
            return False
        if n > self.max_prompt_tokens:
            job.result.set_exception(too_many_tokens(n, self.max_prompt_tokens, "messages"))
            return False
        why = context_overrun("the prompt", n, model_context(self.llm), job.max_new_tokens)  # (one job, not its batch)
        if why:
            job.result.set_exception(RequestError(why, param="messages", code="context_length_exceeded"))
            return False
        return True


class ChatServer(ThreadedUvicorn):
    """An OpenAI-compatible server for ``llm`` (any ``berds.llm.base.LLM``) on ``host:port``.

    ``port=0`` picks a free port (read it back from ``.port`` / ``.url``). When ``api_key`` is set,
    requests must carry ``Authorization: Bearer <api_key>``. ``limits`` bounds every size
    (``ServerLimits``). Use ``start()`` to serve from a background thread (tests, notebooks) or
    ``serve_forever()`` to block. The socket is bound and listening when the constructor returns.
    """

    THREAD_NAME = "berds-llm-server"
    WHAT = "the berds LLM server"

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
        workers: int = 1,
        limits: ServerLimits | None = None,
        max_top_logprobs: int | None = None,
        default_max_tokens: int = 256,
        default_temperature: float = 0.0,
        log_requests: bool = False,
        on_ready: Callable[["ChatServer"], None] | None = None,
    ):
        from berds.lazy import require

        require("uvicorn", extra="llm", purpose="berds llm serve")
        require("starlette", extra="llm", purpose="berds llm serve")
        limits = limits or ServerLimits()
        if max_top_logprobs is not None:
            limits = dataclasses.replace(limits, max_top_logprobs=max_top_logprobs)
        self.limits = limits
        self.llm = llm
        self.served_model_name = served_model_name or getattr(llm, "model_name", None) or llm.id
        if api_key is not None and not (api_key.isascii() and api_key.isprintable() and api_key.strip() == api_key):
            # header bytes reach the server as latin-1, and clients send a non-ASCII key in latin-1 or UTF-8: such
            # a key could never match reliably
            raise BerdsError("the server's API key must be printable ASCII without surrounding spaces "
                             "(HTTP clients differ on how they send other characters) — choose another key")
        self.api_key = api_key
        self.max_top_logprobs = limits.max_top_logprobs
        self.default_max_tokens = min(default_max_tokens, limits.max_tokens)
        self.default_temperature = default_temperature
        self.log_requests = log_requests
        self.on_ready = on_ready
        self.created = int(time.time())
        self.in_flight = 0  # chat requests admitted and not yet answered (touched on the event loop only)
        self.withdrawn = 0  # requests that timed out or whose client left before the answer (event loop only)
        self.score_lock = threading.Lock()  # scoring requests run one at a time, beside the batcher's workers
        self.batcher = _Batcher(llm, max_batch_size, batch_wait, workers=workers, max_queue=limits.max_queue,
                                max_prompt_tokens=limits.max_prompt_tokens)
        self.host = host
        try:
            self.socket = _listen(host, port, limits.backlog)
        except OSError as exc:
            self.batcher.stop()
            raise BerdsError(f"cannot listen on {host}:{port}: {exc.strerror or exc} — pick another --port "
                             "(0 = any free port)") from exc
        self.port = self.socket.getsockname()[1]
        self.app = _GuardMiddleware(_build_app(self), self)
        self._uvicorn: Any = None
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

    def _make_uvicorn(self) -> Any:
        import uvicorn

        config = uvicorn.Config(
            self.app, http=_protocol_class(self.limits), lifespan="on",
            timeout_keep_alive=max(1, int(math.ceil(self.limits.keep_alive_timeout))),
            timeout_graceful_shutdown=10, backlog=self.limits.backlog, access_log=self.log_requests,
            log_level="info" if self.log_requests else "warning", server_header=False,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,  # (a head arriving in pieces; whole ones: data_received)
        )
        return uvicorn.Server(config)

    def _closed(self) -> None:
        self.batcher.stop()

    # ------------------------------------------------------------------------ request handling

    def models_payload(self) -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "berds"}
            for name in self.model_names()
        ]}

    def authorised(self, authorization: str | None) -> bool:
        if not self.api_key:
            return True
        scheme, _, token = (authorization or "").strip().partition(" ")
        # the scheme is case-insensitive (RFC 9110); the token is compared in constant time
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode())

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
        n = body.get("n", 1)
        if n is not None and (type(n) is not int or n != 1):  # (True and 1.0 compare equal to 1)
            raise RequestError(f"only n=1 is supported, got {n!r}", param="n")
        if not isinstance(body.get("logprobs", False), (bool, type(None))):  # "no" is not false
            raise RequestError(f"logprobs must be true or false, got {body.get('logprobs')!r}", param="logprobs")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise RequestError("'messages' must be a non-empty list", param="messages")
        messages = [_parse_message(m, i) for i, m in enumerate(raw_messages)]
        chars = sum(len(m["content"]) for m in messages)
        if chars > self.limits.max_prompt_chars:
            raise RequestError(f"the prompt has {chars} characters, more than this server's limit of "
                               f"{self.limits.max_prompt_chars} (berds llm serve --max-prompt-chars)",
                               param="messages", code="context_length_exceeded")

        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = self.default_max_tokens if max_tokens is None else max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise RequestError(f"max_tokens must be a positive integer, got {max_tokens!r}", param="max_tokens")
        if max_tokens > self.limits.max_tokens:
            raise RequestError(f"max_tokens is {max_tokens}, more than this server's limit of "
                               f"{self.limits.max_tokens} (berds llm serve --max-tokens-limit)", param="max_tokens")
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
        # JSON has no -inf or NaN (the answer would fail to encode, a 500 the client retries): a token the backend
        # gives probability 0, or no number, says nothing and is left out
        ranked = sorted(((t, float(lp)) for t, lp in (generation.first_token_logprobs or {}).items()
                         if math.isfinite(float(lp))), key=lambda kv: kv[1], reverse=True)
        if job.top_logprobs and ranked:
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

    async def json_body(self, request: Any, started: float) -> Any:
        """The request's JSON body, after the key is checked and the body read within its size and time bounds."""
        if not self.authorised(request.headers.get("authorization")):
            raise RequestError("missing or wrong API key (Authorization: Bearer ...)", status=401,
                               code="invalid_api_key")
        raw = await _read_body(request, self.limits.max_body_bytes,
                               started + min(self.limits.request_timeout, self.limits.body_timeout))
        media = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if media != "application/json":  # a web page can send text/plain across origins without asking: not JSON here
            raise RequestError(f"the request's Content-Type is {media or 'missing'!r}; send application/json",
                               status=415, code="unsupported_media_type")
        try:
            text = raw.decode("utf-8")
            body = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:  # "[[[[..." a hundred thousand deep: the decoder's recursion limit, not a server fault
            raise RequestError("the request body nests JSON arrays or objects too deeply") from None
        if "\\ud" in text.lower():  # a "\\udXXX" escape: maybe a lone surrogate, which no tokenizer takes
            try:
                json.dumps(body, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError("the request holds a lone surrogate (a \\ud800-\\udfff escape without its pair), "
                                   "which is not text") from None
        return body

    async def complete(self, request: Any, started: float) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Handle one chat request: ``(status, JSON payload, extra headers)``."""
        body = await self.json_body(request, started)
        job = self.parse_chat_request(body)
        try:
            future = self.batcher.submit(job)
        except queue.Full:
            raise _busy(self.limits, "the request queue is full") from None
        try:
            generation = await self._answer_unless_gone(request, asyncio.wrap_future(future), started)
        except _Unanswered:
            self.batcher.withdraw(job)  # out of the queue, or stopped at the model's next step
            self.withdrawn += 1
            raise
        except RequestError:
            raise
        except BerdsError as exc:
            raise RequestError(str(exc), status=400) from None
        except Exception as exc:  # the model failed: report it, keep serving
            raise RequestError(f"generation failed: {type(exc).__name__}: {exc}", status=500) from None
        requested = (body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        return 200, self.chat_payload(job, generation, requested), {}


    async def _answer_unless_gone(self, request: Any, answer: asyncio.Future, started: float) -> Any:
        """``answer``'s result; raises ``_Unanswered`` as soon as the client closes its connection or the request
        timeout passes (the work behind ``answer`` is then the caller's to withdraw)."""
        gone = asyncio.ensure_future(_disconnected(request.receive))
        remaining = started + self.limits.request_timeout - time.monotonic()
        try:
            done, _ = await asyncio.wait({answer, gone}, timeout=max(0.001, remaining),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if answer in done:
            return answer.result()
        answer.cancel()  # a result or error that comes later is dropped, without a "never retrieved" warning
        if gone in done:  # (this answer reaches nobody: it ends the request without a traceback)
            raise _Unanswered("the client left before its answer was ready", status=400, code="client_disconnected")
        raise self._timed_out()

    def _timed_out(self) -> RequestError:
        return _Unanswered(f"the request took longer than this server's limit of {self.limits.request_timeout:g} s "
                            "(berds llm serve --request-timeout)", status=503, code="timeout",
                            headers={"Retry-After": str(self.limits.retry_after)})

    def completion_payload(self, body: Any, abandoned: threading.Event | None = None) -> dict[str, Any]:
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
        if len(prompt) > self.limits.max_prompt_chars:
            raise RequestError(f"the prompt has {len(prompt)} characters, more than this server's limit of "
                               f"{self.limits.max_prompt_chars} (berds llm serve --max-prompt-chars)",
                               param="prompt", code="context_length_exceeded")
        if not body.get("echo") or body.get("logprobs") is None:
            raise RequestError("this server's /v1/completions only scores prompts: send echo=true and logprobs=0 "
                               "(use /v1/chat/completions to generate)", param="echo")
        scorer = getattr(self.llm, "echo_logprobs", None)
        if not callable(scorer):
            raise RequestError(f"the backend {self.llm.id!r} cannot score prompts (no echo_logprobs)", status=501)
        with self.score_lock:
            if abandoned is not None and abandoned.is_set():  # timed out while waiting for the lock: nobody listens
                raise self._timed_out()
            self._check_score_tokens(prompt)
            tokens, offsets, values = scorer(prompt)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
            "model": self.served_model_name, "system_fingerprint": self.llm.id,
            "choices": [{"index": 0, "text": prompt, "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": values, "text_offset": offsets,
                                      "top_logprobs": None}}],
            "usage": None,
        }

    def _check_score_tokens(self, prompt: str) -> None:
        """Refuse a scoring prompt over ``max_prompt_tokens`` before the model sees it (the chat bound, counted as
        the scorer tokenises: with special tokens, no template). Runs under ``score_lock``, on the scoring thread."""
        limit, tokenizer = self.limits.max_prompt_tokens, getattr(self.llm, "tokenizer", None)
        if tokenizer is None or not callable(tokenizer):
            return
        context = model_context(self.llm)
        if not limit and context is None:
            return
        split = {"split_special_tokens": True} if getattr(self.llm, "special_tokens", None) == "split" else {}
        n = len(tokenizer(prompt, add_special_tokens=True, **split)["input_ids"])
        if limit and n > limit:
            raise too_many_tokens(n, limit, "prompt")
        why = context_overrun("the prompt", n, context)  # (the scorer refuses it too, but without the code)
        if why:
            raise RequestError(why, param="prompt", code="context_length_exceeded")

    async def score(self, request: Any, started: float) -> dict[str, Any]:
        """Handle one scoring request on a thread (the event loop never runs the model), within the request
        timeout like a chat request (one still waiting for the scoring lock then is dropped)."""
        body = await self.json_body(request, started)
        abandoned = threading.Event()
        work = asyncio.get_running_loop().run_in_executor(None, self.completion_payload, body, abandoned)
        try:
            return await self._answer_unless_gone(request, work, started)
        except _Unanswered:
            abandoned.set()  # one still waiting for the scoring lock is dropped (a running scorer cannot stop)
            self.withdrawn += 1
            raise
        except RequestError:
            raise
        except BerdsError as exc:
            raise RequestError(str(exc), status=400) from None
        except Exception as exc:  # the model failed: report it, keep serving
            raise RequestError(f"scoring failed: {type(exc).__name__}: {exc}", status=500) from None


class _Unanswered(RequestError):
    """Nobody waits for the answer any more: the request timed out, or its client left."""


async def _disconnected(receive: Any) -> None:
    """Return once the client has closed its connection. Called after the body was read: the ASGI server then
    answers ``receive()`` only with ``http.disconnect`` (a pipelined next request waits for this response)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def model_context(llm: Any) -> int | None:
    """The most tokens ``llm``'s model reads, for backends that say (``context_length()``); else None."""
    method = getattr(llm, "context_length", None)
    return method() if callable(method) else None


def too_many_tokens(n: int, limit: int, param: str) -> RequestError:
    """A prompt over ``--max-prompt-tokens`` (chat messages or a scoring prompt: ``param``)."""
    return RequestError(f"the prompt has {n} tokens, more than this server's limit of {limit} "
                        "(berds llm serve --max-prompt-tokens)", param=param, code="context_length_exceeded")


def _busy(limits: ServerLimits, why: str) -> RequestError:
    return RequestError(f"{why} ({limits.max_queue} requests in flight, berds llm serve --max-queue); "
                        f"retry after {limits.retry_after} s", status=503, code="server_busy",
                        headers={"Retry-After": str(limits.retry_after)})


async def _read_body(request: Any, limit: int, deadline: float) -> bytes:
    """The request body, refused (413) as soon as it passes ``limit`` bytes, and (408) when it has not
    arrived by ``deadline`` — a client dripping its body cannot hold a slot forever."""
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    stream = request.stream().__aiter__()
    while True:
        remaining = deadline - time.monotonic()
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), max(0.001, remaining))
        except StopAsyncIteration:
            break
        except ClientDisconnect:  # (nothing can be answered: the refusal ends the request without a traceback)
            raise RequestError("the client left before its request body arrived", status=400,
                               code="client_disconnected") from None
        except asyncio.TimeoutError:
            raise RequestError("the request body did not arrive in time (berds llm serve --body-timeout)",
                               status=408, code="timeout", headers={"Connection": "close"}) from None
        size += len(chunk)
        if size > limit:
            raise RequestError(_too_large(limit), status=413, code="request_too_large",
                               headers={"Connection": "close"})
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> str:
    return (f"the request body is larger than this server's limit of {limit} bytes "
            "(berds llm serve --max-body-bytes)")


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


# ------------------------------------------------------------------------------------ ASGI layers


def _json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(payload, status_code=status, headers=headers or None)


def _error_response(error: RequestError) -> Any:
    return _json_response(error.status, error_body(str(error), error.status, error.param, error.code), error.headers)


def _build_app(server: ChatServer) -> Any:
    import contextlib

    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    async def health(request: Any) -> Any:
        # A liveness probe needs no key; what is served, and how busy, is for key holders only.
        if not server.authorised(request.headers.get("authorization")):
            return _json_response(200, {"status": "ok"})
        return _json_response(200, {"status": "ok", "model": server.served_model_name,
                                    "in_flight": server.in_flight, "max_queue": server.limits.max_queue,
                                    "withdrawn": server.withdrawn})

    async def models(request: Any) -> Any:
        if not server.authorised(request.headers.get("authorization")):
            return _error_response(RequestError("missing or wrong API key (Authorization: Bearer ...)",
                                                status=401, code="invalid_api_key"))
        return _json_response(200, server.models_payload())

    async def chat(request: Any) -> Any:
        started = request.scope.get("berds.started", time.monotonic())
        try:
            status, payload, headers = await server.complete(request, started)
        except RequestError as exc:
            return _error_response(exc)
        return _json_response(status, payload, headers)

    async def completions(request: Any) -> Any:
        started = request.scope.get("berds.started", time.monotonic())
        try:
            payload = await server.score(request, started)
        except RequestError as exc:
            return _error_response(exc)
        return _json_response(200, payload)

    async def http_error(request: Any, exc: Any) -> Any:
        status = exc.status_code
        message = f"no route {request.method} {request.url.path}" if status in (404, 405) else str(exc.detail)
        if status == 404 and request.method == "POST":
            message += f"; use {CHAT_PATH}"
        return _json_response(status, error_body(message, status))

    async def crash(request: Any, exc: Exception) -> Any:
        return _json_response(500, error_body(f"internal error: {type(exc).__name__}: {exc}", 500))

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        if server.on_ready is not None:
            server.on_ready(server)
        yield

    routes = [Route("/health", health, methods=["GET"]), Route("/v1/models", models, methods=["GET"]),
              Route(CHAT_PATH, chat, methods=["POST"]), Route(COMPLETIONS_PATH, completions, methods=["POST"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: crash},
                     lifespan=lifespan)


class _GuardMiddleware:
    """The outermost ASGI layer: refuses oversized bodies (from ``Content-Length``, before any byte is read
    and before the key is checked) and chat requests beyond ``max_queue`` (503 + ``Retry-After``), so
    neither costs memory; counts admitted requests; paths end without their trailing slash."""

    def __init__(self, app: Any, server: ChatServer):
        self.app, self.server = app, server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["berds.started"] = time.monotonic()
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/"):
            scope["path"] = path = path.rstrip("/")
        limits = self.server.limits
        declared = None
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._reply(send, RequestError("Content-Length is not a number", code="bad_request",
                                                         headers={"Connection": "close"}))
                    return
        if declared is not None and declared > limits.max_body_bytes:
            await self._reply(send, RequestError(_too_large(limits.max_body_bytes), status=413,
                                                 code="request_too_large", headers={"Connection": "close"}))
            return
        if not (scope.get("method") == "POST" and path in (CHAT_PATH, COMPLETIONS_PATH)):
            await self.app(scope, receive, send)
            return
        if self.server.in_flight >= limits.max_queue:
            error = _busy(limits, "the server is busy")
            error.headers["Connection"] = "close"  # the unread body must not be taken for the next request
            await self._reply(send, error)
            return
        self.server.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.server.in_flight -= 1

    @staticmethod
    async def _reply(send: Any, error: RequestError) -> None:
        data = json.dumps(error_body(str(error), error.status, error.param, error.code)).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


MAX_HEAD_BYTES = 64 * 1024  # a request line and headers together (h11's own bound sees only heads in pieces)


def _protocol_class(limits: ServerLimits) -> type:
    """uvicorn's h11 protocol, plus a deadline for the request head (uvicorn times out idle keep-alive
    sockets but not a client that opens a socket and sends its headers a byte at a time) and a cap on
    open sockets answered with a JSON 503 (uvicorn's own ``limit_concurrency`` answers in plain text)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    header_timeout = limits.header_timeout
    busy = json.dumps(error_body(f"too many open connections ({limits.max_connections}, berds llm serve "
                                 f"--max-connections); retry after {limits.retry_after} s", 503,
                                 code="server_busy")).encode()
    busy_response = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                     f"retry-after: {limits.retry_after}\r\nconnection: close\r\ncontent-length: {len(busy)}\r\n"
                     "\r\n").encode() + busy

    class HeadTimeoutProtocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._head_timer: Any = None
            self._head_bytes, self._head_tail = 0, b""
            self._refused = len(self.connections) > limits.max_connections
            if self._refused:
                # Answer, send FIN, and keep reading (and dropping) what the client sends until it closes:
                # closing with its request unread would reset the socket and lose the answer.
                transport.write(busy_response)
                transport.write_eof()
                self._head_timer = self.loop.call_later(header_timeout, transport.close)
                return
            self._arm_head_timer()

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm_head_timer(self) -> None:
            if self._head_timer is None and not self.transport.is_closing():
                self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

        def _head_too_long(self, data: bytes) -> bool:
            """Whether the request head being received passes MAX_HEAD_BYTES: h11 bounds only a head that arrives
            in pieces, so a 100 KB head sent at once was read while the error spoke of 64 KB."""
            if not self._between_requests():
                self._head_bytes, self._head_tail = 0, b""
                return False
            seen = self._head_tail + data
            end = seen.find(b"\r\n\r\n")
            used = len(data) if end < 0 else end + 4 - len(self._head_tail)
            self._head_bytes += max(used, 0)
            self._head_tail = b"" if end >= 0 else seen[-3:]
            too_long = self._head_bytes > MAX_HEAD_BYTES
            if end >= 0:
                self._head_bytes = 0
            return too_long

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._head_too_long(data):
                self.send_400_response("request head too long")
                return
            super().data_received(data)
            if self._refused:  # (refused just now: its closing timer stays)
                return
            if self._between_requests():
                self._arm_head_timer()  # bytes of a request head are arriving: they must complete in time
            elif self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def send_400_response(self, msg: str) -> None:  # type: ignore[override]
            # A request h11 cannot parse (a bad or repeated Content-Length, a 200 KB header): JSON like every other
            # refusal, not uvicorn's plain text.
            body = json.dumps(error_body("the request is not valid HTTP/1.1 (a malformed request line or header, a bad or "
                                         "repeated Content-Length, or a request head over 64 KB)", 400,
                                         code="bad_request")).encode()
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
            # As for a refused connection: FIN, then drop what the client still sends (closing with it unread
            # would reset the socket and lose the answer), closing after header_timeout at most.
            self._refused = True
            self.transport.write_eof()
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(header_timeout, self.transport.close)
            if self.cycle is not None and not self.cycle.response_complete:
                # a body broken off mid-way (a malformed chunk): the request reading it ends now, as at a
                # disconnect, instead of waiting for the rest and writing its 408 after the FIN
                self.cycle.disconnected = True
                self.cycle.message_event.set()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    return HeadTimeoutProtocol


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so; without it every response
    # (headers and body are two writes) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


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
    workers: int = 1,
    limits: ServerLimits | None = None,
    max_top_logprobs: int | None = None,
    log_requests: bool = False,
    ready_message: bool = True,
) -> None:
    """Load ``backend:model`` and serve it until SIGINT/SIGTERM. Prints one readiness line with the URL
    (``berds llm server ready: http://HOST:PORT/v1 ...``) once the model is loaded and the server accepts."""
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
    limits = limits or ServerLimits()
    llm = load_llm(backend, model, **(options or {}))
    if hasattr(llm, "load"):
        llm.load()  # load before announcing readiness, not on the first request

    def announce(server: ChatServer) -> None:
        if ready_message:
            print(f"berds llm server ready: {server.url} model={server.served_model_name!r} id={llm.id!r}",
                  flush=True)

    server = ChatServer(llm, host=host, port=port, served_model_name=served_model_name or model, api_key=api_key,
                        max_batch_size=max_batch_size, batch_wait=batch_wait, workers=workers, limits=limits,
                        max_top_logprobs=max_top_logprobs, log_requests=log_requests, on_ready=announce)
    # uvicorn handles SIGINT/SIGTERM (graceful shutdown) and then re-raises them to the handlers it found:
    # a no-op handler for SIGTERM makes a clean stop exit 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServerLimits()
    parser.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes,
                        help="largest request body; larger ones get 413 before they are read")
    parser.add_argument("--max-prompt-chars", type=int, default=defaults.max_prompt_chars)
    parser.add_argument("--max-prompt-tokens", type=int, default=defaults.max_prompt_tokens,
                        help="checked after the chat template when the backend has a tokenizer")
    parser.add_argument("--max-tokens-limit", type=int, default=defaults.max_tokens,
                        help="largest max_tokens a request may ask for")
    parser.add_argument("--max-queue", type=int, default=defaults.max_queue,
                        help="chat requests in flight; more get 503 with Retry-After")
    parser.add_argument("--request-timeout", type=float, default=defaults.request_timeout, help="seconds")
    parser.add_argument("--header-timeout", type=float, default=defaults.header_timeout,
                        help="seconds a client may take to send its request head")
    parser.add_argument("--body-timeout", type=float, default=defaults.body_timeout,
                        help="seconds a client may take to send its whole request body")
    parser.add_argument("--keep-alive-timeout", type=float, default=defaults.keep_alive_timeout,
                        help="seconds an idle keep-alive socket stays open")
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections,
                        help="open sockets at once; more get 503 with Retry-After")
    parser.add_argument("--backlog", type=int, default=defaults.backlog, help="listen backlog")


def limits_from_args(args: argparse.Namespace) -> ServerLimits:
    return ServerLimits(max_body_bytes=args.max_body_bytes, max_prompt_chars=args.max_prompt_chars,
                        max_prompt_tokens=args.max_prompt_tokens, max_tokens=args.max_tokens_limit,
                        max_top_logprobs=args.max_top_logprobs, max_queue=args.max_queue,
                        request_timeout=args.request_timeout, header_timeout=args.header_timeout,
                        body_timeout=args.body_timeout,
                        keep_alive_timeout=args.keep_alive_timeout, max_connections=args.max_connections,
                        backlog=args.backlog)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m berds.llm.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", "-b", default="transformers", help="LLM backend: transformers, vllm, openai")
    parser.add_argument("--model", "-m", required=True, help="hub name or local path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 = any free port (printed when ready)")
    parser.add_argument("--served-model-name", default=None, help="the name clients send (default: --model)")
    parser.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                        help="backend option, e.g. adapter=/path, dtype=bfloat16, batch_size=16 (repeatable)")
    parser.add_argument("--api-key-env", default=None, help="env variable holding the key clients must send (every "
                        "endpoint; /health without it answers only {\"status\": \"ok\"})")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long a batch waits for company")
    parser.add_argument("--workers", type=int, default=1,
                        help="model worker threads (more than 1 only for thread-safe backends, e.g. openai)")
    parser.add_argument("--max-top-logprobs", type=int, default=ServerLimits().max_top_logprobs)
    add_limit_arguments(parser)
    parser.add_argument("--log-requests", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from berds.registry import parse_options

    args = build_parser().parse_args(argv)
    try:
        serve(args.backend, args.model, host=args.host, port=args.port, served_model_name=args.served_model_name,
              options=parse_options(args.option), api_key_env=args.api_key_env, max_batch_size=args.max_batch_size,
              batch_wait=args.batch_wait_ms / 1000, workers=args.workers, limits=limits_from_args(args),
              log_requests=args.log_requests)
    except BerdsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
