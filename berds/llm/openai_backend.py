"""LLM backend for any OpenAI-compatible chat-completions endpoint over plain HTTP (``requests``).

Works with hosted APIs (the study's GPT-4 judge), ``vllm serve``, llama.cpp's ``llama-server`` and
``berds llm serve``. Requests run concurrently on a thread pool; 429, 5xx, timeouts and dropped connections
are retried with exponential backoff and jitter, honouring ``Retry-After``.

Keys: a key is sent only to the host it was meant for. ``OPENAI_API_KEY`` goes to ``api.openai.com`` only;
any other host gets the key in ``$NAME`` when the user passes ``api_key_env=NAME`` for that endpoint, or the
userinfo of its own ``base_url`` (``https://user:pass@host/v1`` -> HTTP Basic, ``https://KEY@host/v1`` ->
Bearer). Keys never reach the id, ``repr`` or error messages (``berds.llm.secrets``).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import math
import os
import random
import re
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from berds.errors import BerdsError
from berds.io import BodyTooLarge, BodyTooSlow, cuttable_session, http_text, post_within
from berds.llm.base import PLAIN_ROLE, ContinuationScore, Generation, Prompt
from berds.llm.secrets import redact_text, redact_url, url_credentials
from berds.llm.shared import (
    check_generation_options,
    check_special_tokens_mode,
    generation_from_token_logprobs,
    neutralise_special_strings,
    normalise_prompts,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
OPENAI_HOSTS = frozenset({"api.openai.com"})  # the only hosts $OPENAI_API_KEY is sent to unless asked
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class OpenAILLM:
    """Chat completions from an OpenAI-compatible server behind ``berds.llm.base.LLM``.

    * ``base_url``: the API root, e.g. ``http://127.0.0.1:8000/v1`` for ``vllm serve``.
    * ``api_key_env``: the environment variable holding this endpoint's key (sent as ``Bearer``). Left
      out, ``api.openai.com`` gets ``$OPENAI_API_KEY`` (required there) and any other host gets no key
      but the userinfo of its own ``base_url``: ``user:pass@`` as HTTP Basic, a lone ``KEY@`` as Bearer.
      ``OPENAI_API_KEY`` reaches another host only when named explicitly (``api_key_env=OPENAI_API_KEY``).
    * ``concurrency``: requests in flight at once. Results always come back in prompt order.
    * ``max_retries``: retries after the first attempt for 429/5xx/timeouts/connection errors, waiting
      ``Retry-After`` when the server sends it, else ``min(backoff_max, backoff_base * 2**attempt)`` with
      jitter (a uniform draw in its upper half).
    * ``timeout``: seconds per request, the whole answer included (a server dripping bytes is cut off there);
      ``max_response_bytes`` (50 MB) bounds an answer's size; ``max_retry_after`` caps how long a ``Retry-After`` may
      make it wait.
    * ``max_tokens_field``: ``max_tokens`` (default) or ``max_completion_tokens`` (newer OpenAI models
      refuse the former).
    * ``special_tokens``: ``"split"`` (default) breaks control-token strings (``</s>``, ``[INST]``,
      ``<|im_start|>`` ...) in the messages' text with a WORD JOINER, so a passage cannot forge a chat turn on a
      server that parses them; ``"parse"`` sends the text unchanged, as the BERDS study's code did.
    * ``id``: overrides the identity used as cache key (default ``openai:MODEL@HOST[:PORT]/PATH``; pass a
      stable name when the same local model is served on changing ports).
    * ``seed``, ``extra_body``: sent with every request (``extra_body`` merged into the JSON body).

    ``top_logprobs=N`` asks for ``logprobs``/``top_logprobs``; a server that rejects them (HTTP 400/422)
    is asked again without, logprobs are switched off for the rest of this object's life, and one warning
    is shown — the texts are still returned, with ``first_token_logprobs=None``.

    ``score(prompts, continuations)`` uses the legacy ``/v1/completions`` endpoint with ``echo=true`` and
    ``logprobs`` (vLLM, ``berds llm serve``; OpenAI's hosted chat models no longer offer it). Prompts must be
    plain strings there: the server tokenises prompt + continuation together and no chat template is applied.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        timeout: float = 120.0,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        max_retry_after: float = 300.0,
        max_tokens_field: str = "max_tokens",
        seed: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_response_bytes: int = 50_000_000,
        id: str | None = None,  # noqa: A002 - matches the LLM protocol's attribute
        special_tokens: str = "split",
    ):
        try:
            parts = urlsplit(base_url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            shown = redact_url(str(base_url))
            if "//" not in shown:  # (no scheme: "user:KEY@host/v1" parses as scheme "user"; drop what precedes "@")
                shown = shown.rpartition("@")[2]
            raise BerdsError(f"base_url {shown!r} is not an http(s) URL — use e.g. "
                             "http://127.0.0.1:8000/v1")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise BerdsError(f"concurrency must be a positive integer, got {concurrency!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise BerdsError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise BerdsError(f"max_response_bytes must be a positive integer, got {max_response_bytes!r}")
        # (numbers from -o key=value may arrive as text; a NaN or infinite wait bounds nothing)
        for option, value, low in (("timeout", timeout, "> 0"), ("backoff_base", backoff_base, ">= 0"),
                                   ("backoff_max", backoff_max, ">= 0"), ("max_retry_after", max_retry_after, ">= 0")):
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not (value > 0 if low == "> 0" else value >= 0)):
                raise BerdsError(f"{option} must be a finite number of seconds {low}, got {value!r}")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise BerdsError(f"extra_body must be a JSON object (fields merged into every request), got {extra_body!r:.80}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise BerdsError(f"seed must be an integer, got {seed!r:.80}")
        self.max_response_bytes = max_response_bytes
        self.model = model
        host = parts.hostname
        netloc = parts.netloc.rpartition("@")[2]  # host[:port] as written, without user:pass@
        # What is requested and shown: no userinfo (it becomes an Authorization header), no query.
        self.base_url = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
        if parts.query:
            raise BerdsError(f"base_url {redact_url(base_url)!r} has a query string: pass the API root only "
                             "(e.g. https://host/v1) and keys through api_key_env=NAME")
        self.url = f"{self.base_url}/chat/completions"
        self.host = host.lower()
        self.api_key_env, self._api_key, self._basic_auth = self._credentials(api_key_env, url_credentials(base_url))
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.timeout = float(timeout)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise BerdsError(f"max_tokens_field must be max_tokens or max_completion_tokens, got {max_tokens_field!r}")
        self.max_tokens_field = max_tokens_field
        self.seed = seed
        self.extra_body = dict(extra_body or {})
        self.logprobs_supported = True
        # The server tokenises what it is sent (and most parse control-token strings anywhere): "split" breaks such
        # strings in the messages' text with a WORD JOINER (neutralise_special_strings); "parse" sends them as is.
        self.special_tokens = check_special_tokens_mode(special_tokens)
        # The id keys the judgement cache: host, port and path only, so it never holds (or depends on) a key; request
        # fields that change the answers (extra_body may even name another model) enter it as a hash, never verbatim.
        changes = ((f"|extra_body={_canonical_sha256(self.extra_body)[:12]}" if self.extra_body else "")
                   + (f"|seed={seed}" if seed is not None else "")
                   + ("|special_tokens=parse" if special_tokens == "parse" else ""))
        self.id = redact_text(id) if id else f"openai:{redact_text(model)}@{netloc}{parts.path.rstrip('/')}{changes}"
        self._local = threading.local()
        self._warn_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAILLM({self.model!r}, base_url={self.base_url!r})"

    def _credentials(self, api_key_env: str | None, userinfo: tuple[str | None, str | None]
                     ) -> tuple[str | None, str | None, tuple[str, str] | None]:
        """``(env name, bearer key, basic auth)`` for this endpoint, sending a key only where it belongs."""
        user, password = userinfo
        has_userinfo = user is not None or password is not None
        if api_key_env is not None:
            if not isinstance(api_key_env, str) or not api_key_env.strip():
                raise BerdsError(f"api_key_env must name an environment variable, got {api_key_env!r}")
            if has_userinfo:
                raise BerdsError(f"{self.base_url}: base_url carries credentials (user:pass@) and api_key_env="
                                 f"{api_key_env} names a key too — keep one of them")
            key = os.environ.get(api_key_env) or None
            if key is None:
                raise BerdsError(f"no API key for {self.base_url}: the environment variable {api_key_env} "
                                 "(named by api_key_env) is empty or unset")
            return api_key_env, key, None
        if has_userinfo:
            if password is not None:
                return None, None, (user or "", password)
            return None, user, None  # https://KEY@host/v1: a bare token
        if self.host in OPENAI_HOSTS:
            key = os.environ.get(OPENAI_KEY_ENV) or None
            if key is None:
                raise BerdsError(f"no API key for {self.base_url}: set the environment variable {OPENAI_KEY_ENV} "
                                 "(or pass api_key_env=NAME of the variable that holds it)")
            return OPENAI_KEY_ENV, key, None
        return None, None, None  # any other host: no key unless the user names one

    # ---------------------------------------------------------------------------------- generation

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        max_new_tokens: int = 16,
        temperature: float = 0.0,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """One completion per prompt, in prompt order; requests run ``concurrency`` at a time."""
        messages = normalise_prompts(prompts)
        check_generation_options(max_new_tokens, temperature, top_logprobs)
        if not messages:
            return []
        if any(m[0]["role"] == PLAIN_ROLE for m in messages):
            raise BerdsError(f"{self.url} is a chat-completions endpoint and cannot take a plain (no chat template) "
                             "prompt — use a chat prompt (-o prompt=zero-shot|one-shot) here, or the transformers / "
                             "vllm backend for plain prompts")

        stop = threading.Event()  # set on the first failure (or Ctrl-C): other workers stop retrying

        def one(conversation: list[dict[str, str]]) -> Generation:
            return self._complete(conversation, max_new_tokens, temperature, top_logprobs, stop)

        if self.concurrency == 1 or len(messages) == 1:
            return [one(m) for m in messages]
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(messages)),
                                  thread_name_prefix="berds-openai")
        try:
            return list(pool.map(one, messages))
        except BaseException:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)  # requests not yet sent are dropped
            raise
        finally:
            pool.shutdown(wait=False)

    def _complete(self, messages: list[dict[str, str]], max_new_tokens: int, temperature: float,
                  top_logprobs: int, stop: threading.Event | None = None) -> Generation:
        if self.special_tokens == "split":
            messages = [{**m, "content": neutralise_special_strings(m["content"])} for m in messages]
        body: dict[str, Any] = {"model": self.model, "messages": messages, self.max_tokens_field: max_new_tokens,
                                "temperature": float(temperature), "n": 1, **self.extra_body}
        if self.seed is not None:
            body["seed"] = self.seed
        asked = top_logprobs > 0 and self.logprobs_supported
        if asked:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        status, payload = self._post(body, stop)
        if status in (400, 422) and asked:
            # Some servers (older llama.cpp, some hosted models) reject logprobs: ask once more without.
            retry_body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
            status, retry_payload = self._post(retry_body, stop)
            if status == 200:
                self._disable_logprobs(self._error_message(payload))
                asked = False
            payload = retry_payload
        if status != 200:
            raise BerdsError(f"POST {self.url} answered HTTP {status}: {self._error_message(payload)}"
                             f"{self._status_hint(status)}")
        return self._parse(payload, top_logprobs if asked else 0)

    def _disable_logprobs(self, reason: str) -> None:
        with self._warn_lock:
            if self.logprobs_supported:
                self.logprobs_supported = False
                warnings.warn(f"{self.url} rejected logprobs ({reason}); continuing without P(Yes)",
                              RuntimeWarning, stacklevel=3)

    def _parse(self, payload: Any, top_logprobs: int) -> Generation:
        try:
            choice = payload["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise BerdsError(f"POST {self.url}: the reply is not a chat completion (no choices[0].message): "
                             f"{self._scrub(str(payload)[:2000])[:300]}") from None
        if not isinstance(text, str):  # (a server's own shape: a list of parts, a number)
            raise BerdsError(f"POST {self.url}: choices[0].message.content is a {type(text).__name__}, not text: "
                             f"{self._scrub(str(text)[:2000])[:300]}")
        # A "\udXXX" escape without its pair decodes to a lone surrogate, which is not text: no file or cache could
        # store the reply. It becomes U+FFFD, as undecodable bytes do (http_text).
        text = _LONE_SURROGATE.sub("\ufffd", text)
        pairs = None
        if top_logprobs:
            pairs = self._first_token_pairs(choice.get("logprobs"))
        return generation_from_token_logprobs(text.strip(), pairs, top_logprobs)

    def _first_token_pairs(self, logprobs: Any) -> list[tuple[str, float]] | None:
        """``[(token, logprob), ...]`` of the first generated token from ``choices[0].logprobs``; None when the
        server sent none. A shape that is not OpenAI's, or values that are not log-probabilities (above 0, not a
        number), are the server's fault and named, not turned into a wrong P(Yes)."""
        if logprobs is None:
            return None
        content = logprobs.get("content") if isinstance(logprobs, dict) else logprobs
        if content is None or content == []:
            return None
        first = content[0] if isinstance(content, list) else None
        entries = (first.get("top_logprobs") or [first]) if isinstance(first, dict) else None
        pairs = []
        for entry in entries if isinstance(entries, list) else [None]:
            token = entry.get("token") if isinstance(entry, dict) else None
            value = entry.get("logprob") if isinstance(entry, dict) else None
            if isinstance(token, str) and value is None:
                continue  # (a token the server has no value for)
            if (not isinstance(token, str) or isinstance(value, bool) or not isinstance(value, (int, float))
                    or math.isnan(value) or value > 1e-6):
                raise BerdsError(f"POST {self.url}: choices[0].logprobs is not OpenAI's {{content: [{{token, logprob, "
                                 f"top_logprobs: [{{token, logprob <= 0}}]}}]}}: "
                                 f"{self._scrub(str(logprobs)[:2000])[:300]}")
            pairs.append((token, min(float(value), 0.0)))
        return pairs

    # ---------------------------------------------------------------------------------- scoring

    def score(self, prompts: Sequence[Prompt | str], continuations: Sequence[str]) -> list[ContinuationScore]:
        """Per-token log-probabilities of each continuation given its (plain-string) prompt, in input order.

        One ``/v1/completions`` request per pair with ``prompt = prompt + continuation`` (control-token strings in
        both broken unless ``special_tokens="parse"``), ``echo=true``,
        ``logprobs=0`` and ``max_tokens=1`` (some servers refuse 0); the continuation's tokens are those whose
        text span holds any continuation character (a token straddling the boundary counts as continuation).
        """
        if isinstance(prompts, (str, bytes)) or isinstance(continuations, (str, bytes)):
            raise BerdsError("score() takes a list of prompts and a list of continuations")
        if len(prompts) != len(continuations):
            raise BerdsError(f"score() got {len(prompts)} prompts but {len(continuations)} continuations")
        for i, (prompt, continuation) in enumerate(zip(prompts, continuations)):
            if not isinstance(prompt, str):
                raise BerdsError(f"prompt {i}: the openai backend scores plain-text prompts only (the completions "
                                 "endpoint applies no chat template) — pass the prompt text itself")
            if not isinstance(continuation, str) or not continuation.strip():
                raise BerdsError(f"continuation {i} is empty or not a string — there is nothing to score")
        stop = threading.Event()
        url = f"{self.base_url}/completions"

        def one(pair: tuple[str, str]) -> ContinuationScore:
            return self._score_one(pair[0], pair[1], url, stop)

        pairs = list(zip(prompts, continuations))
        if self.concurrency == 1 or len(pairs) <= 1:
            return [one(p) for p in pairs]
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(pairs)), thread_name_prefix="berds-openai")
        try:
            return list(pool.map(one, pairs))
        except BaseException:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=False)

    def _score_one(self, prompt: str, continuation: str, url: str, stop: threading.Event) -> ContinuationScore:
        if self.special_tokens == "split":
            # A plain prompt has no template, so every control-token string in it came from the text being scored
            # (an answer, a partial answer): broken, as in generate(), so the scored text cannot open a turn.
            prompt, continuation = neutralise_special_strings(prompt), neutralise_special_strings(continuation)
        text = prompt + continuation
        body = {"model": self.model, "prompt": text, "echo": True, "logprobs": 0, "max_tokens": 1,
                "temperature": 0.0, **self.extra_body}
        status, payload = self._post(body, stop, url=url)
        if status != 200:
            message = self._error_message(payload)
            if status in (400, 413, 422) and _context_exceeded(payload, message):
                hint = (" — the prompt and continuation are longer than the server's model reads; score shorter "
                        "texts, or use a transformers:MODEL evaluator (it cuts the prompt from the left and flags "
                        "the score as truncated)")
            elif status in (400, 404, 405, 422, 501):
                hint = (" — this server does not offer /v1/completions with echo+logprobs; P.D. needs a server that "
                        "does (vllm serve, berds llm serve) or a transformers:MODEL evaluator")
            else:
                hint = self._status_hint(status)
            raise BerdsError(f"POST {url} answered HTTP {status}: {message}{hint}")
        try:
            logprobs = payload["choices"][0]["logprobs"]
            tokens, values, offsets = logprobs["tokens"], logprobs["token_logprobs"], logprobs["text_offset"]
        except (KeyError, IndexError, TypeError):
            raise BerdsError(f"POST {url}: the reply carries no choices[0].logprobs tokens/token_logprobs/"
                             f"text_offset, so the server did not echo log-probabilities: {self._scrub(str(payload)[:2000])[:300]}") from None
        # Three lists of one length: tokens (text), offsets (ascending integers), log-probabilities (None for the
        # first token, else numbers <= 0). zip() would silently drop the tail of a shorter list, and with it tokens
        # of the continuation.
        if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(offsets, list)
                and len(tokens) == len(values) == len(offsets)
                and all(isinstance(t, str) for t in tokens)
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                and all(a <= b for a, b in zip(offsets, offsets[1:]))
                and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 1e-6)
                        for v in values)):
            raise BerdsError(f"POST {url}: choices[0].logprobs is not three lists of one length (tokens: text, "
                             "text_offset: ascending integers, token_logprobs: numbers <= 0 or null): "
                             f"{self._scrub(str(payload)[:2000])[:300]}")
        # A token belongs to the continuation when it holds any of its characters: it starts before the text
        # ends (the generated token starts after) and ends (where the next token starts) after the prompt.
        ends = [*offsets[1:], len(text) + 1]
        picked = [(t, v) for t, v, o, e in zip(tokens, values, offsets, ends) if o < len(text) and e > len(prompt)]
        if not picked or any(v is None for _, v in picked):
            raise BerdsError(f"POST {url}: no log-probabilities for the continuation tokens in the echoed reply "
                             f"(a prompt that ends inside a token, or a server that ignores echo): {self._scrub(str(payload)[:2000])[:300]}")
        return ContinuationScore(tuple(t for t, _ in picked), tuple(min(float(v), 0.0) for _, v in picked))

    # ------------------------------------------------------------------------------------- HTTP

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            session = cuttable_session()  # (cut at the timeout: see _post)
            session.headers["Content-Type"] = "application/json"
            if self._api_key:
                session.headers["Authorization"] = f"Bearer {self._api_key}"
            elif self._basic_auth:
                session.auth = self._basic_auth
            self._local.session = session
        return session

    def _post(self, body: dict[str, Any], stop: threading.Event | None = None, url: str | None = None
              ) -> tuple[int, Any]:
        """POST with retries; returns ``(status, parsed JSON or text)`` for any final HTTP answer.

        Raises ``BerdsError`` when retries run out (naming the URL, the last status or error, attempts),
        or when ``stop`` is set because another request of the same batch failed.
        """
        import requests
        import urllib3

        stop = stop or threading.Event()
        url = url or self.url
        last = ""
        for attempt in range(self.max_retries + 1):
            if stop.is_set():
                raise BerdsError(f"POST {url}: abandoned because another request of this batch failed")
            retry_after: float | None = None
            try:
                # No redirects, and the whole answer bounded in time and size (requests' timeout bounds each
                # socket read, not the request): post_within
                response, data = post_within(self._session(), url, json=body, timeout=self.timeout,
                                             deadline=time.monotonic() + self.timeout, limit=self.max_response_bytes)
            except (requests.ConnectionError, requests.Timeout, urllib3.exceptions.HTTPError) as exc:
                # (urllib3's errors come from reading the body, which requests does not wrap: a server that
                # closes mid-answer)
                last = (f"{type(exc).__name__}: connection refused — nothing is listening at "
                        f"{urlsplit(url).netloc} (start the server or fix base_url)"
                        if _refused(exc) else f"{type(exc).__name__}: {self._scrub(str(exc))[:200]}")
            except BodyTooLarge:  # a server bug, not retried
                raise BerdsError(f"POST {url}: the answer is over {self.max_response_bytes:,} bytes — not a chat "
                                 "completion; check the server (or raise -o max_response_bytes=N)") from None
            except BodyTooSlow:  # retried like a timeout
                last = f"the answer was still arriving after the {self.timeout:g} s timeout"
            else:
                text = http_text(data, response.encoding)
                if response.status_code not in RETRY_STATUSES:
                    try:
                        return response.status_code, json.loads(text)
                    except (ValueError, RecursionError):  # (nested past the parser's depth: not an answer either)
                        if response.status_code == 200:
                            raise BerdsError(f"POST {url}: HTTP 200 but the body is not JSON: "
                                             f"{self._scrub(text[:2000])[:300]!r}") from None
                        return response.status_code, text
                last = f"HTTP {response.status_code}: {self._error_message(_parse_json_or_text(text))}"
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if attempt < self.max_retries:
                stop.wait(self.backoff_delay(attempt, retry_after))  # wakes at once when stop is set
        raise BerdsError(f"POST {url} failed after {self.max_retries + 1} attempts; last answer: {last} — "
                         "check that the server is up and not overloaded (or raise max_retries / lower concurrency)")

    def _scrub(self, text: str) -> str:
        """``text`` (from the server or an exception) without this backend's own key, user and password — a server
        may echo them, whatever their shape — then without anything else shaped like a credential."""
        for secret in (self._api_key, *(self._basic_auth or ())):
            if secret and len(secret) >= 3:
                text = text.replace(secret, "REDACTED")
        return redact_text(text)

    def _error_message(self, payload: Any) -> str:
        """The server's error text, scrubbed (``_scrub``), then shortened."""
        return self._scrub(_raw_error_message(payload))[:300]

    def _status_hint(self, status: int) -> str:
        return _status_hint(status, self.api_key_env, self._basic_auth is not None, sent_key=self._api_key is not None)

    def backoff_delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt + 1``: the server's ``Retry-After`` when given, else
        exponential backoff with jitter in ``[d/2, d]``, ``d = min(backoff_max, backoff_base * 2**attempt)``."""
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_retry_after)
        ceiling = min(self.backoff_max, self.backoff_base * (2 ** attempt))
        return ceiling / 2 + random.uniform(0.0, ceiling / 2)


def _canonical_sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()


def _refused(exc: BaseException) -> bool:
    """A ConnectionRefusedError anywhere in requests' chain: its text is cut off long before it says so."""
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return True
        stack += [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]
    return False


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: either a number of seconds or an HTTP date; None when absent/invalid."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:  # "nan" or "-5" is no instruction: our own backoff, not an immediate retry
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _parse_json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _context_exceeded(payload: Any, message: str) -> bool:
    """Whether an error says the prompt is longer than the model reads: OpenAI's and berds' ``code``, or the
    wording vLLM and others use."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("code") == "context_length_exceeded":
        return True
    text = message.lower()
    return "context length" in text or "context of" in text or "context_length" in text


def _raw_error_message(payload: Any) -> str:
    """The server's error text (OpenAI's ``{"error": {"message": ...}}`` or a plain body), before redaction:
    longer than what is shown, so a credential is removed whole before the text is cut."""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:2000]
        if isinstance(error, str):
            return error[:2000]
        if "detail" in payload:  # FastAPI-style servers
            return str(payload["detail"])[:2000]
    return str(payload)[:2000] or "(empty body)"


def _status_hint(status: int, api_key_env: str | None, basic_auth: bool = False, sent_key: bool = False) -> str:
    if status in (401, 403):
        if api_key_env:
            return f" — check the key in ${api_key_env} and that it may use this model"
        if basic_auth:
            return " — check the user:password in base_url and that it may use this model"
        if sent_key:
            return " — check the key given in base_url (https://KEY@host/v1) and that it may use this model"
        return (" — no key was sent to this host: pass -o api_key_env=NAME of the environment variable that "
                "holds its key")
    if status == 404:
        return " — check base_url (it usually ends in /v1) and the model name the server serves (GET /v1/models)"
    if status in (400, 422):
        return " — the server rejected the request parameters"
    return ""
