"""HTML -> plain text, as the BERDS study did it: readability-lxml keeps the main content, html2text renders it.

One cleaner for every HTML source (search result pages, WARC records, jsonl records holding HTML), so
the same page gives the same passages whichever way it arrived. ``decode_html`` turns raw bytes into
text using, in order, the HTTP charset, a ``<meta charset>`` declaration, strict UTF-8, then a
statistical guess (charset-normalizer, which comes with requests) that prefers windows-1252 — the web's
default for undeclared pages — whenever the detector finds it about as plausible as its own pick.
``sniff_binary`` tells binary bodies served without a type from text (WHATWG MIME Sniffing).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from berds.lazy import require

CLEANER_VERSION = "readability+html2text/2"  # /2: undeclared Western pages decode as windows-1252  # bump when the output of clean_html changes (invalidates caches)

WESTERN_CHAOS_MARGIN = 0.1  # how much less "coherent" windows-1252 may look than the detector's best guess

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]+)""", re.IGNORECASE)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9_:.\-]+)""", re.IGNORECASE)


@dataclass(frozen=True)
class CleanedPage:
    """The readable part of a page: its title and its text (paragraphs separated by blank lines)."""

    title: str
    text: str


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        return None


def charset_from_content_type(content_type: str | None) -> str | None:
    """The charset named in a Content-Type header (normalised codec name), or None."""
    if not content_type:
        return None
    m = _HEADER_CHARSET.search(content_type)
    return _codec(m.group(1)) if m else None


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode a page body; returns ``(text, encoding_used)``. Never raises on odd bytes."""
    candidates = [charset_from_content_type(content_type)]
    m = _META_CHARSET.search(body[:8192])
    candidates.append(_codec(m.group(1).decode("ascii", "ignore")) if m else None)
    for enc in candidates:
        if enc:
            try:
                return body.decode(enc), enc
            except UnicodeDecodeError:
                continue  # the declaration lies; fall through to detection
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # charset-normalizer ships with requests; be safe without it
        return body.decode("cp1252", errors="replace"), "cp1252"
    matches = from_bytes(body[:200_000])
    best = matches.best()
    if best is None or not best.encoding:
        return body.decode("cp1252", errors="replace"), "cp1252"
    # Short Western pages are ambiguous between single-byte code pages (é in latin-1 is ę in cp1257): the
    # detector's pick among near-equals is close to a coin toss. Browsers (WHATWG encoding standard) read an
    # undeclared page as windows-1252; do the same whenever the detector finds it about as plausible.
    for match in matches:
        western = {"cp1252", "latin_1", "iso8859_15"} & set(match.could_be_from_charset)
        if western and match.chaos <= best.chaos + WESTERN_CHAOS_MARGIN:
            return body.decode("cp1252", errors="replace"), "cp1252"
    return body.decode(best.encoding, errors="replace"), best.encoding


# Magic numbers of the binary formats search results most often point to (WHATWG MIME Sniffing, §6).
_MAGIC = (
    (b"%PDF-", "application/pdf"), (b"\x89PNG\r\n\x1a\n", "image/png"), (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"), (b"\xff\xd8\xff", "image/jpeg"), (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b\x08", "application/gzip"), (b"RIFF", "application/octet-stream"), (b"\x00\x00\x01\x00", "image/x-icon"),
    (b"\xd0\xcf\x11\xe0", "application/msword"), (b"OggS", "application/ogg"), (b"ID3", "audio/mpeg"),
)
_BOMS = (b"\xef\xbb\xbf", b"\xfe\xff", b"\xff\xfe")
# WHATWG's "binary data bytes": control characters that never occur in text.
_BINARY_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])


def sniff_binary(body: bytes, mime: str = "") -> str | None:
    """The type of a binary ``body`` served without a Content-Type (or as text/plain), else None.

    Follows the WHATWG MIME Sniffing rules for such resources: a byte-order mark means text; a known magic
    number names the format; any binary data byte in the first 1,445 bytes means application/octet-stream.
    Bodies typed as HTML are trusted (a page may legitimately hold odd bytes deep inside).
    """
    if mime and mime != "text/plain":
        return None
    head = body[:1445]
    if head.startswith(_BOMS):
        return None
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if any(b in _BINARY_BYTES for b in head):
        return "application/octet-stream"
    return None


def _html2text(fragment: str) -> str:
    html2text = require("html2text", extra="corpora", purpose="turning HTML into text")
    h = html2text.HTML2Text()
    h.ignore_links = True  # "[text](url)" would put urls into passages
    h.ignore_images = True
    h.ignore_emphasis = True
    h.ignore_tables = False
    h.body_width = 0  # no hard wrapping; the splitter works on words anyway
    h.unicode_snob = True  # keep "é", not "e"
    return h.handle(fragment)


def clean_html(html: str, *, url: str = "") -> CleanedPage:
    """Main content of an HTML page as text: readability-lxml's summary rendered by html2text.

    Pages readability cannot parse (empty, not HTML at all) give an empty text; callers count them as
    skipped ("no text after cleaning").
    """
    readability = require("readability", extra="corpora", purpose="extracting the main content of web pages")
    if not html or not html.strip():
        return CleanedPage("", "")
    from lxml import etree
    from readability.readability import Unparseable

    try:
        doc = readability.Document(html, url=url or None)
        summary = doc.summary(html_partial=True)
        title = doc.short_title() or ""
    except (Unparseable, etree.ParserError, etree.XMLSyntaxError, ValueError):
        return CleanedPage("", "")  # junk readability cannot parse: the page simply has no text
    text = _html2text(summary)
    # Collapse the blank-line runs html2text leaves between blocks; words are what matter downstream.
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    title = " ".join(title.split())
    if title == "[no-title]":  # readability's placeholder
        title = ""
    return CleanedPage(title=title, text=text)
