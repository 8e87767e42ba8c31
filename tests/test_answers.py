"""DebateQA answer metrics (berds.answers): P.D. from a tiny random causal LM, D.A. from replies served over HTTP."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from answers_fixtures import ScriptedAwarenessLLM, is_aware
from berds.answers import AnswerEvalOptions, evaluate_answers, length_adjust, parse_da_reply, read_answers
from berds.answers.evaluation import RAW_SEPARATOR, answers_table, write_answer_outputs
from berds.answers.prompts import da_prompt, pd_prompt
from berds.errors import BerdsError, InputError
from judge_trust_fixtures import served
from llm_fixtures import tiny_mistral  # noqa: F401

QUESTIONS = [
    {"id": "q1", "question": "Should taxes be raised?",
     "perspectives": ["taxes should be raised to help schools", "taxes should be lowered to help shops"]},
    {"id": "q2", "question": "Do school uniforms help students?",
     "perspectives": ["school uniforms help students", "school uniforms do not help students"]},
    {"id": "q3", "question": "Are bike lanes safer?",
     "perspectives": ["bike lanes are safer streets", "bike lanes hurt shops sales", "cities should be safer"]},
]
ANSWERS = [
    {"id": "q1", "answer": "This is debated: some say taxes should be raised, others say taxes should be lowered."},
    {"id": "q2", "answer": "Yes, school uniforms help students.", "question": "Do school uniforms help students?"},
    {"id": "q3", "answer": "It is controversial. Bike lanes are safer streets for cities, but shops fear lost sales "
                           "and some say bike lanes hurt shops."},
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def files(tmp_path):
    return write_jsonl(tmp_path / "questions.jsonl", QUESTIONS), write_jsonl(tmp_path / "model-a.jsonl", ANSWERS)


def direct_perplexity(model_dir: Path, prompt_ids: list[int], continuation_ids: list[int]) -> float:
    """The baseline: one plain transformers forward pass over prompt + continuation, PPL of the continuation."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + continuation_ids])).logits[0]
    logprobs = torch.log_softmax(logits, dim=-1)
    values = [float(logprobs[len(prompt_ids) + j - 1, t]) for j, t in enumerate(continuation_ids)]
    return math.exp(-sum(values) / len(values))


# ------------------------------------------------------------------------------------------ input


@pytest.mark.parametrize("text, message", [
    ('{"answer": "x"}\n', "line 1: record has no 'id'"),
    ('{"id": "q1", "answer": "  "}\n', "line 1, record 'q1': record has no 'answer' text"),
    ('{"id": "q1", "answer": "a"}\n{"id": "q1", "answer": "b"}\n', "line 2, record 'q1': duplicate answer id"),
    ('{"id": "q1", "answer": "a"}\nnot json\n', "line 2: malformed JSON"),
    ('{"id": "q1", "answer": "a", "question": 3}\n', "'question' must be a string"),
    ('{"id": "q1", "answer": "a", "da_label": "yes"}\n', "'da_label' must be 0 or 1"),
])
def test_bad_answer_files_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "answers.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_answers(path)
    assert str(path) in str(pytest.raises(InputError, read_answers, path).value)


def test_answers_must_match_the_question_set(tmp_path, files):
    questions, _ = files
    unknown = write_jsonl(tmp_path / "unknown.jsonl", [{"id": "q9", "answer": "a"}])
    with pytest.raises(InputError, match=r"unknown.jsonl, line 1, record 'q9': answer id is not a question"):
        evaluate_answers([unknown], ScriptedAwarenessLLM(), questions=questions, metrics=("da",), use_cache=False,
                         progress=False)
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "q1", "answer": "a", "question": "Is tea good?"}])
    with pytest.raises(InputError, match="differs from question 'q1'"):
        evaluate_answers([other], ScriptedAwarenessLLM(), questions=questions, metrics=("da",), use_cache=False,
                         progress=False)


def test_pd_refuses_questions_without_gold_perspectives(tmp_path, files):
    _, answers = files
    delphi = write_jsonl(tmp_path / "delphi.jsonl", [{"id": q["id"], "question": q["question"], "controversial": True}
                                                     for q in QUESTIONS])
    with pytest.raises(InputError, match="no gold perspectives.*berds answers eval --metric da"):
        evaluate_answers([answers], ScriptedAwarenessLLM(), questions=str(delphi), metrics=("pd",), use_cache=False)
    # D.A. needs only the questions' text: the same set works.
    results = evaluate_answers([answers], ScriptedAwarenessLLM(), questions=str(delphi), metrics=("da",),
                               use_cache=False, progress=False)
    assert [row["da"] for row in results[0].per_answer] == [1, 0, 1]


def test_a_backend_that_cannot_score_is_refused(files):
    questions, answers = files
    with pytest.raises(BerdsError, match="cannot score continuations.*transformers:MODEL"):
        evaluate_answers([answers], ScriptedAwarenessLLM(), questions=str(questions), metrics=("pd",),
                         use_cache=False, progress=False)


def test_unknown_options_are_refused():
    with pytest.raises(BerdsError, match="unknown --metric xx"):
        AnswerEvalOptions(metrics=("xx",))
    with pytest.raises(BerdsError, match="unknown --da-parse"):
        AnswerEvalOptions(da_parse="lenient")
    with pytest.raises(BerdsError, match="unknown P.D. prompt 'pd9'"):
        AnswerEvalOptions(pd_prompt="pd9")


def test_shipped_prompts_are_the_papers():
    assert pd_prompt("pd1").fill(response="A.") == "A. Please restate."
    table13 = da_prompt("table13")
    assert table13.template.startswith("Here is a question paired with an answer. Determine if the answer explicitly")
    assert "Response: 1" in table13.template and "Response: 0" in table13.template
    assert table13.template.endswith("Important: Your answer should only contain one digit 0 or 1.")
    zero = da_prompt("zero-shot").template
    assert "Demonstrations" not in zero and "Response:" not in zero
    # Braces in answers survive; field names inside a text are not re-substituted.
    assert table13.fill(question="Q {answer}?", answer="{x}").endswith("Question: Q {answer}?\nAnswer: {x}\n"
                                                                       "Important: Your answer should only contain "
                                                                       "one digit 0 or 1.")


# ------------------------------------------------------------------------------------------ P.D.


@pytest.mark.parametrize("template", ["chat", "raw"])
def test_pd_equals_the_sum_of_conditional_perplexities(tiny_mistral, files, tmp_path, template):
    from transformers import AutoTokenizer

    questions, answers = files
    results = evaluate_answers([answers], f"transformers:{tiny_mistral}", questions=str(questions), metrics=("pd",),
                               template=template, cache_path=tmp_path / "c.sqlite", progress=False)
    tokenizer = AutoTokenizer.from_pretrained(tiny_mistral)
    rows = {row["id"]: row for row in results[0].per_answer}
    for q, a in zip(QUESTIONS, ANSWERS):
        wrapped = f"{a['answer']} Please restate."
        if template == "chat":
            text = tokenizer.apply_chat_template([{"role": "user", "content": wrapped}], tokenize=False,
                                                 add_generation_prompt=True)
            prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            prompt_ids = tokenizer(wrapped + RAW_SEPARATOR)["input_ids"]
        expected = [direct_perplexity(tiny_mistral, prompt_ids, tokenizer(p, add_special_tokens=False)["input_ids"])
                    for p in q["perspectives"]]
        assert rows[q["id"]]["perplexities"] == pytest.approx(expected, rel=1e-4)
        assert rows[q["id"]]["pd"] == pytest.approx(sum(expected), rel=1e-4)
        assert rows[q["id"]]["pd_mean"] == pytest.approx(sum(expected) / len(expected), rel=1e-4)
    assert results[0].settings["pd"]["template"] == template


def test_auto_template_falls_back_to_raw_for_a_model_without_one(tiny_mistral, files, tmp_path):
    import shutil

    questions, answers = files
    plain = Path(shutil.copytree(tiny_mistral, tmp_path / "no-template"))
    (plain / "chat_template.jinja").unlink()
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    auto = evaluate_answers([answers], f"transformers:{plain}", questions=str(questions), use_cache=False,
                            progress=False)
    assert auto[0].settings["pd"]["template"] == "raw"
    with pytest.raises(BerdsError, match="has no chat template.*--template raw"):
        evaluate_answers([answers], f"transformers:{plain}", questions=str(questions), template="chat",
                         use_cache=False, progress=False)


def test_pd_is_cached_and_resumes(tiny_mistral, files, tmp_path):
    questions, answers = files
    cache = tmp_path / "answers.sqlite"
    first = evaluate_answers([answers], f"transformers:{tiny_mistral}", questions=str(questions), cache_path=cache,
                             progress=False, batch_size=2)
    assert first[0].stats["pd"].computed == 7 and first[0].stats["pd"].cached == 0
    again = evaluate_answers([answers], f"transformers:{tiny_mistral}", questions=str(questions), cache_path=cache,
                             progress=False)
    assert again[0].stats["pd"].computed == 0 and again[0].stats["pd"].cached == 7
    assert [r["pd"] for r in again[0].per_answer] == [r["pd"] for r in first[0].per_answer]
    # Another prompt is another cache key.
    other = evaluate_answers([answers], f"transformers:{tiny_mistral}", questions=str(questions), cache_path=cache,
                             progress=False, pd_prompt="pd3")
    assert other[0].stats["pd"].computed == 7
    assert [r["pd"] for r in other[0].per_answer] != [r["pd"] for r in first[0].per_answer]


def test_length_adjustment_removes_a_power_law_length_effect():
    lengths = [20, 40, 80, 160, 320, 640, 50, 100]
    wiggle = [1.00, 1.05, 0.95, 1.02, 0.98, 1.01, 0.97, 1.03]
    pd_means = [30.0 * length ** -0.5 * w for length, w in zip(lengths, wiggle)]
    fit = length_adjust(pd_means, lengths)
    assert fit["slope"] == pytest.approx(-0.5, abs=0.05)
    assert fit["pearson_log_length"] < -0.95
    assert abs(fit["pearson_log_length_adjusted"]) < 1e-6
    adjusted = [m * f for m, f in zip(pd_means, fit["factors"])]
    assert max(adjusted) / min(adjusted) < 1.15  # only the wiggle is left
    assert length_adjust([1.0, 2.0], [5, 10])["factors"] == [1.0, 1.0]  # too few to fit: unchanged
    # one P.D./n for every answer: no correlation (was NaN with a numpy RuntimeWarning, and NaN in metrics.json)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flat = length_adjust([2.0, 2.0, 2.0, 2.0], [5, 10, 20, 40])
    assert flat["pearson_log_length"] is None and flat["factors"] == [1.0] * 4


def test_openai_backend_scores_through_berds_llm_serve(tiny_mistral, files, tmp_path):
    """P.D. over HTTP (/v1/completions, echo + logprobs) against a real `berds llm serve` subprocess."""
    from transformers import AutoTokenizer

    questions, answers = files
    tokenizer = AutoTokenizer.from_pretrained(tiny_mistral)
    from berds.llm import load_llm

    with served("transformers", str(tiny_mistral), log_dir=tmp_path) as url:
        llm = load_llm("openai", str(tiny_mistral), base_url=url, max_retries=0)
        results = evaluate_answers([answers], llm, questions=str(questions), metrics=("pd",), template="auto",
                                   progress=False, use_cache=False)
        assert results[0].settings["pd"]["template"] == "raw"
    # Served and scored as one text: the tokens holding continuation characters are scored.
    row = results[0].per_answer[0]
    prompt = f"{ANSWERS[0]['answer']} Please restate.{RAW_SEPARATOR}"
    for perspective, got in zip(QUESTIONS[0]["perspectives"], row["perplexities"]):
        encoded = tokenizer(prompt + perspective, return_offsets_mapping=True)
        ids, starts = encoded["input_ids"], [a for a, _ in encoded["offset_mapping"]]
        ends = starts[1:] + [len(prompt + perspective) + 1]
        first = next(i for i, e in enumerate(ends) if e > len(prompt))
        assert got == pytest.approx(direct_perplexity(tiny_mistral, ids[:first], ids[first:]), rel=1e-4)
    assert url.startswith("http://127.0.0.1:")


def test_openai_backend_refuses_chat_prompts_for_scoring():
    from berds.llm import load_llm, user_prompt

    llm = load_llm("openai", "m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(BerdsError, match="plain-text prompts only"):
        llm.score([user_prompt("hi")], ["there"])


# ------------------------------------------------------------------------------------------ D.A.


@pytest.mark.parametrize("reply, strict, first_digit", [
    ("1", (1, True), (1, True)),
    ("0", (0, True), (0, True)),
    (" 1.\n", (1, True), (1, True)),
    ('"0"', (0, True), (0, True)),
    ("The answer is 1.", (0, False), (1, True)),
    ("Response: 0", (0, False), (0, True)),
    ("Yes, it acknowledges the debate.", (0, False), (0, False)),
    ("No.", (0, False), (0, False)),
    ("10", (0, False), (0, False)),
    ("0.5", (0, False), (0, False)),
])
def test_da_reply_parsing(reply, strict, first_digit):
    assert parse_da_reply(reply, "strict") == strict
    assert parse_da_reply(reply, "first-digit") == first_digit
    assert parse_da_reply(reply, "every-reply-aware") == (1, True)  # the published script's pitfall


@pytest.mark.parametrize("style, expected_strict, unparsed", [
    ("digit", [1, 0, 1], 0),
    ("verbose", [0, 0, 0], 3),  # right answers in the wrong form: strict scores them 0 and says so
    ("words", [0, 0, 0], 3),
])
def test_da_over_http_with_aware_and_unaware_answers(files, tmp_path, style, expected_strict, unparsed):
    from berds.llm import load_llm

    questions, answers = files
    truth = [int(is_aware(a["answer"])) for a in ANSWERS]
    assert truth == [1, 0, 1]
    answers = write_jsonl(tmp_path / "labelled.jsonl", [{**a, "da_label": t} for a, t in zip(ANSWERS, truth)])
    with served("answers_fixtures:ScriptedAwarenessLLM", "scripted", options=[f"style={style}"],
                log_dir=tmp_path) as url:
        llm = load_llm("openai", "scripted", base_url=url, max_retries=0)
        by_mode = {}
        for mode in ("strict", "first-digit", "every-reply-aware"):
            result = evaluate_answers([answers], llm, questions=str(questions), metrics=("da",),
                                      da_parse=mode, cache_path=tmp_path / "c.sqlite", progress=False)[0]
            by_mode[mode] = result
    strict = by_mode["strict"]
    assert [r["da"] for r in strict.per_answer] == expected_strict
    # The human labels in the file (the truth) give the judge's agreement, as DebateQA § E.1 reports it.
    agreement = strict.summary["da_agreement"]
    correct = sum(p == g for p, g in zip(expected_strict, truth))
    assert agreement["n"] == 3 and agreement["accuracy"] == pytest.approx(correct / 3)
    assert agreement["f1"] == pytest.approx(1.0 if style == "digit" else 0.0)
    assert by_mode["every-reply-aware"].summary["da_agreement"]["accuracy"] == pytest.approx(2 / 3)
    assert strict.summary["da_unparsed"] == unparsed
    # The replies were asked once and re-parsed from the cache for the other modes.
    assert by_mode["first-digit"].stats["da"].cached == 3 and by_mode["first-digit"].stats["da"].computed == 0
    first_digit = [r["da"] for r in by_mode["first-digit"].per_answer]
    assert first_digit == (truth if style != "words" else [0, 0, 0])
    # The pitfall: counting every reply as aware gives 100% whatever the evaluator said.
    assert by_mode["every-reply-aware"].summary["da"] == 1.0
    assert strict.summary["da"] == pytest.approx(sum(expected_strict) / 3)


def test_da_sends_the_table13_prompt():
    from berds.answers import dispute_awareness

    llm = ScriptedAwarenessLLM()
    out = dispute_awareness(llm, [("Is it debated?", "Yes, it is debated.")], AnswerEvalOptions(metrics=("da",),
                                                                                             progress=False))
    assert out[0].value == 1 and out[0].parsed
    assert llm.prompts[0] == da_prompt("table13").fill(question="Is it debated?", answer="Yes, it is debated.")


# ------------------------------------------------------------------------------------------ CLI + files


def test_cli_writes_metrics_per_answer_and_a_table(tiny_mistral, files, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from berds.cli import app

    questions, answers = files
    monkeypatch.setenv("BERDS_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["answers", "eval", str(answers), "--model", f"transformers:{tiny_mistral}",
                                      "--questions", str(questions), "--metric", "pd", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "DebateQA answer metrics" in result.output and "P.D. len-adj" in result.output
    assert "Pearson r" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "per_answer.jsonl").read_text().splitlines()]
    assert metrics["summary"]["answers"] == 3 and len(rows) == 3
    assert metrics["summary"]["pd"] == pytest.approx(sum(r["pd"] for r in rows) / 3)
    assert metrics["settings"]["pd"]["prompt_version"] == "debateqa-pd1-v1"
    assert (tmp_path / "home" / "answers.sqlite").exists()


def test_two_files_share_one_length_fit(tiny_mistral, files, tmp_path):
    questions, answers = files
    short = write_jsonl(tmp_path / "model-b.jsonl", [{"id": a["id"], "answer": a["answer"].split(".")[0] + "."}
                                                     for a in ANSWERS])
    results = evaluate_answers([answers, short], f"transformers:{tiny_mistral}", questions=str(questions),
                               use_cache=False, progress=False)
    assert [r.settings["length_adjustment"]["n"] for r in results] == [6, 6]
    for r in results:
        paths = write_answer_outputs(r, tmp_path / r.path.stem)
        assert paths["metrics"].exists()
    assert answers_table(results).row_count == 2


# ------------------------------------------------------------------------------------------ score() edges


def test_transformers_score_checks_inputs_and_truncates_long_prompts(tiny_mistral):
    from berds.llm import load_llm

    llm = load_llm("transformers", str(tiny_mistral), batch_size=4)
    with pytest.raises(BerdsError, match="2 prompts but 1 continuations"):
        llm.score(["a", "b"], ["c"])
    with pytest.raises(BerdsError, match="continuation 0 is empty"):
        llm.score(["a"], ["  "])
    with pytest.raises(BerdsError, match="more than the model's context of 1024"):
        llm.score(["a"], ["taxes " * 1100])
    long_prompt = "school uniforms help students " * 300  # 1200 tokens: more than the 1024-token context
    [cut, short] = llm.score([long_prompt, "taxes"], ["bike lanes are safer", "bike lanes are safer"])
    assert cut.truncated and not short.truncated
    assert len(cut.logprobs) == len(short.logprobs) == 4 and all(v <= 0 for v in cut.logprobs)
    assert cut.perplexity == pytest.approx(math.exp(-sum(cut.logprobs) / 4))


def test_served_completions_only_score(tiny_mistral):
    import requests

    from berds.llm import load_llm
    from berds.llm.server import ChatServer

    llm = load_llm("transformers", str(tiny_mistral))
    with ChatServer(llm, port=0) as server:
        url, name = f"{server.url}/completions", server.served_model_name
        no_echo = requests.post(url, json={"model": name, "prompt": "taxes", "max_tokens": 5}, timeout=30)
        assert no_echo.status_code == 400 and "only scores prompts" in no_echo.json()["error"]["message"]
        ok = requests.post(url, json={"model": name, "prompt": "taxes should be raised", "echo": True,
                                      "logprobs": 0, "max_tokens": 1}, timeout=30).json()
        logprobs = ok["choices"][0]["logprobs"]
        assert logprobs["tokens"] == ["taxes", "should", "be", "raised"] and logprobs["token_logprobs"][0] is None
        assert logprobs["text_offset"] == [0, 5, 12, 15]  # word-initial tokens start at their space


def test_vllm_prompt_logprobs_become_a_continuation_score():
    """vLLM needs a GPU; its output conversion is pure and checked here (fields as vllm.sequence.Logprob)."""
    from dataclasses import dataclass

    from berds.llm.vllm_backend import continuation_from_prompt_logprobs

    @dataclass
    class Logprob:
        logprob: float
        decoded_token: str | None = None

    prompt_logprobs = [None, {7: Logprob(-1.0, "a")}, {8: Logprob(-0.5, "b"), 3: Logprob(-0.1, "c")},
                       {9: Logprob(-2.0, None)}]
    score = continuation_from_prompt_logprobs(prompt_logprobs, 2, [8, 9])
    assert score.tokens == ("b", "<id 9>") and score.logprobs == (-0.5, -2.0)
    assert score.perplexity == pytest.approx(math.exp(1.25))
    with pytest.raises(BerdsError, match="no log-probability for continuation token 1"):
        continuation_from_prompt_logprobs(prompt_logprobs, 2, [8, 4])


def test_score_rows_are_shared_by_the_local_backends(tiny_mistral):
    from transformers import AutoTokenizer

    from berds.llm import load_llm, user_prompt
    from berds.llm.shared import score_token_rows

    tokenizer = AutoTokenizer.from_pretrained(tiny_mistral)
    rows, cut = score_token_rows(tokenizer, [user_prompt("taxes"), "taxes"], ["school uniforms", "school uniforms"])
    assert rows[0][1] == rows[1][1] and rows[0][0] != rows[1][0] and cut == [False, False]
    llm = load_llm("transformers", str(tiny_mistral))
    assert len(llm.score([user_prompt("taxes")], ["school uniforms"])[0].logprobs) == len(rows[0][1])
    assert llm.score([], []) == []


def test_da_without_a_question_set_reads_questions_from_the_answers_file(tmp_path):
    with_questions = write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "answer": "It is debated.", "question": "Tea?"},
                                                        {"id": "2", "answer": "Yes.", "question": "Coffee?"}])
    [result] = evaluate_answers([with_questions], ScriptedAwarenessLLM(), metrics=("da",), use_cache=False,
                                progress=False)
    assert [(r["id"], r["question"], r["da"]) for r in result.per_answer] == [("1", "Tea?", 1), ("2", "Coffee?", 0)]
    missing = write_jsonl(tmp_path / "b.jsonl", [{"id": "1", "answer": "It is debated."}])
    with pytest.raises(InputError, match="b.jsonl, line 1, record '1': D.A. needs the question text"):
        evaluate_answers([missing], ScriptedAwarenessLLM(), metrics=("da",), use_cache=False, progress=False)
    float_id = write_jsonl(tmp_path / "c.jsonl", [{"id": 1.5, "answer": "x", "question": "q"}])
    with pytest.raises(InputError, match="c.jsonl, line 1: answer 'id' must be a string or an integer"):
        read_answers(float_id)


def test_the_answers_table_with_every_column_fits_80_columns(tmp_path):
    # P.D., D.A. and the agreement with labels in one table cut the header 'unparsed' to 'unpar…' at 80 columns
    from rich.console import Console

    from berds.answers.evaluation import AnswerEvalResult

    summary = {"answers": 120, "mean_answer_words": 250.0, "pd": 123.45, "pd_mean": 41.15, "pd_length_adjusted": 99.99,
               "da": 0.5, "da_unparsed": 3, "da_agreement": {"n": 120, "accuracy": 0.9, "precision": 1.0, "recall": 0.8,
                                                             "f1": 0.89}}
    result = AnswerEvalResult(tmp_path / "model-answers.jsonl", "transformers:x", [], summary, {})
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    console.print(answers_table([result]))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text and " unparsed " in text and "len-adj" in text
    assert "D.A. vs labels, model-answers.jsonl: accuracy 0.90, F1 0.89 (n=120)" in text


def test_answers_eval_reads_the_files_before_loading_the_model(tmp_path, monkeypatch):
    # the CLI loaded the evaluator first: a mistyped or broken answers file waited for a 7B model to load (or,
    # here, was hidden behind the backend's missing-key error)
    from typer.testing import CliRunner

    from berds.cli import app

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "q1", "answer": "x", "question": "Q?"}\n\xff\n')
    for path, message in ((tmp_path / "nope.jsonl", "nope.jsonl: file not found"), (bad, "bad.jsonl, line 2: not UTF-8")):
        result = CliRunner().invoke(app, ["answers", "eval", str(path), "--model", "openai:x", "--metric", "da", "-q"])
        assert result.exit_code != 0 and message in str(result.exception), result.output


def test_output_folders_keep_every_dot_of_the_name_but_the_suffixes(tmp_path):
    """``model.v1.jsonl`` and ``model.v2.jsonl`` were both ``model``: two versions of one model's answers could
    not be evaluated together."""
    from berds.answers.evaluation import answers_output_dir, answers_stem

    assert answers_stem(Path("model.v1.jsonl")) == "model.v1"
    assert answers_stem(Path("answers.jsonl.gz")) == "answers"
    assert answers_stem(Path(".jsonl")) == ".jsonl"
    one, two = (answers_output_dir(tmp_path / f"model.v{i}.jsonl", tmp_path / "out", 2) for i in (1, 2))
    assert one != two and one.name == "model.v1"
    assert answers_output_dir(tmp_path / "model.v1.jsonl", None, 1) == tmp_path / "model.v1.answers-eval"
