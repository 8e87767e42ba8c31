"""`berds llm serve`'s ``/health``: a liveness probe anyone may call, which names the model and its load only to a
caller holding the key (when the server has one). Real ``python -m berds.llm.server`` processes on 127.0.0.1."""

from __future__ import annotations

import pytest
import requests

from judge_trust_fixtures import served

pytestmark = pytest.mark.network


def test_health_without_the_key_says_only_that_the_server_is_alive(tmp_path, monkeypatch):
    monkeypatch.setenv("BERDS_TEST_KEY", "the-key")
    with served("llm_fixtures:SleepyLLM", "/models/secret-name", options=["delay=0"], log_dir=tmp_path,
                extra_args=["--api-key-env", "BERDS_TEST_KEY"]) as url:
        root = url.rsplit("/v1", 1)[0]
        for headers in ({}, {"Authorization": "Bearer wrong-key"}, {"Authorization": "the-key"}):
            anonymous = requests.get(f"{root}/health", headers=headers, timeout=10)
            assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}, headers
            assert "secret-name" not in anonymous.text  # (it named the model, its load and its queue to anyone)
            models = requests.get(f"{url}/models", headers=headers, timeout=10)
            assert models.status_code == 401 and "secret-name" not in models.text
        keyed = requests.get(f"{root}/health", headers={"Authorization": "Bearer the-key"}, timeout=10).json()
        assert keyed["status"] == "ok" and keyed["model"] == "/models/secret-name"
        assert keyed["in_flight"] == 0 and keyed["max_queue"] > 0 and keyed["withdrawn"] == 0
        listed = requests.get(f"{url}/models", headers={"Authorization": "Bearer the-key"}, timeout=10).json()
        assert "/models/secret-name" in [m["id"] for m in listed["data"]]


def test_an_open_server_gives_its_health_details_to_anyone(tmp_path):
    with served("llm_fixtures:SleepyLLM", "m", options=["delay=0"], log_dir=tmp_path) as url:
        details = requests.get(url.rsplit("/v1", 1)[0] + "/health", timeout=10).json()
        assert details == {"status": "ok", "model": "m", "in_flight": 0, "max_queue": details["max_queue"],
                           "withdrawn": 0}
