"""User-facing errors.

Every problem a user can fix (bad input file, unknown name, missing extra) is raised as a
``BerdsError`` whose message says *where* (file, line, record) and *what to do*. The CLI prints
the message on one line and exits with status 2; Python callers can catch ``BerdsError``.
"""

from __future__ import annotations

import re
from pathlib import Path


class BerdsError(Exception):
    """An error with a message meant for the user, not a traceback."""


class InputError(BerdsError):
    """Bad input data: names the file, the line (1-based) or record, what was expected, and the fix."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        record: str | None = None,
        fix: str | None = None,
    ):
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if record is not None:
            where.append(f"record {record!r}")
        text = (": ".join([", ".join(where), message]) if where else message)
        if fix:
            text += f" — {fix}"
        super().__init__(text)
        self.path, self.line, self.record, self.fix = path, line, record, fix


class UnknownNameError(BerdsError):
    """An unknown registry name; the message carries "did you mean" suggestions."""

    def __init__(self, kind: str, name: str, known: list[str]):
        import difflib

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        listing = ", ".join(sorted(known)) if known else "(none registered)"
        super().__init__(f"unknown {kind} {name!r}.{hint} Known {kind}s: {listing}")
        self.kind, self.name, self.suggestions = kind, name, close


class MissingExtraError(BerdsError):
    """A heavy optional dependency is not installed."""

    def __init__(self, module: str, extra: str, purpose: str = ""):
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(
            f"the Python package {module!r} is not installed{what} — "
            f"install it with: pip install 'berds[{extra}]'"
        )
        self.module, self.extra = module, extra


# " (ks=)", " (allow_short=True)": the API's keyword beside an option's name in an error message
_KEYWORD_HINT = re.compile(r" \([a-z][a-z0-9_]*=(?:True|False)?\)")


def command_line_wording(message: str) -> str:
    """``message`` as the command line prints it: without the Python keyword hints the API's errors carry beside
    an option (``--k values (ks=)``, ``--allow-short (allow_short=True)``), which a shell user cannot pass and
    would retry with. The API keeps them (a notebook user passes ``ks=``, not ``--k``)."""
    return _KEYWORD_HINT.sub("", message) if "--" in message else message
