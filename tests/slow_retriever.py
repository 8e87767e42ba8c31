"""A plug-in retriever that takes its time (for kill/resume tests): a deterministic hit list per question,
each ``search`` call sleeping ``delay`` seconds and logging the question ids it was asked for."""

from __future__ import annotations

import os
import time

from berds.types import Hit, Passage


class SlowRetriever:
    name = "slow"

    def __init__(self, *, delay: float = 0.3, log: str | None = None):
        self.delay, self.log = float(delay), log

    def search(self, questions, *, k):
        time.sleep(self.delay)
        if self.log:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write("".join(f"{q.id}\n" for q in questions))
                f.flush()
                os.fsync(f.fileno())
        return [[Hit(Passage(f"{q.id}-d{r}", f"passage {r} about {q.text}"), float(k - r)) for r in range(k)]
                for q in questions]
