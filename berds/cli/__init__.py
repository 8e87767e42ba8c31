"""The ``berds`` command line: a thin skin over the Python API.

Each command module (``berds/cli/<area>.py``) defines ``register(app)`` that adds its commands; a
command parses options and calls one public function. Heavy imports happen inside command bodies, so
``berds --help`` and ``berds judges list`` stay fast. User errors (``BerdsError``) print one line and
exit with status 2; Ctrl-C exits with status 130 and one line saying what was kept.

Conventions (README "Command-line conventions"): ``-o``/``--option`` (``--judge-option`` for judges) is always
a ``key=value`` option of the command's main component and ``--out`` has no short form; ``--k`` and
``--lambdas`` take repeated values or comma lists (``--k 5 --k 10`` = ``--k 5,10``).
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from berds.cli import analysis, answers, corpus, engine, evaluate, export, judge_trust, llm, questions, rerank, retrieval
from berds.cli import label  # `berds label ...`: human labels in the browser (berds/trust/labelling)
from berds.cli.coercion import fast_option_values
from berds.cli.options import plain_help_types

# `berds --help` lists the commands by workflow. Each command names its panel with typer's rich_help_panel= where
# it is registered; the plain (click) help berds prints groups by it (typer shows panels only in its rich help,
# which berds turns off: rich cut long option names at 80 columns). Panels in this order, and within a panel the
# commands named here first, in this order (a command not named here comes after them).
HELP_PANELS: dict[str, tuple[str, ...]] = {
    "Start here": ("demo",),
    "Corpora and indexes": ("questions", "corpus", "index", "encoders"),
    "Retrieve and rerank": ("retrieve", "import", "retrievers", "rerank", "rerankers", "tune"),
    "Judge and evaluate": ("eval", "judges", "judge", "label", "compare", "cache", "answers"),
    "Analyses and reports": ("analyze", "report", "study", "export"),
    "Plug-ins and tools": ("check-retriever", "check-reranker", "check-provider", "llm", "engine"),
}
OTHER_PANEL = "Other commands"


class WorkflowGroup(TyperGroup):
    """The root command group: its commands listed under their workflow panel (``HELP_PANELS``); a command without
    a panel goes under "Other commands"."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, Any]]] = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            panels.setdefault(getattr(cmd, "rich_help_panel", None) or OTHER_PANEL, []).append((name, cmd))
        if not panels:
            return
        limit = formatter.width - 6 - max(len(name) for rows in panels.values() for name, _ in rows)
        order = {p: i for i, p in enumerate(HELP_PANELS)}
        for panel in sorted(panels, key=lambda p: order.get(p, len(order))):
            named = HELP_PANELS.get(panel, ())
            rows = sorted(panels[panel], key=lambda row: named.index(row[0]) if row[0] in named else len(named))
            with formatter.section(panel):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])


app = typer.Typer(
    cls=WorkflowGroup,
    name="berds",
    help="Benchmark retrieval systems for diverse perspectives (BERDS).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: rich's option panels cut long option names at 80 columns
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
)


def _version(value: bool) -> None:
    if value:
        from berds import __version__

        print(f"berds {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the berds version and exit."),
) -> None:
    """Benchmark retrieval systems for diverse perspectives (BERDS)."""


for module in (evaluate, corpus, retrieval, analysis, rerank, judge_trust, llm, engine, answers, export, questions, label):
    module.register(app)

plain_help_types()
fast_option_values()  # option values without importing pydantic (berds/cli/coercion.py)

# What an interrupted command leaves behind, by command word (said in the one line Ctrl-C prints).
KEPT_ON_INTERRUPT = {
    "eval": "the judgement cache keeps every answered batch; run the same command again to judge only the rest",
    "index": "an unfinished index is never searched; run the same command again to resume it (a dense build's "
             "finished embedding shards are kept)",
    "retrieve": "finished batches are kept in OUT/.partial.jsonl; run the same command again to carry on",
    "corpus": "finished shards and fetched pages are kept; run the same command with --resume to carry on",
    # (search builds have no --resume: their cache of searches and pages is what a rerun reuses)
    "corpus build search": "searches and fetched pages are cached; run the same command again to fetch only the rest",
    "tune": "the judgement and embedding caches keep every finished batch; run the same command again",
    "study": "the judgement and embedding caches keep every finished batch; run the same command again",
    "rerank": "the embedding cache keeps every finished batch; run the same command again",
    "analyze": "the judgement cache keeps every answered batch; run the same command again",
    "report": "the judgement cache keeps every answered batch; run the same command again",
    "judge": "the judgement cache keeps every answered batch; run the same command again",
    "judge train": "the training state after the last finished step is kept beside --out; run the same command "
                   "again to resume",
    "demo": "finished stages (store, indexes, runs, cached verdicts) are kept; run it again to carry on",
}

# Spellings that changed, still accepted: (command words, old option, new option).
OLD_SPELLINGS = [(("corpus", "build"), "-o", "--out"), (("export", "qrels"), "-o", "--out")]


def _modernise(args: list[str]) -> list[str]:
    """Old option spellings rewritten to the current ones (``corpus build -o X`` -> ``--out X``)."""
    for words, old, new in OLD_SPELLINGS:
        if args[: len(words)] == list(words) and old in args:
            args = [new if a == old else a for a in args]
    return args


_TERMINATED: list[int] = []  # the signal that ended the command, when it was SIGTERM


def _on_terminate(signum: int, frame: object) -> None:
    """SIGTERM (a scheduler's time limit, `kill`): stop as Ctrl-C does, so what is finished is kept and said."""
    _TERMINATED.append(signum)
    raise KeyboardInterrupt


def _catch_termination() -> None:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # (never one someone else installed)
        signal.signal(signal.SIGTERM, _on_terminate)


def _interrupted(args: list[str]) -> None:
    import signal

    from rich.console import Console

    words = [a for a in args if not a.startswith("-")][:3]
    # the longest entry that the command's first words name ("corpus build search", "judge train", "eval")
    kept = next((KEPT_ON_INTERRUPT[" ".join(words[:n])] for n in (3, 2, 1) if " ".join(words[:n]) in KEPT_ON_INTERRUPT),
                "work already written stays on disk")
    how, code = "interrupted[/] (Ctrl-C)", 130
    if _TERMINATED:
        name = signal.Signals(_TERMINATED[0]).name
        how, code = f"stopped[/] ({name})", 128 + _TERMINATED[0]
    Console(stderr=True).print(f"[bold yellow]{how}: {kept}.", highlight=False, soft_wrap=True)
    sys.exit(code)


def _app_for(args: list[str]) -> typer.Typer:
    """The app that runs ``args``: one holding only the command they name, when they name one (typer builds the
    click object of every registered command, reading each one's signature and type hints, on every call: a
    tenth of `berds rerank`'s start-up), else the whole app (--help, --version, a misspelt command, completion)."""
    import copy
    import os

    word = args[0] if args else ""
    commands = [c for c in app.registered_commands if c.name == word]
    groups = [g for g in app.registered_groups if g.name == word]
    if not (commands or groups) or "_BERDS_COMPLETE" in os.environ:
        return app
    one = copy.copy(app)  # (same settings and root callback; the lists are replaced, not shared)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning ``BerdsError`` into a one-line message and Ctrl-C into
    exit status 130 with a line that says what was kept."""
    from berds.errors import BerdsError

    args = _modernise(list(sys.argv[1:] if argv is None else argv))
    _catch_termination()
    try:
        code = _app_for(args)(args=args, standalone_mode=False, prog_name="berds")
        if code == 130:  # typer turns KeyboardInterrupt into Exit(130) and returns the code
            _interrupted(args)
        if isinstance(code, int) and code:
            sys.exit(code)
    except KeyboardInterrupt:
        _interrupted(args)
    except BerdsError as exc:
        from rich.console import Console
        from rich.markup import escape

        from berds.errors import command_line_wording

        # escaped: a path or value holding "[x]" lost it as a style tag, and "[/x]" ended in a MarkupError traceback
        Console(stderr=True).print(f"[bold red]error:[/] {escape(command_line_wording(str(exc)))}", highlight=False,
                                   soft_wrap=True)
        sys.exit(2)
    except (typer.Exit, SystemExit) as exc:  # --help and explicit exits
        code = getattr(exc, "exit_code", None)
        if code is None:
            code = getattr(exc, "code", 0)
        sys.exit(code or 0)
    except typer.Abort:
        _interrupted(args)
    except OSError as exc:
        # The system refused a file (disk full, read-only, no permission): one line naming it, not a traceback.
        # Anything else (a socket error inside a library: no errno, no file) stays a traceback to report.
        if exc.errno is None and exc.filename is None:
            raise
        from rich.console import Console
        from rich.markup import escape

        where = f"{exc.filename}: " if exc.filename is not None else ""
        Console(stderr=True).print(f"[bold red]error:[/] {escape(f'{where}{exc.strerror or exc}')}", highlight=False,
                                   soft_wrap=True)
        sys.exit(1)
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
