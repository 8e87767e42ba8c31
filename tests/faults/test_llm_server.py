"""`berds llm serve` bounds every size and sheds no request (issue 15, item 3).

Every test talks to a real ``python -m berds.llm.server`` process on 127.0.0.1: the tiny random Mistral
(``llm_fixtures``) where tokens matter, and ``llm_fixtures:SleepyLLM`` (a backend that takes a known time)
where timing matters. Raw sockets send what well-behaved clients never would (a 300 MB Content-Length,
a request head a byte at a time).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

import berds
from berds.llm.base import user_prompt
from judge_trust_fixtures import port_of, read_until_eof, served
from llm_fixtures import tiny_mistral  # noqa: F401 - fixture

pytestmark = pytest.mark.network
REPO_ROOT = str(Path(berds.__file__).resolve().parents[1])

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Should cities build more bike lanes?"}],
        "max_tokens": 2}


def raw_exchange(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a fresh socket and read until the server closes it (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_until_eof(sock)


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def assert_openai_error(response_json: dict, code: str | None = None) -> dict:
    error = response_json["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


@pytest.fixture(scope="module")
def tiny_server(tiny_mistral, tmp_path_factory):  # noqa: F811
    """The tiny model behind small limits: 64 prompt tokens, 5000 characters, max_tokens up to 32."""
    with served("transformers", str(tiny_mistral), options=["device=cpu", "batch_size=16"], max_batch_size=16,
                extra_args=["--served-model-name", "m", "--max-prompt-tokens", "64", "--max-prompt-chars", "5000",
                            "--max-tokens-limit", "32"],
                log_dir=tmp_path_factory.mktemp("tiny-server")) as url:
        yield url


def test_a_300_mb_body_is_refused_with_413_before_it_is_read_and_before_auth(tmp_path, monkeypatch):
    monkeypatch.setenv("BERDS_SERVER_KEY", "right-key")
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path,
                extra_args=["--api-key-env", "BERDS_SERVER_KEY", "--max-body-bytes", "4096"]) as url:
        port = port_of(url)
        # Headers only: the server must answer without waiting for (or reading) one byte of the body.
        status, headers, body = split_response(raw_exchange(
            port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 314572800\r\n\r\n"))
        assert status == 413 and headers["content-type"] == "application/json"
        assert "4096 bytes" in assert_openai_error(json.loads(body), "request_too_large")["message"]
        # A chunked body (no Content-Length) is cut off as soon as it passes the limit.
        chunked = b"".join(b"%x\r\n%s\r\n" % (1024, b" " * 1024) for _ in range(8)) + b"0\r\n\r\n"
        status, _, body = split_response(raw_exchange(
            port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer right-key\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + chunked))
        assert status == 413 and assert_openai_error(json.loads(body), "request_too_large")
        # Within the limit, the key is checked, and the server still answers.
        wrong = requests.post(f"{url}/chat/completions", json=CHAT, timeout=10)
        assert wrong.status_code == 401 and assert_openai_error(wrong.json(), "invalid_api_key")
        right = requests.post(f"{url}/chat/completions", json=CHAT, headers={"Authorization": "Bearer right-key"},
                              timeout=10)
        assert right.status_code == 200 and right.json()["choices"][0]["message"]["content"] == "Yes"


def test_prompt_length_and_max_tokens_are_bounded(tiny_server):
    url = f"{tiny_server}/chat/completions"
    words = "the bike lanes make streets safer and " * 20  # ~160 tokens, ~760 characters
    too_many_tokens = requests.post(url, json={**CHAT, "messages": [{"role": "user", "content": words}]}, timeout=30)
    assert too_many_tokens.status_code == 400
    error = assert_openai_error(too_many_tokens.json(), "context_length_exceeded")
    assert "tokens, more than this server's limit of 64" in error["message"] and error["param"] == "messages"
    too_many_chars = requests.post(url, json={**CHAT, "messages": [{"role": "user", "content": "x" * 5001}]}, timeout=30)
    assert too_many_chars.status_code == 400
    assert "5001 characters" in assert_openai_error(too_many_chars.json(), "context_length_exceeded")["message"]
    too_long_answer = requests.post(url, json={**CHAT, "max_tokens": 33}, timeout=30)
    assert too_long_answer.status_code == 400 and assert_openai_error(too_long_answer.json())["param"] == "max_tokens"
    within = requests.post(url, json={**CHAT, "max_tokens": 32}, timeout=60)
    assert within.status_code == 200 and within.json()["choices"][0]["message"]["role"] == "assistant"


def test_a_long_request_blocks_neither_health_nor_model_listing_and_times_out(tmp_path):
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=4"], log_dir=tmp_path,
                extra_args=["--request-timeout", "2"]) as url:
        root = url.rsplit("/v1", 1)[0]
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(requests.post, f"{url}/chat/completions", json=CHAT, timeout=30)
            time.sleep(0.5)  # the model is now busy for 4 s
            for probe in (f"{root}/health", f"{url}/models"):
                started = time.monotonic()
                answer = requests.get(probe, timeout=10)
                assert answer.status_code == 200 and time.monotonic() - started < 1.0, probe
            queued = pool.submit(requests.post, f"{url}/chat/completions", json=CHAT, timeout=30)
            timed_out = slow.result()
            assert timed_out.status_code == 503 and timed_out.headers["Retry-After"] == "1"
            assert "longer than this server's limit of 2 s" in assert_openai_error(timed_out.json(), "timeout")["message"]
            assert queued.result().status_code == 503  # dropped from the queue, never run


def test_a_full_queue_answers_503_with_retry_after_and_a_retrying_client_loses_nothing(tmp_path):
    from berds.llm.openai_backend import OpenAILLM

    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0.5"], max_batch_size=1, log_dir=tmp_path,
                extra_args=["--max-queue", "2"]) as url:
        barrier = threading.Barrier(10)

        def one(_):
            barrier.wait()
            return requests.post(f"{url}/chat/completions", json=CHAT, timeout=30)

        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(one, range(10)))
        statuses = sorted(a.status_code for a in answers)
        assert set(statuses) == {200, 503} and statuses.count(200) >= 2, statuses
        for answer in answers:
            if answer.status_code == 503:
                assert answer.headers["Retry-After"] == "1"
                assert "--max-queue" in assert_openai_error(answer.json(), "server_busy")["message"]
        # The berds client honours Retry-After: 12 prompts through a queue of 2 all come back, in order.
        client = OpenAILLM("m", base_url=url, concurrency=12, backoff_base=0.1, max_retries=20)
        generations = client.generate([user_prompt(f"q{i}") for i in range(12)], top_logprobs=2)
        assert [g.text for g in generations] == ["Yes"] * 12
        assert all(g.first_token_logprobs == {"Yes": -0.1, "No": -2.4} for g in generations)


def test_sockets_are_bounded_in_number_and_in_time(tmp_path):
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path,
                extra_args=["--header-timeout", "1", "--keep-alive-timeout", "1", "--max-connections", "3"]) as url:
        port = port_of(url)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        time.sleep(0.2)
        status, headers, body = split_response(raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert status == 503 and headers["retry-after"] == "1"
        assert "--max-connections" in assert_openai_error(json.loads(body), "server_busy")["message"]
        for sock in idle:
            sock.close()
        time.sleep(0.2)
        # A client that sends its request head a byte at a time is cut off after --header-timeout.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            for _ in range(2):  # a byte every 0.4 s: every byte is "activity", the head never completes
                time.sleep(0.4)
                sock.sendall(b"X")
            assert sock.recv(1024) == b""  # closed by the server, not by our 10 s timeout
            assert time.monotonic() - started < 4
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:  # says nothing at all
            started = time.monotonic()
            assert idle.recv(1024) == b"" and time.monotonic() - started < 4
        assert requests.get(f"{url}/models", timeout=10).status_code == 200


def test_100_concurrent_clients_all_get_answers(tiny_server):
    """The load test: 100 clients, each on its own connection, released at once; none is reset or lost."""
    barrier = threading.Barrier(100)

    def one(i: int) -> tuple[int, str]:
        body = {**CHAT, "messages": [{"role": "user", "content": f"Should school uniforms help students {i}?"}]}
        barrier.wait()
        answer = requests.post(f"{tiny_server}/chat/completions", json=body, timeout=120)
        return answer.status_code, answer.json()["choices"][0]["message"]["content"]

    if shutil.which("ss"):  # a listening socket's Send-Q is its backlog: 100 clients must fit in it
        listing = subprocess.run(["ss", "-ltnH", f"sport = :{port_of(tiny_server)}"], capture_output=True, text=True,
                                 timeout=30).stdout.split()
        assert listing[0] == "LISTEN" and int(listing[2]) >= 128, listing
    with ThreadPoolExecutor(100) as pool:
        results = list(pool.map(one, range(100)))
    assert [status for status, _ in results] == [200] * 100
    assert all(isinstance(text, str) for _, text in results)


def test_the_server_needs_nothing_from_berds_evaluate(tmp_path):
    """The server is the LLM layer's: it starts (here: up to its port check) without importing berds.evaluate."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "berds.llm.server", "--model", "m",
                           "--backend", "openai", "-o", "base_url=http://127.0.0.1:9/v1", "--port", "99999"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert done.returncode == 2 and "--port must be between 0 and 65535" in done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "berds.registry" in imported
    assert not [m for m in imported if m.startswith("berds.evaluate")], imported


def test_a_lone_surrogate_is_a_400_not_a_model_failure(tiny_server):
    # JSON may escape half a UTF-16 pair ("\ud800"): no tokenizer takes it, and it is the client's error
    body = json.dumps({**CHAT, "messages": [{"role": "user", "content": "\ud800 hi"}]})
    answer = requests.post(f"{tiny_server}/chat/completions", data=body, timeout=30,
                           headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "lone surrogate" in assert_openai_error(answer.json())["message"]
    paired = json.dumps({**CHAT, "messages": [{"role": "user", "content": "\U0001f642 hi"}]})  # escaped as a pair
    assert requests.post(f"{tiny_server}/chat/completions", data=paired, timeout=60,
                         headers={"Content-Type": "application/json"}).status_code == 200


def test_only_json_is_taken_and_the_bearer_scheme_is_case_insensitive(tmp_path, monkeypatch):
    # text/plain is what a web page may POST to a local server across origins without a preflight
    monkeypatch.setenv("BERDS_SERVER_KEY", "right-key")
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path,
                extra_args=["--api-key-env", "BERDS_SERVER_KEY"]) as url:
        plain = requests.post(f"{url}/chat/completions", data=json.dumps(CHAT), timeout=10,
                              headers={"Authorization": "Bearer right-key", "Content-Type": "text/plain"})
        assert plain.status_code == 415 and "send application/json" in assert_openai_error(plain.json())["message"]
        lower = requests.post(f"{url}/chat/completions", json=CHAT, headers={"Authorization": "bearer right-key"},
                              timeout=10)
        assert lower.status_code == 200
        wrong = requests.post(f"{url}/chat/completions", json=CHAT, headers={"Authorization": "Basic right-key"},
                              timeout=10)
        assert wrong.status_code == 401


SCORE = {"model": "m", "echo": True, "logprobs": 0, "max_tokens": 1}


def test_a_scoring_prompt_is_bounded_in_tokens_like_a_chat_prompt(tiny_server):
    url = f"{tiny_server}/completions"
    words = "the bike lanes make streets safer and " * 20  # ~160 tokens, ~760 characters: within 5000 characters
    too_many_tokens = requests.post(url, json={**SCORE, "prompt": words}, timeout=30)
    assert too_many_tokens.status_code == 400  # (it was scored, past the model's context too for longer prompts)
    error = assert_openai_error(too_many_tokens.json(), "context_length_exceeded")
    assert "tokens, more than this server's limit of 64" in error["message"] and error["param"] == "prompt"
    within = requests.post(url, json={**SCORE, "prompt": "Should cities build more bike lanes?"}, timeout=60)
    assert within.status_code == 200 and within.json()["choices"][0]["logprobs"]["token_logprobs"][0] is None


def test_a_scoring_request_is_bounded_by_the_request_timeout(tmp_path):
    with served("llm_server_fixtures:SlowScorer", "m", options=["delay=3"], log_dir=tmp_path,
                extra_args=["--request-timeout", "1"]) as url:
        started = time.monotonic()
        answer = requests.post(f"{url}/completions", json={**SCORE, "prompt": "a prompt"}, timeout=30)
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert "--request-timeout" in assert_openai_error(answer.json(), "timeout")["message"]
        assert time.monotonic() - started < 2.5  # (it waited for the 3 s scorer and answered 200)


def test_deep_nesting_and_loose_types_are_400s_naming_the_parameter(tmp_path):
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path) as url:
        def post(data):
            return requests.post(f"{url}/chat/completions", data=data, timeout=30,
                                 headers={"Content-Type": "application/json"})

        deep = post("[" * 100_000 + "]" * 100_000)  # 200 KB: within the body limit
        assert deep.status_code == 400  # (a 500 "internal error: RecursionError", with a traceback in the log)
        assert "nests JSON arrays or objects too deeply" in assert_openai_error(deep.json())["message"]
        for field, value in [("n", True), ("n", 1.0), ("n", "1"), ("logprobs", "no"), ("logprobs", 1)]:
            answer = post(json.dumps({**CHAT, field: value}))
            assert answer.status_code == 400, (field, value)  # (they were served as n=1 and logprobs=true)
            assert assert_openai_error(answer.json())["param"] == field
        assert post(json.dumps({**CHAT, "n": 1, "logprobs": False})).status_code == 200
        assert post(json.dumps({**CHAT, "n": None, "logprobs": None})).status_code == 200
        assert (tmp_path / "server-stderr.txt").read_text().count("Traceback") == 0


@pytest.mark.parametrize("head", [
    b"Content-Length: -5\r\n", b"Content-Length: 10\r\nContent-Length: 99999999\r\n", b"X-Big: " + b"a" * 200_000 + b"\r\n",
], ids=["negative-length", "two-lengths", "200-kb-header"])
def test_a_request_http_cannot_parse_gets_a_json_400(tmp_path, head):
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path) as url:
        status, headers, body = split_response(raw_exchange(
            port_of(url), b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n"))
        assert status == 400 and headers["content-type"] == "application/json"  # (it was uvicorn's text/plain)
        assert "not valid HTTP/1.1" in assert_openai_error(json.loads(body), "bad_request")["message"]
        assert requests.get(f"{url}/models", timeout=10).status_code == 200


def test_a_body_dripped_in_is_cut_at_the_body_timeout_not_the_request_timeout(tmp_path):
    """A client sending its body a byte at a time held a queue slot for the whole --request-timeout (600 s)."""
    body = json.dumps(CHAT).encode()
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path,
                extra_args=["--request-timeout", "60", "--body-timeout", "1.5"]) as url:
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=20) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body))
            started = time.monotonic()
            answer = b""
            for byte in body:  # one byte every 0.1 s: the whole body would take far longer than 1.5 s
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    break
                sock.settimeout(0.1)
                try:
                    answer += sock.recv(65536)
                except socket.timeout:
                    continue
                if answer:
                    break
            sock.settimeout(10)
            while answer.count(b"}") < 2:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        waited = time.monotonic() - started
        status, _, payload = split_response(answer)
        assert status == 408 and 1.4 < waited < 6, (status, waited)
        assert "--body-timeout" in assert_openai_error(json.loads(payload), "timeout")["message"]
