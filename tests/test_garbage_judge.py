"""A judge answering garbage under the study's answer rule (nonsense reads as No) no longer scores clean zeros
with exit 0: the result is flagged in the table and refused (exit 2) unless --allow-unparsed accepts it."""

from __future__ import annotations

import json

import pytest

from analysis_fixtures import ScriptedLLM
from berds.judges.llm_judge import plain_answer
from berds.runs import save_run
from conftest import make_run
from cli_fixtures import cli


@pytest.mark.parametrize("reply, plain", [
    ("Yes", True), ("no.", True), ("**No**, because", True), ("Answer: Yes", True), ("Let me think. Answer: no", True),
    ('{"Answer": "No"}', True), ('{"Answer": "yes"}', True), ('{"Answer": "maybe"}', False),
    ("The passage is about fruit.", False), ("", False), ("Perhaps", False), ("I think yes", False),
])
def test_plain_answer_is_the_strict_parse_over_the_studys_answer_formats(reply, plain):
    assert plain_answer(reply) is plain




@pytest.fixture
def served(monkeypatch):
    from berds.llm.server import ChatServer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    servers = []

    def serve(answer):
        server = ChatServer(ScriptedLLM(answer), port=0, served_model_name="judge-model")
        servers.append(server.__enter__())
        return server.url

    yield serve
    for s in servers:
        s.__exit__(None, None, None)


def test_a_judge_answering_nonsense_is_flagged_and_exits_2_unless_accepted(tmp_path, capsys, monkeypatch, served):
    run = save_run(make_run(), tmp_path / "run")
    url = served(lambda prompt: "The passage is about fruit and the weather.")
    args = ["eval", str(run), "--judge", "openai:judge-model", "-o", f"base_url={url}", "--k", "5",
            "--cache", str(tmp_path / "c.sqlite"), "-q"]
    code, out, err = cli(capsys, monkeypatch, *args)
    assert code == 2, err
    assert "100.0% not a plain Yes/No !" in out and "no Yes !" in out  # the table flags it ...
    assert "no plain Yes/No" in err and "not one Yes" in err and "--allow-unparsed" in err  # ... and one line says why
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    metrics = json.loads((run / "metrics.json").read_text())["judging"]  # written for a look
    assert metrics["unclear"] == metrics["verdicts"] > 0 and metrics["yes"] == 0 and metrics["unparsed"] == 0
    code, out, err = cli(capsys, monkeypatch, *args, "--allow-unparsed")
    assert code == 0 and "not a plain Yes/No !" in out  # accepted, still flagged


def test_a_judge_that_never_says_yes_is_flagged_though_every_answer_is_plain(tmp_path, capsys, monkeypatch, served):
    run = save_run(make_run(), tmp_path / "run")
    url = served(lambda prompt: "No")
    code, out, err = cli(capsys, monkeypatch, "eval", str(run), "--judge", "openai:judge-model", "-o",
                         f"base_url={url}", "--k", "5", "--cache", str(tmp_path / "c.sqlite"), "-q")
    assert code == 2 and "not one Yes in" in err and "not a plain" not in err


def test_a_sane_judge_is_not_flagged(tmp_path, capsys, monkeypatch, served):
    run = save_run(make_run(), tmp_path / "run")
    url = served(lambda prompt: "Yes" if "0" in prompt.split("Document:")[-1][:200] else "No, it does not.")
    code, out, err = cli(capsys, monkeypatch, "eval", str(run), "--judge", "openai:judge-model", "-o",
                         f"base_url={url}", "--k", "5", "--cache", str(tmp_path / "c.sqlite"), "-q")
    assert code == 0, err
    assert "!" not in out
    metrics = json.loads((run / "metrics.json").read_text())["judging"]
    assert metrics["unclear"] == 0 and 0 < metrics["yes"] < metrics["verdicts"]


def test_analyze_stance_with_an_llm_naming_no_perspective_exits_2(tmp_path, capsys, monkeypatch, served):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Is {w} good?",
                                             "perspectives": [f"{w} is good", f"{w} is bad"]}) + "\n"
                                 for i, w in enumerate(("tea", "coffee", "milk"))))
    url = served(lambda prompt: "Bananas are yellow.")
    args = ["analyze", "stance", str(questions), "--llm", "openai:judge-model", "--llm-option", f"base_url={url}",
            "--out", str(tmp_path / "st.jsonl"), "-q"]
    code, out, err = cli(capsys, monkeypatch, *args)
    assert code == 2 and "named neither perspective for 3 of 3 questions" in err and "--allow-unparsed" in err
    assert (tmp_path / "st.jsonl").is_file() and "unparsed" in out
    code, _, err = cli(capsys, monkeypatch, *args, "--allow-unparsed")
    assert code == 0, err


def test_a_run_without_any_yes_beside_one_with_some_is_an_honest_result(tmp_path):
    """Off-topic passages earn no Yes from a sane judge: only a command where nothing got a Yes is refused."""
    from berds.evaluate.evaluation import UnparsedAnswersError, check_unparsed, evaluate_run, metrics_table
    from judges_for_tests import OverlapJudge

    good = make_run(n_questions=2, depth=6, name="good")
    off = make_run(n_questions=2, depth=6, name="off")
    off = type(off)(off.questions, {q: [h for h in hs if "unrelated" in h.passage.text] for q, hs in off.hits.items()},
                    {}, "off")
    results = [evaluate_run(r, OverlapJudge(), (2,), progress=False, use_cache=False) for r in (off, good)]
    assert results[0].stats.yes == 0 < results[1].stats.yes
    check_unparsed(results)  # no refusal
    with pytest.raises(UnparsedAnswersError, match=r"run .off.: not one Yes in \d+ verdicts"):
        check_unparsed(results[:1])
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(metrics_table(results))
    assert "no Yes" not in console.export_text()
