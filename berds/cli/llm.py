"""``berds llm ...``: list LLM backends, serve one over an OpenAI-compatible API, try a quick generation."""

from __future__ import annotations

from typing import List, Optional

import typer

from berds.llm.limits import ServerLimits  # not berds.llm.server: the CLI stays light

_LIMITS = ServerLimits()  # one set of defaults for `berds llm serve` and `python -m berds.llm.server`

llm_app = typer.Typer(help="LLM backends: list them, serve one over HTTP, try a generation.", no_args_is_help=True)


@llm_app.command("list")
def list_backends() -> None:
    """List the LLM backends (name, what, loader)."""
    from rich.console import Console
    from rich.table import Table

    from berds.llm import LLMS

    table = Table(title="LLM backends")
    for column in ("name", "description", "loader"):
        table.add_column(column)
    for spec in LLMS.specs():
        table.add_row(spec.name, spec.description, spec.loader)
    Console().print(table)


@llm_app.command("serve", short_help="Serve a model over an OpenAI-compatible API.")
def serve_command(
    model: str = typer.Option(..., "--model", "-m", help="hub name or local path"),
    backend: str = typer.Option("transformers", "--backend", "-b", help="transformers, vllm or openai"),
    host: str = typer.Option("127.0.0.1", help="interface to listen on (0.0.0.0 = all)"),
    port: int = typer.Option(8000, min=0, max=65535, help="port; 0 picks a free one (printed when ready)"),
    served_model_name: Optional[str] = typer.Option(None, help="model name clients send (default: --model)"),
    option: List[str] = typer.Option([], "--option", "-o", help="backend option KEY=VALUE, e.g. adapter=/path"),
    api_key_env: Optional[str] = typer.Option(None, help="env variable holding the key clients must send (every "
                                              "endpoint; /health without it answers only {\"status\": \"ok\"})"),
    max_batch_size: int = typer.Option(8, help="requests gathered into one generate() call"),
    batch_wait_ms: float = typer.Option(10.0, help="how long a batch waits for more requests"),
    workers: int = typer.Option(1, help="model worker threads (more than 1 only for thread-safe backends)"),
    max_top_logprobs: int = typer.Option(_LIMITS.max_top_logprobs, help="largest top_logprobs a request may ask for"),
    max_body_bytes: int = typer.Option(_LIMITS.max_body_bytes, help="largest request body (413 before it is read)"),
    max_prompt_chars: int = typer.Option(_LIMITS.max_prompt_chars, help="largest prompt in characters (400 above)"),
    max_prompt_tokens: int = typer.Option(_LIMITS.max_prompt_tokens, help="largest prompt in tokens, when the backend has a tokenizer"),
    max_tokens_limit: int = typer.Option(_LIMITS.max_tokens, help="largest max_tokens a request may ask for"),
    max_queue: int = typer.Option(_LIMITS.max_queue, help="chat requests in flight; more get 503 with Retry-After"),
    request_timeout: float = typer.Option(_LIMITS.request_timeout, help="seconds a request may take (503 after)"),
    header_timeout: float = typer.Option(_LIMITS.header_timeout, help="seconds a client may take to send its request head"),
    body_timeout: float = typer.Option(_LIMITS.body_timeout, help="seconds a client may take to send its whole request body (408 after)"),
    keep_alive_timeout: float = typer.Option(_LIMITS.keep_alive_timeout, help="seconds an idle keep-alive socket stays open"),
    max_connections: int = typer.Option(_LIMITS.max_connections, help="open sockets at once; more get 503 with Retry-After"),
    backlog: int = typer.Option(_LIMITS.backlog, help="listen backlog"),
    log_requests: bool = typer.Option(False, help="print one line per request on stderr"),
) -> None:
    """Serve a model over an OpenAI-compatible API (/v1/chat/completions, /v1/models), every size bounded.

    /health is a liveness probe open to all: without the key (when --api-key-env is set) it answers only
    {"status": "ok"}; with it, also the model name and the load. A request whose client disconnects, or whose
    --request-timeout passes, is withdrawn: dropped from the queue, or (transformers) stopped at the next step.
    """
    from berds.llm.server import serve
    from berds.registry import parse_options

    limits = ServerLimits(max_body_bytes=max_body_bytes, max_prompt_chars=max_prompt_chars,
                          max_prompt_tokens=max_prompt_tokens, max_tokens=max_tokens_limit,
                          max_top_logprobs=max_top_logprobs, max_queue=max_queue, request_timeout=request_timeout,
                          header_timeout=header_timeout, body_timeout=body_timeout, keep_alive_timeout=keep_alive_timeout,
                          max_connections=max_connections, backlog=backlog)
    serve(backend, model, host=host, port=port, served_model_name=served_model_name, options=parse_options(option),
          api_key_env=api_key_env, max_batch_size=max_batch_size, batch_wait=batch_wait_ms / 1000, workers=workers,
          limits=limits, log_requests=log_requests)


@llm_app.command("generate", short_help="Generate completions: check a backend works.")
def generate_command(
    prompts: List[str] = typer.Argument(..., help="one or more user messages"),
    model: str = typer.Option(..., "--model", "-m", help="hub name, local path, or served model name"),
    backend: str = typer.Option("transformers", "--backend", "-b", help="transformers, vllm or openai"),
    option: List[str] = typer.Option([], "--option", "-o", help="backend option KEY=VALUE (base_url=..., adapter=...)"),
    system: Optional[str] = typer.Option(None, help="a system message sent before each prompt"),
    max_new_tokens: int = typer.Option(16, help="tokens to generate"),
    temperature: float = typer.Option(0.0, help="0 = greedy"),
    top_logprobs: int = typer.Option(5, help="show the N most likely first tokens (0 = off)"),
) -> None:
    """Generate a completion for each prompt: a quick check that a backend and model work."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from berds.judges.llm_judge import p_yes_from_logprobs
    from berds.registry import parse_options
    from berds.llm import load_llm, user_prompt

    llm = load_llm(backend, model, **parse_options(option))
    generations = llm.generate([user_prompt(p, system=system) for p in prompts], max_new_tokens=max_new_tokens,
                               temperature=temperature, top_logprobs=top_logprobs)
    table = Table(title=llm.id)
    for column in ("prompt", "completion", "top first tokens (logprob)", "P(Yes)"):
        table.add_column(column)
    for prompt, generation in zip(prompts, generations):
        top = generation.first_token_logprobs or {}
        shown = ", ".join(f"{t!r} {lp:.2f}" for t, lp in sorted(top.items(), key=lambda kv: -kv[1]))
        p_yes = p_yes_from_logprobs(generation.first_token_logprobs)
        # Text(): model output is shown literally, never read as rich markup ("[/INST]" would be a tag).
        table.add_row(Text(prompt), Text(generation.text), Text(shown or "-"), "-" if p_yes is None else f"{p_yes:.3f}")
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add ``berds llm`` (list, serve, generate) to the main app."""
    app.add_typer(llm_app, name="llm", rich_help_panel="Plug-ins and tools", short_help="LLM backends: list, serve over HTTP, try one.")
