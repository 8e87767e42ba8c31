"""The bounds ``berds llm serve`` enforces, apart from the server so that the CLI can read their defaults without
importing asyncio and the HTTP stack (every ``berds`` command builds the CLI)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from berds.errors import BerdsError


@dataclass(frozen=True)
class ServerLimits:
    """Every bound the server enforces; each has a ``berds llm serve --max-...`` option.

    * ``max_body_bytes``: a request body larger than this is refused with 413 — from ``Content-Length``
      before any of it is read (and before the API key is checked), or as soon as a chunked body passes it.
    * ``max_prompt_chars`` / ``max_prompt_tokens``: the prompt (all message contents) in characters, and
      in tokens after the chat template when the backend exposes a tokenizer; larger prompts get a 400.
    * ``max_tokens``: the largest ``max_tokens`` a request may ask for (400 above it).
    * ``max_queue``: chat requests in flight at once (being read, waiting or generating); one more is
      answered 503 with ``Retry-After: retry_after`` seconds, without reading its body.
    * ``request_timeout``: seconds from the request head to the answer; past it the request is dropped from
      the queue (if it has not started) and answered 503 (``code: timeout``).
    * ``header_timeout``: seconds a client may take to send a complete request head (slow-header clients
      are disconnected); ``keep_alive_timeout``: seconds an idle keep-alive socket stays open.
    * ``body_timeout``: seconds from the request head until the whole body has arrived (408 past it): a client
      dripping its body holds a queue slot this long, not the whole ``request_timeout``.
    * ``max_connections``: open sockets at once; one more is answered 503 (JSON, ``Retry-After``) and closed.
    * ``backlog``: the listen backlog (the kernel caps it at ``net.core.somaxconn``).
    """

    max_body_bytes: int = 2 * 1024 * 1024
    max_prompt_chars: int = 200_000
    max_prompt_tokens: int = 8192
    max_tokens: int = 4096
    max_top_logprobs: int = 20
    max_queue: int = 256
    request_timeout: float = 600.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    retry_after: int = 1
    max_connections: int = 1024
    backlog: int = 2048

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                if f.name == "max_top_logprobs" and value == 0:
                    continue
                raise BerdsError(f"server limit {f.name} must be a positive number, got {value!r}")
