"""Plug-ins that break the contracts the way authors do by mistake: each is caught where it enters berds, with a
message that says what to fix (rerankers that edit their input or rank upside down, judges that answer with
the wrong types, change their id, or lack the protocol's attributes)."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.rerank.catalogue import rerank_file
from berds.runs import load_run, save_run
from berds.testing import check_reranker
from berds.types import Hit, Run, Verdict
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


# ------------------------------------------------------------------------------------------------ judges


class PlainBools:
    """Answers with bare bools instead of Verdicts."""

    id, prompt_version, batch_size = "plain-bools", "v1", 4

    def judge(self, pairs):
        return [True for _ in pairs]


class SaysYesOrNoAsText(PlainBools):
    id = "yes-no-text"

    def judge(self, pairs):
        return [Verdict("No") for _ in pairs]


class IdPerCall(PlainBools):
    """An id that counts its calls (e.g. a timestamp or a counter put in the id by mistake)."""

    calls = 0

    @property
    def id(self):
        return f"counter-{self.calls}"

    def judge(self, pairs):
        type(self).calls += 1
        return [Verdict(True) for _ in pairs]


class NoPromptVersion:
    id = "no-prompt-version"

    def judge(self, pairs):
        return [Verdict(True) for _ in pairs]


def test_verdict_refuses_labels_that_would_count_no_as_yes():
    import numpy as np

    for bad in ("No", "Yes", 0.7, None, 2):
        with pytest.raises(ValueError, match="Verdict label must be True or False"):
            Verdict(bad)
    with pytest.raises(ValueError, match=r"p_yes must be a probability in \[0, 1\]"):
        Verdict(True, p_yes=7.0)
    with pytest.raises(ValueError, match="raw must be"):
        Verdict(True, raw=None)
    # what judges legitimately hand over: numpy bools and scores, 0/1, NaN for "unknown"
    v = Verdict(np.float32(0.8) >= 0.5, p_yes=np.float32(0.5))
    assert v.label is True and type(v.p_yes) is float and v.p_yes == 0.5
    assert Verdict(0).label is False and Verdict(True, p_yes=float("nan")).p_yes is None


@pytest.mark.parametrize("judge, message", [
    (PlainBools(), r"judge 'plain-bools' returned a bool \(True\) where a berds.types.Verdict was expected"),
    (IdPerCall(), r"judge 'counter-0' changed its id to 'counter-1' while judging"),
])
def test_evaluation_names_a_judge_that_breaks_the_protocol(tmp_path, judge, message):
    from berds.evaluate import JudgementCache, evaluate_run

    cache = JudgementCache(tmp_path / "cache.sqlite")
    with pytest.raises(BerdsError, match=message):
        evaluate_run(make_run(), judge, ks=(2,), cache=cache, progress=False)
    assert cache.count() == 0  # nothing filed under a wrong id or as a non-verdict


def test_a_text_label_fails_in_the_judge_instead_of_counting_as_yes(tmp_path):
    from berds.evaluate import JudgementCache, evaluate_run

    with pytest.raises(ValueError, match="got 'No'"):
        evaluate_run(make_run(), SaysYesOrNoAsText(), ks=(2,), cache=JudgementCache(tmp_path / "c.sqlite"),
                     progress=False)


def test_a_judge_without_prompt_version_is_named_when_loaded():
    from berds.judges import load_judge

    with pytest.raises(BerdsError, match=r"test_plugin_contracts:NoPromptVersion did not give a judge: it lacks "
                                         r"prompt_version"):
        load_judge("test_plugin_contracts:NoPromptVersion")
    assert load_judge("test_plugin_contracts:PlainBools").id == "plain-bools"


# ------------------------------------------------------------------------------------------------ retrievers


class SortsItsQuestions:
    """Sorts the caller's list by length to batch similar questions (in place, by mistake), then answers in the
    sorted order: each list lands on another question once retrieve() pairs them with its own list."""

    name = "sorts-in-place"

    def search(self, questions, *, k):
        from berds.testing import TINY_PASSAGES

        questions.sort(key=lambda q: len(q.text))
        return [[Hit(TINY_PASSAGES[i], 1.0)] for i, _ in enumerate(questions)]


def test_check_retriever_names_a_search_that_reorders_its_input():
    from berds.testing import check_retriever, tiny_questions

    report = check_retriever(SortsItsQuestions())
    failed = {c.name: c.detail for c in report.failures}
    assert "search changed the list of questions it was given" in failed["input intact"]
    assert [q.id for q in tiny_questions()] == ["q-bees", "q-tides", "q-bread"]


def test_a_catalogue_shows_its_names_in_a_notebook_without_importing_them():
    import sys

    from berds.registry import Catalogue

    catalogue = Catalogue("widget")
    catalogue.add("b", "no_such_module_anywhere:B")
    catalogue.add("a", "no_such_module_anywhere:A")
    assert repr(catalogue) == "Catalogue('widget', 2 entries: a, b)"
    assert "no_such_module_anywhere" not in sys.modules


def test_every_import_the_package_docstring_shows_works():
    import berds

    lines = [line.split("#")[0].strip() for line in berds.__doc__.splitlines() if line.strip().startswith("from berds")]
    assert len(lines) >= 10
    for line in lines:
        exec(line, {})


# ---------------------------------------------------------------- rankings up to ties (berds.testing.rankings_agree)

def test_rankings_agree_lets_tied_places_swap_and_nothing_else():
    from berds.testing import rankings_agree

    a = [("d1", 0.9), ("d2", 0.5), ("d3", 0.5 + 1e-7), ("d4", 0.1)]
    assert rankings_agree(a, [("d1", 0.9), ("d3", 0.5 + 1e-7), ("d2", 0.5), ("d4", 0.1)])  # a tie swapped
    assert not rankings_agree(a, [("d2", 0.9), ("d1", 0.9), ("d3", 0.5), ("d4", 0.1)])  # ids swapped, scores kept
    assert not rankings_agree(a, [("d1", 0.9), ("d2", 0.5), ("d4", 0.5), ("d3", 0.1)])  # a distinct pair swapped
    assert not rankings_agree(a, [("d1", 0.9), ("d2", 0.5), ("d3", 0.5), ("d4", 0.2)])  # a score that moved
    assert not rankings_agree(a, a[:3])  # another length
    # a tie cut off at k: the last tied places may hold other members of the tie
    assert rankings_agree([("d1", 0.9), ("d2", 0.5)], [("d1", 0.9), ("d3", 0.5 + 1e-7)])
    assert not rankings_agree([("d1", 0.9), ("d2", 0.5)], [("d3", 0.9 + 1e-7), ("d2", 0.5)])  # not at the cut


class _NoisyBatchRetriever:
    """A dense-like retriever: searching one question alone perturbs its scores by float noise (1e-7), as a
    batched matrix product does, and two of its passages tie exactly, so the noise swaps them."""

    name = "noisy-batch"

    def search(self, questions, *, k):
        from berds.testing import TINY_PASSAGES
        from berds.types import Hit

        noise = 1e-7 if len(questions) == 1 else 0.0
        out = []
        for q in questions:
            scored = [(1.0, TINY_PASSAGES[0]), (0.5 + noise, TINY_PASSAGES[2]), (0.5, TINY_PASSAGES[1]),
                      (0.1, TINY_PASSAGES[3])]
            scored.sort(key=lambda sp: (-sp[0], sp[1].id))
            out.append([Hit(p, s) for s, p in scored[:k]])
        return out


def test_check_retriever_passes_a_retriever_whose_batchings_differ_by_float_noise():
    from berds.testing import check_retriever

    report = check_retriever(_NoisyBatchRetriever(), k=3)
    by_name = {c.name: c.status for c in report.checks}
    assert by_name["batch = one by one"] == "pass" and by_name["deterministic"] == "pass", report.checks
