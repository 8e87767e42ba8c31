"""`berds llm serve` stops work for clients that left: a long generation whose client closed its connection stops
at the model's next step (freeing the model for the requests queued behind it), one still queued never runs, and
the others in its batch go on unchanged.

A real ``python -m berds.llm.server`` process serves the tiny random Mistral through the transformers backend with
a forward-pass counter (``llm_server_fixtures:CountingTransformers``), whose stderr lines say how many generation
steps each ``generate()`` call ran: the tests assert on those counts, not on wall time. A scoring request
(``/v1/completions``) whose client left while it waited for the model is never scored.
"""

from __future__ import annotations

import json
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from judge_trust_fixtures import port_of, served
from llm_fixtures import tiny_mistral  # noqa: F401 - fixture

pytestmark = pytest.mark.network

MESSAGES = [{"role": "user", "content": "Should cities build more bike lanes?"}]
KEY = {"Authorization": "Bearer the-key"}


def chat(max_tokens: int) -> dict:
    return {"model": "m", "messages": MESSAGES, "max_tokens": max_tokens}


def send_chat(port: int, body: dict) -> socket.socket:
    """Send a chat request on a raw socket and return it unread: closing it is the client leaving."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer the-key\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


def log_lines(log: Path, pattern: str) -> list[re.Match]:
    return [m for m in (re.search(pattern, line) for line in log.read_text().splitlines()) if m]


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def health(url: str) -> dict:
    return requests.get(url.rsplit("/v1", 1)[0] + "/health", headers=KEY, timeout=10).json()


@pytest.fixture()
def counting_server(tiny_mistral, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("BERDS_TEST_KEY", "the-key")

    def start(*extra: str):
        return served("llm_server_fixtures:CountingTransformers", str(tiny_mistral), log_dir=tmp_path,
                      options=["device=cpu", "batch_size=16"], max_batch_size=16,
                      extra_args=["--served-model-name", "m", "--max-tokens-limit", "1000", "--api-key-env",
                                  "BERDS_TEST_KEY", *extra])

    return start, tmp_path / "server-stderr.txt"


def test_a_client_that_leaves_stops_its_generation_and_one_still_queued_never_runs(counting_server):
    start, log = counting_server
    with start() as url:
        # This prompt's greedy answer runs its full 500 steps: no end-of-sequence token comes before then.
        assert requests.post(f"{url}/chat/completions", json=chat(500), headers=KEY, timeout=120).status_code == 200
        assert [m.group(1) for m in log_lines(log, r"generate end max_new_tokens=500 steps=(\d+)")] == ["500"]

        port = port_of(url)
        leaver = send_chat(port, chat(1000))  # 2 to 10 s of model time here (2 to 10 ms a step)
        wait_for(lambda: log_lines(log, r"generate start max_new_tokens=1000"), "the long generation to start")
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(requests.post, f"{url}/chat/completions", json=chat(5), headers=KEY, timeout=120)
            queued = send_chat(port, chat(7))  # queued behind the long one, and leaves before it runs
            wait_for(lambda: health(url)["in_flight"] == 3, "three requests in flight")
            queued.close()
            wait_for(lambda: health(url)["withdrawn"] == 1, "the queued request to be withdrawn")
            assert not log_lines(log, r"generate end max_new_tokens=1000")  # still running: nothing stopped it yet
            leaver.close()
            answer = waiting.result()
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"] == "assistant"
        stopped = [int(m.group(1)) for m in log_lines(log, r"generate end max_new_tokens=1000 steps=(\d+)")]
        assert len(stopped) == 1 and stopped[0] < 500, stopped  # (it ran all 1000 steps)
        calls = log_lines(log, r"generate (start|end) max_new_tokens=(\d+)")
        assert [(m.group(1), m.group(2)) for m in calls][-2:] == [("start", "5"), ("end", "5")]
        assert not log_lines(log, r"max_new_tokens=7\b")  # the request that left while queued never reached the model
        details = health(url)
        assert details["withdrawn"] == 2 and details["in_flight"] == 0


def test_a_client_leaving_mid_batch_stops_its_row_and_leaves_the_others_unchanged(counting_server):
    start, log = counting_server
    with start("--batch-wait-ms", "1500") as url:  # two requests sent together share one batch
        alone = requests.post(f"{url}/chat/completions", json=chat(300), headers=KEY, timeout=120)
        assert alone.status_code == 200
        with ThreadPoolExecutor(1) as pool:
            leaver = send_chat(port_of(url), chat(300))
            staying = pool.submit(requests.post, f"{url}/chat/completions", json=chat(300), headers=KEY, timeout=120)
            wait_for(lambda: log_lines(log, r"generate start max_new_tokens=300 prompts=2"), "the shared batch")
            leaver.close()
            answer = staying.result()
        # The same prompt twice: the row that stayed is the answer given alone, the one that left stopped early.
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == alone.json()["choices"][0]["message"]["content"]
        rows = [json.loads(m.group(1)) for m in log_lines(log, r"generate rows chars=(\[.*\])")]
        assert len(rows) == 2 and len(rows[1]) == 2, rows
        full = len(alone.json()["choices"][0]["message"]["content"])
        assert rows[0] == [full] and max(rows[1]) == full and min(rows[1]) < full / 2, rows
        assert health(url)["withdrawn"] == 1


def test_a_scoring_request_whose_client_left_while_it_waited_is_never_scored(tmp_path):
    score = {"model": "m", "echo": True, "logprobs": 0, "max_tokens": 1}
    with served("llm_server_fixtures:SlowScorer", "m", options=["delay=1.5"], log_dir=tmp_path) as url:
        log = tmp_path / "server-stderr.txt"
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(requests.post, f"{url}/completions", json={**score, "prompt": "first"}, timeout=60)
            wait_for(lambda: log_lines(log, r"scoring 'first'"), "the first prompt to be scored")
            body = json.dumps({**score, "prompt": "second"}).encode()
            with socket.create_connection(("127.0.0.1", port_of(url)), timeout=30) as leaver:
                leaver.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                wait_for(lambda: health(url)["in_flight"] == 2, "the second request to wait for the model")
            assert first.result().status_code == 200
        wait_for(lambda: health(url)["withdrawn"] == 1, "the second request to be withdrawn")
        time.sleep(0.5)  # (a second scoring call would have started as soon as the first ended)
        assert [m.group(0) for m in log_lines(log, r"scoring '\w+'")] == ["scoring 'first'"]
