"""What the judge warning claims: a card's or the study's figure is stated only for the judge it was measured on,
and the embedded judge's held-out figure comes with what it does not establish (found by an audit of the claims)."""

from __future__ import annotations

import json

import pytest

from berds.judges.embedded import StanceSpec
from berds.judges.validation import EMBEDDED_DIR, EMBEDDED_V2_CARD, GOAL_F1, judge_validation, judge_warning

STUDY = "transformers:mistralai/Mistral-7B-Instruct-v0.2+adapter=timchen0618/Mistral_BERDS_evaluator"


def shipped_v2_id(suffix: str = "") -> str:
    return f"embedded:v2-minilm-l6-abc+stance-{StanceSpec.load(EMBEDDED_DIR / 'stance.json').digest}{suffix}"


def test_the_shipped_embedded_judge_states_its_held_out_figure_and_what_it_leaves_open():
    card = json.loads(EMBEDDED_V2_CARD.read_text())["validation"]
    note = judge_validation(shipped_v2_id()).note
    assert f"F1 {card['f1']:.1f} [{card['interval_95'][0]:.1f}, {card['interval_95'][1]:.1f}]" in note
    assert "is for the shipped judge" not in note
    settled = card["f1"] >= GOAL_F1 and card["interval_95"][0] >= GOAL_F1
    assert (f"F1 >= {GOAL_F1:.0f} on unseen questions is not established" in note) is not settled


@pytest.mark.parametrize("judge_id, change", [
    (shipped_v2_id("|threshold=0.3"), "threshold 0.3 set by hand"),
    (shipped_v2_id("|calibrated-threshold=0.25"), "a calibrated threshold"),
    ("calibrated:embedded", "a calibrated threshold"),
    ("embedded:v2-minilm-l6-abc+stance-0000000000", "other weights than the shipped ones"),
])
def test_a_changed_embedded_judge_is_not_given_the_shipped_judges_figure(judge_id, change):
    record = judge_validation(judge_id)
    assert not record.validated
    assert "is for the shipped judge, not this one" in record.note and change in record.note
    assert "not established" not in record.note  # (nothing about this judge is measured at all)


@pytest.mark.parametrize("judge_id", ["mistral-berds", "mistral-berds-vllm", f"{STUDY}|parse=berds-study",
                                      f"vllm:{STUDY.partition(':')[2]}|parse=berds-study"])
def test_the_study_evaluator_as_the_study_ran_it_is_validated(judge_id):
    assert judge_validation(judge_id).validated and judge_warning(judge_id) is None


@pytest.mark.parametrize("judge_id, change", [
    ("debate:mistral-berds", "a debate critic"),
    ("calibrated:mistral-berds", "a calibrated threshold"),
    (f"debate(rounds=3,critic=x,tie=majority)>{STUDY}|parse=berds-study", "a debate critic"),
    (f"{STUDY}|parse=berds-study|calibrated-threshold=0.3", "a calibrated threshold"),
    (f"{STUDY}|parse=yes-anywhere", "parse=yes-anywhere"),
    (f"{STUDY}|parse=berds-study|max_new_tokens=4", "max_new_tokens=4"),
    (f"{STUDY}|parse=berds-study|threshold=0.7", "threshold 0.7 set by hand"),
    ("transformers:other/model+adapter=timchen0618/Mistral_BERDS_evaluator|parse=berds-study", "other/model"),
])
def test_the_study_evaluator_changed_is_not_called_validated(judge_id, change):
    record = judge_validation(judge_id)
    assert not record.validated and change in record.note
    warning = judge_warning(judge_id)
    assert warning is not None and "F1 62.2 was measured without that" in warning


@pytest.mark.slow
def test_compare_and_analyses_warn_with_the_id_of_the_judge_they_ran(tmp_path):
    """`compare` printed no judge warning; `analyze`/`report` warned by the judge's name, so `-o threshold=0.3`
    was shown the shipped judge's held-out figure as if it were its own."""
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.runs import save_run
    from conftest import make_run

    runs = [save_run(make_run(name=f"r{i}", depth=3), tmp_path / f"r{i}") for i in (1, 2)]

    def stderr(*args: str) -> str:  # (warnings go to stderr, tables to stdout)
        done = CliRunner().invoke(app, [*args, "--judge", "embedded", "--cache", str(tmp_path / "c.sqlite"), "-q"],
                                  env={"COLUMNS": "400"})
        assert done.exit_code == 0, done.output
        return " ".join(done.stderr.split())

    assert "judge embedded: NOT validated" in stderr("compare", *map(str, runs), "--k", "2")
    hand_set = stderr("analyze", "coverage", *map(str, runs), "--depth", "3", "-o", "threshold=0.3")
    assert "is for the shipped judge, not this one (threshold 0.3 set by hand)" in hand_set


def test_a_judge_berds_has_no_record_of_is_not_passed_over_in_silence():
    """A plug-in, an nli: model or another LLM got no warning at all, as if validated."""
    for judge_id in ("judges_for_tests:OverlapJudge", "nli:/models/t5|threshold=0.5", "openai:gpt-4o|parse=berds-study"):
        assert "berds has no held-out figure for this judge" in judge_warning(judge_id)
        assert judge_warning(judge_id, unknown=False) is None  # (judge validate: the measurement itself)
    assert judge_warning(STUDY + "|parse=berds-study") is None  # the study's evaluator as the study ran it
