"""Plug-ins that break the contracts the way authors do by mistake: each is caught where it enters berds, with a
message that says what to fix (rerankers that edit their input or rank upside down, judges that answer with
the wrong types, change their id, or lack the protocol's attributes)."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.rerank.catalogue import rerank_file
from berds.runs import load_run, save_run
from berds.testing import check_reranker
from berds.types import Hit, Run
from conftest import make_run


class Reverses:
    """A valid reranker: the input order reversed, scores n - position."""

    name = "reverse"

    def rerank(self, run, *, progress=False):
        hits = {q: [Hit(h.passage, float(len(hs) - i)) for i, h in enumerate(reversed(hs))]
                for q, hs in run.hits.items()}
        return Run(dict(run.questions), hits, {"rerank": {"method": "reverse"}, "input_run": run.name}, "rev")


class CutsItsInput(Reverses):
    """Reranks correctly, then trims the caller's run (``Run.hits`` is a dict, so it can)."""

    def rerank(self, run, *, progress=False):
        out = super().rerank(run)
        for qid in list(run.hits):
            run.hits[qid] = run.hits[qid][:1]
        return out


class WritesIntoInputManifest(Reverses):
    def rerank(self, run, *, progress=False):
        run.manifest["rerank"] = {"method": "reverse"}
        return super().rerank(run)


class ScoresUpsideDown(Reverses):
    """The right order with scores that grow down the list: TREC tools would re-sort it."""

    def rerank(self, run, *, progress=False):
        out = super().rerank(run)
        hits = {q: [Hit(h.passage, float(i)) for i, h in enumerate(hs)] for q, hs in out.hits.items()}
        return Run(dict(out.questions), hits, dict(out.manifest), out.name)


def test_check_reranker_says_the_input_was_changed_not_that_passages_are_foreign():
    report = check_reranker(CutsItsInput())
    failed = {c.name: c.detail for c in report.failures}
    assert "contract" not in failed, failed  # the output is a valid reranking of what it was given
    assert "changed the run it was given" in failed["input intact"]


def test_check_reranker_catches_a_write_into_the_input_manifest():
    report = check_reranker(WritesIntoInputManifest())
    assert [c.name for c in report.failures] == ["input intact"]
    assert check_reranker(Reverses()).ok


def test_rerank_refuses_to_write_a_run_whose_scores_increase(tmp_path):
    run_dir = save_run(make_run(n_questions=2, depth=5, name="tiny"), tmp_path / "tiny")
    with pytest.raises(BerdsError, match=r"reranker 'reverse' broke the reranker contract: question 'q0': scores "
                                         r"must not increase down the list .*berds check-reranker"):
        rerank_file(ScoresUpsideDown(), run_dir, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    _, reranked, _ = rerank_file(CutsItsInput(), run_dir, tmp_path / "good")  # judged against what it was given
    assert len(load_run(tmp_path / "good").hits["q0"]) == 5 == len(reranked.hits["q0"])
