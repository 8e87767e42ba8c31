"""``berds engine info``: what a job would run on — this process, or a Ray cluster's nodes and resources."""

from __future__ import annotations

from typing import Optional

import typer

from berds.cli.options import WORKERS_HELP

engine_app = typer.Typer(help="Execution engines (local, ray): inspect where encoding and judging run.",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add ``berds engine ...`` to the main app."""
    app.add_typer(engine_app, name="engine", rich_help_panel="Plug-ins and tools", short_help="Execution engines (local, ray).")


@engine_app.command("info", short_help="Nodes, CPUs, GPUs and memory of the engine.")
def info_command(
    engine: str = typer.Option("ray", "--engine", help="local | ray"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster: ray://HEAD:10001, or auto (default: start a local instance)."),
    num_cpus: Optional[int] = typer.Option(None, "--num-cpus", help="CPUs of a local Ray instance started here."),
    cpus_per_worker: float = typer.Option(1.0, "--cpus-per-worker", help="CPUs each worker reserves."),
    gpus_per_worker: float = typer.Option(0.0, "--gpus-per-worker", help="GPUs each worker reserves (1 for a 7B judge)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
) -> None:
    """Show the engine's nodes, CPUs, GPUs and memory, and how many workers a job would get."""
    from rich.console import Console

    from berds.engine import engine_info, info_table

    options = {}
    if engine == "ray":
        options = {"num_cpus": num_cpus, "cpus_per_worker": cpus_per_worker, "gpus_per_worker": gpus_per_worker,
                   "num_workers": workers}
    else:  # (they were ignored without a word: the local engine is this one process)
        given = [flag for flag, value, default in (("--num-cpus", num_cpus, None), ("--cpus-per-worker",
                 cpus_per_worker, 1.0), ("--gpus-per-worker", gpus_per_worker, 0.0), ("--workers", workers, None))
                 if value != default]
        if given:
            from berds.errors import BerdsError

            raise BerdsError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --engine ray; the local "
                             "engine is this one process")
    Console().print(info_table(engine_info(engine, address=address, **options)))
