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
        import sys
        import time

        print(f"scoring {text!r}", file=sys.stderr, flush=True)  # (tests count the prompts that reached the model)
        time.sleep(self.delay)
        return [text], [0], [None]


def CountingTransformers(model: str, **options):
    """The transformers backend, unchanged, reporting on stderr each ``generate()`` call it starts and how many
    forward passes (generation steps) the model ran for it: ``generate start max_new_tokens=N prompts=P``,
    ``generate rows chars=[...]`` (each answer's length) and ``generate end max_new_tokens=N steps=S``. Served as
    ``--backend llm_server_fixtures:CountingTransformers``."""
    import sys

    from berds.llm.transformers_backend import TransformersLLM

    class Counting(TransformersLLM):
        def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0, cancel=None):
            steps = [0]
            hook = self.model.register_forward_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))
            print(f"generate start max_new_tokens={max_new_tokens} prompts={len(prompts)}", file=sys.stderr, flush=True)
            try:
                generations = super().generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                                               top_logprobs=top_logprobs, cancel=cancel)
                print(f"generate rows chars={[len(g.text) for g in generations]}", file=sys.stderr, flush=True)
                return generations
            finally:
                hook.remove()
                print(f"generate end max_new_tokens={max_new_tokens} steps={steps[0]}", file=sys.stderr, flush=True)

    return Counting(model, **options)
