"""Keep credentials out of everything berds persists or shows.

Ids, descriptions, manifests, judgement caches, folder names and error messages are built from strings
a user typed: a ``base_url`` may carry ``user:KEY@`` or ``?api_key=KEY``, an option may be named
``hf_token``. Everything that becomes an id or lands in a file goes through ``redact_text`` /
``redact_url`` / ``redact_options`` first, and the ``openai`` backend builds its id from the host, port
and path only, so a cache key never depends on a key.

The redaction never changes a string that carries no credential, so ids of existing caches stay valid.
"""

from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "REDACTED"

# Name segments that mark a credential: ``api_key``, ``hf_token``, ``client-secret``, ``password``.
# ``max_tokens`` / ``tokenizer`` do not match (whole segments only), and ``*_env`` names hold the *name*
# of a variable, not its value, so they are kept.
_SECRET_SEGMENTS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential",
                              "credentials", "auth", "authorization", "sig", "signature", "bearer"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>\s*[=:]\s*)(?P<value>[^\s&;,'\"|)}\]]+)")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_KEPT_VALUES = frozenset({REDACTED.lower(), "bearer", "basic"})  # "Authorization: Bearer REDACTED" stays readable
_KEY_SHAPES = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}|\bhf_[A-Za-z0-9]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}")


def is_secret_name(name: str) -> bool:
    """True for option / parameter names that hold a credential (``api_key``, ``token``, ``x-api-key``)."""
    segments = [s for s in re.split(r"[_.\-\s]+", str(name).lower()) if s]
    if not segments or segments[-1] == "env":
        return False
    return any(s in _SECRET_SEGMENTS for s in segments) or "apikey" in "".join(segments)


def redact_url(url: str) -> str:
    """``url`` without its userinfo (``user:KEY@``) and with secret-named query values replaced."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:  # not a parseable URL: fall back to the text rules
        return _redact_loose(url)
    if not parts.scheme or not parts.netloc:
        return _redact_loose(url)
    netloc = parts.netloc.rpartition("@")[2]
    if host is not None and "@" in parts.netloc:
        netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_name(k) for k, _ in pairs):
            query = urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs], safe="/:,")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with every credential removed: URL userinfo and secret query values, ``api_key=...`` /
    ``token: ...`` assignments, ``Bearer ...`` headers and strings shaped like well-known API keys."""
    if not isinstance(text, str) or not text:
        return text
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    return _redact_loose(text)


# userinfo in a URL that does not parse (a bad port, an unclosed "["): everything between "//" and "@"
_LOOSE_USERINFO = re.compile(r"//[^\s/@]+@")


def _redact_loose(text: str) -> str:
    text = _LOOSE_USERINFO.sub("//", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _ASSIGNMENT.sub(
        lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}" if is_secret_name(m.group("name"))
        and m.group("value").lower() not in _KEPT_VALUES else m.group(0), text)
    return _KEY_SHAPES.sub(REDACTED, text)


def redact_options(value: Any) -> Any:
    """A copy of an options mapping (nested mappings and lists too) fit to persist: values under
    secret names become ``REDACTED``, and every string is passed through ``redact_text``."""
    if isinstance(value, Mapping):
        return {k: (REDACTED if is_secret_name(str(k)) and value[k] not in (None, "") else redact_options(value[k]))
                for k in value}
    if isinstance(value, (list, tuple)):
        items = [redact_options(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, str):
        return redact_text(value)
    return value


def url_credentials(url: str) -> tuple[str | None, str | None]:
    """The ``(user, password)`` a URL carries in its userinfo (percent-decoded), or ``(None, None)``."""
    from urllib.parse import unquote

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return None, None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return user or None, password or None
