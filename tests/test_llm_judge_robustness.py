"""The LLM judge on what the study never met: empty answers, replies nested past the JSON parser, log-probabilities
out of range, bad judge options, and a local Mistral folder whose name does not say so (the study sent Mistral no
system turn)."""

from __future__ import annotations

import json
import shutil

import pytest

from berds.errors import BerdsError
from berds.judges.llm_judge import LLMJudge, p_yes_from_logprobs, parse_answer
from berds.llm.base import Generation
from berds.types import JudgePair
from llm_fixtures import tiny_mistral  # noqa: F401  (session fixture)

PAIR = JudgePair("Bike lanes make streets safer.", "Cities that added bike lanes saw injuries fall.")


class FakeLLM:
    def __init__(self, replies, logprobs=None, id="openai:gpt-4@h/v1"):  # noqa: A002
        self.id, self.replies, self.logprobs = id, list(replies), logprobs

    def generate(self, prompts, *, max_new_tokens=16, temperature=0.0, top_logprobs=0):
        return [Generation(self.replies[i % len(self.replies)], self.logprobs) for i in range(len(prompts))]


def test_an_empty_reply_is_no_as_in_the_study_but_counted_unparsed():
    for reply in ("", "   ", "\n", '{"answer": "Yes"}', '{"Reason": "it says yes"}'):
        assert parse_answer(reply) == (False, False), reply
    assert parse_answer('{"Answer": "no"}') == (False, True)
    verdicts = LLMJudge(FakeLLM(["", "Yes", " \n"])).judge([PAIR] * 3)
    assert [v.label for v in verdicts] == [False, True, False]
    assert [v.detail for v in verdicts] == [{"unparsed": True}, None, {"unparsed": True}]


def test_replies_and_logprobs_the_parser_cannot_take_are_answers_not_crashes():
    assert parse_answer('{"Answer":' * 100_000) == (False, False)  # past json's recursion limit
    assert p_yes_from_logprobs({"Yes": 1000.0, "No": -1.0}) == pytest.approx(1 / (1 + 2.718281828 ** -1))
    assert p_yes_from_logprobs({"Yes": float("nan"), "No": -1.0}) == 0.0


def test_judge_options_are_checked_before_they_enter_the_id():
    llm = FakeLLM(["Yes"])
    for bad in ({"threshold": "0.5"}, {"threshold": True}, {"threshold": float("nan")}, {"threshold": 1.5},
                {"threshold": 0.5, "top_logprobs": 0}, {"max_new_tokens": True}, {"max_new_tokens": 0},
                {"top_logprobs": -1}, {"top_logprobs": 2.0}):
        with pytest.raises(BerdsError, match="threshold|max_new_tokens|top_logprobs"):
            LLMJudge(llm, **bad)
    # a backend without logprobs: the parsed answer decides, and the verdict says P(Yes) was missing
    [verdict] = LLMJudge(llm, threshold=0.9).judge([PAIR])
    assert verdict.label is True and verdict.detail == {"no_p_yes": True}


def test_a_local_mistral_folder_named_otherwise_gets_no_system_turn(tiny_mistral, tmp_path):
    from berds.llm.transformers_backend import TransformersLLM

    folder = shutil.copytree(tiny_mistral, tmp_path / "evaluator-merged")
    llm = TransformersLLM(str(folder), device="cpu")
    assert "mistral" not in llm.id.lower()
    judge = LLMJudge(llm)
    assert judge.prompt_version == "berds-study-chat-v1+no-system+answer-rule-2"
    assert [m["role"] for m in judge.render(PAIR)] == ["user"]
    assert LLMJudge(llm, system="keep").prompt_version == "berds-study-chat-v1+answer-rule-2"
    # another architecture in a local folder keeps it
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    assert LLMJudge(TransformersLLM(str(folder), device="cpu")).prompt_version == "berds-study-chat-v1+answer-rule-2"


def test_a_plain_prompt_is_bos_then_its_own_tokens_for_tokenizers_that_mark_only_the_first_word(tiny_mistral, tmp_path):
    # Sentencepiece tokenizers with Metaspace(prepend_scheme="first") read "<s>Document" as a word in mid-text:
    # the literal BOS string must not be glued to the text before tokenising (docs: "only the tokenizer's BOS").
    import torch
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    from berds.judges.prompts import PLAIN
    from berds.llm.shared import prompt_token_ids, score_token_rows
    from berds.llm.transformers_backend import TransformersLLM

    folder = shutil.copytree(tiny_mistral, tmp_path / "first-scheme")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(prepend_scheme="first"), pre_tokenizers.Punctuation()])
    tokenizer.save_pretrained(folder)
    llm = TransformersLLM(str(folder), device="cpu")
    [message] = prompt = PLAIN.render(document=PAIR.passage, perspective=PAIR.perspective)
    expected = [llm.tokenizer.bos_token_id] + llm.tokenizer(message["content"], add_special_tokens=False)["input_ids"]
    assert expected[1] == llm.tokenizer.convert_tokens_to_ids("▁Document")  # the word as tokenizer(text) reads it
    assert prompt_token_ids(llm.tokenizer, prompt) == expected
    assert score_token_rows(llm.tokenizer, [prompt], ["Yes"])[0][0][0] == expected
    [generation] = llm.generate([prompt], max_new_tokens=2, top_logprobs=3)
    with torch.inference_mode():
        logits = llm.model(torch.tensor([expected])).logits[0, -1]
    top = torch.topk(torch.log_softmax(logits.float(), -1), 3)
    for token_id, value in zip(top.indices.tolist(), top.values.tolist()):
        assert generation.first_token_logprobs[llm.tokenizer.decode([token_id])] == pytest.approx(value, abs=1e-4)
