"""The page fetcher connects to the very addresses its redirect check saw (DNS rebinding). Real servers on
127.0.0.1 and 127.0.0.2 answer on the same port; a made-up host name, rebind.test, resolves through a stand-in
for the DNS (``socket.getaddrinfo`` patched for that name only) whose answer changes between lookups. As in
test_fetch_redirect_scope, 127.0.0.1 counts as public here (no public server can run in a test), so 127.0.0.2 is
the "more private" address a rebinding name must not reach. The https cases use a certificate made in the test."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
import ssl
import threading

import pytest

import berds.corpora.search as search
from berds.corpora.search import FetchOptions, PageFetcher, SearchCache
from http_fixtures import PageHandler, QuietServer

pytestmark = pytest.mark.network

NAME = "rebind.test"


def page(word: bytes) -> bytes:
    return b"<html><body><article><p>" + b" ".join(word + b"%d" % (i % 13) for i in range(150)) + b"</p></article></body></html>"


HARMLESS, SECRET = page(b"public"), page(b"secret")


class Harmless(PageHandler):
    """The 127.0.0.1 server: the address the name pointed to when it was checked."""

    seen: list[tuple[str, str]] = []

    def do_GET(self):  # noqa: N802
        Harmless.seen.append((self.path, self.headers.get("Host", "")))
        if self.path == "/to-rebind":
            return self._send(302, b"", None, Location=f"{self.server.scheme}://{NAME}:{self.server.server_port}/page")
        if self.path == "/to-same-host":
            return self._send(302, b"", None, Location="/page", Connection="close")  # (the next hop connects anew)
        return self._send(200, HARMLESS)


class Private(PageHandler):
    """The 127.0.0.2 server: what the name points to a moment later (think 169.254.169.254)."""

    hits: list[str] = []

    def do_GET(self):  # noqa: N802
        Private.hits.append(self.path)
        self._send(200, SECRET)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for rebind.test and 127.0.0.1 (its own CA): (cert file, key file)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem"


@pytest.fixture(params=["http", "https"])
def servers(request, monkeypatch):
    """(scheme, port, SNI names seen) with Harmless on 127.0.0.1:port and Private on 127.0.0.2:port."""
    scheme = request.param
    Harmless.seen, Private.hits = [], []
    for _ in range(20):  # the same port free on both addresses
        harmless = QuietServer(("127.0.0.1", 0), Harmless)
        try:
            private = QuietServer(("127.0.0.2", harmless.server_port), Private)
            break
        except OSError:
            harmless.server_close()
    else:
        pytest.skip("127.0.0.2 cannot be bound here")
    sni: list[str | None] = []
    if scheme == "https":
        cert, key = request.getfixturevalue("certificate")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.sni_callback = lambda sock, server_name, ctx: sni.append(server_name)
        for srv in (harmless, private):
            srv.socket = context.wrap_socket(srv.socket, server_side=True)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # trust it (the fetcher verifies certificates)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)  # connect directly
    harmless.scheme = scheme
    for srv in (harmless, private):
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield scheme, harmless.server_port, sni
    for srv in (harmless, private):
        srv.shutdown()
        srv.server_close()


@pytest.fixture()
def dns(monkeypatch):
    """``answers[name]``: the address lists successive lookups of ``name`` get (the last one repeats);
    ``lookups``: the names looked up through it, in order. Other names resolve as usual."""
    real = socket.getaddrinfo
    answers: dict[str, list[list[str]]] = {}
    lookups: list[str] = []

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host not in answers:
            return real(host, port, family, type, proto, flags)
        lookups.append(host)
        queue = answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port or 0)) for a in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    # 127.0.0.1 counts as public (patched where any address classification starts, whatever function asks)
    loopback, is_global = ipaddress.IPv4Address.is_loopback, ipaddress.IPv4Address.is_global
    monkeypatch.setattr(ipaddress.IPv4Address, "is_loopback",
                        property(lambda ip: str(ip) != "127.0.0.1" and loopback.__get__(ip)))
    monkeypatch.setattr(ipaddress.IPv4Address, "is_global", property(lambda ip: str(ip) == "127.0.0.1" or is_global.__get__(ip)))
    assert search._address_scope("127.0.0.1") == 0 and search._address_scope("127.0.0.2") == 2
    return answers, lookups


def fetched(tmp_path, url):
    cache = SearchCache(tmp_path / "cache")
    record = PageFetcher(cache, FetchOptions(retries=0, total_timeout=10)).fetch(url)
    return record, (cache.body(record) if record.ok else None)


def test_a_redirect_to_a_name_that_rebinds_connects_to_the_address_checked(servers, dns, tmp_path):
    scheme, port, sni = servers
    answers, lookups = dns
    answers[NAME] = [["127.0.0.1"], ["127.0.0.2"]]  # public when checked, private a moment later
    record, body = fetched(tmp_path, f"{scheme}://127.0.0.1:{port}/to-rebind")
    assert Private.hits == []  # (unpinned, the connection's own lookup got 127.0.0.2 and read the secret)
    assert record.ok and body == HARMLESS and record.final_url == f"{scheme}://{NAME}:{port}/page"
    assert lookups == [NAME]  # one lookup for the hop: the one checked is the one connected to
    assert Harmless.seen[-1] == ("/page", f"{NAME}:{port}")  # the request still names its host
    if scheme == "https":
        assert sni[-1] == NAME  # SNI is the name, not the address (the certificate was checked against it too)


def test_the_origins_scope_is_that_of_the_address_it_connected_to(servers, dns, tmp_path):
    scheme, port, _ = servers
    answers, lookups = dns
    # The first request goes to 127.0.0.1; the name then rebinds to 127.0.0.2 and redirects to itself.
    answers[NAME] = [["127.0.0.1"], ["127.0.0.2"]]
    record, _ = fetched(tmp_path, f"{scheme}://{NAME}:{port}/to-same-host")
    # (unpinned, a fresh lookup made the origin "private" and the redirect to 127.0.0.2 was let through)
    assert Private.hits == []
    assert not record.ok and record.reason == f"redirect to a non-public address refused ({NAME})"
    assert lookups == [NAME, NAME]  # one per hop
    assert [path for path, _ in Harmless.seen] == ["/to-same-host"]


def test_a_name_with_several_addresses_falls_back_among_those_checked(servers, dns, tmp_path):
    scheme, port, _ = servers
    answers, _ = dns
    answers[NAME] = [["127.0.0.3", "127.0.0.1"], ["127.0.0.2"]]  # nothing listens on 127.0.0.3
    record, body = fetched(tmp_path, f"{scheme}://{NAME}:{port}/page")
    assert record.ok and body == HARMLESS and Private.hits == []
    assert hashlib.sha256(body).hexdigest() == record.body_sha256


@pytest.mark.parametrize("servers", ["https"], indirect=True)
def test_a_pinned_https_connection_still_checks_the_certificate_against_the_name(servers, dns, tmp_path):
    _, port, _ = servers
    answers, _ = dns
    answers["other.test"] = [["127.0.0.1"]]  # the server's certificate names rebind.test and 127.0.0.1 only
    record, _ = fetched(tmp_path, f"https://other.test:{port}/page")
    assert not record.ok and record.reason == "connection error (SSLError)"
    assert Harmless.seen == []
