"""MRecall@k and BERDS_P@k as ir_measures measures: equal to berds' own metrics on the demo and on hand cases."""

from __future__ import annotations

import pytest

ir_measures = pytest.importorskip("ir_measures")

from berds.errors import BerdsError  # noqa: E402
from berds.evaluate.evaluation import evaluate_run  # noqa: E402
from berds.evaluate.measures import BERDS_P, MRecall  # noqa: E402
from berds.evaluate.qrels import check_measures, compute_measures, qrels_from_judgements, write_qrels  # noqa: E402
from berds.judges.demo_gold import DemoGoldJudge  # noqa: E402
from berds.runs import load_run  # noqa: E402
from berds.types import Hit, Passage, Question, Run  # noqa: E402


KS = (1, 2, 3, 5, 10, 20)


def test_demo_figures_equal_berds_own(tmp_path):
    from pathlib import Path

    import berds

    run = load_run(Path(berds.__file__).parent / "data/demo/run.ctxs.jsonl")
    result = evaluate_run(run, DemoGoldJudge(), ks=KS, progress=False)
    rows, ranking = qrels_from_judgements(result.judgements(run))
    names = [f"{m}@{k}" for k in KS for m in ("MRecall", "BERDS_P")]
    means, per_question = compute_measures(names, rows, ranking)
    overall = result.averages["all"]
    assert 0 < overall["mrecall@5"] < 1 and 0 < overall["precision@5"] < 1  # a demo that tells values apart
    for k in KS:
        assert means[f"MRecall@{k}"] == pytest.approx(overall[f"mrecall@{k}"], abs=1e-12)
        assert means[f"BERDS_P@{k}"] == pytest.approx(overall[f"precision@{k}"], abs=1e-12)
        for qid, row in result.per_question.items():
            assert per_question[qid][f"MRecall@{k}"] == row[f"mrecall@{k}"]
            assert per_question[qid][f"BERDS_P@{k}"] == pytest.approx(row[f"precision@{k}"])
    # the same through files, as another tool would: berds' qrels and a TREC run, read by ir_measures itself
    write_qrels(rows, tmp_path / "demo.qrels")
    with open(tmp_path / "demo.run", "w") as f:
        f.writelines(f"{q} Q0 {d} {r} {100 - r} berds\n" for q, d, r in ranking)
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "demo.qrels")))
    agg = ir_measures.calc_aggregate([MRecall @ 5, BERDS_P @ 10, ir_measures.parse_measure("MRecall@10")],
                                     qrels, list(ir_measures.read_trec_run(str(tmp_path / "demo.run"))))
    assert agg[MRecall @ 5] == pytest.approx(overall["mrecall@5"])
    assert agg[MRecall @ 10] == pytest.approx(overall["mrecall@10"])
    assert agg[BERDS_P @ 10] == pytest.approx(overall["precision@10"])


def Q(qid, docid, rel, sub):
    return ir_measures.Qrel(qid, docid, rel, sub)


def test_hand_cases_more_perspectives_than_k_ties_and_missing_questions():
    # q1: 3 perspectives; d1 supports 1, d2 supports 2 and 3, d3 supports nothing
    qrels = [Q("q1", "d1", 1, "1"), Q("q1", "d1", 0, "2"), Q("q1", "d1", 0, "3"),
             Q("q1", "d2", 0, "1"), Q("q1", "d2", 1, "2"), Q("q1", "d2", 1, "3"),
             Q("q1", "d3", 0, "1"), Q("q1", "d3", 0, "2"), Q("q1", "d3", 0, "3"),
             Q("q2", "x", 0, "1")]  # q2: judged, the run has nothing for it -> 0
    run = [ir_measures.ScoredDoc("q1", "d3", 3.0), ir_measures.ScoredDoc("q1", "d2", 2.0),
           ir_measures.ScoredDoc("q1", "d1", 2.0),  # tie: docid descending puts d2 before d1 (trec_eval)
           ir_measures.ScoredDoc("q9", "d1", 1.0)]  # not in the qrels: not scored
    got = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(
        [MRecall @ 1, MRecall @ 2, MRecall @ 3, BERDS_P @ 2, BERDS_P @ 5], qrels, run)}
    assert got[("q1", "MRecall@1")] == 0.0  # d3 supports nothing
    assert got[("q1", "MRecall@2")] == 1.0  # m = 3 > k = 2: d2 covers 2 perspectives = k
    assert got[("q1", "MRecall@3")] == 1.0  # all three
    assert got[("q1", "BERDS_P@2")] == 0.5
    assert got[("q1", "BERDS_P@5")] == pytest.approx(2 / 5)  # denominator k, not the 3 retrieved
    assert got[("q2", "MRecall@2")] == 0.0 and got[("q2", "BERDS_P@2")] == 0.0
    assert not any(q == "q9" for q, _ in got)


def test_clear_errors_for_a_missing_cutoff_and_flat_qrels():
    with pytest.raises(BerdsError, match="MRecall"):
        check_measures(["MRecall"])
    assert [str(m) for m in check_measures(["MRecall@5", "BERDS_P@10"])] == ["MRecall@5", "BERDS_P@10"]
    flat = [ir_measures.Qrel("q1", "d1", 1)]  # no subtopics: the measure says what to give it
    with pytest.raises(ValueError, match="subtopic qrels"):
        list(ir_measures.iter_calc([MRecall @ 5], flat, [ir_measures.ScoredDoc("q1", "d1", 1.0)]))


def test_hand_run_through_berds_eval_measure_names():
    q = Question("q1", "Q?", ("a b", "c d"))
    hits = [Hit(Passage("p1", "a b"), 2.0), Hit(Passage("p2", "zz"), 1.0)]
    run = Run.from_lists([q], [hits], name="hand")
    from judges_for_tests import OverlapJudge

    result = evaluate_run(run, OverlapJudge(), ks=(2,), progress=False)
    rows, ranking = qrels_from_judgements(result.judgements(run))
    means, _ = compute_measures(["MRecall@2", "BERDS_P@2"], rows, ranking)
    assert means == {"MRecall@2": result.averages["all"]["mrecall@2"],
                     "BERDS_P@2": result.averages["all"]["precision@2"]}


def test_a_question_with_no_judged_passage_counts_as_in_berds(tmp_path):
    """A question evaluated with an empty ranking (--allow-short) has no judgement; berds scores it 0. Its qrels
    line (NO_PASSAGE_JUDGED) keeps it in ir_measures' average, through Python and through the exported files."""
    from pathlib import Path

    import berds
    from berds.evaluate.evaluation import write_eval_outputs
    from berds.evaluate.qrels import NO_PASSAGE_JUDGED, add_measures_to_outputs, export_qrels, read_judgements

    run = load_run(Path(berds.__file__).parent / "data/demo/run.ctxs.jsonl")
    empty = next(iter(run.hits))
    run = Run(run.questions, {q: ([] if q == empty else hits) for q, hits in run.hits.items()}, run.manifest, run.name)
    result = evaluate_run(run, DemoGoldJudge(), ks=(5, 10), progress=False, allow_short=True)
    overall = result.averages["all"]
    assert result.per_question[empty]["mrecall@5"] == 0.0 and len(result.per_question) == len(run.questions)
    names = ["MRecall@5", "BERDS_P@5", "MRecall@10", "BERDS_P@10"]
    rows, ranking = qrels_from_judgements(result.judgements(run))  # without the evaluation's questions
    without, per_question = compute_measures(names, rows, ranking)
    assert empty not in per_question and without["MRecall@5"] != pytest.approx(overall["mrecall@5"])  # the bug
    rows, ranking = qrels_from_judgements(result.judgements(run), result.per_question)
    assert [r for r in rows if r[0] == empty] == [(empty, "1", NO_PASSAGE_JUDGED, 0)]
    means, per_question = compute_measures(names, rows, ranking)
    assert per_question[empty] == {n: 0.0 for n in names}
    for k in (5, 10):
        assert means[f"MRecall@{k}"] == pytest.approx(overall[f"mrecall@{k}"], abs=1e-12)
        assert means[f"BERDS_P@{k}"] == pytest.approx(overall[f"precision@{k}"], abs=1e-12)
    # through the files berds writes: berds eval's own --measure, and berds export qrels read by ir_measures
    files = write_eval_outputs(result, run, tmp_path / "eval")
    assert add_measures_to_outputs(files, names) == pytest.approx({n: means[n] for n in names})
    assert (empty, "1", NO_PASSAGE_JUDGED, 0) in read_judgements(tmp_path / "eval", unjudged=True)[0]
    assert not any(r[0] == empty for r in read_judgements(tmp_path / "eval")[0])
    export_qrels(tmp_path / "eval", tmp_path / "demo.qrels")
    with open(tmp_path / "demo.run", "w") as f:
        f.writelines(f"{q} Q0 {d} {r} {100 - r} berds\n" for q, d, r in ranking)
    agg = ir_measures.calc_aggregate([MRecall @ 5, BERDS_P @ 10], list(ir_measures.read_trec_qrels(
        str(tmp_path / "demo.qrels"))), list(ir_measures.read_trec_run(str(tmp_path / "demo.run"))))
    assert agg[MRecall @ 5] == pytest.approx(overall["mrecall@5"])
    assert agg[BERDS_P @ 10] == pytest.approx(overall["precision@10"])
    # and pt.Experiment, with the evaluation's qrels from berds.pyterrier: the empty question is one of its topics
    pt = pytest.importorskip("pyterrier")
    import pandas as pd

    import berds.pyterrier as bpt

    qrels = bpt.qrels(tmp_path / "eval")
    assert (qrels["qid"] == empty).sum() == 1
    ranked = pd.DataFrame([(q, d, float(100 - r)) for q, d, r in ranking], columns=["qid", "docno", "score"])
    table = pt.Experiment([pt.Transformer.from_df(ranked)], bpt.topics(list(run.questions.values())), qrels,
                          eval_metrics=[bpt.MRecall @ 5, bpt.BERDS_P @ 10], names=["run"], validate="ignore")
    assert table.iloc[0]["MRecall@5"] == pytest.approx(overall["mrecall@5"])
    assert table.iloc[0]["BERDS_P@10"] == pytest.approx(overall["precision@10"])
