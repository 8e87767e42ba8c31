"""Deterministic judges for tests (importable as ``judges_for_tests:OverlapJudge`` when tests/ is on the path).

``OverlapJudge`` says Yes when at least ``threshold`` of the perspective's content words occur in the
passage. It can sleep per pair (to be killed mid-evaluation) and log every pair it judges to a file.
"""

from __future__ import annotations

import os
import re
import time

from berds.types import Verdict

_STOP = {"the", "a", "an", "of", "to", "and", "or", "is", "are", "in", "on", "for", "it", "be", "by", "with", "that", "this"}


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP and len(w) > 2}


class OverlapJudge:
    prompt_version = "overlap-v1"

    def __init__(self, *, threshold: float = 0.5, delay: float = 0.0, log: str | None = None, batch_size: int = 8):
        self.threshold = float(threshold)
        self.delay = float(delay)
        self.log = log or os.environ.get("BERDS_TEST_JUDGE_LOG")
        self.batch_size = int(batch_size)
        self.id = f"test-overlap|threshold={self.threshold:g}"

    def score(self, perspective: str, passage: str) -> float:
        want = content_words(perspective)
        return len(want & content_words(passage)) / max(len(want), 1)

    def judge(self, pairs):
        out = []
        for p in pairs:
            if self.delay:
                time.sleep(self.delay)
            s = self.score(p.perspective, p.passage)
            out.append(Verdict(label=s >= self.threshold, p_yes=s, raw="Yes" if s >= self.threshold else "No"))
        if self.log:
            with open(self.log, "a", encoding="utf-8") as f:
                for p in pairs:
                    f.write(f"{p.perspective[:30]!r}\t{p.passage[:30]!r}\n")
        return out
class HalfUnparsedJudge(OverlapJudge):
    """Answers every other pair with something that is neither Yes nor No (counted unparsed)."""

    prompt_version = "half-unparsed-v1"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.id = "test-half-unparsed"

    def judge(self, pairs):
        out = super().judge(pairs)
        return [Verdict(False, None, "Maybe", {"unparsed": True}) if i % 2 else v for i, v in enumerate(out)]


