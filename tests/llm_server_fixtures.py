"""Backends the server tests serve from a real ``python -m berds.llm.server`` process (tests/ is on its path)."""

from __future__ import annotations


class SlowScorer:
    """A backend whose ``echo_logprobs`` (the ``/v1/completions`` scoring path) takes ``delay`` seconds; it has no
    tokenizer, so only the time bounds apply. Served as ``--backend llm_server_fixtures:SlowScorer -o delay=2``."""

    def __init__(self, model: str, delay: float = 1.0):
        self.model_name, self.delay = model, float(delay)
        self.id = f"slow-scorer:{model}"

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        from berds.llm.base import Generation

        return [Generation("Yes", None) for _ in prompts]

    def echo_logprobs(self, text: str):
        import time

        time.sleep(self.delay)
        return [text], [0], [None]
