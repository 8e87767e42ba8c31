"""Two builds of one store started at the same moment: the second must be refused, never write beside the first.

The lock was taken on <out>.building only after a build had made it: the other build, having seen no folder,
cleared the new one (the lock stayed on the deleted folder) and made its own, and both wrote passages into one
store (a duplicate-id error in one of them) or one failed as 'File exists' instead of being named."""

from __future__ import annotations

import multiprocessing
import sys

import pytest

from berds.corpora.docstore import PassageStore, PassageStoreWriter
from berds.types import Passage

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork start and flock")


def build(out, barrier, results):
    barrier.wait()
    try:
        with PassageStoreWriter(out, shard_size=1) as writer:
            writer.add(Passage("a", "some text"))
            writer.add(Passage("b", "more text"))
        results.put("built")
    except Exception as exc:  # (reported to the test)
        results.put(f"{type(exc).__name__}: {exc}")


def test_two_builds_started_together_one_builds_the_other_is_refused(tmp_path):
    context = multiprocessing.get_context("fork")
    for trial in range(40):
        out = tmp_path / f"store-{trial}"
        barrier, results = context.Barrier(2), context.Queue()
        workers = [context.Process(target=build, args=(out, barrier, results)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        outcomes = sorted((results.get(timeout=10) for _ in workers), key=lambda o: o != "built")
        assert outcomes[0] == "built", outcomes
        assert outcomes[1].startswith("InputError: ") and "another berds build is writing into this folder" in \
            outcomes[1], outcomes
        store = PassageStore.open(out)
        assert [p.id for p in store] == ["a", "b"]
        store.verify()
