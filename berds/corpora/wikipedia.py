"""Wikipedia corpora: DPR's published passages (``psgs_w100.tsv``) as they are, or a fresh XML dump.

* ``read_dpr_tsv`` streams DPR's tsv (header ``id<TAB>text<TAB>title``; fields use CSV quoting, so a
  text with quotes is wrapped in ``"`` with inner quotes doubled) into passages with DPR's ids.
* ``iter_dump_documents`` streams a MediaWiki XML export (``.xml``, ``.xml.bz2`` or ``.xml.gz``) page
  by page with ``iterparse``, clearing each page after use so memory stays flat however big the dump.
  It keeps main-namespace articles only (drops talk/user/file/... namespaces, redirects and
  disambiguation pages, each counted as a skip reason), turns wikitext into plain text with
  mwparserfromhell (templates, references, tables, galleries, file/category/interlanguage links
  removed; links replaced by their visible text) and, like DPR, drops list items.
* ``build_wikipedia`` splits those articles DPR's way and writes the passage store.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import os
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator
from xml.etree import ElementTree

from berds.corpora.build import BuildProgress, BuildReport, check_disk_and_announce, write_passages
from berds.corpora.docstore import PassageStore
from berds.corpora.split import DEFAULT_WORDS, Document, DprCounterIds, doc_ids, split_document
from berds.errors import InputError
from berds.lazy import require
from berds.runs import id_flaw, one_token
from berds.types import Passage

DPR_HEADER = ["id", "text", "title"]

# Tags whose content is not article prose.
_DROP_TAGS = {"ref", "references", "table", "gallery", "math", "chem", "score", "timeline", "imagemap",
              "syntaxhighlight", "source", "pre", "code", "graph", "mapframe", "templatestyles", "noinclude"}
# Link namespaces that are media or metadata, not text.
_DROP_LINK_PREFIXES = {"file", "image", "media", "category"}
_DISAMBIGUATION = re.compile(r"\{\{\s*(disambiguation|disambig|dab|hndis|geodis|mil-unit-dis|hospitaldis|schooldis)\s*[|}]", re.IGNORECASE)
_LIST_LINE = re.compile(r"^[*#;:]")


def _open_text_stream(path: Path) -> tuple[IO[bytes], IO[bytes]]:
    """(decompressed stream, raw file) for .bz2 / .gz / plain files; raw.tell() measures progress.

    A file whose first bytes are gzip's or bzip2's magic is decompressed whatever its name (a saved
    download often loses its suffix): read as text, it failed as "malformed XML at line 1, column 0"."""
    raw = open(path, "rb")
    head = raw.read(3)
    raw.seek(0)
    if path.suffix == ".bz2" or (path.suffix != ".gz" and head == b"BZh"):
        return bz2.BZ2File(raw), raw
    if path.suffix == ".gz" or head[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw), raw
    return raw, raw


# --------------------------------------------------------------------------------- DPR tsv
def read_dpr_tsv(path: str | os.PathLike, report: BuildReport | None = None, *, raw_holder: list | None = None,
                 position: dict | None = None) -> Iterator[Passage]:
    """Passages of a DPR-format tsv (``id``, ``text``, ``title``; first line a header), in file order.

    Rows with a wrong number of fields, an empty id or a repeated header are errors naming the line.
    ``report`` (optional) counts articles: DPR passages of one article are consecutive, so a change of
    title starts a new document. ``position`` (optional) is kept at the ``path`` and ``line`` of the passage
    last yielded.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path, fix="pass the DPR passages tsv (psgs_w100.tsv)")
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    stream, raw = _open_text_stream(path)
    if raw_holder is not None:
        raw_holder.append(raw)
    import io

    # utf-8-sig: a byte-order mark some editors add would otherwise spoil the header's first name
    with io.TextIOWrapper(stream, encoding="utf-8-sig", newline="") as text:
        reader = csv.reader(text, delimiter="\t")
        try:
            header = next(reader, None)
            if header is None:
                raise InputError("empty file; expected a header line id<TAB>text<TAB>title", path=path, line=1)
            if [h.strip().lower() for h in header] != DPR_HEADER:
                raise InputError(
                    f"first line must be the header id<TAB>text<TAB>title, got {header[:3]!r}", path=path, line=1,
                    fix="use DPR's psgs_w100.tsv format, or `berds corpus build web --jsonl` for other layouts",
                )
            last_title, rows = None, 0
            while True:
                start = reader.line_num + 1  # where the next record starts (a quoted field may span lines)
                row = next(reader, None)
                if row is None:
                    if not rows:  # no passage came: an empty store would index and search without complaint
                        raise InputError("holds no passages, only the header line", path=path, line=start,
                                         fix="pass the whole DPR passages tsv (is the file cut short?)")
                    break
                if not row:  # a blank line (an editor's trailing newline): skipped, as blank jsonl lines are
                    continue
                if len(row) != 3:
                    raise InputError(
                        f"expected 3 tab-separated fields (id, text, title), got {len(row)}", path=path,
                        line=start, fix="quote fields containing tabs or newlines as DPR's tsv does",
                    )
                pid, body, title = row
                if not pid.strip():
                    raise InputError("empty passage id", path=path, line=start)
                if not one_token(pid):  # refused here, by line, rather than by `berds index` after the build
                    raise InputError(f"passage id {pid!r} holds {id_flaw(pid)}, which indexes and TREC run files cannot "
                                     "carry", path=path, line=start, fix="DPR's ids are numbers; fix that line")
                if report is not None:
                    report.input_bytes = raw.tell()
                    if title != last_title:
                        report.documents_read += 1
                        report.documents_used += 1
                        last_title = title
                if position is not None:
                    position["path"], position["line"] = path, start
                rows += 1
                yield Passage(id=pid, text=body, title=title, source="")
        except UnicodeDecodeError as exc:  # (decoding runs a chunk ahead of the reader: find the line in the bytes)
            line = _line_of_bad_utf8(path)
            raise InputError(f"not UTF-8 text ({exc.reason})", path=path, line=line,
                             fix="DPR's tsv is UTF-8; re-encode the file") from None
        except csv.Error as exc:
            raise InputError(f"malformed tsv in the record starting here: {exc}", path=path, line=start) from None
        except (EOFError, OSError, zlib.error) as exc:  # a cut .gz/.bz2 raises EOFError, which read as Ctrl-C
            raise InputError(f"cannot read the tsv ({exc})", path=path,
                             fix="is the file truncated or not really bz2/gzip? download it again") from None


def _line_of_bad_utf8(path: Path) -> int | None:
    """The line (1-based) holding the first byte sequence of ``path`` that is not UTF-8 (read again from the start)."""
    import codecs

    stream, raw = _open_text_stream(path)
    decoder, line = codecs.getincrementaldecoder("utf-8")(), 1
    with raw, stream:
        while chunk := stream.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                return line + chunk.count(b"\n", 0, max(exc.start, 0))
            line += chunk.count(b"\n")
    return None


# --------------------------------------------------------------------------------- XML dumps
@dataclass(frozen=True)
class DumpPage:
    """One ``<page>`` of a MediaWiki export, before any filtering."""

    page_id: str
    title: str
    namespace: int
    redirect: bool
    wikitext: str


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_dump_pages(path: str | os.PathLike, *, raw_holder: list | None = None) -> Iterator[DumpPage]:
    """Every page of a MediaWiki XML export, streaming (``.bz2``/``.gz`` read as they are)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path, fix="pass a pages-articles XML dump (.xml, .xml.bz2)")
    stream, raw = _open_text_stream(path)
    if raw_holder is not None:
        raw_holder.append(raw)
    root = None
    try:
        for event, elem in ElementTree.iterparse(stream, events=("start", "end")):
            if root is None:
                root = elem
                if _local(elem.tag) != "mediawiki":
                    raise InputError(f"not a MediaWiki XML export (root element <{_local(elem.tag)}>)", path=path,
                                     fix="download a pages-articles dump from dumps.wikimedia.org")
                continue
            if event != "end" or _local(elem.tag) != "page":
                continue
            title = ns = pid = None
            redirect = False
            wikitext = ""
            for child in elem:
                name = _local(child.tag)
                if name == "title":
                    title = child.text or ""
                elif name == "ns":
                    ns = child.text
                elif name == "id":
                    pid = child.text
                elif name == "redirect":
                    redirect = True
                elif name == "revision":
                    for rc in child:
                        if _local(rc.tag) == "text":
                            wikitext = rc.text or ""
            elem.clear()
            root.clear()  # drop references to finished pages: memory stays flat
            if title is None:
                raise InputError("a <page> without <title>", path=path, fix="is the dump damaged? download it again")
            if pid is None or not pid.strip():  # an empty id would give passage ids like "-0"
                raise InputError(f"page {title!r} has an empty or missing <id>", path=path,
                                 fix="is the dump damaged? download it again")
            try:
                namespace = int(ns) if ns is not None else 0
            except ValueError:
                raise InputError(f"page {title!r} has a non-numeric <ns> {ns!r}", path=path) from None
            yield DumpPage(page_id=pid.strip(), title=title, namespace=namespace, redirect=redirect, wikitext=wikitext)
    except ElementTree.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise InputError(f"malformed XML: {exc}", path=path, line=line, fix="is the dump truncated? download it again") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read the dump ({exc})", path=path, fix="is the file truncated or not really bz2/gzip?") from None
    finally:
        stream.close()


def wikitext_to_text(wikitext: str, *, keep_lists: bool = False) -> str:
    """Plain article text from wikitext (see the module docstring for what is removed)."""
    mwp = require("mwparserfromhell", extra="corpora", purpose="parsing Wikipedia markup")
    if not keep_lists:
        wikitext = "\n".join(line for line in wikitext.split("\n") if not _LIST_LINE.match(line))
    code = mwp.parse(wikitext)
    for tag in code.filter_tags():
        if str(tag.tag).strip().lower() in _DROP_TAGS:
            try:
                code.remove(tag)
            except ValueError:  # already gone with an enclosing node
                pass
    for link in code.filter_wikilinks():
        title = str(link.title).strip()
        if ":" not in title or title.startswith(":"):
            continue
        prefix = title.split(":", 1)[0].strip().lower()
        interlanguage = link.text is None and 2 <= len(prefix) <= 3 and prefix.isalpha()
        if prefix in _DROP_LINK_PREFIXES or interlanguage:
            try:
                code.remove(link)
            except ValueError:
                pass
    text = code.strip_code(normalize=True, collapse=True)
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(line for line in lines if line)


def _page_text(page: DumpPage, keep_lists: bool, keep_disambiguation: bool) -> tuple[str | None, str]:
    """(skip reason or None, plain text) for one page; a top-level function so worker processes can run it."""
    if page.namespace != 0:
        return "not an article (namespace != 0)", ""
    if page.redirect:
        return "redirect", ""
    if not keep_disambiguation and _DISAMBIGUATION.search(page.wikitext):
        return "disambiguation page", ""
    text = wikitext_to_text(page.wikitext, keep_lists=keep_lists)
    if not text.split():
        return "empty after removing markup", ""
    return None, text


def _page_text_star(args: tuple) -> tuple[str | None, str]:
    return _page_text(*args)


def iter_dump_documents(path: str | os.PathLike, report: BuildReport | None = None, *, keep_lists: bool = False,
                        keep_disambiguation: bool = False, workers: int = 1, raw_holder: list | None = None) -> Iterator[Document]:
    """Main-namespace articles of a dump as plain-text documents (id = page id, source = page id).

    ``workers`` > 1 strips markup in that many processes (mwparserfromhell is the slow part); the output
    order, and so the passage ids, stay exactly those of ``workers=1``.
    """
    pages = iter_dump_pages(path, raw_holder=raw_holder)
    pool = None
    if workers > 1:
        import multiprocessing
        from itertools import islice

        pool = multiprocessing.get_context("spawn").Pool(workers)

        def in_batches() -> Iterator[tuple[DumpPage, tuple[str | None, str]]]:
            # Bounded batches (Pool.imap would read the whole dump ahead): memory stays flat.
            while batch := list(islice(pages, workers * 64)):
                results = pool.map(_page_text_star, [(p, keep_lists, keep_disambiguation) for p in batch], chunksize=16)
                yield from zip(batch, results)

        pairs: Iterator[tuple[DumpPage, tuple[str | None, str]]] = in_batches()
    else:
        pairs = ((page, _page_text(page, keep_lists, keep_disambiguation)) for page in pages)
    try:
        for page, (reason, text) in pairs:
            if report is not None:
                report.documents_read += 1
                if reason is not None:
                    report.skip(reason)
                else:
                    report.documents_used += 1
            if reason is None:
                yield Document(id=page.page_id, text=text, title=page.title, source=page.page_id)
    finally:
        if pool is not None:
            pool.terminate()


# --------------------------------------------------------------------------------- build
def build_wikipedia(
    out: str | os.PathLike,
    *,
    dpr_tsv: str | os.PathLike | None = None,
    dump: str | os.PathLike | None = None,
    words_per_passage: int = DEFAULT_WORDS,
    title_in_text: bool = True,
    id_scheme: str = "page",
    keep_lists: bool = False,
    workers: int = 1,
    overwrite: bool = False,
    resume: bool = False,
    shard_size: int = 1_000_000,
    compression: str = "none",
    progress: bool = True,
) -> tuple[PassageStore, BuildReport]:
    """Build a Wikipedia passage store from DPR's tsv (as published) or from an XML dump.

    From a dump: ``title_in_text`` (default, DPR's behaviour) starts each article's text with its title;
    ``id_scheme`` is ``"page"`` (``"{page_id}-{n}"``, stable across dumps) or ``"dpr"`` (a corpus-wide
    counter from 1, as in ``psgs_w100.tsv``). ``workers`` processes strip markup in parallel (same output).
    """
    if (dpr_tsv is None) == (dump is None):
        raise InputError("give exactly one of a DPR tsv (--dpr-tsv) or an XML dump (--dump)")
    if id_scheme not in ("page", "dpr"):
        raise InputError(f"id_scheme must be 'page' or 'dpr', got {id_scheme!r}")
    if dpr_tsv is not None:  # DPR's passages are taken as they are: a splitting option would be ignored silently
        ignored = [name for name, given in (("--words", words_per_passage != DEFAULT_WORDS), ("--no-title-in-text", not title_in_text),
                                            ("--ids", id_scheme != "page"), ("--keep-lists", keep_lists),
                                            ("--workers", workers != 1)) if given]
        if ignored:
            raise InputError(f"{', '.join(ignored)} appl{'ies' if len(ignored) == 1 else 'y'} to --dump only: a DPR tsv is "
                             "taken as it is, already split",
                             path=dpr_tsv, fix=f"leave out {', '.join(ignored)}, or build from an XML dump (--dump)")
    out = Path(out)
    source = Path(dpr_tsv if dpr_tsv is not None else dump)  # type: ignore[arg-type]
    if not source.is_file():
        raise InputError("file not found", path=source,
                         fix="--dpr-tsv takes the path of DPR's passages file (psgs_w100.tsv from the DPR release)"
                         if dpr_tsv is not None else "--dump takes the path of a pages-articles XML dump (.xml, .xml.bz2)")
    kind = "wikipedia (DPR tsv)" if dpr_tsv is not None else "wikipedia (XML dump)"
    report = BuildReport(kind=kind, out=str(out))
    size = source.stat().st_size
    if size == 0 and dump is not None:  # (it failed as "malformed XML: no element found: line 1, column 0")
        raise InputError("is empty (0 bytes)", path=source, line=1,
                         fix="is the download unfinished? pass the whole file")
    from rich.console import Console

    console = Console(stderr=True)
    # A DPR passage is ~620 bytes of tsv; an article dump expands ~4.5x from bz2 and loses ~half to markup.
    per_passage = 620.0 if dpr_tsv is not None else (620.0 / 2.2 if source.suffix == ".bz2" else 620.0 * 1.8)
    check_disk_and_announce(out, input_bytes=size, avg_passage_bytes=per_passage, console=console if progress else None,
                            compression=compression)
    raw_holder: list = []
    locate = None
    if dpr_tsv is not None:
        at: dict = {}  # path and line of the passage being written: a repeated id is reported there
        stream = ((p, None) for p in read_dpr_tsv(source, report, raw_holder=raw_holder, position=at))
        locate = lambda: {**at, "fix": "passage ids must be unique within a store"}  # noqa: E731
        options = {}
    else:
        id_fn = DprCounterIds() if id_scheme == "dpr" else doc_ids
        docs = iter_dump_documents(source, report, keep_lists=keep_lists, workers=workers, raw_holder=raw_holder)
        page: dict = {}  # the page being split: a repeated id (a page listed twice) is reported by its id and title

        def passages_of_pages() -> Iterator[tuple[Passage, None]]:
            for d in docs:
                page["record"] = f"page {d.id} ({d.title})"
                for p in split_document(d, words_per_passage=words_per_passage, title_in_text=title_in_text,
                                        passage_id=id_fn):
                    yield p, None

        stream = passages_of_pages()
        locate = lambda: {"path": source, **page, "fix": "passage ids must be unique within a store: is a page "  # noqa: E731
                          "listed twice in the dump? (--ids dpr numbers passages instead)"}
        options = {"words_per_passage": words_per_passage, "title_in_text": title_in_text, "id_scheme": id_scheme,
                   "keep_lists": keep_lists}
    metadata = {"source": {"kind": kind, "path": str(source.resolve()), "bytes": size}, "options": options}
    with BuildProgress(f"{kind}", total_bytes=size, enabled=progress) as bar:
        bar.position = lambda: raw_holder[0].tell() if raw_holder and not raw_holder[0].closed else size
        store = write_passages(stream, out, report, progress=bar, overwrite=overwrite, resume=resume,
                               metadata=metadata, shard_size=shard_size, compression=compression, locate=locate)
    report.input_bytes = size
    return store, report
