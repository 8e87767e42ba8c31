"""``berds export qrels`` (an evaluation's judgements as TREC qrels) and ``berds export run`` (a run as a TREC run)."""

from __future__ import annotations

from pathlib import Path

import typer

from berds.cli.options import out_file_callback

export_app = typer.Typer(help="Export berds results for other tools.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export", rich_help_panel="Analyses and reports")


@export_app.command("qrels", short_help="Judgements as TREC diversity qrels.")
def export_qrels_command(
    evaluation: Path = typer.Argument(..., help="An evaluation folder written by `berds eval` (or its judgements.jsonl)."),
    out: Path = typer.Option(..., "--out", callback=out_file_callback, help="The qrels file to write (qid subtopic docid rel)."),
    flat: bool = typer.Option(False, "--flat", help="Ordinary qrels (qid 0 docid rel, rel 1 when the passage supports any perspective) for ranx, trec_eval and ir_measures' non-diversity measures."),
) -> None:
    """Write judgements as qrels with perspectives as subtopics (ndeval's diversity measures), or --flat."""
    from rich.console import Console

    from berds.evaluate.qrels import export_qrels

    n = export_qrels(evaluation, out, flat=flat)
    shape = "qid 0 docid rel" if flat else "qid subtopic docid rel"
    Console().print(f"{n:,} qrels lines ({shape}) → {out}", highlight=False, markup=False, soft_wrap=True)


@export_app.command("run", short_help="A run as a TREC run file, in the order berds judges it.")
def export_run_command(
    run: Path = typer.Argument(..., help="A run folder or BERDS jsonl."),
    out: Path = typer.Option(..., "--out", callback=out_file_callback, help="The TREC run file to write (qid Q0 docid rank score tag)."),
    tag: str = typer.Option(None, "--tag", help="The run tag (default: the run's name)."),
) -> None:
    """Write a run as `qid Q0 docid rank score tag`, scores n − rank + 1, to use with `berds export qrels` in TREC tools."""
    from rich.console import Console

    from berds.evaluate.qrels import export_run

    if not run.exists():
        from berds.errors import InputError

        raise InputError("no such run folder or file", path=run)
    n = export_run(run, out, tag=tag)
    Console().print(f"{n:,} run lines (qid Q0 docid rank score tag) → {out}", highlight=False, markup=False, soft_wrap=True)
