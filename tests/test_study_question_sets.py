"""`berds study diversify` with too few or mixed test questions (issue 33, items 7 and 11): one test question is
refused before any work; when the expansion run covers only some test questions, every written table says so."""

from __future__ import annotations

import json

import pytest

from analysis_fixtures import LettersEncoder
from berds.errors import BerdsError
from berds.questions import DEMO_DIR
from berds.runs import load_run
from berds.studies.diversify import split_questions, study_diversify, study_diversify_paths, subset


class _NeverJudge:
    id = "never"

    def judge(self, pairs, **_):
        raise AssertionError("judged before the input was checked")


def test_one_test_question_is_refused_before_any_work(tmp_path):
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    ids = list(run.questions)
    with pytest.raises(BerdsError, match="the test run holds 1 question: comparing strategies .* at least 2"):
        study_diversify(subset(run, ids[:1], "test"), subset(run, ids[1:], "dev"), _NeverJudge(),
                        encoder=LettersEncoder(), strategies=["mmr"], depth=20)
    with pytest.raises(BerdsError, match="the test run holds 1 question"):  # 11 of 12 questions split off as dev
        study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", tmp_path / "study", _NeverJudge(), split_dev=0.92,
                              encoder=LettersEncoder(), strategies=["mmr"], depth=20)
    assert not (tmp_path / "study").exists()


def test_an_expansion_run_covering_some_test_questions_is_noted_in_every_written_table(tmp_path):
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    _, test = split_questions(run, 0.5)
    dropped = set(list(test.questions)[:2])
    records = [json.loads(line) for line in (DEMO_DIR / "run.ctxs.jsonl").read_text().splitlines() if line.strip()]
    partial = tmp_path / "expanded.jsonl"
    partial.write_text("".join(json.dumps(r) + "\n" for r in records if r["id"] not in dropped))
    study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", tmp_path / "study", "demo-gold", split_dev=0.5,
                          expanded_run=partial, encoder=LettersEncoder(), strategies=["mmr"], grids={"mmr": [0.5]},
                          depth=20, n_resamples=200, cache_path=tmp_path / "j.sqlite")
    results = (tmp_path / "study" / "results.md").read_text()
    assert "| setting | questions |" in results
    assert "| base run | 6 |" in results and "| expansion | 4 |" in results
    for table in ("results.md", "comparison.md"):
        assert "Note: the rows are not averaged over the same test questions (base run 6, mmr 6, expansion 4, " \
               "expansion + mmr 4)" in (tmp_path / "study" / table).read_text()
    assert (tmp_path / "study" / "results.csv").read_text().splitlines()[0].startswith("setting,questions,")
