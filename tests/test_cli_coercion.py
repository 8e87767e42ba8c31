"""Option values coerced without pydantic (berds/cli/coercion.py) come out exactly as typer's own adapters make them.

Every parameter of every command gets a battery of values, canonical and odd; the fast path's answer (value and
type, or the error message) must equal typer's. A command run in a fresh process must not import pydantic.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _parameters():
    import typer.main

    from berds.cli import app

    def walk(command, path):
        for param in command.params:
            if hasattr(param, "type_descriptor"):
                yield " ".join(path), command, param
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), ["berds"]))


def _values(tmp: Path) -> list:
    (tmp / "file.txt").write_text("x")
    (tmp / "folder").mkdir()
    one = ["abc", "", " x ", "5", "-3", "0", "007", " 5 ", "5.0", "1_000", "+4", "99999999999999999999", "0.5", "1e3",
           "-2.5e-3", "1.", ".5", "inf", "nan", "true", "no", 5, 0, -1, 0.5, 2.0, float("nan"), True, False,
           str(tmp / "file.txt"), str(tmp / "folder"), str(tmp / "missing"), tmp / "file.txt"]
    return one + [("5", "abc"), ("1", "2"), (str(tmp / "file.txt"),), ("0.5", "x"), ()]


def _outcome(runtime, value, param, ctx):
    import typer

    try:
        got = runtime.coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        return "error", exc.format_message()
    items = got if isinstance(got, (list, tuple)) else [got]
    return "value", repr(got), type(got), [type(x) for x in items]  # (repr: nan equals nan)


def test_fast_values_equal_typers_own_on_every_parameter(tmp_path):
    from typer import _coercion
    from typer._click import Context

    values = _values(tmp_path)
    params = _parameters()
    assert len(params) > 300  # (the whole CLI: a walk that found nothing would pass)
    fast_answers = 0
    for where, command, param in params:
        ctx = Context(command)
        param._runtime_param = None
        fast = param.get_runtime_param()
        own = _coercion.build_runtime_param(param.type_descriptor)
        for value in values:
            if param.type_descriptor.annotation is bool and isinstance(value, bool):
                continue  # (typer itself never coerces a flag's bool)
            expected = _outcome(own, value, param, ctx)
            got = _outcome(fast, value, param, ctx)
            assert got == expected, f"{where} {param.name} {value!r}: {got} != typer's {expected}"
            fast_answers += type(fast).__name__ == "FastRuntimeParam" and "_slow" not in vars(fast)
    assert fast_answers > 1000  # most parameters take the fast path for the canonical values


def test_a_command_imports_no_pydantic(tmp_path):
    from berds.corpora.docstore import write_passage_store
    from berds.types import Passage

    write_passage_store([Passage("p1", "A text.", "T"), Passage("p2", "Another.")], tmp_path / "store")
    script = textwrap.dedent(f"""
        import sys
        from berds.cli import main
        for args in (["corpus", "info", {str(tmp_path / "store")!r}], ["corpus", "show", {str(tmp_path / "store")!r}, "p1", "p2"]):
            try:
                main(args)
            except SystemExit as exc:
                assert not exc.code, exc.code
        # every parameter answering canonical values: ints, numbers, paths, lists
        import typer.main
        from typer._click import Context
        from berds.cli import app
        def walk(command):
            yield from ((command, p) for p in command.params if hasattr(p, "type_descriptor"))
            for sub in getattr(command, "commands", {{}}).values():
                yield from walk(sub)
        for command, param in walk(typer.main.get_command(app)):
            annotation, low = param.type_descriptor.annotation, param.type_descriptor.parameter_info.min
            value = {{int: str(low or 1), float: str(low or 0.5), str: "x"}}.get(annotation)
            if value is not None:
                param.get_runtime_param().coerce(value, param=param, ctx=Context(command))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "pydantic"))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


@pytest.mark.parametrize("value", ["0", "3", "-3"])
def test_a_bounded_int_out_of_range_gets_typers_message(value):
    import typer
    from typer._click import Context

    found = [(c, p) for w, c, p in _parameters() if w == "berds eval" and p.name == "workers"]
    command, param = found[0]
    param._runtime_param = None
    runtime = param.get_runtime_param()
    if value == "3":
        assert runtime.coerce(value, param=param, ctx=Context(command)) == 3
        assert "_slow" not in vars(runtime)
    else:
        with pytest.raises(typer.BadParameter, match="greater than or equal to 1"):
            runtime.coerce(value, param=param, ctx=Context(command))


def test_a_typer_whose_internals_moved_gets_its_own_coercion(monkeypatch, tmp_path):
    """The fast path leans on typer internals (its path checks, its descriptors): where they fail, typer's own
    coercion answers instead, so a newer typer than the lock's never breaks a command."""
    from typer import _param_types
    from typer._click import Context

    from berds.cli import coercion

    def moved(*args, **kwargs):
        raise TypeError("coerce_cli_path() got an unexpected keyword argument 'path_type'")

    monkeypatch.setattr(_param_types, "coerce_cli_path", moved)
    (tmp_path / "store").mkdir()
    found = [(c, p) for w, c, p in _parameters() if w == "berds corpus info" and p.name == "path"]
    command, param = found[0]
    param._runtime_param = None
    runtime = param.get_runtime_param()
    assert type(runtime).__name__ == "FastRuntimeParam"
    assert runtime.coerce(str(tmp_path / "store"), param=param, ctx=Context(command)) == tmp_path / "store"
    assert "_slow" in vars(runtime)  # answered by typer's adapter, not the broken fast path

    def broken(*args, **kwargs):
        raise AttributeError("'ParameterInfo' object has no attribute 'parser'")

    monkeypatch.setattr(coercion, "_fast_coercion", broken)
    param._runtime_param = None
    runtime = param.get_runtime_param()
    assert type(runtime).__name__ != "FastRuntimeParam"
    assert runtime.coerce(str(tmp_path / "store"), param=param, ctx=Context(command)) == tmp_path / "store"
