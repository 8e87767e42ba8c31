"""Web snapshot corpora: jsonl records (CCNet, Sphere, anything similar) and WARC archives.

jsonl: each line is one record. Field names differ between sources, so each role has a list of
candidates tried in order, and an explicit option wins over all of them (``JsonlFields``):

    text   text, raw_content (CCNet), contents (Sphere / pyserini), content, body
    title  title
    url    url, source
    id     id, _id, docid, doc_id          (missing: "<file stem>:<line>"; "<folder>/<stem>:<line>" where
                                           two input files share a stem)

Auto-detection looks at the first record of each file; a later record lacking the detected text field
is an error naming the line. Records whose text is HTML go through the shared cleaner with ``html=True``.
Sphere is already cut into 100-word passages: ``as_passages=True`` keeps each record as one passage
with its own id instead of splitting it again.

WARC (warcio): ``response`` records with an HTML or plain-text payload become documents (HTML cleaned
by readability + html2text, the same cleaner search pages use); other records are skipped with the
reason counted (request/metadata records, non-200 status, PDFs and other content types, repeated URLs).
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from berds.corpora.build import BuildProgress, BuildReport, check_disk_and_announce, write_passages
from berds.corpora.docstore import PassageStore
from berds.questions import record_id
from berds.runs import id_flaw, one_token
from berds.corpora.html import HTML_TYPES, clean_html, decode_html
from berds.corpora.split import DEFAULT_WORDS, Document, split_document
from berds.errors import InputError
from berds.io import jsonl_lines, jsonl_record
from berds.lazy import require
from berds.types import Passage

TEXT_FIELDS = ("text", "raw_content", "contents", "content", "body")
TITLE_FIELDS = ("title",)
URL_FIELDS = ("url", "source")
ID_FIELDS = ("id", "_id", "docid", "doc_id")


@dataclass(frozen=True)
class JsonlFields:
    """Which record fields hold the text, title, url and id. ``None`` = auto-detect; ``""`` = not present."""

    text: str | None = None
    title: str | None = None
    url: str | None = None
    id: str | None = None

    def resolve(self, record: dict, path: Path, line: int) -> "JsonlFields":
        """Fill the ``None`` roles from the candidates present in ``record`` (the file's first record)."""

        def pick(explicit: str | None, candidates: Sequence[str]) -> str:
            if explicit is not None:
                return explicit
            return next((c for c in candidates if c in record), "")

        text = pick(self.text, TEXT_FIELDS)
        if not text:
            raise InputError(
                f"no text field found; the record has {sorted(record)[:12]}, expected one of {list(TEXT_FIELDS)}",
                path=path, line=line, fix="name the field with --text-field",
            )
        for role, name in (("text", self.text), ("title", self.title), ("url", self.url), ("id", self.id)):
            if name and name not in record:  # a mistyped field would fall back silently (ids become FILE:LINE)
                raise InputError(f"the {role} field {name!r} is not in the record (it has {sorted(record)[:12]})",
                                 path=path, line=line, fix=f"check --{role}-field")
        return JsonlFields(text=text, title=pick(self.title, TITLE_FIELDS), url=pick(self.url, URL_FIELDS), id=pick(self.id, ID_FIELDS))


def _str_field(record: dict, name: str, path: Path, line: int, *, required: bool = False, numbers: bool = True) -> str:
    if not name:
        return ""
    value = record.get(name)
    if value is None:
        if required:
            raise InputError(f"missing field {name!r}", path=path, line=line,
                             fix="every record needs it (or choose another field with the --*-field options)")
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and numbers:
        return str(value)
    if not isinstance(value, str):
        raise InputError(f"field {name!r} must be a string, got {type(value).__name__}", path=path, line=line)
    return value


def iter_jsonl_documents(
    paths: Sequence[str | os.PathLike],
    report: BuildReport | None = None,
    *,
    fields: JsonlFields = JsonlFields(),
    html: bool = False,
    position: dict | None = None,
    read_bytes: list[int] | None = None,
) -> Iterator[Document]:
    """Documents from jsonl files (see the module docstring for field detection).

    ``position`` (optional) is kept at the ``path`` and ``line`` of the document last yielded;
    ``read_bytes[0]`` (optional) at the input bytes read so far, over all files (what the progress bar shows).
    """
    seen_fields: dict[str, dict[str, str]] = {}
    paths = [Path(p) for p in paths]
    prefixes = auto_id_prefixes(paths)
    for path, prefix in zip(paths, prefixes):
        resolved: JsonlFields | None = None
        for line, raw in jsonl_lines(path):  # (refuses a compressed shard: CCNet ships .json.gz)
            if read_bytes is not None:
                read_bytes[0] += len(raw)
            record = jsonl_record(raw, path, line)
            if record is None:
                continue
            if resolved is None:
                resolved = fields.resolve(record, path, line)
                seen_fields[str(path)] = {"text": resolved.text, "title": resolved.title, "url": resolved.url, "id": resolved.id}  # type: ignore[dict-item]
            if report is not None:
                report.documents_read += 1
            # A number is not a text (a mis-chosen field, or a broken export): refused, not indexed as "42".
            text = _str_field(record, resolved.text, path, line, required=True, numbers=False)  # type: ignore[arg-type]
            title = _str_field(record, resolved.title, path, line)  # type: ignore[arg-type]
            url = _str_field(record, resolved.url, path, line)  # type: ignore[arg-type]
            doc_id = (record_id(record[resolved.id], what=f"the id field {resolved.id!r}", path=path, line=line)
                      if resolved.id and record.get(resolved.id) is not None else "")  # (a float id: refused, not "1.5")
            if not doc_id.strip():
                doc_id = f"{prefix}:{line}"
            elif not one_token(doc_id):  # refused here, by line, rather than by `berds index` after the build
                raise InputError(f"the id {doc_id!r} (field {resolved.id!r}) holds {id_flaw(doc_id)}, which indexes and TREC "
                                 "run files cannot carry", path=path, line=line,
                                 fix="give records ids without spaces, tabs or line breaks, or name another field with --id-field")
            if html:
                page = clean_html(text, url=url)
                text, title = page.text, title or page.title
            if not text.split():
                if report is not None:
                    report.skip("empty text")
                continue
            if report is not None:
                report.documents_used += 1
            if position is not None:
                position["path"], position["line"] = path, line
            yield Document(id=doc_id, text=text, title=title, source=url or doc_id)
        if resolved is None:  # (an empty tsv is refused too)
            raise InputError("holds no records", path=path, fix="check the file (it is empty or only blank lines)")
    if report is not None:
        report.extra["jsonl_fields"] = seen_fields


def auto_id_prefixes(paths: Sequence[Path]) -> list[str]:
    """What names a record without an id (``<prefix>:<line>``): the file's stem, or where two inputs share a
    stem (``a/data.jsonl``, ``b/data.jsonl``), its path from their nearest common folder without the suffix
    (``a/data``, ``b/data``), so their records do not collide. The same file given twice gets one prefix (its
    records are then duplicates, and refused as such). Whitespace in a name becomes ``_``: an id with a space
    cannot be indexed (``my docs.jsonl`` gave ids ``my docs:1-0`` that `berds index` refused)."""
    stems = [_no_spaces(p.stem) for p in paths]
    out = list(stems)
    for stem in {s for s in stems if stems.count(s) > 1}:
        idx = [i for i, s in enumerate(stems) if s == stem]
        resolved = [paths[i].resolve() for i in idx]
        if len(set(resolved)) < 2:
            continue
        common = Path(os.path.commonpath([r.parent for r in resolved]))
        for i, r in zip(idx, resolved):
            out[i] = _no_spaces((r.parent.relative_to(common) / r.stem).as_posix())
    return out


def _no_spaces(name: str) -> str:
    return re.sub(r"\s", "_", name)  # (\s is str.isspace: what one_token refuses)


def _url_id(url: str) -> str:
    return hashlib.sha1(url.encode("utf-8")).hexdigest()[:16]


def _not_found(path: Path) -> str:
    # an unmatched shell glob reaches us as its literal text
    return "no file matches this pattern" if any(c in str(path) for c in "*?[") else "file not found"


def _check_warc_magic(path: Path) -> None:
    """Refuse a file that is not a WARC: warcio reads any text as headerless records and only warns."""
    import gzip

    with open(path, "rb") as f:
        head = f.read(2)
    try:
        with (gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")) as f:
            start = f.read(5)
    except (OSError, EOFError, zlib.error) as exc:  # EOFError: gzip cut short (click would call it a Ctrl-C)
        raise InputError(f"truncated or not a gzip WARC ({exc})", path=path, fix="pass .warc or .warc.gz files") from None
    if start != b"WARC/":
        raise InputError(f"not a readable WARC file (starts with {start!r}, expected b'WARC/')", path=path,
                         fix="pass .warc or .warc.gz files; jsonl records go through --jsonl")


_TRUNCATED_FIX = "is the file truncated? download it again"


def _check_record_complete(record, n: int, path: Path) -> None:
    """Read the rest of record ``n`` and refuse it when its block ends before its Content-Length."""
    stream = record.raw_stream
    declared = record.length
    header = (record.rec_headers.get_header("Content-Length") or "").strip()
    # warcio takes a missing or unreadable length as 0 (an empty block) or as "read to the end"
    if not header.isdigit() or declared is None or not hasattr(stream, "limit"):
        raise InputError(f"WARC record {n} has no valid Content-Length header (got {header!r})", path=path,
                         fix=_TRUNCATED_FIX)
    while stream.read(1 << 16):
        pass
    if stream.limit > 0:
        url = record.rec_headers.get_header("WARC-Target-URI")
        raise InputError(f"WARC record {n}{f' ({url})' if url else ''} ends after {declared - stream.limit:,} of the "
                         f"{declared:,} bytes its Content-Length gives", path=path, fix=_TRUNCATED_FIX)


def iter_warc_documents(paths: Sequence[str | os.PathLike], report: BuildReport | None = None, *,
                        raw_holder: list | None = None) -> Iterator[Document]:
    """Documents from WARC files (``.warc`` or ``.warc.gz``): cleaned HTML / plain-text responses.

    A record whose block is shorter than its Content-Length, a gzip stream that ends inside a record and a
    record warcio cannot parse are errors naming the file and the record (1-based, counting every record).
    """
    warcio = require("warcio.archiveiterator", extra="corpora", purpose="reading WARC files")
    seen: set[str] = set()

    class _CheckedArchiveIterator(warcio.ArchiveIterator):
        """Notes whether the last gzip member was whole: warcio ends quietly on a gzip stream cut short."""

        cut_short = False

        def close(self) -> None:
            decompressor = self.reader.decompressor if self.reader is not None else None
            if decompressor is not None and not decompressor.eof:
                self.cut_short = True
            super().close()

    def skip(reason: str) -> None:
        if report is not None:
            report.skip(reason)

    def _warc_document(record) -> Document | None:
        if record.rec_type != "response":
            return None  # request / metadata / warcinfo records are not documents
        if report is not None:
            report.documents_read += 1
        url = record.rec_headers.get_header("WARC-Target-URI") or ""
        http = record.http_headers
        status = http.get_statuscode() if http is not None else "200"
        if status != "200":
            skip(f"http status {status}")
            return None
        content_type = (http.get_header("Content-Type") if http is not None else "") or ""
        mime = content_type.split(";")[0].strip().lower()
        if mime not in HTML_TYPES and mime != "text/plain":
            skip(f"content type {mime or 'missing'}")
            return None
        if url in seen:
            skip("repeated url")
            return None
        seen.add(url)
        body = record.content_stream().read()
        text, _ = decode_html(body, content_type)
        title = ""
        if mime in HTML_TYPES:
            page = clean_html(text, url=url)
            text, title = page.text, page.title
        if not text.split():
            skip("no text after cleaning")
            return None
        if report is not None:
            report.documents_used += 1
        return Document(id=_url_id(url or record.rec_headers.get_header("WARC-Record-ID")), text=text, title=title, source=url)

    for path in map(Path, paths):
        if not path.is_file():
            raise InputError("is a folder; give the WARC files in it" if path.is_dir() else _not_found(path), path=path)
        _check_warc_magic(path)
        with open(path, "rb") as raw:
            if raw_holder is not None:
                raw_holder.append(raw)
            n = 0
            try:
                records = _CheckedArchiveIterator(raw)
                while True:
                    n += 1
                    try:
                        record = next(records)
                    except StopIteration:
                        break
                    except (AttributeError, TypeError, ValueError) as exc:  # warcio's parser on a malformed record
                        raise InputError(f"WARC record {n} cannot be read ({type(exc).__name__}: {exc}); a response "
                                         "record without a WARC-Target-URI header does this", path=path,
                                         fix="repair or drop that record (warcio's `warcio check` helps)") from None
                    doc = _warc_document(record)
                    _check_record_complete(record, n, path)  # before its document is used: a cut body is no page
                    if doc is not None:
                        yield doc
                # warcio ends quietly where a record's headers are cut off: bytes past the last whole record
                if records.offset < os.fstat(raw.fileno()).st_size:
                    raise InputError(f"the file ends inside WARC record {n} (its headers are cut off)", path=path,
                                     fix=_TRUNCATED_FIX)
                if records.cut_short:
                    raise InputError(f"the gzip stream is cut short after WARC record {n - 1}", path=path,
                                     fix=_TRUNCATED_FIX)
            except warcio.ArchiveLoadFailed as exc:
                at = f" at WARC record {n}" if n > 1 else ""
                raise InputError(f"not a readable WARC file{at} ({exc})", path=path, fix="pass .warc or .warc.gz files") from None
            except (EOFError, zlib.error) as exc:
                raise InputError(f"truncated or not a gzip WARC ({exc})", path=path, fix=_TRUNCATED_FIX) from None


def build_web(
    out: str | os.PathLike,
    *,
    jsonl: Sequence[str | os.PathLike] = (),
    warc: Sequence[str | os.PathLike] = (),
    fields: JsonlFields = JsonlFields(),
    html: bool = False,
    as_passages: bool = False,
    words_per_passage: int = DEFAULT_WORDS,
    overwrite: bool = False,
    resume: bool = False,
    shard_size: int = 1_000_000,
    compression: str = "none",
    progress: bool = True,
) -> tuple[PassageStore, BuildReport]:
    """Build a passage store from web jsonl files or WARC archives (not both at once)."""
    if bool(jsonl) == bool(warc):
        raise InputError("give jsonl files (--jsonl) or WARC files (--warc), one kind per build")
    if as_passages and warc:
        raise InputError("--as-passages applies to jsonl records only")
    if as_passages and words_per_passage != DEFAULT_WORDS:  # would be ignored silently: records are not split
        raise InputError("--words does not apply with --as-passages: each record is kept as one passage, not split",
                         fix="leave out --words (without --as-passages, records are split into --words-word passages)")
    if warc and (html or any(v is not None for v in vars(fields).values())):
        raise InputError("--html and the --*-field options apply to jsonl records only: WARC responses are cleaned "
                         "by their content type", fix="leave them out with --warc")
    paths = [Path(p) for p in (jsonl or warc)]
    for p in paths:
        if p.is_dir():
            pattern = f"{p}/*.jsonl" if jsonl else f"{p}/*.warc.gz"
            raise InputError("is a folder; give the files in it", path=p,
                             fix=f"pass a glob pattern in quotes, e.g. --{'jsonl' if jsonl else 'warc'} '{pattern}'")
        if not p.is_file():
            raise InputError(_not_found(p), path=p)
    resolved = [p.resolve() for p in paths]
    twice = next((p for p, r in zip(paths, resolved) if resolved.count(r) > 1), None)
    if twice is not None:  # (its records would fail as duplicate ids, on line 1 of a file that holds none twice)
        raise InputError("is given twice as input", path=twice, fix="name each input file once (check overlapping patterns)")
    out = Path(out)
    kind = "web (jsonl)" if jsonl else "web (WARC)"
    report = BuildReport(kind=kind, out=str(out))
    sizes = [p.stat().st_size for p in paths]
    if warc and 0 in sizes:  # (it failed as "starts with b'', expected b'WARC/'"; an empty jsonl says "holds no records")
        raise InputError("is empty (0 bytes)", path=paths[sizes.index(0)], fix="is the download unfinished? pass the whole file")
    total = sum(sizes)
    from rich.console import Console

    check_disk_and_announce(out, input_bytes=total, avg_passage_bytes=620.0 if jsonl else 620.0 * 3,
                            console=Console(stderr=True) if progress else None, compression=compression)
    raw_holder: list = []
    jsonl_at: dict = {}  # path and line of the record being written
    locate: Callable[[], dict] | None = None
    if jsonl:
        read_bytes = [0]
        docs = iter_jsonl_documents(paths, report, fields=fields, html=html, position=jsonl_at, read_bytes=read_bytes)

        def record_position() -> dict:  # a repeated id is reported at the record that repeats it
            return {**jsonl_at, "fix": "passage ids must be unique within a store: give each record a unique id "
                                       "(--id-field); records without an id are named <file stem>:<line>)"}

        locate = record_position
    else:
        docs = iter_warc_documents(paths, report, raw_holder=raw_holder)
    if as_passages:
        stream = ((Passage(id=d.id, text=d.text, title=d.title, source=d.source), None) for d in docs)
    else:
        stream = ((p, None) for d in docs for p in split_document(d, words_per_passage=words_per_passage))
    metadata = {
        "source": {"kind": kind, "paths": [str(p.resolve()) for p in paths], "bytes": total},
        "options": {"html": html, "as_passages": as_passages, "words_per_passage": words_per_passage,
                    "fields": {k: v for k, v in vars(fields).items() if v is not None}},
    }
    with BuildProgress(kind, total_bytes=total, enabled=progress) as bar:
        if jsonl:
            bar.position = lambda: read_bytes[0]
        else:
            def position() -> int:
                done = sum(sizes[: max(len(raw_holder) - 1, 0)])
                cur = raw_holder[-1] if raw_holder else None
                return done + (cur.tell() if cur is not None and not cur.closed else 0)
            bar.position = position
        store = write_passages(stream, out, report, progress=bar, overwrite=overwrite, resume=resume,
                               metadata=metadata, shard_size=shard_size, compression=compression, locate=locate)
    report.input_bytes = total
    return store, report
