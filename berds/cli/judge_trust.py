"""``berds judge validate | audit | calibrate | stance-correct``: can the perspective judge be trusted?

Each command parses options and calls one public function of ``berds.evaluate`` (validate, audit,
calibration, analyses.stance_corrected), then prints rich tables. ``--out FILE`` writes the full report as
JSON. Judges are named as for ``berds eval`` (catalogue name, ``BACKEND:MODEL``, ``debate:NAME``,
``calibrated:NAME``); ``--judge-option key=value`` goes to every judge named.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from berds.io import print_note
from berds.cli.options import cache_file_callback, out_file_callback, out_folder_callback

judge_app = typer.Typer(help="Trust the judge: validity against human labels, bias audit, calibration.",
                        no_args_is_help=True)

LABELS_HELP = "Labelled tsv: question, id, document, perspective, label (0/1) [, stance]."


def register(app: typer.Typer) -> None:
    app.add_typer(judge_app, name="judge", rich_help_panel="Judge and evaluate", short_help="Trust the judge: validate, audit, calibrate.")


def _write_json(out: Optional[Path], payload: dict) -> None:
    if out is not None:
        from berds.io import finite_json, write_json

        write_json(out, finite_json(payload))  # (κ of a one-class file is NaN: written as null)


def _note_repeats(labels: Path, console) -> None:
    """Say when the labelled file lists a pair twice (or labels it both ways); the measures count every row."""
    from berds.trust.labels import read_labelled_pairs

    note = read_labelled_pairs(labels).repeats_note()
    if note:
        console.print(note, style="yellow", highlight=False, markup=False)


def _options(items: List[str]) -> dict:
    from berds.registry import parse_options

    return parse_options(items)


@judge_app.command("validate", short_help="Agreement with human labels, with intervals.")
def validate_command(
    labels: Path = typer.Option(..., "--labels", "-l", help=LABELS_HELP),
    judge: List[str] = typer.Option([], "--judge", "-j", help="Judge to score (repeat for several, side by side)."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for every judge (repeatable)."),
    column: List[str] = typer.Option([], "--column", help="Extra 0/1 column to score like a judge, e.g. a second annotator."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Bootstrap samples for the 95% intervals (0 = none)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Random seed of the bootstrap resampling."),
    resample: str = typer.Option("pairs", "--resample", help="What the bootstrap draws: pairs, or questions (whole "
                                 "questions with all their pairs: honest when pairs of one question are correlated)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file (default: $BERDS_HOME/judgements.sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Judge everything without reading or writing the cache."),
    markdown: bool = typer.Option(False, "--markdown", help="Also print the table as markdown."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the full report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Accuracy, precision, recall, F1, Yes share and Cohen's κ (bootstrap 95% intervals) of each judge
    against human labels; agreement and McNemar between judges."""
    from rich.console import Console

    from berds.cli.options import print_judge_warning
    from berds.trust.validate import (comparison_table, debate_table, in_sample_notes, markdown_table, one_answer_notes,
                                      one_class_note, undefined_resample_notes, validate_files, validity_table)

    report = validate_files(str(labels), judge, judge_options=_options(judge_option), annotators=column,
                            cache_path=str(cache) if cache else None, use_cache=not no_cache, n_boot=bootstrap,
                            seed=seed, resample=resample, progress=not quiet)
    console = Console()
    console.print(validity_table(report))
    if report.comparisons:
        console.print(comparison_table(report))
    table = debate_table(report)
    if table is not None:
        console.print(table)
    if markdown:
        console.print(markdown_table(report), highlight=False, markup=False, soft_wrap=True)
    _write_json(out, report.to_json())
    _note_repeats(labels, console)
    for note in [one_class_note(report), *one_answer_notes(report), *in_sample_notes(report),
                 *undefined_resample_notes(report)]:
        if note:
            console.print(note, style="yellow", highlight=False, markup=False)
    annotators = {f"column:{c}" for c in column}  # (a person's labels, whatever the column is called: no warning)
    for judge_id in dict.fromkeys(row.judge_id for row in report.judges if row.name not in annotators):
        print_judge_warning(judge_id, unknown=False)  # (this command is the measurement the note would ask for)
    console.print(f"{report.n} labelled pairs from {labels} ({100 * report.gold_positive_share:.1f}% positive), "
                  f"{len(report.judges)} judge(s)" + (f" → {out}" if out else ""), highlight=False, markup=False)


@judge_app.command("audit", short_help="Re-judge under controlled changes (bias audit).")
def audit_command(
    labels: Path = typer.Option(..., "--labels", "-l", help=LABELS_HELP),
    judge: str = typer.Option(..., "--judge", "-j", help="The judge to audit."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    variant: List[str] = typer.Option([], "--variant", help="Variants to run (default: all). "
                                      "statement-first, labels-no-yes, labels-true-false, labels-a-b, sentence-order, negation."),
    run: List[Path] = typer.Option([], "--run", help="Run folder/jsonl whose MRecall@k and ranking to re-measure (repeatable)."),
    k: int = typer.Option(5, "--k", help="Cut-off for the run effects (MRecall@k)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level of the McNemar/Fisher tests."),
    negation_tolerance: float = typer.Option(0.5, "--negation-tolerance",
                                             help="Flag the judge when more than this share of its true positives stay Yes after negation."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Judge everything without reading or writing the cache."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the full report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Re-judge the labelled pairs under controlled changes (prompt order, label words, negation, sentence
    order) and compare supporting vs opposing perspectives: flips, McNemar, Δaccuracy/ΔF1, ΔMRecall@k."""
    from rich.console import Console

    from berds.cli.options import print_judge_warning
    from berds.trust.audit import audit_files, run_table, stance_table, variant_table

    report = audit_files(str(labels), judge, judge_options=_options(judge_option), variants=variant or None,
                         runs=[str(r) for r in run], k=k, alpha=alpha, negation_tolerance=negation_tolerance,
                         cache_path=str(cache) if cache else None, use_cache=not no_cache, progress=not quiet)
    console = Console()
    console.print(variant_table(report))
    for table in (stance_table(report), run_table(report)):
        if table is not None:
            console.print(table)
    if report.stance is None:
        console.print("stance: no pair has a known stance — add a 'stance' column (support/oppose) to compare "
                      "supporting and opposing perspectives", highlight=False)
    _write_json(out, report.to_json())
    _note_repeats(labels, console)
    if report.tuned_on:
        t = report.tuned_on
        console.print(f"note: the judge's threshold was chosen on {t['dev']}, which holds {t['pairs_in_dev']} of these "
                      f"{report.n} pairs: its accuracy, F1 and stance error rates here are in-sample", style="yellow",
                      highlight=False, markup=False)
    print_judge_warning(report.judge_id)
    found = report.biases_found
    console.print(("biases found: " + ", ".join(found)) if found else "no bias found at this significance level",
                  highlight=False)


@judge_app.command("calibrate", short_help="Reliability of P(Yes); choose a threshold.")
def calibrate_command(
    labels: Path = typer.Option(..., "--labels", "-l", help="Labelled dev tsv to calibrate on."),
    judge: str = typer.Option(..., "--judge", "-j", help="The judge to calibrate (it must report P(Yes))."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    objective: str = typer.Option("f1", "--objective", help="What the threshold maximises: f1, accuracy, youden."),
    bins: int = typer.Option(10, "--bins", min=1, help="Reliability bins."),
    binning: str = typer.Option("uniform", "--binning", help="uniform (equal width) or quantile (equal count)."),
    holdout: Optional[Path] = typer.Option(None, "--holdout", help="Another labelled tsv to score the chosen threshold on."),
    store: Optional[Path] = typer.Option(None, "--store", help="Calibration file (default: $BERDS_HOME/calibration.json)."),
    no_save: bool = typer.Option(False, "--no-save", help="Measure only; store nothing."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Judge everything without reading or writing the cache."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the full result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Reliability table and ECE of P(Yes); choose the threshold on a labelled dev file and store it under
    the judge id, so `--judge calibrated:NAME` uses it."""
    from rich.console import Console

    from berds.cli.options import print_judge_warning
    from berds.trust.calibration import calibrate_file, reliability_rich_table, threshold_rich_table

    result = calibrate_file(str(labels), judge, judge_options=_options(judge_option), objective=objective, n_bins=bins,
                            strategy=binning, holdout_path=str(holdout) if holdout else None,
                            store_path=str(store) if store else None, save=not no_save,
                            cache_path=str(cache) if cache else None, use_cache=not no_cache, progress=not quiet)
    console = Console()
    console.print(reliability_rich_table(result))
    console.print(threshold_rich_table(result))
    _write_json(out, result.to_json())
    _note_repeats(labels, console)
    print_judge_warning(result.judge_id)
    where = f"stored in {result.store_path} — use --judge calibrated:{judge}" if result.store_path else "not stored (--no-save)"
    console.print(f"threshold {result.threshold.threshold:.4f} for {result.judge_id}: {where}", highlight=False, markup=False)


@judge_app.command("stance-correct", short_help="Sycophancy Δ corrected for judge errors.")
def stance_correct_command(
    sycophancy: Path = typer.Option(..., "--sycophancy", help="Result JSON written by `berds analyze sycophancy`."),
    labels: Path = typer.Option(..., "--labels", "-l", help=LABELS_HELP + " Stances from the 'stance' column or the negation-cue rule."),
    judge: str = typer.Option(..., "--judge", "-j", help="The judge that produced the sycophancy result."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Bootstrap samples over the labelled pairs."),
    seed: int = typer.Option(0, "--seed", min=0, help="Random seed of the bootstrap resampling."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the corrected result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Sycophancy Δ corrected for the judge's error rates on supporting vs opposing perspectives."""
    from rich.console import Console
    from rich.table import Table

    from berds.cli.options import print_judge_warning
    from berds.trust.stance_corrected import correct_sycophancy_file

    result = correct_sycophancy_file(str(sycophancy), str(labels), judge, judge_options=_options(judge_option),
                                     cache_path=str(cache) if cache else None, n_boot=bootstrap, seed=seed,
                                     progress=not quiet)
    title, header, body = result.table()
    table = Table(title=title)
    for col in header:
        table.add_column(col, justify="left" if col in ("setting", "query") else "right")
    for row in body:
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print(result.rates_note(), highlight=False, markup=False)
    _note_repeats(labels, console)
    print_judge_warning(result.judge_id)  # (the corrected Δ rests on this judge's answers)
    _write_json(out, {"analysis": result.KIND, "version": 1, **result.to_json()})


@judge_app.command("train", short_help="Fine-tune a LoRA perspective detector (the study's way).")
def train_command(
    labels: Path = typer.Option(..., "--labels", "-l", help=LABELS_HELP),
    base: str = typer.Option(..., "--base", help="Base model: hub name or local folder (the study: "
                             "mistralai/Mistral-7B-Instruct-v0.2)."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Folder for the adapter; load it as --judge transformers:OUT."),
    from_cache: Optional[str] = typer.Option(None, "--from-cache", help="Train on this judge id's cached verdicts "
                                             "of the pairs instead of the file's labels (distillation)."),
    from_cache_prompt: Optional[str] = typer.Option(None, "--from-cache-prompt", help="Its prompt version, where "
                                                    "the cache holds several."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file "
                                         "for --from-cache (default: $BERDS_HOME/judgements.sqlite)."),
    epochs: float = typer.Option(2.0, "--epochs", help="Passes over the training pairs (study: 2)."),
    learning_rate: float = typer.Option(1e-4, "--learning-rate", help="AdamW peak learning rate (study: 1e-4)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Examples per optimizer step."),
    lora_r: int = typer.Option(64, "--lora-r", min=1, help="LoRA rank (study: 64)."),
    lora_alpha: int = typer.Option(16, "--lora-alpha", min=1, help="LoRA alpha (study: 16)."),
    dev_share: float = typer.Option(0.2, "--dev-share", help="Share of questions held out for validation."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Stop after this many steps."),
    max_length: int = typer.Option(2048, "--max-length", min=8, help="Longest example in tokens (longer: error)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the split, the shuffling and the LoRA init."),
    device: Optional[str] = typer.Option(None, "--device", help="cuda or cpu (default: cuda when available)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (bf16 on GPU, fp32 on CPU), bfloat16, float32."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing", help="Keep fewer activations and "
                                                "recompute them in the backward pass: far less GPU memory for about "
                                                "one more forward pass of time (long examples, smaller cards)."),
    checkpoint_seconds: float = typer.Option(600.0, "--checkpoint-seconds", min=0, help="Save the training state "
                                             "this often (and on Ctrl-C or SIGTERM) in .OUT.checkpoint beside "
                                             "--out; the same command run again resumes from it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Fine-tune a LoRA adapter on BASE to answer the study's judge prompt with Yes/No, on human labels or
    on another judge's cached verdicts; hold out whole questions and report F1 and accuracy on them."""
    from rich.console import Console

    from berds.trust.training import TrainSettings, result_table, train_judge

    settings = TrainSettings(epochs=epochs, learning_rate=learning_rate, batch_size=batch_size, lora_r=lora_r,
                             lora_alpha=lora_alpha, dev_share=dev_share, max_steps=max_steps, max_length=max_length,
                             seed=seed, device=device, dtype=dtype, gradient_checkpointing=gradient_checkpointing,
                             checkpoint_seconds=checkpoint_seconds)
    result = train_judge(str(labels), base, out, settings=settings, from_cache=from_cache,
                         from_cache_prompt=from_cache_prompt, cache_path=str(cache) if cache else None,
                         overwrite=overwrite, progress=not quiet)
    console = Console()
    console.print(result_table(result))
    # Not the generic "berds has no held-out figure" line: the table above has one, but from a few questions of
    # the training file (and, distilled, scored against the teacher), so say what is still to measure.
    against = "the teacher's verdicts" if from_cache else "the file's labels"
    print_note(
        f"the held-out F1 above comes from {result.dev_questions} question"
        f"{'' if result.dev_questions == 1 else 's'} of the training file, scored against {against}; before "
        f"reporting this judge's numbers, validate it on human-labelled pairs it never saw: `berds judge validate "
        f"--labels OTHER.tsv --judge transformers:{out}`", style="bold yellow")
