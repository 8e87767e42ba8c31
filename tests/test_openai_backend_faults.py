"""The openai backend against a server that answers in shapes OpenAI's API never takes: content that is not
text, log-probabilities that are not (a list of strings, text, values above 0, tokens that are not strings), JSON
nested past the parser, and lone surrogates. Each is a one-line BerdsError naming the field, or read safely."""

from __future__ import annotations

import json

import pytest

from berds.errors import BerdsError
from berds.judges.llm_judge import LLMJudge
from berds.llm.base import Generation, user_prompt
from berds.types import JudgePair
from llm_fixtures import ScriptedServer

PAIR = JudgePair("Bike lanes make streets safer.", "Cities that added bike lanes saw injuries fall.")


class EchoLLM:
    def __init__(self, text):
        self.id, self.text = "echo", text

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        return [Generation(self.text) for _ in prompts]


def reply(content, logprobs=None) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "logprobs": logprobs, "finish_reason": "stop"}]}).encode()


def ask(body: bytes | list, top_logprobs=0, status=200):
    from berds.llm.openai_backend import OpenAILLM

    bodies = body if isinstance(body, list) else [body]
    with ScriptedServer(lambda _, n: (status, {}, bodies[min(n, len(bodies)) - 1])) as server:
        client = OpenAILLM("m", base_url=server.url, max_retries=1, backoff_base=0.001, backoff_max=0.001)
        return client.generate([user_prompt("q")], top_logprobs=top_logprobs)[0]


@pytest.mark.network
def test_openai_replies_of_the_wrong_shape_are_named_not_tracebacks():
    with pytest.raises(BerdsError, match=r"choices\[0\].message.content is a list, not text"):
        ask(reply([{"type": "text", "text": "Yes"}]))
    with pytest.raises(BerdsError, match=r"HTTP 200 but the body is not JSON"):
        ask(b"[" * 200_000)
    with pytest.raises(BerdsError, match=r"failed after 2 attempts; last answer: HTTP 500"):
        ask(b'{"error":' * 200_000, status=500)
    bad_logprobs = [
        ["Yes"],                                                                # a list of strings
        {"content": [{"token": "Yes", "logprob": "high"}]},                     # not a number
        {"content": [{"token": "Yes", "logprob": 3.5, "top_logprobs": []}]},    # a log-probability above 0
        {"content": [{"token": "Yes", "logprob": -0.1,
                      "top_logprobs": [{"token": 7, "logprob": -0.1}]}]},       # a token that is not text
    ]
    for logprobs in bad_logprobs:
        with pytest.raises(BerdsError, match=r"choices\[0\].logprobs is not OpenAI's"):
            ask(reply("Yes", logprobs), top_logprobs=2)
    # what is well formed still reads as before: no logprobs at all, and a token without a value skipped
    assert ask(reply("Yes", None), top_logprobs=2) == Generation("Yes", None)
    good = {"content": [{"token": "Yes", "logprob": -0.1, "top_logprobs": [{"token": "Yes", "logprob": -0.1},
                                                                           {"token": "No", "logprob": None}]}]}
    assert ask(reply("Yes", good), top_logprobs=2) == Generation("Yes", {"Yes": -0.1})


@pytest.mark.network
def test_a_lone_surrogate_in_a_reply_becomes_a_replacement_character_and_can_be_cached(tmp_path):
    from berds.evaluate.cache import JudgementCache

    generation = ask(b'{"choices": [{"message": {"role": "assistant", "content": "Yes \\ud800"}}]}')
    assert generation.text == "Yes \ufffd"
    verdict = LLMJudge(EchoLLM(generation.text)).judge([PAIR])
    with JudgementCache(tmp_path / "c.sqlite") as cache:  # stored and read back
        cache.put_many("j", "p", [PAIR], verdict)
        assert cache.get_many("j", "p", [PAIR])[0].raw == "Yes \ufffd"


class InfiniteLogprobsLLM:
    """A backend whose first-token log-probabilities hold -inf (a masked token) and NaN."""

    id = "inf"

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        import math

        return [Generation("Yes", {"Yes": -0.1, "No": -2.0, "masked": -math.inf, "odd": math.nan}) for _ in prompts]


@pytest.mark.network
def test_the_server_leaves_out_log_probabilities_json_cannot_carry():
    from berds.llm.openai_backend import OpenAILLM
    from berds.llm.server import ChatServer

    with ChatServer(InfiniteLogprobsLLM(), port=0, served_model_name="m") as server:
        client = OpenAILLM("m", base_url=server.url, max_retries=0)
        [generation] = client.generate([user_prompt("q")], top_logprobs=4)
    assert generation == Generation("Yes", {"Yes": -0.1, "No": -2.0})  # was HTTP 500, retried, then failed


def test_options_given_as_text_or_without_bound_are_named():
    from berds.llm.openai_backend import OpenAILLM

    for options, message in [({"timeout": "30"}, "timeout must be a finite number of seconds > 0, got '30'"),
                             ({"timeout": float("inf")}, "timeout must be a finite number"),
                             ({"backoff_max": -1}, "backoff_max must be a finite number of seconds >= 0"),
                             ({"max_retry_after": "a"}, "max_retry_after must be"),
                             ({"extra_body": ["x"]}, "extra_body must be a JSON object"),
                             ({"seed": "3"}, "seed must be an integer")]:
        with pytest.raises(BerdsError, match=message):
            OpenAILLM("m", base_url="http://127.0.0.1:9/v1", **options)


def echoed(tokens, values, offsets) -> bytes:
    return json.dumps({"choices": [{"text": "", "logprobs": {"tokens": tokens, "token_logprobs": values,
                                                             "text_offset": offsets}}]}).encode()


@pytest.mark.network
def test_echoed_log_probabilities_of_the_wrong_shape_are_named_not_scored_short():
    from berds.llm.openai_backend import OpenAILLM

    tokens, offsets = ["Hi", " there", " Yes", " sir"], [0, 2, 8, 12]
    cases = [(tokens, [None, -1.0, -0.5], offsets),                 # one short: " sir" was dropped, a 1-token score
             (tokens, [None, -1.0, -0.5, -0.2], ["0", "2", "8", "12"]),  # offsets as text (was a TypeError)
             (tokens, [None, -1.0, -0.5, "low"], offsets),          # a value that is not a number
             (tokens, [None, -1.0, -0.5, 4.0], offsets)]            # a value above 0
    for case in cases:
        with ScriptedServer(lambda _, n, body=echoed(*case): (200, {}, body)) as server:
            with pytest.raises(BerdsError, match="choices\\[0\\].logprobs is not three lists of one length"):
                OpenAILLM("m", base_url=server.url, max_retries=0).score(["Hi there"], [" Yes sir"])
    with ScriptedServer(lambda _, n: (200, {}, echoed(tokens, [None, -1.0, -0.5, -0.2], offsets))) as server:
        [score] = OpenAILLM("m", base_url=server.url, max_retries=0).score(["Hi there"], [" Yes sir"])
    assert (score.tokens, score.logprobs) == ((" Yes", " sir"), (-0.5, -0.2))
