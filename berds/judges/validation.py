"""How far each judge has been validated on held-out human labels — said wherever its numbers are shown.

``judge_validation(judge_id)`` reads the record for the judge behind an id or a name. A figure holds only for
the judge it was measured on: a wrapped judge (``calibrated:``, ``debate:``), a threshold set by hand, other
weights, or the study's evaluator with another model, parsing or generation setting is named as not validated,
with what changed. The ``embedded`` judges' figures are read
from their cards in ``berds/data/embedded_judge/`` (``stance_card.json`` for v2, ``model_card.json`` for v1:
a ``validation`` entry when present, else the leave-one-question-out F1 on the dev pairs), the files
retraining writes, so the printed figure never goes stale.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

EMBEDDED_DIR = Path(__file__).resolve().parents[1] / "data" / "embedded_judge"
EMBEDDED_CARD = EMBEDDED_DIR / "model_card.json"      # v1 (features + logistic head)
EMBEDDED_V2_CARD = EMBEDDED_DIR / "stance_card.json"  # v2 (the default: fine-tuned cross-encoder + stance gate)


@dataclass(frozen=True)
class JudgeValidation:
    """``validated`` is True only for a judge measured against held-out human labels at a level fit for
    reporting; ``note`` says what was measured and where to read more."""

    name: str
    validated: bool
    note: str

    def line(self) -> str:
        status = "validated" if self.validated else "NOT validated on held-out human labels"
        return f"judge {self.name}: {status} — {self.note}"


def _card_figure(card: dict) -> tuple[float | None, str]:
    """The held-out F1 a card states: its ``validation`` entry when present (``{"f1", "on"}``), else the
    leave-one-question-out figure on the human-labelled dev pairs (v1: ``summary.dev_loqo``; v2: the chosen
    variant under ``dev_pairs_loqo``)."""
    record = card.get("validation") or {}
    if record.get("f1") is not None:
        interval = record.get("interval_95")
        where = str(record.get("on", "held-out human-labelled pairs"))
        return float(record["f1"]), (f"[{interval[0]:.1f}, {interval[1]:.1f}] on {where}" if interval else f"on {where}")
    if "f1" in record:  # the card says on purpose that there is no held-out figure
        return None, str(record.get("on", ""))
    loqo = (card.get("summary") or {}).get("dev_loqo")
    if loqo is None:
        chosen = (card.get("chosen_variant") or {}).get("name")
        loqo = (((card.get("dev_pairs_loqo") or {}).get("variants") or {}).get(chosen) or {}).get("loqo")
    if loqo and loqo.get("f1") is not None:
        return float(loqo["f1"]), f"on {loqo.get('n', '?')} human-labelled dev pairs (leave-one-question-out)"
    return None, ""


GOAL_F1 = 40.0  # the F1 on unseen questions the embedded judge was built to reach (docs/embedded-judge.md)
STUDY_MODEL = "mistralai/Mistral-7B-Instruct-v0.2+adapter=timchen0618/Mistral_BERDS_evaluator"
# The same fine-tuned weights loaded other ways (mistral-berds -o weights=merged|full): the study's evaluator too
STUDY_MODELS = (STUDY_MODEL, STUDY_MODEL + "+merged", "timchen0618/Mistral_BERDS_evaluator_full")


def _changes(judge_id: str) -> list[str]:
    """What wraps or overrides the judge behind ``judge_id`` (a name or an id): a card's or the study's figure
    was measured without these, so it does not carry over."""
    changes = []
    if judge_id.startswith("calibrated:") or "|calibrated-threshold=" in judge_id:
        changes.append("a calibrated threshold")
    if judge_id.startswith(("debate:", "debate(")):
        changes.append("a debate critic")
    found = re.search(r"\|threshold=([^|]+)", judge_id)
    if found:
        changes.append(f"threshold {found.group(1)} set by hand")
    return changes


@lru_cache(maxsize=2)
def _shipped_digest(version: str) -> str | None:
    """The weight hash the shipped embedded judge puts in its id (None when the files cannot be read)."""
    try:
        from berds.judges.embedded import JudgeHead, StanceSpec

        if version == "v2":
            return StanceSpec.load(EMBEDDED_DIR / "stance.json").digest
        return JudgeHead.load(EMBEDDED_DIR / "head.json").digest
    except Exception:  # an unreadable shipped file: claim nothing for any weights
        return None


@lru_cache(maxsize=2)
def _embedded_figure(version: str) -> tuple[str, bool, bool]:
    """The card's figure as text, whether it is a held-out F1, and whether it leaves the goal F1 >= 40 on unseen
    questions unsettled (the F1 or its interval's lower bound below it)."""
    try:
        card = json.loads((EMBEDDED_V2_CARD if version == "v2" else EMBEDDED_CARD).read_text(encoding="utf-8"))
        f1, where = _card_figure(card)
    except (OSError, ValueError):
        return "figure unavailable", False, True
    if f1 is None:
        return where or "figure unavailable", False, True
    interval = (card.get("validation") or {}).get("interval_95")
    return f"F1 {f1:.1f} {where}", True, f1 < GOAL_F1 or not interval or interval[0] < GOAL_F1


def _embedded_record(version: str, judge_id: str) -> JudgeValidation:
    figure, measured, unsettled = _embedded_figure(version)
    changes = _changes(judge_id)
    marker = re.search(r"\+(stance|head)-([0-9a-f]+)", judge_id)
    if marker and marker.group(2) != _shipped_digest(version):
        changes.append("other weights than the shipped ones")
    if changes and measured:  # the card measured the shipped judge at its shipped threshold, not this one
        figure = f"its card's {figure} is for the shipped judge, not this one ({', '.join(changes)})"
    elif changes:
        figure += f"; this is not the shipped judge ({', '.join(changes)})"
    elif unsettled and measured:
        figure += f"; F1 >= {GOAL_F1:.0f} on unseen questions is not established"
    name = "embedded" if version == "v2" else "embedded:v1"
    if version == "v2" and "a calibrated threshold" in changes:
        calibrated = _calibrated_figure()
        if calibrated:  # the one wrapped variant the independent check measured (its threshold from dev_pairs.tsv)
            figure += f"; {calibrated}"
    return JudgeValidation(name, False,
                           f"good for smoke tests only, {figure}; the study's evaluator has F1 62.2 "
                           "(docs/embedded-judge.md). Never report its numbers as BERDS scores: correct them "
                           "with human labels (--labels, docs/corrected-estimates.md).")


@lru_cache(maxsize=1)
def _calibrated_figure() -> str:
    """The independent check's figure for ``calibrated:embedded`` with the threshold set on ``dev_pairs.tsv``."""
    try:
        card = json.loads(EMBEDDED_V2_CARD.read_text(encoding="utf-8"))
        record = (card.get("validation") or {}).get("calibrated") or {}
        low, high = record["interval_95"]
        return (f"with the threshold calibrated on {record.get('threshold_from', 'the dev pairs')} the same check "
                f"gave F1 {float(record['f1']):.1f} [{low:.1f}, {high:.1f}]")
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _study_record(judge_id: str) -> JudgeValidation:
    """The study's evaluator is validated as the study ran it; a wrapper or an override makes another judge."""
    changes = _changes(judge_id)
    core = judge_id.split(">")[-1]
    if ":" in core and not core.startswith(("mistral-berds", "calibrated:", "debate:")):
        backend, _, rest = core.partition(":")
        model, _, suffix = rest.partition("|")
        if backend not in ("transformers", "vllm") or model not in STUDY_MODELS:
            changes.append(f"{backend}:{model}")
        parts = suffix.split("|")
        changes += [s for s in parts if s and s != "parse=berds-study"
                    and not s.startswith(("threshold=", "calibrated-threshold="))]  # (those two: _changes)
        if not any(s.startswith("parse=") for s in parts):
            changes.append("no answer parsing named")
    if changes:
        return JudgeValidation("mistral-berds", False,
                               f"the study's evaluator changed ({', '.join(dict.fromkeys(changes))}): the study's F1 "
                               "62.2 was measured without that; measure this judge with `berds judge validate`")
    return _KNOWN["mistral-berds"]


_KNOWN = {
    "demo-gold": JudgeValidation("demo-gold", True, "the demo data's labels by construction (demo corpus only)"),
    "mistral-berds": JudgeValidation("mistral-berds", True,
                                     "the study's evaluator (F1 62.2 on the study's human labels; "
                                     "re-check with `berds judge validate`)"),
}


def judge_validation(judge_id: str) -> JudgeValidation | None:
    """The record for the judge behind ``judge_id`` (None when berds knows nothing about it)."""
    last = judge_id.split(":")[-1]  # a name given as calibrated:NAME or debate:NAME
    if "embedded:v2-" in judge_id or last == "embedded":
        return _embedded_record("v2", judge_id)
    if "embedded:minilm" in judge_id or judge_id.endswith("embedded:v1"):
        return _embedded_record("v1", judge_id)
    if judge_id.startswith("demo-gold") or last == "demo-gold":
        return _KNOWN["demo-gold"]
    if "Mistral_BERDS_evaluator" in judge_id or last.startswith("mistral-berds"):
        return _study_record(judge_id)
    return None


def judge_warning(judge_id: str, *, unknown: bool = True) -> str | None:
    """One line to print beside results of a judge that is not validated (None for the validated ones). A judge
    berds knows nothing about (a plug-in, an ``nli:`` model, another LLM) is not validated either: it is told so,
    unless ``unknown=False`` (``berds judge validate``, which is that measurement)."""
    record = judge_validation(judge_id)
    if record is None:
        if not unknown:
            return None
        return (f"judge {short_judge_name(judge_id)}: berds has no held-out figure for this judge — measure it on "
                "human-labelled pairs (`berds judge validate`) before reporting its numbers.")
    if record.validated:
        return None
    return record.line()


def short_judge_name(judge_id: str) -> str:
    """A judge id short enough for a table title (``embedded`` rather than its 60-character id)."""
    record = judge_validation(judge_id)
    if record is not None:
        wrapped = [w for w in ("debate", "calibrated") if w in judge_id]
        return ":".join([*wrapped, record.name])
    return judge_id if len(judge_id) <= 40 else judge_id[:37] + "..."
