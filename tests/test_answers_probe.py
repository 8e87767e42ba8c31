"""Probe of ``berds answers eval``: cache keys, and what the CLI says about truncated or partial answer files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from berds.answers import evaluate_answers
from llm_fixtures import tiny_mistral  # noqa: F401

QUESTIONS = [
    {"id": "q1", "question": "Should taxes be raised?",
     "perspectives": ["taxes should be raised to help schools", "taxes should be lowered to help shops"]},
    {"id": "q2", "question": "Do school uniforms help students?",
     "perspectives": ["school uniforms help students", "school uniforms do not help students"]},
    {"id": "q3", "question": "Are bike lanes safer?",
     "perspectives": ["bike lanes are safer streets", "bike lanes hurt shops sales"]},
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_cli(args: list[str]) -> str:
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.output


def test_da_replies_generated_with_another_length_are_not_reused(tiny_mistral, tmp_path):
    # max_new_tokens was not in the cache key: a run with 8 tokens returned the 1-token replies of an earlier run
    # (and metrics.json said 8)
    from berds.llm import load_llm

    answers = write_jsonl(tmp_path / "a.jsonl", [{"id": "q1", "answer": "It is debated.", "question": "Tea?"}])
    llm = load_llm("transformers", str(tiny_mistral))
    cache = tmp_path / "answers.sqlite"
    short, long_ = (evaluate_answers([answers], llm, metrics=("da",), cache_path=cache, progress=False,
                                     max_new_tokens=n)[0] for n in (1, 8))
    assert long_.stats["da"].computed == 1 and long_.stats["da"].cached == 0
    fresh = evaluate_answers([answers], llm, metrics=("da",), use_cache=False, progress=False)[0]
    assert long_.per_answer[0]["da_reply"] == fresh.per_answer[0]["da_reply"]
    assert len(short.per_answer[0]["da_reply"]) < len(fresh.per_answer[0]["da_reply"])
    # the same length again is served from the cache
    again = evaluate_answers([answers], llm, metrics=("da",), cache_path=cache, progress=False, max_new_tokens=1)[0]
    assert again.stats["da"].cached == 1 and again.per_answer[0]["da_reply"] == short.per_answer[0]["da_reply"]


def test_cli_says_when_answers_were_cut_or_cover_part_of_the_set(tiny_mistral, tmp_path, monkeypatch):
    monkeypatch.setenv("BERDS_HOME", str(tmp_path / "home"))
    questions = write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)
    full = write_jsonl(tmp_path / "full.jsonl", [{"id": q["id"], "answer": q["perspectives"][0] + "."}
                                                 for q in QUESTIONS])
    # 1,600 tokens: longer than the tiny model's 1,024-token context
    huge = write_jsonl(tmp_path / "huge.jsonl", [{"id": "q1", "answer": "taxes should be raised " * 400}])
    out = run_cli(["answers", "eval", str(full), str(huge), "--model", f"transformers:{tiny_mistral}",
                   "--questions", str(questions), "--out", str(tmp_path / "out"), "-q"])
    assert "huge.jsonl: 1 of 1 answers were too long for the evaluator's context" in out
    assert "huge.jsonl answers 1 of the 3 questions of" in out
    assert "full.jsonl answers" not in out and "full.jsonl: 1 of" not in out
    assert "the files do not answer the same questions (1 in common)" in out
    metrics = json.loads((tmp_path / "out" / "huge" / "metrics.json").read_text())
    assert metrics["settings"]["questions"]["count"] == 3 and metrics["summary"]["truncated"] == 1
    # a complete file alone gets none of these notes
    alone = run_cli(["answers", "eval", str(full), "--model", f"transformers:{tiny_mistral}", "--questions",
                     str(questions), "--out", str(tmp_path / "out1"), "-q"])
    assert "note:" not in alone


@pytest.mark.parametrize("value, shown", [(-1e-17, "+0.00"), (0.0, "+0.00"), (-0.254, "-0.25"), (0.48, "+0.48")])
def test_a_correlation_of_zero_prints_without_a_minus_sign(value, shown):
    from berds.cli.answers import _signed

    assert _signed(value) == shown


# ------------------------------------------------------------------------------------------ question sets


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_limit_that_is_not_a_positive_integer_is_refused(limit):
    # limit=0 returned every question and limit=-1 all but the last, without a word
    from berds.errors import BerdsError
    from berds.questions import load_questions

    with pytest.raises(BerdsError, match=r"--limit \(limit=\) must be a positive integer"):
        load_questions("demo", limit=limit)
    assert len(load_questions("demo", limit=2)) == 2


def test_an_own_json_question_set_keeps_its_name(tmp_path, monkeypatch):
    # a JSON-array set of one's own is read by the DELPHI reader (it accepts .json/.csv) and was labelled 'delphi',
    # the name per-dataset results are grouped under
    from berds.questions import load_questions

    mine = tmp_path / "kialo-mine.json"
    mine.write_text(json.dumps([{"id": "k1", "question": "Q?", "perspectives": ["taxes help", "taxes hurt"]}]))
    [q] = load_questions(str(mine))
    assert q.dataset == "kialo-mine" and q.perspectives == ("taxes help", "taxes hurt")
    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    write_jsonl(tmp_path / "delphi.jsonl", [{"qid": 7, "question_text": "Is it?", "controversial": True}])
    assert [q.dataset for q in load_questions("delphi", require_perspectives=False)] == ["delphi"]


def test_a_partial_answer_longer_than_the_context_names_the_question(tiny_mistral, tmp_path):
    # score() said "continuation 1 has 1100 tokens ...": the place in a batch, not the question or file
    from berds.errors import InputError

    questions = write_jsonl(tmp_path / "questions.jsonl", [
        QUESTIONS[0], {"id": "long", "question": "Q?", "perspectives": ["taxes help", " ".join(["taxes"] * 1100)]}])
    answers = write_jsonl(tmp_path / "a.jsonl", [{"id": "q1", "answer": "taxes."}, {"id": "long", "answer": "taxes."}])
    with pytest.raises(InputError, match=r"questions.jsonl, record 'long': perspective 1 \(a P.D. partial answer\) "
                                         r"has 1100 tokens, more than the model's context of 1024"):
        evaluate_answers([answers], f"transformers:{tiny_mistral}", questions=str(questions), use_cache=False,
                         progress=False)


@pytest.mark.parametrize("changes, message", [
    ({"batch_size": 0}, r"--batch-size \(batch_size=\) must be a positive integer, got 0"),
    ({"batch_size": True}, r"--batch-size \(batch_size=\) must be a positive integer, got True"),
    ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer, got 0"),
    ({"max_new_tokens": "8"}, "max_new_tokens must be a positive integer, got '8'"),
])
def test_bad_options_are_refused_before_anything_runs(changes, message):
    # max_new_tokens=0 failed only when D.A. first generated: after the model loaded and P.D. was scored
    from berds.answers import AnswerEvalOptions
    from berds.errors import BerdsError

    with pytest.raises(BerdsError, match=message):
        AnswerEvalOptions(metrics=("pd", "da"), **changes)


def test_quiet_answers_eval_prints_no_model_loading_bar(tiny_mistral, tmp_path):
    # transformers' "Loading weights" bar printed into `berds answers eval -q`, whose own bars were off
    import subprocess

    from conftest import berds_cmd, subprocess_env

    questions, answers = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Is tea better than coffee?",
                                     "perspectives": ["Tea is gentler.", "Coffee wakes you up."]}) + "\n")
    answers.write_text(json.dumps({"id": "q1", "answer": "Tea is gentle, coffee is strong."}) + "\n")
    done = subprocess.run(berds_cmd("answers", "eval", str(answers), "--model", f"transformers:{tiny_mistral}",
                                    "--questions", str(questions), "--metric", "pd", "--out", str(tmp_path / "o"),
                                    "--no-cache", "-q"),
                          capture_output=True, text=True, timeout=300, env=subprocess_env(BERDS_HOME=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert "Loading" not in done.stderr and "%|" not in done.stderr, done.stderr
