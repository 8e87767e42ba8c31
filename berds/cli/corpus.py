"""``berds corpus build wikipedia|web|search``, ``berds corpus info``, ``berds corpus show``, ``berds corpus upgrade``."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import List, Optional

import typer

from berds.cli.options import out_folder_callback

corpus_app = typer.Typer(help="Build passage stores (Wikipedia, web snapshots, search results) and inspect them.",
                         no_args_is_help=True)
build_app = typer.Typer(help="Build a passage store from a corpus source.", no_args_is_help=True)
corpus_app.add_typer(build_app, name="build")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(corpus_app, name="corpus", rich_help_panel="Corpora and indexes", short_help="Build and inspect passage stores.")
    app.command("check-provider", rich_help_panel="Plug-ins and tools", short_help="Contract test for a search provider (yours too).")(check_provider_command)


def check_provider_command(
    provider: str = typer.Argument(..., help="A registered name (serper) or module:attr."),
    option: List[str] = typer.Option([], "--option", "-o", help="key=value passed to the provider (repeatable)."),
    query: str = typer.Option("Should cities build more bike lanes?", "--query", help="What to search for (two real searches)."),
    num: int = typer.Option(3, "--num", min=1, help="Results to ask for."),
) -> None:
    """Check a search provider against the contract (searches for real; exit 1 on failure)."""
    from rich.console import Console

    from berds.registry import parse_options
    from berds.testing import check_provider

    report = check_provider(provider, options=parse_options(option), query=query, num=num)
    Console().print(report.table())
    if not report.ok:
        raise SystemExit(1)


def _print_report(report) -> None:
    from rich.console import Console

    Console().print(report.table())


def _expand(paths: List[str]) -> List[Path]:
    """Paths as given, with glob patterns expanded (for quoted patterns and shells that do not expand)."""
    out: List[Path] = []
    for p in paths:
        matches = sorted(glob.glob(p)) if any(c in p for c in "*?[") else []
        out.extend(Path(m) for m in matches) if matches else out.append(Path(p))
    return out


OUT = typer.Option(..., "--out", callback=out_folder_callback, help="Folder of the new passage store.")
OVERWRITE = typer.Option(False, "--overwrite", help="Replace an existing store at --out.")
RESUME = typer.Option(False, "--resume", help="Keep the committed passages of an interrupted build of --out and continue.")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress bars.")
WORDS = typer.Option(100, "--words", min=1, help="Words per passage (DPR: 100).")
SHARD = typer.Option(1_000_000, "--shard-size", help="Passages per commit (at most 64 MB): what a killed build can lose.")
COMPRESSION = typer.Option("none", "--compression", help="none (fastest lookups) or zlib (text ~1.9x smaller, lookups slower).")


@build_app.command("wikipedia", short_help="Wikipedia in 100-word passages (DPR tsv or dump).")
def build_wikipedia_command(
    out: Path = OUT,
    dpr_tsv: Optional[Path] = typer.Option(None, "--dpr-tsv", help="DPR's psgs_w100.tsv (id, text, title), taken as is."),
    dump: Optional[Path] = typer.Option(None, "--dump", help="A pages-articles XML dump (.xml, .xml.bz2, .xml.gz)."),
    title_in_text: bool = typer.Option(True, "--title-in-text/--no-title-in-text",
                                       help="Start each article's text with its title, as DPR's passages do (dump only)."),
    ids: str = typer.Option("page", "--ids", help="Passage ids from a dump: page ({page_id}-{n}) or dpr (a counter from 1)."),
    keep_lists: bool = typer.Option(False, "--keep-lists", help="Keep list items (DPR dropped them)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Processes stripping wiki markup (dump only; same output as 1)."),
    words: int = WORDS, overwrite: bool = OVERWRITE, resume: bool = RESUME, shard_size: int = SHARD,
    compression: str = COMPRESSION, quiet: bool = QUIET,
) -> None:
    """Wikipedia passages: DPR's published tsv, or a fresh XML dump split DPR's way."""
    from berds.corpora.wikipedia import build_wikipedia

    _, report = build_wikipedia(out, dpr_tsv=dpr_tsv, dump=dump, words_per_passage=words, title_in_text=title_in_text,
                                id_scheme=ids, keep_lists=keep_lists, workers=workers, overwrite=overwrite, resume=resume,
                                shard_size=shard_size, compression=compression, progress=not quiet)
    _print_report(report)


@build_app.command("web", short_help="Web snapshot passages from jsonl records.")
def build_web_command(
    files: List[str] = typer.Argument(None, help="More input files (a shell-expanded --jsonl/--warc pattern lands here)."),
    out: Path = OUT,
    jsonl: List[str] = typer.Option([], "--jsonl", help="jsonl files or glob patterns (repeatable)."),
    warc: List[str] = typer.Option([], "--warc", help="WARC files (.warc, .warc.gz) or glob patterns (repeatable)."),
    text_field: Optional[str] = typer.Option(None, "--text-field", help="Record field with the text (default: text, raw_content, contents, content, body)."),
    title_field: Optional[str] = typer.Option(None, "--title-field", help="Record field with the title (default: title)."),
    url_field: Optional[str] = typer.Option(None, "--url-field", help="Record field with the url (default: url, source)."),
    id_field: Optional[str] = typer.Option(None, "--id-field", help="Record field with the id (default: id, _id, docid, doc_id)."),
    html: bool = typer.Option(False, "--html", help="jsonl text is HTML: clean it with readability + html2text."),
    as_passages: bool = typer.Option(False, "--as-passages", help="Records already are passages (e.g. Sphere): keep them and their ids."),
    words: int = WORDS, overwrite: bool = OVERWRITE, resume: bool = RESUME, shard_size: int = SHARD,
    compression: str = COMPRESSION, quiet: bool = QUIET,
) -> None:
    """Web snapshot passages from jsonl records (CCNet, Sphere, ...) or WARC archives."""
    from berds.corpora.web import JsonlFields, build_web
    from berds.errors import InputError

    extra = list(files or [])
    if extra and jsonl and warc:
        raise InputError(f"cannot tell whether {extra[0]!r} is jsonl or WARC; repeat --jsonl/--warc before each file")
    jsonl_paths = _expand(jsonl + (extra if jsonl else []))
    warc_paths = _expand(warc + (extra if warc and not jsonl else []))
    if extra and not jsonl and not warc:
        raise InputError("say what the files are: --jsonl FILE... or --warc FILE...")
    fields = JsonlFields(text=text_field, title=title_field, url=url_field, id=id_field)
    _, report = build_web(out, jsonl=jsonl_paths, warc=warc_paths, fields=fields, html=html, as_passages=as_passages,
                          words_per_passage=words, overwrite=overwrite, resume=resume, shard_size=shard_size,
                          compression=compression, progress=not quiet)
    _print_report(report)


@build_app.command("search", short_help="One corpus per question from web search results.")
def build_search_command(
    questions: str = typer.Option(..., "--questions", help="A BERDS set (arguana, kialo, opinionqa), demo, or a questions jsonl."),
    out: Path = OUT,
    split: str = typer.Option("test", "--split", help="Split of a BERDS set."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions."),
    provider: str = typer.Option("serper", "--provider", help="Search provider (serper, or module:attr)."),
    provider_option: List[str] = typer.Option([], "--provider-option", help="key=value passed to the provider (repeatable)."),
    top: int = typer.Option(100, "--top", help="Result pages per question (the study: 100)."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Search/page cache folder (default: $BERDS_HOME/search-cache)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Fetch pages that failed in an earlier run again."),
    concurrency: int = typer.Option(16, "--concurrency", help="Pages downloaded at once."),
    per_host: int = typer.Option(2, "--per-host", help="At most this many downloads at once from one host."),
    max_bytes: int = typer.Option(5_000_000, "--max-bytes", help="Skip pages larger than this."),
    connect_timeout: float = typer.Option(5.0, "--connect-timeout", help="Seconds to connect."),
    read_timeout: float = typer.Option(15.0, "--read-timeout", help="Seconds to wait for data."),
    total_timeout: float = typer.Option(30.0, "--total-timeout", help="Seconds for a whole page."),
    retries: int = typer.Option(2, "--retries", help="Retries for timeouts, connection errors, 429 and 5xx."),
    max_retry_after: float = typer.Option(60.0, "--max-retry-after", help="Longest Retry-After (429/503) waited for; a page asking for more fails now."),
    words: int = WORDS, overwrite: bool = OVERWRITE, quiet: bool = QUIET,
) -> None:
    """One corpus per question from the top web search results (as in the BERDS study)."""
    from berds.corpora.search import FetchOptions, build_search_corpus

    fetch = FetchOptions(connect_timeout=connect_timeout, read_timeout=read_timeout, total_timeout=total_timeout,
                         max_bytes=max_bytes, retries=retries, concurrency=concurrency, per_host=per_host,
                         max_retry_after=max_retry_after)
    from berds.registry import parse_options

    _, report = build_search_corpus(questions, out, provider=provider, provider_options=parse_options(provider_option), top=top, split=split, limit=limit, cache_dir=cache,
                                    fetch_options=fetch, retry_failed=retry_failed, words_per_passage=words,
                                    overwrite=overwrite, progress=not quiet)
    _print_report(report)


@corpus_app.command("info", short_help="Size, format and fingerprint of a store.")
def info_command(
    path: Path = typer.Argument(..., help="A passage store folder."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    verify: bool = typer.Option(False, "--verify", help="Read every passage back and check it against the fingerprint."),
) -> None:
    """Passages, documents, groups, sizes and fingerprint of a passage store."""
    from rich.console import Console
    from rich.table import Table

    from berds.corpora.docstore import PassageStore, human_bytes

    store = PassageStore.open(path)
    info = store.info()
    if verify:
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True, disable=as_json) as progress:
            task = progress.add_task("verifying", total=len(store))
            store.verify(progress=lambda n: progress.update(task, completed=n))
        info["verified"] = True
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    table = Table(title=f"passage store {path}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in info.items():
        if key == "format":
            value = (f"{value} (each record carries a checksum)" if value >= 3
                     else f"{value} (records without checksums: `berds corpus upgrade {path}` adds them)")
        elif isinstance(value, bool):
            value = "yes: every passage read back matches the fingerprint" if value else "no"
        elif key.endswith("_bytes"):
            value = human_bytes(value)
        elif isinstance(value, int):
            value = f"{value:,}"
        elif isinstance(value, dict):
            value = json.dumps(value)
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    Console().print(table)


@corpus_app.command("show")
def show_command(
    path: Path = typer.Argument(..., help="A passage store folder."),
    passage_ids: List[str] = typer.Argument(..., help="One or more passage ids."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per passage."),
) -> None:
    """Print passages by id."""
    from rich.console import Console
    from rich.text import Text

    from berds.corpora.docstore import PassageStore

    store = PassageStore.open(path)
    missing = [pid for pid in passage_ids if pid not in store]
    if missing:  # a newcomer has no id to start from: show what this store's ids look like
        from itertools import islice

        from berds.errors import InputError

        sample = ", ".join(repr(i) for i in islice(store.ids(), 3))
        raise InputError(f"passage id {missing[0]!r} is not in this store ({len(store)} passages)", path=path,
                         fix=f"ids here look like {sample}; a run's run.ctxs.jsonl lists the ids it retrieved")
    console = Console()
    for pid in passage_ids:
        p = store.get(pid)
        group = store.group_of(pid)
        if as_json:
            typer.echo(json.dumps({"id": p.id, "title": p.title, "text": p.text, "source": p.source, "group": group},
                                  ensure_ascii=False))
            continue
        console.print(Text.assemble((p.id, "bold"), "  ", (p.title, "dim")), highlight=False)  # (no markup)
        console.print(f"source: {p.source or '-'}" + (f"   group: {group}" if group is not None else ""), highlight=False, markup=False)
        console.print(p.text, highlight=False, markup=False)
        console.print()


@corpus_app.command("upgrade", short_help="Convert an older store format in place.")
def upgrade_command(
    path: Path = typer.Argument(..., help="A passage store folder written by an older berds."),
    compression: Optional[str] = typer.Option(None, "--compression", help="none or zlib (default: as the store is; "
                                              "a format-1 store: none)."),
) -> None:
    """Convert a store of an older format in place; same passages, same fingerprint (indexes stay valid)."""
    from rich.console import Console
    from rich.progress import Progress

    from berds.corpora.docstore import upgrade_passage_store
    from berds.io import read_json

    total = (read_json(path / "manifest.json") or {}).get("passages") if (path / "manifest.json").is_file() else None
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("upgrading", total=total)
        store = upgrade_passage_store(path, compression=compression, progress=lambda n: progress.update(task, completed=n))
    Console().print(f"{path}: {len(store):,} passages in store format {store.manifest['format']} "
                    f"({store.manifest.get('engine')}), fingerprint {store.fingerprint[:16]} unchanged", highlight=False, markup=False)
