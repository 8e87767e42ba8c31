"""Option values without pydantic at start-up: typer 0.29 coerces every value through a pydantic ``TypeAdapter``.

Importing pydantic and building an adapter per parameter cost every berds command ~0.08 s (``benchmarks/
bench_rerank.py --phases``), a tenth of a whole ``berds rerank``. ``fast_option_values`` gives typer's parameters a
coercion that returns, without pydantic, the values whose result is certain — a ``str`` for a ``str`` option, a
plain decimal for an ``int`` or ``float`` (inside its bounds), a path for a ``Path`` (typer's own path checks still
run) — and hands everything else (``" 5 "``, ``5.0`` for an int, an out-of-range number, a choice) to typer's own
adapter, built only then. Results and error messages are typer's either way
(``tests/test_cli_coercion.py`` compares both on every parameter of every command).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

_NOT_FAST = object()  # a value the fast path leaves to typer's adapter
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")  # canonical decimals: int() and pydantic's lax int agree
_FLOAT = re.compile(r"-?[0-9]{1,30}(?:\.[0-9]{1,30})?(?:[eE][-+]?[0-9]{1,3})?")


def _int_value(value: Any) -> Any:
    if type(value) is int:
        return value
    if type(value) is str and _INT.fullmatch(value):
        return int(value)
    return _NOT_FAST


def _float_value(value: Any) -> Any:
    if type(value) is float and value == value and value - value == 0.0:  # finite: nan and inf go to pydantic
        return value
    if type(value) is int:
        return float(value)
    if type(value) is str and _FLOAT.fullmatch(value):
        return float(value)
    return _NOT_FAST


def _str_value(value: Any) -> Any:
    return value if type(value) is str else _NOT_FAST


def _bounded(convert: Callable[[Any], Any], low: Any, high: Any) -> Callable[[Any], Any]:
    """A number inside ``[low, high]``; one outside (refused or clamped) goes to typer's adapter and its message."""
    def value_in_range(value: Any) -> Any:
        number = convert(value)
        if number is _NOT_FAST or (low is not None and number < low) or (high is not None and number > high):
            return _NOT_FAST
        return number
    return value_in_range


def _leaf(annotation: Any, info: Any) -> Callable[..., Any] | None:
    """The fast coercion of one value of ``annotation`` (called with value, param, ctx), or None: typer's always."""
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    if annotation is str:
        return lambda value, param, ctx: _str_value(value)
    if annotation is bool:  # (flags: --help, --install-completion, a --x/--no-x pair; a text value goes to typer's)
        return lambda value, param, ctx: value if type(value) is bool else _NOT_FAST
    if annotation in (int, float):
        convert = _int_value if annotation is int else _float_value
        if info.min is not None or info.max is not None:
            convert = _bounded(convert, info.min, info.max)
        return lambda value, param, ctx: convert(value)
    if annotation is Path and info.path_type is None:
        from typer._param_types import coerce_cli_path

        def path_value(value: Any, param: Any, ctx: Any) -> Any:
            if type(value) is not str and not isinstance(value, Path):
                return _NOT_FAST
            # typer's own checks (exists, file_okay, ...) and messages; pydantic would only have made the Path
            return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
        return path_value
    return None


def _fast_coercion(annotation: Any, info: Any) -> Callable[..., Any] | None:
    from typing import get_args, get_origin

    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        leaf = _leaf(item_type, info)
        if leaf is None:
            return None

        def list_value(value: Any, param: Any, ctx: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                return _NOT_FAST
            items = [leaf(item, param, ctx) for item in value]
            return _NOT_FAST if any(item is _NOT_FAST for item in items) else items
        return list_value
    return _leaf(annotation, info)


def fast_option_values() -> None:
    """Give typer's parameters the fast coercion (once); a typer without these internals keeps its own."""
    try:
        from dataclasses import dataclass

        from typer import BadParameter as bad_parameter
        from typer import _coercion, core
    except ImportError:  # pragma: no cover - another typer: its own coercion
        return
    parameter = getattr(core, "_TyperParameter", None)
    runtime = getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if parameter is None or runtime is None or build is None or not hasattr(parameter, "get_runtime_param"):
        return  # pragma: no cover - another typer
    if getattr(parameter, "_berds_fast_values", False):
        return

    @dataclass(frozen=True)
    class FastRuntimeParam(runtime):  # type: ignore[misc, valid-type]
        """typer's ``RuntimeParam`` that answers plain values itself and asks typer's adapter for the rest."""

        fast: Callable[..., Any]
        descriptor: Any

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                got = self.fast(value, param, ctx)
            except bad_parameter:  # typer's own path checks refusing the value: typer's message
                raise
            except Exception:  # a typer whose internals moved under the fast path: its own answer instead
                got = _NOT_FAST
            if got is not _NOT_FAST:
                return got
            slow = self.__dict__.get("_slow")
            if slow is None:
                slow = build(self.descriptor)
                object.__setattr__(self, "_slow", slow)
            return slow._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            try:
                descriptor = self.type_descriptor
                fast = None if descriptor.file_annotation is not None else _fast_coercion(
                    descriptor.annotation, descriptor.parameter_info)
                if fast is not None:
                    self._runtime_param = FastRuntimeParam(annotation=descriptor.annotation,
                                                           parameter_info=descriptor.parameter_info,
                                                           fast=fast, descriptor=descriptor)
            except Exception:  # (a typer whose descriptors or RuntimeParam changed: typer's own coercion)
                self._runtime_param = None
        return typer_get_runtime_param(self)

    typer_get_runtime_param = parameter.get_runtime_param
    parameter.get_runtime_param = get_runtime_param
    parameter._berds_fast_values = True
