"""The page fetcher against a misbehaving server on 127.0.0.1 (issue 15, item 4)."""

from __future__ import annotations

import time

import pytest

from berds.corpora.search import FetchOptions, PageFetcher, SearchCache, retry_after_seconds
from fault_server import LATIN1_TEXT, start

pytestmark = pytest.mark.network


@pytest.fixture()
def server():
    srv, base = start()
    yield base
    srv.shutdown()
    srv.server_close()


def fetcher(tmp_path, **options) -> PageFetcher:
    defaults = dict(connect_timeout=2, read_timeout=2, total_timeout=5, retries=1, backoff=0.01, concurrency=4)
    return PageFetcher(SearchCache(tmp_path / "cache"), FetchOptions(**{**defaults, **options}))


def test_a_dripping_body_is_cut_at_the_total_timeout_and_not_fetched_again(server, tmp_path):
    """Content-Length 20,000 sent a byte every 50 ms: each read is inside the 2 s read timeout, so only the
    total deadline can stop it. Before the fix the fetch blocked on a 64 KB read for ~17 minutes."""
    from fault_server import FaultHandler

    url = f"{server}/drip"
    started = time.monotonic()
    records, downloaded = fetcher(tmp_path, total_timeout=1.0).fetch_all([url], progress=False)
    elapsed = time.monotonic() - started
    rec = records[url]
    assert not rec.ok and rec.reason == "timeout (over 1 s in total)" and rec.attempts == 1 and downloaded == 1
    assert elapsed < 3.5  # the deadline plus at most one read
    # The failure is in the cache: a re-run does not fetch (and so does not hang on) it again.
    again, downloaded = fetcher(tmp_path, total_timeout=1.0).fetch_all([url], progress=False)
    assert downloaded == 0 and again[url].reason == rec.reason
    assert [p for _, p in FaultHandler.log].count("/drip") == 1


@pytest.mark.parametrize("path, kind", [("/png", "image/png"), ("/octets", "application/octet-stream"),
                                        ("/binary-text", "application/octet-stream")])
def test_binary_bodies_are_refused_not_turned_into_passages(server, tmp_path, path, kind):
    url = server + path
    rec = fetcher(tmp_path).fetch(url)
    assert not rec.ok and rec.reason == f"content type {kind} (sniffed)"
    assert not (tmp_path / "cache" / "blobs").exists()  # no body kept to clean later


@pytest.mark.parametrize("path", ["/latin1", "/latin1-bare"])
def test_a_latin1_page_without_a_charset_decodes_correctly(server, tmp_path, path):
    f = fetcher(tmp_path)
    rec = f.fetch(server + path)
    assert rec.ok, rec.reason
    page = f.cache.cleaned(rec)
    assert LATIN1_TEXT.strip() in page.text and page.title == "D\u00e9bat"


@pytest.mark.parametrize("path", ["/busy", "/busy-date"])
def test_retry_after_is_waited_for(server, tmp_path, path):
    from fault_server import FaultHandler

    rec = fetcher(tmp_path, backoff=0.01).fetch(server + path)
    assert rec.ok and rec.attempts == 2
    times = [t for t, p in FaultHandler.log if p == path]
    assert times[1] - times[0] >= 0.95  # the server's 1 s (or its date), not the 10 ms backoff


def test_a_retry_after_beyond_the_limit_fails_the_page_now(server, tmp_path):
    started = time.monotonic()
    rec = fetcher(tmp_path, max_retry_after=30).fetch(server + "/busy-long")
    assert time.monotonic() - started < 2
    assert not rec.ok and rec.reason == "http 429 (Retry-After 3600 s is over the 30 s limit)" and rec.attempts == 1


@pytest.mark.parametrize("header, low, high", [("7", 7, 7), ("  0 ", 0, 0), ("soon", None, None), ("", None, None),
                                               ("Wed, 21 Oct 2015 07:28:00 GMT", 0, 0)])
def test_retry_after_values(header, low, high):
    got = retry_after_seconds(header)
    assert got == low if low is None else low <= got <= high


def test_a_watchdog_cancelled_while_it_fires_has_cut_before_cancel_returns():
    """Once ``cancel()`` has returned nothing is cut any more: a timer already past its wait when the request
    finished cut the connections later, under the next request on the reused keep-alive connection. Here the cut
    is slowed to stand for a timer thread waiting for the GIL between its wake-up and its cut."""
    import threading

    from berds.io import Watchdog

    order: list[str] = []
    watchdog = Watchdog(0.0, lambda: (time.sleep(0.2), order.append("cut")))
    assert watchdog.fired.wait(2)
    watchdog.cancel()
    order.append("next request")
    time.sleep(0.3)
    assert order == ["cut", "next request"]
    # and one cancelled before its time never cuts
    late = Watchdog(0.05, lambda: order.append("late cut"))
    late.cancel()
    time.sleep(0.1)
    assert "late cut" not in order and not late.fired.is_set() and threading.active_count() < 50
