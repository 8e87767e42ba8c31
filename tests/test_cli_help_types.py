"""Help names the type of a bounded option as plainly as any other (INT, NUMBER), its bounds after it."""

from __future__ import annotations


def test_bounded_options_show_plain_types_in_help():
    # `--workers int range`, `--resamples int range`: click's type name, beside INT and NUMBER everywhere else
    from typer.testing import CliRunner

    from berds.cli import app

    for command in (["eval"], ["compare"]):
        text = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"}).output
        assert "range" not in text, text
    text = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "100"}).output
    assert "--workers INT" in text and "[x>=1]" in text, text
