"""HTML -> plain text, as the BERDS study did it: readability-lxml keeps the main content, html2text renders it.

One cleaner for every HTML source (search result pages, WARC records, jsonl records holding HTML), so
the same page gives the same passages whichever way it arrived. ``decode_html`` turns raw bytes into
text using, in order, a byte-order mark, the HTTP charset, a ``<meta charset>`` declaration, strict UTF-8,
then a statistical guess (charset-normalizer, which comes with requests) that prefers windows-1252 — the
web's default for undeclared pages — whenever the detector finds it about as plausible as its own pick.
Declared charsets follow the WHATWG encoding rules where Python's codecs differ: a name that is not a text
encoding (``zlib``, ``base64``, ``rot13``, ``undefined``...) is ignored like an unknown one, and a
``<meta>``-declared UTF-16 means UTF-8. ``sniff_binary`` tells binary bodies from text (WHATWG MIME Sniffing).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from berds.lazy import require

# Bump when the text made from a body changes (invalidates cleaned-text caches). /2: undeclared Western pages
# decode as windows-1252. /3: <meta> UTF-16 means UTF-8, a BOM wins, binary bodies typed as HTML give no text.
CLEANER_VERSION = "readability+html2text/3"

WESTERN_CHAOS_MARGIN = 0.1  # how much less "coherent" windows-1252 may look than the detector's best guess

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]+)""", re.IGNORECASE)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9_:.\-]+)""", re.IGNORECASE)


@dataclass(frozen=True)
class CleanedPage:
    """The readable part of a page: its title and its text (paragraphs separated by blank lines)."""

    title: str
    text: str


# Python text codecs no web charset label names (WHATWG): each would decode a page into something else or fail.
_NOT_WEB_CODECS = {"undefined", "punycode", "idna", "unicode-escape", "raw-unicode-escape", "utf-7", "charmap"}
_BOM_CODECS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _codec(name: str | None) -> str | None:
    """The codec a charset label names, or None when it names none or no text encoding (bytes-to-bytes
    codecs such as zlib or base64 raise LookupError on ``bytes.decode``)."""
    if not name:
        return None
    try:
        info = codecs.lookup(name.strip())
    except LookupError:
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_WEB_CODECS:
        return None
    return info.name


def _bom_codec(body: bytes) -> str | None:
    return next((codec for bom, codec in _BOM_CODECS if body.startswith(bom)), None)


def charset_from_content_type(content_type: str | None) -> str | None:
    """The charset named in a Content-Type header (normalised codec name), or None."""
    if not content_type:
        return None
    m = _HEADER_CHARSET.search(content_type)
    return _codec(m.group(1)) if m else None


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode a page body; returns ``(text, encoding_used)``. Never raises on odd bytes."""
    bom = _bom_codec(body)
    if bom:  # a byte-order mark outranks every declaration (WHATWG "decode")
        return body.decode(bom, errors="replace"), bom
    candidates = [charset_from_content_type(content_type)]
    m = _META_CHARSET.search(body[:8192])
    meta = _codec(m.group(1).decode("ascii", "ignore")) if m else None
    # A page that could be read to find its <meta> is ASCII-compatible, so a UTF-16 label there is wrong (WHATWG).
    candidates.append("utf-8" if meta and meta.startswith("utf-16") else meta)
    for enc in candidates:
        if enc:
            try:
                return body.decode(enc), enc
            except UnicodeError:
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
HTML_TYPES = ("text/html", "application/xhtml+xml")


def sniff_binary(body: bytes, mime: str = "", *, charset: str | None = None) -> str | None:
    """The type of a binary ``body`` served without a Content-Type, as text/plain or as HTML, else None.

    Untyped and text/plain bodies follow the WHATWG MIME Sniffing rules: a byte-order mark means text; a known
    magic number names the format; any binary data byte in the first 1,445 bytes means
    application/octet-stream. Bodies typed as HTML are held to less (a page may hold odd control bytes): only
    a magic number, or a NUL byte in the first KB unless a BOM or a ``charset`` of UTF-16/32 explains it.
    """
    html = mime in HTML_TYPES
    if mime and mime != "text/plain" and not html:
        return None
    head = body[:1445]
    if head.startswith(_BOMS):
        return None
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if html:
        wide = (_codec(charset) or "").startswith(("utf-16", "utf-32"))
        return "application/octet-stream" if b"\x00" in body[:1024] and not wide else None
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
