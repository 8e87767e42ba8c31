"""Errors raised by the Python API name the keyword argument beside the CLI option: a notebook user who passed
``ks=(0,)`` was told about ``--k`` only."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError, InputError
from berds.evaluate.evaluation import EvalOptions, evaluate_run
from conftest import make_run
from judges_for_tests import OverlapJudge


@pytest.mark.parametrize("options, says", [
    ({"ks": (0,)}, "--k values (ks=)"),
    ({"ks": (10**9,)}, "--k (ks=)"),
    ({"duplicates": "merge"}, "--duplicates (duplicates=)"),
    ({"title_position": "middle"}, "--title-position (title_position=)"),
])
def test_eval_options_name_the_keyword(options, says):
    with pytest.raises(BerdsError) as e:
        EvalOptions(**options)
    assert says in str(e.value)


def test_a_short_ranking_names_allow_short_as_a_keyword():
    run = make_run(n_questions=1, depth=3, name="short")
    with pytest.raises(InputError) as e:
        evaluate_run(run, OverlapJudge(), ks=(5,), progress=False)
    assert "allow_short=True" in str(e.value) and "ks=" in str(e.value)


def test_compare_and_stances_name_the_keyword(tmp_path):
    from berds.evaluate.analyses.stance import resolve_stances
    from berds.evaluate.compare import compare_paths, resolve_baseline

    with pytest.raises(BerdsError, match=r"--baseline \(baseline=\) 'nope'"):
        resolve_baseline("nope", ["a", "b"], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(BerdsError, match=r"--k values \(ks=\)"):
        compare_paths([tmp_path / "a", tmp_path / "b"], OverlapJudge(), ks=(0,))
    with pytest.raises(BerdsError, match=r"\(stances=.*\(llm=\)"):
        resolve_stances([])


def test_the_command_line_prints_the_option_without_the_python_keyword(tmp_path, capsys, monkeypatch):
    """A shell user was told `--k (ks=)` and `--allow-short (allow_short=True)`: names they cannot pass."""
    from berds.cli import main
    from berds.errors import command_line_wording
    from berds.runs import save_run

    assert command_line_wording("use a smaller --k (ks=), or --allow-short (allow_short=True) to") == \
        "use a smaller --k, or --allow-short to"
    assert command_line_wording("a note (x=) without an option") == "a note (x=) without an option"
    folder = save_run(make_run(n_questions=1, depth=3, name="short"), tmp_path / "run")
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main(["eval", str(folder), "--judge", "judges_for_tests:OverlapJudge", "--k", "5", "--no-cache", "-q"])
    err = capsys.readouterr().err
    assert "--allow-short" in err and "allow_short=" not in err and "(ks=)" not in err
