"""Credentials never persist and go only to the host they belong to (issue 15, item 2).

A real HTTP server on 127.0.0.1 records the Authorization header of every request it gets; an evaluation
whose ``base_url`` carries ``user:KEY@`` is then searched byte by byte for the key.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from berds.errors import BerdsError
from berds.llm.base import user_prompt
from berds.runs import save_run
from conftest import make_run

OPENAI_KEY = "sk-openai-ONLY-FOR-api-openai-com-0001"
SECRET = "KEY-s3cr3t-5f1e9a77"


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 whose handler answers POSTs with ``answer(handler)``."""

    def __init__(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.answer(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class RecordingServer(LocalServer):
    """An OpenAI-compatible endpoint that answers every chat completion with "Yes" (with logprobs) and
    records each request's Authorization header; ``require`` makes it answer 401 to any other header."""

    def __init__(self, require: str | None = None, redirect_to: str | None = None):
        self.authorizations: list[str | None] = []
        self.require, self.redirect_to = require, redirect_to
        super().__init__()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        auth = handler.headers.get("Authorization")
        self.authorizations.append(auth)
        if self.redirect_to is not None:
            handler.send_response(307)
            handler.send_header("Location", self.redirect_to)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if self.require is not None and auth != self.require:
            status, payload = 401, {"error": {"message": "wrong credentials"}}
        else:
            status, payload = 200, {"choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant", "content": "Yes"},
                                                 "logprobs": {"content": [{"token": "Yes", "logprob": -0.1,
                                                                           "top_logprobs": [
                                                                               {"token": "Yes", "logprob": -0.1},
                                                                               {"token": "No", "logprob": -2.4}]}]}}]}
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def url_with(self, userinfo: str) -> str:
        return f"http://{userinfo}@127.0.0.1:{self.port}/v1"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.network
def test_the_openai_key_goes_to_another_host_only_when_named(monkeypatch):
    from berds.llm.openai_backend import OpenAILLM

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("LOCAL_SERVER_KEY", "local-key-42")
    with RecordingServer() as server:
        OpenAILLM("m", base_url=server.url).generate([user_prompt("q")])
        OpenAILLM("m", base_url=server.url, api_key_env="LOCAL_SERVER_KEY").generate([user_prompt("q")])
        OpenAILLM("m", base_url=server.url, api_key_env="OPENAI_API_KEY").generate([user_prompt("q")])  # asked for
        OpenAILLM("m", base_url=server.url_with(f"judge:{SECRET}")).generate([user_prompt("q")])
        OpenAILLM("m", base_url=server.url_with(SECRET)).generate([user_prompt("q")])
    assert server.authorizations == [None, "Bearer local-key-42", f"Bearer {OPENAI_KEY}", basic("judge", SECRET),
                                     f"Bearer {SECRET}"]


@pytest.mark.network
def test_a_judge_built_by_name_sends_no_openai_key_to_a_local_server(monkeypatch):
    from berds.judges import load_judge
    from berds.types import JudgePair

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    with RecordingServer() as server:
        judge = load_judge("openai:m", base_url=server.url)
        verdicts = judge.judge([JudgePair("a perspective", "a passage", "a question?")] * 3)
    assert [v.label for v in verdicts] == [True] * 3
    assert server.authorizations and set(server.authorizations) == {None}


@pytest.mark.network
def test_a_key_does_not_follow_a_redirect_to_another_host(monkeypatch):
    from berds.llm.openai_backend import OpenAILLM

    monkeypatch.setenv("LOCAL_SERVER_KEY", "local-key-42")
    with RecordingServer() as elsewhere:
        other_host = elsewhere.url.replace("127.0.0.1", "localhost")
        with RecordingServer(redirect_to=f"{other_host}/chat/completions") as server:
            with pytest.raises(BerdsError, match="answered HTTP 307"):
                OpenAILLM("m", base_url=server.url, api_key_env="LOCAL_SERVER_KEY").generate([user_prompt("q")])
    assert server.authorizations == ["Bearer local-key-42"] and elsewhere.authorizations == []


def test_credentials_are_checked_before_anything_is_sent(monkeypatch):
    from berds.llm.openai_backend import OpenAILLM

    monkeypatch.delenv("UNSET_KEY_VAR", raising=False)
    monkeypatch.setenv("SET_KEY_VAR", "x")
    with pytest.raises(BerdsError, match="UNSET_KEY_VAR") as caught:
        OpenAILLM("m", base_url="https://api.example.com/v1", api_key_env="UNSET_KEY_VAR")
    with pytest.raises(BerdsError, match="keep one of them") as both:
        OpenAILLM("m", base_url=f"https://u:{SECRET}@api.example.com/v1", api_key_env="SET_KEY_VAR")
    with pytest.raises(BerdsError, match="query string") as query:
        OpenAILLM("m", base_url=f"https://api.example.com/v1?api_key={SECRET}")
    for error in (caught, both, query):
        assert SECRET not in str(error.value)


@pytest.mark.network
def test_an_evaluation_with_a_key_in_base_url_leaves_no_trace_of_it(tmp_path):
    from berds.evaluate.evaluation import evaluate_paths

    run_dir = save_run(make_run(), tmp_path / "run-a")
    cache = tmp_path / "judgements.sqlite"
    with RecordingServer(require=basic("judge", SECRET)) as server:
        [(_, result, files)] = evaluate_paths([run_dir], "openai:m", ks=(3,), cache_path=cache, progress=False,
                                              judge_options={"base_url": server.url_with(f"judge:{SECRET}")})
        asked = len(server.authorizations)
        assert asked == result.stats.judged > 0 and set(server.authorizations) == {basic("judge", SECRET)}
        assert result.judge_id == f"openai:m@127.0.0.1:{server.port}/v1|parse=berds-study"
        written = [p for p in run_dir.rglob("*")] + [p for p in tmp_path.glob("judgements.sqlite*")]
        assert files["metrics"].exists() and any(p.name == "judgements.jsonl" for p in written)
        for path in written:
            assert SECRET not in str(path) and "judge:" not in path.name
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
        # Another key for the same endpoint is the same judge: everything comes from the cache.
        [(_, again, _)] = evaluate_paths([run_dir], "openai:m", ks=(3,), cache_path=cache, progress=False,
                                         judge_options={"base_url": server.url_with("judge:another-key")})
        assert len(server.authorizations) == asked and again.stats.cached == again.stats.pairs
    for path in [p for p in run_dir.rglob("*")] + [p for p in tmp_path.glob("judgements.sqlite*")]:
        if path.is_file():
            assert b"another-key" not in path.read_bytes(), path


def test_redaction_covers_urls_queries_assignments_and_option_names():
    from berds.llm.secrets import REDACTED, is_secret_name, redact_options, redact_text

    cases = [
        (f"openai:m@http://user:{SECRET}@h:8/v1", "openai:m@http://h:8/v1"),
        (f"https://h/v1?api_key={SECRET}&api-version=2", f"https://h/v1?api_key={REDACTED}&api-version=2"),
        (f"run with token={SECRET} and max_tokens=16", f"run with token={REDACTED} and max_tokens=16"),
        (f"Authorization: Bearer {SECRET}", f"Authorization: Bearer {REDACTED}"),
        ("transformers:/models/mistral#1f0c2a9e|parse=strict", "transformers:/models/mistral#1f0c2a9e|parse=strict"),
        ("openai:gpt-4@api.openai.com/v1|parse=strict", "openai:gpt-4@api.openai.com/v1|parse=strict"),
    ]
    for text, expected in cases:
        assert redact_text(text) == expected, text
    assert [is_secret_name(n) for n in ("api_key", "hf_token", "client-secret", "x-api-key", "password",
                                        "api_key_env", "max_tokens", "tokenizer", "top_logprobs", "base_url")] == \
        [True, True, True, True, True, False, False, False, False, False]
    options = {"base": "bm25", "llm_options": {"base_url": f"http://u:{SECRET}@h/v1", "api_key_env": "MY_KEY",
                                               "hf_token": SECRET, "max_tokens": 8}, "list": [f"http://{SECRET}@h"]}
    assert redact_options(options) == {"base": "bm25", "llm_options": {"base_url": "http://h/v1", "api_key_env": "MY_KEY",
                                                                       "hf_token": REDACTED, "max_tokens": 8},
                                       "list": ["http://h"]}


@pytest.mark.parametrize("base_url", ["http://user:SECRET_K1@127.0.0.1:notaport/v1", "user:SECRET_K1@host/v1",
                                      "http://user:SECRET_K1@[::1:18001/v1", "http://SECRET_K1@127.0.0.1:bad/v1"])
def test_a_malformed_base_url_is_refused_without_echoing_its_credentials(base_url):
    from berds.llm.openai_backend import OpenAILLM

    with pytest.raises(BerdsError, match="not an http") as caught:
        OpenAILLM("gpt-x", base_url=base_url)
    assert "SECRET_K1" not in str(caught.value)


def test_retrieval_manifests_and_resume_identity_hold_no_credentials():
    from berds.retrievers.retrieve import _persistable

    options = {"base": "bm25", "llm": "openai:m", "llm_options": {"base_url": f"https://u:{SECRET}@h/v1"}}
    assert SECRET not in json.dumps(_persistable(options))
    assert _persistable(options) == _persistable({**options, "llm_options": {"base_url": "https://u:other@h/v1"}})


def test_a_cache_written_with_keys_in_its_judge_ids_is_rewritten_once_when_opened(tmp_path, capsys, monkeypatch):
    """An older berds stored judge ids as typed (a base_url with user:KEY@). Opening such a cache rewrites them as
    today's berds names the judge: the key leaves every byte of the file, the verdicts answer the redacted id, and
    where both ids held a verdict for a pair the redacted id's (newer) one is kept."""
    import sqlite3

    from berds.evaluate.cache import JudgementCache
    from berds.llm.secrets import redact_text
    from berds.types import JudgePair, Verdict

    old_id = f"openai:m@http://judge:{SECRET}@127.0.0.1:8000/v1"
    new_id = redact_text(old_id)
    assert SECRET not in new_id
    path = tmp_path / "old.sqlite"
    a, b = JudgePair("p", "passage a"), JudgePair("p", "passage b")
    with JudgementCache(path) as c:
        c.put_many(old_id, "v1", [a, b], [Verdict(True, 0.9, "Yes"), Verdict(False, 0.1, "No")])
        c.put_many(new_id, "v1", [b], [Verdict(True, 0.8, "Yes")])  # judged again since: newer
        many = [JudgePair("p", f"passage {i}") for i in range(2000)]  # (enough rows to leave freed pages behind)
        c.put_many(old_id, "v1", many, [Verdict(i % 2 == 0, 0.5, "Yes") for i in range(2000)])
        c.put_many("embedded:v2", "v1", [a], [Verdict(False, 0.2, "")])
    db = sqlite3.connect(path)
    db.execute("DELETE FROM meta WHERE key='ids_redacted'")  # as a cache from before the rewrite was
    db.commit()
    db.close()
    assert any(SECRET.encode() in f.read_bytes() for f in tmp_path.glob("old.sqlite*"))

    import berds.evaluate.cache as cache_module

    connect = sqlite3.connect

    def connect_without_secure_delete(*args, **kwargs):  # as SQLite is built on most platforms (not Debian's)
        db = connect(*args, **kwargs)
        db.execute("PRAGMA secure_delete=OFF")
        return db

    monkeypatch.setattr(cache_module.sqlite3, "connect", connect_without_secure_delete)

    with JudgementCache(path) as c:
        assert sorted(j for j, _, _ in c.judges()) == sorted(["embedded:v2", new_id])
        assert [v.p_yes for v in c.get_many(new_id, "v1", [a, b])] == [0.9, 0.8]
        assert c.get_many("embedded:v2", "v1", [a])[0].p_yes == 0.2
        assert c.count(new_id) == 2002
        for f in tmp_path.glob("old.sqlite*"):  # already while the cache is open (other processes read the files)
            assert SECRET.encode() not in f.read_bytes(), f
    for f in tmp_path.glob("old.sqlite*"):
        assert SECRET.encode() not in f.read_bytes(), f
    with JudgementCache(path) as c:  # done once: a verdict stored under a raw id now stays (berds redacts first)
        c._db.execute("INSERT INTO judgements VALUES (?, 'v1', x'00', x'00', 1, NULL, '', NULL, 0)", (old_id,))
    with JudgementCache(path) as c:
        assert len(c.judges()) == 3
    assert capsys.readouterr().err == ""


class EchoingServer(LocalServer):
    """Answers every POST by echoing the credentials it was sent (the Authorization header, decoded when Basic)
    in its body: a 200 that is not JSON, a 401 with an OpenAI-style error, or a 400 in plain text."""

    def __init__(self, mode: str):
        self.mode = mode
        super().__init__()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        auth = handler.headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            auth = base64.b64decode(auth[6:]).decode()
        status, body = {"html": (200, f"<html>login failed for token {auth}</html>"),
                        "json": (401, json.dumps({"error": {"message": f"the key {auth} is not valid"}})),
                        "text": (400, f"bad request from {auth}")}[self.mode]
        data = body.encode()
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


@pytest.mark.network
@pytest.mark.parametrize("mode", ["html", "json", "text"])
@pytest.mark.parametrize("userinfo, secrets", [("plainsecret987", ["plainsecret987"]),
                                               ("someone:pass-w0rd-x", ["pass-w0rd-x"])])
def test_a_server_that_echoes_the_credentials_never_gets_them_shown(mode, userinfo, secrets):
    # Neither shaped like an OpenAI key nor in a URL: only the backend knows these strings are secrets.
    from berds.llm.openai_backend import OpenAILLM

    with EchoingServer(mode) as server:
        llm = OpenAILLM("m", base_url=f"http://{userinfo}@127.0.0.1:{server.port}/v1", max_retries=0)
        with pytest.raises(BerdsError) as info:
            llm.generate([user_prompt("Hello?")], max_new_tokens=4, temperature=0.0, top_logprobs=0)
    message = str(info.value)
    assert all(secret not in message for secret in secrets), message
    assert "REDACTED" in message


def test_options_that_change_the_answers_key_the_cache():
    # another model named through extra_body, a seed, other token or log-prob limits: never the same judge id
    from berds.judges.llm_judge import LLMJudge
    from berds.llm.openai_backend import OpenAILLM

    plain = OpenAILLM("tiny", base_url="http://127.0.0.1:9/v1")
    other_model = OpenAILLM("tiny", base_url="http://127.0.0.1:9/v1", extra_body={"model": "another"})
    seeded = OpenAILLM("tiny", base_url="http://127.0.0.1:9/v1", seed=3)
    ids = {plain.id, other_model.id, seeded.id, LLMJudge(plain).id, LLMJudge(plain, max_new_tokens=1).id,
           LLMJudge(plain, top_logprobs=2).id}
    assert len(ids) == 6 and "another" not in other_model.id  # (the body enters as a hash)
    assert LLMJudge(plain).id == f"{plain.id}|parse=berds-study"  # the study's defaults keep earlier ids


class DrippingServer(LocalServer):
    """Answers 200 with headers at once, then a body that arrives a byte every ``every`` seconds (each read well
    inside any read timeout) or that is ``size`` bytes long; with ``headers_every``, the status line and headers
    themselves arrive a few bytes at a time."""

    def __init__(self, *, every: float | None = None, size: int | None = None, headers_every: float | None = None):
        self.every, self.size, self.headers_every = every, size, headers_every
        super().__init__()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        if self.headers_every:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"z" * 400 + b"\r\n\r\n"
            try:
                for i in range(0, len(head), 4):
                    handler.wfile.write(head[i:i + 4])
                    handler.wfile.flush()
                    time.sleep(self.headers_every)
            except (BrokenPipeError, ConnectionResetError):
                pass
            handler.close_connection = True
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(self.size or 1000))
        handler.end_headers()
        try:
            if self.size:
                handler.wfile.write(b" " * self.size)
                return
            if self.every is None:  # neither: 10 bytes of the promised 1000, then the connection closes
                handler.wfile.write(b" " * 10)
                handler.close_connection = True
                return
            for _ in range(1000):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(self.every)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up, as it should
            pass


@pytest.mark.network
def test_a_whole_answer_is_bounded_in_time_and_size():
    # requests' timeout bounds each socket read: a server dripping a byte every 0.1 s would hold a request for ever
    from berds.llm.openai_backend import OpenAILLM

    with DrippingServer(every=0.1) as server:
        llm = OpenAILLM("m", base_url=f"http://127.0.0.1:{server.port}/v1", timeout=1.0, max_retries=0)
        started = time.monotonic()
        with pytest.raises(BerdsError, match="still arriving after the 1 s timeout"):
            llm.generate([user_prompt("Hello?")], max_new_tokens=4, temperature=0.0, top_logprobs=0)
        assert time.monotonic() - started < 5
    with DrippingServer(headers_every=0.05) as server:  # 100 pieces of headers, 5 s: the timeout cuts them at 1 s
        llm = OpenAILLM("m", base_url=f"http://127.0.0.1:{server.port}/v1", timeout=1.0, max_retries=0)
        started = time.monotonic()
        with pytest.raises(BerdsError, match="still arriving after the 1 s timeout"):
            llm.generate([user_prompt("Hello?")], max_new_tokens=4, temperature=0.0, top_logprobs=0)
        assert time.monotonic() - started < 3
    with DrippingServer() as server:  # an answer cut short is retried, then named (it was a urllib3 traceback)
        llm = OpenAILLM("m", base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=1, backoff_base=0.01)
        with pytest.raises(BerdsError, match="failed after 2 attempts; last answer: ProtocolError"):
            llm.generate([user_prompt("Hello?")], max_new_tokens=4, temperature=0.0, top_logprobs=0)
    with DrippingServer(size=3_000_000) as server:
        llm = OpenAILLM("m", base_url=f"http://127.0.0.1:{server.port}/v1", max_response_bytes=1_000_000, max_retries=0)
        with pytest.raises(BerdsError, match="over 1,000,000 bytes"):
            llm.generate([user_prompt("Hello?")], max_new_tokens=4, temperature=0.0, top_logprobs=0)
