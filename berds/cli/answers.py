"""``berds answers eval``: DebateQA's answer metrics (P.D., D.A.) over answers files."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from berds.io import print_note
from berds.cli.options import cache_file_callback, out_folder_callback

answers_app = typer.Typer(help="Evaluate answers to contentious questions (DebateQA's P.D. and D.A.).",
                          no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(answers_app, name="answers", rich_help_panel="Judge and evaluate", short_help="Evaluate answers to contentious questions.")


@answers_app.command("eval")
def answers_eval(
    answers: List[Path] = typer.Argument(..., help='Answers jsonl files: {"id", "answer"} (+ optional "question") per line.'),
    model: str = typer.Option(..., "--model", "-m", help="Evaluator LM as BACKEND:MODEL (transformers:PATH, openai:NAME, vllm:NAME)."),
    metric: List[str] = typer.Option(["pd"], "--metric", help="pd (perspective diversity, needs gold perspectives) | da (dispute awareness); repeatable."),
    questions: Optional[str] = typer.Option(None, "--questions", help="Question set (path, demo, a BERDS set, delphi); P.D. needs gold perspectives."),
    split: str = typer.Option("test", "--split", help="Split of a named question set."),
    model_option: List[str] = typer.Option([], "--model-option", "-o", help="key=value passed to the LLM backend (repeatable), e.g. base_url=http://127.0.0.1:8000/v1."),
    pd_prompt: str = typer.Option("pd1", "--pd-prompt", help="DebateQA Table 12 wrapper: pd1 ('{response} Please restate.', eq. 1) ... pd5."),
    template: str = typer.Option("auto", "--template", help="chat (the evaluator's chat template, eq. 1) | raw (plain text; openai backend, models without a template) | auto (chat when the model has a template, else raw)."),
    da_prompt: str = typer.Option("table13", "--da-prompt", help="table13 (the paper's p_D.A.) | zero-shot."),
    da_parse: str = typer.Option("strict", "--da-parse", help="strict (reply must be 0 or 1) | first-digit | every-reply-aware (reproduces the published script's pitfall)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Pairs per backend call (each batch is cached)."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_folder_callback, help="Output folder (default: ANSWERS.answers-eval/ beside each file)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Score cache (default: $BERDS_HOME/answers.sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the cache."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Score answers with DebateQA's P.D. (lower is better) and D.A. (higher is better)."""
    from rich.console import Console

    from berds.answers.evaluation import (
        AnswerEvalOptions,
        answers_output_dir,
        answers_table,
        evaluate_answers,
        write_answer_outputs,
    )
    from berds.registry import parse_options

    options = AnswerEvalOptions(metrics=tuple(metric), pd_prompt=pd_prompt, template=template, da_prompt=da_prompt,
                                da_parse=da_parse, batch_size=batch_size, cache_path=cache, use_cache=not no_cache,
                                progress=not quiet)
    targets = [answers_output_dir(path, out, len(answers)) for path in answers]
    if len(set(targets)) != len(targets):
        from berds.errors import BerdsError

        raise BerdsError("two answers files would write to the same output folder "
                         f"({', '.join(str(t) for t in targets if targets.count(t) > 1)}) — give them different names")
    # the model loads inside, after every answers file is read: a typo'd or broken file fails in seconds
    results = evaluate_answers(answers, model, questions=questions, split=split, options=options,
                               llm_options=parse_options(model_option))
    console = Console()
    console.print(answers_table(results))
    for r in results:
        files = write_answer_outputs(r, answers_output_dir(r.path, out, len(results)))
        work = ", ".join(f"{name}: {s.pairs} pairs, {s.cached} cached, {s.computed} computed" for name, s in r.stats.items())
        console.print(f"{r.path}: {work} → {files['metrics']}", highlight=False, markup=False)
    fit = results[0].settings.get("length_adjustment") if results else None
    if fit and fit.get("pearson_log_length") is not None:
        console.print(f"P.D./n vs answer length (log-log, {fit['n']} answers): Pearson r = {_signed(fit['pearson_log_length'])}, "
                      f"slope {fit['slope']:+.3f}; length-adjusted r = {_signed(fit['pearson_log_length_adjusted'])}",
                      highlight=False, markup=False)
    for r in results:
        if r.summary.get("truncated"):
            print_note(f"{r.path}: {r.summary['truncated']} of {r.summary['answers']} answers were "
                       "too long for the evaluator's context and were cut from the left before scoring P.D. "
                       "('truncated' in per_answer.jsonl)", console=console)
        known = r.settings.get("questions", {}).get("count")
        if known and r.summary["answers"] < known:
            print_note(f"{r.path} answers {r.summary['answers']} of the {known} questions of "
                       f"{r.settings['questions']['source'] or 'the question set'}: its means are over those only",
                       console=console)
    answered = [{row["id"] for row in r.per_answer} for r in results]
    if len(results) > 1 and any(ids != answered[0] for ids in answered):
        common = set.intersection(*answered)
        print_note(f"the files do not answer the same questions ({len(common)} in common): "
                   "their means are over different questions and do not compare", console=console)
    if any(r.summary.get("da_unparsed") for r in results):
        console.print("[yellow]some D.A. replies were neither 0 nor 1 and count as 0 (eq. 3); see da_reply in "
                      "per_answer.jsonl, or --da-parse first-digit[/]")


def _signed(value: float) -> str:
    """``+0.12``; a correlation that is zero up to rounding prints ``+0.00``, not ``-0.00``."""
    return f"{round(value, 2) + 0.0:+.2f}"
