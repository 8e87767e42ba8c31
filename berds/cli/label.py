"""``berds label sample | serve | status | export | import``: human labels for the judge's pairs, in the browser.

Each command parses options and calls one function of ``berds.trust.labelling`` (docs/labelling.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from berds.cli.options import out_file_callback, out_folder_callback

label_app = typer.Typer(help="Human labels in the browser: sample pairs of evaluated runs, label them, export.",
                        no_args_is_help=True)

TASK_HELP = "A labelling task folder written by `berds label sample`."
CONFLICTS_HELP = ("What to do with a pair labelled both yes and no: first (the earlier label), majority (a tie drops "
                  "it) or drop. Without it such pairs are listed and nothing is written.")


def register(app: typer.Typer) -> None:
    app.add_typer(label_app, name="label", rich_help_panel="Judge and evaluate", short_help="Human labels in the browser: sample, serve, export.")
    from berds.cli import label_plan  # `berds label plan`: how many questions to label (the estimates' side)

    label_plan.register(label_app)


@label_app.command("sample", short_help="Draw whole questions of evaluated runs to label.")
def sample_command(
    evaluations: List[Path] = typer.Argument(..., help="Evaluated runs: run folders `berds eval` judged, or their "
                                             "evaluation folders (NAME.eval/, RUN/eval/JUDGE)."),
    questions: int = typer.Option(..., "--questions", "-n", min=1, help="How many questions to draw."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random draw (recorded in the manifest)."),
    k: int = typer.Option(5, "--k", min=1, help="Label every pair of each question's top k passages."),
    title_position: str = typer.Option("after", "--title-position", help="The passage text as the judge saw it: "
                                       "text+title (after, the study's and berds eval's default), before or none."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="The task folder to write (new)."),
) -> None:
    """Draw questions uniformly at random (seeded; the same questions from every run) and write every
    (perspective, passage) pair of their top k, as the judge saw it, to a task folder."""
    from rich.console import Console

    from berds.trust.labelling import sample_task

    task, summary = sample_task(evaluations, questions=questions, seed=seed, k=k, out=out,
                                title_position=title_position)
    console = Console()
    for name, n in summary["excluded"].items():
        if n:
            console.print(f"note: {n} question(s) of {name} are not in every run and cannot be drawn "
                          f"(listed in {out / 'manifest.json'})", style="yellow", highlight=False, markup=False)
    shared = f" ({summary['shared']} shared by several runs)" if len(evaluations) > 1 else ""
    console.print(f"drew {summary['drawn']} of {summary['population']} questions (seed {seed}): {summary['pairs']} "
                  f"pairs from the top {k}{shared}, judge {task.judge_id} → {out}", highlight=False, markup=False)
    console.print(f"next: berds label serve {out}", highlight=False, markup=False)


@label_app.command("serve", short_help="Open the labelling page (blocks until Ctrl-C).")
def serve_command(
    task: Path = typer.Argument(..., help=TASK_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (the page has no login: keep it "
                             "local unless the network is yours)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port; 0 picks a free one."),
) -> None:
    """Serve the labelling page; labels go into TASK/labels.sqlite as they are given."""
    from berds.trust.labelling import open_task
    from berds.trust.labelling.server import LabelServer

    server = LabelServer(open_task(task), host=host, port=port)
    print(f"berds label: {len(server.task.pairs)} pairs of {task} at {server.url} (Ctrl-C to stop; labels are saved "
          "as they are given)", flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {host}: anyone who can reach it can label", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    from berds.trust.labelling import task_status

    status = task_status(server.task)
    done = ", ".join(f"{who} {c['labelled']}" for who, c in status.per_annotator.items()) or "none yet"
    print(f"stopped. Labels in {server.task.db_path} (labelled per annotator: {done}); {len(status.whole_questions)} "
          f"of {status.questions} questions labelled whole — berds label status {task}", flush=True)


def _print_status(status, console) -> None:
    from rich.table import Table

    if not status.per_annotator:
        console.print(f"no labels yet: {status.pairs} pairs of {status.questions} questions wait (berds label serve "
                      "TASK opens the page)", highlight=False, markup=False)
        return
    table = Table(title=f"labels: {status.pairs} pairs of {status.questions} questions")
    for name in ("annotator", "yes", "no", "skipped", "labelled"):
        table.add_column(name, justify="left" if name == "annotator" else "right", overflow="fold")
    for who, c in status.per_annotator.items():
        table.add_row(who, str(c["yes"]), str(c["no"]), str(c["skip"]), f"{c['labelled']} of {status.pairs}")
    console.print(table)
    if status.agreements:
        agree = Table(title="agreement between annotators (pairs both labelled)")
        for name in ("annotators", "n", "questions", "agree %", "κ [95% interval]"):
            agree.add_column(name, justify="left" if name == "annotators" else "right", overflow="fold")
        for a in status.agreements:
            lo, hi = a.interval
            kappa = "-" if a.kappa != a.kappa else f"{a.kappa:.2f}"
            interval = "" if lo != lo else f" [{lo:.2f}, {hi:.2f}]"
            agree.add_row(f"{a.first} / {a.second}", str(a.n), str(a.questions), f"{100 * a.agreement:.1f}",
                          kappa + interval)
        console.print(agree)
        console.print("[95% interval]: percentile bootstrap over questions, 1000 samples; none with one question",
                      style="dim", highlight=False)
    console.print(f"{status.labelled_pairs} of {status.pairs} pairs have a label; {len(status.whole_questions)} of "
                  f"{status.questions} questions are labelled whole (every pair of the top k), "
                  f"{len(status.partial_questions)} partly", highlight=False, markup=False)
    if status.conflicts:
        console.print(f"{len(status.conflicts)} pair(s) were labelled both yes and no (export needs --conflicts)",
                      style="yellow", highlight=False, markup=False)


@label_app.command("status", short_help="Progress per annotator, whole questions, κ.")
def status_command(
    task: Path = typer.Argument(..., help=TASK_HELP),
    conflicts: Optional[str] = typer.Option(None, "--conflicts", help="Count conflicting pairs as export would "
                                            "with this policy (first, majority, drop)."),
) -> None:
    """How many pairs each annotator labelled, how many questions are labelled whole, and Cohen's κ
    between annotators on the pairs both labelled (with n and a 95% interval)."""
    from rich.console import Console

    from berds.trust.labelling import open_task, task_status
    from berds.trust.labelling.export import CONFLICT_POLICIES

    if conflicts is not None and conflicts not in CONFLICT_POLICIES:
        raise typer.BadParameter(f"use one of {', '.join(CONFLICT_POLICIES)}", param_hint="--conflicts")
    _print_status(task_status(open_task(task), conflicts=conflicts), Console())


@label_app.command("export", short_help="Write the labels: TSV for judge validate, or Label Studio JSON.")
def export_command(
    task: Path = typer.Argument(..., help=TASK_HELP),
    out: Path = typer.Option(..., "--out", callback=out_file_callback, help="The file to write (.tsv, or .json "
                             "for --format label-studio)."),
    format: str = typer.Option("tsv", "--format", help="tsv (the labelled-pairs file `berds judge validate` and "
                               "`berds eval --labels` read) or label-studio (tasks with annotations, and a "
                               "labelling config OUT.config.xml)."),
    conflicts: Optional[str] = typer.Option(None, "--conflicts", help=CONFLICTS_HELP),
    judge_predictions: bool = typer.Option(False, "--judge-predictions", help="With --format label-studio: the "
                                           "judge's verdicts as predictions (Label Studio pre-fills them)."),
) -> None:
    """Write one label per pair (pairs skipped by everyone are left out) and say how many questions are
    labelled whole."""
    from rich.console import Console

    from berds.trust.labelling import export_label_studio, export_tsv, open_task

    console = Console()
    opened = open_task(task)
    if format == "label-studio":
        n_tasks, n_annotations, config = export_label_studio(opened, out, judge_predictions=judge_predictions)
        console.print(f"{n_tasks} Label Studio tasks with {n_annotations} annotations → {out}; labelling config → "
                      f"{config}", highlight=False, markup=False)
        return
    if format != "tsv":
        raise typer.BadParameter("use tsv or label-studio", param_hint="--format")
    if judge_predictions:
        raise typer.BadParameter("goes with --format label-studio (a TSV carries the verdict as judge_label)",
                                 param_hint="--judge-predictions")
    status = export_tsv(opened, out, conflicts=conflicts)
    _print_status(status, console)
    console.print(f"{status.labelled_pairs} labelled pairs → {out}", highlight=False, markup=False)


@label_app.command("import", short_help="Read labels back: Label Studio's JSON export, or a labelled TSV.")
def import_command(
    task: Path = typer.Argument(..., help=TASK_HELP),
    file: Path = typer.Argument(..., help="Label Studio's JSON export of tasks made by `berds label export --format "
                                "label-studio` (.json), or a labelled-pairs TSV of this task's pairs (.tsv)."),
    annotator: Optional[str] = typer.Option(None, "--annotator", help="Whose labels a TSV holds (Label Studio "
                                            "files name their annotators)."),
    replace: bool = typer.Option(False, "--replace", help="Take the file's label where an annotator's stored "
                                 "label differs (refused otherwise)."),
) -> None:
    """Add the labels of a file to the task's labels (a file from another task, run or judge is refused)."""
    from rich.console import Console

    from berds.trust.labelling import import_label_studio, import_tsv, open_task

    opened = open_task(task)
    if file.suffix.lower() == ".json":
        counts = import_label_studio(opened, file, replace=replace)
    else:
        if not annotator:
            raise typer.BadParameter("a labelled TSV needs --annotator NAME (whose labels they are)",
                                     param_hint="--annotator")
        counts = import_tsv(opened, file, annotator=annotator, replace=replace)
    left_out = (f"; {counts['cancelled']} cancelled and {counts['empty']} empty annotations left out"
                if "cancelled" in counts else "")
    Console().print(f"{counts['added']} labels added, {counts['replaced']} replaced, {counts['same']} already "
                    f"stored{left_out}", highlight=False, markup=False)
