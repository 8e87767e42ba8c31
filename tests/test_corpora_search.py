"""Search corpora end to end against a real HTTP server on 127.0.0.1 (search API + result pages)."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

import pytest

from berds.corpora.docstore import PassageStore
from berds.corpora.search import (
    FetchOptions,
    PageFetcher,
    SearchCache,
    SerperProvider,
    build_search_corpus,
    passage_id,
)
from berds.errors import BerdsError
from berds.types import Question
from http_fixtures import serving

pytestmark = pytest.mark.network

API_KEY = "test-key-123"


def article(topic: str, words: int) -> str:
    body = " ".join(f"{topic}{i % 17}" for i in range(words))
    return (f"<html><head><title>{topic} page</title></head><body><nav>home | about | contact</nav>"
            f"<article><h1>About {topic}</h1><p>{body}</p></article><footer>copyright notice</footer></body></html>")


LATIN1_PAGE = ("<html><head><title>Caf\u00e9 d\u00e9bat</title></head><body><article><p>"
               + "Le caf\u00e9 co\u00fbte tr\u00e8s cher \u00e0 Z\u00fcrich. " * 20
               + "</p></article></body></html>").encode("latin-1")


class Site(BaseHTTPRequestHandler):
    """A search API at POST /search and the pages its results point to."""

    log: list[str] = []
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, content_type: str, length: int | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        Site.log.append(f"POST {self.path}")
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("X-API-KEY") != API_KEY:
            return self._send(403, b'{"message": "Unauthorized"}', "application/json")
        base = f"http://127.0.0.1:{self.server.server_port}"
        pages = ["good1", "good2", "slow", "missing", "error", "huge", "paper", "latin1", "flaky", "empty"]
        if payload["q"].startswith("second"):
            pages = ["good2", "good3", "good2"]  # good2 is shared with the first question and repeated
        if payload["q"].startswith("third"):
            pages = ["missing"]  # nothing usable: the question ends up without passages
        organic = [{"title": f"Result {name}", "link": f"{base}/{name}", "snippet": "...", "position": i + 1}
                   for i, name in enumerate(pages[: payload["num"]])]
        self._send(200, json.dumps({"searchParameters": payload, "organic": organic}).encode(), "application/json")

    flaky_calls = 0

    def do_GET(self):
        Site.log.append(f"GET {self.path}")
        name = self.path.strip("/")
        if name in ("good1", "good2", "good3"):
            return self._send(200, article(name, 230).encode(), "text/html; charset=utf-8")
        if name == "slow":
            time.sleep(1.5)
            return self._send(200, article("slow", 50).encode(), "text/html")
        if name == "missing":
            return self._send(404, b"not here", "text/plain")
        if name == "error":
            return self._send(500, b"boom", "text/plain")
        if name == "huge":
            return self._send(200, article("huge", 60_000).encode(), "text/html")
        if name == "paper":
            return self._send(200, b"%PDF-1.4\n%binary stuff\n" * 10, "application/pdf")
        if name == "latin1":
            return self._send(200, LATIN1_PAGE, "text/html; charset=iso-8859-1")
        if name == "flaky":  # fails once, then works: retries with backoff must recover it
            Site.flaky_calls += 1
            if Site.flaky_calls == 1:
                return self._send(503, b"try again", "text/plain")
            return self._send(200, article("flaky", 120).encode(), "text/html")
        if name == "empty":
            return self._send(200, b"<html><body></body></html>", "text/html")
        return self._send(404, b"", "text/plain")


@pytest.fixture()
def site():
    Site.log = []
    Site.flaky_calls = 0
    with serving(Site) as server:
        yield f"http://127.0.0.1:{server.server_port}"


FAST = FetchOptions(connect_timeout=2, read_timeout=0.5, total_timeout=5, max_bytes=100_000, retries=1, backoff=0.05,
                    concurrency=4, per_host=2)
QUESTIONS = [Question("q1", "first question about coffee", ("a", "b")),
             Question("q2", "second question", ("c", "d")),
             Question("q3", "third question", ("e", "f"))]


def test_search_corpus_end_to_end(site, tmp_path):
    provider = SerperProvider(api_key=API_KEY, base_url=site, backoff=0.01)
    store, report = build_search_corpus(QUESTIONS, tmp_path / "corpus", provider=provider, top=10,
                                        cache_dir=tmp_path / "cache", fetch_options=FAST, progress=False)
    # The good pages are in, grouped by question; each page is cut into 100-word passages (heading "# About good1" + 230 words = 233 -> 100, 100, 33).
    assert store.groups() == ["q1", "q2"]
    q1 = store.group_passages("q1")
    sources = sorted({p.source.rsplit("/", 1)[1] for p in q1})
    assert sources == ["flaky", "good1", "good2", "latin1"]
    good1 = [p for p in q1 if p.source.endswith("/good1")]
    assert [len(p.text.split()) for p in good1] == [100, 100, 33]
    assert good1[0].title == "Result good1" and good1[0].id == passage_id("q1", f"{site}/good1", 0)
    assert "home | about" not in good1[0].text and "copyright" not in good1[-1].text  # readability dropped the chrome
    latin = next(p for p in q1 if p.source.endswith("/latin1"))
    assert "Le café coûte très cher à Zürich." in latin.text  # decoded with the declared iso-8859-1 charset
    assert store.group_ids("q2") == [passage_id("q2", f"{site}/good2", n) for n in range(3)] + \
        [passage_id("q2", f"{site}/good3", n) for n in range(3)]

    # Every other page is reported with its reason; none aborted the build.
    failed = {f["url"].rsplit("/", 1)[1]: f["reason"] for f in report.failures if f["url"]}
    assert failed["slow"] == "timeout"
    assert failed["missing"] == "http 404"
    assert failed["error"] == "http 500"
    assert failed["huge"].startswith("too large")
    assert failed["paper"] == "content type application/pdf"
    assert failed["empty"] == "no text after cleaning"
    assert set(failed) == {"slow", "missing", "error", "huge", "paper", "empty"}
    on_disk = [json.loads(line) for line in (tmp_path / "corpus" / "failures.jsonl").read_text().splitlines()]
    assert {f["url"] for f in on_disk} == {f["url"] for f in report.failures}
    assert report.skipped["http 404"] == 2 and report.skipped["timeout"] == 1  # q1 and q3 both met the 404
    assert report.skipped["repeated url in one question's results"] == 1
    assert report.documents_read == 14 and report.documents_used == 6
    assert report.extra["questions without passages"] == 1
    assert {"qid": "q3", "url": "", "rank": 0, "reason": "no usable page for this question"} in report.failures
    assert store.manifest["metadata"]["questions"] == ["q1", "q2", "q3"]
    # The 500 and the slow page were retried (retries=1), the 404 was not.
    assert Site.log.count("GET /error") == 2 and Site.log.count("GET /missing") == 1 and Site.log.count("GET /flaky") == 2
    assert Site.log.count("GET /good2") == 1  # shared by both questions, fetched once
    assert report.extra["search requests made"] == 3

    # A second run reads everything from the cache: no request reaches the server.
    before = len(Site.log)
    store2, report2 = build_search_corpus(QUESTIONS, tmp_path / "corpus", provider=provider, top=10, overwrite=True,
                                          cache_dir=tmp_path / "cache", fetch_options=FAST, progress=False)
    assert Site.log[before:] == []
    assert report2.extra["pages downloaded now"] == 0 and report2.extra["search requests made"] == 0
    assert store2.fingerprint == store.fingerprint

    # Asking to retry failures fetches exactly the failed pages again (the empty page was fetched fine).
    build_search_corpus(QUESTIONS, tmp_path / "corpus", provider=provider, top=10, overwrite=True, retry_failed=True,
                        cache_dir=tmp_path / "cache", fetch_options=FAST, progress=False)
    refetched = {line.split(" ")[1].strip("/") for line in Site.log[before:]}
    assert refetched == {"slow", "missing", "error", "huge", "paper"}


def test_page_bodies_are_content_addressed(site, tmp_path):
    cache = SearchCache(tmp_path / "cache")
    fetcher = PageFetcher(cache, FAST)
    records, downloaded = fetcher.fetch_all([f"{site}/good1", f"{site}/good1", f"{site}/latin1"], progress=False)
    assert downloaded == 2
    rec = records[f"{site}/good1"]
    import hashlib

    assert rec.body_sha256 == hashlib.sha256(article("good1", 230).encode()).hexdigest()
    assert cache.body(rec) == article("good1", 230).encode()
    assert (tmp_path / "cache" / "blobs" / rec.body_sha256[:2] / rec.body_sha256).is_file()


def test_bad_key_stops_the_build_with_a_clear_message(site, tmp_path):
    provider = SerperProvider(api_key="wrong", base_url=site)
    with pytest.raises(BerdsError, match=r"refused the API key \(HTTP 403\) — check SERPER_API_KEY"):
        build_search_corpus(QUESTIONS, tmp_path / "c", provider=provider, top=5, cache_dir=tmp_path / "cache", progress=False)


def test_missing_key_is_reported_only_when_a_request_is_needed(tmp_path, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(BerdsError, match="set the environment variable SERPER_API_KEY"):
        SerperProvider(base_url="http://127.0.0.1:9").search("anything", num=3)


def test_cli_builds_a_search_corpus_and_shows_it(site, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from berds.cli import app

    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"id": q.id, "question": q.text, "perspectives": list(q.perspectives)}) + "\n"
                                 for q in QUESTIONS))
    monkeypatch.setenv("SERPER_API_KEY", API_KEY)
    monkeypatch.setenv("SERPER_BASE_URL", site)
    runner = CliRunner()
    result = runner.invoke(app, ["corpus", "build", "search", "--questions", str(questions), "--top", "3",
                                 "--out", str(tmp_path / "c"), "--cache", str(tmp_path / "cache"), "--quiet",
                                 "--read-timeout", "0.5", "--retries", "0"])
    assert result.exit_code == 0, result.output
    assert "passages written" in result.output and "failures listed in" in result.output
    store = PassageStore.open(tmp_path / "c")
    assert store.groups() == ["q1", "q2"]
    result = runner.invoke(app, ["corpus", "info", str(tmp_path / "c")])
    assert result.exit_code == 0 and "fingerprint" in result.output and "passages" in result.output
    result = runner.invoke(app, ["corpus", "info", str(tmp_path / "c"), "--json"])
    info = json.loads(result.output)
    assert info["fingerprint"] == store.fingerprint and info["passages"] == len(store) and info["groups"] == 2
    pid = store.group_ids("q2")[0]
    result = runner.invoke(app, ["corpus", "show", str(tmp_path / "c"), pid])
    assert result.exit_code == 0 and "good2" in result.output and "q2" in result.output


def test_ctrl_c_during_a_search_build_does_not_advise_a_resume_flag_it_lacks(capsys):
    # it said "run the same command with --resume", an option `corpus build search` does not have
    from berds.cli import _interrupted

    with pytest.raises(SystemExit) as exited:
        _interrupted(["corpus", "build", "search", "--questions", "kialo", "--out", "x"])
    err = " ".join(capsys.readouterr().err.split())
    assert exited.value.code == 130 and "--resume" not in err and "run the same command again" in err
    with pytest.raises(SystemExit):
        _interrupted(["corpus", "build", "web", "--jsonl", "a.jsonl", "--out", "x"])
    assert "--resume" in capsys.readouterr().err
