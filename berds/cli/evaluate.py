"""``berds eval`` and ``berds judges list``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from berds.cli.options import (ALLOW_SHORT_HELP, ALLOW_UNPARSED_HELP, BATCH_TIMEOUT_HELP, JUDGE_REQUIRED_HELP, K_HELP,
                               WORKERS_HELP, cache_file_callback, check_run_args, ks_callback, out_folder_callback, parse_ks,
                               require_judge)

LABELS_HELP = ("Human-labelled pairs (the TSV `judge validate` reads: question, id, document, perspective, label) of "
               "whole questions: also print the prediction-powered estimate and the labels-only estimate with 95% "
               "intervals and n labelled / N questions (docs/corrected-estimates.md).")
POPULATION_HELP = ("With --labels: what the interval is about — questions (these N questions, the default) or "
                   "superpopulation (questions like these: classic PPI via ppi_py).")
PPI_LAMBDA_HELP = "With --labels: 1 (plain, unbiased PPI; default) or tuned (PPI++ power tuning)."

judges_app = typer.Typer(help="Perspective judges: list what is available.", no_args_is_help=True)
cache_app = typer.Typer(help="The judgement cache.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("eval", rich_help_panel="Judge and evaluate", short_help="Judge runs: MRecall@k and Precision@k.")(eval_command)
    app.command("demo", rich_help_panel="Start here", short_help="The whole pipeline on the shipped demo data.")(demo_command)
    app.add_typer(judges_app, name="judges", rich_help_panel="Judge and evaluate")
    app.add_typer(cache_app, name="cache", rich_help_panel="Judge and evaluate")


def eval_command(
    runs: Optional[List[Path]] = typer.Argument(None, help="Run folders or BERDS-format jsonl files."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    k: List[str] = typer.Option(["5", "10"], "--k", metavar="K", callback=ks_callback, help=K_HELP),
    judge_option: List[str] = typer.Option([], "--judge-option", "-o", help="key=value passed to the judge/backend (repeatable)."),
    rounds: Optional[int] = typer.Option(None, "--rounds", help="Debate rounds (for debate:NAME judges)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file (default: $BERDS_HOME/judgements.sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Judge everything without reading or writing the cache."),
    overwrite: str = typer.Option("only-missing", "--overwrite", help="only-missing | always | never"),
    title_position: str = typer.Option("after", "--title-position", help="Judge sees text+title (after, the study), title+text (before) or none."),
    allow_short: bool = typer.Option(False, "--allow-short", help=ALLOW_SHORT_HELP),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    duplicates: Optional[str] = typer.Option(None, "--duplicates", help="A passage listed twice in one question's ranking: refuse (default) | dedupe (keep the first) | keep (count every occurrence, as the study's expansion runs did; run folders that repeat on purpose, and --from-predictions files, are read so by default)."),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_folder_callback, help="Write metrics here instead of next to the run."),
    write_legacy: bool = typer.Option(False, "--write-legacy", help="Also write run.mistralpred.jsonl: each judged ctx with 'mistral-preds' (one boolean per perspective), what the original BERDS evaluation reads."),
    from_predictions: Optional[Path] = typer.Option(None, "--from-predictions", help="Compute metrics from the 'mistral-preds' (or, in the study's .gpt4pred files, 'gpt4-preds') already in this file (the original compute-only mode); no judge."),
    engine: str = typer.Option("local", "--engine", help="local | ray"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (with --engine ray)."),
    batch_timeout: Optional[float] = typer.Option(None, "--batch-timeout", help=BATCH_TIMEOUT_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    measure: List[str] = typer.Option([], "--measure", help="Also compute an ir_measures diversity measure over the judgements as qrels (alpha_nDCG@10, ERR_IA@10, StRecall@10, MRecall@5, BERDS_P@5; repeatable)."),
    qrels: Optional[Path] = typer.Option(None, "--qrels", help="Write the judgements as TREC diversity qrels (qid subtopic docid rel); a folder when several runs."),
    labels: Optional[Path] = typer.Option(None, "--labels", help=LABELS_HELP),
    population: str = typer.Option("questions", "--population", help=POPULATION_HELP),
    ppi_lambda: str = typer.Option("1", "--ppi-lambda", help=PPI_LAMBDA_HELP),
    qrels_pool: str = typer.Option("runs", "--qrels-pool", help="Qrels of --measure when several runs are evaluated: runs (their judgements pooled, TREC pooling: every run gets the same ideal ranking) | single (each run's own judgements)."),
) -> None:
    """Judge retrieval runs against their gold perspectives and report MRecall@k / Precision@k."""
    from rich.console import Console

    from berds.errors import BerdsError
    from berds.evaluate.evaluation import EvalOptions, evaluate_paths, metrics_table
    from berds.registry import parse_options

    if labels is None and (population != "questions" or ppi_lambda != "1"):
        raise BerdsError("--population and --ppi-lambda shape the corrected estimates: give --labels too")
    if from_predictions is not None:
        if labels is not None:
            raise BerdsError("--labels matches human labels to a run's passages; --from-predictions has only "
                             "predictions — evaluate the run itself (berds eval RUN --judge ... --labels ...)")
        if runs:
            raise BerdsError("--from-predictions FILE computes metrics from that file alone; drop the run arguments")
        if judge is not None:
            raise BerdsError("--from-predictions FILE reads the judgements stored in that file ('mistral-preds'); "
                             "no judge runs — drop --judge")
        return _eval_from_predictions(from_predictions, tuple(k), allow_short=allow_short, out=out,
                                      duplicates=duplicates or "keep")
    duplicates = duplicates or "refuse"
    if not runs:
        raise BerdsError("name at least one run folder or BERDS-format jsonl (or --from-predictions FILE)")
    check_run_args(runs)

    judge = require_judge(judge)
    options = parse_options(judge_option)
    human = None
    if labels is not None:  # read and checked before any judging
        from berds.trust.ppi import check_options, read_labels

        check_options(population, ppi_lambda)
        human = read_labels(labels)
    if qrels_pool not in ("runs", "single"):
        raise BerdsError(f"--qrels-pool must be runs or single, got {qrels_pool!r}")
    if measure:
        from berds.evaluate.qrels import check_measures

        check_measures(measure, depth=max(parse_ks(k)))  # before any judging
    qrels_files = None
    if qrels is not None:  # checked before any judging, like --out
        from berds.errors import InputError
        from berds.evaluate.qrels import qrels_paths
        from berds.io import check_writable

        qrels_files = qrels_paths(qrels, runs)
        for path in qrels_files:
            try:
                check_writable(path, folder=False)
            except InputError as exc:  # (its fix names --out)
                what = str(exc).removeprefix(f"{exc.path}: ").split(" — ")[0]
                raise InputError(f"{what} (--qrels)", path=exc.path,
                                 fix="choose another --qrels (a file for one run, a folder for several)") from None
    if rounds is not None:
        if not judge.startswith("debate:"):
            raise BerdsError(f"--rounds is for debate judges; use --judge debate:{judge} --rounds {rounds}")
        from berds.registry import merge_options

        merge_options(options, {"rounds": ("--rounds", rounds)}, what="--judge-option")
    eval_options = EvalOptions(ks=tuple(parse_ks(k)), overwrite=overwrite, title_position=title_position, allow_short=allow_short,
                               progress=not quiet, cache_path=cache, use_cache=not no_cache, out=out,
                               write_legacy=write_legacy, duplicates=duplicates,
                               allow_unparsed=True,  # checked below, after the table
                               matrices=human is not None)  # (the tables need the metrics only: memory stays flat)
    # (any Ray-only option goes through engine_for, which refuses it with another engine)
    if engine != "local" or batch_timeout is not None or workers is not None or address is not None:
        from berds.cli.options import engine_for
        from berds.evaluate.judging import judge_runner_for

        eval_options = eval_options.but(judge_runner=judge_runner_for(engine_for(engine, address, batch_timeout, workers)))
    checks = []
    if qrels is not None:
        from berds.evaluate.qrels import check_trec_ids

        checks.append(check_trec_ids)
    if human is not None:  # labels that match nothing, or no whole question, fail before any judging
        from berds.trust.ppi import check_labels_for_run

        checks.append(lambda path, run: check_labels_for_run(run, human, parse_ks(k), title_position=title_position))

    def check_run(path, run):
        for check in checks:
            check(path, run)
    results = evaluate_paths(runs, judge, eval_options, judge_options=options, check_run=check_run if checks else None)
    console = Console()
    console.print(metrics_table([r for _, r, _ in results]))
    _print_repeats(console, [r for _, r, _ in results])
    for path, result, files in results:
        s = result.stats
        console.print(
            f"{path}: {s.pairs} pairs, {s.cached} from cache, {s.judged} judged"
            + (f" in {s.seconds:.1f}s" if s.judged else "")
            + (f", {s.unparsed} unparsed answers" if s.unparsed else "")
            + f" → {files['metrics']}"
            + (f" (judgements: {files['judgements']})"  # a run folder's are under eval/JUDGE/, not beside it
               if files["judgements"].parent != files["metrics"].parent else ""),
            highlight=False, markup=False,
        )
    if measure or qrels is not None:
        from berds.evaluate.qrels import add_measures_to_outputs, measures_table, pool_qrels, read_judgements

        # several runs, one judge: measured against their judgements pooled (each run gets the same ideal ranking)
        pool = qrels_pool if len(results) > 1 else "single"
        pooled = (pool_qrels(read_judgements(files["judgements"], unjudged=True)[0] for _, _, files in results)
                  if measure and pool == "runs" else None)
        rows = [(result.run_name or path.name, result.averages,
                 add_measures_to_outputs(files, measure, qrels_files[i] if qrels_files else None, pooled=pooled,
                                         pool=pool))
                for i, (path, result, files) in enumerate(results)]
        if measure:
            console.print(measures_table(rows, pool=pool))
        if qrels is not None:
            console.print(f"qrels (qid subtopic docid rel) → {qrels}", highlight=False, markup=False)
    if human is not None:
        from berds.trust.ppi import print_corrected

        print_corrected(results, human, console=console, title_position=title_position, duplicates=duplicates,
                        allow_short=allow_short, population=population, lam=ppi_lambda)
    if not allow_unparsed:
        from berds.evaluate.evaluation import check_unparsed

        check_unparsed([r for _, r, _ in results], written=" (the table above is flagged; metrics were written)")


def _print_repeats(console, results) -> None:
    """Under the metrics: how many top-k slots repeat a passage, and Precision with each passage once (runs
    that repeat passages only: an expansion run merged with duplicates kept, as the study's)."""
    from berds.evaluate.evaluation import repeats_table

    table = repeats_table(results)
    if table is not None:
        console.print(table)


def _eval_from_predictions(path: Path, ks: tuple[int, ...], *, allow_short: bool, out: Optional[Path],
                           duplicates: str) -> None:
    from rich.console import Console

    from berds.evaluate.evaluation import EvalOptions, eval_output_dir, evaluate_predictions, metrics_table
    from berds.io import write_json

    _, result = evaluate_predictions(path, EvalOptions(ks=ks, allow_short=allow_short, progress=False, use_cache=False),
                                     duplicates=duplicates, duplicates_option="--duplicates")
    target = eval_output_dir(path, out, 1)
    target.mkdir(parents=True, exist_ok=True)
    write_json(target / "metrics.json", result.to_json())
    console = Console()
    console.print(metrics_table([result], title="BERDS metrics from stored predictions"))
    _print_repeats(console, [result])
    console.print(f"{path}: {result.stats.pairs} stored predictions → {target / 'metrics.json'}", highlight=False, markup=False)


def demo_command(
    out: Path = typer.Option(Path("demo-out"), "--out", callback=out_folder_callback, help="Folder for the corpus, indexes, runs and judgements."),
    judge: str = typer.Option("embedded", "--judge", "-j", help="Judge for the main table."),
    k: List[str] = typer.Option(["5", "10"], "--k", metavar="K", callback=ks_callback, help=K_HELP),
    mmr_lambda: float = typer.Option(0.75, "--lambda", help="MMR λ for the reranked MiniLM run."),
    human_seed: int = typer.Option(0, "--human-seed", help="Seed of the random third of the questions whose demo labels play the human sample of the corrected estimates."),
) -> None:
    """Run the whole pipeline on the shipped demo data: corpus, BM25 + dense index, retrieve, MMR, judge, metrics."""
    from berds.demo import run_demo

    run_demo(out, judge=judge, ks=parse_ks(k), mmr_lambda=mmr_lambda, human_seed=human_seed)


@judges_app.command("list")
def judges_list() -> None:
    """List the named judges (importing no model code)."""
    from rich.console import Console
    from rich.table import Table

    from berds.judges.catalogue import JUDGES

    table = Table(title="perspective judges")
    for col in ("name", "description", "needs", "source"):
        table.add_column(col, overflow="fold")
    for spec in JUDGES.specs():
        table.add_row(spec.name, spec.description, ", ".join(spec.tags), spec.source)
    table.add_row("transformers:MODEL", "Any HF model (path or hub name) with the study's prompt; adapter=PATH for LoRA; prompt=plain for base models.", "llm extra", "generic")
    table.add_row("openai:MODEL", "Any OpenAI-compatible endpoint; base_url=URL, key from $OPENAI_API_KEY.", "api", "generic")
    table.add_row("vllm:MODEL", "vLLM offline batch inference.", "gpu", "generic")
    table.add_row("nli:MODEL", "Entailment model (premise = passage, hypothesis = perspective); P(entail) >= threshold=0.5; T5 checkpoints scored as the study's T5 code.", "llm extra", "generic")
    table.add_row("calibrated:NAME", "Judge NAME with the P(Yes) threshold stored by `berds judge calibrate`.", "", "generic")
    table.add_row("debate:NAME", "Devil's-advocate wrapper around judge NAME (--rounds N).", "", "generic")
    Console().print(table)


@cache_app.command("info")
def cache_info(cache: Optional[Path] = typer.Option(None, "--cache", help="Cache file (default: $BERDS_HOME/judgements.sqlite).")) -> None:
    """Show which judges and prompt versions the cache holds verdicts for."""
    from rich.console import Console
    from rich.table import Table

    from berds.errors import InputError
    from berds.evaluate.cache import JudgementCache, default_cache_path

    path = cache if cache is not None else default_cache_path()
    if not path.is_file():  # opening would create an empty cache, hiding a mistyped path
        raise InputError("no judgement cache here", path=path,
                         fix="check --cache (or $BERDS_HOME); `berds eval` creates the cache when it first judges")
    with JudgementCache(path) as c:
        table = Table(title=f"judgement cache {c.path}")
        # the prompt version under its judge id: side by side, a judge id (50+ characters) was cut at 80 columns
        table.add_column("judge id\n  prompt version", overflow="fold")
        table.add_column("verdicts", justify="right")
        for judge_id, prompt, n in c.judges():
            table.add_row(f"{judge_id}\n  {prompt}", f"{n:,}")
        Console().print(table)
