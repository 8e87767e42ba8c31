"""The page fetcher follows no redirect from the web into this machine or its network (real servers on 127.0.0.1
and 127.0.0.2). No public server can run here, so one test has 127.0.0.1 count as public: the address
classification itself is checked on literal addresses, which need no network."""

from __future__ import annotations

import threading

import pytest

import berds.corpora.search as search
from berds.corpora.search import FetchOptions, PageFetcher, SearchCache
from http_fixtures import PageHandler, QuietServer

pytestmark = pytest.mark.network

PAGE = b"<html><body><article><p>" + b" ".join(b"word%d" % (i % 13) for i in range(150)) + b"</p></article></body></html>"


class Target(PageHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        Target.hits.append(self.path)
        self._send(200, PAGE)


class Origin(PageHandler):
    def do_GET(self):  # noqa: N802
        if self.path == "/page":
            return self._send(200, PAGE)
        if self.path == "/to-same-host":
            return self._send(302, b"", None, Location="/page")
        return self._send(302, b"", None, Location=self.server.target + "/secret")


@pytest.fixture()
def servers():
    Target.hits = []
    try:
        target = QuietServer(("127.0.0.2", 0), Target)
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    origin = QuietServer(("127.0.0.1", 0), Origin)
    origin.target = f"http://127.0.0.2:{target.server_port}"
    for srv in (target, origin):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{origin.server_port}", origin.target
    for srv in (target, origin):
        srv.shutdown()
        srv.server_close()


def fetcher(tmp_path):
    return PageFetcher(SearchCache(tmp_path / "cache"), FetchOptions(retries=0, total_timeout=10))


@pytest.mark.parametrize("address, scope", [
    ("8.8.8.8", 0), ("2001:4860:4860::8888", 0), ("10.1.2.3", 1), ("192.168.0.1", 1), ("172.16.0.1", 1),
    ("100.64.0.1", 1), ("fd00::1", 1), ("127.0.0.1", 2), ("::1", 2), ("169.254.169.254", 2), ("fe80::1", 2),
    ("0.0.0.0", 2), ("::ffff:127.0.0.1", 2), ("::ffff:169.254.169.254", 2),
])
def test_addresses_are_classed_by_how_private_they_are(address, scope):
    assert search._address_scope(address) == scope


def test_a_redirect_from_a_public_page_to_this_machine_is_refused(servers, tmp_path, monkeypatch):
    origin, target = servers
    real = search._address_scope
    monkeypatch.setattr(search, "_address_scope", lambda host: 0 if host == "127.0.0.1" else real(host))
    record = fetcher(tmp_path).fetch(f"{origin}/to-target")
    assert not record.ok and record.reason == "redirect to a non-public address refused (127.0.0.2)"
    assert Target.hits == []  # (the fetcher followed it and stored the local service's answer as the page)
    same = fetcher(tmp_path).fetch(f"{origin}/to-same-host")  # a redirect within the public side is followed
    assert same.ok and same.final_url == f"{origin}/page"


def test_a_local_page_may_redirect_to_another_local_address(servers, tmp_path):
    origin, target = servers  # (a search of your own intranet or a test server: fetched as given)
    record = fetcher(tmp_path).fetch(f"{origin}/to-target")
    assert record.ok and record.final_url == f"{target}/secret" and Target.hits == ["/secret"]
