"""Wording that cost a new user a retry (issue 35, item 8): advice naming options that do not exist where it is
read, a progress rate disagreeing with the summary's, metrics printed twice, empty questions told late."""

from __future__ import annotations

import time

import pytest

from berds.errors import BerdsError
from berds.runs import save_run
from berds.types import Hit, Passage
from conftest import make_run
from cli_fixtures import cli




def test_an_encoder_mismatch_names_the_option_retrieve_has():
    from berds.indexes.encoders import check_same_encoder, encoder_spec

    spec = encoder_spec("minilm")
    with pytest.raises(BerdsError) as e:
        check_same_encoder({**spec.identity(), "model": "other/model", "name": "other"}, spec, index_path="idx")
    assert "-o encoder=" in str(e.value) and "--encoder out" not in str(e.value)


def test_an_unusable_expansion_names_no_backend_option_that_does_not_exist():
    from berds.retrievers.expansion import ExpansionParseError, parse_expansions

    with pytest.raises(ExpansionParseError) as e:
        parse_expansions("", qid="q1")
    assert "it is no --llm-option" in str(e.value) and "a larger max_new_tokens" not in str(e.value)


def test_the_finished_bar_shows_the_mean_rate_of_this_run_like_the_summary():
    from berds.indexes.base import progress_bar

    with progress_bar("questions", enabled=False) as bar:
        task = bar.add_task("x", total=10, completed=4)  # 4 resumed from disk: not this run's work
        for _ in range(6):
            time.sleep(0.02)
            bar.advance(task, 1)
    t = bar.tasks[0]
    shown = str(bar.columns[3].render(t))
    # (elapsed is read again here, a moment after the render: the rates agree to a few per cent, not to the digit)
    rate, unit = shown.split()
    assert unit == "questions/s" and float(rate.replace(",", "")) == pytest.approx(6 / t.elapsed, rel=0.05), shown


def test_eval_measure_prints_mrecall_once(tmp_path, capsys, monkeypatch):
    folder = save_run(make_run(n_questions=2, depth=4), tmp_path / "run")
    code, out, err = cli(capsys, monkeypatch, "eval", str(folder), "--judge", "judges_for_tests:OverlapJudge",
                         "--k", "4", "--no-cache", "-q", "--measure", "alpha_nDCG@4")
    assert code == 0, err
    assert out.count("MRecall") == 1 and "alpha_nDCG" in out and "diversity measures" in out


class HalfEmptyRetriever:
    """Finds nothing for every other question."""

    name = "half-empty"

    def search(self, questions, *, k):
        return [[] if i % 2 else [Hit(Passage(f"p-{q.id}", "text"), 1.0)] for i, q in enumerate(questions)]


def test_retrieve_says_which_questions_got_nothing_in_its_summary_table(tmp_path, capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "retrieve", "-r", "test_day2_wording:HalfEmptyRetriever",
                         "--questions", "demo", "--limit", "4", "--k", "3", "--out", str(tmp_path / "run"))
    assert code == 0, err
    row = next(line for line in out.splitlines() if "no hits" in line)
    assert "2 questions: demo-02, demo-04 (eval refuses them unless --allow-short)" in row
