"""PyTerrier both ways, without Java: a pt.Transformer as a berds retriever (API and `berds retrieve -r pyterrier`),
berds retrievers/rerankers as pt.Transformers, and pt.Experiment reporting MRecall/BERDS_P equal to `berds eval`."""

from __future__ import annotations

import subprocess
import sys

import pytest

pt = pytest.importorskip("pyterrier")

from berds.demo import build_demo_corpus  # noqa: E402
from berds.errors import BerdsError  # noqa: E402
from berds.evaluate.evaluation import evaluate_paths  # noqa: E402
from berds.questions import load_questions  # noqa: E402
from berds.retrievers.retrieve import retrieve  # noqa: E402
from berds.runs import load_run  # noqa: E402
from conftest import berds_cmd, subprocess_env  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return build_demo_corpus(tmp_path_factory.mktemp("pt") / "corpus", progress=False)


def test_cli_retrieve_with_a_pyterrier_pipeline_and_passages_from_the_store(tmp_path, store):
    out = tmp_path / "run"
    proc = subprocess.run(berds_cmd("retrieve", "-r", "pyterrier", "--option", "pipeline=pt_pipelines:overlap",
                                    "--corpus", str(store), "--questions", "demo", "--k", "10", "--out", str(out),
                                    "--quiet"), capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = load_run(out)
    import pt_pipelines

    expected = pt_pipelines.overlap.transform(pt_pipelines.pd.DataFrame(
        {"qid": ["demo-01"], "query": [run.questions["demo-01"].text]}))
    # the pipeline's top 10 (a saved run orders tied scores as trec_eval does, docid descending)
    assert sorted((h.score, h.passage.id) for h in run.hits["demo-01"]) == \
        sorted(zip(expected["score"].tolist()[:10], expected["docno"].tolist()[:10]))
    corpus = {p["id"]: p for p in pt_pipelines._demo_passages()}
    first = run.hits["demo-01"][0].passage
    assert (first.text, first.title) == (corpus[first.id]["text"], corpus[first.id]["title"])
    assert run.manifest["retriever"]["pipeline"] == "pt_pipelines:overlap"
    assert run.manifest["corpus"]["passages"] == 300


def test_no_jvm_for_a_pure_python_pipeline():
    code = ("import sys\nfrom berds.retrievers.pyterrier import PyTerrierRetriever\nfrom berds.questions import "
            "load_questions\nimport berds.pyterrier as bpt\nimport pyterrier as pt\n"
            "r = PyTerrierRetriever(pipeline='pt_pipelines:overlap_with_text')\n"
            "hits = r.search(load_questions('demo')[:2], k=3)\n"
            "bpt.BerdsRetriever(r, k=3).transform(bpt.topics('demo', limit=2))\n"
            "print(len(hits[0]), 'jnius' in sys.modules, pt.java.started())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "False", "False"]


def test_a_missing_docno_is_one_clear_line(tmp_path, store):
    proc = subprocess.run(berds_cmd("retrieve", "-r", "pyterrier", "-o", "pipeline=pt_pipelines:stranger",
                                    "--corpus", str(store), "--questions", "demo", "--k", "5", "--out",
                                    str(tmp_path / "run"), "--quiet"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 2
    assert "docno 'not-in-the-store' for question 'demo-01'" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_text_columns_without_a_store_and_refusals():
    from berds.retrievers.pyterrier import PyTerrierRetriever

    questions = load_questions("demo")[:3]
    retriever = PyTerrierRetriever(pipeline="pt_pipelines:overlap_with_text")
    hits = retriever.search(questions, k=5)
    assert [len(h) for h in hits] == [5, 5, 5] and hits[0][0].passage.text and hits[0][0].passage.title
    assert retriever.provenance()["passages"] == "ranking text"
    with pytest.raises(BerdsError, match="no 'text' column and no passage store"):
        PyTerrierRetriever(pipeline="pt_pipelines:overlap").search(questions, k=5)
    with pytest.raises(BerdsError, match="no docno, score column"):
        PyTerrierRetriever(pipeline="pt_pipelines:no_ranking").search(questions, k=5)
    with pytest.raises(BerdsError, match="not a pt.Transformer"):
        PyTerrierRetriever(pipeline="pt_pipelines:WORD")
    with pytest.raises(BerdsError, match="MODULE:OBJECT"):
        PyTerrierRetriever(pipeline="pt_pipelines")


def test_pt_experiment_reports_berds_metrics_equal_to_berds_eval(tmp_path, store):
    import ir_measures
    import pt_pipelines

    import berds.pyterrier as bpt

    run = retrieve("pyterrier", "demo", k=10, options={"pipeline": pt_pipelines.overlap, "corpus": store},
                   out=tmp_path / "run", progress=False)
    [(_, result, files)] = evaluate_paths([tmp_path / "run"], "demo-gold", ks=(5, 10), progress=False)
    topics, qrels = bpt.topics("demo"), bpt.qrels(tmp_path / "run")
    assert set(qrels.columns) == {"qid", "docno", "label", "iteration"} and qrels["label"].sum() > 0
    # berds' retriever wrapper around the same pipeline, as a PyTerrier transformer, beside the pipeline itself
    wrapped = bpt.BerdsRetriever("pyterrier", k=10, pipeline=pt_pipelines.overlap, corpus=store)
    table = pt.Experiment([pt_pipelines.overlap % 10, wrapped], topics, qrels,
                          eval_metrics=[bpt.MRecall @ 5, ir_measures.parse_measure("MRecall@10"),
                                        bpt.BERDS_P @ 5, bpt.BERDS_P @ 10],
                          names=["pipeline", "berds"], validate="ignore")
    overall = result.averages["all"]
    assert 0 < overall["mrecall@10"] < 1
    for _, row in table.iterrows():
        assert row["MRecall@5"] == pytest.approx(overall["mrecall@5"])
        assert row["MRecall@10"] == pytest.approx(overall["mrecall@10"])
        assert row["BERDS_P@5"] == pytest.approx(overall["precision@5"])
        assert row["BERDS_P@10"] == pytest.approx(overall["precision@10"])
    ranking = wrapped.transform(topics)
    assert list(ranking.columns) == [*bpt.RANKING_COLUMNS, "perspectives"]  # the topics' column carried on
    assert ranking[ranking.qid == "demo-01"]["docno"].tolist() == [h.passage.id for h in run.hits["demo-01"]]
    assert not pt.java.started()


def test_berds_reranker_as_a_pt_transformer_equals_berds_rerank(store):
    import berds.pyterrier as bpt
    import pt_pipelines
    from analysis_fixtures import LettersEncoder

    from berds.rerank.catalogue import load_reranker

    topics = bpt.topics("demo", limit=3)
    first = pt_pipelines.overlap_with_text() % 10
    pipeline = first >> bpt.BerdsReranker("mmr", encoder=LettersEncoder(), lam=0.5)
    reranked = pipeline.transform(topics)
    run = retrieve("pyterrier", load_questions("demo")[:3], k=10,
                   options={"pipeline": pt_pipelines.overlap, "corpus": store}, progress=False)
    direct = load_reranker("mmr", encoder=LettersEncoder(), lam=0.5).rerank(run)
    for qid in topics["qid"]:
        assert reranked[reranked.qid == qid]["docno"].tolist() == [h.passage.id for h in direct.hits[qid]]
    assert reranked[reranked.qid == "demo-01"]["docno"].tolist() != \
        first.transform(topics).query("qid == 'demo-01'")["docno"].tolist()  # MMR did reorder
    with pytest.raises(BerdsError, match="no 'text' column"):
        (pt_pipelines.overlap >> bpt.BerdsReranker("mmr", encoder=LettersEncoder())).transform(topics)
    # with the store, a ranking without text works too
    by_store = (pt_pipelines.overlap % 10 >> bpt.BerdsReranker("mmr", corpus=store, encoder=LettersEncoder(),
                                                              lam=0.5)).transform(topics)
    assert by_store["docno"].tolist() == reranked["docno"].tolist()


def test_perspectives_flow_through_a_pipeline_to_a_reranker_that_reads_them(store):
    import pt_pipelines
    from analysis_fixtures import LettersEncoder

    import berds.pyterrier as bpt
    from berds.rerank.catalogue import load_reranker

    topics = bpt.topics("demo", limit=2)
    first = bpt.BerdsRetriever("pyterrier", k=8, pipeline=pt_pipelines.overlap, corpus=store)
    ranking = first.transform(topics)
    assert ranking["perspectives"].iloc[0] == list(load_questions("demo")[0].perspectives)
    xquad = (first >> bpt.BerdsReranker("xquad", aspects="oracle", encoder=LettersEncoder(), lam=0.5)).transform(topics)
    run = retrieve("pyterrier", load_questions("demo")[:2], k=8,
                   options={"pipeline": pt_pipelines.overlap, "corpus": store}, progress=False)
    direct = load_reranker("xquad", aspects="oracle", encoder=LettersEncoder(), lam=0.5).rerank(run)
    for qid in topics["qid"]:
        assert xquad[xquad.qid == qid]["docno"].tolist() == [h.passage.id for h in direct.hits[qid]]
