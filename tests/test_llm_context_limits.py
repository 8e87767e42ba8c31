"""Texts longer than the model reads: scored past its context the numbers mean nothing, and generated past it the
model is at positions it never learned. ``berds llm serve`` refused neither (its --max-prompt-tokens default is
8,192; the tiny test model reads 1,024), so P.D. over HTTP returned perplexities of cut-off nonsense, and the
openai backend read any 400 as "this server does not offer echo+logprobs". A real server process on 127.0.0.1."""

from __future__ import annotations

import pytest
import requests

from berds.errors import BerdsError
from judge_trust_fixtures import served
from llm_fixtures import tiny_mistral  # noqa: F401  (a pytest fixture)

pytestmark = pytest.mark.network

LONG = " ".join(["evidence"] * 1500)  # > 1,024 tokens for the tiny model's tokenizer


def test_the_transformers_backend_refuses_to_echo_past_the_context(tiny_mistral):
    from berds.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(str(tiny_mistral), device="cpu")
    assert llm.context_length() == 1024
    with pytest.raises(BerdsError, match=r"more than the model's context of 1024"):
        llm.echo_logprobs(LONG)
    tokens, offsets, values = llm.echo_logprobs("a short text")
    assert len(tokens) == len(values) and values[0] is None


def test_the_server_refuses_prompts_past_the_models_context(tiny_mistral, tmp_path):
    from berds.llm import load_llm

    with served("transformers", str(tiny_mistral), options=["device=cpu"], log_dir=tmp_path) as url:
        scored = requests.post(f"{url}/completions", json={"model": str(tiny_mistral), "prompt": LONG, "echo": True,
                                                           "logprobs": 0, "max_tokens": 1}, timeout=60)
        assert scored.status_code == 400, scored.text
        assert scored.json()["error"]["code"] == "context_length_exceeded"
        assert "model's context of 1024 tokens" in scored.json()["error"]["message"]

        chat = requests.post(f"{url}/chat/completions", timeout=60, json={
            "model": str(tiny_mistral), "max_tokens": 200,
            "messages": [{"role": "user", "content": " ".join(["word"] * 900)}]})
        assert chat.status_code == 400 and chat.json()["error"]["code"] == "context_length_exceeded", chat.text
        assert "asks for up to 200 more" in chat.json()["error"]["message"]

        llm = load_llm("openai", str(tiny_mistral), base_url=url, max_retries=0)
        with pytest.raises(BerdsError) as e:
            llm.score([LONG], [" and a restatement"])
        assert "longer than the server's model reads" in str(e.value)
        assert "does not offer" not in str(e.value)  # (what it said before: the server does offer echo)
        short = llm.score(["The document says"], [" yes"])
        assert short[0].tokens and all(v <= 0 for v in short[0].logprobs)


def test_the_transformers_backend_refuses_to_generate_past_the_context(tiny_mistral):
    from berds.llm import user_prompt
    from berds.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(str(tiny_mistral), device="cpu")
    long_prompt = user_prompt(" ".join(["word"] * 900))
    with pytest.raises(BerdsError, match=r"prompt 1 has \d+ tokens and asks for up to 200 more, more than the "
                                         r"model's context of 1024 tokens \(1 of 2 prompts\)"):
        llm.generate([user_prompt("short"), long_prompt], max_new_tokens=200)
    assert len(llm.generate([long_prompt], max_new_tokens=2)) == 1  # (within the context it runs)
