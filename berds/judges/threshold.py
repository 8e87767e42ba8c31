"""A judge relabelled by a P(Yes) threshold, and the small file where calibrated thresholds are kept.

``berds judge calibrate`` (``berds.trust.calibration``) chooses a threshold on labelled dev pairs and stores it
here, keyed by judge id; ``--judge calibrated:NAME`` wraps judge NAME in a ``ThresholdJudge`` using it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError, InputError
from berds.judges.base import id_number
from berds.types import JudgePair, Verdict

STORE_FORMAT = "berds-judge-calibration"
STORE_VERSION = 1


# ----------------------------------------------------------------------------------- storage


def default_store_path() -> Path:
    """``calibration.json`` in berds' home folder, beside the default judgement cache. One fixed place, so
    ``--judge calibrated:NAME`` finds a threshold whatever ``--cache`` a command used."""
    from berds.io import home_dir

    return home_dir() / "calibration.json"


class CalibrationStore:
    """Calibration records keyed by judge id, in one small JSON file written atomically."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_store_path()
        if self.path.is_dir():
            raise InputError("is a folder, but the calibration store is a JSON file", path=self.path,
                             fix="give a file name, e.g. calibration.json")

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"format": STORE_FORMAT, "version": STORE_VERSION, "judges": {}}
        from berds.io import read_json

        data = read_json(self.path)
        if not isinstance(data, dict) or data.get("format") != STORE_FORMAT or not isinstance(data.get("judges"), dict):
            raise InputError(f"not a berds calibration file (expected \"format\": \"{STORE_FORMAT}\")", path=self.path,
                             fix="point --calibration at the file berds judge calibrate wrote, or delete this one")
        if data.get("version") != STORE_VERSION:
            raise InputError(f"calibration file version {data.get('version')}, this berds reads {STORE_VERSION}",
                             path=self.path)
        return data

    def get(self, judge_id: str) -> dict[str, Any] | None:
        return self._read()["judges"].get(judge_id)

    def put(self, record: Mapping[str, Any]) -> None:
        from berds.io import write_json

        data = self._read()
        data["judges"][record["judge_id"]] = dict(record)
        write_json(self.path, data)

    def records(self) -> dict[str, dict[str, Any]]:
        return dict(self._read()["judges"])

    def threshold_for(self, judge_id: str, prompt_version: str | None = None) -> float:
        """The stored threshold for ``judge_id``; a clear error when none is stored or the prompt changed."""
        record = self.get(judge_id)
        if record is None:
            raise BerdsError(f"no calibration stored for judge {judge_id!r} in {self.path} — run "
                             "`berds judge calibrate --labels DEV.tsv --judge NAME` first (with the same judge options)")
        if prompt_version is not None and record.get("prompt_version") not in (None, prompt_version):
            raise BerdsError(f"{self.path}: judge {judge_id!r} was calibrated with prompt {record['prompt_version']!r} "
                             f"but now uses {prompt_version!r} — calibrate it again")
        return float(record["threshold"])


# ----------------------------------------------------------------------------------- judges


class ThresholdJudge:
    """Any judge that reports P(Yes), relabelled as ``P(Yes) >= threshold``.

    Verdicts without P(Yes) keep the inner judge's label (their ``detail`` says ``"no_p_yes": true``).
    The id records the threshold, so cached answers of differently calibrated judges never mix.
    """

    def __repr__(self) -> str:
        return f"ThresholdJudge(threshold={self.threshold:.4g}, inner={self.inner!r})"

    def __init__(self, inner: Any, threshold: float, *, source: str = ""):
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise BerdsError(f"threshold must be a number in [0, 1], got {threshold!r}")
        self.inner = inner
        self.threshold = float(threshold)
        self.source = source
        self.name = f"{getattr(inner, 'name', None) or inner.id}@{self.threshold:.4g}"
        self.id = f"{inner.id}|calibrated-threshold={id_number(self.threshold)}"
        self.prompt_version = inner.prompt_version
        self.batch_size = getattr(inner, "batch_size", 64)

    def prepare(self) -> None:
        from berds.judges.base import prepare_judge

        prepare_judge(self.inner)

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        out = []
        for v in self.inner.judge(pairs):
            if v.p_yes is None:
                out.append(Verdict(v.label, None, v.raw, {**(v.detail or {}), "no_p_yes": True}))
            else:
                out.append(Verdict(bool(v.p_yes >= self.threshold), v.p_yes, v.raw, v.detail))
        return out
