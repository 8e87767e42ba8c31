"""Bias audit of a perspective judge: re-judge the same labelled pairs under controlled changes.

Each *variant* changes one thing a fair judge should be indifferent to (or should react to in a known way):

===================  ======  ==========================================================================
variant              kind    change                                          a fair judge ...
===================  ======  ==========================================================================
statement-first      prompt  the perspective is shown before the document    answers the same
labels-no-yes        prompt  the instruction lists "No" before "Yes"         answers the same
labels-true-false    prompt  answer words True / False                       answers the same
labels-a-b           prompt  answer words A / B (options "(A) Yes (B) No")   answers the same
sentence-order       input   the document's sentences in reverse order       answers the same
negation             input   the perspective negated ("It is not the case    says No where the document
                             that ...")                                      supports the original
===================  ======  ==========================================================================

*Prompt* variants are ``PromptTemplate`` variants of the judge's own prompt plus an answer mapping (True ->
Yes, A -> Yes); they apply to LLM judges (``LLMJudge``). *Input* variants transform the pair before any
judge sees it, so they apply to every judge. Every variant is itself a judge with its own id / prompt
version, so its verdicts go through the judgement cache like any other.

Per variant the audit reports answer flips (Yes->No, No->Yes), McNemar's test on the answers (does the
change shift how often the judge says Yes?) and on correctness, the change in accuracy / F1 / Yes share,
and — for runs given — the change in MRecall@k and in the ranking of the runs (Kendall's τ-b). For
``negation`` the expected answer on gold-positive pairs becomes No: the report gives how often the judge
still says Yes to the negated statement ("ignores negation"). A *stance* section compares the judge's
error rates on supporting and opposing perspectives (Fisher's exact test), which is what the
stance-corrected sycophancy Δ (``berds.trust.stance_corrected``) corrects for.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.judges.llm_judge import unwrap_llm_judge
from berds.judges.prompts import PromptTemplate
from berds.types import JudgePair, Verdict

# ----------------------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    """A controlled change. ``expectation``: ``same`` (answers should not change) or ``negated``."""

    name: str
    kind: str
    description: str
    expectation: str = "same"


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("statement-first", "prompt", "perspective shown before the document"),
    Variant("labels-no-yes", "prompt", 'instruction lists "No" before "Yes"'),
    Variant("labels-true-false", "prompt", "answer words True/False instead of Yes/No"),
    Variant("labels-a-b", "prompt", "answer words A/B with options (A) Yes (B) No"),
    Variant("sentence-order", "input", "document sentences in reverse order"),
    Variant("negation", "input", 'perspective negated ("It is not the case that ...")', expectation="negated"),
)}

# The sentences of the study's prompt (berds.judges.prompts) that prompt variants rewrite.
_ANSWER_INSTRUCTION = 'Answer with "Yes" or "No" only.'
_QUESTION = "Does the document support the perspective? Answer:"
_BLOCKS = re.compile(r"Document: (?P<doc>.*?)\n\nPerspective: (?P<persp>.*?)\n\n", re.DOTALL)


# The same for the study's own prompt files (berds/data/study_prompts, forms study-chat / study-plain).
_STUDY_BLOCKS = re.compile(r"(Document(?P<ex> for Example 1)?: [^\n]*)\n(Statement(?P=ex)?: [^\n]*)\n")
_STUDY_QUESTION = "Does the document support the statement?"
_STUDY_ANSWER_WORDS = '"Yes" or "No"'
# the one-shot example's answer: the assistant turn (chat) or the line after "Answer for Example 1:" (plain)
_STUDY_EXAMPLE_ANSWER = re.compile(r"(<\|im_start\|>assistant\n|Answer for Example 1:\n)(Yes|No)\n")


def _study_prompt_variant(text: str, name: str) -> tuple[str, tuple[str, str]] | None:
    if name == "statement-first":
        if not _STUDY_BLOCKS.search(text):
            return None
        return _STUDY_BLOCKS.sub(lambda m: f"{m.group(3)}\n{m.group(1)}\n", text), ("Yes", "No")
    if _STUDY_ANSWER_WORDS not in text:
        return None
    if name == "labels-no-yes":
        return text.replace(_STUDY_ANSWER_WORDS, '"No" or "Yes"'), ("Yes", "No")
    pos, neg = ("True", "False") if name == "labels-true-false" else ("A", "B")
    question = ("True or False: the document supports the statement." if pos == "True"
                else "Does the document support the statement? (A) Yes (B) No")
    new = _STUDY_EXAMPLE_ANSWER.sub(lambda m: m.group(1) + (pos if m.group(2) == "Yes" else neg) + "\n", text)
    new = new.replace(_STUDY_QUESTION, question).replace('"Yes"', f'"{pos}"').replace('"No"', f'"{neg}"')
    return new, (pos, neg)


def prompt_variant(template: PromptTemplate, name: str) -> tuple[PromptTemplate, str, str] | None:
    """``(variant template, positive word, negative word)``, or None when ``template`` lacks the wording
    this variant rewrites (a custom prompt: the report marks the variant n/a)."""
    text = template.template
    if name not in VARIANTS or VARIANTS[name].kind != "prompt":
        raise BerdsError(f"{name!r} is not a prompt variant; prompt variants: "
                         f"{', '.join(v.name for v in VARIANTS.values() if v.kind == 'prompt')}")
    if template.form in ("study-chat", "study-plain"):
        found = _study_prompt_variant(text, name)
        if found is None:
            return None
        new, words = found
        return (PromptTemplate(version=f"{template.version}~{name}", template=new, system=template.system,
                               description=f"{template.description} [{VARIANTS[name].description}]",
                               form=template.form, source=template.source), *words)
    if name == "statement-first":
        if not _BLOCKS.search(text):
            return None
        new = _BLOCKS.sub(lambda m: f"Perspective: {m['persp']}\n\nDocument: {m['doc']}\n\n", text)
        words = ("Yes", "No")
    elif name == "labels-no-yes":
        if _ANSWER_INSTRUCTION not in text:
            return None
        new = text.replace(_ANSWER_INSTRUCTION, 'Answer with "No" or "Yes" only.')
        words = ("Yes", "No")
    elif name in ("labels-true-false", "labels-a-b"):
        if _ANSWER_INSTRUCTION not in text or _QUESTION not in text:
            return None
        pos, neg = ("True", "False") if name == "labels-true-false" else ("A", "B")
        question = ("True or False: the document supports the perspective. Answer:" if pos == "True"
                    else "Does the document support the perspective?\n(A) Yes\n(B) No\nAnswer:")
        new = text.replace(f"{_QUESTION} Yes", f"{question} {pos}")  # a worked example's answer (one-shot)
        new = new.replace(f"{_QUESTION} No", f"{question} {neg}")
        new = new.replace(_QUESTION, question).replace(_ANSWER_INSTRUCTION, f'Answer with "{pos}" or "{neg}" only.')
        words = (pos, neg)
    else:
        raise BerdsError(f"{name!r} is not a prompt variant; prompt variants: "
                         f"{', '.join(v.name for v in VARIANTS.values() if v.kind == 'prompt')}")
    return (PromptTemplate(version=f"{template.version}~{name}", template=new, system=template.system,
                           description=f"{template.description} [{VARIANTS[name].description}]"), *words)


_FIRST_WORD = re.compile(r"[A-Za-z]+")


def parse_label_word(text: str, positive: str, negative: str) -> tuple[bool, bool]:
    """``(label, parsed)``: the first word of ``text`` (case-insensitive, punctuation skipped) is
    ``positive`` -> True, ``negative`` -> False; anything else is unparsed and counts as No."""
    match = _FIRST_WORD.search(text)
    word = match.group(0).lower() if match else ""
    if word == positive.lower():
        return True, True
    if word == negative.lower():
        return False, True
    return False, False


def p_label_from_logprobs(logprobs: Mapping[str, float] | None, positive: str, negative: str) -> float | None:
    """P(positive) renormalised over first tokens that are the positive or negative word (spaces,
    sentencepiece ``▁`` / GPT ``Ġ`` markers, parentheses and case ignored); None when neither appears."""
    if not logprobs:
        return None
    pos = neg = 0.0
    for token, lp in logprobs.items():
        word = token.replace("▁", " ").replace("Ġ", " ").strip().strip("()").lower()
        if word == positive.lower():
            pos += math.exp(lp)
        elif word == negative.lower():
            neg += math.exp(lp)
    if pos + neg == 0.0:
        return None
    return pos / (pos + neg)


class PromptVariantJudge:
    """An ``LLMJudge`` asked with a variant prompt, its answer words mapped back to Yes/No.

    Same LLM, decoding and threshold as the base judge; a new prompt version (and, when the answer words
    change, a new id), so cached answers never mix with the base prompt's.
    """

    def __init__(self, base: Any, variant: str, template: PromptTemplate, positive: str, negative: str):
        self.base, self.variant = base, variant
        self.prompt, self.positive, self.negative = template, positive, negative
        self.llm = base.llm
        self.id = base.id if (positive, negative) == ("Yes", "No") else f"{base.id}|answers={positive}/{negative}"
        self.prompt_version = template.version + ("+no-system" if getattr(base, "drop_system", False) else "")
        self.name = f"{getattr(base, 'name', base.id)}~{variant}"
        self.batch_size = getattr(base, "batch_size", None) or getattr(base.llm, "batch_size", 64)

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        from berds.judges.llm_judge import parse_answer

        if not pairs:
            return []
        drop = getattr(self.base, "drop_system", False)
        prompts = [self.prompt.render(document=p.passage, perspective=p.perspective,
                                      drop_system=drop) for p in pairs]
        generations = self.llm.generate(prompts, max_new_tokens=self.base.max_new_tokens, temperature=0.0,
                                        top_logprobs=self.base.top_logprobs)
        out = []
        for gen in generations:
            if (self.positive, self.negative) == ("Yes", "No"):
                label, parsed = parse_answer(gen.text, self.base.parse)
            else:
                label, parsed = parse_label_word(gen.text, self.positive, self.negative)
            p_yes = p_label_from_logprobs(gen.first_token_logprobs, self.positive, self.negative)
            threshold = getattr(self.base, "threshold", None)
            if threshold is not None and p_yes is not None:
                label = p_yes >= threshold
            out.append(Verdict(label, p_yes, gen.text, None if parsed else {"unparsed": True}))
        return out


def negate_statement(statement: str) -> str:
    """``"X."`` -> ``"It is not the case that x."`` — a negation that is grammatical for any statement.

    The first letter is lower-cased only when the first word is an ordinary capitalised word (not "I",
    not an acronym), so "NASA is ..." stays "NASA is ...".
    """
    s = statement.strip()
    if not s:
        return s
    first = s.split()[0]
    if (len(first) > 1 and first[0].isupper() and first[1:].islower()) or first == "A":
        s = s[0].lower() + s[1:]
    return f"It is not the case that {s}"


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")


def reverse_sentences(text: str) -> str:
    """The sentences of ``text`` in reverse order (split after ``.``, ``!``, ``?`` followed by space).

    A trailing fragment without end punctuation — typically the title BERDS appends to a passage
    (``text + " " + title``) — stays last, so it is not glued onto another sentence.
    """
    parts = [p for p in _SENTENCE.split(text.strip()) if p]
    tail = [parts.pop()] if parts and parts[-1][-1] not in ".!?\"'”’)" else []
    return " ".join(list(reversed(parts)) + tail)


INPUT_TRANSFORMS: dict[str, Callable[[JudgePair], JudgePair]] = {
    "negation": lambda p: JudgePair(negate_statement(p.perspective), p.passage, p.question),
    "sentence-order": lambda p: JudgePair(p.perspective, reverse_sentences(p.passage), p.question),
}


class InputTransformJudge:
    """Any judge, shown transformed pairs. The id names the transform (verdicts are cached per original pair)."""

    def __init__(self, inner: Any, name: str, transform: Callable[[JudgePair], JudgePair] | None = None):
        if transform is None:
            if name not in INPUT_TRANSFORMS:
                raise BerdsError(f"unknown input transform {name!r}; known: {', '.join(INPUT_TRANSFORMS)}")
            transform = INPUT_TRANSFORMS[name]
        self.inner, self.variant, self.transform = inner, name, transform
        self.id = f"{inner.id}|input={name}"
        self.prompt_version = inner.prompt_version
        self.name = f"{getattr(inner, 'name', None) or inner.id}~{name}"
        self.batch_size = getattr(inner, "batch_size", 64)

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        return self.inner.judge([self.transform(p) for p in pairs])


def variant_judge(judge: Any, name: str) -> Any | None:
    """``judge`` under variant ``name``, or None when the variant does not apply to it."""
    if name not in VARIANTS:
        from berds.errors import UnknownNameError

        raise UnknownNameError("audit variant", name, list(VARIANTS))
    if VARIANTS[name].kind == "input":
        return InputTransformJudge(judge, name)
    found = unwrap_llm_judge(judge)
    if found is None:
        return None
    llm_judge, rewrap = found
    made = prompt_variant(llm_judge.prompt, name)
    if made is None:
        return None
    return rewrap(PromptVariantJudge(llm_judge, name, *made))


# ----------------------------------------------------------------------------------- statistics


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact test on the 2x2 table [[a, b], [c, d]]: the summed hypergeometric
    probability of all tables with the same margins that are no more likely than the observed one."""
    row1, col1, n = a + b, a + c, a + b + c + d
    if n == 0:
        return 1.0
    lo, hi = max(0, col1 - (n - row1)), min(row1, col1)

    def prob(x: int) -> float:
        return math.comb(col1, x) * math.comb(n - col1, row1 - x) / math.comb(n, row1)

    observed = prob(a)
    return float(min(1.0, sum(p for p in (prob(x) for x in range(lo, hi + 1)) if p <= observed * (1 + 1e-9))))


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order: with the m p-values sorted ascending,
    ``p_adj_(i) = max_{j <= i} min(1, (m − j) · p_(j))`` (j from 0). Rejecting ``p_adj < alpha`` keeps the
    chance of any false alarm across all m tests below alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ-b: (concordant − discordant) / √((n0 − ties_x)(n0 − ties_y)), n0 = n(n−1)/2.
    NaN when either side is constant."""
    n = len(x)
    if n != len(y):
        raise ValueError("x and y differ in length")
    conc = disc = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0:
                ties_x += 1
            if dy == 0:
                ties_y += 1
            if dx and dy:
                conc += dx == dy
                disc += dx != dy
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - ties_x) * (n0 - ties_y))
    return float("nan") if denom == 0 else (conc - disc) / denom


def ranks_desc(scores: Sequence[float]) -> list[float]:
    """Rank 1 = best (highest score); tied scores share their average rank."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for pos in range(i, j + 1):
            ranks[order[pos]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


# ----------------------------------------------------------------------------------- report


@dataclass
class RunEffect:
    """MRecall@k of each run judged by the base judge and by the variant judge."""

    base: dict[str, float]
    variant: dict[str, float]
    tau: float
    ranking_changed: bool

    def to_json(self) -> dict[str, Any]:
        return {"mrecall_base": self.base, "mrecall_variant": self.variant,
                "delta": {r: self.variant[r] - self.base[r] for r in self.base},
                "kendall_tau_b": self.tau, "ranking_changed": self.ranking_changed,
                "ranks_base": dict(zip(self.base, ranks_desc(list(self.base.values())))),
                "ranks_variant": dict(zip(self.variant, ranks_desc(list(self.variant.values()))))}


@dataclass
class VariantResult:
    name: str
    kind: str
    description: str
    expectation: str
    applicable: bool
    judge_id: str = ""
    prompt_version: str = ""
    n: int = 0
    yes_to_no: int = 0
    no_to_yes: int = 0
    unparsed: int = 0
    mcnemar_answers: Any = None
    mcnemar_correct: Any = None
    base_metrics: dict[str, float] = field(default_factory=dict)
    variant_metrics: dict[str, float] = field(default_factory=dict)
    # negation: among gold positives the base judge said Yes to, how many Yes survive the negation
    negation_base_true_positives: int = 0
    negation_still_yes: int = 0
    runs: RunEffect | None = None
    p_value: float | None = None      # min(1, 2·min(McNemar p on answers, on correctness))
    p_adjusted: float | None = None   # Holm-adjusted over all the audit's tests
    biased: bool = False
    reason: str = ""

    @property
    def flips(self) -> int:
        return self.yes_to_no + self.no_to_yes

    def delta(self, metric: str) -> float:
        return self.variant_metrics.get(metric, float("nan")) - self.base_metrics.get(metric, float("nan"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "description": self.description,
                               "expectation": self.expectation, "applicable": self.applicable}
        if not self.applicable:
            return {**out, "reason": self.reason}
        out.update({
            "judge_id": self.judge_id, "prompt_version": self.prompt_version, "n": self.n,
            "flips": {"yes_to_no": self.yes_to_no, "no_to_yes": self.no_to_yes}, "unparsed": self.unparsed,
            "mcnemar_answers": self.mcnemar_answers.to_json() if self.mcnemar_answers else None,
            "mcnemar_correct": self.mcnemar_correct.to_json() if self.mcnemar_correct else None,
            "base": self.base_metrics, "variant": self.variant_metrics,
            **({"delta": {k: self.delta(k) for k in self.base_metrics}} if self.expectation == "same" else {}),
            "p_value": self.p_value, "p_holm": self.p_adjusted, "bias_found": self.biased, "reason": self.reason,
        })
        if self.expectation == "negated":
            out["negation"] = {"base_true_positives": self.negation_base_true_positives,
                               "still_yes_after_negation": self.negation_still_yes}
        if self.runs is not None:
            out["runs"] = self.runs.to_json()
        return out


@dataclass
class StanceAudit:
    """The base judge's errors on supporting vs opposing perspectives."""

    n_with_stance: int
    n_without_stance: int
    counts: dict[str, dict[str, int]]          # stance -> tp/fp/fn/tn
    fisher_fp_p: float                          # false-positive rate differs between stances?
    fisher_fn_p: float                          # false-negative rate differs?
    both_sides_judge: int = 0                   # documents the judge says support both sides
    both_sides_gold: int = 0                    # ... and the humans
    documents_with_both: int = 0
    p_value: float = 1.0              # min(1, 2·min(fisher_fp_p, fisher_fn_p))
    p_adjusted: float | None = None   # Holm-adjusted over all the audit's tests
    biased: bool = False

    def rates(self, stance: str) -> dict[str, float]:
        c = self.counts.get(stance, {"tp": 0, "fp": 0, "fn": 0, "tn": 0})
        neg, pos = c["fp"] + c["tn"], c["tp"] + c["fn"]
        return {"false_positive_rate": c["fp"] / neg if neg else float("nan"),
                "false_negative_rate": c["fn"] / pos if pos else float("nan"),
                "yes_share": (c["tp"] + c["fp"]) / (neg + pos) if neg + pos else float("nan"),
                "gold_positive_share": pos / (neg + pos) if neg + pos else float("nan")}

    def to_json(self) -> dict[str, Any]:
        return {"n_with_stance": self.n_with_stance, "n_without_stance": self.n_without_stance,
                "counts": self.counts, "rates": {s: self.rates(s) for s in self.counts},
                "fisher_false_positive_p": self.fisher_fp_p, "fisher_false_negative_p": self.fisher_fn_p,
                "documents_judged_on_both_sides": self.documents_with_both,
                "judge_says_supports_both": self.both_sides_judge, "humans_say_supports_both": self.both_sides_gold,
                "p_value": self.p_value, "p_holm": self.p_adjusted, "bias_found": self.biased}


@dataclass
class AuditReport:
    judge_id: str
    prompt_version: str
    labels_path: str
    labels_sha256: str
    n: int
    alpha: float
    base_metrics: dict[str, float]
    variants: list[VariantResult]
    stance: StanceAudit | None
    k: int
    base_runs: dict[str, float] = field(default_factory=dict)
    tuned_on: dict[str, Any] | None = None  # a calibrated judge's threshold was chosen on some of these pairs

    @property
    def biases_found(self) -> list[str]:
        found = [v.name for v in self.variants if v.biased]
        return found + (["stance"] if self.stance is not None and self.stance.biased else [])

    def variant(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "judge": {"id": self.judge_id, "prompt_version": self.prompt_version},
            "labels": {"path": self.labels_path, "sha256": self.labels_sha256, "n": self.n},
            "alpha": self.alpha, "k": self.k, "base": self.base_metrics,
            "variants": [v.to_json() for v in self.variants],
            "stance": self.stance.to_json() if self.stance else None,
            "runs_base_mrecall": self.base_runs, "biases_found": self.biases_found,
            **({"threshold_tuned_on": self.tuned_on} if self.tuned_on else {}),
        }


def stance_audit(labelled: Any, predictions: Any, *, alpha: float = 0.05) -> StanceAudit | None:
    """Per-stance confusion counts of ``predictions`` on ``labelled`` (stances from the file, else the
    ``negation-cue`` rule), Fisher tests on the FP and FN rates, and documents judged on both sides."""
    from berds.trust.labels import STANCES

    pairs = labelled.with_inferred_stances().pairs
    pred = np.asarray(predictions, dtype=bool)
    counts = {s: {"tp": 0, "fp": 0, "fn": 0, "tn": 0} for s in STANCES}
    n_without = 0
    for p, y in zip(pairs, pred):
        if p.stance is None:
            n_without += 1
            continue
        key = ("tp" if y else "fn") if p.label else ("fp" if y else "tn")
        counts[p.stance][key] += 1
    n_with = len(pairs) - n_without
    if not n_with:
        return None
    s, o = counts["support"], counts["oppose"]
    fp_p = fisher_exact(s["fp"], s["tn"], o["fp"], o["tn"])
    fn_p = fisher_exact(s["fn"], s["tp"], o["fn"], o["tp"])
    # Documents labelled against both sides of one question: does the judge say they support both?
    by_doc: dict[tuple[str, str], dict[str, tuple[bool, bool]]] = {}
    for p, y in zip(pairs, pred):
        if p.stance is not None:
            by_doc.setdefault((p.question, p.document), {})[p.stance] = (bool(y), p.label)
    both = [sides for sides in by_doc.values() if len(sides) == 2]
    return StanceAudit(
        n_with, n_without, counts, fp_p, fn_p,
        both_sides_judge=sum(all(v[0] for v in sides.values()) for sides in both),
        both_sides_gold=sum(all(v[1] for v in sides.values()) for sides in both),
        documents_with_both=len(both), p_value=min(1.0, 2 * min(fp_p, fn_p)),
        biased=min(1.0, 2 * min(fp_p, fn_p)) < alpha,
    )


def _runs_mrecall(runs: Mapping[str, Any], judge: Any, k: int, cache: Any, progress: bool, variant: str
                  ) -> dict[str, float]:
    from berds.evaluate.evaluation import evaluate_run

    out = {}
    for name, run in runs.items():
        # (each variant's bar says first which judge it is: "judging sentence-order diverse")
        result = evaluate_run(run, judge, (k,), cache=cache, allow_short=True, progress=progress,
                              description=f"judging {variant} {name}")
        out[name] = float(result.averages["all"][f"mrecall@{k}"])
    return out


def check_audit_options(*, k: Any, alpha: Any, negation_tolerance: Any) -> None:
    """Refuse options that make the audit's verdicts vacuous, before any judging."""
    if not 0.0 < float(alpha) < 1.0:  # (alpha >= 1 would "find" a bias in a variant that changed no answer)
        raise BerdsError(f"--alpha must be between 0 and 1 (a significance level), got {alpha}")
    # (below 0 every judge "ignores negation", from 1 on none can: the verdict would be the option's, not the judge's)
    if not 0.0 <= float(negation_tolerance) < 1.0:
        raise BerdsError(f"--negation-tolerance is a share of true positives, at least 0 and below 1, got "
                         f"{negation_tolerance}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise BerdsError(f"--k must be a whole number >= 1 (the MRecall@k cut-off), got {k!r}")


def audit(
    labelled: Any,
    judge: Any,
    *,
    variants: Sequence[str] | None = None,
    runs: Mapping[str, Any] | Sequence[Any] = (),
    k: int = 5,
    cache: Any = None,
    alpha: float = 0.05,
    negation_tolerance: float = 0.5,
    batch_size: int | None = None,
    progress: bool = True,
) -> AuditReport:
    """Audit ``judge`` on the pairs of ``labelled`` (a ``LabelledSet``) under each variant.

    Each variant with expectation ``same`` is tested with McNemar's exact test on the answers (does the
    change move the Yes rate?) and on correctness; the stance section with Fisher's exact test on the
    false-positive and on the false-negative rate of supporting vs opposing perspectives. Each gets one
    p-value (twice the smaller of its two, Bonferroni), and the p-values of all of them are Holm-adjusted
    together: a bias is *found* where the adjusted p < ``alpha``, so an unbiased judge raises a false alarm
    anywhere in the report with probability below ``alpha``. ``negation`` finds one when the judge still
    says Yes to the negated statement for more than ``negation_tolerance`` of the gold positives it said
    Yes to.

    ``runs`` (``{name: Run}`` or runs with ``.name``) are judged to depth ``k`` by the base judge and by
    each applicable ``same`` variant, to show the change in MRecall@k and in the runs' ranking.
    """
    from berds.trust.overlap import threshold_tuned_on
    from berds.trust.validate import classification_metrics, is_unparsed, judge_pairs, mcnemar_paired

    check_audit_options(k=k, alpha=alpha, negation_tolerance=negation_tolerance)
    # (a variant named twice would be judged twice and counted twice by Holm's adjustment)
    names = list(dict.fromkeys(variants)) if variants is not None else list(VARIANTS)
    for name in names:
        if name not in VARIANTS:
            from berds.errors import UnknownNameError

            raise UnknownNameError("audit variant", name, list(VARIANTS))
    if not isinstance(runs, Mapping):
        runs = {getattr(r, "name", "") or f"run{i + 1}": r for i, r in enumerate(runs)}
    from berds.questions import require_gold

    for name, run in runs.items():  # refused before any judging (the labelled pairs are judged first)
        require_gold(list(run.questions.values()), source=run.name or name, purpose="evaluation (MRecall/Precision)")
    gold = labelled.labels
    pairs = labelled.judge_pairs()
    base_verdicts = judge_pairs(judge, pairs, cache=cache, batch_size=batch_size, progress=progress,
                                description="judging (base)")
    base = np.array([v.label for v in base_verdicts], dtype=bool)
    base_metrics = classification_metrics(gold, base)
    base_runs = _runs_mrecall(runs, judge, k, cache, progress, "base") if runs else {}

    results = []
    for name in names:
        spec = VARIANTS[name]
        vj = variant_judge(judge, name)
        if vj is None:
            results.append(VariantResult(name, spec.kind, spec.description, spec.expectation, False,
                                         reason="prompt variants need an LLM judge with the study's prompt wording"))
            continue
        verdicts = judge_pairs(vj, pairs, cache=cache, batch_size=batch_size, progress=progress,
                               description=f"judging ({name})")
        var = np.array([v.label for v in verdicts], dtype=bool)
        r = VariantResult(name, spec.kind, spec.description, spec.expectation, True, judge_id=vj.id,
                          prompt_version=vj.prompt_version, n=len(pairs),
                          yes_to_no=int((base & ~var).sum()), no_to_yes=int((~base & var).sum()),
                          unparsed=sum(is_unparsed(v) for v in verdicts),
                          mcnemar_answers=mcnemar_paired(base, var))
        if spec.expectation == "same":
            r.mcnemar_correct = mcnemar_paired(base == gold, var == gold)
            r.base_metrics, r.variant_metrics = base_metrics, classification_metrics(gold, var)
            p_answers, p_correct = r.mcnemar_answers.exact_p, r.mcnemar_correct.exact_p
            r.p_value = min(1.0, 2 * min(p_answers, p_correct))
            r.reason = (f"answers: {r.yes_to_no} Yes->No, {r.no_to_yes} No->Yes (McNemar p={p_answers:.3g}); "
                        f"correctness McNemar p={p_correct:.3g}")
            if runs:
                varied = _runs_mrecall(runs, vj, k, cache, progress, name)
                b_scores, v_scores = list(base_runs.values()), [varied[n] for n in base_runs]
                r.runs = RunEffect(dict(base_runs), varied, kendall_tau_b(b_scores, v_scores),
                                   ranks_desc(b_scores) != ranks_desc(v_scores))
        else:
            # Expected answer for the negated statement: No wherever the document supports the original;
            # gold negatives carry no expectation (an opposing document may well support the negation).
            r.base_metrics = {"recall_on_gold_positives": float(base[gold].mean()) if gold.any() else float("nan")}
            r.variant_metrics = {"no_on_gold_positives": float((~var[gold]).mean()) if gold.any() else float("nan")}
            tp = gold & base
            r.negation_base_true_positives = int(tp.sum())
            r.negation_still_yes = int((tp & var).sum())
            share = r.negation_still_yes / r.negation_base_true_positives if r.negation_base_true_positives else 0.0
            r.biased = share > negation_tolerance
            r.reason = (f"{r.negation_still_yes} of {r.negation_base_true_positives} supported statements still "
                        f"judged supported after negation ({100 * share:.0f}%; tolerance {100 * negation_tolerance:.0f}%)")
        results.append(r)
    stance = stance_audit(labelled, base, alpha=alpha)
    tested: list[Any] = [r for r in results if r.p_value is not None] + ([stance] if stance is not None else [])
    for item, adjusted in zip(tested, holm_adjust([t.p_value for t in tested])):
        item.p_adjusted = adjusted
        item.biased = adjusted < alpha
    return AuditReport(
        judge_id=judge.id, prompt_version=judge.prompt_version, labels_path=labelled.path,
        labels_sha256=labelled.sha256, n=len(labelled), alpha=alpha, base_metrics=base_metrics,
        variants=results, stance=stance, k=k, base_runs=base_runs, tuned_on=threshold_tuned_on(judge, labelled),
    )


# ----------------------------------------------------------------------------------- tables


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}"


def _signed(x: float) -> str:
    return "-" if x != x else f"{100 * x:+.1f}"


def variant_table(report: AuditReport) -> Any:
    """A rich table: one row per variant — flips (Yes→No/No→Yes), McNemar p (raw and Holm), Δaccuracy, ΔF1, ΔYes share,
    verdict; narrow enough for 80 columns (the negation details and unparsed counts go under it)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"bias audit of {report.judge_id} on {report.n} labelled pairs "
                        f"(base accuracy {_pct(report.base_metrics['accuracy'])}, F1 {_pct(report.base_metrics['f1'])}; "
                        "p: McNemar exact test on the answers)")
    for col in ("variant", "Y→N/N→Y", "p", "Holm p", "Δacc", "ΔF1", "ΔYes", "bias?"):
        table.add_column(col, justify="left" if col in ("variant", "bias?") else "right", overflow="fold",
                         min_width=max(len(v) for v in VARIANTS) if col == "variant" else None)
    notes = []
    for v in report.variants:
        name = f"{v.name}\n[dim]{v.kind}[/]"
        if not v.applicable:
            table.add_row(name, *["-"] * 6, "n/a")
            notes.append(f"{v.name}: n/a (not an LLM judge)")
            continue
        if v.unparsed:
            notes.append(f"{v.name}: {v.unparsed} unparsed answers")
        if v.expectation == "negated":
            table.add_row(name, f"{v.yes_to_no}/{v.no_to_yes}", f"{v.mcnemar_answers.exact_p:.2g}",
                          "", "", "", "", "[red]yes[/]" if v.biased else "no")
            if not v.negation_base_true_positives:  # nothing to negate: no evidence either way
                notes.append(f"{v.name}: not tested (the judge found no true positive to negate)")
            else:
                notes.append(f"{v.name}: " + ("ignores negation" if v.biased else "respects negation")
                             + f" ({v.negation_still_yes}/{v.negation_base_true_positives} true positives stay Yes)")
            continue
        if v.mcnemar_correct is not None and v.mcnemar_correct.exact_p < v.mcnemar_answers.exact_p:
            # (the Holm p then rests on the correctness test, which the p column does not show)
            notes.append(f"{v.name}: McNemar p on correctness {v.mcnemar_correct.exact_p:.2g} "
                         f"({v.mcnemar_correct.c} flips fixed, {v.mcnemar_correct.b} broke an answer); "
                         "Holm p adjusts 2 × the smaller p")
        table.add_row(name, f"{v.yes_to_no}/{v.no_to_yes}", f"{v.mcnemar_answers.exact_p:.2g}",
                      f"{v.p_adjusted:.2g}", _signed(v.delta("accuracy")), _signed(v.delta("f1")),
                      _signed(v.delta("positive_share")), "[red]BIAS[/]" if v.biased else "no")
    if not notes:
        return table
    return Group(table, *(Text(f"  {n}") for n in dict.fromkeys(notes)))


def run_table(report: AuditReport) -> Any | None:
    """A rich table of MRecall@k per run under each variant, with Kendall's τ-b against the base ranking:
    one row per (variant, run), so any number of runs fits 80 columns."""
    if not report.base_runs:
        return None
    from rich.table import Table

    with_runs = [v for v in report.variants if v.runs is not None]
    table = Table(title=f"MRecall@{report.k} of the runs under each variant (τ = Kendall's τ-b vs base ranking)")
    for col in ("variant", "run", "MRecall", "Δ", "τ", "ranking"):
        table.add_column(col, justify="left" if col in ("variant", "run", "ranking") else "right", overflow="fold")
    for run, score in report.base_runs.items():
        table.add_row("base", run, _pct(score), "", "", "")
    for v in with_runs:
        for i, (run, score) in enumerate(report.base_runs.items()):
            table.add_row(v.name if i == 0 else "", run, _pct(v.runs.variant[run]), _signed(v.runs.variant[run] - score),
                          ("-" if v.runs.tau != v.runs.tau else f"{v.runs.tau:.2f}") if i == 0 else "",  # (one run: no τ)
                          ("changed" if v.runs.ranking_changed else "same") if i == 0 else "")
    return table


def stance_table(report: AuditReport) -> Any | None:
    if report.stance is None:
        return None
    from rich.table import Table

    st = report.stance
    table = Table(title=f"supporting vs opposing perspectives ({st.n_with_stance} pairs with a stance, "
                        f"{st.n_without_stance} without): Fisher p FP={st.fisher_fp_p:.3g}, FN={st.fisher_fn_p:.3g}, "
                        f"Holm {st.p_adjusted if st.p_adjusted is not None else st.p_value:.3g}"
                        + (" — BIAS" if st.biased else ""))
    for col in ("stance", "pairs", "gold Yes %", "judge Yes %", "FP rate %", "FN rate %"):
        table.add_column(col, justify="right")
    for stance, c in st.counts.items():
        r = st.rates(stance)
        table.add_row(stance, str(sum(c.values())), _pct(r["gold_positive_share"]), _pct(r["yes_share"]),
                      _pct(r["false_positive_rate"]), _pct(r["false_negative_rate"]))
    return table


def audit_files(
    labels_path: str,
    judge: str,
    *,
    judge_options: Mapping[str, Any] | None = None,
    variants: Sequence[str] | None = None,
    runs: Sequence[str] = (),
    k: int = 5,
    alpha: float = 0.05,
    negation_tolerance: float = 0.5,
    cache_path: str | None = None,
    use_cache: bool = True,
    progress: bool = True,
) -> AuditReport:
    """``berds judge audit``: read the labelled file and runs, build the judge by name, run ``audit``."""
    from berds.evaluate.analyses.common import run_labels
    from berds.evaluate.cache import JudgementCache
    from berds.judges.catalogue import check_judge_name
    from berds.trust.labels import read_labelled_pairs
    from berds.trust.validate import lazy_judge
    from berds.runs import load_run

    check_audit_options(k=k, alpha=alpha, negation_tolerance=negation_tolerance)
    labelled = read_labelled_pairs(labels_path)
    for name in variants or ():
        if name not in VARIANTS:
            from berds.errors import UnknownNameError

            raise UnknownNameError("audit variant", name, list(VARIANTS))
    check_judge_name(judge)
    # parse every run first: bad input fails before judging (audit has no --allow-short to offer)
    loaded = [load_run(p, allow_empty_option=None) for p in runs]
    names = run_labels(loaded, runs)
    cache = JudgementCache(cache_path) if use_cache else None
    try:
        return audit(labelled, lazy_judge(judge, judge_options), variants=variants, runs=dict(zip(names, loaded)),
                     k=k, cache=cache, alpha=alpha, negation_tolerance=negation_tolerance, progress=progress)
    finally:
        if cache is not None:
            cache.close()
