"""HTML -> plain text, as the BERDS study did it: readability-lxml keeps the main content, html2text renders it.

One cleaner for every HTML source (search result pages, WARC records, jsonl records holding HTML), so
the same page gives the same passages whichever way it arrived. ``decode_html`` turns raw bytes into
text using, in order, the HTTP charset, a ``<meta charset>`` declaration, strict UTF-8, then a
statistical guess (charset-normalizer, which comes with requests).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from berds.lazy import require

CLEANER_VERSION = "readability+html2text/1"  # bump when the output of clean_html changes (invalidates caches)

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

        best = from_bytes(body[:200_000]).best()
        if best is not None and best.encoding:
            return body.decode(best.encoding, errors="replace"), best.encoding
    except ImportError:  # charset-normalizer ships with requests; be safe without it
        pass
    return body.decode("cp1252", errors="replace"), "cp1252"


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
