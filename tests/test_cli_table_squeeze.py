"""The analysis tables keep every header word whole at 80 columns, whatever the length of the run names."""

from __future__ import annotations

import pytest

from berds.cli.analysis import _print_table

LEANING = ["run", "questions", "supporting only %", "opposing only %", "both %", "neither %", "no stance"]


@pytest.mark.parametrize("name_length", [4, 6, 10, 14, 15, 40])
def test_leaning_header_words_stay_whole_beside_any_run_name(name_length, monkeypatch, capsys):
    # names of 6 to 14 characters left rich to shrink the headers itself, which cut 'supporting' to 'supportin'
    monkeypatch.setenv("COLUMNS", "80")
    _print_table("leaning", LEANING, [["r" * name_length, "8", "25.0", "12.5", "62.5", "0.0", "4"]])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    flat = out.replace("\n", " ")
    for word in " ".join(LEANING).split():
        assert f" {word} " in flat, (word, out)
