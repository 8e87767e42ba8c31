"""Query expansion: tolerant parsing of LLM perspectives, round-robin merging, the wrapper retriever with
perspectives from a file or an LLM, provenance in run manifests, and expansion followed by MMR."""

from __future__ import annotations

import json

import pytest

from analysis_fixtures import LettersEncoder, OverlapRetriever, ScriptedLLM, write_corpus
from llm_fixtures import tiny_mistral  # noqa: F401  (session fixture)
from berds.errors import BerdsError, InputError
from berds.retrievers.expansion import (
    PARAPHRASE_EXPANSION_PROMPT, Expansion, ExpandedRetriever, ExpansionParseError, FileExpander, LLMExpander,
    expansion_options, parse_expansions, read_expansions, round_robin_merge, write_expansions,
)
from berds.types import Hit, Passage, Question


def hits(*ids: str) -> list[Hit]:
    return [Hit(Passage(i, f"text of {i}"), float(10 - n)) for n, i in enumerate(ids)]


def ids(hit_list) -> list[str]:
    return [h.passage.id for h in hit_list]


# ------------------------------------------------------------------------------------------ merging


def test_round_robin_takes_each_rank_across_lists_in_generation_order():
    lists = [hits("a1", "a2", "a3"), hits("b1", "b2", "b3"), hits("c1", "c2", "c3")]
    assert ids(round_robin_merge(lists, 5, skip_duplicates=True)) == ["a1", "b1", "c1", "a2", "b2"]


def test_round_robin_skips_duplicates_and_passes_over_exhausted_lists():
    lists = [hits("x", "a2", "a3", "a4"), hits("x", "a2"), hits("c1")]
    # rank 1: x, (x again skipped), c1; rank 2: a2, (a2 skipped); rank 3: a3; rank 4: a4
    assert ids(round_robin_merge(lists, 10, skip_duplicates=True)) == ["x", "c1", "a2", "a3", "a4"]
    # the study's code keeps a shared passage each time it comes up
    assert ids(round_robin_merge(lists, 10, skip_duplicates=False)) == ["x", "x", "c1", "a2", "a2", "a3", "a4"]
    assert ids(round_robin_merge(lists, 2, skip_duplicates=True)) == ["x", "c1"]
    assert round_robin_merge([], 5, skip_duplicates=True) == [] and round_robin_merge([[]], 5, skip_duplicates=False) == []
    assert round_robin_merge(lists, 0, skip_duplicates=True) == []


def test_first_occurrence_keeps_its_hit_object():
    first, second = hits("p"), [Hit(Passage("p", "text of p"), 99.0)]
    assert round_robin_merge([first, second], 3, skip_duplicates=True)[0] is first[0]


# ------------------------------------------------------------------------------------------ parsing

UGLY_OUTPUTS = [
    # the prompt's format, plain
    ('{"Safety": "Bike lanes save lives.", "Business": "Shops lose parking."}',
     [("Safety", "Bike lanes save lives."), ("Business", "Shops lose parking.")]),
    # fenced, with chatter before and after
    ('Sure! Here are the perspectives:\n```json\n{"Safety": "Bike lanes save lives.",\n "Cost": "They are expensive."}\n```\n'
     'Let me know if you need more.', [("Safety", "Bike lanes save lives."), ("Cost", "They are expensive.")]),
    # fence without a language tag
    ('```\n{"A": "first view"}\n```', [("A", "first view")]),
    # prose around a bare object, with braces in the prose before it
    ('I used {curly} braces wrongly before. {"A": "one", "B": "two"} Hope that helps!', [("A", "one"), ("B", "two")]),
    # trailing commas
    ('{"A": "one", "B": "two",}', [("A", "one"), ("B", "two")]),
    ('[{"name": "A", "text": "one"}, {"name": "B", "text": "two"},]', [("A", "one"), ("B", "two")]),
    # Python-style single quotes
    ("{'A': 'one', 'B': \"two's view\"}", [("A", "one"), ("B", "two's view")]),
    # typographic quotes
    ("{“A”: “one”, “B”: “two”}", [("A", "one"), ("B", "two")]),
    # wrapper object with a list of name/text objects
    ('{"perspectives": [{"name": "A", "text": "one"}, {"name": "B", "text": "two"}]}', [("A", "one"), ("B", "two")]),
    # list of strings
    ('["one", "two", "three"]', [("perspective_1", "one"), ("perspective_2", "two"), ("perspective_3", "three")]),
    # list of objects with other field names
    ('[{"title": "A", "description": "one"}, {"label": "B", "perspective": "two"}]', [("A", "one"), ("B", "two")]),
    # list of single-key objects
    ('[{"A": "one"}, {"B": "two"}]', [("A", "one"), ("B", "two")]),
    # nested values: a text field wins, otherwise strings are joined in order
    ('{"A": {"perspective": "one", "evidence": ["x", "y"]}, "B": ["two", "and more"], "C": {"why": "three", "n": 3}}',
     [("A", "one"), ("B", "two and more"), ("C", "three")]),
    # repeated and empty texts are dropped (case and spacing do not make a new perspective)
    ('{"A": "Same view.", "B": "same   view.", "C": "", "D": "other"}', [("A", "Same view."), ("D", "other")]),
]


@pytest.mark.parametrize("output,expected", UGLY_OUTPUTS)
def test_parse_tolerates_ugly_llm_output(output, expected):
    assert parse_expansions(output, qid="q1") == [Expansion(n, t) for n, t in expected]


@pytest.mark.parametrize("output,message", [
    ("", "returned no text"),
    ("I'm sorry, I cannot help with that request.", "no JSON object or list"),
    ('{"Safety": "Bike lanes save lives.", "Business": "Shops lo', "no JSON object or list"),  # cut off
    ('{"a": 1, "b": 2}', "no perspective text"),
    ("[]", "no JSON object or list"),
])
def test_hopeless_output_raises_a_clear_error(output, message):
    with pytest.raises(ExpansionParseError, match=message) as exc:
        parse_expansions(output, qid="kialo-7")
    text = str(exc.value)
    assert "question 'kialo-7'" in text and "--expand file" in text


# --------------------------------------------------------------------------------------------- files


def test_read_and_write_expansions_round_trip(tmp_path):
    q = Question("q1", "Should cities build bike lanes?", ("yes", "no"))
    path = tmp_path / "e.jsonl"
    write_expansions(path, [q], {"q1": [Expansion("Safety", "They save lives."), Expansion("Cost", "Too costly.")]})
    rec = json.loads(path.read_text())
    assert rec == {"id": "q1", "question": q.text,
                   "expansions": [{"name": "Safety", "text": "They save lives."}, {"name": "Cost", "text": "Too costly."}]}
    assert read_expansions(path)["q1"][1] == Expansion("Cost", "Too costly.")


def test_expansion_file_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "expansions": [{"name": "x", "text": "fine"}]}\n'
                    '{"id": "b", "expansions": [{"name": "x"}]}\n')
    with pytest.raises(InputError, match=r"bad.jsonl, line 2, record 'b': expansions\[0\] has no 'text'"):
        read_expansions(path)
    path.write_text('{"id": "a", "expansions": "not a list"}\n')
    with pytest.raises(InputError, match="line 1.*must be a non-empty list"):
        read_expansions(path)
    path.write_text('{"id": "a", "expansions": [{"name": "x", "text": "fine"}]}\n')
    with pytest.raises(InputError, match="no expansions for 1 question.*'zz'"):
        FileExpander(path).expand([Question("zz", "q?", ("p",))])


# ------------------------------------------------------------------------------------------- wrapper

PASSAGES = [
    Passage("u1", "School uniforms reduce bullying because students look alike."),
    Passage("u2", "Uniforms reduce bullying over clothing brands, teachers report."),
    Passage("u3", "Uniforms limit self expression of students who like fashion."),
    Passage("u4", "Parents say uniforms cost less than buying fashion clothes."),
    Passage("u5", "Self expression matters for teenagers; uniform rules limit it."),
]
QUESTION = Question("q1", "Should schools require uniforms?", ("Uniforms reduce bullying.", "Uniforms limit self expression."))
EXPANSIONS = [{"name": "Bullying", "text": "uniforms reduce bullying"},
              {"name": "Expression", "text": "uniforms limit self expression"},
              {"name": "Cost", "text": "uniforms cost less for parents"}]


@pytest.fixture
def expansions_file(tmp_path):
    path = tmp_path / "uniforms.expansions.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": QUESTION.text, "expansions": EXPANSIONS}) + "\n")
    return path


def test_expanded_retriever_searches_each_perspective_and_merges(expansions_file, tmp_path):
    base = OverlapRetriever(passages=PASSAGES)
    # Each perspective's own ranking (overlap counts, ties by id):
    #   bullying:   u1, u2 (3 words) then u3, u4 (1)
    #   expression: u3 (4), u5 (3), u1, u2, u4 (1)
    #   cost:       u4 (4), u1, u2, u3 (1)
    record = tmp_path / "used.jsonl"
    # berds' earlier choices (the perspective alone as query, duplicates skipped) as named options;
    # the study's defaults are checked in test_study_parity.py
    old = {"query": "perspective", "merge": "skip-duplicates"}
    wrapped = ExpandedRetriever(base, FileExpander(expansions_file), record_to=record, **old)
    [merged] = wrapped.search([QUESTION], k=5)
    assert ids(merged) == ["u1", "u3", "u4", "u2", "u5"]
    assert [h.score for h in merged] == [5.0, 4.0, 3.0, 2.0, 1.0]  # n - position
    assert base.queries == [e["text"] for e in EXPANSIONS]  # one query per perspective, in generation order
    assert ids(OverlapRetriever(passages=PASSAGES).search([QUESTION], k=5)[0]) == ["u1", "u2", "u3", "u4"]
    assert read_expansions(record)["q1"] == [Expansion(e["name"], e["text"]) for e in EXPANSIONS]
    prov = wrapped.provenance()
    assert prov["expansion"]["source"] == "file" and prov["expansion"]["path"] == str(expansions_file)
    assert prov["base"]["name"] == "overlap"
    # the question itself first, then the perspectives
    with_question = ExpandedRetriever(OverlapRetriever(passages=PASSAGES), FileExpander(expansions_file),
                                      include_question=True, **old)
    assert ids(with_question.search([QUESTION], k=3)[0]) == ["u1", "u3", "u4"]
    # a shallower search per perspective
    shallow = ExpandedRetriever(OverlapRetriever(passages=PASSAGES), FileExpander(expansions_file), k_per_query=1, **old)
    assert ids(shallow.search([QUESTION], k=5)[0]) == ["u1", "u3", "u4"]


def test_expanded_retriever_keeps_the_retriever_contract(expansions_file):
    from berds.retrievers.base import contract_problems

    wrapped = ExpandedRetriever(OverlapRetriever(passages=PASSAGES), FileExpander(expansions_file), merge="skip-duplicates")
    results = wrapped.search([QUESTION], k=4)
    assert contract_problems([QUESTION], results, 4) == []
    # the study's merge keeps repeats: allowed only for a retriever that declares it
    keeping = ExpandedRetriever(OverlapRetriever(passages=PASSAGES), FileExpander(expansions_file))
    results = keeping.search([QUESTION], k=6)
    assert keeping.allows_duplicates and contract_problems([QUESTION], results, 6, allow_duplicates=True) == []


def test_llm_expander_uses_the_prompt_and_falls_back_only_when_asked():
    def answer(prompt: str) -> str:
        if "bike lanes" in prompt:
            return 'Here you go:\n```json\n{"Safety": "Bike lanes save lives", "Shops": "Bike lanes hurt shops"}\n```'
        return "I would rather not."

    llm = ScriptedLLM(answer)
    bikes = Question("b", "Should cities build bike lanes?", ("x", "y"))
    other = Question("o", "Is chess a sport?", ("x", "y"))
    expander = LLMExpander(llm)
    assert expander.expand([bikes]) == {"b": [Expansion("Safety", "Bike lanes save lives"),
                                              Expansion("Shops", "Bike lanes hurt shops")]}
    assert "Question: Should cities build bike lanes?" in llm.prompts[0] and "JSON object" in llm.prompts[0]
    with pytest.raises(ExpansionParseError, match="question 'o'"):
        expander.expand([bikes, other])
    with pytest.raises(BerdsError, match="lets the model decide"):
        LLMExpander(llm, n=3)  # the study's Table 12 prompt has no count
    lenient = LLMExpander(llm, on_error="question", n=3, prompt="paraphrase")
    out = lenient.expand([bikes, other])
    assert out["o"] == [Expansion("question", "Is chess a sport?", standalone=True)]
    assert lenient.fallbacks == ["o"]
    assert "Write 3 diverse perspectives" in llm.prompts[-1]
    prov = lenient.provenance()
    assert prov == {"source": "llm", "llm": "scripted-llm", "prompt_version": PARAPHRASE_EXPANSION_PROMPT.version, "n": 3,
                    "max_new_tokens": 1024, "on_error": "question", "fallbacks": 1}


def test_retrieve_with_expansion_records_options_and_combines_with_mmr(tmp_path, expansions_file):
    from berds.rerank.mmr import mmr_rerank
    from berds.retrievers.retrieve import retrieve
    from berds.runs import load_run

    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    name, options = expansion_options("analysis_fixtures:OverlapRetriever", {"corpus": str(corpus)}, expand="file",
                                      expansions=expansions_file, record_to=tmp_path / "run" / "expansions.jsonl",
                                      query="perspective", merge="skip-duplicates")
    run = retrieve(name, [QUESTION], k=5, options=options, out=tmp_path / "run", progress=False)
    assert ids(run.hits["q1"]) == ["u1", "u3", "u4", "u2", "u5"]
    manifest = load_run(tmp_path / "run").manifest
    assert manifest["retriever"]["options"]["base"] == "analysis_fixtures:OverlapRetriever"
    assert manifest["retriever"]["options"]["expansions"] == str(expansions_file)
    assert manifest["retriever"]["expansion"]["merge"].startswith("round-robin")
    assert (tmp_path / "run" / "expansions.jsonl").exists()
    # Expansion then MMR: relevance from the merged order (rank-based scores), diversity from embeddings.
    reranked, _ = mmr_rerank(load_run(tmp_path / "run"), lam=1.0, encoder=LettersEncoder())
    assert ids(reranked.hits["q1"]) == ids(run.hits["q1"])
    diverse, _ = mmr_rerank(load_run(tmp_path / "run"), lam=0.3, encoder=LettersEncoder())
    assert sorted(ids(diverse.hits["q1"])) == sorted(ids(run.hits["q1"]))
    assert diverse.manifest["retriever"]["expansion"]["source"] == "file"  # provenance survives the rerank


def test_retrieve_command_with_expand_file(tmp_path, expansions_file):
    from typer.testing import CliRunner

    from berds.cli import app
    from berds.runs import load_run

    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": QUESTION.text, "perspectives": list(QUESTION.perspectives)}) + "\n")
    result = CliRunner().invoke(app, ["retrieve", "-r", "analysis_fixtures:OverlapRetriever", "-o", f"corpus={corpus}",
                                      "--questions", str(questions), "--k", "5", "--expand", "file",
                                      "--expansions", str(expansions_file), "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 0, result.output
    run = load_run(tmp_path / "run")
    assert ids(run.hits["q1"]) == ["u1", "u3", "u4", "u2", "u5"]
    assert run.name == "overlap+expansion"
    assert read_expansions(tmp_path / "run" / "expansions.jsonl")["q1"][0].name == "Bullying"
    bad = CliRunner().invoke(app, ["retrieve", "-r", "analysis_fixtures:OverlapRetriever", "-o", f"corpus={corpus}",
                                   "--questions", str(questions), "--expand", "llm", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "--llm BACKEND:MODEL" in str(bad.exception)
    # --expansions without --expand made a plain run, as if expanded; flags of the other source were ignored
    for extra, message in ((["--expansions", str(expansions_file)], "--expansions given without --expand"),
                           (["--expand", "file", "--expansions", str(expansions_file), "--llm", "openai:x"],
                            "--llm and --llm-option are for --expand llm"),
                           (["--expand", "llm", "--llm", "openai:x", "--expansions", str(expansions_file)],
                            "--expansions is for --expand file")):
        bad = CliRunner().invoke(app, ["retrieve", "-r", "analysis_fixtures:OverlapRetriever", "-o", f"corpus={corpus}",
                                       "--questions", str(questions), "--out", str(tmp_path / "y"), *extra])
        assert bad.exit_code != 0 and message in str(bad.exception), bad.output
        assert not (tmp_path / "y" / "manifest.json").exists()


# ------------------------------------------------------------------------------------ real backends


@pytest.mark.slow
def test_a_real_model_that_writes_no_json_gets_a_clear_error(tiny_mistral):
    """The tiny random Mistral (transformers backend) babbles words: the error says which question and why."""
    from berds.llm import load_llm

    llm = load_llm("transformers", str(tiny_mistral))
    expander = LLMExpander(llm, max_new_tokens=12)
    with pytest.raises(ExpansionParseError, match=r"question 'q1': no JSON object or list of perspectives"):
        expander.expand([QUESTION])
    assert expander.raw["q1"]  # it did generate text


@pytest.mark.java
def test_expansion_over_lucene_bm25(tmp_path):
    from berds.retrievers.bm25 import BM25Retriever
    from berds.testing import tiny_corpus

    corpus = tiny_corpus(tmp_path / "tiny")
    q = Question("q-x", "honey bees and ocean tides", ("a", "b"))
    exp = tmp_path / "e.jsonl"
    write_expansions(exp, [q], {"q-x": [Expansion("bees", "honey bees pollinate crops"),
                                        Expansion("tides", "moon pulls ocean tides")]})
    base = BM25Retriever(corpus=corpus)
    try:
        per_query = base.search([Question("a", "honey bees pollinate crops", ("p",)),
                                 Question("b", "moon pulls ocean tides", ("p",))], k=3)
        [merged] = ExpandedRetriever(base, FileExpander(exp)).search([q], k=4)
    finally:
        base.close()
    expected = round_robin_merge(per_query, 4, skip_duplicates=False)  # the retriever's default: the study's code
    assert ids(merged) == ids(expected)
    assert merged[0].passage.id.startswith("bees") and merged[1].passage.id.startswith("tides")


def test_recorded_perspectives_survive_a_resumed_run_but_not_a_fresh_one(tmp_path, expansions_file):
    from berds.retrievers.retrieve import PARTIAL

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = run_dir / "expansions.jsonl"
    other = Question("q0", "An earlier question?", ("a", "b"))
    write_expansions(record, [other], {"q0": [Expansion("old", "an earlier perspective")]})
    (run_dir / PARTIAL).write_text("{}\n")  # retrieve() will resume this folder: keep what was recorded
    _, options = expansion_options("x", {}, expand="file", expansions=expansions_file, record_to=record)
    wrapped = ExpandedRetriever(OverlapRetriever(passages=PASSAGES), FileExpander(expansions_file), record_to=record)
    wrapped.search([QUESTION], k=2)
    assert list(read_expansions(record)) == ["q0", "q1"]
    (run_dir / PARTIAL).unlink()  # a fresh run in the same folder starts a new record
    expansion_options("x", {}, expand="file", expansions=expansions_file, record_to=record)
    assert not record.exists()


def test_an_expansions_file_of_another_question_set_is_refused_by_its_question_text(tmp_path):
    """Ids alone paired a file of another set that also numbers its questions q1, q2, ... without a word."""
    from berds.retrievers.expansion import FileExpander

    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Should  school uniforms be REQUIRED?",
                                "expansions": [{"name": "a", "text": "Uniforms help."}]}) + "\n")
    same = Question("q1", "Should school uniforms be required?", ("x",))
    assert FileExpander(path).expand([same])["q1"][0].text == "Uniforms help."  # case and spacing do not count
    other = Question("q1", "Should sugary drinks be taxed?", ("x",))
    with pytest.raises(InputError, match="written for another question: 'Should  school uniforms be REQUIRED"):
        FileExpander(path).expand([other])
    path.write_text(json.dumps({"id": "q1", "expansions": ["Uniforms help."]}) + "\n")
    assert FileExpander(path).expand([other])["q1"][0].text == "Uniforms help."  # no question given: ids only


def test_every_perspective_is_queried_with_the_question_even_one_named_question(tmp_path):
    # A perspective named "question" whose text is the question was searched as the question alone; the study
    # queries question + " " + text for every perspective. Only the question berds adds itself stands alone,
    # and a recorded file marks it, so replaying the record searches the same queries.
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": QUESTION.text, "expansions": [
        {"name": "question", "text": QUESTION.text}, EXPANSIONS[0]]}) + "\n")
    base, record = OverlapRetriever(passages=PASSAGES), tmp_path / "used.jsonl"
    ExpandedRetriever(base, FileExpander(path), include_question=True, record_to=record).search([QUESTION], k=3)
    q = QUESTION.text
    searched = [q, f"{q} {q}", f"{q} {EXPANSIONS[0]['text']}"]
    assert base.queries == searched
    assert json.loads(record.read_text())["expansions"][:2] == [
        {"name": "question", "text": q, "standalone": True}, {"name": "question", "text": q}]
    replay = OverlapRetriever(passages=PASSAGES)
    ExpandedRetriever(replay, FileExpander(record)).search([QUESTION], k=3)
    assert replay.queries == searched


def test_an_expansions_file_lacking_questions_names_the_options_of_the_command(tmp_path, expansions_file):
    # `berds rerank xquad|pm2` and `study diversify` take --expansions or --llm; only `berds retrieve` has --expand
    from berds.retrievers.expansion import expanded_retriever

    other = Question("q9", "Is chess a sport?", ("yes", "no"))
    with pytest.raises(InputError, match=r"no expansions for 1 question.*'q9'") as plain:
        FileExpander(expansions_file).expand([other])
    assert "--expand" not in str(plain.value) and "--llm BACKEND:MODEL in place of --expansions" in str(plain.value)
    wrapped = expanded_retriever(base=OverlapRetriever(passages=PASSAGES), expand="file", expansions=expansions_file)
    with pytest.raises(InputError, match="--expand llm --llm BACKEND:MODEL in place of --expand file --expansions"):
        wrapped.search([other], k=3)
