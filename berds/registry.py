"""Catalogues of named plug-ins (retrievers, judges, encoders, LLMs) with lazy loaders.

A catalogue holds declarative ``Spec`` entries: a name, a one-line description, and a loader given as a
``"module:attr"`` string. Listing a catalogue imports nothing heavy; the loader is imported only when
the entry is used. Third-party packages add entries through an entry-point group (e.g.
``berds.retrievers``) whose value is ``"module:attr"``, and any ``"module:attr"`` string works directly
as a name. Unknown names answer with "did you mean".
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, Mapping, Sequence, TypeVar

from berds.errors import BerdsError, UnknownNameError

T = TypeVar("T")


@dataclass(frozen=True)
class Spec:
    """A catalogue entry. ``loader`` is ``"module:attr"``; ``options`` are keyword defaults for it."""

    name: str
    loader: str
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    source: str = "built-in"  # "built-in", "entry point (<dist>)", or "module:attr"
    tags: tuple[str, ...] = ()


def import_object(path: str) -> Any:
    """Import ``"package.module:attr"`` (attr may be dotted). Errors name what failed and why."""
    if ":" not in path:
        raise BerdsError(f"{path!r} is not of the form 'package.module:attr'")
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise BerdsError(f"cannot import module {module_name!r} for {path!r}: {exc}{_import_hint(module_name, exc)}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BerdsError(f"module {module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


def _import_hint(module_name: str, exc: ImportError) -> str:
    """The `berds` console script does not search the current folder, so a package sitting there is not found."""
    import os

    top = module_name.split(".")[0]
    if getattr(exc, "name", None) != top or top in sys.modules:
        return ""
    if os.path.isdir(top) or os.path.isfile(f"{top}.py"):
        return (f" — {top!r} is in the current folder, which the `berds` command does not search: run "
                f"`PYTHONPATH=. berds ...` or install your package (`pip install -e .`)")
    return " — install it in this environment (`pip install ...`) or put it on PYTHONPATH"


def _check_option_names(factory: Any, options: dict[str, Any], where: str) -> None:
    """Options the call could not bind (a misspelt ``-o bogus=1``, a required one left out) are named here, with
    the accepted ones, instead of the TypeError traceback the call would end in."""
    import inspect

    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # no signature to check against: let the call decide
    params = [p for p in signature.parameters.values() if p.name != "self"]
    known = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        unknown = [k for k in options if k not in known]
        if unknown:
            raise BerdsError(f"{where} does not take option(s) {', '.join(map(repr, unknown))} "
                             f"(it takes: {', '.join(known) or 'none'}) — check the key=value options you passed")
    try:
        signature.bind(**options)
    except TypeError as exc:  # a required option missing, or one that is positional-only
        raise BerdsError(f"{where} cannot be built with {_shown(options) or 'no options'}: {exc} "
                         f"(it takes: {', '.join(known) or 'none'}) — check the key=value options you passed") from None


def _shown(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items())


def _own_packages(factory: Any) -> set[str]:
    """The top-level packages whose code is the plug-in's own: the factory's, and those of the classes it inherits
    from (a factory function in ``my_pkg`` may build a class from ``my_pkg.judges``)."""
    mro = getattr(factory, "__mro__", None) or (factory,)
    return {m.partition(".")[0] for m in (getattr(c, "__module__", None) for c in mro) if m and m != "builtins"}


def construct(factory: Any, options: dict[str, Any], where: str, *, given: dict[str, Any] | None = None) -> Any:
    """``factory(**options)`` under the plug-in error rule (CONTRIBUTING.md, "Plug-ins"); ``given`` are the
    options the user passed (``options`` also holds the catalogue's defaults).

    * options the call cannot bind: a one-line ``BerdsError`` before the call (``_check_option_names``);
    * a ``ValueError`` raised by the plug-in's own code (the innermost frame is in its package or that of a class
      it inherits from; builtins such as ``float()`` count as its own) while the user gave options: the
      constructor refusing a value, one line naming the plug-in, the options and the message;
    * anything else — a TypeError from inside (``None + 1``), a ValueError from a library the plug-in calls, any
      exception when no option was given: a bug inside the plug-in, whose author needs the traceback.
    """
    given = options if given is None else given
    _check_option_names(factory, options, where)
    try:
        return factory(**options)
    except ValueError as exc:
        if not given:
            raise
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is None or str(tb.tb_frame.f_globals.get("__name__")).partition(".")[0] not in _own_packages(factory):
            raise  # raised deeper, in a library the plug-in calls: keep the traceback
        import os

        at = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        raise BerdsError(f"{where} refused the option(s) {_shown(given)}: {exc} ({type(exc).__name__} at {at}) "
                         "— check the key=value options you passed") from None


class Catalogue(Generic[T]):
    """Named specs of one kind, with built-ins, entry points and ``module:attr`` names."""

    def __init__(self, kind: str, entry_point_group: str | None = None):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._specs: dict[str, Spec] = {}
        self._entry_points_loaded = False

    def __repr__(self) -> str:  # names only: listing is cheap, and a notebook shows what can be loaded
        names = self.names()
        shown = ", ".join(names[:12]) + (f", ... ({len(names) - 12} more)" if len(names) > 12 else "")
        return f"Catalogue({self.kind!r}, {len(names)} entries: {shown})"

    def register(self, spec: Spec, *, replace: bool = False) -> Spec:
        """Add ``spec``; a name already taken raises ``BerdsError`` unless ``replace``. Returns the spec."""
        if spec.name in self._specs and not replace:
            raise BerdsError(f"{self.kind} {spec.name!r} is already registered (pass replace=True to override)")
        self._specs[spec.name] = spec
        return spec

    def add(self, name: str, loader: str, description: str = "", **options: Any) -> Spec:
        """``register(Spec(name, loader, description, options))``: ``loader`` is ``"module:attr"``."""
        return self.register(Spec(name=name, loader=loader, description=description, options=options))

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded or not self.entry_point_group:
            return
        self._entry_points_loaded = True
        from importlib import metadata  # here, not at import: 20 ms every berds command would pay otherwise

        for ep in metadata.entry_points(group=self.entry_point_group):
            dist = getattr(ep, "dist", None)
            origin = f"entry point ({dist.name})" if dist is not None else "entry point"
            if ep.name in self._specs:
                if self._specs[ep.name].source == "built-in":  # (it was ignored without a word)
                    import warnings

                    warnings.warn(f"the {origin} {ep.name} = {ep.value} (group {self.entry_point_group}) has the name "
                                  f"of a built-in {self.kind}: the built-in one is used — give the plug-in another "
                                  "name", UserWarning, stacklevel=2)
                continue
            self._specs[ep.name] = Spec(name=ep.name, loader=ep.value, description="", source=origin)

    def specs(self) -> list[Spec]:
        """All known specs, built-ins first, then entry points, each sorted by name. Imports nothing."""
        self._load_entry_points()
        return sorted(self._specs.values(), key=lambda s: (s.source != "built-in", s.name))

    def names(self) -> list[str]:
        """The names of ``specs()``, in that order. Imports nothing."""
        return [s.name for s in self.specs()]

    def spec(self, name: str) -> Spec:
        """Resolve a name (or ``module:attr``) to its spec; unknown names raise with suggestions."""
        self._load_entry_points()
        if name in self._specs:
            return self._specs[name]
        if ":" in name and "/" not in name.split(":")[0]:
            return Spec(name=name, loader=name, source="module:attr")
        raise UnknownNameError(self.kind, name, list(self._specs))

    def load(self, name: str) -> Callable[..., T]:
        """Import and return the factory (class or function) behind ``name``."""
        return self._import(self.spec(name))

    def _import(self, spec: Spec) -> Any:
        try:
            return import_object(spec.loader)
        except BerdsError as exc:
            if spec.source.startswith("entry point"):  # name where the loader came from: a package's entry point
                raise BerdsError(f"{self.kind} {spec.name!r}, from the {spec.source} {spec.name} = {spec.loader} "
                                 f"(group {self.entry_point_group}): {exc}") from exc
            if spec.source != "module:attr":
                raise
            # 'pypi:model' or a misremembered name also looks like module:attr: name the catalogue too
            raise BerdsError(f"{exc}; and {spec.name!r} is not a known {self.kind} either (known: "
                             f"{', '.join(sorted(self._specs)) or 'none registered'})") from exc
        except Exception as exc:  # the plug-in's own bug while importing: its traceback stays, and says whose it is
            if spec.source.startswith("entry point"):
                exc.add_note(f"(while importing the {self.kind} {spec.name!r} from the {spec.source} "
                             f"{spec.name} = {spec.loader}, group {self.entry_point_group})")
            raise

    def create(self, name: str, **options: Any) -> T:
        """Build an instance: the spec's default options, overridden by ``options``."""
        spec = self.spec(name)
        factory = self._import(spec)
        return construct(factory, {**spec.options, **options}, f"{self.kind} {name!r}", given=options)

    def __iter__(self) -> Iterator[Spec]:
        return iter(self.specs())

    def __contains__(self, name: str) -> bool:
        self._load_entry_points()
        return name in self._specs


def parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``["batch_size=8", "adapter=/x"]`` -> ``{"batch_size": 8, "adapter": "/x"}`` (JSON values allowed):
    the ``-o key=value`` options every command passes to a catalogue entry."""
    import json

    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise BerdsError(f"option {item!r} must look like key=value")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if key in out and out[key] != parsed:  # (the last one silently won)
            raise BerdsError(f"option {key!r} is given twice with different values ({given[key]!r} and {item!r}) "
                             "— give it once")
        out[key], given[key] = parsed, item
    return out


def merge_options(options: dict[str, Any], flags: Mapping[str, tuple[str, Any]], *, what: str = "-o") -> dict[str, Any]:
    """``options`` (from ``-o key=value``) with the values of a command's own flags, ``{key: (flag, value)}``
    (``value`` None: the flag was not given). A key set both ways must have the same value: ``-o depth=20``
    was silently replaced by ``--depth``'s default before, and the manifest recorded the default. Returns
    ``options``, changed in place."""
    for key, (flag, value) in flags.items():
        if value is None:
            continue
        if key in options and options[key] != value and str(options[key]) != str(value):
            raise BerdsError(f"{key} is given twice with different values: {what} {key}={options[key]!r} and "
                             f"{flag} {value!r} — give it once")
        options[key] = value
    return options
