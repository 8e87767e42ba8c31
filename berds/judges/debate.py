"""A devil's-advocate perspective judge: a scorer answers, a critic objects, the scorer revises.

``DebateJudge(inner, rounds=2, critic=None, tie_breaker=None)`` wraps an LLM judge (``LLMJudge``: the
*scorer*). For a batch of pairs:

1. round 0 — the scorer answers every pair with its own prompt (one batched call, as without debate);
2. round r = 1..rounds — the *critic* sees each still-open pair and the scorer's current answer and
   either replies ``NO ISSUE`` (the pair is closed) or argues the answer is wrong; the scorer then sees
   its original prompt, its answer and the objection, and answers Yes/No again. Each round makes one
   ``generate()`` call for the critic and one for the scorer, over all still-open pairs together, so it
   runs at batch speed (vLLM batches them; the HTTP backend sends them concurrently);
3. pairs the critic still objected to in the last round are settled by the optional tie-breaker:
   ``majority`` (the scorer's most frequent answer over all its turns; a tie keeps the latest answer),
   or another judge (``NAME`` as in ``--judge``) that answers them in one batch; without a tie-breaker
   the scorer's latest answer stands.

Every verdict keeps the full transcript in ``Verdict.detail["debate"]`` (the judgement cache stores it),
with the initial and the final answer, so ``debate_summary`` counts how many answers the critic changed
in each direction — also for verdicts read back from the cache. The critic is the scorer's own LLM unless
``critic`` names another (``BACKEND:MODEL`` or a judge name whose LLM is used).

    berds eval RUN --judge debate:mistral-berds --rounds 3 -o critic=openai:gpt-4o -o tie_breaker=majority
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError
from berds.judges.prompts import PromptTemplate
from berds.types import JudgePair, Verdict

DEBATE_VERSION = "debate-v1"

CRITIC_PROMPT = PromptTemplate(
    version="berds-debate-critic-v1",
    description="Devil's advocate: find the strongest reason the judge's Yes/No answer is wrong, or say NO ISSUE.",
    template=(
        "You are a devil's advocate reviewing another judge's answer. The judge was asked whether the document "
        "supports the perspective, and had to answer \"Yes\" or \"No\".\n\n"
        "Document: {document}\n\n"
        "Perspective: {perspective}\n\n"
        "The judge answered: {answer}\n\n"
        "Find the strongest reason this answer could be wrong. If there is a real flaw, explain it in one or two "
        "sentences. If the answer is correct, reply exactly: NO ISSUE"
    ),
    extra_slots=("answer",),
)

REVISION_INSTRUCTION = (
    "A reviewer objects to your answer: {objection}\n\n"
    "Reconsider. Does the document support the perspective? Answer with \"Yes\" or \"No\" only."
)

TIE_BREAKERS = ("majority",)
_NO_ISSUE = re.compile(r"^\W*no\s+issues?\b", re.IGNORECASE)


def critic_accepts(reply: str) -> bool:
    """True when the critic's reply says NO ISSUE: ``NO ISSUE`` in capitals anywhere, or a reply that
    starts with "no issue" in any case (quotes, ``*`` and punctuation before it ignored)."""
    return "NO ISSUE" in reply or bool(_NO_ISSUE.match(reply))


def _as_yes_no(label: bool) -> str:
    return "Yes" if label else "No"


def critic_prompt(pair: JudgePair, answer: bool) -> list[dict[str, str]]:
    """The critic's chat prompt for one pair and the scorer's current answer."""
    text = CRITIC_PROMPT.template.format(document=pair.passage, perspective=pair.perspective, answer=_as_yes_no(answer))
    return [{"role": "user", "content": text}]


@dataclass
class _PairState:
    pair: JudgePair
    answer: bool
    parsed: bool
    raw: str
    p_yes: float | None
    history: list[bool]
    transcript: list[dict[str, Any]]
    messages: list[dict[str, str]]
    initial: bool
    open: bool = True
    stop: str = "max-rounds"
    rounds_used: int = 0


class DebateJudge:
    """Scorer + devil's-advocate critic + revisions (see the module docstring).

    ``inner`` is an ``LLMJudge`` (the scorer). ``rounds`` is the most critic/revision rounds (>= 1).
    ``critic`` is None (the scorer's LLM) or an LLM object; ``tie_breaker`` is None, ``"majority"`` or a
    judge object. (``load_judge("debate:NAME", critic=..., tie_breaker=...)`` also takes them by name.)
    """

    OPTION_NAMES = frozenset({"rounds", "critic", "tie_breaker", "critic_max_new_tokens"})

    def __repr__(self) -> str:
        return f"DebateJudge(id={self.id!r})"

    def __init__(self, inner: Any, *, rounds: int = 2, critic: Any = None, tie_breaker: Any = None,
                 critic_max_new_tokens: int = 96):
        from berds.judges.llm_judge import unwrap_llm_judge

        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise BerdsError(f"debate rounds must be a positive integer, got {rounds!r}")
        found = unwrap_llm_judge(inner)
        if found is None:
            raise BerdsError(f"the debate judge needs an LLM scorer (an LLM judge such as transformers:MODEL or "
                             f"mistral-berds); judge {inner.id!r} has no LLM to revise its answers with")
        if getattr(getattr(found[0], "prompt", None), "plain", False):
            raise BerdsError("the debate judge continues the scorer's conversation, which a plain (no chat template) "
                             "prompt does not have — use a chat prompt (-o prompt=zero-shot or one-shot)")
        self.inner = inner
        self.scorer = found[0]
        self.rounds = rounds
        self.critic_llm, critic_name = self._resolve_critic(critic)
        self.tie_breaker, tie_name = self._resolve_tie_breaker(tie_breaker)
        self.critic_max_new_tokens = int(critic_max_new_tokens)
        if self.critic_max_new_tokens < 1:
            raise BerdsError(f"critic_max_new_tokens must be a positive integer, got {critic_max_new_tokens!r}")
        # Everything that changes a verdict keys the cache; the default critic length adds nothing, so ids
        # written before it entered still name the same verdicts.
        critic_tokens = "" if self.critic_max_new_tokens == 96 else f",critic_max_new_tokens={self.critic_max_new_tokens}"
        self.id = f"debate(rounds={rounds},critic={critic_name}{critic_tokens},tie={tie_name})>{inner.id}"
        self.prompt_version = f"{inner.prompt_version}+{DEBATE_VERSION}:{CRITIC_PROMPT.version}"
        self.name = f"debate:{getattr(inner, 'name', None) or inner.id}"
        self.batch_size = getattr(inner, "batch_size", None) or getattr(self.scorer.llm, "batch_size", 64)
        self.stats = {"pairs": 0, "changed_yes_to_no": 0, "changed_no_to_yes": 0, "closed_no_issue": 0,
                      "ended_max_rounds": 0, "tie_breaks": 0, "generate_calls": 0}

    def _resolve_critic(self, critic: Any) -> tuple[Any, str]:
        if critic is None or critic == "self":
            return self.scorer.llm, "self"
        if hasattr(critic, "generate"):
            return critic, critic.id
        raise BerdsError(f"critic must be None, an LLM, BACKEND:MODEL or a judge name, got {critic!r}")

    def _resolve_tie_breaker(self, tie_breaker: Any) -> tuple[Any, str]:
        if tie_breaker is None or tie_breaker == "none":
            return None, "none"
        if tie_breaker in TIE_BREAKERS:
            return tie_breaker, tie_breaker
        if hasattr(tie_breaker, "judge") and hasattr(tie_breaker, "id"):
            # its prompt changes its answers as much as its id does (an LLM judge's id leaves the prompt out)
            return tie_breaker, f"{tie_breaker.id}[{tie_breaker.prompt_version}]"
        raise BerdsError(f"tie_breaker must be none, majority or a judge, got {tie_breaker!r}")

    # -------------------------------------------------------------------------------- rounds

    def _generate(self, llm: Any, prompts: list[Any], max_new_tokens: int, top_logprobs: int) -> list[Any]:
        self.stats["generate_calls"] += 1
        out = llm.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0, top_logprobs=top_logprobs)
        if len(out) != len(prompts):
            raise BerdsError(f"LLM {llm.id!r} returned {len(out)} generations for {len(prompts)} prompts")
        return out

    def prepare(self) -> None:
        from berds.judges.base import prepare_judge

        prepare_judge(self.inner)  # (the critic shares the scorer's LLM unless named; a named one loads when asked)

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        from berds.judges.llm_judge import p_yes_from_logprobs, parse_answer

        if not pairs:
            return []
        scorer = self.scorer
        initial = self.inner.judge(list(pairs))
        self.stats["generate_calls"] += 1
        states = []
        for pair, v in zip(pairs, initial):
            parsed = not (v.detail and v.detail.get("unparsed"))
            states.append(_PairState(
                pair=pair, answer=v.label, parsed=parsed, raw=v.raw, p_yes=v.p_yes, history=[v.label],
                transcript=[{"round": 0, "role": "scorer", "text": v.raw, "answer": _as_yes_no(v.label) if parsed else None}],
                messages=(scorer.render(pair) if hasattr(scorer, "render") else
                          scorer.prompt.render(document=pair.passage, perspective=pair.perspective))
                + [{"role": "assistant", "content": v.raw.strip() or _as_yes_no(v.label)}],
                initial=v.label,
            ))
        threshold = getattr(self.inner, "threshold", None)
        if threshold is None:
            threshold = getattr(scorer, "threshold", None)
        for rnd in range(1, self.rounds + 1):
            open_states = [s for s in states if s.open]
            if not open_states:
                break
            critic_prompts = [critic_prompt(s.pair, s.answer) for s in open_states]
            replies = self._generate(self.critic_llm, critic_prompts, self.critic_max_new_tokens, 0)
            objecting = []
            for s, gen in zip(open_states, replies):
                s.rounds_used = rnd
                accepted = critic_accepts(gen.text)
                s.transcript.append({"round": rnd, "role": "critic", "text": gen.text, "no_issue": accepted})
                if accepted:
                    s.open, s.stop = False, "no-issue"
                else:
                    objecting.append((s, gen.text.strip()))
            if not objecting:
                break
            revision_prompts = []
            for s, objection in objecting:
                s.messages = s.messages + [{"role": "user", "content": REVISION_INSTRUCTION.format(objection=objection)}]
                revision_prompts.append(s.messages)
            revisions = self._generate(scorer.llm, revision_prompts, scorer.max_new_tokens, scorer.top_logprobs)
            for (s, _), gen in zip(objecting, revisions):
                label, parsed = parse_answer(gen.text, scorer.parse)
                p_yes = p_yes_from_logprobs(gen.first_token_logprobs)
                if threshold is not None and p_yes is not None:
                    label, parsed = p_yes >= threshold, True
                s.transcript.append({"round": rnd, "role": "scorer", "text": gen.text,
                                     "answer": _as_yes_no(label) if parsed else None})
                s.messages = s.messages + [{"role": "assistant", "content": gen.text.strip() or _as_yes_no(label)}]
                if parsed:  # an unusable revision keeps the previous answer
                    s.answer, s.parsed, s.raw, s.p_yes = label, True, gen.text, p_yes
                    s.history.append(label)
        unresolved = [s for s in states if s.open]
        self._break_ties(unresolved)
        return [self._verdict(s) for s in states]

    def _break_ties(self, unresolved: list[_PairState]) -> None:
        if not unresolved or self.tie_breaker is None:
            return
        self.stats["tie_breaks"] += len(unresolved)
        if self.tie_breaker == "majority":
            for s in unresolved:
                yes = sum(s.history)
                no = len(s.history) - yes
                label = s.answer if yes == no else yes > no
                s.transcript.append({"round": None, "role": "tie_breaker", "text": f"majority of {yes} Yes / {no} No",
                                     "answer": _as_yes_no(label)})
                s.answer = label
            return
        self.stats["generate_calls"] += 1
        verdicts = self.tie_breaker.judge([s.pair for s in unresolved])
        for s, v in zip(unresolved, verdicts):
            s.transcript.append({"round": None, "role": "tie_breaker", "text": v.raw, "answer": _as_yes_no(v.label),
                                 "judge": self.tie_breaker.id})
            s.answer, s.p_yes, s.raw = v.label, v.p_yes, v.raw
            s.parsed = not (v.detail and v.detail.get("unparsed"))

    def _verdict(self, s: _PairState) -> Verdict:
        self.stats["pairs"] += 1
        if s.open:
            self.stats["ended_max_rounds"] += 1
        else:
            self.stats["closed_no_issue"] += 1
        if s.initial and not s.answer:
            self.stats["changed_yes_to_no"] += 1
        elif not s.initial and s.answer:
            self.stats["changed_no_to_yes"] += 1
        detail: dict[str, Any] = {"debate": {
            "initial": s.initial, "final": s.answer, "rounds_used": s.rounds_used, "stop": s.stop,
            "tie_breaker": None if (not s.open or self.tie_breaker is None) else
            (self.tie_breaker if isinstance(self.tie_breaker, str) else self.tie_breaker.id),
            "transcript": s.transcript,
        }}
        if not s.parsed:
            detail["unparsed"] = True
        return Verdict(label=bool(s.answer), p_yes=s.p_yes, raw=s.raw, detail=detail)


@dataclass
class DebateSummary:
    """What the critic did to a set of debate verdicts (read from ``Verdict.detail``)."""

    pairs: int = 0
    changed_yes_to_no: int = 0
    changed_no_to_yes: int = 0
    closed_no_issue: int = 0
    ended_max_rounds: int = 0
    tie_broken: int = 0
    mean_rounds: float = 0.0
    # with gold labels: changes that fixed a wrong initial answer vs broke a right one
    changes_fixed: int | None = None
    changes_broke: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def debate_summary(verdicts: Sequence[Verdict], gold: Sequence[bool] | None = None) -> DebateSummary | None:
    """Counts of the critic's effect over ``verdicts`` (None when none carries a debate transcript).

    With ``gold`` labels, also how many changed answers went from wrong to right (``changes_fixed``) and
    from right to wrong (``changes_broke``).
    """
    infos: list[tuple[Mapping[str, Any], int]] = [
        (v.detail["debate"], i) for i, v in enumerate(verdicts) if v.detail and "debate" in v.detail]
    if not infos:
        return None
    out = DebateSummary(pairs=len(infos))
    rounds = 0
    fixed = broke = 0
    for info, i in infos:
        initial, final = bool(info["initial"]), bool(info["final"])
        out.changed_yes_to_no += initial and not final
        out.changed_no_to_yes += final and not initial
        out.closed_no_issue += info["stop"] == "no-issue"
        out.ended_max_rounds += info["stop"] == "max-rounds"
        out.tie_broken += info.get("tie_breaker") is not None
        rounds += int(info.get("rounds_used", 0))
        if gold is not None and initial != final:
            fixed += final == bool(gold[i])
            broke += initial == bool(gold[i])
    out.mean_rounds = rounds / len(infos)
    if gold is not None:
        out.changes_fixed, out.changes_broke = fixed, broke
    return out
