"""What a labelled file shares with the dev pairs a threshold was chosen on: figures on shared pairs or questions
are in-sample, and the judge-trust commands say so (``calibrate --holdout``, and ``validate`` / ``audit`` of a
``calibrated:`` judge)."""

from __future__ import annotations

from typing import Any

from berds.errors import BerdsError


def shared_with(dev: Any, labelled: Any) -> dict[str, int]:
    """``{"pairs_in_dev": rows of labelled whose (perspective, document) pair is in dev, "questions_in_dev":
    distinct questions of labelled that dev holds}``."""
    dev_pairs = {(x.perspective, x.document) for x in dev}
    dev_questions = set(dev.questions)
    return {"pairs_in_dev": sum((x.perspective, x.document) in dev_pairs for x in labelled),
            "questions_in_dev": sum(q in dev_questions for q in labelled.questions)}


def threshold_tuned_on(judge: Any, labelled: Any) -> dict[str, Any] | None:
    """When ``judge`` is a ``calibrated:`` judge whose stored threshold was chosen on pairs of ``labelled``, what
    they share: ``{"dev": path, "pairs_in_dev": n, "questions_in_dev": m}`` (None when nothing is shared or the
    dev file can no longer be compared). Its figures on those pairs are in-sample, and the commands say so."""
    from berds.judges.base import LazyJudge
    from berds.judges.threshold import CalibrationStore, ThresholdJudge
    from berds.trust.labels import read_labelled_pairs

    while isinstance(judge, LazyJudge):
        judge = judge.inner
    if not isinstance(judge, ThresholdJudge) or not judge.source:
        return None
    try:
        record = CalibrationStore(judge.source).get(judge.inner.id) or {}
        dev = record.get("dev") or {}
        if record.get("threshold") != judge.threshold or not dev.get("path"):
            return None
        if dev.get("sha256") == labelled.sha256:
            tuned = labelled
        else:
            tuned = read_labelled_pairs(dev["path"])
            if tuned.sha256 != dev.get("sha256"):  # the file changed since: what it held then is unknown
                return None
    except (OSError, BerdsError):
        return None
    shared = shared_with(tuned, labelled)
    return {"dev": dev["path"], **shared} if shared["pairs_in_dev"] or shared["questions_in_dev"] else None
