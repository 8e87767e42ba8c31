"""``berds questions stats``: the study's Table 1 (dataset statistics) for any question sets."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from berds.cli.options import out_file_callback

questions_app = typer.Typer(help="Question sets: statistics.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(questions_app, name="questions", rich_help_panel="Corpora and indexes", short_help="Question sets: Table 1's statistics.")


@questions_app.command("stats", short_help="Table 1: questions, perspectives per question, words.")
def questions_stats_command(
    sources: List[str] = typer.Argument(..., help="Question sets: arguana, kialo, opinionqa, debateqa, demo, or jsonl paths."),
    split: List[str] = typer.Option(["dev", "test"], "--split", help="Splits of the named sets to count (repeatable)."),
    tokenizer: str = typer.Option("nltk", "--tokenizer", help="Words per perspective: nltk (word_tokenize, the study's; needs NLTK's punkt_tab data) or nltk-line (no sentence split, no data)."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Also write the rows as JSON here."),
) -> None:
    """The study's Table 1: questions (per split), mean perspectives per question, mean words per perspective."""
    from rich.console import Console
    from rich.table import Table

    from berds.io import write_json
    from berds.questions import BERDS_SETS, load_questions, question_set_statistics

    sets = {}
    for source in sources:
        named = source in BERDS_SETS or source == "debateqa"
        sets[source] = ({s: load_questions(source, s) for s in split} if named
                        else {"all": load_questions(source)})  # (a file has no splits)
    rows = question_set_statistics(sets, tokenizer=tokenizer)
    shown = [s for s in split if any(s in r["splits"] for r in rows)]
    table = Table(title=f"Question sets (the study's Table 1; words by {tokenizer})")
    table.add_column("set", overflow="fold")
    table.add_column("questions" + (f" ({'/'.join(shown)})" if shown else ""), justify="right")
    table.add_column("# p", justify="right")
    table.add_column("|p| words", justify="right")
    for r in rows:
        parts = "/".join(str(r["splits"].get(s, "-")) for s in shown)
        table.add_row(r["set"], f"{r['questions']}" + (f" ({parts})" if shown else ""), f"{r['perspectives']:.2f}",
                      f"{r['words']:.2f}")
    Console().print(table)
    if out is not None:
        write_json(out, {"tokenizer": tokenizer, "rows": rows})
        Console().print(f"→ {out}", highlight=False, markup=False)
