"""Running the berds CLI in the test's own process (faster than a subprocess, and coverage sees it)."""

from __future__ import annotations

from berds.cli import main


def cli(capsys, monkeypatch, *args: str, columns: int = 1000) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``berds ARGS``; a wide terminal by default, so rich leaves lines whole."""
    monkeypatch.setenv("COLUMNS", str(columns))
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err
