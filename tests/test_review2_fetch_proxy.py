"""Through a proxy (``HTTP_PROXY``), the page fetcher leaves name lookups to the proxy: a network reached only
through a proxy may have a local resolver that hangs or fails for outside names, and a lookup made here before
each request (not bounded by the page's deadline) made every page fail. The redirect check still looks names up
when a redirect asks. A real proxy on 127.0.0.1; ``socket.getaddrinfo`` is patched for ``*.example`` names
only, standing in for a resolver that cannot answer them."""

from __future__ import annotations

import socket

import pytest

from berds.corpora.search import FetchOptions, PageFetcher, SearchCache
from http_fixtures import PageHandler, serving

pytestmark = pytest.mark.network

PAGE = b"<html><body><article><p>" + b" ".join(b"word%d" % (i % 13) for i in range(150)) + b"</p></article></body></html>"


class Proxy(PageHandler):
    """A forward proxy that answers every absolute-form request itself."""

    asked: list[str] = []

    def do_GET(self):  # noqa: N802
        Proxy.asked.append(self.path)
        if self.path.endswith("/to-local"):
            return self._send(302, b"", None, Location="http://127.0.0.2/secret")
        self._send(200, PAGE)


@pytest.fixture()
def proxied(monkeypatch):
    real = socket.getaddrinfo
    lookups: list[str] = []

    def getaddrinfo(host, *args, **kwargs):
        if str(host).endswith(".example"):
            lookups.append(host)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for var in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    Proxy.asked = []
    with serving(Proxy) as proxy:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_port}")
        yield lookups


def fetch(tmp_path, url):
    return PageFetcher(SearchCache(tmp_path / "cache"), FetchOptions(retries=0, total_timeout=10)).fetch(url)


def test_a_proxied_page_is_not_looked_up_here(proxied, tmp_path):
    record = fetch(tmp_path, "http://site.example/page")
    assert record.ok and Proxy.asked == ["http://site.example/page"]
    assert proxied == []  # (it was looked up before every request, where only the proxy can resolve it)


def test_a_proxied_redirect_to_this_machine_is_still_refused(proxied, tmp_path):
    record = fetch(tmp_path, "http://site.example/to-local")
    assert not record.ok and record.reason == "redirect to a non-public address refused (127.0.0.2)"
    assert Proxy.asked == ["http://site.example/to-local"]
