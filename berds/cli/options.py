"""Option helpers shared by the commands: cut-off lists, number lists, and plain type names in help.

``--k 5 --k 10`` and ``--k 5,10`` mean the same; so do ``--lambdas 0.5 --lambdas 0.9`` and
``--lambdas 0.5,0.9``. Help shows ``PATH``, ``TEXT``, ``INT``, ``NUMBER`` — never Python types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

K_HELP = "Cut-offs: repeat (--k 5 --k 10) or give a comma list (--k 5,10)."
ALLOW_UNPARSED_HELP = ("Accept results although the judge's answers look broken: more than 5% neither Yes nor "
                       "No (counted as No) or not a plain Yes/No (read by the study's rule anyway), or not one Yes "
                       "(eval's table flags them, other commands say so in a note).")
ALLOW_SHORT_HELP = ("Score questions with fewer than k passages, or none: missing ranks count as unsupported, "
                    "so a question with no passages scores 0 (default: refuse them).")


def split_values(values: Iterable[Any] | str | None) -> list[str]:
    """Repeated values and comma lists flattened: ``["5,10", "20"]`` -> ``["5", "10", "20"]``. An empty item
    inside a list (``0.5,,0.9``, ``5,10,``) is refused: it is more often a value left out than a stray comma."""
    from berds.errors import BerdsError

    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out = []
    for v in values:
        parts = [part.strip() for part in str(v).split(",")]
        if len(parts) > 1 and "" in parts:
            raise BerdsError(f"empty item in the list {str(v)!r}: separate values with single commas, like 5,10")
        out.extend(part for part in parts if part)
    return out


def check_run_args(runs: Iterable[Any] | None) -> None:
    """``--k 5 10`` leaves 10 as a run argument, which then failed as 'no such run folder or file'."""
    from pathlib import Path

    from berds.errors import BerdsError

    for run in runs or ():
        if str(run).isdigit() and not Path(run).exists():
            raise BerdsError(f"{str(run)!r} is not a run folder or file — it looks like a cut-off: repeat --k "
                             f"(--k 5 --k {run}) or give a comma list (--k 5,{run})")


def parse_ks(values: Iterable[Any] | str | None, *, option: str = "--k") -> list[int]:
    """Cut-offs from ``--k`` values (repeated or comma lists); each a positive integer."""
    from berds.errors import BerdsError

    out = []
    for part in split_values(values):
        try:
            k = int(part)
        except ValueError:
            raise BerdsError(f"{option} takes positive integers (--k 5 --k 10 or --k 5,10), got {part!r}") from None
        if k < 1:
            raise BerdsError(f"{option} takes positive integers, got {k}")
        out.append(k)
    if not out:
        raise BerdsError(f"{option} needs at least one value")
    return out


def parse_floats(values: Iterable[Any] | str | None, *, option: str) -> list[float]:
    """Numbers from an option given repeatedly or as a comma list."""
    from berds.errors import BerdsError

    try:
        out = [float(part) for part in split_values(values)]
    except ValueError:
        raise BerdsError(f"{option} takes numbers, repeated or comma-separated like 0.5,0.75,0.9, "
                         f"got {values!r}") from None
    if not out:
        raise BerdsError(f"{option} is empty")
    return out


_PLAIN = {"str": "TEXT", "int": "INT", "float": "NUMBER", "Path": "PATH", "path": "PATH", "file": "FILE",
          "directory": "DIR"}


def plain_help_types() -> None:
    """Show ``PATH``/``TEXT``/``INT``/``NUMBER`` in help instead of typer's ``<list[Path]>``/``<bool>``.

    Flags show no type; a repeatable option shows its element type (its help says it repeats). A
    parameter's own ``metavar`` wins.
    """
    try:
        from typer import core
    except ImportError:  # pragma: no cover - typer without its own core keeps its defaults
        return
    base = getattr(core, "_TyperParameter", None)
    targets = [c for c in (getattr(core, "TyperOption", None), getattr(core, "TyperArgument", None)) if c]
    if not targets or getattr(core, "_berds_plain_types", False):
        return

    def display_type(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) or getattr(self, "is_bool_flag", False):
            return None
        if isinstance(getattr(self, "metavar", None), str) and not isinstance(self, core.TyperArgument):
            return self.metavar
        original = self._berds_display_type(ctx)
        if not original:
            return original
        label = original.strip("<>")
        while label.startswith("list[") and label.endswith("]"):
            label = label[5:-1]
        if label == "bool":
            return None
        if label.endswith(" range"):  # click's 'int range': the bounds follow in brackets ([x>=1])
            label = label[:-len(" range")]
        if "|" in label:
            return label
        return _PLAIN.get(label, label.upper())

    for cls in targets:
        if not hasattr(cls, "display_type"):
            continue
        cls._berds_display_type = cls.display_type
        cls.display_type = display_type
        if hasattr(cls, "display_type_rich"):
            cls.display_type_rich = display_type
    argument = getattr(core, "TyperArgument", None)
    if argument is not None and isinstance(getattr(argument, "display_name_raw", None), property):
        argument.display_name_raw = property(lambda self: self.metavar or self.name.upper())
        if hasattr(argument, "_usage_display_name"):  # click's style: RUNS..., [RUNS]...; not {runs}...
            argument._usage_display_name = lambda self: (
                (self.display_name_raw if self.required else f"[{self.display_name_raw}]")
                + ("..." if self.nargs != 1 else ""))
    core._berds_plain_types = True
    del base


def ks_callback(values: Any) -> list[int]:
    """typer callback for ``--k``: a bad value is a usage error naming the option (exit status 2)."""
    import typer

    from berds.errors import BerdsError

    try:
        return parse_ks(values)
    except BerdsError as exc:
        raise typer.BadParameter(str(exc)) from None


def floats_callback(values: Any) -> list[float]:
    """typer callback for number lists such as ``--lambdas``."""
    import typer

    from berds.errors import BerdsError

    try:
        return parse_floats(values, option="this option")
    except BerdsError as exc:
        raise typer.BadParameter(str(exc)) from None


def _writable(value: Any, *, folder: bool) -> Any:
    import typer

    from berds.errors import InputError
    from berds.io import check_writable

    if value is not None:
        try:
            check_writable(value, folder=folder)
        except InputError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def out_folder_callback(value: Any) -> Any:
    """typer callback for an ``--out`` folder: checked before the command starts its work (see check_writable)."""
    return _writable(value, folder=True)


def out_file_callback(value: Any) -> Any:
    """typer callback for an ``--out`` file (or a file stem such as ``X`` for ``X.json`` + ``X.md``)."""
    return _writable(value, folder=False)


def cache_file_callback(value: Any) -> Any:
    """typer callback for a ``--cache`` file: a typo must not quietly start an empty cache (and judge everything
    again with a GPU model). A cache is created only in a folder that exists, and creating one is said."""
    import typer

    if value is None:
        return value
    path = Path(value)
    if path.is_dir():
        raise typer.BadParameter(f"{path}: is a folder; --cache names the cache file (e.g. {path / 'judgements.sqlite'})")
    if not path.exists():
        if not path.parent.is_dir():
            raise typer.BadParameter(f"{path.parent}: no such folder — check --cache for a typo (a new cache is "
                                     "created only in a folder that exists)")
        from berds.io import print_note

        print_note(f"no cache at {path} yet: a new, empty one will be started there")
    return value


BATCH_TIMEOUT_HELP = ("With --engine ray: seconds a worker may hold batches without finishing one before it is taken "
                      "for hung, killed and replaced (its batches run elsewhere). Default: wait for ever. The first "
                      "batch on a worker includes loading its model.")


WORKERS_HELP = ("With --engine ray: how many workers to start, each holding one copy of the model (default: one per "
                "CPU of the cluster, or one per GPU for a GPU model). More than the cluster has room for is refused.")


def engine_for(engine: str, address: str | None, batch_timeout: float | None, workers: int | None = None) -> Any:
    """The engine ``--engine/--address/--batch-timeout/--workers`` name (``berds.engine.get_engine``)."""
    from berds.engine import get_engine
    from berds.errors import BerdsError

    ray_only = [flag for flag, value in (("--batch-timeout", batch_timeout), ("--workers", workers)) if value is not None]
    if ray_only and engine != "ray":
        raise BerdsError(f"{' and '.join(ray_only)} {'is' if len(ray_only) == 1 else 'are'} for --engine ray; got "
                         f"--engine {engine}, which runs every batch in this one process")
    options = {"batch_timeout": batch_timeout, "num_workers": workers}
    return get_engine(engine, address=address, **{k: v for k, v in options.items() if v is not None})


JUDGE_REQUIRED_HELP = ("Judge (required; `berds judges list`): a catalogue name, BACKEND:MODEL, debate:NAME or "
                       "calibrated:NAME. `embedded` is only a CPU smoke test.")


def require_judge(judge: str | None) -> str:
    """No silent default judge: results always say which judge made them, chosen by the user."""
    from berds.errors import BerdsError

    if not judge:
        raise BerdsError("choose a judge with --judge: mistral-berds (the study's evaluator, GPU), "
                         "gpt-4-oneshot (API), BACKEND:MODEL, or embedded (CPU smoke test, not validated; "
                         "never report its numbers) — `berds judges list` shows them all")
    return judge


def print_judge_warning(judge_id: str, *, unknown: bool = True) -> None:
    """A judge not validated on held-out human labels is named as such, with its measured figure (``unknown``:
    also a judge berds has no record of)."""
    from berds.io import print_note
    from berds.judges.validation import judge_warning

    warning = judge_warning(judge_id, unknown=unknown)
    if warning:
        print_note(warning, label="warning", style="bold yellow")  # wrapped at the width, as the tables
