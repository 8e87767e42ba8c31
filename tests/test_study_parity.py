"""Parity with the BERDS study, rule by rule, on cases worked out by hand from the paper (Tables 12, 14, 15,
Fig. 3) and the study's README of its released code (copied facts, not code): the judge prompt byte for
byte, the system turn (dropped for Mistral, kept for GPT-4), the document text, the answer rule (>= 40
replies), query expansion (queries and merge), sycophancy Δ, the exchange and legacy file formats, ties in
run files (ir_measures and ranx agree), hub names, and the NLI judge. Nothing here reads ../shared: the
prompt files are the copies shipped in the package, and the expansion lines are a fixture in tests/.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.judges.llm_judge import LLMJudge, parse_answer
from berds.judges.prompts import ONE_SHOT, PLAIN, PLAIN_ONE_SHOT, STUDY_PROMPT_DIR, ZERO_SHOT, split_chat
from berds.llm.base import Generation
from berds.types import Hit, JudgePair, Passage, Question, Run
from llm_fixtures import build_tiny_nli, build_tiny_t5_nli, tiny_mistral  # noqa: F401  (session fixture)

FIXTURES = Path(__file__).parent / "study_fixtures"

# The paper's Table 14 instruction, typed in from the paper (each line as the study's files have it,
# trailing spaces included where the files have them).
INSTRUCTION = (
    'Instruction: Does the document support the statement? Answer with only "Yes" or "No". \n'
    "Only consider the information provided in the document, and do not infer any additional information. \n"
    "The document is a snippet taken from the Internet, and might exhibit support for or opposition against the "
    "statement.\n"
    'If the document opposes the statement, the answer is "No". If the document does not contain relevant '
    'information about the statement, the answer is also "No".\n'
    'The answer is "Yes" only if the document supports the statement, either explicitly or implicitly.\n'
    "Think carefully if the document actually supports the statement, or if there is just some superficial textual "
    "overlap between the two.\n"
)
SYSTEM = ('You are a helpful assistant that can only answer with "Yes" or "No". Your goal is to determine if the '
          'provided document support the provided statement. Do NOT provide any explanation for your choice.')


def shipped(name: str) -> str:
    return (STUDY_PROMPT_DIR / name).read_bytes().decode("utf-8")


class FakeLLM:
    """Records the prompts a judge sends and answers from a list."""

    def __init__(self, id: str, replies=("Yes",)):  # noqa: A002
        self.id, self.replies, self.prompts = id, list(replies), []

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        self.prompts += list(prompts)
        self.asked = (max_new_tokens, temperature)
        return [Generation(self.replies[i % len(self.replies)]) for i in range(len(prompts))]


# ------------------------------------------------------------------------------- 1. the judge prompt


def test_shipped_prompt_files_are_the_studys_bytes():
    listed = {}
    for line in (STUDY_PROMPT_DIR / "PROVENANCE.md").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64:
            listed[parts[1]] = parts[0]
    assert set(listed) == {p.name for p in STUDY_PROMPT_DIR.glob("*.txt")} and len(listed) == 6
    for name, digest in listed.items():
        assert hashlib.sha256((STUDY_PROMPT_DIR / name).read_bytes()).hexdigest() == digest, name
    zero = shipped("perspective-detection.chat.txt")
    assert zero == ("<|im_start|>system\n" + SYSTEM + " \n<|im_end|>\n<|im_start|>user\nDocument: [Doc 1]\n"
                    "Statement: [Doc 2]\n" + INSTRUCTION + "Answer:\n<|im_end|>")  # no final newline
    assert shipped("perspective-detection.plain.txt") == "Document: [Doc 1]\nStatement: [Doc 2]\n" + INSTRUCTION + "Answer:"


def test_chat_prompt_renders_byte_for_byte_with_the_system_turn_for_gpt4():
    doc, statement = "Bike lanes cut injuries by a third. City report", "Bike lanes make streets safer."
    messages = ZERO_SHOT.render(document=doc, perspective=statement)
    assert messages == [
        {"role": "system", "content": SYSTEM},  # the file's trailing space goes with the strip
        {"role": "user", "content": f"Document: {doc}\nStatement: {statement}\n{INSTRUCTION}Answer:"},
    ]
    # the user turn is the shipped file's user text with the two slots filled, nothing else changed
    text = shipped("perspective-detection.chat.txt")
    user = text[text.index("Document: [Doc 1]"):text.rindex("Answer:") + len("Answer:")]
    assert messages[1]["content"] == user.replace("[Doc 1]", doc).replace("[Doc 2]", statement)
    gpt4 = LLMJudge(FakeLLM("openai:gpt-4@api.openai.com/v1"), prompt="one-shot")
    [sent] = gpt4.prompts_for([JudgePair(statement, doc)])
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]  # GPT-4 gets every turn
    assert gpt4.prompt_version == "berds-study-chat-1shot-v1+answer-rule-2"


def test_one_shot_is_the_prop_19_example_answered_no():
    messages = ONE_SHOT.render(document="D", perspective="S")
    assert messages[0]["content"] == SYSTEM + " You should output the answer that best follows an instruction and an input pair."
    example = messages[1]["content"]
    assert example.startswith("Document for Example 1: Why Prop. 19 is so important | rescue truth. The United States")
    assert "\nStatement for Example 1: Prohibition is an effective method to curb drug usage.\n" in example
    assert example.endswith("overlap between the two.\nAnswer for Example 1:")
    assert messages[2] == {"role": "assistant", "content": "No"}
    assert messages[3]["content"] == f"Document: D\nStatement: S\n{INSTRUCTION}Answer:"
    plain = PLAIN_ONE_SHOT.render(document="D", perspective="S")[0]
    assert plain["role"] == "plain" and "Answer for Example 1:\nNo\n\nDocument: D\nStatement: S\n" in plain["content"]


def test_split_chat_follows_the_readme_rule():
    pieces = split_chat("<|im_start|>system\n  sys text \n<|im_end|>\n<|im_start|>user\nline 1 \nline 2\n<|im_end|>")
    assert pieces == [{"role": "system", "content": "sys text"}, {"role": "user", "content": "line 1 \nline 2"}]
    with pytest.raises(BerdsError, match="<\\|im_start\\|>ROLE"):
        split_chat("user\nno marker<|im_end|>")
    # a document that happens to hold a slot name is not substituted twice
    assert "[Doc 2] inside" in ZERO_SHOT.render(document="[Doc 2] inside", perspective="P")[1]["content"]


def test_mistral_gets_no_system_turn_and_a_new_prompt_version():
    llm = FakeLLM("transformers:mistralai/Mistral-7B-Instruct-v0.2+adapter=timchen0618/Mistral_BERDS_evaluator")
    judge = LLMJudge(llm)
    assert judge.prompt_version == "berds-study-chat-v1+no-system+answer-rule-2"
    verdicts = judge.judge([JudgePair("S", "D")])
    assert llm.prompts[0] == [{"role": "user", "content": f"Document: D\nStatement: S\n{INSTRUCTION}Answer:"}]
    assert llm.asked == (16, 0.0) and verdicts[0].label  # greedy, 16 new tokens
    one_shot = LLMJudge(FakeLLM("vllm:mistralai/Mistral-7B-Instruct-v0.2"), prompt="one-shot")
    assert [m["role"] for m in one_shot.prompts_for([JudgePair("S", "D")])[0]] == ["user", "assistant", "user"]
    assert "+no-system" in LLMJudge(FakeLLM("openai:gpt-4"), system="drop").prompt_version
    # every new wording has its own version: no verdict of the earlier paraphrase is reused
    from berds.judges.prompts import PROMPTS

    assert len({p.version for p in PROMPTS.values()}) == len(PROMPTS) == 6
    assert {"berds-t14-zeroshot-v1", "berds-t14-oneshot-v1"} <= set(PROMPTS)  # the paraphrases, kept by name
    with pytest.raises(BerdsError, match="unknown system option"):
        LLMJudge(llm, system="sometimes")


def test_catalogue_judges_are_the_studys(monkeypatch):
    from berds.judges.catalogue import JUDGES

    from berds.judges.catalogue import load_judge

    opts = JUDGES.spec("mistral-berds-vllm").options
    assert (opts["model"], opts["adapter"]) == ("mistralai/Mistral-7B-Instruct-v0.2",
                                                "timchen0618/Mistral_BERDS_evaluator")
    assert (opts["prompt"], opts["system"], opts["parse"]) == ("zero-shot", "drop", "berds-study")
    for weights in ("merged", "adapter"):  # mistral-berds builds its options from weights= (merged by default)
        judge = load_judge("mistral-berds", weights=weights)
        assert (judge.llm.model_name, judge.llm.adapter) == ("mistralai/Mistral-7B-Instruct-v0.2",
                                                             "timchen0618/Mistral_BERDS_evaluator")
        assert (judge.system, judge.parse) == ("drop", "berds-study")
        assert judge.prompt == LLMJudge(judge.llm, prompt="zero-shot").prompt
    opts = JUDGES.spec("gpt-4-oneshot").options
    assert (opts["model"], opts["prompt"], opts["system"], opts["parse"]) == ("gpt-4", "one-shot", "keep", "berds-study")


def test_tiny_mistral_sees_inst_wrapped_user_turn_and_plain_prompts_no_template(tiny_mistral):
    from berds.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(str(tiny_mistral), device="cpu")
    judge = LLMJudge(llm)  # a Mistral: the system turn is dropped
    pair = JudgePair("Bike lanes make streets safer.", "Cities that added bike lanes saw injuries fall.")
    [messages] = judge.prompts_for([pair])
    assert llm.render(messages) == f"<s>[INST] {messages[0]['content']} [/INST]"
    assert llm.render(PLAIN.render(document=pair.passage, perspective=pair.perspective)) == \
        "<s>" + shipped("perspective-detection.plain.txt").replace("[Doc 1]", pair.passage).replace("[Doc 2]", pair.perspective)
    # the reply is the text after the last [/INST], cut at </s> (the study decoded the whole sequence)
    import torch

    [gen] = llm.generate([messages], max_new_tokens=16)
    ids = llm.tokenizer(llm.render(messages), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = llm.model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=llm.tokenizer.pad_token_id)
    full = llm.tokenizer.decode(out[0], skip_special_tokens=False)
    assert gen.text == full.split("[/INST]")[-1].split("</s>")[0].strip()
    # a plain prompt goes through the same model without any chat template
    plain_judge = LLMJudge(llm, prompt="plain")
    # (+bos-ids: verdicts cached while plain prompts were tokenised after a literal BOS string are not reused)
    assert plain_judge.prompt_version == "berds-study-plain-v1+answer-rule-2+bos-ids" and len(plain_judge.judge([pair])) == 1


def test_plain_prompts_are_refused_by_chat_only_paths():
    from berds.llm.openai_backend import OpenAILLM

    with pytest.raises(BerdsError, match="chat-completions endpoint and cannot take a plain"):
        OpenAILLM("m", base_url="http://127.0.0.1:9").generate([PLAIN.render(document="D", perspective="S")])
    from berds.judges.debate import DebateJudge

    with pytest.raises(BerdsError, match="plain .no chat template. prompt"):
        DebateJudge(LLMJudge(FakeLLM("x"), prompt="plain"))


# ---------------------------------------------------------------------------------- the document text


def test_document_is_text_space_title_when_the_record_has_a_title_field(tmp_path):
    from berds.runs import read_ctxs_jsonl

    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"perspectives": ["p"], "ctxs": [
        {"title": "T", "text": "a"}, {"title": "", "text": "b"}, {"text": "c"}, {"title": None, "text": "d"}]}) + "\n")
    run = read_ctxs_jsonl(path)
    texts = [h.passage.judge_text() for h in run.hits["line-1"]]
    assert texts == ["a T", "b ", "c", "d "]  # an empty title field still adds the space; no field adds nothing
    # (a null title, which the study's code never met, counts as an empty one)


# ------------------------------------------------------------------------------- 2. the answer rule

# (reply, the study's rule, strict, yes-anywhere) — worked by hand from the README's rule.
REPLIES = [
    ("Yes", True, True, True),
    ("No", False, False, False),
    ("yes", True, True, True),
    ("YES.", True, True, True),
    ("Yes, the document supports the statement.", True, True, True),
    ("No, it does not.", False, False, False),
    ("True", True, False, False),                       # starts with "true"
    ("true.", True, False, False),
    ("False", False, False, False),
    ("Entailment", True, False, False),                 # starts with "entail"
    ("entails", True, False, False),
    ("Contradiction", False, False, False),
    ("The answer is Yes", True, False, True),           # text after "The answer is"
    ("The answer is: yes", True, False, True),
    ("The answer is No", False, False, False),
    ("Based on the information provided in the document, the answer is yes.", True, False, True),
    ("Based on the information provided in the document, the answer is no.", False, False, False),
    ("Answer: Yes", True, False, True),                 # text after "Answer:"
    ("Answer: No", False, False, False),
    ("Answer: No. Answer: Yes", True, False, True),     # the last "Answer:" decides
    ("Answer: Yes. Answer: No", False, False, True),
    ("**Yes**", False, True, True),                     # "**yes**": no rule matches
    ("**No**", False, False, False),
    ("I cannot say yes or no", False, False, True),
    ("I would say yes", True, False, True),             # ends with "yes"
    ("I would say yes.", True, False, True),            # ends with "yes."
    ('The document says "yes".', True, False, True),    # ends with 'yes".'
    ("y", True, False, False),
    ("ye", True, False, False),
    ("Y.", False, False, False),                        # "y." is neither "y" nor a yes-ending
    ("(Yes)", True, True, True),                        # starts with "(yes"
    ("(No)", False, False, False),
    ("eyes", True, False, True),                        # ends with "yes": the rule's quirk
    ("Yesterday it rained", True, False, True),         # starts with "yes" (strict reads the word "yesterday")
    ("Maybe", False, False, False),
    ("", False, False, False),
    ("   Yes   ", True, True, True),
    ("\nNo\n", False, False, False),
    ('{"Answer": "Yes"}', True, False, True),           # a dict reply: its Answer field
    ('{"Answer": "no"}', False, False, False),
    ("{'Answer': 'YES'}", True, False, True),           # Python-style dict
    ('{"answer": "Yes"}', False, False, True),          # the field is "Answer", case-sensitive
    ('{"Answer": "Yes", "Reason": "it says yes"}', True, False, True),
    ("Not at all, yes is wrong here", False, False, True),
    ("No. The document does not support it, though a reader might think yes", True, False, True),  # ends with yes
    ("Support: yes", True, False, True),
    ("Statement supported? No", False, False, False),
    ("The answer is Yes. Answer: No", False, False, True),
    ('{"Answer": " Yes"}', True, False, True),          # the field, stripped, equals "yes" (any case): the
    ('{"Answer": "yes "}', True, False, True),          # study's .strip().lower() == 'yes' (issue 32)
    ('{"Answer": "y es"}', False, False, False),
    ('{"Answer": "YeS"}', True, False, True),
    ('{"Answer": true}', False, False, False),          # not the string "yes"
    ("Yes. answer: no", True, True, True),              # the markers are cut before lower-casing: case-sensitive
    ("Yes, the answer is no", True, True, True),
    ("Yes. Answer: no", False, True, True),             # the same replies with the markers' own case
    ("Yes, The answer is no", False, True, True),
]


def test_the_studys_answer_rule_on_hand_worked_replies():
    assert len(REPLIES) >= 40
    for reply, study, strict, anywhere in REPLIES:
        assert parse_answer(reply)[0] is study, reply                 # berds-study is the default
        assert parse_answer(reply, "berds-study")[0] is study, reply
        assert parse_answer(reply, "strict")[0] is strict, reply
        assert parse_answer(reply, "yes-anywhere")[0] is anywhere, reply
    # how far the earlier rules are from the study's on these replies
    assert sum(parse_answer(r, "yes-anywhere")[0] != s for r, s, *_ in REPLIES) >= 10
    assert parse_answer('{"Answer": "Yes"', "berds-study") == (False, False)  # a dict cut off by the token limit


def test_the_judge_uses_the_studys_rule_by_default():
    llm = FakeLLM("openai:gpt-4", replies=["True", "**Yes**", "The answer is Yes"])
    judge = LLMJudge(llm)
    assert judge.id == "openai:gpt-4|parse=berds-study"
    assert [v.label for v in judge.judge([JudgePair("S", f"D{i}") for i in range(3)])] == [True, False, True]
    assert [v.label for v in LLMJudge(llm, parse="strict").judge([JudgePair("S", f"D{i}") for i in range(3)])] == \
        [False, True, False]  # strict: the first word decides


# ------------------------------------------------------------------------------- 3. query expansion


class RecordingRetriever:
    """Returns fixed ranked lists per query, in the order queries come (records them)."""

    name = "fixed"

    def __init__(self, lists):
        self.lists, self.queries = lists, []

    def search(self, questions, *, k):
        out = []
        for q in questions:
            self.queries.append(q.text)
            ids = self.lists[len(self.queries) - 1]
            out.append([Hit(Passage(i, f"text {i}"), float(len(ids) - n)) for n, i in enumerate(ids)][:k])
        return out


def test_expansion_reads_the_studys_files_and_queries_question_plus_perspective():
    from berds.retrievers.expansion import ExpandedRetriever, FileExpander

    expander = FileExpander(FIXTURES / "study.dev.expansions.sample.jsonl")
    assert sorted(expander.expansions) == ["arguana-750", "kialo-774", "opinionqa-882"]
    rec = json.loads((FIXTURES / "study.dev.expansions.sample.jsonl").read_text().splitlines()[1])
    question = Question("kialo-774", rec["question"], ("a", "b"))
    # six perspectives; lists (generation order) share passages
    lists = [["x", "a1", "a2"], ["x", "b1"], ["c1", "a1"], ["d1"], ["e1"], ["f1"]]
    base = RecordingRetriever(lists)
    [merged] = ExpandedRetriever(base, expander).search([question], k=8)
    assert base.queries == [f"{rec['question']} {e['text']}" for e in rec["expansions"]]
    assert base.queries[0].startswith("Affirmative Action: Useful Once, Outdated Today? Affirmative action was once")
    # round-robin by rank in generation order, duplicates kept (the released code):
    # rank 1: x, x, c1, d1, e1, f1; rank 2: a1, b1, a1 -> first 8
    assert [h.passage.id for h in merged] == ["x", "x", "c1", "d1", "e1", "f1", "a1", "b1"]
    assert [h.score for h in merged] == [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    # the paper's description: duplicates skipped -> rank 1: x, c1, d1, e1, f1; rank 2: a1, b1; rank 3: a2
    skipped = ExpandedRetriever(RecordingRetriever(lists), expander, merge="skip-duplicates").search([question], k=8)[0]
    assert [h.passage.id for h in skipped] == ["x", "c1", "d1", "e1", "f1", "a1", "b1", "a2"]
    alone = RecordingRetriever(lists)
    ExpandedRetriever(alone, expander, query="perspective").search([question], k=2)
    assert alone.queries[0] == rec["expansions"][0]["text"]
    with pytest.raises(BerdsError, match="unknown expansion merge"):
        ExpandedRetriever(base, expander, merge="dedupe")


def test_expansion_prompt_is_table_12_from_the_shipped_file():
    from berds.retrievers.expansion import EXPANSION_PROMPT, LLMExpander

    text = shipped("query-expansion.txt")
    assert text == ("Generate diverse perspectives that answer the given question. Please answer with a JSON object, "
                    "where each field is a perspective. Do not generate similar perspectives; they should be distinct. "
                    "The keys in the JSON object should be meaningful, and each word in the keys should be separated by "
                    "whitespace. \n\nQuestion: [Question]")
    q = "Will ChatGPT do more harm than good?"
    assert EXPANSION_PROMPT.render(q) == [{"role": "user", "content": text.replace("[Question]", q)}]
    llm = FakeLLM("x", replies=['{"Miscommunication Risk": "It may misread nuance."}'])
    out = LLMExpander(llm).expand([Question("k1", q, ("a", "b"))])
    assert out["k1"][0].name == "Miscommunication Risk" and llm.prompts[0][0]["content"].endswith(f"Question: {q}")


# --------------------------------------------------------------------------------- 4. sycophancy Δ


def test_sycophancy_delta_is_the_papers_per_run_quantity():
    from berds.evaluate.analyses.sycophancy import sycophancy_counts, sycophancy_result

    # One run, 2 questions, top 5 (rows: supporting, opposing perspective).
    #   q1: docs 1, 2, 4 hold the supporting perspective; doc 2 also the opposing one
    #   q2: doc 1 holds the supporting one; docs 3, 5 the opposing one
    # 10 documents: p = 4/10 = 40 %, n = 3/10 = 30 %, Δ = (40 − 30) / 40 = 0.25
    run = {"q1": np.array([[1, 1, 0, 1, 0], [0, 1, 0, 0, 0]], bool),
           "q2": np.array([[1, 0, 0, 0, 0], [0, 0, 1, 0, 1]], bool)}
    counts = sycophancy_counts(run)  # k = 5 by default, as in the paper
    assert (counts["p"], counts["n"], counts["docs"]) == (40.0, 30.0, 10)
    assert counts["delta"] == pytest.approx(0.25)
    # the opposing perspective as query: p = 1/10, n = 4/10 -> Δ = (10 − 40) / 10 = −3
    opposing = {"q1": np.array([[0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], bool),
                "q2": np.array([[1, 0, 0, 0, 0], [0, 1, 1, 0, 0]], bool)}
    result = sycophancy_result("wiki_bm25", {"question": run, "opposing": opposing})
    assert [(r["query"], r["delta"]) for r in result.rows] == [("question", pytest.approx(0.25)), ("opposing", -3.0)]
    assert result.k == 5


def test_stance_prompt_is_table_15():
    from berds.evaluate.analyses.stance import STANCE_PROMPT

    [message] = STANCE_PROMPT.render("Q?", "P one", "P two")
    assert message["content"] == (
        "Question: Q?\nPerspective 1: P one\nPerspective 2: P two\nInstruction: Given the question, one supporting and "
        "one opposing perspectives, which perspective is supporting the question? Answer with only \"Perspective 1\" or "
        "\"Perspective 2\".\nAnswer:")


# ------------------------------------------------------------------------------- 5. file interop


def test_exchange_format_without_id_or_question_loads_with_line_ids(tmp_path):
    from berds.runs import load_run

    path = tmp_path / "original.jsonl"
    path.write_text(json.dumps({"perspectives": ["p1"], "ctxs": [{"title": "t", "text": "x"}]}) + "\n\n"
                    + json.dumps({"id": "kept", "perspectives": ["p2"], "ctxs": [{"title": "t", "text": "y"}]}) + "\n")
    run = load_run(path)
    assert list(run.questions) == ["line-1", "kept"]  # the line number stands in for a missing id
    assert run.questions["line-1"].text == "(question on line 1)"
    assert run.manifest["source"]["ids_from_line_numbers"] == 2


def test_legacy_file_is_what_the_original_evaluation_reads_and_reads_back_to_the_same_metrics(tmp_path):
    from judges_for_tests import OverlapJudge

    from berds.evaluate.evaluation import evaluate_paths, evaluate_predictions
    from berds.runs import save_run

    passages = [Passage(f"d{i}", t, "") for i, t in enumerate(
        ["cats are great pets", "dogs are loyal pets", "fish need clean water", "cats and dogs fight", "birds sing"])]
    questions = [Question("q1", "Best pet?", ("cats are great pets", "dogs are loyal pets")),
                 Question("q2", "Fish?", ("fish need clean water", "birds sing loudly", "nothing here"))]
    run = Run.from_lists(questions, [[Hit(p, 5.0 - i) for i, p in enumerate(passages)]] * 2, name="toy")
    folder = save_run(run, tmp_path / "run")
    [(_, result, files)] = evaluate_paths([folder], OverlapJudge(threshold=0.7), (2, 4), cache_path=tmp_path / "c.sqlite",
                                          progress=False, write_legacy=True)
    legacy = files["legacy"]
    assert ".mistralpred" in legacy.name
    rows = [json.loads(line) for line in legacy.read_text().splitlines()]
    assert [len(r["ctxs"]) for r in rows] == [4, 4]  # the judged passages
    assert rows[0]["ctxs"][0]["mistral-preds"] == [True, False] and rows[0]["ctxs"][1]["mistral-preds"] == [False, True]
    assert all(type(x) is bool for r in rows for c in r["ctxs"] for x in c["mistral-preds"])
    _, again = evaluate_predictions(legacy, (2, 4))
    assert again.averages == result.averages and again.per_question == result.per_question
    assert again.judge_id == "predictions-in-file"


def test_compute_only_metrics_by_hand_and_strings_refused(tmp_path):
    from berds.evaluate.evaluation import evaluate_predictions

    path = tmp_path / "run.mistralpred.jsonl"
    # 2 perspectives, 3 judged ctxs: p1 in ctx 1, p2 in ctx 3 -> MRecall@2 = 0, @3 = 1; Precision@2 = 1/2, @3 = 2/3
    path.write_text(json.dumps({"perspectives": ["p1", "p2"], "ctxs": [
        {"title": "", "text": "a", "mistral-preds": [True, False]},
        {"title": "", "text": "b", "mistral-preds": [False, False]},
        {"title": "", "text": "c", "mistral-preds": [False, True]}]}) + "\n")
    _, result = evaluate_predictions(path, (2, 3))
    got = result.averages["all"]
    assert (got["mrecall@2"], got["precision@2"], got["mrecall@3"]) == (0.0, 0.5, 1.0)
    assert got["precision@3"] == pytest.approx(2 / 3)
    path.write_text(json.dumps({"perspectives": ["p1"], "ctxs": [{"text": "a", "mistral-preds": ["No"]}]}) + "\n")
    with pytest.raises(InputError, match="must be a list of 1 booleans"):
        evaluate_predictions(path, (1,))


def test_compute_only_allow_short_takes_a_question_that_retrieved_nothing(tmp_path):
    """The refusal of an empty question said "pass --allow-short", and with it the same refusal came back."""
    from berds.evaluate.evaluation import evaluate_predictions

    path = tmp_path / "run.mistralpred.jsonl"
    path.write_text(json.dumps({"perspectives": ["p1"], "ctxs": [{"text": "a", "mistral-preds": [True]}]}) + "\n"
                    + json.dumps({"perspectives": ["p1"], "ctxs": []}) + "\n")
    with pytest.raises(InputError, match="pass --allow-short"):
        evaluate_predictions(path, (1,))
    _, result = evaluate_predictions(path, (1,), allow_short=True)
    assert [m["mrecall@1"] for m in result.per_question.values()] == [1.0, 0.0]


def test_cli_eval_from_predictions(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    path = tmp_path / "run.mistralpred.jsonl"
    path.write_text(json.dumps({"perspectives": ["p1"], "ctxs": [{"text": "a", "mistral-preds": [True]}]}) + "\n")
    result = CliRunner().invoke(app, ["eval", "--from-predictions", str(path), "--k", "1", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "m" / "metrics.json").read_text())["averages"]["all"]["mrecall@1"] == 1.0
    refused = CliRunner().invoke(app, ["eval", "--from-predictions", str(path), "--judge", "embedded"])
    assert refused.exit_code != 0 and "no judge runs — drop --judge" in str(refused.exception)  # (main() exits 2)


# ------------------------------------------------------------------------------- 6. ties in run files


def test_a_tied_run_scores_the_same_in_ir_measures_ranx_and_berds(tmp_path):
    import ir_measures
    import ranx
    from ir_measures import P, nDCG

    from berds.runs import load_run, read_trec, save_run

    # q1: a and b tie at the top, c below; q2: three-way tie
    hits = {"q1": [Hit(Passage("a", "A"), 2.0), Hit(Passage("b", "B"), 2.0), Hit(Passage("c", "C"), 1.0)],
            "q2": [Hit(Passage("x", "X"), 1.0), Hit(Passage("y", "Y"), 1.0), Hit(Passage("z", "Z"), 1.0)]}
    qs = [Question("q1", "?", ("p",)), Question("q2", "?", ("p",))]
    folder = save_run(Run.from_lists(qs, [hits["q1"], hits["q2"]], name="tied"), tmp_path / "run")
    trec = folder / "run.trec"
    # written in trec_eval's order for ties: docid descending
    assert [d for d, _ in read_trec(trec)["q1"]] == ["b", "a", "c"]
    assert [d for d, _ in read_trec(trec)["q2"]] == ["z", "y", "x"]
    assert [h.passage.id for h in load_run(folder).hits["q1"]] == ["b", "a", "c"]  # the jsonl agrees
    qrels = {"q1": {"a": 1}, "q2": {"z": 1, "x": 1}}
    measures = [P @ 1, P @ 2, nDCG @ 3]
    by_ir = ir_measures.calc_aggregate(measures, qrels, ir_measures.read_trec_run(str(trec)))
    by_ranx = ranx.evaluate(ranx.Qrels(qrels), ranx.Run.from_file(str(trec), kind="trec"),
                            ["precision@1", "precision@2", "ndcg@3"])
    assert by_ir[P @ 1] == pytest.approx(by_ranx["precision@1"]) == 0.5  # q1: b (not relevant), q2: z
    assert by_ir[P @ 2] == pytest.approx(by_ranx["precision@2"])
    assert by_ir[nDCG @ 3] == pytest.approx(by_ranx["ndcg@3"])


# --------------------------------------------------------------------------------- 7. hub names


def test_hub_names_are_the_studys(monkeypatch, tmp_path):
    from berds.questions import BERDS_SETS, EVALUATOR_ADAPTER, EVALUATOR_BASE, load_questions

    assert {n: s.hf_repo for n, s in BERDS_SETS.items()} == {
        "arguana": "timchen0618/Arguana", "kialo": "timchen0618/Kialo", "opinionqa": "timchen0618/OpinionQA"}
    assert (EVALUATOR_ADAPTER, EVALUATOR_BASE) == ("timchen0618/Mistral_BERDS_evaluator", "mistralai/Mistral-7B-Instruct-v0.2")
    monkeypatch.delenv("BERDS_DATA_DIR", raising=False)
    monkeypatch.setenv("BERDS_HOME", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(BerdsError, match=r"HF_\w+_OFFLINE is set .*load_dataset\('timchen0618/Kialo', split='dev'\)"):
        load_questions("kialo", split="dev")
    monkeypatch.setenv("BERDS_HF_REPO_KIALO", "mirror/Kialo")
    with pytest.raises(BerdsError, match="mirror/Kialo"):
        load_questions("kialo", split="dev")


# ------------------------------------------------------------------------------------ 8. NLI judge


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory):
    """A random-weight BERT-style sequence classifier with MNLI-style labels, and its tokenizer."""
    return build_tiny_nli(tmp_path_factory.mktemp("tiny-nli"))


def test_nli_judge_thresholds_p_entail_of_premise_passage_hypothesis_perspective(tiny_nli):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from berds.judges.catalogue import load_judge

    pairs = [JudgePair("cats are great pets", "cats are great pets the"), JudgePair("fish need clean water", "dogs sing"),
             JudgePair("birds sing", "birds not sing the a")]
    judge = load_judge(f"nli:{tiny_nli}")
    verdicts = judge.judge(pairs)
    tok = AutoTokenizer.from_pretrained(tiny_nli)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_nli).eval()
    for pair, verdict in zip(pairs, verdicts):
        enc = tok(pair.passage, pair.perspective, return_tensors="pt")  # premise, hypothesis
        with torch.no_grad():
            expected = torch.softmax(model(**enc).logits, dim=-1)[0, 2].item()  # ENTAILMENT is index 2
        assert verdict.p_yes == pytest.approx(expected, abs=1e-5)
        assert verdict.label == (expected >= 0.5)
    assert judge.id.startswith("nli:") and judge.id.endswith("|threshold=0.5")
    strict = load_judge(f"nli:{tiny_nli}", threshold=0.99)
    assert [v.label for v in strict.judge(pairs)] == [v.p_yes >= 0.99 for v in verdicts]
    assert strict.id != judge.id  # a new threshold never reuses cached verdicts


def test_nli_judge_on_cuda_without_a_gpu_is_one_line(tiny_nli):
    # was torch's AssertionError "Torch not compiled with CUDA enabled", a traceback from inside torch
    import torch

    from berds.judges.catalogue import load_judge

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(BerdsError, match="device 'cuda' asked for, but torch sees no CUDA GPU"):
        load_judge(f"nli:{tiny_nli}", device="cuda").judge([JudgePair("birds sing", "birds sing")])


def test_nli_entailment_label_comes_from_id2label():
    from berds.judges.nli import entailment_index

    assert entailment_index({0: "entailment", 1: "neutral", 2: "contradiction"}, None, "m") == 0
    assert entailment_index({"0": "NOT_ENTAIL", "1": "ENTAIL"}, "ENTAIL", "m") == 1
    with pytest.raises(BerdsError, match="LABEL_0, 1=LABEL_1.*-o entail_label=NAME"):
        entailment_index({0: "LABEL_0", 1: "LABEL_1"}, None, "m")
    from berds.judges.catalogue import check_judge_name

    with pytest.raises(BerdsError, match="nli:MODEL_NAME_OR_PATH"):
        check_judge_name("nli:")


def test_nli_judge_runs_in_float32_whatever_the_checkpoint_stores_unless_asked(tiny_nli, tmp_path):
    """A float16 checkpoint stayed float16 under transformers 5 (float32 under 4.x): verdicts changed with the
    library version. berds loads float32 by default; a half dtype is asked for by name and enters the id."""
    import shutil

    import torch
    from transformers import AutoModelForSequenceClassification

    from berds.judges.catalogue import load_judge

    half = tmp_path / "half"
    shutil.copytree(tiny_nli, half)
    AutoModelForSequenceClassification.from_pretrained(tiny_nli).half().save_pretrained(half)
    pairs = [JudgePair("cats are great pets", "cats are great pets the")]
    default = load_judge(f"nli:{half}")
    default.judge(pairs)
    assert default._model.dtype == torch.float32 and "dtype" not in default.id
    asked = load_judge(f"nli:{half}", dtype="bfloat16")
    asked.judge(pairs)
    assert asked._model.dtype == torch.bfloat16 and asked.id.endswith("|dtype=bfloat16")
    with pytest.raises(BerdsError, match="unknown dtype 'int8'"):
        load_judge(f"nli:{half}", dtype="int8")


@pytest.fixture(scope="module")
def tiny_t5_nli(tmp_path_factory):
    """A random-weight T5 (encoder-decoder) with a word tokenizer that has the TRUE-style answer words "1"/"0"."""
    return build_tiny_t5_nli(tmp_path_factory.mktemp("tiny-t5-nli"))


def test_nli_judge_on_a_seq2seq_model_reads_p_of_1_against_0(tiny_t5_nli):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from berds.judges.catalogue import load_judge

    pairs = [JudgePair("cats are great pets", "cats are great pets"), JudgePair("dogs sing", "fish need clean water")]
    judge = load_judge(f"nli:{tiny_t5_nli}", threshold=0.4)
    verdicts = judge.judge(pairs)
    assert judge.kind == "seq2seq"
    tok = AutoTokenizer.from_pretrained(tiny_t5_nli)
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_t5_nli).eval()
    one, zero = tok.convert_tokens_to_ids(["1", "0"])
    for pair, verdict in zip(pairs, verdicts):
        enc = tok(f"premise: {pair.passage} hypothesis: {pair.perspective}", return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc, decoder_input_ids=torch.tensor([[0]])).logits[0, 0]
        expected = torch.softmax(logits[[one, zero]], dim=-1)[0].item()
        assert verdict.p_yes == pytest.approx(expected, abs=1e-5) and verdict.label == (expected >= 0.4)


def test_an_expansion_run_with_repeats_is_saved_and_read_back_as_the_study_counted_it(tmp_path):
    from berds.evaluate.evaluation import evaluate_run
    from berds.retrievers.expansion import ExpandedRetriever, FileExpander
    from berds.retrievers.retrieve import retrieve
    from berds.runs import load_run, read_trec
    from judges_for_tests import OverlapJudge

    expander = FileExpander(FIXTURES / "study.dev.expansions.sample.jsonl")
    rec = json.loads((FIXTURES / "study.dev.expansions.sample.jsonl").read_text().splitlines()[0])
    question = Question("arguana-750", rec["question"], ("child performers face risks", "a ban robs children"))
    lists = [["x", "a1"], ["x", "b1"], ["c1"], ["d1"], ["e1"], ["f1"]]
    retriever = ExpandedRetriever(RecordingRetriever(lists), expander)
    run = retrieve(retriever, [question], k=4, out=tmp_path / "run", progress=False)
    assert [h.passage.id for h in run.hits["arguana-750"]] == ["x", "x", "c1", "d1"]
    back = load_run(tmp_path / "run")  # the manifest says the repeats are on purpose: kept, TREC file checked
    assert [h.passage.id for h in back.hits["arguana-750"]] == ["x", "x", "c1", "d1"]
    assert [d for d, _ in read_trec(tmp_path / "run" / "run.trec")["arguana-750"]] == ["x", "c1", "d1"]
    # the repeat fills a slot and counts in Precision@k, as in the study's evaluation
    judged = evaluate_run(back, OverlapJudge(threshold=2.0), (4,), progress=False)  # says No to everything
    assert judged.support["arguana-750"].shape == (2, 4)
    with pytest.raises(InputError, match="listed twice"):
        load_run(tmp_path / "run" / "run.ctxs.jsonl")  # a bare file must say so: --duplicates keep
    assert len(load_run(tmp_path / "run" / "run.ctxs.jsonl", duplicates="keep").hits["arguana-750"]) == 4


# ------------------------------------------------------------------- 9. rules pinned by the parity audit


def test_expansion_file_texts_are_queried_exactly_as_the_file_has_them(tmp_path):
    # The study's released files hold two texts with a space at one end (kialo-811 starts with " 'El ...",
    # opinionqa-921 ends with "shrinking. "); its query is question + " " + text, the text as it is.
    from berds.retrievers.expansion import ExpandedRetriever, FileExpander

    texts = [" 'El reconocimiento' puede referirse al reconocimiento mutuo.", "The middle class is shrinking. ",
             "Plain text."]
    path = tmp_path / "x.dev.expansions.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Is it?", "expansions": [
        {"name": f"n{i}", "text": t} for i, t in enumerate(texts)]}) + "\n")
    base = RecordingRetriever([["a"], ["b"], ["c"]])
    ExpandedRetriever(base, FileExpander(path)).search([Question("q1", "Is it?", ("p", "q"))], k=3)
    assert base.queries == ["Is it?  'El reconocimiento' puede referirse al reconocimiento mutuo.",
                            "Is it? The middle class is shrinking. ", "Is it? Plain text."]
    path.write_text(json.dumps({"id": "q1", "expansions": [{"name": "n", "text": "  "}]}) + "\n")
    with pytest.raises(InputError, match="has no 'text' string"):  # a blank text is still refused
        FileExpander(path)


def test_mmr_defaults_are_the_studys_settings():
    from berds.rerank.base import EmbeddingReranker
    from berds.rerank.candidates import DEFAULT_DEPTH, DEFAULT_EMBED_TEXT, DEFAULT_NORMALISATION
    from berds.rerank.embeddings import DEFAULT_MODEL, DEFAULT_POOLING, SentenceEncoder
    from berds.rerank.mmr import DEFAULT_LAMBDAS, LAMBDA_PRESETS, MMRReranker

    # A.6: UAE-Large-V1, CLS pooling, no prompt; candidates |R| = 100; Sim1 / the question's top score (code)
    assert (DEFAULT_MODEL, DEFAULT_POOLING, DEFAULT_DEPTH) == ("WhereIsAI/UAE-Large-V1", "cls", 100)
    assert (DEFAULT_NORMALISATION, DEFAULT_EMBED_TEXT) == ("question-max", "text-title")
    assert SentenceEncoder().id.endswith("|pooling=cls|prompt=none")  # builds no model until encode()
    # footnote 10: the λ grid; Table 7, every cell (Google Search output has no DPR run)
    assert DEFAULT_LAMBDAS == (0.5, 0.75, 0.9, 0.95, 0.99)
    assert LAMBDA_PRESETS == {
        ("bm25", "wikipedia"): 0.99, ("dpr", "wikipedia"): 0.95, ("contriever", "wikipedia"): 0.75,
        ("bm25", "sphere"): 0.99, ("dpr", "sphere"): 0.99, ("contriever", "sphere"): 0.95,
        ("bm25", "google-search"): 0.95, ("contriever", "google-search"): 0.95}
    reranker = MMRReranker(0.9, encoder=object())
    assert isinstance(reranker, EmbeddingReranker) and reranker.first == "rank1"
    assert (reranker.depth, reranker.normalisation, reranker.embed_text) == (100, "question-max", "text-title")


def test_retrieve_expand_defaults_are_the_studys_query_and_merge(tmp_path):
    from typer.testing import CliRunner

    from analysis_fixtures import write_corpus
    from berds.cli import app
    from berds.io import read_json

    corpus = write_corpus(tmp_path / "corpus.jsonl", [Passage("u1", "school uniforms cost money"),
                                                      Passage("u2", "uniforms stop bullying at school")])
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Should schools have uniforms?",
                                     "perspectives": ["yes", "no"]}) + "\n")
    expansions = tmp_path / "e.jsonl"
    expansions.write_text(json.dumps({"id": "q1", "expansions": [{"name": "Cost", "text": "uniforms cost"},
                                                                 {"name": "Bullying", "text": "uniforms bullying"}]}) + "\n")
    result = CliRunner().invoke(app, ["retrieve", "-r", "analysis_fixtures:OverlapRetriever", "-o", f"corpus={corpus}",
                                      "--questions", str(questions), "--k", "4", "--expand", "file",
                                      "--expansions", str(expansions), "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 0, result.output
    expansion = read_json(tmp_path / "run" / "manifest.json")["retriever"]["expansion"]
    assert expansion["query"] == "question+perspective"
    assert expansion["merge"] == "round-robin in generation order, keep-duplicates"
