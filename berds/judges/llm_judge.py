"""The study's kind of judge: a Yes/No perspective-detection prompt put to an LLM, the reply parsed.

``LLMJudge`` works over any ``berds.llm`` backend (transformers, vLLM, OpenAI-compatible HTTP);
``llm_judge(backend=..., model=...)`` builds one, splitting options between judge and backend.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Sequence

from berds.errors import BerdsError
from berds.judges.base import id_number
from berds.judges.prompts import PromptTemplate, get_prompt
from berds.types import JudgePair, Verdict

# ---------------------------------------------------------------------------------------- parsing

PARSE_MODES = ("berds-study", "strict", "yes-anywhere")
_FIRST_WORD = re.compile(r"[A-Za-z]+")
# The markers the study's code cut the reply at, in its order (the text after the last one is kept).
STUDY_ANSWER_MARKERS = ("Answer:", "The answer is", "The answer is:",
                        "Based on the information provided in the document, the answer is")


def study_answer(reply: str) -> tuple[bool, bool]:
    """The study's answer rule, exactly as its released evaluation applied it (``(label, parsed)``).

    A reply starting with ``{`` is read as a dict (JSON, else a Python literal) and is Yes when its
    ``Answer`` field, stripped, is "yes" in any case (``{'Answer': ' Yes '}`` is Yes, as in the study's
    ``ast.literal_eval(reply)['Answer'].strip().lower() == 'yes'``; a dict that cannot be read: No,
    ``parsed=False``, where the study's code stopped with an exception). Otherwise the
    text after the last ``Answer:``, then after the last ``The answer is``, ``The answer is:`` and
    ``Based on the information provided in the document, the answer is`` (case-sensitive, in that order)
    is stripped and lower-cased; it is Yes when it starts with ``yes`` or ``(yes``, equals ``y`` or ``ye``,
    ends with ``yes``, ``yes.`` or ``yes".``, or starts with ``entail`` or ``true``; everything else is No.

    An empty (or all-space) reply is No, as in the study, but ``parsed=False``: no answer came (a server's
    null content, a model that ended at once), and evaluations count and flag such replies. So is a dict
    without an ``Answer`` field.
    """
    text = reply.strip()
    if not text:
        return False, False
    if text.startswith("{"):
        import ast
        import json

        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # (nesting past the parser's depth)
            try:
                record = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                return False, False
        if not isinstance(record, dict):
            return False, False
        # the study's rule: the field, stripped, == "yes" in any case. A dict without the field (which the study's
        # code could not read either) is No, and unparsed
        return str(record.get("Answer", "")).strip().lower() == "yes", "Answer" in record
    for marker in STUDY_ANSWER_MARKERS:
        text = text.split(marker)[-1]
    text = text.strip().lower()
    yes = (text.startswith(("yes", "(yes")) or text in ("y", "ye") or text.endswith(("yes", "yes.", 'yes".'))
           or text.startswith(("entail", "true")))
    return yes, True


# A version of the study's rule: verdicts cached under the earlier one (a dict's Answer compared unstripped, a
# Mistral reply read past "[/INST]" or "</s>") are not reused (it enters LLMJudge.prompt_version)
STUDY_RULE_VERSION = "answer-rule-2"


def study_mistral_reply(reply: str) -> str:
    """The part of a Mistral reply the study's code parsed: it decoded prompt and reply together, cut the
    whole at the first ``</s>`` and kept what lies between the first and the second ``[/INST]`` — so a reply
    that itself writes ``</s>`` or ``[/INST]`` (as text: for Mistral's tokenizer ``[/INST]`` is no special
    token) is read only up to the first of them, then stripped."""
    return reply.split("</s>")[0].split("[/INST]")[0].strip()


def plain_answer(text: str) -> bool:
    """Whether a reply states Yes or No plainly: the strict rule reads it (its first word is yes or no), or the
    answer after the study's last marker (``Answer:``, ``The answer is`` ...) starts with yes or no, or it is a
    dict whose ``Answer`` is yes or no. The study's rule reads *any* text (nonsense is No), so evaluations count
    the replies that fail this to notice a judge answering garbage (``strict_unparsed`` in a verdict's detail)."""
    text = text.strip()
    if text.startswith("{"):  # read as study_answer reads it: JSON, else a Python literal
        import ast
        import json

        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            try:
                record = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                return False
        return isinstance(record, dict) and str(record.get("Answer", "")).strip().lower() in ("yes", "no")
    if parse_answer(text, "strict")[1]:
        return True
    for marker in STUDY_ANSWER_MARKERS:
        text = text.split(marker)[-1]
    return parse_answer(text, "strict")[1]


def parse_answer(text: str, mode: str = "berds-study") -> tuple[bool, bool]:
    """Turn a judge's reply into ``(label, parsed)``.

    * ``berds-study`` (default): the study's rule (``study_answer``), the one its published numbers used.
    * ``strict``: the first word (ignoring leading spaces, quotes, ``*`` and punctuation) must be
      ``yes`` or ``no`` in any case; anything else is *unparsed* and counts as No (``parsed=False``, so
      evaluations can report how many answers were unusable).
    * ``yes-anywhere``: berds' earlier rule (called ``berds-parity`` before, wrongly: it is *not* the
      study's) — support when the lower-cased text contains ``"yes"`` anywhere ("eyes" too).
      Always ``parsed=True``.
    """
    if mode == "berds-study":
        return study_answer(text)
    if mode == "yes-anywhere":
        return ("yes" in text.lower(), True)
    if mode != "strict":
        raise BerdsError(f"unknown answer parsing mode {mode!r}; use one of {', '.join(PARSE_MODES)}"
                         + (" (berds-parity was renamed yes-anywhere; the study's rule is berds-study)"
                            if mode == "berds-parity" else ""))
    match = _FIRST_WORD.search(text)
    word = match.group(0).lower() if match else ""
    if word == "yes":
        return True, True
    if word == "no":
        return False, True
    return False, False


def p_yes_from_logprobs(logprobs: Mapping[str, float] | None) -> float | None:
    """P(Yes) renormalised over the Yes/No first tokens: sum P(yes-like) / (sum P(yes-like) + P(no-like)).

    A token is yes-like when, stripped of spaces, underscores (sentencepiece's ``▁``) and case, it is
    ``yes``; no-like likewise for ``no``. Returns None when neither appears.
    """
    if not logprobs:
        return None
    yes = no = 0.0
    for token, lp in logprobs.items():
        word = token.replace("▁", " ").replace("Ġ", " ").strip().lower()
        if word not in ("yes", "no") or math.isnan(lp):
            continue
        p = math.exp(min(lp, 0.0))  # (a log-probability is <= 0; above it exp() overflows or passes 1)
        if word == "yes":
            yes += p
        else:
            no += p
    if yes + no == 0.0:
        return None
    return yes / (yes + no)


# ---------------------------------------------------------------------------------------- LLM judge


SYSTEM_TURN = ("auto", "keep", "drop")


def drops_system_turn(system: str, llm_id: str, llm: Any = None) -> bool:
    """``auto``: drop the system turn for Mistral models (the study's code passed Mistral only the turns
    after it; GPT-4 got them all) — a model whose id says "mistral", or a local folder whose ``config.json``
    says ``model_type: mistral`` (a merged evaluator saved as ``/models/evaluator``); ``keep`` / ``drop``
    force it."""
    if system not in SYSTEM_TURN:
        raise BerdsError(f"unknown system option {system!r}; use one of {', '.join(SYSTEM_TURN)}")
    return system == "drop" or (system == "auto" and ("mistral" in llm_id.lower() or _local_mistral(llm)))


def _local_mistral(llm: Any) -> bool:
    """Whether ``llm`` loads a local model folder whose config names the Mistral architecture (read without
    loading anything; a hub name or a server says nothing here)."""
    import json
    from pathlib import Path

    from berds.llm.shared import looks_like_local_path

    name = getattr(llm, "model_name", None)
    if not isinstance(name, str) or not looks_like_local_path(name):
        return False
    try:
        config = json.loads((Path(name).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # (no folder, a GGUF file, an unreadable config: not known)
        return False
    return isinstance(config, dict) and config.get("model_type") == "mistral"


class LLMJudge:
    """The study's judge: a Yes/No prompt to an LLM, greedy decoding, 16 new tokens.

    ``llm`` is any ``berds.llm.base.LLM``. ``prompt`` is a ``berds.judges.prompts`` name (``zero-shot``,
    the study's chat prompt, by default). ``system`` (``auto``/``keep``/``drop``) decides whether the
    prompt's system turn is sent; ``auto`` drops it for Mistral models, as the study did, and the prompt
    version records a dropped turn (``...+no-system``). ``parse`` is ``berds-study`` (default),
    ``strict`` or ``yes-anywhere``. When
    ``threshold`` is set and the backend exposes log-probabilities, the label is ``P(Yes) >= threshold``
    (a calibrated judge, see ``berds judge calibrate``); otherwise the parsed answer decides.
    """

    def __repr__(self) -> str:
        return f"LLMJudge(id={self.id!r})"

    def __init__(
        self,
        llm: Any,
        *,
        prompt: str | PromptTemplate = "zero-shot",
        parse: str = "berds-study",
        system: str = "auto",
        max_new_tokens: int = 16,
        top_logprobs: int = 5,
        threshold: float | None = None,
        name: str | None = None,
    ):
        if parse not in PARSE_MODES:
            raise BerdsError(f"unknown answer parsing mode {parse!r}; use one of {', '.join(PARSE_MODES)}")
        # Checked here, before they enter the id (a "0.5" string, a bool or NaN would key the cache and answer wrongly)
        for option, value, low in (("max_new_tokens", max_new_tokens, 1), ("top_logprobs", top_logprobs, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise BerdsError(f"{option} must be an integer >= {low}, got {value!r}")
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
                raise BerdsError(f"threshold must be a number in [0, 1] (a P(Yes)), got {threshold!r}")
            if top_logprobs == 0:
                raise BerdsError("threshold needs P(Yes), which needs top_logprobs > 0; leave top_logprobs at its "
                                 "default (5)")
        self.llm = llm
        self.prompt = get_prompt(prompt) if isinstance(prompt, str) else prompt
        self.parse = parse
        self.max_new_tokens = max_new_tokens
        self.top_logprobs = top_logprobs
        self.threshold = threshold
        from berds.llm.secrets import redact_text

        # The id keys the cache and is written to every output: never let a backend's credential into it.
        self.name = redact_text(name or llm.id)
        # Everything that changes the answers keys the cache; the study's defaults (16 tokens, 5 log-probs) add nothing,
        # so ids written before these were added still name the same verdicts.
        suffix = (f"|parse={parse}" + (f"|max_new_tokens={max_new_tokens}" if max_new_tokens != 16 else "")
                  + (f"|top_logprobs={top_logprobs}" if top_logprobs != 5 else "")
                  + (f"|threshold={id_number(threshold)}" if threshold is not None else ""))
        self.id = redact_text(f"{llm.id}{suffix}")
        self.system = system
        self.drop_system = drops_system_turn(system, llm.id, llm) and self.prompt.has_system_turn
        self.prompt_version = (prompt_version(self.prompt) + ("+no-system" if self.drop_system else "")
                               + (f"+{STUDY_RULE_VERSION}" if parse == "berds-study" else ""))
        if self.prompt.plain:
            # plain prompts reach a local model as BOS + the text's own tokens since 0d6a9b8 (a literal BOS string
            # glued to the text gave some tokenizers another first token): verdicts cached before are not reused
            self.prompt_version += "+bos-ids"

    def render(self, pair: JudgePair) -> list[dict[str, str]]:
        """The messages sent for one pair (the system turn left out when ``drop_system``)."""
        return self.prompt.render(document=pair.passage, perspective=pair.perspective,
                                  drop_system=self.drop_system)

    def prompts_for(self, pairs: Sequence[JudgePair]) -> list[list[dict[str, str]]]:
        return [self.render(p) for p in pairs]

    def prepare(self) -> None:
        """Load the backend's model (a local one; a server backend has nothing to load)."""
        load = getattr(self.llm, "load", None)
        if callable(load):
            load()

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        if not pairs:
            return []
        generations = self.llm.generate(
            self.prompts_for(pairs), max_new_tokens=self.max_new_tokens, temperature=0.0,
            top_logprobs=self.top_logprobs,
        )
        verdicts = []
        for gen in generations:
            # the study's Mistral path (the system turn dropped) read the reply only up to a "</s>"/"[/INST]" in it
            reply = study_mistral_reply(gen.text) if self.parse == "berds-study" and self.drop_system else gen.text
            label, parsed = parse_answer(reply, self.parse)
            p_yes = p_yes_from_logprobs(gen.first_token_logprobs)
            detail = {} if parsed else {"unparsed": True}
            if parsed and self.parse != "strict" and not plain_answer(reply):
                detail["strict_unparsed"] = True  # read by the study's rule, but no plain Yes/No (evaluations flag it)
            if self.threshold is not None:
                if p_yes is not None:
                    label = p_yes >= self.threshold
                else:  # (a server that refused logprobs): the parsed answer decides, and says so
                    detail["no_p_yes"] = True
            verdicts.append(Verdict(label=label, p_yes=p_yes, raw=gen.text, detail=detail or None))
        return verdicts


def prompt_version(prompt: PromptTemplate) -> str:
    """The version a prompt keys the cache with: a shipped prompt's own; a template of one's own adds a hash of
    what is sent (its text edited under the same version name would otherwise be served the old text's verdicts)."""
    import hashlib
    import json

    from berds.judges.prompts import PROMPTS

    if PROMPTS.get(prompt.version) == prompt:
        return prompt.version
    sent = json.dumps([prompt.form, prompt.template, prompt.system], ensure_ascii=False)
    return f"{prompt.version}#{hashlib.sha256(sent.encode('utf-8')).hexdigest()[:12]}"


_JUDGE_KEYS = {"prompt", "parse", "system", "max_new_tokens", "top_logprobs", "threshold", "name"}


def llm_judge(*, backend: str, model: str, **options: Any) -> LLMJudge:
    """Build an ``LLMJudge`` on ``backend``; options split between the judge and the backend."""
    from berds.llm import load_llm

    judge_opts = {k: v for k, v in options.items() if k in _JUDGE_KEYS}
    llm_opts = {k: v for k, v in options.items() if k not in _JUDGE_KEYS}
    try:
        llm = load_llm(backend, model, **llm_opts)
    except BerdsError as exc:  # an unknown option: the judge's own options are just as valid as the backend's
        message = str(exc)
        if "does not take option(s)" in message and "(it takes: " in message:
            message = message.replace(f"LLM backend {backend!r} does not", f"the judge {backend}:{model} does not", 1)
            message = message.replace("(it takes: ", f"(the judge takes: {', '.join(sorted(_JUDGE_KEYS))}; "
                                                     f"its {backend} backend takes: ", 1)
            raise BerdsError(message) from None
        raise
    return LLMJudge(llm, **judge_opts)



# The study's evaluator, three ways to load the same fine-tuned weights (``berds judges list``: mistral-berds).
MISTRAL_BASE = "mistralai/Mistral-7B-Instruct-v0.2"
MISTRAL_ADAPTER = "timchen0618/Mistral_BERDS_evaluator"
MISTRAL_FULL = "timchen0618/Mistral_BERDS_evaluator_full"  # the adapter already merged, as the study published it
MISTRAL_WEIGHTS = ("merged", "adapter", "full")


def mistral_berds(*, weights: str = "merged", **options: Any) -> LLMJudge:
    """The study's evaluator on transformers; ``weights`` says how its fine-tuned weights are loaded:

    * ``merged`` (default): the base model + the LoRA adapter folded into the weights at load (peft
      ``merge_and_unload``). The same function as ``adapter``, computed with one matrix product per layer
      instead of three, so it is the fastest faithful choice (~2.4x the pairs/s of ``adapter`` at batch 64 in
      issue 31's H200 measurement); bf16 rounding of the merged weights can change a rare verdict, so its id
      (``...+merged``) keeps its verdicts apart in the cache.
    * ``adapter``: the adapter applied unmerged, as the study's ``Eval/prediction_mistral.py`` loaded it (the id
      berds used before, so verdicts cached by earlier versions are found again).
    * ``full``: the study's merged checkpoint on the hub (``timchen0618/Mistral_BERDS_evaluator_full``), one
      download, no peft.

    ``model`` / ``adapter`` options replace the hub names with local folders as before.
    """
    if weights not in MISTRAL_WEIGHTS:
        raise BerdsError(f"unknown weights {weights!r} for mistral-berds; use one of {', '.join(MISTRAL_WEIGHTS)}")
    defaults: dict[str, Any] = {"prompt": "zero-shot", "system": "drop", "parse": "berds-study", "dtype": "bfloat16"}
    if weights == "full":
        if options.get("adapter"):
            raise BerdsError("weights=full loads a merged checkpoint and takes no adapter; use weights=adapter or "
                             "weights=merged with -o adapter=PATH")
        defaults.update(model=MISTRAL_FULL)
    else:
        defaults.update(model=MISTRAL_BASE, adapter=MISTRAL_ADAPTER, merge_adapter=weights == "merged")
    defaults.update(options)
    model = defaults.pop("model")
    return llm_judge(backend="transformers", model=model, **defaults)


def unwrap_llm_judge(judge: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """The ``LLMJudge``-like object inside ``judge`` and a function re-applying the wrappers around a
    replacement; None when there is none (a non-LLM judge)."""
    from berds.judges.base import LazyJudge
    from berds.judges.threshold import ThresholdJudge

    if isinstance(judge, LazyJudge):
        return unwrap_llm_judge(judge.inner)
    if isinstance(judge, ThresholdJudge):
        found = unwrap_llm_judge(judge.inner)
        if found is None:
            return None
        inner, rewrap = found
        return inner, lambda j: ThresholdJudge(rewrap(j), judge.threshold, source=judge.source)
    if all(hasattr(judge, a) for a in ("llm", "prompt", "parse", "max_new_tokens", "top_logprobs")):
        return judge, lambda j: j
    return None
