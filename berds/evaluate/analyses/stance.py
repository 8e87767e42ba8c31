"""Which of a question's two perspectives *supports* it and which *opposes* it.

The study's leaning and sycophancy analyses (its Fig. 2 and 3) look at two-perspective questions and
need to know which perspective takes the question's side ("Is Jesus the Messiah?" — "Jesus is the
promised Messiah" supports, "Jesus is not the Messiah" opposes). An LLM decides with the study's stance
prompt, its Table 15 verbatim (shipped as ``berds/data/study_prompts/stance.table15.txt``; answers
"Perspective 1" or "Perspective 2"). The study asked once, perspectives in their order
(``orders="one"``, the default):

* an answer naming a perspective         -> ``answered``;
* anything else                          -> ``unparsed`` (no stance; left out).

LLMs favour the first option they are shown, so ``orders="both"`` (berds' earlier default) asks twice,
with the two perspectives in both orders, and reconciles:

* both orders name the same perspective  -> ``agreed`` (that one supports, the other opposes);
* they name different perspectives       -> ``conflict`` (no stance; the question is left out);
* an answer names neither                -> ``unparsed`` (no stance; left out).

Questions without exactly two perspectives are ``skipped``. Stances are saved as jsonl
(``{"id", "supporting", "opposing", "status", "answers"}``, indices into the question's perspectives), and
a hand-written file with just ``{"id", "supporting"}`` per line works too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError, InputError
from berds.types import Question

STATUSES = ("answered", "agreed", "conflict", "unparsed", "skipped", "given")
ORDERS = ("one", "both")


@dataclass(frozen=True)
class StancePrompt:
    """A stance prompt: the study's form has ``[Question]``, ``[P1]``, ``[P2]``; berds' earlier one
    ``{question}``, ``{first}``, ``{second}`` format slots."""

    version: str
    template: str

    def render(self, question: str, first: str, second: str) -> list[dict[str, str]]:
        if "[P1]" in self.template:
            slots = {"[Question]": question, "[P1]": first, "[P2]": second}
            text = re.sub(r"\[Question\]|\[P1\]|\[P2\]", lambda m: slots[m.group(0)], self.template)
        else:
            text = self.template.format(question=question, first=first, second=second)
        return [{"role": "user", "content": text}]


def _study_stance_text() -> str:
    path = Path(__file__).resolve().parents[2] / "data" / "study_prompts" / "stance.table15.txt"
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


# The study's Table 15, its words verbatim (see berds/data/study_prompts/PROVENANCE.md).
STANCE_PROMPT = StancePrompt(version="berds-study-t15-stance-v1", template=_study_stance_text())

# berds' earlier wording (answers A/B). Kept as a named option: -o prompt=paraphrase.
PARAPHRASE_STANCE_PROMPT = StancePrompt(
    version="berds-t15-stance-v1",
    template=(
        "Below is a question and two perspectives on it.\n\n"
        "Question: {question}\n\n"
        "Perspective A: {first}\n\n"
        "Perspective B: {second}\n\n"
        "One perspective supports the question (it answers \"yes\", or agrees with the position the question "
        "asks about); the other opposes it. Which perspective supports the question? "
        "Answer with \"A\" or \"B\" only.\n\nAnswer:"
    ),
)
STANCE_PROMPTS = {"study": STANCE_PROMPT, "paraphrase": PARAPHRASE_STANCE_PROMPT}

_ANSWER = re.compile(r"^[\s\"'*(\[]*(?:perspective\s+|option\s+|answer\s*:?\s*)?([AB12])\b", re.IGNORECASE)


def parse_choice(text: str) -> str | None:
    """``"A"`` (the first perspective) or ``"B"`` (the second) from an answer such as ``"Perspective 1"``,
    ``"2"``, ``"A"``, ``" b."``, ``"Perspective B"``, ``"**A**"``; else None."""
    match = _ANSWER.match(text or "")
    if not match:
        return None
    return {"1": "A", "2": "B"}.get(match.group(1), match.group(1).upper())


@dataclass(frozen=True)
class Stance:
    """The stance of a two-perspective question: indices of the supporting and opposing perspective."""

    qid: str
    supporting: int | None
    opposing: int | None
    status: str
    answers: tuple[str, ...] = field(default=())

    @property
    def known(self) -> bool:
        return self.supporting is not None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.qid, "supporting": self.supporting, "opposing": self.opposing, "status": self.status,
                "answers": list(self.answers)}


def reconcile(qid: str, forward: str, swapped: str) -> Stance:
    """Combine the answer with perspectives in order (0 as A, 1 as B) and swapped (1 as A, 0 as B)."""
    first, second = parse_choice(forward), parse_choice(swapped)
    answers = (forward, swapped)
    if first is None or second is None:
        return Stance(qid, None, None, "unparsed", answers)
    pick_forward = 0 if first == "A" else 1
    pick_swapped = 1 if second == "A" else 0
    if pick_forward != pick_swapped:
        return Stance(qid, None, None, "conflict", answers)
    return Stance(qid, pick_forward, 1 - pick_forward, "agreed", answers)


def single_answer(qid: str, answer: str) -> Stance:
    """The study's one-order stance: the perspective the answer names supports, the other opposes."""
    choice = parse_choice(answer)
    if choice is None:
        return Stance(qid, None, None, "unparsed", (answer,))
    pick = 0 if choice == "A" else 1
    return Stance(qid, pick, 1 - pick, "answered", (answer,))


def detect_stances(questions: Sequence[Question], llm: Any, *, prompt: StancePrompt | str = STANCE_PROMPT,
                   orders: str = "one", max_new_tokens: int = 8, batch_size: int = 32,
                   progress: bool = False) -> dict[str, Stance]:
    """Ask ``llm`` (any ``berds.llm`` backend, greedy) for the stance of every two-perspective question,
    in the perspectives' order (``orders="one"``, the study) or in both orders, reconciled (``"both"``)."""
    from rich.progress import Progress

    if isinstance(prompt, str):
        if prompt not in STANCE_PROMPTS:
            raise BerdsError(f"unknown stance prompt {prompt!r}; use one of {', '.join(STANCE_PROMPTS)}")
        prompt = STANCE_PROMPTS[prompt]
    if orders not in ORDERS:
        raise BerdsError(f"unknown stance orders {orders!r}; use one of {', '.join(ORDERS)}")
    per_question = 2 if orders == "both" else 1

    stances: dict[str, Stance] = {}
    pairs = [q for q in questions if len(q.perspectives) == 2]
    for q in questions:
        if len(q.perspectives) != 2:
            stances[q.id] = Stance(q.id, None, None, "skipped")
    with Progress(disable=not progress) as bar:
        task = bar.add_task("stance of perspectives", total=len(pairs))
        for lo in range(0, len(pairs), batch_size):
            batch = pairs[lo:lo + batch_size]
            prompts = []
            for q in batch:
                a, b = q.perspectives
                prompts += [prompt.render(q.text, a, b)] + ([prompt.render(q.text, b, a)] if per_question == 2 else [])
            generations = llm.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0)
            if len(generations) != len(prompts):
                raise BerdsError(f"LLM returned {len(generations)} answers for {len(prompts)} prompts")
            for i, q in enumerate(batch):
                stances[q.id] = (reconcile(q.id, generations[2 * i].text, generations[2 * i + 1].text)
                                 if per_question == 2 else single_answer(q.id, generations[i].text))
            bar.advance(task, len(batch))
    return {q.id: stances[q.id] for q in questions}


def stance_counts(stances: Mapping[str, Stance]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for st in stances.values():
        counts[st.status] = counts.get(st.status, 0) + 1
    return {k: v for k, v in counts.items() if v}


def check_stance_answers(stances: Mapping[str, Stance], out: str | Path, limit: float | None = None) -> None:
    """Refuse stances whose LLM answered with neither perspective for more than ``limit`` (default: the
    evaluations' 5%) of the questions: the leaning analysis would rest on guesses (the file stays written, for a
    look). ``berds analyze stance --allow-unparsed`` accepts them."""
    from berds.evaluate.evaluation import MAX_UNPARSED, UnparsedAnswersError

    limit = MAX_UNPARSED if limit is None else limit
    unparsed = sum(st.status == "unparsed" for st in stances.values())
    if stances and unparsed / len(stances) > limit:
        raise UnparsedAnswersError(
            f"the stance LLM named neither perspective for {unparsed} of {len(stances)} questions "
            f"({100 * unparsed / len(stances):.1f}%; limit {100 * limit:g}%; written to {out} for a look) — check the "
            "model and --prompt, or pass --allow-unparsed to accept them (they are left out of the leaning analysis)")


def write_stances(path: str | Path, stances: Mapping[str, Stance], *, prompt_version: str = STANCE_PROMPT.version,
                  llm_id: str = "") -> int:
    from berds.io import write_jsonl

    return write_jsonl(path, ({**s.to_json(), "prompt": prompt_version, **({"llm": llm_id} if llm_id else {})}
                              for s in stances.values()))


def read_stances(path: str | Path, questions: Mapping[str, Question] | None = None, *,
                 allow_extra: bool = False) -> dict[str, Stance]:
    """Stances from jsonl. ``supporting`` is 0 or 1 (or null for unknown); ``opposing`` defaults to the other.

    With ``questions`` given, every id must be one of them (``allow_extra``: ids of other questions are
    left out, e.g. a whole set's stances used for a run of some of its questions) and have exactly two
    perspectives.
    """
    from berds.io import iter_jsonl

    path = Path(path)
    out: dict[str, Stance] = {}
    for line, rec in iter_jsonl(path):
        qid = rec.get("id")
        if qid is None:
            raise InputError("record has no 'id'", path=path, line=line, fix='each line needs {"id", "supporting": 0 or 1}')
        qid = str(qid)
        if "supporting" not in rec:
            raise InputError("record has no 'supporting' (0 or 1: which perspective supports the question)",
                             path=path, line=line, record=qid)
        sup = rec["supporting"]
        # an index into the perspectives: 1.0 or true would pass ``in (0, 1)`` and break numpy indexing later
        if sup is not None and (type(sup) is not int or sup not in (0, 1)):
            raise InputError(f"'supporting' must be 0, 1 or null, got {sup!r}", path=path, line=line, record=qid)
        opp = rec.get("opposing", None if sup is None else 1 - sup)
        if sup is not None and (type(opp) is not int or opp != 1 - sup):
            raise InputError(f"'opposing' must be the other perspective ({1 - sup}), got {opp!r}", path=path,
                             line=line, record=qid)
        status = rec.get("status") or ("given" if sup is not None else "unparsed")
        if status not in STATUSES:
            raise InputError(f"unknown status {status!r} (one of {', '.join(STATUSES)})", path=path, line=line, record=qid)
        if questions is not None:
            if qid not in questions:
                if allow_extra:
                    continue
                raise InputError("question id is not in the run / question set", path=path, line=line, record=qid,
                                 fix="use the stances computed for these questions")
            if sup is not None and len(questions[qid].perspectives) != 2:
                raise InputError(f"question has {len(questions[qid].perspectives)} perspectives; stances need exactly 2",
                                 path=path, line=line, record=qid,
                                 fix="drop this line or set \"supporting\": null: the stance analyses take two-perspective "
                                     "questions only (`berds analyze stance` writes the others so, as skipped)")
        if qid in out:
            raise InputError("duplicate question id", path=path, line=line, record=qid)
        out[qid] = Stance(qid, sup, opp, status, tuple(rec.get("answers") or ()))
    if not out and not allow_extra:
        raise InputError("holds no stances", path=path)
    return out


def resolve_stances(questions: Sequence[Question], *, stances: str | Path | None = None, llm: Any = None,
                    llm_options: Mapping[str, Any] | None = None, progress: bool = False,
                    orders: str = "one", prompt: str = "study") -> dict[str, Stance]:
    """Stances from a file (``stances``) or computed with an LLM (``llm``: ``BACKEND:MODEL`` or an object)."""
    if stances is not None:
        found = read_stances(stances, {q.id: q for q in questions}, allow_extra=True)
        if not found:
            raise InputError("holds no stance for any of these questions", path=stances,
                             fix="use the stances computed for this question set (`berds analyze stance`)")
        return found
    if llm is None:
        raise BerdsError("stances are needed: pass --stances FILE (stances=, from `berds analyze stance`) or "
                         "--stance-llm BACKEND:MODEL (llm=)")
    if isinstance(llm, str):
        from berds.llm import load_llm_by_name

        llm = load_llm_by_name(llm, **dict(llm_options or {}))
    return detect_stances(questions, llm, progress=progress, orders=orders, prompt=prompt)


def stance_file(questions: str | Path, llm: str | Any, out: str | Path, *, split: str = "test", limit: int | None = None,
                llm_options: Mapping[str, Any] | None = None, progress: bool = False, orders: str = "one",
                prompt: str = "study") -> dict[str, Stance]:
    """``berds analyze stance``: stances of a question set computed with ``llm`` and written to ``out``."""
    from berds.questions import load_questions
    from berds.llm import load_llm_by_name

    qs = load_questions(questions, split, limit=limit)
    model = load_llm_by_name(llm, **dict(llm_options or {})) if isinstance(llm, str) else llm
    stances = detect_stances(qs, model, progress=progress, orders=orders, prompt=prompt)
    write_stances(out, stances, llm_id=getattr(model, "id", ""), prompt_version=STANCE_PROMPTS[prompt].version)
    return stances
