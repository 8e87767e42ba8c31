"""Diversification edge cases found probing the rerank and study commands on tiny inputs."""

from __future__ import annotations

from berds.rerank.catalogue import rerank_file
from berds.runs import load_run, save_run
from berds.types import Hit, Run
from analysis_fixtures import LettersEncoder
from conftest import make_run


def test_rerank_of_an_expansion_run_that_kept_duplicates_ranks_each_passage_once(tmp_path):
    # `retrieve --expand` keeps a passage each time a perspective's list brings it (the study's merge); reranking
    # such a run failed with "broke the reranker contract: duplicate passages"
    base = make_run(n_questions=2, depth=6)
    hits = dict(base.hits)
    hits["q0"] = [*hits["q0"][:3], hits["q0"][1], *hits["q0"][3:]]
    hits["q0"] = [Hit(h.passage, float(len(hits["q0"]) - i)) for i, h in enumerate(hits["q0"])]
    save_run(Run(base.questions, hits, {}, "expanded"), tmp_path / "expanded")
    _, reranked, folder = rerank_file("mmr", tmp_path / "expanded", tmp_path / "mmr",
                                      options={"lam": 0.5, "encoder": LettersEncoder()})
    ids = [h.passage.id for h in reranked.hits["q0"]]
    assert sorted(ids) == sorted({h.passage.id for h in base.hits["q0"]})
    assert reranked.manifest["rerank"]["repeated_passages_dropped"] == 1
    assert [h.passage.id for h in load_run(folder).hits["q0"]] == ids
