"""``berds tune mmr``, ``berds analyze ...`` and ``berds report`` (``berds rerank`` is in ``rerank.py``).

Each command parses its options and calls one public function of ``berds.rerank`` /
``berds.evaluate.analyses`` / ``berds.evaluate.report``, then prints a summary table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from berds.io import print_note
from berds.cli.options import (ALLOW_SHORT_HELP, ALLOW_UNPARSED_HELP, JUDGE_REQUIRED_HELP, K_HELP, cache_file_callback, check_run_args,
                               floats_callback, ks_callback, out_file_callback, out_folder_callback, parse_floats, parse_ks,
                               print_judge_warning, require_judge)
tune_app = typer.Typer(help="Tune reranking parameters on a dev split with a judge.", no_args_is_help=True)
analyze_app = typer.Typer(help="The study's analyses: stance, leaning, sycophancy, coverage, docs needed.",
                          no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(tune_app, name="tune", rich_help_panel="Retrieve and rerank")
    app.add_typer(analyze_app, name="analyze", rich_help_panel="Analyses and reports", short_help="The study's analyses: stance, leaning, sycophancy.")
    app.command("report", rich_help_panel="Analyses and reports", short_help="Paper-style tables (markdown, CSV) and figures.")(report_command)


# ------------------------------------------------------------------------------------------ helpers

JUDGE_HELP = "Judge name (berds judges list), BACKEND:MODEL, or module:attr."


def _console() -> Any:
    from rich.console import Console

    return Console()


def _print_table(title: str, header: list[str], rows: list[list[str]], *, values: str = "right") -> None:
    """A summary table; ``values="left"`` for a key-value table whose values are text (numbers go right)."""
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    table = Table(title=escape(title))
    # no header word is cut ('supportin' / 'g only %' beside a long run name): each other column keeps its longest
    # word or cell, and the first column (run names) folds into what is left
    widths = [max([len(w) for w in str(col).split()] + [len(str(r[i])) for r in rows if i < len(r)] + [1])
              for i, col in enumerate(header)]
    room = console.width - sum(widths[1:]) - 3 * len(header) - 1
    natural = sum(max([len(str(col))] + [len(str(r[i])) for r in rows if i < len(r)])
                  for i, col in enumerate(header)) + 3 * len(header) + 1
    # squeezed whenever rich would have to shrink whole headers (its own shrinking cuts words at any name
    # length, not only beside a long one); a long value elsewhere, e.g. a path, leaves under 8: rich folds it
    squeeze = 8 <= room and natural > console.width
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else values, overflow="fold",
                         width=widths[i] if squeeze and i else None, max_width=room if squeeze and not i else None)
    for row in rows:  # (escaped: run names, paths and values are shown as they are, never read as rich markup)
        table.add_row(*(escape(str(cell)) for cell in row))
    console.print(table)


def _check_run_path(run: Path) -> None:
    """A mistyped run path is named before any model is looked for."""
    if not Path(run).exists():
        from berds.errors import InputError

        raise InputError("no such run folder or file", path=run)


def _encoder_and_cache(model: str, pooling: str, device: Optional[str], batch_size: int,
                       embedding_cache: Optional[Path], no_embedding_cache: bool) -> tuple[Any, Any]:
    from berds.rerank.embeddings import EmbeddingCache, load_encoder

    encoder = load_encoder(model, pooling=pooling, device=device, batch_size=batch_size)
    cache = None if no_embedding_cache else EmbeddingCache(embedding_cache)
    return encoder, cache


def _print_written(paths: dict[str, Path]) -> None:
    for key, path in paths.items():
        _console().print(f"  {key}: {path}", highlight=False, markup=False)


MODEL_HELP = "sentence-transformers model for Sim2 (hub name or local folder); the study: WhereIsAI/UAE-Large-V1."
POOLING_HELP = "Pooling of the embedding model: cls (the study), mean, max, or model (its own config)."
NORM_HELP = ("Sim1 normalisation: question-max (the study's code: score / the question's top score), dataset-max "
             "(the paper: score / the run's top score), minmax, rank, none.")


# ----------------------------------------------------------------------------------------------- tune


@tune_app.command("mmr", short_help="Pick MMR's λ on a dev split with a judge.")
def tune_mmr_command(
    run: Path = typer.Argument(..., help="A dev-split run (folder or BERDS jsonl)."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Folder for the run reranked with the chosen λ, and the λ table."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    lambdas: List[str] = typer.Option(["0.5,0.75,0.9,0.95,0.99"], "--lambdas", metavar="λ", callback=floats_callback,
                                      help="λ grid: comma list or repeated (the study's by default)."),
    k: List[str] = typer.Option(["5", "10"], "--k", metavar="K", callback=ks_callback, help=K_HELP),
    select: Optional[str] = typer.Option(None, "--select", help="Metric that picks λ (default mrecall@<smallest k>)."),
    depth: int = typer.Option(100, "--depth", help="Rerank the top DEPTH passages."),
    normalisation: str = typer.Option("question-max", "--normalisation", help=NORM_HELP),
    sim1_constant: Optional[float] = typer.Option(None, "--sim1-constant", help="question-max: divisor for questions whose top score is <= 0 (default: the run's top score)."),
    first: str = typer.Option("rank1", "--first", help="First pick: rank1 (the study's code) or objective (argmax λ·Sim1)."),
    model: str = typer.Option("WhereIsAI/UAE-Large-V1", "--model", help=MODEL_HELP),
    pooling: str = typer.Option("cls", "--pooling", help=POOLING_HELP),
    embed_text: str = typer.Option("text-title", "--embed-text", help="text-title (the study: text + ' ' + title), text or title-text."),
    device: Optional[str] = typer.Option(None, "--device", help="torch device for the embedding model (cpu, cuda)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Embedding batch size."),
    embedding_cache: Optional[Path] = typer.Option(None, "--embedding-cache", help="Embedding cache file (default: $BERDS_HOME/embeddings.sqlite)."),
    no_embedding_cache: bool = typer.Option(False, "--no-embedding-cache", help="Embed without reading or writing the cache."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file (default: $BERDS_HOME/judgements.sqlite)."),
    allow_short: bool = typer.Option(False, "--allow-short", help=ALLOW_SHORT_HELP),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run already in --out."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Pick MMR's λ on the dev split: rerank with each λ, judge, and keep the best (written to the manifest)."""
    judge = require_judge(judge)
    from berds.registry import parse_options
    from berds.studies.tuning import tune_path, tuning_table

    _check_run_path(run)

    encoder, emb_cache = _encoder_and_cache(model, pooling, device, batch_size, embedding_cache, no_embedding_cache)
    result, paths = tune_path(run, out, judge, judge_options=parse_options(judge_option), lambdas=parse_floats(lambdas, option="--lambdas"),
                              ks=parse_ks(k), select=select, encoder=encoder, embedding_cache=emb_cache, cache_path=cache,
                              depth=depth, normalisation=normalisation, embed_text=embed_text, allow_short=allow_short,
                              first=first, sim1_constant=sim1_constant, allow_unparsed=allow_unparsed,
                              overwrite=overwrite, progress=not quiet)
    header, rows = tuning_table(result)
    from berds.judges.validation import short_judge_name

    _print_table(f"MMR λ tuning on {run.name} by {result.select}, in % — judge: {short_judge_name(result.judge_id)}",
                 header, rows)
    print_judge_warning(result.judge_id)
    _console().print(f"chosen λ = {result.chosen:g}", highlight=False, markup=False)
    if result.tied:
        print_note(f"every λ scored the same {result.select}: the choice is the tie rule's "
                   "(the larger λ), not the data's", console=_console())
    _print_written(paths)


# -------------------------------------------------------------------------------------------- analyze


def _judge_id(judge: str, judge_option: List[str]) -> str:
    """The id of the judge as the analysis built it (options included: a hand-set threshold or parsing changes
    which figure, if any, the warning may state). Backends build ids without loading weights."""
    from berds.evaluate.analyses.common import build_judge

    return build_judge(judge, _options(judge_option)).id


def _analysis_output(result: Any, out: Optional[Path], judge: str, judge_id: str) -> None:
    title, header, rows = result.table()
    _print_table(f"{title} — judge: {judge}", header, rows)
    print_judge_warning(judge_id)
    if out is not None:
        from berds.evaluate.report import write_analysis

        _print_written(write_analysis(result, out))


@analyze_app.command("stance", short_help="Which perspective supports the question (2-sided).")
def analyze_stance_command(
    questions: str = typer.Argument(..., help="Question set: kialo, arguana, opinionqa, demo, or a jsonl path."),
    llm: str = typer.Option(..., "--llm", help="BACKEND:MODEL, e.g. openai:gpt-4 or transformers:/models/qwen."),
    out: Path = typer.Option(..., "--out", callback=out_file_callback, help="Stances jsonl to write."),
    split: str = typer.Option("test", "--split", help="Question split: test or dev."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions."),
    llm_option: List[str] = typer.Option([], "--llm-option", help="key=value for the LLM backend (repeatable)."),
    orders: str = typer.Option("one", "--orders", help="one: ask once, perspectives in order (the study); both: both orders, reconciled."),
    prompt: str = typer.Option("study", "--prompt", help="study (Table 15 verbatim) or paraphrase (berds' earlier A/B wording)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed",
                                        help="Accept stances although the LLM named neither perspective for more "
                                             "than 5% of the questions (default: exit 2 after writing them)."),
) -> None:
    """Which perspective of each two-perspective question supports it (the study's Table 15 prompt)."""
    from berds.evaluate.analyses.stance import check_stance_answers, stance_counts, stance_file

    stances = stance_file(questions, llm, out, split=split, limit=limit, llm_options=_options(llm_option),
                          progress=not quiet, orders=orders, prompt=prompt)
    counts = stance_counts(stances)
    _print_table(f"stances → {out}", ["status", "questions"], [[k, str(v)] for k, v in counts.items()])
    if not allow_unparsed:
        check_stance_answers(stances, out)


def _options(items: List[str]) -> dict[str, Any]:
    from berds.registry import parse_options

    return parse_options(items)


@analyze_app.command("leaning", short_help="Share of questions whose top k takes one side.")
def analyze_leaning_command(
    runs: List[Path] = typer.Argument(..., help="Run folders or BERDS jsonl files."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    stances: Optional[Path] = typer.Option(None, "--stances", help="Stances jsonl (from `berds analyze stance`)."),
    stance_llm: Optional[str] = typer.Option(None, "--stance-llm", help="Or compute stances with this LLM (BACKEND:MODEL)."),
    k: int = typer.Option(5, "--k", help="Look at the top k passages."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    allow_short: bool = typer.Option(False, "--allow-short", help=ALLOW_SHORT_HELP),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the result here (X.json + X.md/.csv/.png)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Share of questions whose top k supports only the supporting side, only the opposing, both, neither."""
    judge = require_judge(judge)
    from berds.evaluate.analyses.leaning import analyze_leaning

    result = analyze_leaning([str(r) for r in runs], judge, stances=str(stances) if stances else None,
                             stance_llm=stance_llm, k=k, judge_options=_options(judge_option), cache_path=cache,
                             allow_short=allow_short, allow_unparsed=allow_unparsed, progress=not quiet)
    _analysis_output(result, out, judge, _judge_id(judge, judge_option))


@analyze_app.command("sycophancy", short_help="Sycophancy Δ: retrieve with each side as the query.")
def analyze_sycophancy_command(
    retriever: str = typer.Option(..., "--retriever", "-r", help="Retriever name (berds retrievers list) or module:attr."),
    questions: str = typer.Option(..., "--questions", help="kialo, arguana, opinionqa, demo, or a jsonl path."),
    option: List[str] = typer.Option([], "--option", help="key=value for the retriever, e.g. index=indexes/wiki (repeatable)."),
    index: Optional[str] = typer.Option(None, "--index", help="Shorthand for --option index=PATH."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    stances: Optional[Path] = typer.Option(None, "--stances", help="Stances jsonl (from `berds analyze stance`)."),
    stance_llm: Optional[str] = typer.Option(None, "--stance-llm", help="Or compute stances with this LLM (BACKEND:MODEL)."),
    split: str = typer.Option("test", "--split", help="Question split: test or dev."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions."),
    k: int = typer.Option(5, "--k", help="Top documents per run that are judged and counted (the paper: 5)."),
    label: Optional[str] = typer.Option(None, "--label", help="Name of this setting in tables and plots."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_folder_callback, help="Folder: sycophancy.json/.md/.csv/.png and the three runs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Retrieve with the question, the supporting and the opposing perspective as the query; per run
    Δ = (p − n)/p, p and n the % of top-k documents containing the supporting / opposing perspective (Fig. 3)."""
    judge = require_judge(judge)
    from berds.studies.sycophancy import sycophancy_from_source

    retriever_options = _options(option)
    from berds.registry import merge_options

    merge_options(retriever_options, {"index": ("--index", index)})
    result = sycophancy_from_source(retriever, questions, judge, split=split, limit=limit, k=k,
                                    retriever_options=retriever_options, stances=stances, stance_llm=stance_llm,
                                    judge_options=_options(judge_option), cache_path=cache, label=label, out=out,
                                    progress=not quiet)
    _print_table(*_sycophancy_narrow(result, judge))
    print_judge_warning(_judge_id(judge, judge_option))
    if out is not None:
        from berds.evaluate.report import write_analysis

        _print_written(write_analysis(result, out / "sycophancy.json"))


def _sycophancy_narrow(result: Any, judge: str) -> tuple[str, list[str], list[list[str]]]:
    """The sycophancy rows for an 80-column terminal: each setting on a row of its own above its three queries
    (the file's seven columns broke "supporting", "(opposing)" and "questions" mid-word)."""
    title, header, rows = result.table()
    body: list[list[str]] = []
    last = None
    for row in rows:
        label, query, *values = row
        if label != last:
            body.append([label, *[""] * len(values)])
            last = label
        body.append([f"  {query}", *values])
    header = ["setting / query", "p %", "n %", "Δ %", "docs", "questions"]
    return (f"{title}; Δ = (p − n)/p — judge: {judge}", header, body)


@analyze_app.command("coverage", short_help="MRecall over the union of several runs.")
def analyze_coverage_command(
    runs: List[Path] = typer.Argument(..., help="Run folders or BERDS jsonl files (same questions)."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    depth: int = typer.Option(100, "--depth", min=1, help="Top passages of each run pooled together."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    allow_short: bool = typer.Option(False, "--allow-short", help=ALLOW_SHORT_HELP),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the result here (X.json + X.md/.csv)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """MRecall over the union of the runs' top DEPTH passages, beside each run's own."""
    judge = require_judge(judge)
    from berds.evaluate.analyses.coverage import analyze_coverage

    result = analyze_coverage([str(r) for r in runs], judge, depth=depth, judge_options=_options(judge_option),
                              cache_path=cache, allow_short=allow_short, allow_unparsed=allow_unparsed, progress=not quiet)
    _analysis_output(result, out, judge, _judge_id(judge, judge_option))


@analyze_app.command("docs-needed", short_help="Passages needed to cover every perspective.")
def analyze_docs_needed_command(
    runs: List[Path] = typer.Argument(..., help="Run folders or BERDS jsonl files."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    depth: int = typer.Option(100, "--depth", min=1, help="Look this deep at most."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    allow_short: bool = typer.Option(False, "--allow-short", help=ALLOW_SHORT_HELP),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_file_callback, help="Write the result here (X.json + X.md/.csv)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """How many top passages it takes to cover every perspective; share covered within DEPTH."""
    judge = require_judge(judge)
    from berds.evaluate.analyses.docs_needed import analyze_docs_needed

    result = analyze_docs_needed([str(r) for r in runs], judge, depth=depth, judge_options=_options(judge_option),
                                 cache_path=cache, allow_short=allow_short, allow_unparsed=allow_unparsed, progress=not quiet)
    _analysis_output(result, out, judge, _judge_id(judge, judge_option))


# --------------------------------------------------------------------------------------------- report


def report_command(
    runs: List[Path] = typer.Argument(None, help="Run folders or BERDS jsonl files."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Report folder."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    k: List[str] = typer.Option(["5", "10"], "--k", metavar="K", callback=ks_callback, help="Cut-offs for the metrics table: --k 5 --k 10 or --k 5,10."),
    curve_depth: Optional[int] = typer.Option(None, "--curve-depth", min=1, help="MRecall@k curve up to this k (default: largest --k)."),
    analysis: List[Path] = typer.Option([], "--analysis", "-a", help="Result JSON from `berds analyze ... --out` (repeatable)."),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    allow_short: bool = typer.Option(False, "--allow-short", help=ALLOW_SHORT_HELP),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    title: str = typer.Option("BERDS report", "--title", help="Report title."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Mark values that differ significantly from this run (label or path)."),
    html: bool = typer.Option(False, "--html", help="Also write report.html: one self-contained page (leaderboard, trade-off plot, per-question grids)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Human-labelled pairs of whole questions (the TSV `judge validate` reads): also corrected estimates with 95% intervals (corrected.md/.csv/.json; with --baseline, each run's difference from it too; docs/corrected-estimates.md)."),
    population: str = typer.Option("questions", "--population", help="With --labels: questions (these questions, default) or superpopulation (questions like these)."),
) -> None:
    """Paper-style tables (markdown + CSV) and PNG figures for runs and analysis results."""
    judge = require_judge(judge) if runs else judge  # analysis files alone need no judge
    check_run_args(runs)
    from berds.evaluate.report import build_report

    human = None
    if labels is None and population != "questions":
        from berds.errors import BerdsError

        raise BerdsError("--population shapes the corrected estimates: give --labels too")
    if labels is not None:  # read and checked before any judging
        from berds.errors import BerdsError
        from berds.trust.ppi import check_options, read_labels

        if not runs:
            raise BerdsError("--labels corrects the metrics of runs: name the runs too")
        check_options(population, "1")
        human = read_labels(labels)
        from berds.trust.ppi import check_labels_for_paths

        check_labels_for_paths([str(r) for r in runs], human, parse_ks(k), allow_short=allow_short)

    corrected = None
    if human is not None:  # judged first (cached): the page's leaderboard shows the corrected estimates too
        from berds.trust.ppi import (corrected_runs, corrected_section, human_label_index, page_estimates,
                                     print_corrected_runs)

        corrected = corrected_runs([str(r) for r in runs], judge, human, ks=parse_ks(k),
                                   judge_options=_options(judge_option), cache_path=cache, allow_short=allow_short,
                                   allow_unparsed=True, baseline=baseline, differences=baseline is not None,
                                   population=population)
    report = build_report(list(runs or []), judge, out, ks=parse_ks(k), curve_depth=curve_depth, analyses=list(analysis),
                          judge_options=_options(judge_option), cache_path=cache, allow_short=allow_short, allow_unparsed=allow_unparsed,
                          progress=not quiet, title=title, baseline=baseline, html=html,
                          corrected=page_estimates(corrected) if corrected else None,
                          human=human_label_index(human) if human is not None else None,
                          extra=(lambda folder: corrected_section(corrected, folder)) if corrected else None)
    if report.headline is not None:  # the numbers first, then where everything was written
        _print_table(f"BERDS metrics (%) — judge: {judge}", *report.headline)
    if corrected is not None:
        print_corrected_runs(corrected, console=_console())
    _print_table(f"report → {report.out}" + (f" — judge: {judge}" if runs else ""), ["file", "path"],
                 [[key, str(p)] for key, p in report.files.items()])
    if runs:
        print_judge_warning(_judge_id(judge, judge_option))
