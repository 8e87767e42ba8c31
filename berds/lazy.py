"""Lazy imports of heavy optional dependencies, with an install hint when they are missing.

Nothing heavy (torch, transformers, faiss, pyserini, Java, ray, vllm) is imported at ``import berds``;
modules call ``require("faiss", extra="dense")`` at the point of use.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from berds.errors import BerdsError, MissingExtraError


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


@contextmanager
def quiet_model_loading() -> Iterator[None]:
    """For the block: no Hugging Face download or weight-loading bars (they would print into berds' own
    progress bars). Each library's setting is put back afterwards, so a program that uses berds keeps its
    own bars; an ``HF_HUB_DISABLE_PROGRESS_BARS`` set in the environment is the user's choice and is left to rule."""
    import os
    import sys

    try:
        from huggingface_hub import utils as hub
    except ImportError:  # (no hub, no transformers: nothing prints a bar)
        yield
        return
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") is not None:
        yield
        return
    hub_was_on = not hub.are_progress_bars_disabled()
    hf_logging = sys.modules.get("transformers.utils.logging")
    # transformers takes the hub's setting when it is first imported (inside the block, typically)
    transformers_was_on = hf_logging.is_progress_bar_enabled() if hf_logging is not None else hub_was_on
    hub.disable_progress_bars()
    if hf_logging is not None:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging = sys.modules.get("transformers.utils.logging")
        if hf_logging is not None and transformers_was_on:
            hf_logging.enable_progress_bar()  # (this also turns the hub's bars on: set just below)
        if hub_was_on:
            hub.enable_progress_bars()
        else:
            hub.disable_progress_bars()


def check_device(device: str) -> None:
    """A one-line error for a device torch cannot use (instead of a CUDA assertion deep in torch)."""
    torch = require("torch", extra="dense", purpose="dense encoders")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BerdsError(f"device {device!r} asked for, but torch sees no CUDA GPU here — ask for device cpu "
                             "(--device cpu, or -o device=cpu for a judge; or install a CUDA build of torch on a GPU machine)")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise BerdsError(f"device {device!r} asked for, but only {torch.cuda.device_count()} GPU(s) are visible")
    elif device not in ("cpu", "mps"):
        raise BerdsError(f"unknown device {device!r}; use cpu, cuda or cuda:N")


@contextmanager
def quiet_peft() -> Iterator[None]:
    """peft (0.21) reads transformers' old ``is_gradient_checkpointing`` name when it wraps a model, and transformers 5
    prints a FutureWarning for it on every adapter load or LoRA set-up: a notice for peft's authors, not the user."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.* is deprecated", category=FutureWarning)
        yield
