"""The search-corpus builder against odd pages, odd options and a damaged cache (a real server on 127.0.0.1)."""

from __future__ import annotations

import codecs
import json
import time

import pytest

from berds.corpora.docstore import PassageStore, write_passage_store
from berds.corpora.html import decode_html, sniff_binary
from berds.corpora.search import FetchOptions, PageFetcher, SearchCache, SearchResult, build_search_corpus
from berds.errors import BerdsError, InputError
from berds.types import Passage, Question
from http_fixtures import PageHandler, serving

pytestmark = pytest.mark.network

WORDS = " ".join(f"word{i % 13}" for i in range(150))
PAGE = f"<html><head><title>A page</title></head><body><article><p>{WORDS}</p></article></body></html>".encode()
BINARY = {
    "png": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "image/png"),
    "gif": (b"GIF89a" + bytes(range(256)) * 4, "image/gif"),
    "jpeg": (b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4, "image/jpeg"),
    "pdf": (b"%PDF-1.7\n" + bytes(range(256)) * 4, "application/pdf"),
    "zip": (b"PK\x03\x04" + bytes(range(256)) * 4, "application/zip"),
    "nul": (b"<html><body>" + b"\x00" * 40 + b"</body></html>", "application/octet-stream"),
}


class Handler(PageHandler):
    log: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's name): a search API answering every query with /page
        Handler.log.append(f"POST {self.path}")
        self.rfile.read(int(self.headers["Content-Length"]))
        base = f"http://127.0.0.1:{self.server.server_port}"
        self._send(200, json.dumps({"organic": [{"title": "A page", "link": f"{base}/page"}]}).encode(), "application/json")

    def do_GET(self):  # noqa: N802
        path = self.path
        Handler.log.append(path)
        name = path.strip("/")
        if name == "page":
            return self._send(200, PAGE, "text/html; charset=utf-8")
        if name.startswith("charset-"):  # /charset-zlib: a utf-8 page whose header names another codec
            return self._send(200, "<html><body><p>caf\u00e9 " .encode() + WORDS.encode() + b"</p></body></html>",
                              f"text/html; charset={name[8:]}")
        if name == "meta-utf16":  # an even length, so that decoding it as UTF-16 would not fail
            body = b'<html><head><meta charset="utf-16"></head><body><p>' + WORDS.encode() + b"</p></body></html>"
            return self._send(200, body + b" " * (len(body) % 2))
        if name == "bom-utf16":  # a real UTF-16 page (with its BOM): NUL bytes, but text
            return self._send(200, codecs.BOM_UTF16_LE + f"<html><body><p>{WORDS}</p></body></html>".encode("utf-16-le"))
        if name.startswith("binary-"):
            return self._send(200, BINARY[name[7:]][0], "text/html")
        if name == "big":
            return self._send(200, PAGE)
        if name == "missing":
            return self._send(404, b"no", "text/plain")
        if name == "drip":  # the whole body in 6 pieces over ~0.6 s
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            step = len(PAGE) // 6 + 1
            try:
                for i in range(0, len(PAGE), step):
                    self.wfile.write(PAGE[i:i + step])
                    self.wfile.flush()
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return None
        if name.startswith("hop/"):  # /hop/N: wait 0.2 s, then redirect to /hop/N+1 (relative Location)
            time.sleep(0.2)
            return self._send(302, b"", None, Location=str(int(name[4:]) + 1))
        if name == "rel":
            return self._send(301, b"", None, Location="../page")
        if name == "loop":
            return self._send(302, b"", None, Location="/loop")
        if name == "to-stall":
            return self._send(302, b"", None, Location="/stall")
        if name == "drip-headers":  # status line and headers a few bytes at a time, each pause within the read timeout
            head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Slow: " + b"z" * 200 + b"\r\n"
                    b"Content-Length: " + str(len(PAGE)).encode() + b"\r\n\r\n")
            try:
                for i in range(0, len(head), 4):
                    self.wfile.write(head[i:i + 4])
                    self.wfile.flush()
                    time.sleep(0.05)  # 60+ pieces: 3+ s in all
                self.wfile.write(PAGE)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
            return None
        if name == "stall":  # headers only after 3 s: each hop's read timeout must be cut to the time left
            time.sleep(3)
            return self._send(200, PAGE)
        return self._send(404, b"", "text/plain")


@pytest.fixture()
def server():
    Handler.log = []
    with serving(Handler) as srv:
        yield f"http://127.0.0.1:{srv.server_port}"


FAST = dict(connect_timeout=2, read_timeout=2, total_timeout=5, retries=0, backoff=0.01, concurrency=2)


def fetch(url: str, cache_dir, **options):
    fetcher = PageFetcher(SearchCache(cache_dir), FetchOptions(**{**FAST, **options}))
    records, downloaded = fetcher.fetch_all([url], progress=False)
    return records[url], downloaded, fetcher


class OnePage:
    """A search provider whose every result list is the given URLs; counts its calls."""

    name = "one-page"

    def __init__(self, *urls: str):
        self.urls, self.calls = urls, 0

    def search(self, query: str, *, num: int) -> list[SearchResult]:
        self.calls += 1
        return [SearchResult(url=u, title="A page", rank=i + 1) for i, u in enumerate(self.urls)][:num]

    def cache_params(self) -> dict:
        return {}


QUESTION = [Question("q1", "a question", ("a", "b"))]


# --------------------------------------------------------------------------------------- 1. non-text codecs
@pytest.mark.parametrize("charset", ["zlib", "rot13", "base64", "hex", "bz2", "quopri", "uu", "undefined", "punycode",
                                     "unicode_escape", "utf-7"])
def test_a_charset_naming_a_codec_that_is_no_web_text_encoding_is_ignored(charset):
    body = "<html><body><p>caf\u00e9 au lait</p></body></html>".encode()
    assert decode_html(body, f"text/html; charset={charset}") == (body.decode(), "utf-8")
    meta = f'<html><head><meta charset="{charset}"></head><body>caf\u00e9</body></html>'.encode()
    assert decode_html(meta, "text/html")[0] == meta.decode()


def test_a_page_with_a_non_text_charset_builds_and_rebuilds_from_the_cache(server, tmp_path):
    provider = OnePage(f"{server}/charset-zlib")
    kw = dict(provider=provider, top=1, cache_dir=tmp_path / "cache", fetch_options=FetchOptions(**FAST), progress=False)
    store, report = build_search_corpus(QUESTION, tmp_path / "c", **kw)
    assert "café" in store.group_passages("q1")[0].text
    store2, report2 = build_search_corpus(QUESTION, tmp_path / "c", overwrite=True, **kw)  # the page is cached as ok
    assert report2.extra["pages downloaded now"] == 0 and store2.fingerprint == store.fingerprint


# --------------------------------------------------------------------------------------- 2. utf-16 labels, binary html
def test_a_meta_declared_utf16_means_utf8_but_a_bom_still_wins():
    ascii_page = b'<html><head><meta charset="utf-16"></head><body>plain ascii words.</body></html>'
    assert len(ascii_page) % 2 == 0  # so decoding it as UTF-16 would succeed (into garbage)
    assert decode_html(ascii_page) == (ascii_page.decode(), "utf-8")
    assert decode_html(ascii_page.replace(b"utf-16", b"UTF-16LE"))[1] == "utf-8"
    text = '<html><head><meta charset="utf-16"></head><body>caf\u00e9</body></html>'
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        assert decode_html(bom + text.encode(codec))[0] == text
    assert decode_html(codecs.BOM_UTF8 + text.encode(), "text/html; charset=iso-8859-1")[0] == text
    # a charset in the HTTP header is not a meta declaration: UTF-16 there is taken at its word
    assert decode_html(text.encode("utf-16-le"), "text/html; charset=utf-16le")[0] == text


def test_a_meta_utf16_page_becomes_readable_passages(server, tmp_path):
    provider = OnePage(f"{server}/meta-utf16", f"{server}/bom-utf16")
    store, report = build_search_corpus(QUESTION, tmp_path / "c", provider=provider, top=2, cache_dir=tmp_path / "cache",
                                        fetch_options=FetchOptions(**FAST), progress=False)
    passages = store.group_passages("q1")
    assert {p.source.rsplit("/", 1)[1] for p in passages} == {"meta-utf16", "bom-utf16"}
    assert all(p.text.split()[0] == "word0" for p in passages if p.id.endswith("-0"))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_a_binary_body_served_as_html_is_refused(server, tmp_path, name):
    record, _, _ = fetch(f"{server}/binary-{name}", tmp_path / "cache")
    assert not record.ok and record.reason == f"content type {BINARY[name][1]} (sniffed)"


def test_html_with_a_bom_or_a_utf16_charset_is_not_taken_for_binary():
    page = codecs.BOM_UTF16_LE + "<html>x</html>".encode("utf-16-le")
    assert sniff_binary(page, "text/html") is None
    assert sniff_binary("<html>x</html>".encode("utf-16-le"), "text/html", charset="utf-16-le") is None
    assert sniff_binary(b"<html>\x0c\x1b odd controls </html>", "text/html") is None  # only NUL marks html binary


# --------------------------------------------------------------------------------------- 3. option checks
@pytest.mark.parametrize("field, value, cli", [
    ("per_host", 0, "--per-host"), ("concurrency", 0, "--concurrency"), ("read_timeout", 0, "--read-timeout"),
    ("connect_timeout", -1, "--connect-timeout"), ("total_timeout", 0, "--total-timeout"),
    ("total_timeout", float("nan"), "--total-timeout"), ("read_timeout", float("inf"), "--read-timeout"),
    ("max_bytes", -1, "--max-bytes"), ("max_bytes", 0, "--max-bytes"), ("retries", -1, "--retries"),
    ("backoff", -0.5, "backoff"), ("max_retry_after", -1, "--max-retry-after"),
])
def test_fetch_options_are_checked_when_made(field, value, cli):
    with pytest.raises(BerdsError, match=f"^{cli} must be"):
        FetchOptions(**{field: value})


def run_main(args: list[str], capsys) -> tuple[int, str]:
    from berds.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(args)
    return exit_.value.code, capsys.readouterr().err


def write_questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "a question", "perspectives": ["a", "b"]}) + "\n")
    return path


@pytest.mark.parametrize("option, value", [("--per-host", "0"), ("--read-timeout", "0"), ("--max-bytes", "-1")])
def test_the_cli_refuses_a_bad_fetch_option_at_once(server, tmp_path, capsys, monkeypatch, option, value):
    monkeypatch.setenv("SERPER_API_KEY", "k")
    monkeypatch.setenv("SERPER_BASE_URL", server)
    start = time.monotonic()
    code, err = run_main(["corpus", "build", "search", "--questions", str(write_questions(tmp_path)), "--quiet",
                          "--out", str(tmp_path / "c"), "--cache", str(tmp_path / "cache"), option, value], capsys)
    assert code == 2 and f"{option} must be" in err and "Traceback" not in err
    assert Handler.log == [] and time.monotonic() - start < 5


# --------------------------------------------------------------------------------------- 4. --out checked first
def test_an_existing_out_is_refused_before_any_search_or_fetch(server, tmp_path):
    write_passage_store([Passage("p", "text")], tmp_path / "store")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    provider = OnePage(f"{server}/page")
    kw = dict(provider=provider, top=1, cache_dir=tmp_path / "cache", fetch_options=FetchOptions(**FAST), progress=False)
    for out, overwrite, message in (("store", False, "a passage store already exists here"),
                                    ("folder", False, "is not an empty folder or a passage store"),
                                    ("folder", True, "is not a passage store; refusing to overwrite it"),
                                    ("file", False, "is a file")):
        with pytest.raises(InputError, match=message):
            build_search_corpus(QUESTION, tmp_path / out, overwrite=overwrite, **kw)
    assert provider.calls == 0 and Handler.log == []
    store, _ = build_search_corpus(QUESTION, tmp_path / "store", overwrite=True, **kw)  # --overwrite replaces a store
    assert store.groups() == ["q1"]


def test_the_cli_refuses_an_existing_store_before_searching(server, tmp_path, capsys, monkeypatch):
    write_passage_store([Passage("p", "text")], tmp_path / "store")
    monkeypatch.setenv("SERPER_API_KEY", "k")
    monkeypatch.setenv("SERPER_BASE_URL", server)
    code, err = run_main(["corpus", "build", "search", "--questions", str(write_questions(tmp_path)), "--quiet",
                          "--out", str(tmp_path / "store"), "--cache", str(tmp_path / "cache")], capsys)
    assert code == 2 and "a passage store already exists here" in err and "--overwrite" in err
    assert Handler.log == []


# --------------------------------------------------------------------------------------- 5. limits recorded in failures
def test_a_failure_caused_by_a_limit_is_fetched_again_under_a_more_generous_limit(server, tmp_path):
    cache = tmp_path / "cache"
    record, _, _ = fetch(f"{server}/big", cache, max_bytes=500)
    assert record.reason.startswith("too large") and record.limits == {"max_bytes": 500}
    assert fetch(f"{server}/big", cache, max_bytes=500)[1] == 0  # the same limit: still a fact
    assert fetch(f"{server}/big", cache, max_bytes=400)[1] == 0  # a stricter one too
    record, downloaded, _ = fetch(f"{server}/big", cache)  # the default 5 MB: fetched again, and fine
    assert downloaded == 1 and record.ok

    record, _, _ = fetch(f"{server}/drip", cache, total_timeout=0.2)
    assert record.reason == "timeout (over 0.2 s in total)" and record.limits["total_timeout"] == 0.2
    record, downloaded, _ = fetch(f"{server}/drip", cache, total_timeout=5)
    assert downloaded == 1 and record.ok

    record, _, _ = fetch(f"{server}/missing", cache, max_bytes=500)
    assert record.reason == "http 404" and record.limits == {}
    assert fetch(f"{server}/missing", cache)[1] == 0  # a 404 does not depend on the options


def test_an_old_failure_record_without_limits_stays_cached(server, tmp_path):
    cache = SearchCache(tmp_path / "cache")
    fetch(f"{server}/big", tmp_path / "cache", max_bytes=500)
    path = next((tmp_path / "cache" / "pages").rglob("*.json"))
    old = json.loads(path.read_text())
    del old["limits"]  # as written before limits were recorded
    path.write_text(json.dumps(old))
    assert cache.get_page(f"{server}/big").limits == {}
    assert fetch(f"{server}/big", tmp_path / "cache")[1] == 0


# --------------------------------------------------------------------------------------- 6. damaged cache records
def test_a_page_record_with_an_unknown_key_is_a_clear_error(server, tmp_path):
    fetch(f"{server}/page", tmp_path / "cache")
    path = next((tmp_path / "cache" / "pages").rglob("*.json"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "surprise": 1}))
    with pytest.raises(InputError, match=r"unexpected field 'surprise'.*delete this file"):
        fetch(f"{server}/page", tmp_path / "cache")
    path.write_text(json.dumps({"url": f"{server}/page"}))
    with pytest.raises(InputError, match=r"missing field 'ok'"):
        fetch(f"{server}/page", tmp_path / "cache")
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match=str(path)):
        fetch(f"{server}/page", tmp_path / "cache")


def test_a_search_record_with_an_unknown_key_is_a_clear_error(server, tmp_path):
    kw = dict(provider=OnePage(f"{server}/page"), top=1, cache_dir=tmp_path / "cache", fetch_options=FetchOptions(**FAST),
              progress=False)
    build_search_corpus(QUESTION, tmp_path / "c", **kw)
    path = next((tmp_path / "cache" / "search").rglob("*.json"))
    data = json.loads(path.read_text())
    data["results"][0]["surprise"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"unexpected field 'surprise'.*delete this file"):
        build_search_corpus(QUESTION, tmp_path / "c", overwrite=True, **kw)


def test_a_page_whose_body_is_missing_from_the_cache_is_fetched_again_with_a_note(server, tmp_path):
    kw = dict(provider=OnePage(f"{server}/page"), top=1, cache_dir=tmp_path / "cache", fetch_options=FetchOptions(**FAST),
              progress=False)
    store, _ = build_search_corpus(QUESTION, tmp_path / "c", **kw)
    import shutil

    shutil.rmtree(tmp_path / "cache" / "blobs")
    shutil.rmtree(tmp_path / "cache" / "clean")
    before = Handler.log.count("/page")
    store2, report = build_search_corpus(QUESTION, tmp_path / "c", overwrite=True, **kw)
    assert Handler.log.count("/page") == before + 1
    assert report.extra["pages fetched again (body missing from the cache)"] == 1
    assert store2.fingerprint == store.fingerprint


def test_a_truncated_body_in_the_cache_is_fetched_again(server, tmp_path):
    record, _, _ = fetch(f"{server}/page", tmp_path / "cache")
    blob = tmp_path / "cache" / "blobs" / record.body_sha256[:2] / record.body_sha256
    blob.write_bytes(blob.read_bytes()[:100])
    record, downloaded, fetcher = fetch(f"{server}/page", tmp_path / "cache")
    assert downloaded == 1 and record.ok and blob.read_bytes() == PAGE
    assert fetcher.refetched == {"body missing from the cache": 1}


# --------------------------------------------------------------------------------------- redirects
def test_the_total_timeout_covers_redirects(server, tmp_path):
    start = time.monotonic()
    record, _, _ = fetch(f"{server}/hop/0", tmp_path / "cache", total_timeout=0.7, read_timeout=2)
    assert time.monotonic() - start < 1.5
    assert not record.ok and record.reason == "timeout (over 0.7 s in total)"
    assert sum(p.startswith("/hop/") for p in Handler.log) <= 5


def test_a_hop_waits_no_longer_than_the_time_left(server, tmp_path):
    start = time.monotonic()
    record, _, _ = fetch(f"{server}/to-stall", tmp_path / "cache", total_timeout=0.8, read_timeout=10)
    assert time.monotonic() - start < 2
    assert record.reason == "timeout (over 0.8 s in total)"


def test_the_total_timeout_covers_headers_that_drip_in(server, tmp_path):
    # each piece arrives well within the read timeout, but the whole status line and headers take 3+ s
    start = time.monotonic()
    record, _, _ = fetch(f"{server}/drip-headers", tmp_path / "cache", total_timeout=0.8, read_timeout=2)
    assert time.monotonic() - start < 2
    assert record.reason == "timeout (over 0.8 s in total)" and not record.ok
    record, _, _ = fetch(f"{server}/drip-headers", tmp_path / "cache2", total_timeout=10, read_timeout=2)
    assert record.ok  # given the time, the same page is read whole


def test_redirects_resolve_relative_locations_and_stop_at_the_limit(server, tmp_path):
    record, _, _ = fetch(f"{server}/rel", tmp_path / "cache")
    assert record.ok and record.final_url == f"{server}/page"
    record, _, _ = fetch(f"{server}/loop", tmp_path / "cache")
    assert record.reason == "too many redirects"
    assert Handler.log.count("/loop") == 31  # the first request and the 30 redirects requests follows


def test_a_damaged_cleaned_text_is_made_again_from_the_body(server, tmp_path):
    kw = dict(provider=OnePage(f"{server}/page"), top=1, cache_dir=tmp_path / "cache", fetch_options=FetchOptions(**FAST),
              progress=False)
    store, _ = build_search_corpus(QUESTION, tmp_path / "c", **kw)
    for path in (tmp_path / "cache" / "clean").rglob("*.json"):
        path.write_text('{"title": "x", "surprise": 1')
    store2, report = build_search_corpus(QUESTION, tmp_path / "c", overwrite=True, **kw)
    assert store2.fingerprint == store.fingerprint and report.extra["pages downloaded now"] == 0


def test_a_failure_record_with_damaged_limits_is_kept_as_a_failure(server, tmp_path):
    fetch(f"{server}/big", tmp_path / "cache", max_bytes=500)
    path = next((tmp_path / "cache" / "pages").rglob("*.json"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "limits": {"max_bytes": "lots", "nonsense": 1}}))
    assert fetch(f"{server}/big", tmp_path / "cache")[1] == 0
