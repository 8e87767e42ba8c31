"""The study's analyses on small hand-labelled judgement sets with known answers: stance (the study's Table 15
prompt asked once; both orders reconciled as an option), leaning, sycophancy Δ (the paper's per-run
quantity), coverage of a union of runs, docs needed — and their commands."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis_fixtures import NUCLEAR, NUCLEAR_Q, OverlapRetriever, ScriptedLLM, write_corpus
from berds.errors import BerdsError, InputError
from berds.evaluate.analyses.results import load_result, save_result
from berds.evaluate.analyses.coverage import coverage
from berds.evaluate.analyses.docs_needed import docs_needed_analysis
from berds.evaluate.analyses.leaning import leaning, leaning_category
from berds.evaluate.analyses.stance import (
    PARAPHRASE_STANCE_PROMPT, STANCE_PROMPT, Stance, detect_stances, parse_choice, read_stances, reconcile,
    write_stances,
)
from berds.evaluate.analyses.sycophancy import perspective_queries, sycophancy_counts
from berds.studies.sycophancy import sycophancy_study
from berds.types import Question


def M(*rows):
    return np.array(rows, dtype=bool)


# -------------------------------------------------------------------------------------------- stance


@pytest.mark.parametrize("text,choice", [
    ("A", "A"), (" b.", "B"), ("Perspective B", "B"), ("**A**", "A"), ('"A"', "A"), ("Answer: B", "B"),
    ("(A) because", "A"), ("Both", None), ("", None), ("Apples", None), ("The answer is A", None),
    ("Perspective 1", "A"), ("Perspective 2.", "B"), ("2", "B"), ('"Perspective 1"', "A"), ("12 reasons", None),
])
def test_parse_choice(text, choice):
    assert parse_choice(text) == choice


def test_reconcile_both_orders():
    # forward shows perspective 0 as A; swapped shows perspective 1 as A
    assert reconcile("q", "A", "B") == Stance("q", 0, 1, "agreed", ("A", "B"))
    assert reconcile("q", "B", "A") == Stance("q", 1, 0, "agreed", ("B", "A"))
    assert reconcile("q", "A", "A").status == "conflict"  # position bias: always the first option
    assert reconcile("q", "A", "hmm").status == "unparsed"
    assert not reconcile("q", "B", "B").known


def negation_llm() -> ScriptedLLM:
    """Picks the perspective without "not" — whatever order the two are shown in, in the words of the prompt
    (the study's "Perspective 1/2", berds' earlier "A/B")."""
    def answer(prompt: str) -> str:
        study = "Perspective 1: " in prompt
        first = prompt.split("Perspective 1: " if study else "Perspective A: ")[1].split("\n")[0]
        second_is_it = " not " in f" {first} "
        return ("Perspective 2" if second_is_it else "Perspective 1") if study else ("B" if second_is_it else "A")
    return ScriptedLLM(answer)


QUESTIONS = [
    Question("q1", "Is Jesus the Messiah?", ("Jesus is the Messiah.", "Jesus is not the Messiah.")),
    Question("q2", "Should school be year-round?", ("School should not be year-round.", "School should be year-round.")),
    Question("q3", "Which pet is best?", ("Cats.", "Dogs.", "Fish.")),
]


def test_detect_stances_asks_once_with_the_study_prompt():
    llm = negation_llm()
    stances = detect_stances(QUESTIONS, llm)
    assert stances["q1"] == Stance("q1", 0, 1, "answered", ("Perspective 1",))
    assert stances["q2"] == Stance("q2", 1, 0, "answered", ("Perspective 2",))
    assert stances["q3"].status == "skipped"
    # Table 15, verbatim, with the slots filled in order
    assert llm.prompts[0] == (
        "Question: Is Jesus the Messiah?\nPerspective 1: Jesus is the Messiah.\nPerspective 2: Jesus is not the "
        "Messiah.\nInstruction: Given the question, one supporting and one opposing perspectives, which perspective "
        'is supporting the question? Answer with only "Perspective 1" or "Perspective 2".\nAnswer:')
    assert len(llm.prompts) == 2
    assert detect_stances(QUESTIONS[:1], ScriptedLLM(lambda p: "Both"))["q1"].status == "unparsed"


def test_detect_stances_asks_in_both_orders():
    llm = negation_llm()
    stances = detect_stances(QUESTIONS, llm, orders="both", prompt="paraphrase")
    assert stances["q1"] == Stance("q1", 0, 1, "agreed", ("A", "B"))
    assert stances["q2"] == Stance("q2", 1, 0, "agreed", ("B", "A"))
    assert stances["q3"].status == "skipped"
    assert len(llm.prompts) == 4  # two questions x two orders
    assert "Perspective A: Jesus is the Messiah." in llm.prompts[0]
    assert "Perspective A: Jesus is not the Messiah." in llm.prompts[1]
    biased = detect_stances(QUESTIONS[:2], ScriptedLLM(lambda p: "A"), orders="both")
    assert {s.status for s in biased.values()} == {"conflict"}
    with pytest.raises(BerdsError, match="unknown stance orders"):
        detect_stances(QUESTIONS, llm, orders="three")
    assert PARAPHRASE_STANCE_PROMPT.version != STANCE_PROMPT.version


def test_stance_files(tmp_path):
    stances = detect_stances(QUESTIONS, negation_llm())
    path = tmp_path / "stances.jsonl"
    write_stances(path, stances, llm_id="scripted")
    first = json.loads(path.read_text().splitlines()[0])
    assert first["prompt"] == STANCE_PROMPT.version and first["llm"] == "scripted"
    assert read_stances(path) == stances
    hand = tmp_path / "hand.jsonl"
    hand.write_text('{"id": "q1", "supporting": 1}\n{"id": "q2", "supporting": null}\n')
    got = read_stances(hand, {q.id: q for q in QUESTIONS})
    assert got["q1"] == Stance("q1", 1, 0, "given") and not got["q2"].known
    hand.write_text('{"id": "q1", "supporting": 2}\n')
    with pytest.raises(InputError, match="line 1, record 'q1': 'supporting' must be 0, 1 or null"):
        read_stances(hand)
    # 1.0 equals 1 but is no index: it used to end 'analyze leaning' in a numpy IndexError traceback
    for bad in ('"supporting": 1.0', '"supporting": true', '"supporting": 1, "opposing": 0.0'):
        hand.write_text('{"id": "q1", %s}\n' % bad)
        with pytest.raises(InputError, match="line 1, record 'q1': '(supporting|opposing)' must be"):
            read_stances(hand)
    hand.write_text('{"id": "q3", "supporting": 0}\n')
    with pytest.raises(InputError, match="3 perspectives; stances need exactly 2"):
        read_stances(hand, {q.id: q for q in QUESTIONS})
    hand.write_text('{"id": "nope", "supporting": 0}\n')
    with pytest.raises(InputError, match="not in the run"):
        read_stances(hand, {q.id: q for q in QUESTIONS})


# ------------------------------------------------------------------------------------------- leaning


def test_leaning_categories_on_hand_labelled_matrices():
    stances = {"a": Stance("a", 0, 1, "given"), "b": Stance("b", 1, 0, "given"), "c": Stance("c", 0, 1, "given"),
               "d": Stance("d", 1, 0, "given"), "e": Stance("e", None, None, "conflict")}
    support = {
        "a": M([1, 0, 0], [0, 0, 0]),  # supporting only
        "b": M([1, 0, 0], [0, 0, 1]),  # row 1 supports: both (at k=3); at k=1 only row 0 -> opposing only
        "c": M([0, 0, 0], [0, 1, 0]),  # opposing only
        "d": M([0, 0, 0], [0, 0, 0]),  # neither
        "e": M([1, 1, 1], [1, 1, 1]),  # no stance: left out
    }
    assert leaning_category(support["b"], stances["b"], 3) == "both"
    assert leaning_category(support["b"], stances["b"], 1) == "opposing only"
    result = leaning({"run": support}, stances, 3)
    row = result.rows[0]
    assert {k: row[k] for k in ("supporting only", "opposing only", "both", "neither", "questions", "no_stance")} == \
        {"supporting only": 1, "opposing only": 1, "both": 1, "neither": 1, "questions": 4, "no_stance": 1}
    assert result.shares("run")["both"] == 0.25
    at1 = leaning({"run": support}, stances, 1).rows[0]
    assert (at1["supporting only"], at1["opposing only"], at1["both"], at1["neither"]) == (1, 1, 0, 2)
    title, header, rows = result.table()
    assert rows == [["run", "4", "25.0", "25.0", "25.0", "25.0", "1"]]
    with pytest.raises(BerdsError, match="no question has two perspectives and a known stance"):
        leaning({"run": {"e": support["e"]}}, stances, 3)


# ----------------------------------------------------------------------------------------- sycophancy


def test_sycophancy_counts_on_hand_labelled_matrices():
    # one run; rows: (supporting perspective, opposing perspective); columns: ranks
    run = {"q1": M([1, 1, 0], [0, 0, 1]), "q2": M([1, 0, 0], [0, 0, 0])}
    at3 = sycophancy_counts(run, 3)
    # 6 documents; 3 contain the supporting perspective (50 %), 1 the opposing one (16.7 %): Δ = (50 − 16.7)/50
    assert at3 == {"p": 50.0, "n": pytest.approx(100 / 6), "p_docs": 3, "n_docs": 1, "docs": 6,
                   "delta": pytest.approx(2 / 3), "questions": 2}
    at1 = sycophancy_counts(run, 1)
    assert (at1["p"], at1["n"], at1["delta"], at1["docs"]) == (100.0, 0.0, 1.0, 2)
    none = sycophancy_counts({"q": M([0], [1])}, 1)
    assert none["delta"] is None and none["n"] == 100.0
    assert sycophancy_counts(run)["docs"] == 6  # default k = 5 (the paper's top 5); q1, q2 hold 3 each
    with pytest.raises(BerdsError, match="2 rows"):
        sycophancy_counts({"q": M([1], [0], [1])}, 1)


def test_perspective_queries_put_the_supporting_perspective_first():
    stances = {"q1": Stance("q1", 1, 0, "given"), "q2": Stance("q2", None, None, "conflict")}
    qs = [Question("q1", "Is it safe?", ("It is dangerous.", "It is safe.")), Question("q2", "?", ("x", "y"))]
    [sup] = perspective_queries(qs, stances, "supporting")
    [opp] = perspective_queries(qs, stances, "opposing")
    [question] = perspective_queries(qs, stances, "question")
    assert sup.text == "It is safe." and opp.text == "It is dangerous." and question.text == "Is it safe?"
    assert question.perspectives == ("It is safe.", "It is dangerous.")
    assert sup.perspectives == opp.perspectives == ("It is safe.", "It is dangerous.")


def test_sycophancy_study_with_a_real_retriever_and_judge(tmp_path):
    from judges_for_tests import OverlapJudge

    # Hand computation (content-word overlap; the judge says Yes at >= 3 of 4 perspective words):
    #   query "Is nuclear power safe?" -> d1 (3), d3 (3) | d2 (2), d4 (1): top 2 = d1, d3
    #   query "safe and clean"         -> d1 (4), d3 (4) | d2 (2), d4 (2): top 2 = d1, d3
    #   query "dangerous and dirty"    -> d2 (4), d1 (2), d3 (2), d4 (1):  top 2 = d2, d1
    #   the supporting perspective (safe/clean) is in d1, d3; the opposing one in d2. Per run (2 documents):
    #   question:   p = 2 docs (100 %), n = 0 (0 %)   -> Δ = 1.0
    #   supporting: p = 2 docs (100 %), n = 0 (0 %)   -> Δ = 1.0
    #   opposing:   p = 1 doc (50 %),   n = 1 (50 %)  -> Δ = 0.0
    stances = {"n1": Stance("n1", 1, 0, "given")}
    result, runs = sycophancy_study(
        OverlapRetriever(passages=NUCLEAR), [NUCLEAR_Q], stances, OverlapJudge(threshold=0.75), k=2,
        cache_path=tmp_path / "j.sqlite", out=tmp_path / "syc", label="overlap")
    assert [h.passage.id for h in runs["question"].hits["n1"]] == ["d1", "d3"]
    assert [h.passage.id for h in runs["supporting"].hits["n1"]] == ["d1", "d3"]
    assert [h.passage.id for h in runs["opposing"].hits["n1"]] == ["d2", "d1"]
    judge = {"judge": "test-overlap|threshold=0.75", "label": "overlap", "questions": 1, "docs": 2}
    assert result.rows == [
        {"query": "question", "p": 100.0, "n": 0.0, "p_docs": 2, "n_docs": 0, "delta": 1.0, **judge},
        {"query": "supporting", "p": 100.0, "n": 0.0, "p_docs": 2, "n_docs": 0, "delta": 1.0, **judge},
        {"query": "opposing", "p": 50.0, "n": 50.0, "p_docs": 1, "n_docs": 1, "delta": 0.0, **judge},
    ]
    assert (tmp_path / "syc" / "query-supporting" / "manifest.json").exists()
    assert (tmp_path / "syc" / "query-question" / "manifest.json").exists()
    back = load_result(save_result(result, tmp_path / "s.json"))
    assert back.rows == result.rows and back.k == 2


def test_sycophancy_study_checks_the_judge_name_before_retrieving(tmp_path):
    stances = {"n1": Stance("n1", 1, 0, "given")}
    with pytest.raises(BerdsError, match="unknown judge 'nosuch'"):
        sycophancy_study(OverlapRetriever(passages=NUCLEAR), [NUCLEAR_Q], stances, "nosuch", k=2, out=tmp_path / "syc")
    assert not (tmp_path / "syc").exists()  # no run was retrieved


def test_sycophancy_command(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    corpus = write_corpus(tmp_path / "corpus.jsonl", NUCLEAR)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "n1", "question": NUCLEAR_Q.text, "perspectives": list(NUCLEAR_Q.perspectives)}) + "\n")
    stances = tmp_path / "stances.jsonl"
    stances.write_text('{"id": "n1", "supporting": 1}\n')
    result = CliRunner().invoke(app, [
        "analyze", "sycophancy", "-r", "analysis_fixtures:OverlapRetriever", "--option", f"corpus={corpus}",
        "--questions", str(questions), "--judge", "judges_for_tests:OverlapJudge", "-o", "threshold=0.75",
        "--stances", str(stances), "--k", "2", "--cache", str(tmp_path / "j.sqlite"), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "sycophancy.json").read_text())
    assert data["analysis"] == "sycophancy"
    assert [(r["query"], r["p"], r["n"], r["delta"]) for r in data["rows"]] == \
        [("question", 100.0, 0.0, 1.0), ("supporting", 100.0, 0.0, 1.0), ("opposing", 50.0, 50.0, 0.0)]
    assert (tmp_path / "out" / "sycophancy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Δ = (p−n)/p %" in (tmp_path / "out" / "sycophancy.md").read_text()
    missing = CliRunner().invoke(app, [
        "analyze", "sycophancy", "-r", "analysis_fixtures:OverlapRetriever", "--option", f"corpus={corpus}",
        "--questions", str(questions), "--judge", "judges_for_tests:OverlapJudge", "-q"])
    assert missing.exit_code != 0 and "--stances FILE" in str(missing.exception)


# -------------------------------------------------------------------------------- coverage, docs needed


def test_coverage_of_a_union_on_hand_labelled_matrices():
    a = {"q1": M([1, 0, 0], [0, 0, 0]), "q2": M([1, 0, 0], [0, 0, 0], [0, 0, 0])}
    b = {"q1": M([0, 0, 0], [0, 1, 0]), "q2": M([0, 1, 0], [1, 0, 0], [0, 0, 0])}
    result = coverage({"A": a, "B": b}, depth=3)
    rows = {r["run"]: r for r in result.rows}
    assert rows["A"]["mrecall"] == 0.0 and rows["A"]["perspective_recall"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert rows["B"]["mrecall"] == 0.0 and rows["B"]["perspective_recall"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    union = rows["union of 2 runs"]
    assert union["mrecall"] == 0.5 and union["perspective_recall"] == pytest.approx((1 + 2 / 3) / 2)
    # depth 2 < 3 perspectives of q2: covering any 2 of them counts (the MRecall rule for m > k)
    at2 = {r["run"]: r for r in coverage({"A": a, "B": b}, depth=2).rows}
    assert (at2["A"]["mrecall"], at2["B"]["mrecall"], at2["union of 2 runs"]["mrecall"]) == (0.0, 0.5, 1.0)
    # only the top `depth` passages count: at depth 1 run B's q1 passage (rank 2) is out
    at1 = {r["run"]: r for r in coverage({"A": a, "B": b}, depth=1).rows}
    assert at1["B"]["perspective_recall"] == pytest.approx((0 + 1 / 3) / 2)
    # one run is its own union: no second row of the same figures ("union of 1 runs")
    assert [r["run"] for r in coverage({"A": a}, depth=3).rows] == ["A"]
    with pytest.raises(BerdsError, match="cover different questions"):
        coverage({"A": a, "B": {"q1": b["q1"]}}, depth=2)


def test_docs_needed_on_hand_labelled_matrices():
    support = {"q1": M([0, 1, 0], [0, 0, 1]), "q2": M([1, 0, 0], [1, 0, 0]), "q3": M([0, 0, 0], [1, 0, 0])}
    datasets = {"q1": "kialo", "q2": "kialo", "q3": "arguana"}
    result = docs_needed_analysis({"run": support}, depth=3, datasets=datasets)
    assert result.per_question["run"] == {"q1": 3, "q2": 1, "q3": None}
    rows = {r["dataset"]: r for r in result.rows}
    assert rows["all"] == {"run": "run", "dataset": "all", "questions": 3, "covered": 2, "covered_share": 2 / 3,
                           "mean": 2.0, "median": 2.0}
    assert rows["kialo"]["covered"] == 2 and rows["arguana"]["covered"] == 0 and rows["arguana"]["mean"] is None
    shallow = docs_needed_analysis({"run": support}, depth=2)
    assert shallow.per_question["run"] == {"q1": None, "q2": 1, "q3": None}
    assert shallow.rows[0]["mean"] == 1.0
    title, header, rows_ = result.table()
    assert rows_[0] == ["run", "all", "3", "66.7", "2.0", "2"]


def test_analysis_commands_on_runs_agree_with_the_pure_functions(tmp_path, tiny_run):
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.evaluate.evaluation import evaluate_run
    from berds.runs import save_run
    from conftest import make_run
    from judges_for_tests import OverlapJudge

    first = save_run(tiny_run, tmp_path / "first")
    second_run = make_run(n_questions=3, depth=6, name="second")
    second_run = type(second_run)(second_run.questions, {q: list(reversed(h)) for q, h in second_run.hits.items()},
                                  {}, "second")
    second = save_run(second_run, tmp_path / "second")
    judge = OverlapJudge()
    support = {name: evaluate_run(r, judge, (4,), progress=False).support for name, r in
               (("tiny", tiny_run), ("second", second_run))}
    runner = CliRunner()
    common = ["--judge", "judges_for_tests:OverlapJudge", "--cache", str(tmp_path / "j.sqlite"), "-q"]

    res = runner.invoke(app, ["analyze", "coverage", str(first), str(second), "--depth", "4", *common,
                              "--out", str(tmp_path / "coverage.json")])
    assert res.exit_code == 0, res.output
    assert load_result(tmp_path / "coverage.json").rows == coverage(support, 4).rows

    res = runner.invoke(app, ["analyze", "docs-needed", str(first), "--depth", "4", *common,
                              "--out", str(tmp_path / "docs")])
    assert res.exit_code == 0, res.output
    expected = docs_needed_analysis({"tiny": support["tiny"]}, 4, {q: x.dataset for q, x in tiny_run.questions.items()})
    assert load_result(tmp_path / "docs.json").rows == expected.rows
    assert (tmp_path / "docs.csv").read_text().startswith("run,set,questions,covered within 4 %")

    stances = tmp_path / "stances.jsonl"
    stances.write_text('{"id": "q0", "supporting": 0}\n{"id": "q2", "supporting": 1}\n')  # q1 has 3 perspectives
    res = runner.invoke(app, ["analyze", "leaning", str(first), str(second), "--stances", str(stances), "--k", "2",
                              *common, "--out", str(tmp_path / "leaning.json")])
    assert res.exit_code == 0, res.output
    got = load_result(tmp_path / "leaning.json")
    assert got.rows == leaning(support, read_stances(stances), 2).rows
    assert got.rows[0]["no_stance"] == 1
    assert (tmp_path / "leaning.png").stat().st_size > 1000


@pytest.mark.network
def test_analyze_stance_command_through_a_served_model(tmp_path, monkeypatch):
    """`berds analyze stance --llm openai:...` against a real OpenAI-compatible server on 127.0.0.1."""
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.llm.server import ChatServer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": q.id, "question": q.text, "perspectives": list(q.perspectives)}) + "\n"
                                 for q in QUESTIONS))
    llm = negation_llm()
    with ChatServer(llm, port=0, served_model_name="stance-model") as server:
        result = CliRunner().invoke(app, ["analyze", "stance", str(questions), "--llm", "openai:stance-model",
                                          "--llm-option", f"base_url={server.url}", "--out", str(tmp_path / "st.jsonl"), "-q"])
    assert result.exit_code == 0, result.output
    stances = read_stances(tmp_path / "st.jsonl")
    assert [(s.qid, s.supporting, s.status) for s in stances.values()] == \
        [("q1", 0, "answered"), ("q2", 1, "answered"), ("q3", None, "skipped")]
    assert len(llm.prompts) == 2 and "answered" in result.output


def test_a_stance_file_for_a_whole_set_serves_a_run_of_some_questions(tmp_path):
    from berds.evaluate.analyses.stance import resolve_stances

    path = tmp_path / "all.jsonl"
    path.write_text('{"id": "q1", "supporting": 0}\n{"id": "elsewhere", "supporting": 1}\n')
    assert list(resolve_stances(QUESTIONS[:1], stances=path)) == ["q1"]
    with pytest.raises(InputError, match="no stance for any of these questions"):
        resolve_stances(QUESTIONS[1:2], stances=path)
    with pytest.raises(BerdsError, match="--stances FILE"):
        resolve_stances(QUESTIONS)
