"""The BERDS question sets as ir_datasets datasets, and an evaluation's judgements as their subtopic qrels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ir_datasets = pytest.importorskip("ir_datasets")

import berds  # noqa: E402
from berds.errors import BerdsError, InputError  # noqa: E402
from berds.evaluate.evaluation import evaluate_paths  # noqa: E402
from berds.evaluate.qrels import read_judgements  # noqa: E402
from berds.questions import load_questions  # noqa: E402

DEMO_RUN = Path(berds.__file__).parent / "data" / "demo" / "run.ctxs.jsonl"


def test_registered_by_import_with_queries_carrying_perspectives():
    import berds.ir_datasets as bird

    assert bird.register() == bird.dataset_ids()  # idempotent
    assert {"berds/demo", "berds/kialo/dev", "berds/opinionqa/test", "berds/arguana/dev"} <= set(bird.dataset_ids())
    dataset = ir_datasets.load("berds/demo")
    assert dataset.has_queries() and not dataset.has_qrels() and not dataset.has_docs()
    queries = list(dataset.queries_iter())
    assert [(q.query_id, q.text, q.perspectives) for q in queries] == \
        [(q.id, q.text, q.perspectives) for q in load_questions("demo")]
    assert queries[0].default_text() == queries[0].text and dataset.queries_cls() is bird.BerdsQuery
    assert "timchen0618/Kialo" in ir_datasets.load("berds/kialo/test").documentation()["desc"]


def test_named_sets_read_the_files_berds_reads(tmp_path, monkeypatch):
    import berds.ir_datasets  # noqa: F401

    rows = [{"id": "k1", "question": "Is tea better than coffee?", "perspectives": ["Tea is better.", "Coffee is."]}]
    (tmp_path / "kialo.dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    [q] = list(ir_datasets.load("berds/kialo/dev").queries_iter())
    assert (q.query_id, q.perspectives, q.dataset) == ("k1", ("Tea is better.", "Coffee is."), "kialo")


def test_an_evaluation_as_subtopic_qrels_scores_like_berds(tmp_path):
    import ir_measures

    import berds.ir_datasets as bird
    from berds.evaluate.measures import BERDS_P, MRecall

    out = tmp_path / "eval"
    [(_, result, _)] = evaluate_paths([DEMO_RUN], "demo-gold", ks=(5, 10), out=out, progress=False)
    dataset_id = bird.register_evaluation("berds/demo", out, "bm25")
    assert dataset_id == "berds/demo/judged/bm25"
    assert bird.register_evaluation("berds/demo", out, "bm25") == dataset_id  # again: the same
    dataset = ir_datasets.load(dataset_id)
    qrels = list(dataset.qrels_iter())
    rows, ranking = read_judgements(out)
    assert sorted((q.query_id, q.iteration, q.doc_id, q.relevance) for q in qrels) == sorted(rows)
    assert len({q.query_id for q in dataset.queries_iter()}) == 12
    run = [ir_measures.ScoredDoc(q, d, float(-r)) for q, d, r in ranking]
    agg = ir_measures.calc_aggregate([MRecall @ 5, BERDS_P @ 10], dataset.qrels_iter(), run)
    assert agg[MRecall @ 5] == pytest.approx(result.averages["all"]["mrecall@5"])
    assert agg[BERDS_P @ 10] == pytest.approx(result.averages["all"]["precision@10"])
    with pytest.raises(BerdsError, match="already registered"):
        bird.register_evaluation("berds/demo", tmp_path, "bm25")
    with pytest.raises(InputError, match="no such evaluation"):
        bird.register_evaluation("berds/demo", tmp_path / "nothing", "x")
    with pytest.raises(BerdsError, match="unknown BERDS dataset"):
        bird.register_evaluation("berds/kialo", out, "x")


def test_pyterrier_reads_the_topics_through_ir_datasets():
    pt = pytest.importorskip("pyterrier")
    import berds.ir_datasets  # noqa: F401

    topics = pt.get_dataset("irds:berds/demo").get_topics("text")
    assert topics["qid"].tolist() == [q.id for q in load_questions("demo")]
    assert topics["query"].iloc[0] == load_questions("demo")[0].text
