"""``berds label plan``: how many questions to label for a target interval width, from a pilot sample.

A thin skin over ``berds.trust.ppi.plan_labels`` (docs/corrected-estimates.md). ``berds/cli/label.py`` creates
the ``label`` group and calls ``register(label_app)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from berds.cli.options import JUDGE_REQUIRED_HELP, K_HELP, cache_file_callback, ks_callback, parse_ks, require_judge


def register(label_app: typer.Typer) -> None:
    label_app.command("plan", short_help="How many questions to label for a target interval width.")(plan_command)


def plan_command(
    run: Path = typer.Argument(..., help="A run folder or BERDS-format jsonl that `berds eval` judged (verdicts are read from the cache)."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="The pilot sample: labelled pairs (TSV: question, id, document, perspective, label) of a few whole questions of this run."),
    validation: Optional[Path] = typer.Option(None, "--validation", help="Or no pilot: the judge's error rates from `berds judge validate --out FILE` (its row for this judge), drawn from their posteriors given its counts and simulated pair by pair over this run."),
    target_width: float = typer.Option(..., "--target-width", help="The full width of the 95% interval wanted, in percentage points (10 = ±5)."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value passed to the judge (as in eval)."),
    k: List[str] = typer.Option(["5"], "--k", metavar="K", callback=ks_callback, help=K_HELP),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file (default: $BERDS_HOME/judgements.sqlite)."),
    title_position: str = typer.Option("after", "--title-position", help="The passage text as the judge saw it (after, before, none), as in eval."),
    population: str = typer.Option("questions", "--population", help="questions (these N questions, default) or superpopulation (questions like these)."),
) -> None:
    """From a pilot sample of whole labelled questions (--labels), or from the judge's validated error rates
    (--validation; with the n enough in 90% of the simulation's draws), how many questions to label so that the
    corrected estimate's 95% interval is --target-width points wide: with the judge (PPI) and with labels alone."""
    from rich.console import Console

    from berds.registry import parse_options
    from berds.trust.ppi import plan_labels, plan_table, rates_note

    rows = plan_labels(run, require_judge(judge), labels, target_width=target_width, ks=parse_ks(k),
                       cache_path=cache, title_position=title_position, population=population,
                       judge_options=parse_options(judge_option), validation=validation)
    console = Console()
    console.print(plan_table(rows, target_width=target_width))
    note = rates_note(rows)  # (a plan from error rates: which rates, their intervals, on how many pairs)
    if note:
        console.print(note, highlight=False, markup=False)
    for r in rows:  # a row of dashes says why
        if r.pilot < 2 and r.source == "pilot":
            print(f"note: {r.metric}: {r.pilot} question(s) of the pilot are labelled whole at this k (every pair "
                  "of the top k): 2 are needed to plan from — label deeper (`berds label sample --k`)",
                  file=sys.stderr)
