"""Lazy imports of heavy optional dependencies, with an install hint when they are missing.

Nothing heavy (torch, transformers, faiss, pyserini, Java, ray, vllm) is imported at ``import berds``;
modules call ``require("faiss", extra="dense")`` at the point of use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from berds.errors import MissingExtraError


def require(module: str, *, extra: str, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise a ``MissingExtraError`` that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        missing = getattr(exc, "name", None) or ""
        if missing and missing.split(".")[0] != top:
            # The module exists but one of *its* dependencies is broken: show that instead.
            raise MissingExtraError(missing, extra, purpose or module) from exc
        raise MissingExtraError(module, extra, purpose) from exc


def quiet_model_loading() -> None:
    """Keep Hugging Face's download and weight-loading bars out of berds' own progress bars."""
    import os
    import sys

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:
        hf_logging.disable_progress_bar()
