"""A custom judging prompt may name a slot twice (repeating the perspective before the question is common): the
check made when a prompt is built refuses only slots berds does not fill, a {question}, or a missing slot."""

from __future__ import annotations

from berds.judges.prompts import PromptTemplate


def test_a_template_repeating_a_slot_is_accepted_and_fills_every_place():
    prompt = PromptTemplate("mine-v1", "Perspective: {perspective}\nDocument: {document}\n"
                                       "Does the document support \"{perspective}\"? Yes or No.")
    text = prompt.render(document="D", perspective="P")[-1]["content"]
    assert text == 'Perspective: P\nDocument: D\nDoes the document support "P"? Yes or No.'
