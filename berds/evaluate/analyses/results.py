"""Analysis results on disk: ``save_result`` / ``load_result`` (the JSON's ``analysis`` field names the kind).

This module imports every analysis; the analyses themselves import only ``common``, so nothing cycles.
"""

from __future__ import annotations

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
        return kinds[kind].from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed {kind} result ({type(exc).__name__}: {exc})", path=path) from None
