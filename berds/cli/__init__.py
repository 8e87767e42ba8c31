"""The ``berds`` command line: a thin skin over the Python API.

Each command module (``berds/cli/<area>.py``) defines ``register(app)`` that adds its commands; a
command parses options and calls one public function. Heavy imports happen inside command bodies, so
``berds --help`` and ``berds judges list`` stay fast. User errors (``BerdsError``) print one line and
exit with status 2.
"""

from __future__ import annotations

import sys

import typer

from berds.cli import analysis, answers, corpus, engine, evaluate, export, judge_trust, llm, rerank, retrieval

app = typer.Typer(
    name="berds",
    help="Benchmark retrieval systems for diverse perspectives (BERDS).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for module in (evaluate, corpus, retrieval, analysis, rerank, judge_trust, llm, engine, answers, export):
    module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning ``BerdsError`` into a one-line message."""
    from berds.errors import BerdsError

    try:
        app(args=argv, standalone_mode=False)
    except BerdsError as exc:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except (typer.Exit, SystemExit) as exc:  # --help and explicit exits
        code = getattr(exc, "exit_code", None)
        if code is None:
            code = getattr(exc, "code", 0)
        sys.exit(code or 0)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:
        # Usage errors (bad option value, missing argument, unknown command): typer >= 0.2x raises its own
        # vendored click exceptions (typer.TyperException subclasses), older typer raises click's.
        if isinstance(exc, typer.TyperException) and hasattr(exc, "show"):
            exc.show()
            sys.exit(getattr(exc, "exit_code", 2))
        try:
            import click
        except ImportError:
            raise exc from None
        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
