"""A custom judging prompt is checked when it is made: only the slots berds fills, and no ``{question}``.

Verdicts are cached by (perspective, passage) and ``evaluate_run`` puts no question in its pairs, so a
``{question}`` slot was filled with "" during evaluation and shared one cached verdict across questions
elsewhere; a stray brace or unknown slot failed with a KeyError only when the first pair was judged.
"""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.judges.debate import CRITIC_PROMPT, critic_prompt
from berds.judges.prompts import PROMPTS, PromptTemplate
from berds.types import JudgePair


@pytest.mark.parametrize("template, says", [
    ("Doc {document}\nClaim {perspective}\nQuestion {question}\nYes/No?", "{question} slot is not supported"),
    ("Doc {document} claim {perspective} {topic}", "unknown template slot(s) 'topic'"),
    ('Doc {document} claim {perspective}. Reply {"Answer": "Yes"}', "unknown template slot(s) '\"Answer\"'"),
    ("Doc {document} claim {perspective} {", "not a str.format string"),
    ("Doc {} claim {perspective}", "unknown template slot(s) ''"),
    ("Doc {document} and nothing else", "the template has no {perspective} slot"),
])
def test_bad_templates_are_refused_when_made(template, says):
    with pytest.raises(BerdsError) as e:
        PromptTemplate("mine-v1", template)
    assert says in str(e.value) and "'mine-v1'" in str(e.value)


def test_unknown_form_and_blank_version_are_refused():
    with pytest.raises(BerdsError, match="unknown form 'chat'"):
        PromptTemplate("mine-v1", "{document} {perspective}", form="chat")
    with pytest.raises(BerdsError, match="needs a version name"):
        PromptTemplate(" ", "{document} {perspective}")


def test_good_template_renders_with_literal_braces():
    prompt = PromptTemplate("mine-v1", 'Doc: {document}\nClaim: {perspective}\nReply {{"Answer": "Yes"}} or No.')
    assert prompt.render(document="D {x}", perspective="P") == [
        {"role": "user", "content": 'Doc: D {x}\nClaim: P\nReply {"Answer": "Yes"} or No.'}]


def test_shipped_prompts_and_the_critic_pass_the_check():
    assert PROMPTS  # every shipped prompt was built through the check at import
    for prompt in PROMPTS.values():
        assert PromptTemplate(prompt.version, prompt.template, prompt.system, form=prompt.form) is not None
    text = critic_prompt(JudgePair("P", "D"), True)[-1]["content"]
    assert "Document: D" in text and "The judge answered: Yes" in text
    with pytest.raises(BerdsError, match="unknown template slot"):
        PromptTemplate("critic", CRITIC_PROMPT.template)  # {answer} is allowed only where it is declared
