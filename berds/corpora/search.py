"""Search corpora: one small corpus per question, built from the pages a web search API returns.

As in the BERDS study: search the question, take the top ``k`` result URLs (the study: 100 from
serper.dev), download the pages, keep their main content (readability-lxml, then html2text), cut it into
100-word passages. Each question's passages form one group of the store (``group = question id``), so
a retriever can search one question's corpus at a time.

Pieces:

* ``SearchProvider`` — the protocol a search API implements (``name``, ``search(query, num=)``,
  ``cache_params()``); ``SerperProvider`` is the first one. Providers are found by name in
  ``SEARCH_PROVIDERS`` (entry-point group ``berds.search_providers`` for your own).
* ``SearchCache`` — everything fetched is kept on disk: search responses under a hash of
  (provider, its parameters, query, k); page bodies content-addressed by the sha256 of their bytes; a
  small record per URL saying what happened (ok with the body's hash, or the failure reason). A second
  run reads the cache and fetches only what is missing (failures are not retried unless asked).
* ``PageFetcher`` — concurrent downloads with requests: connect/read timeouts and a total deadline, a
  size cap (Content-Length first, then while streaming), a content-type check (HTML and plain text;
  bodies without a type, or typed text/plain, are sniffed and binary ones refused), retries with
  exponential backoff for timeouts / connection errors / 429 / 5xx (a ``Retry-After`` is waited for, up to
  ``max_retry_after``), and at most ``per_host`` requests at a time to any one host. The total deadline
  is checked after every socket read, and a watchdog shuts the connection down when it passes (a server
  dripping its headers is inside one requests call), so a slow server cannot hold a build: the page is
  recorded as failed ("timeout (over N s in total)") and a re-run skips it. Redirects are followed here,
  hop by hop, so the deadline covers them too and no hop waits longer than the time left, and none leads to
  an address more private than the first (a page on the web cannot send berds to 169.254.169.254). Each request
  resolves its host once and connects to one of exactly the addresses checked (keeping the name for the Host
  header, TLS SNI and the certificate check), so a name that answers otherwise a moment later (DNS rebinding)
  cannot slip past; through a proxy, the proxy connects. A failed page never aborts the build. A failure
  caused by a limit (size, timeouts, Retry-After) records that limit; a re-run with a more generous one
  fetches the page again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable
from urllib.parse import urljoin, urlsplit

from berds.corpora.build import BuildReport, RateColumn, write_passages
from berds.corpora.docstore import PassageStore, check_building_folder, check_store_out
from berds.corpora.html import CLEANER_VERSION, CleanedPage, charset_from_content_type, clean_html, decode_html, sniff_binary
from berds.corpora.split import DEFAULT_WORDS, Document, split_document
from berds.errors import BerdsError, InputError
from berds.io import (BodyTooLarge, BodyTooSlow, atomic_write, check_writable, cut_at_deadline, cuttable_session,
                      http_text, post_within, read_json, read_streamed_body, write_json, write_jsonl)
from berds.registry import Catalogue
from berds.types import Passage, Question

SEARCH_PROVIDERS: Catalogue = Catalogue("search provider", "berds.search_providers")
SEARCH_PROVIDERS.add("serper", "berds.corpora.search:SerperProvider", "Google results through serper.dev (key: $SERPER_API_KEY)")

ACCEPTED_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


# ------------------------------------------------------------------------------------------- providers
@dataclass(frozen=True)
class SearchResult:
    """One organic search result, ``rank`` from 1: what a provider's ``search`` returns a list of.

    ``url`` (an http(s) address, required), ``title`` and ``snippet`` (strings, may be empty), ``rank`` (the
    result's place, from 1). An API's ``{"title", "link"}`` dicts become ``SearchResult(url=item["link"],
    title=item["title"], rank=i)``; ``search_result_problems`` says what a returned list gets wrong.
    """

    url: str
    title: str = ""
    snippet: str = ""
    rank: int = 0


class SearchError(BerdsError):
    """A search request that failed after retries (recorded per question; the build goes on)."""


@runtime_checkable
class SearchProvider(Protocol):
    """A web search API. ``search`` returns up to ``num`` results best first.

    ``cache_params`` lists the settings that change results (country, language, endpoint...): they are
    part of the cache key, so changing one never serves stale results.
    """

    name: str

    def search(self, query: str, *, num: int) -> list[SearchResult]: ...

    def cache_params(self) -> dict[str, Any]: ...


def search_result_problems(results: Any, num: int) -> list[str]:
    """Ways ``results`` (what ``search(query, num=num)`` returned) break the provider contract: a list of at most
    ``num`` ``SearchResult`` s, each with a ``url`` and string ``title``/``snippet``. Empty when fine.
    Used by ``build_search_corpus`` (which refuses a broken list in one line) and ``berds check-provider``."""
    if not isinstance(results, (list, tuple)):
        return [f"search() must return a list of SearchResult, got {type(results).__name__}"]
    problems = []
    if len(results) > num:
        problems.append(f"search(query, num={num}) returned {len(results)} results (at most num)")
    for i, r in enumerate(results):
        if isinstance(r, dict):
            link = next((k for k in ("link", "url", "href") if k in r), "link")
            problems.append(f"result {i} is a dict ({', '.join(map(repr, list(r)[:4]))}), not a SearchResult — return "
                            f"berds.corpora.search.SearchResult(url=item[{link!r}], title=item.get('title', ''), "
                            f"rank={i + 1})")
            break
        if not isinstance(r, SearchResult):
            problems.append(f"result {i} is a {type(r).__name__}, not berds.corpora.search.SearchResult")
            break
        if not isinstance(r.url, str) or not r.url.strip():  # (an odd scheme is the fetcher's to record as failed)
            problems.append(f"result {i} has url {r.url!r}: the page's address is needed")
            break
        bad = [f for f in ("title", "snippet") if not isinstance(getattr(r, f), str)]
        if bad or not isinstance(r.rank, int):
            problems.append(f"result {i}: {', '.join(bad) or 'rank'} must be "
                            f"{'strings' if bad else 'an integer'}")
            break
    return problems


def provider_problems(provider: Any) -> list[str]:
    """What a provider object lacks before any search: a ``name`` string, ``search`` and a ``cache_params()``
    that returns a JSON-able dict (it keys the search cache)."""
    problems = []
    if not isinstance(getattr(provider, "name", None), str) or not provider.name.strip():
        problems.append("it needs a `name` string")
    if not callable(getattr(provider, "search", None)):
        problems.append("it needs a method search(query, *, num) -> list[SearchResult]")
    params = getattr(provider, "cache_params", None)
    if not callable(params):
        problems.append("it needs a method cache_params() -> dict (the settings that change results; {} if none)")
    else:
        value = params()
        try:
            ok = isinstance(value, dict) and json.dumps(value, sort_keys=True) is not None
        except (TypeError, ValueError):
            ok = False
        if not ok:
            problems.append(f"cache_params() must return a dict of JSON values, got {value!r:.80}")
    return problems


def _retry_delay(attempt: int, backoff: float) -> float:
    """Exponential backoff with a little jitter so concurrent retries do not stampede."""
    return backoff * (2**attempt) * (1.0 + 0.25 * random.random())


class SerperProvider:
    """Google results from serper.dev: ``POST {base_url}/search`` with ``{"q", "num", "gl", "hl", "page"}``.

    The key comes from ``api_key`` or ``$SERPER_API_KEY``; ``base_url`` (or ``$SERPER_BASE_URL``) lets tests
    and proxies point elsewhere. The key is checked only when a request is actually made, so a fully
    cached build runs without one. A rejected key (401/403) stops the build; 429/5xx/timeouts are retried.
    The answer is bounded like a page fetch: ``timeout`` covers all of it (a watchdog cuts a server dripping its
    headers), ``max_response_bytes`` its size (decompressed). Redirects are not followed (the key would go along),
    and the key is removed from any server text shown or written to ``failures.jsonl``.
    """

    name = "serper"
    DEFAULT_BASE_URL = "https://google.serper.dev"
    PAGE_SIZE = 100  # serper's largest "num"
    MAX_RETRY_AFTER = 60.0  # longest Retry-After waited for

    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, gl: str = "us", hl: str = "en",
                 timeout: float = 30.0, retries: int = 3, backoff: float = 1.0,
                 max_response_bytes: int = 10_000_000):
        self.api_key = api_key if api_key is not None else os.environ.get("SERPER_API_KEY")
        self.base_url = (base_url or os.environ.get("SERPER_BASE_URL") or self.DEFAULT_BASE_URL).rstrip("/")
        self.gl, self.hl, self.timeout, self.retries, self.backoff = gl, hl, timeout, retries, backoff
        self.max_response_bytes = max_response_bytes  # 100 results are ~100 KB
        self.requests_made = 0
        self._local = threading.local()

    def cache_params(self) -> dict[str, Any]:
        return {"gl": self.gl, "hl": self.hl}  # the endpoint is deliberately not part of the key

    def _scrub(self, text: str) -> str:
        """Server or connection text without the key (a server may echo it): such text reaches failures.jsonl."""
        from berds.llm.secrets import redact_text

        if self.api_key and len(self.api_key) >= 3:
            text = text.replace(self.api_key, "REDACTED")
        return redact_text(text)

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = cuttable_session()
        return session

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        import requests
        import urllib3

        if not self.api_key:
            raise BerdsError("no serper.dev API key: set the environment variable SERPER_API_KEY (or pass api_key=)")
        from berds.llm.secrets import redact_url

        url = f"{self.base_url}/search"
        shown = redact_url(url)
        last = ""
        wait: float | None = None  # the server's Retry-After, when it sent one
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(wait if wait is not None else _retry_delay(attempt - 1, self.backoff))
                wait = None
            self.requests_made += 1
            # The whole answer within the timeout, at most max_response_bytes of it, and no redirect (the key
            # would follow it to any host): post_within
            try:
                r, body = post_within(self._session(), url, json=payload, headers={"X-API-KEY": self.api_key},
                                      timeout=self.timeout, deadline=time.monotonic() + self.timeout,
                                      limit=self.max_response_bytes)
            except BodyTooLarge:
                raise SearchError(f"{shown} answered more than {self.max_response_bytes:,} bytes — not a search "
                                  "response") from None
            except BodyTooSlow:
                last = f"the answer was still arriving after the {self.timeout:g} s timeout"
                continue
            except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
                last = f"{type(exc).__name__}: {self._scrub(str(exc))[:200]}"
                continue
            if r.status_code in (401, 403):
                raise BerdsError(f"{shown} refused the API key (HTTP {r.status_code}) — check SERPER_API_KEY")
            if r.is_redirect:
                raise SearchError(f"{shown} answered HTTP {r.status_code} (a redirect), which is not followed: the "
                                  "API key must not follow it to another address — point SERPER_BASE_URL at the "
                                  "final one")
            if r.status_code == 429 or r.status_code >= 500:
                last = f"HTTP {r.status_code}"
                wait = retry_after_seconds(r.headers.get("Retry-After"))
                if wait is not None and wait > self.MAX_RETRY_AFTER:
                    raise SearchError(f"{shown} asks to retry after {wait:g} s (over the {self.MAX_RETRY_AFTER:g} s "
                                      "limit) — re-run the build later; finished searches are cached")
                continue
            text = http_text(body, r.encoding)
            if r.status_code != 200:
                raise SearchError(f"{shown} answered HTTP {r.status_code}: {self._scrub(text[:2000])[:200]}")
            try:
                data = json.loads(text)
            except ValueError:
                raise SearchError(f"{shown} did not return JSON (got {r.headers.get('Content-Type')!r})") from None
            if not isinstance(data, dict):
                raise SearchError(f"{shown} returned {type(data).__name__}, expected a JSON object")
            return data
        raise SearchError(f"{shown} failed after {self.retries + 1} attempts ({last})")

    def search(self, query: str, *, num: int) -> list[SearchResult]:
        results: list[SearchResult] = []
        page = 1
        while len(results) < num:
            size = min(self.PAGE_SIZE, num - len(results)) if num <= self.PAGE_SIZE else self.PAGE_SIZE
            payload: dict[str, Any] = {"q": query, "num": size, "gl": self.gl, "hl": self.hl}
            if page > 1:
                payload["page"] = page
            organic = self._post(payload).get("organic") or []
            if not isinstance(organic, list):
                raise SearchError(f"'organic' in the serper response is {type(organic).__name__}, expected a list")
            for item in organic:
                link = item.get("link") if isinstance(item, dict) else None
                if isinstance(link, str) and link:
                    results.append(SearchResult(url=link, title=str(item.get("title") or ""),
                                                snippet=str(item.get("snippet") or ""), rank=len(results) + 1))
            if len(organic) < size:
                break  # no more results
            page += 1
        return results[:num]


def get_provider(provider: str | SearchProvider, **options: Any) -> SearchProvider:
    """A provider object from a name in ``SEARCH_PROVIDERS`` (or ``module:attr``), or the object itself."""
    if isinstance(provider, str):
        return SEARCH_PROVIDERS.create(provider, **options)
    return provider


# ------------------------------------------------------------------------------------------- cache
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class PageRecord:
    """What happened to one URL. ``ok`` pages have ``body_sha256``; failed ones a ``reason``, and ``limits``:
    the fetch options the failure depended on (``{"max_bytes": 500}``; empty for an http 404)."""

    url: str
    ok: bool
    reason: str = ""
    http_status: int | None = None
    content_type: str = ""
    body_sha256: str = ""
    bytes: int = 0
    final_url: str = ""
    attempts: int = 0
    fetched_at: str = ""
    limits: dict[str, float] = field(default_factory=dict)


_DAMAGED_FIX = "delete this file (the next run fetches it again) or the whole cache folder"


def _from_json(cls: type, data: Any, path: Path) -> Any:
    """A cache record as ``cls``, or an InputError naming the file: a damaged record must not be a traceback."""
    if not isinstance(data, dict):
        raise InputError(f"a damaged cache record: expected a JSON object, got {type(data).__name__}", path=path,
                         fix=_DAMAGED_FIX)
    names = [f.name for f in fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise InputError(f"a damaged cache record: unexpected field {unknown[0]!r}", path=path, fix=_DAMAGED_FIX)
    try:
        return cls(**data)
    except TypeError:
        missing = next((f.name for f in fields(cls) if f.name not in data), "?")
        raise InputError(f"a damaged cache record: missing field {missing!r}", path=path, fix=_DAMAGED_FIX) from None


class SearchCache:
    """On-disk cache of search responses, page records, page bodies (content-addressed) and cleaned text."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @staticmethod
    def _fan(folder: Path, key: str, suffix: str = "") -> Path:
        return folder / key[:2] / f"{key}{suffix}"

    # search responses
    def search_key(self, provider: SearchProvider, query: str, num: int) -> str:
        ident = json.dumps({"provider": provider.name, "params": provider.cache_params(), "query": query, "num": num}, sort_keys=True)
        return _sha256(ident.encode("utf-8"))

    def get_search(self, key: str) -> list[SearchResult] | None:
        path = self._fan(self.root / "search", key, ".json")
        if not path.is_file():
            return None
        data = read_json(path)
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise InputError("a damaged cache record: no 'results' list", path=path, fix=_DAMAGED_FIX)
        return [_from_json(SearchResult, r, path) for r in results]

    def put_search(self, key: str, provider: SearchProvider, query: str, results: list[SearchResult]) -> None:
        write_json(self._fan(self.root / "search", key, ".json"),
                   {"provider": provider.name, "params": provider.cache_params(), "query": query,
                    "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": [asdict(r) for r in results]})

    # pages
    def get_page(self, url: str) -> PageRecord | None:
        path = self._fan(self.root / "pages", _sha256(url.encode("utf-8")), ".json")
        return _from_json(PageRecord, read_json(path), path) if path.is_file() else None

    def put_page(self, record: PageRecord, body: bytes | None = None) -> None:
        if body is not None:
            blob = self._fan(self.root / "blobs", record.body_sha256)
            if not blob.is_file() or blob.stat().st_size != len(body):  # absent, or a truncated copy
                with atomic_write(blob, "wb") as f:
                    f.write(body)
        write_json(self._fan(self.root / "pages", _sha256(record.url.encode("utf-8")), ".json"), asdict(record))

    def has_body(self, record: PageRecord) -> bool:
        """Whether the body of an ok ``record`` is on disk at its full size (a cheap check; ``body`` hashes it)."""
        blob = self._fan(self.root / "blobs", record.body_sha256)
        return blob.is_file() and blob.stat().st_size == record.bytes

    def body(self, record: PageRecord) -> bytes:
        blob = self._fan(self.root / "blobs", record.body_sha256)
        try:
            data = blob.read_bytes()
        except FileNotFoundError:
            raise InputError("a page body is missing from the search cache", path=blob,
                             fix="run the build again (it fetches the page again)") from None
        if _sha256(data) != record.body_sha256:
            raise InputError("a damaged page body: its SHA-256 is not its name", path=blob, fix=_DAMAGED_FIX)
        return data

    # cleaned text (deterministic from the body; cached because readability is the slow part)
    def cleaned(self, record: PageRecord) -> CleanedPage:
        version = _sha256(CLEANER_VERSION.encode())[:8]
        path = self._fan(self.root / "clean", record.body_sha256, f".{version}.json")
        if path.is_file():
            try:
                return _from_json(CleanedPage, read_json(path), path)
            except InputError:
                pass  # derived from the body: a damaged copy is simply made again
        body = self.body(record)
        mime = record.content_type.split(";")[0].strip().lower()
        if sniff_binary(body, mime, charset=charset_from_content_type(record.content_type)):
            page = CleanedPage("", "")  # a binary body an older berds cached as a page
        else:
            text, _ = decode_html(body, record.content_type)
            page = CleanedPage("", text.strip()) if mime == "text/plain" else clean_html(text, url=record.final_url or record.url)
        write_json(path, asdict(page))
        return page


# ------------------------------------------------------------------------------------------- fetching
@dataclass
class FetchOptions:
    """How pages are downloaded (see the module docstring)."""

    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    total_timeout: float = 30.0
    max_bytes: int = 5_000_000
    retries: int = 2
    backoff: float = 1.0
    concurrency: int = 16
    per_host: int = 2
    user_agent: str = "Mozilla/5.0 (compatible; berds-corpus-builder/0.1; research use)"
    accepted_types: tuple[str, ...] = ACCEPTED_TYPES
    max_retry_after: float = 60.0  # longest Retry-After (429/503) waited for; longer ones fail the page now

    def __post_init__(self) -> None:
        # Checked here, not at use: per_host=0 hung for ever, read_timeout=0 ended in a requests traceback.
        for name, (cli, low, above) in _OPTION_RANGES.items():
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            seconds = isinstance(low, float)
            ok = number and math.isfinite(value) and (value > low if above else value >= low) and \
                (not seconds or value <= MAX_SECONDS)
            if not ok:
                allowed = (f"{'above' if above else 'at least'} {low:g} and at most {MAX_SECONDS:,.0f} seconds"
                           if seconds else f"a whole number of at least {low}")
                raise BerdsError(f"{cli} must be {allowed}, got {value!r}")


MAX_SECONDS = 86_400.0  # a day: far above any sensible wait, and below what a socket timeout can hold
# FetchOptions field -> (its name on the command line, the lowest value, whether the lowest is excluded).
_OPTION_RANGES: dict[str, tuple[str, float, bool]] = {
    "connect_timeout": ("--connect-timeout", 0.0, True), "read_timeout": ("--read-timeout", 0.0, True),
    "total_timeout": ("--total-timeout", 0.0, True), "max_retry_after": ("--max-retry-after", 0.0, False),
    "backoff": ("backoff", 0.0, False), "max_bytes": ("--max-bytes", 1, False), "retries": ("--retries", 0, False),
    "concurrency": ("--concurrency", 1, False), "per_host": ("--per-host", 1, False),
}


class _Failure(Exception):
    def __init__(self, reason: str, *, retry: bool, status: int | None = None, retry_after: float | None = None,
                 limits: dict[str, float] | None = None):
        super().__init__(reason)
        self.reason, self.retry, self.status, self.retry_after = reason, retry, status, retry_after
        self.limits = limits or {}


def _limits_raised(record: PageRecord, options: FetchOptions) -> bool:
    """Whether ``options`` are more generous than a limit a failure recorded (so the page may work now)."""
    limits = record.limits if isinstance(record.limits, dict) else {}
    return any(isinstance(value, (int, float)) and isinstance(getattr(options, name, None), (int, float))
               and getattr(options, name) > value for name, value in limits.items())


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), or None when absent/unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    import datetime as _dt

    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())


def _address_scope(address: str) -> int:
    """How private an IP ``address`` is: 0 public, 1 a private network (10/8, 192.168/16, fc00::/7, 100.64/10...),
    2 this machine or its link (loopback, link-local such as 169.254.169.254, unspecified, multicast, reserved)."""
    import ipaddress

    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return 2
    return 0 if ip.is_global else 1


def _resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order (what urllib3 would try), each once."""
    import socket

    from urllib3.util.connection import allowed_gai_family

    infos = socket.getaddrinfo(host, None, allowed_gai_family(), socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in infos))


def _pinning_adapter(base: type) -> type:
    """An adapter class (a subclass of ``base``, a requests ``HTTPAdapter``) that resolves each request's host
    once, has ``vet(host, addresses)`` pass or refuse those addresses, and connects to one of exactly them: a
    second lookup at connect time could answer otherwise (DNS rebinding) and reach an address never checked.
    The pool is keyed by the address; the ``Host`` header, TLS SNI and the certificate's hostname check stay
    those of the URL's host. A request through a proxy is not looked up here (``vet(host, None)``): the proxy
    resolves and connects, and a network reached only through a proxy may have no DNS of its own that answers."""
    import requests
    from requests.utils import select_proxy
    from urllib3.exceptions import ConnectTimeoutError

    class PinningAdapter(base):
        vet: Any = None  # set by the fetcher before each request
        deadline = math.inf  # (time.monotonic()) no further address is tried after it
        _address: str | None = None

        def send(self, request: Any, stream: bool = False, timeout: Any = None, verify: Any = True, cert: Any = None,
                 proxies: Any = None) -> Any:
            parts = urlsplit(request.url)
            host = parts.hostname or ""
            if select_proxy(request.url, proxies):
                if self.vet is not None:
                    self.vet(host, None)
                return super().send(request, stream, timeout, verify, cert, proxies)
            try:
                addresses = _resolve(host)
            except UnicodeError:
                raise requests.exceptions.InvalidURL(f"{host!r} is not a valid host name", request=request) from None
            except OSError as exc:
                raise requests.ConnectionError(f"cannot resolve {host}: {exc}", request=request) from None
            if self.vet is not None:
                self.vet(host, addresses)
            default_port = 443 if parts.scheme.lower() == "https" else 80
            name = f"[{host}]" if ":" in host else host
            request.headers["Host"] = name if parts.port in (None, default_port) else f"{name}:{parts.port}"
            last: Exception | None = None
            for address in addresses:
                left = self.deadline - time.monotonic()
                if last is not None and left <= 0:
                    break
                if isinstance(timeout, tuple):  # (a later address gets no more than the time left)
                    timeout = tuple(t if t is None else min(t, max(left, 0.001)) for t in timeout)
                self._address = address
                try:
                    return super().send(request, stream, timeout, verify, cert, proxies)
                except requests.ConnectionError as exc:
                    # Not connected (refused, unreachable, connect timeout): nothing was sent, try the next one.
                    if not isinstance(getattr(exc.args[0] if exc.args else None, "reason", None), ConnectTimeoutError):
                        raise
                    last = exc
                finally:
                    self._address = None
            assert last is not None  # (getaddrinfo answers at least one address or raises)
            raise last

        def get_connection_with_tls_context(self, request: Any, verify: Any, proxies: Any = None,
                                            cert: Any = None) -> Any:
            if self._address is None:  # through a proxy
                return super().get_connection_with_tls_context(request, verify, proxies=proxies, cert=cert)
            host_params, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
            if host_params["scheme"] == "https":
                pool_kwargs["server_hostname"] = pool_kwargs["assert_hostname"] = host_params["host"].rstrip(".")
            host_params["host"] = self._address
            return self.poolmanager.connection_from_host(**host_params, pool_kwargs=pool_kwargs)

    return PinningAdapter


def _total_timeout(options: FetchOptions, status: int | None = None) -> _Failure:
    # Not retried: a page this slow is slow again; the failure is recorded, so a re-run skips it.
    return _Failure(f"timeout (over {options.total_timeout:g} s in total)", retry=False, status=status,
                    limits={"total_timeout": options.total_timeout})


class PageFetcher:
    """Download URLs into a ``SearchCache`` concurrently; every URL ends with a ``PageRecord``."""

    def __init__(self, cache: SearchCache, options: FetchOptions | None = None):
        self.cache = cache
        self.options = options or FetchOptions()
        self._local = threading.local()
        self._host_locks: dict[str, threading.Semaphore] = {}
        self._lock = threading.Lock()
        self.refetched: Counter[str] = Counter()  # cached pages fetched again, by why

    def _session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = cuttable_session()  # (cut at the total deadline: see _download_once)
            # (a subclass of the cuttable adapter, so its connections are still cut at the deadline)
            self._local.pins = _pinning_adapter(type(s.get_adapter("https://")))()
            s.mount("http://", self._local.pins)
            s.mount("https://", self._local.pins)
            s.headers["User-Agent"] = self.options.user_agent
            s.headers["Accept"] = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1"
        return s

    def _host_slot(self, url: str) -> threading.Semaphore:
        host = urlsplit(url).netloc.lower()
        with self._lock:
            if host not in self._host_locks:
                self._host_locks[host] = threading.Semaphore(self.options.per_host)
            return self._host_locks[host]

    def _get(self, url: str, deadline: float):
        """The final response for ``url``, following redirects hop by hop (as many as requests would) so the
        total deadline covers them: checked before each hop, and no hop waits longer than the time left."""
        import requests

        o, session = self.options, self._session()
        origin: list[Any] = []  # (host, the addresses its request connected to), then its scope

        def scope_of(host: str, addresses: list[str] | None) -> int:
            if addresses is None:  # through a proxy: looked up here only now that a redirect asks (best effort)
                try:
                    addresses = _resolve(host)
                except (OSError, UnicodeError):
                    addresses = []
            return max((_address_scope(a) for a in addresses), default=0)

        def vet(host: str, addresses: list[str] | None) -> None:
            # A page on the web must not make berds read a service of this machine or network (a cloud metadata
            # endpoint, a router, a local server) into a corpus: no redirect to a more private address. The
            # origin's scope is that of the addresses its request connected to.
            if not origin:
                origin.append((host, addresses))
                return
            if isinstance(origin[0], tuple):
                origin[0] = scope_of(*origin[0])  # (once per page)
            if scope_of(host, addresses) > origin[0]:
                raise _Failure(f"redirect to a non-public address refused ({host})", retry=False)

        pins = self._local.pins
        pins.vet, pins.deadline = vet, deadline
        for _ in range(session.max_redirects + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                raise _total_timeout(o)
            r = session.get(url, timeout=(min(o.connect_timeout, left), min(o.read_timeout, left)), stream=True,
                            allow_redirects=False)
            location = session.get_redirect_target(r)
            if not location:
                return r
            r.close()
            url = requests.utils.requote_uri(urljoin(r.url, location))
        raise requests.exceptions.TooManyRedirects()

    def _download_once(self, url: str) -> tuple[bytes, str, int, str]:
        import requests
        import urllib3

        o = self.options
        deadline = time.monotonic() + o.total_timeout

        def timed_out() -> _Failure:  # the total deadline's failure when the hop's timeout was cut to the time left
            if time.monotonic() >= deadline:
                return _total_timeout(o)
            return _Failure("timeout", retry=True, limits={"connect_timeout": o.connect_timeout,
                                                           "read_timeout": o.read_timeout, "total_timeout": o.total_timeout})

        # (a server dripping its status line and headers is inside one requests call that no read timeout
        # bounds as a whole: the watchdog cuts the connection at the deadline)
        watchdog = cut_at_deadline(self._session(), deadline)
        try:
            with self._get(url, deadline) as r:
                if r.status_code == 429 or r.status_code >= 500:
                    raise _Failure(f"http {r.status_code}", retry=True, status=r.status_code,
                                   retry_after=retry_after_seconds(r.headers.get("Retry-After")))
                if r.status_code != 200:
                    raise _Failure(f"http {r.status_code}", retry=False, status=r.status_code)
                content_type = r.headers.get("Content-Type", "")
                mime = content_type.split(";")[0].strip().lower()
                if mime and mime not in o.accepted_types:
                    raise _Failure(f"content type {mime}", retry=False, status=200)
                length = r.headers.get("Content-Length")
                if length and length.isdigit() and int(length) > o.max_bytes:
                    raise _Failure(f"too large ({int(length):,} bytes > {o.max_bytes:,})", retry=False, status=200,
                                   limits={"max_bytes": o.max_bytes})
                try:
                    body = read_streamed_body(r, deadline=deadline, limit=o.max_bytes)
                except BodyTooLarge:
                    raise _Failure(f"too large (> {o.max_bytes:,} bytes)", retry=False, status=200,
                                   limits={"max_bytes": o.max_bytes}) from None
                except BodyTooSlow:
                    raise _total_timeout(o, status=200) from None
                if watchdog.fired.is_set():  # whatever was read when the connection was cut is not the page
                    raise _total_timeout(o, status=200)
                sniffed = sniff_binary(body, mime, charset=charset_from_content_type(content_type))
                if sniffed:
                    raise _Failure(f"content type {sniffed} (sniffed)", retry=False, status=200)
                return body, content_type or "text/html", r.status_code, r.url
        except (requests.Timeout, urllib3.exceptions.ReadTimeoutError):
            raise timed_out() from None
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.DecodeError) as exc:  # from read1 (not wrapped by requests)
            if time.monotonic() >= deadline:  # the watchdog cut the connection
                raise _total_timeout(o) from None
            raise _Failure(f"broken response ({type(exc).__name__})", retry=True) from None
        except requests.exceptions.TooManyRedirects:
            raise _Failure("too many redirects", retry=False) from None
        except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema) as exc:
            raise _Failure(f"invalid url ({type(exc).__name__})", retry=False) from None
        except requests.ConnectionError as exc:
            # (requests reports a read timeout mid-body as a ConnectionError; a cut connection is one too)
            if "timed out" in str(exc).lower() or time.monotonic() >= deadline:
                raise timed_out() from None
            raise _Failure(f"connection error ({type(exc).__name__})", retry=True) from None
        except requests.RequestException as exc:
            raise _Failure(f"request failed ({type(exc).__name__})", retry=False) from None
        finally:
            watchdog.cancel()

    def fetch(self, url: str) -> PageRecord:
        """Download one URL (with retries) and store the outcome in the cache."""
        o = self.options
        attempt = 0
        now = lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # noqa: E731
        while True:
            attempt += 1
            try:
                with self._host_slot(url):
                    body, content_type, status, final_url = self._download_once(url)
            except _Failure as f:
                if f.retry and f.retry_after is not None and f.retry_after > o.max_retry_after:
                    f.reason += f" (Retry-After {f.retry_after:g} s is over the {o.max_retry_after:g} s limit)"
                    f.limits = {"max_retry_after": o.max_retry_after}
                elif f.retry and attempt <= o.retries:
                    # The server's Retry-After when it sent one (bounded above), else exponential backoff.
                    time.sleep(f.retry_after if f.retry_after is not None else _retry_delay(attempt - 1, o.backoff))
                    continue
                record = PageRecord(url=url, ok=False, reason=f.reason, http_status=f.status, attempts=attempt, fetched_at=now(),
                                    limits=f.limits)
                self.cache.put_page(record)
                return record
            record = PageRecord(url=url, ok=True, http_status=status, content_type=content_type, body_sha256=_sha256(body),
                                bytes=len(body), final_url=final_url, attempts=attempt, fetched_at=now())
            self.cache.put_page(record, body)
            return record

    def fetch_all(self, urls: Sequence[str], *, retry_failed: bool = False, progress: bool = True) -> tuple[dict[str, PageRecord], int]:
        """Records for ``urls``: from the cache when there, else downloaded. Returns (records, downloads made)."""
        records: dict[str, PageRecord] = {}
        todo: list[str] = []
        for url in dict.fromkeys(urls):
            cached = self.cache.get_page(url)
            if cached is None:
                todo.append(url)
            elif cached.ok and not self.cache.has_body(cached):
                self.refetched["body missing from the cache"] += 1  # deleted or truncated: fetch it again
                todo.append(url)
            elif not cached.ok and not retry_failed and _limits_raised(cached, self.options):
                self.refetched["failed under a stricter limit"] += 1
                todo.append(url)
            elif cached.ok or not retry_failed:
                records[url] = cached
            else:
                todo.append(url)
        if not todo:
            return records, 0
        bar = _bar(progress, "pages", len(todo))
        with bar, ThreadPoolExecutor(max_workers=max(1, self.options.concurrency)) as pool:
            task = bar.add_task("fetching pages", total=len(todo), ok=0, failed=0) if bar else None
            ok = failed = 0
            futures = {pool.submit(self.fetch, url): url for url in todo}
            for fut in as_completed(futures):
                rec = fut.result()
                records[futures[fut]] = rec
                ok, failed = ok + rec.ok, failed + (not rec.ok)
                if bar:
                    bar.update(task, advance=1, ok=ok, failed=failed)
        return records, len(todo)


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False

    def __bool__(self):
        return False


def _bar(enabled: bool, what: str, total: int):
    if not enabled:
        return _NoBar()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), RateColumn(what),
                    TextColumn("{task.fields[ok]} ok, {task.fields[failed]} failed"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True))


# ------------------------------------------------------------------------------------------- building
@dataclass
class SearchFailure:
    """A result page (or a whole question's search) that did not make it into the corpus, and why."""

    qid: str
    url: str
    rank: int
    reason: str


def _load_questions(questions: str | os.PathLike | Sequence[Question], split: str, limit: int | None) -> list[Question]:
    if isinstance(questions, (str, os.PathLike)):
        from berds.questions import load_questions

        # Searching needs only the question text: sets without gold perspectives (DELPHI) work too.
        return load_questions(str(questions), split=split, limit=limit, require_perspectives=False)
    qs = list(questions)
    return qs[:limit] if limit is not None else qs


def passage_id(qid: str, url: str, n: int) -> str:
    """Ids of a search corpus: ``"{qid}/{sha1(url)[:12]}-{n}"`` (unique per question; same page, same ids)."""
    return f"{qid}/{hashlib.sha1(url.encode('utf-8')).hexdigest()[:12]}-{n}"


def build_search_corpus(
    questions: str | os.PathLike | Sequence[Question],
    out: str | os.PathLike,
    *,
    provider: str | SearchProvider = "serper",
    provider_options: dict[str, Any] | None = None,
    top: int = 100,
    split: str = "test",
    limit: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    fetch_options: FetchOptions | None = None,
    retry_failed: bool = False,
    words_per_passage: int = DEFAULT_WORDS,
    overwrite: bool = False,
    progress: bool = True,
) -> tuple[PassageStore, BuildReport]:
    """Search every question, fetch the top ``top`` pages, and write one passage group per question.

    ``questions``: a BERDS set name (with ``split``), a jsonl path, or ``Question`` objects. The cache
    (default ``$BERDS_HOME/search-cache``) makes re-runs fetch only what is missing. Pages that failed
    are listed, with reasons, in ``<out>/failures.jsonl`` and counted in the report.
    """
    from berds.io import home_dir

    if top < 1:
        raise InputError(f"--top must be at least 1, got {top}")
    check_out_folder(out, overwrite=overwrite)
    qs = _load_questions(questions, split, limit)
    if not qs:
        raise InputError("no questions to search for", path=str(questions) if isinstance(questions, (str, os.PathLike)) else None)
    search = get_provider(provider, **(provider_options or {}))
    if problems := provider_problems(search):
        raise BerdsError(f"search provider {provider!r} breaks the provider contract: {'; '.join(problems)} "
                         "(see `berds check-provider`)")
    cache = SearchCache(Path(cache_dir) if cache_dir is not None else home_dir() / "search-cache")
    out = Path(out)
    report = BuildReport(kind=f"search ({search.name}, top {top})", out=str(out))
    failures: list[SearchFailure] = []
    start = time.monotonic()

    # 1. search (cached per provider + parameters + query + k)
    results: dict[str, list[SearchResult]] = {}
    searched = 0
    bar = _bar(progress, "questions", len(qs))
    with bar:
        task = bar.add_task("searching", total=len(qs), ok=0, failed=0) if bar else None
        for i, q in enumerate(qs):
            key = cache.search_key(search, q.text, top)
            hits = cache.get_search(key)
            if hits is None:
                try:
                    hits = search.search(q.text, num=top)
                except SearchError as exc:
                    failures.append(SearchFailure(q.id, "", 0, f"search failed: {exc}"))
                    report.skip("search failed")
                    hits = None
                except Exception as exc:
                    if not isinstance(exc, BerdsError):  # the plug-in's bug keeps its traceback; this names whose
                        exc.add_note(f"berds: search provider {search.name!r} ({type(search).__module__}:"
                                     f"{type(search).__qualname__}) raised this searching question {q.id!r}; "
                                     "searches done before are cached (`berds check-provider` checks a provider)")
                    raise
                else:
                    if problems := search_result_problems(hits, top):  # (a list of dicts died 54 lines deep)
                        raise BerdsError(f"search provider {search.name!r} broke the provider contract on question "
                                         f"{q.id!r}: {'; '.join(problems[:2])} (see `berds check-provider`)")
                    cache.put_search(key, search, q.text, hits)
                    searched += 1
            if hits is not None:
                results[q.id] = hits[:top]
            if bar:
                bar.update(task, advance=1, ok=len(results), failed=i + 1 - len(results))

    # 2. fetch every distinct page once
    fetcher = PageFetcher(cache, fetch_options)
    all_urls = [r.url for hits in results.values() for r in hits]
    records, downloaded = fetcher.fetch_all(all_urls, retry_failed=retry_failed, progress=progress)

    # 3. clean, split, write (question order, then rank order: deterministic)
    def stream() -> Iterable[tuple[Passage, str]]:
        for q in qs:
            seen: set[str] = set()
            for r in results.get(q.id, []):
                report.documents_read += 1
                if r.url in seen:
                    report.skip("repeated url in one question's results")
                    continue
                seen.add(r.url)
                rec = records[r.url]
                reason = rec.reason if not rec.ok else ""
                if rec.ok:
                    page = cache.cleaned(rec)
                    if not page.text.split():
                        reason = "no text after cleaning"
                if reason:
                    failures.append(SearchFailure(q.id, r.url, r.rank, reason))
                    report.skip(_reason_class(reason))
                    continue
                report.documents_used += 1
                doc = Document(id=r.url, text=page.text, title=r.title or page.title, source=r.url)
                for n, p in enumerate(split_document(doc, words_per_passage=words_per_passage)):
                    yield Passage(id=passage_id(q.id, r.url, n), text=p.text, title=p.title, source=p.source), q.id

    report.extra.update({"questions": len(qs), "search requests made": searched, "pages downloaded now": downloaded,
                         "pages from cache": len(records) - downloaded})
    for why, n in sorted(fetcher.refetched.items()):
        report.extra[f"pages fetched again ({why})"] = n

    def with_empty_questions(pairs: Iterable[tuple[Passage, str]]) -> Iterable[tuple[Passage, str]]:
        """Pass passages through; afterwards, list questions that got none (their group will be absent)."""
        covered: set[str] = set()
        for passage, group in pairs:
            covered.add(group)
            yield passage, group
        empty = [q.id for q in qs if q.id not in covered]
        report.extra["questions without passages"] = len(empty)
        for qid in empty:
            failures.append(SearchFailure(qid, "", 0, "no usable page for this question"))
    metadata = {
        "source": {"kind": "search", "provider": search.name, "params": search.cache_params(), "top": top,
                   "questions": str(questions) if isinstance(questions, (str, os.PathLike)) else f"{len(qs)} questions",
                   "split": split, "cache": str(cache.root)},
        "options": {"words_per_passage": words_per_passage, "cleaner": CLEANER_VERSION, "max_bytes": fetcher.options.max_bytes},
    }
    metadata["questions"] = [q.id for q in qs]
    store = write_passages(with_empty_questions(stream()), out, report, overwrite=overwrite, metadata=metadata,
                           allow_empty=True)  # (every failure is listed in failures.jsonl)
    report.seconds = time.monotonic() - start
    write_jsonl(out / "failures.jsonl", (asdict(f) for f in failures))
    report.extra["failures listed in"] = str(out / "failures.jsonl")
    report.failures = [asdict(f) for f in failures]
    return store, report


def check_out_folder(out: str | os.PathLike, *, overwrite: bool) -> None:
    """Refuse, before any search or fetch, an ``out`` the store writer would refuse at the end."""
    out = Path(out)
    check_writable(out, folder=True)
    check_store_out(out, overwrite=overwrite)
    check_building_folder(out.with_name(out.name + ".building"))


def _reason_class(reason: str) -> str:
    """Group failure reasons for the summary table ("too large (3,000,000 bytes > ...)" -> "too large")."""
    return reason.split(" (")[0]
