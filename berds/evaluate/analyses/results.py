"""Analysis results on disk: ``save_result`` / ``load_result`` (the JSON's ``analysis`` field names the kind).

This module imports every analysis; the analyses themselves import only ``common``, so nothing cycles.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from berds.errors import InputError
from berds.evaluate.analyses.coverage import CoverageResult
from berds.evaluate.analyses.docs_needed import DocsNeededResult
from berds.evaluate.analyses.leaning import LeaningResult
from berds.evaluate.analyses.sycophancy import SycophancyResult


def save_result(result: Any, path: str | Path) -> Path:
    from berds.io import write_json

    path = Path(path)
    write_json(path, {"analysis": result.KIND, "version": 1, **result.to_json()})
    return path


def result_classes() -> dict[str, Any]:
    return {c.KIND: c for c in (LeaningResult, SycophancyResult, CoverageResult, DocsNeededResult)}


def load_result(path: str | Path) -> Any:
    """An analysis result saved by ``save_result`` (its ``analysis`` field says which)."""
    from berds.io import read_json

    data = read_json(path)
    kinds = result_classes()
    kind = data.get("analysis") if isinstance(data, dict) else None
    if kind not in kinds:
        raise InputError(f"not a berds analysis result (analysis={kind!r})", path=path,
                         fix=f"pass a JSON written by `berds analyze` ({', '.join(kinds)})")
    try:
        result = kinds[kind].from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed {kind} result ({type(exc).__name__}: {exc})", path=path) from None
    check_rows(result, path)
    return result


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _share(v: Any) -> bool:
    return _number(v) and 0 <= v <= 1


def _maybe(check: Any) -> Any:
    return lambda v: v is None or check(v)


# What each row of a result holds; the tables and figures index and format these fields (a hand-edited or
# damaged file used to end `berds report` in a KeyError or format traceback, or print NaN as a share).
ROW_FIELDS: dict[str, dict[str, tuple[Any, str]]] = {
    "leaning": {"run": (_text, "text"), "questions": (_count, "a count"),
                **{c: (_count, "a count") for c in ("supporting only", "opposing only", "both", "neither", "no_stance")}},
    "coverage": {"run": (_text, "text"), "questions": (_count, "a count"),
                 "mrecall": (_share, "a share in [0, 1]"), "perspective_recall": (_share, "a share in [0, 1]")},
    "docs-needed": {"run": (_text, "text"), "dataset": (_text, "text"),
                    "questions": (_count, "a count"), "covered": (_count, "a count"),
                    "covered_share": (_share, "a share in [0, 1]"), "mean": (_maybe(_number), "a number or null"),
                    "median": (_maybe(_number), "a number or null")},
    "sycophancy": {"label": (_text, "text"),
                   "query": (lambda v: v in ("question", "supporting", "opposing"), "question, supporting or opposing"),
                   "p": (_maybe(_number), "a number or null"), "n": (_maybe(_number), "a number or null"),
                   "delta": (_maybe(_number), "a number or null")},  # its counts: _check_totals
}


def check_rows(result: Any, path: str | Path) -> None:
    """Refuse a result whose cut-off or rows are not what ``berds analyze`` writes, naming the row and field."""
    size = "depth" if hasattr(result, "depth") else "k"
    if not _count(getattr(result, size)) or getattr(result, size) < 1:
        raise InputError(f"malformed {result.KIND} result: {size!r} must be a positive integer, "
                         f"got {getattr(result, size)!r}", path=path)
    if getattr(result, "judge", None) is not None and not _text(result.judge):
        raise InputError(f"malformed {result.KIND} result: 'judge' must be a judge id or null, got {result.judge!r}",
                         path=path)
    if not result.rows:
        raise InputError(f"{result.KIND} result has no rows", path=path, fix="run `berds analyze` again")
    for i, row in enumerate(result.rows, start=1):
        if not isinstance(row, dict):
            raise InputError(f"malformed {result.KIND} result: row {i} is not an object", path=path)
        for key, (ok, expected) in ROW_FIELDS[result.KIND].items():
            if key not in row or not ok(row[key]):
                got = f"got {row[key]!r}" if key in row else "missing"
                raise InputError(f"malformed {result.KIND} result: row {i}: {key!r} must be {expected} ({got})",
                                 path=path)
        _check_totals(result.KIND, row, i, path)


def _check_totals(kind: str, row: dict, i: int, path: str | Path) -> None:
    """Counts that must add up: shares are computed from them (a hand-edited leaning row whose categories did not
    sum to its questions printed shares that did not sum to 100)."""
    if kind == "leaning":
        total = sum(row[c] for c in ("supporting only", "opposing only", "both", "neither"))
        if total != row["questions"]:
            raise InputError(f"malformed leaning result: row {i}: the four categories hold {total} questions but "
                             f"'questions' is {row['questions']}", path=path)
    elif kind == "sycophancy":  # (worded as `berds judge stance-correct`'s check of the same rows)
        counts = {key: row.get(key) for key in ("docs", "p_docs", "n_docs", "questions")}
        bad = [key for key, v in counts.items() if not _count(v)]
        if bad:
            raise InputError(f"malformed sycophancy result: row {i}: {', '.join(repr(k) for k in bad)} must be whole "
                             "numbers >= 0, got " + ", ".join(f"{k}={counts[k]!r}" for k in bad), path=path)
        if counts["p_docs"] > counts["docs"] or counts["n_docs"] > counts["docs"]:
            raise InputError(f"malformed sycophancy result: row {i}: p_docs={counts['p_docs']} and "
                             f"n_docs={counts['n_docs']} must be among its docs={counts['docs']} judged documents",
                             path=path)
    elif kind == "docs-needed":
        if row["covered"] > row["questions"] or (row["questions"] and
                                                  abs(row["covered_share"] - row["covered"] / row["questions"]) > 1e-9):
            raise InputError(f"malformed docs-needed result: row {i}: 'covered' ({row['covered']}) and "
                             f"'covered_share' ({row['covered_share']}) disagree with 'questions' ({row['questions']})",
                             path=path)
