"""Reports, comparisons and analyses probed as an IR researcher would: analysis files that name a run alike, results
of different judges, runs of other question sets, and a judge that often answers neither Yes nor No."""

from __future__ import annotations

import json

import pytest

from berds.evaluate.analyses.leaning import LeaningResult
from berds.evaluate.analyses.results import load_result, save_result
from berds.evaluate.report import build_report
from berds.runs import save_run
from berds.types import Question, Run
from conftest import make_run
from judges_for_tests import OverlapJudge
from test_tables_80 import headers  # noqa: F401 (a fixture)


def lean(run: str, counts: tuple[int, int, int, int], judge: str | None = "judge-a") -> LeaningResult:
    cats = dict(zip(("supporting only", "opposing only", "both", "neither"), counts))
    return LeaningResult(5, [{"run": run, "questions": sum(counts), **cats, "no_stance": 0}], {run: {}}, judge)


def test_two_leaning_files_naming_a_run_alike_keep_their_own_numbers(tmp_path):
    # the merged table looked each row up by run name: the second file's "bm25" showed the first one's shares
    a = save_result(lean("bm25", (4, 0, 0, 0)), tmp_path / "a.json")
    b = save_result(lean("bm25", (0, 0, 0, 4)), tmp_path / "b.json")
    build_report([], None, tmp_path / "r", analyses=[a, b])
    rows = (tmp_path / "r" / "leaning.csv").read_text().splitlines()[1:]
    assert rows == ["bm25,4,100.0,0.0,0.0,0.0,0", "bm25#2,4,0.0,0.0,0.0,100.0,0"]


def test_analyses_record_their_judge_and_results_of_two_judges_are_never_one_table(tmp_path):
    from berds.evaluate.analyses.coverage import analyze_coverage
    from berds.evaluate.analyses.docs_needed import analyze_docs_needed

    folder = save_run(make_run(n_questions=2, depth=4, name="bm25"), tmp_path / "bm25")
    cache = tmp_path / "j.sqlite"
    cov = analyze_coverage([str(folder)], "judges_for_tests:OverlapJudge", depth=4, cache_path=cache)
    needed = analyze_docs_needed([str(folder)], "judges_for_tests:OverlapJudge", depth=4, cache_path=cache)
    assert cov.judge == needed.judge == OverlapJudge().id
    assert load_result(save_result(cov, tmp_path / "cov.json")).judge == cov.judge
    # leaning of one run by two judges: two tables, each saying whose numbers it holds
    a = save_result(lean("bm25", (4, 0, 0, 0), "judge-a"), tmp_path / "a.json")
    b = save_result(lean("dense", (0, 0, 0, 4), "judge-b"), tmp_path / "b.json")
    old = tmp_path / "old.json"  # written before results recorded their judge
    old.write_text(json.dumps({"analysis": "leaning", "version": 1, "k": 5, "rows": lean("x", (1, 1, 1, 1)).rows}))
    build_report([], None, tmp_path / "r", analyses=[a, b, old])
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.count("## Leaning") == 3 and (tmp_path / "r" / "leaning-3.csv").exists()
    assert "Judge: `judge-a`." in md and "Judge: `judge-b`." in md and "Judge: not recorded" in md
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"analysis": "leaning", "k": 5, "judge": 3, "rows": lean("x", (1, 1, 1, 1)).rows}))
    with pytest.raises(Exception, match="bad.json: .*'judge' must be a judge id or null"):
        load_result(bad)


def test_leaning_refuses_runs_whose_question_ids_mean_other_questions(tmp_path):
    # a stance is a perspective's position: run b lists q0's perspectives the other way round, so one stances file
    # would call the opposing side "supporting" in one of the two runs
    from berds.errors import BerdsError
    from berds.evaluate.analyses.leaning import analyze_leaning

    run = make_run(n_questions=1, depth=4, name="a")
    q = run.questions["q0"]
    swapped = Run({"q0": Question("q0", q.text, tuple(reversed(q.perspectives)), q.dataset)}, run.hits, {}, "b")
    stances = tmp_path / "stances.jsonl"
    stances.write_text('{"id": "q0", "supporting": 0}\n')
    paths = [str(save_run(run, tmp_path / "a")), str(save_run(swapped, tmp_path / "b"))]
    with pytest.raises(BerdsError, match="another order in runs 'a' and 'b', and a stance names a perspective by"):
        analyze_leaning(paths, "judges_for_tests:OverlapJudge", stances=str(stances), k=4,
                        cache_path=str(tmp_path / "j.sqlite"))


def test_compare_takes_allow_unparsed_as_its_refusal_says(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    base = make_run(n_questions=2, depth=5, name="base")
    a = save_run(base, tmp_path / "base")
    b = save_run(Run(base.questions, {q: list(reversed(h)) for q, h in base.hits.items()}, {}, "rev"), tmp_path / "rev")
    args = ["compare", str(a), str(b), "--judge", "judges_for_tests:HalfUnparsedJudge", "--k", "5", "--resamples",
            "200", "--cache", str(tmp_path / "j.sqlite"), "-q"]
    refused = CliRunner().invoke(app, args)
    assert "pass --allow-unparsed" in str(refused.exception)  # (main() turns it into one line and exit 2)
    allowed = CliRunner().invoke(app, [*args, "--allow-unparsed"])
    assert allowed.exit_code == 0, allowed.output
    assert "paired comparison against base" in allowed.output


def test_a_report_made_again_into_its_folder_drops_the_tables_it_no_longer_has(tmp_path):
    # the old compare.* and leaning-2.* stayed beside the new report as if they belonged to it
    a = save_result(lean("bm25", (4, 0, 0, 0), "judge-a"), tmp_path / "a.json")
    b = save_result(lean("dense", (0, 0, 0, 4), "judge-b"), tmp_path / "b.json")
    out = tmp_path / "r"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    build_report([], None, out, analyses=[a, b])
    assert (out / "leaning-2.csv").exists()
    build_report([], None, out, analyses=[a])
    assert not (out / "leaning-2.csv").exists() and not (out / "leaning-2.png").exists()
    assert (out / "leaning.csv").exists() and (out / "notes.md").read_text() == "mine"


def test_runs_named_alike_are_told_apart_by_their_folders_as_eval_does(tmp_path):
    # compare, report and analyze labelled them 'bm25' and 'bm25#2', which does not say which run is which
    from berds.evaluate.analyses.coverage import analyze_coverage

    run = make_run(n_questions=2, depth=4, name="bm25")
    paths = [str(save_run(run, tmp_path / side / "bm25")) for side in ("wiki", "web")]
    result = analyze_coverage(paths, "judges_for_tests:OverlapJudge", depth=4, cache_path=str(tmp_path / "j.sqlite"))
    assert [r["run"] for r in result.rows] == ["wiki-bm25", "web-bm25", "union of 2 runs"]


def test_a_question_too_short_for_depth_or_curve_depth_names_that_option(tmp_path):
    # the refusal said "k=5 ... use a smaller --k" to `analyze docs-needed --depth 5` and `report --k 2 --curve-depth 5`
    from berds.errors import InputError
    from berds.evaluate.analyses.docs_needed import analyze_docs_needed

    folder = save_run(make_run(n_questions=2, depth=3, name="short"), tmp_path / "short")
    judge, cache = "judges_for_tests:OverlapJudge", tmp_path / "j.sqlite"
    with pytest.raises(InputError, match=r"run.ctxs.jsonl, line 1, record 'q0': question has 3 passages but --depth 5 "
                                         r"needs 5 — use a smaller --depth"):
        analyze_docs_needed([str(folder)], judge, depth=5, cache_path=cache)
    with pytest.raises(InputError, match="but --curve-depth 5 needs 5 — use a smaller --curve-depth"):
        build_report([folder], judge, tmp_path / "r", ks=(2,), curve_depth=5, cache_path=cache)
    report = build_report([folder], judge, tmp_path / "r", ks=(2,), curve_depth=5, cache_path=cache, allow_short=True)
    assert (report.out / "mrecall_curve.csv").read_text().count("\nshort,") == 5


def test_export_of_a_run_judged_by_two_judges_names_both_evaluations(tmp_path):
    # "holds 2 judgements.jsonl files, expected one" left the user to find them
    from berds.errors import InputError
    from berds.evaluate.qrels import export_qrels

    line = '{"qid": "q0", "docid": "d0", "rank": 1, "perspective": 0, "label": 1}\n'
    for judge in ("judge-a", "judge-b"):
        (tmp_path / "run" / "eval" / judge).mkdir(parents=True)
        (tmp_path / "run" / "eval" / judge / "judgements.jsonl").write_text(line)
    with pytest.raises(InputError, match=r"expected one \(eval/judge-a, eval/judge-b\) — pass the folder of the "
                                         r"evaluation you want, e.g. .*run/eval/judge-a"):
        export_qrels(tmp_path / "run", tmp_path / "q.qrels")
    assert export_qrels(tmp_path / "run" / "eval" / "judge-b", tmp_path / "q.qrels") == 1
    assert (tmp_path / "q.qrels").read_text() == "q0 1 d0 1\n"


def test_coverage_refuses_runs_of_other_questions_before_judging_anything(tmp_path):
    # the refusal came after every passage of every run had been judged
    from berds.errors import BerdsError
    from berds.evaluate.analyses.coverage import analyze_coverage

    log = tmp_path / "judged.log"
    a = save_run(make_run(n_questions=3, depth=4, name="a"), tmp_path / "a")
    b = save_run(make_run(n_questions=2, depth=4, name="b"), tmp_path / "b")
    with pytest.raises(BerdsError, match=r"cover different questions \(only in the first: \['q2'\]"):
        analyze_coverage([str(a), str(b)], OverlapJudge(log=str(log)), depth=4, cache_path=str(tmp_path / "j.sqlite"))
    assert not log.exists()


def test_compare_and_report_baseline_refuse_runs_sharing_no_question_before_judging(tmp_path):
    from berds.errors import BerdsError
    from berds.evaluate.compare import compare_paths

    log = tmp_path / "judged.log"
    run = make_run(n_questions=2, depth=5, name="a")
    other = Run({"x" + q: Question("x" + q, "Another question " + q, v.perspectives, v.dataset)
                 for q, v in run.questions.items()}, {"x" + q: h for q, h in run.hits.items()}, {}, "b")
    paths = [save_run(run, tmp_path / "a"), save_run(other, tmp_path / "b")]
    judge = OverlapJudge(log=str(log))
    with pytest.raises(BerdsError, match="runs 'a' and 'b' share no question"):
        compare_paths(paths, judge, ks=(5,), cache_path=tmp_path / "j.sqlite", n_resamples=200)
    with pytest.raises(BerdsError, match="runs 'a' and 'b' share no question"):
        build_report(paths, judge, tmp_path / "r", ks=(5,), baseline="a", cache_path=tmp_path / "j.sqlite")
    assert not log.exists()


def test_leaning_table_beside_a_long_run_name_fits_80_columns_with_header_words_whole(tmp_path, headers):
    # 'supportin' / 'g only %': the other columns were squeezed for the run name, and the table was cropped
    from test_tables_80 import check, run_80

    run = make_run(n_questions=3, depth=6, name="kialo-test-wikipedia-contriever-mmr0.75")
    folder = save_run(run, tmp_path / run.name)
    stances = tmp_path / "stances.jsonl"
    stances.write_text('{"id": "q0", "supporting": 0}\n{"id": "q2", "supporting": 1}\n')
    output = run_80(["analyze", "leaning", str(folder), "--judge", "judges_for_tests:OverlapJudge", "--stances",
                     str(stances), "--k", "5", "--cache", str(tmp_path / "j.sqlite"), "-q"], headers)
    check(output, headers, "analyze leaning")


def test_a_metric_column_with_significance_marks_stays_right_aligned():
    from berds.evaluate.report import markdown_table

    assert markdown_table(["run", "MRecall@5"], [["a", "100.0*"], ["b", "0.0"]]).splitlines()[1] == "| :--- | ---: |"


def test_docs_needed_groups_each_run_by_its_own_datasets(tmp_path):
    # the datasets of all runs were pooled by question id: run a's rows took run b's dataset names
    from berds.evaluate.analyses.docs_needed import analyze_docs_needed

    a = make_run(n_questions=2, depth=4, name="a")
    b = Run({q: Question(q, "Other " + v.text, v.perspectives, "delphi-" + v.dataset) for q, v in a.questions.items()},
            a.hits, {}, "b")
    paths = [str(save_run(a, tmp_path / "a")), str(save_run(b, tmp_path / "b"))]
    result = analyze_docs_needed(paths, "judges_for_tests:OverlapJudge", depth=4, cache_path=str(tmp_path / "j.sqlite"))
    assert [(r["run"], r["dataset"]) for r in result.rows] == [
        ("a", "all"), ("a", "arguana"), ("a", "kialo"), ("b", "all"), ("b", "delphi-arguana"), ("b", "delphi-kialo")]


@pytest.mark.parametrize("kind, row, message", [
    ("leaning", {"run": "a", "questions": 5, "supporting only": 1, "opposing only": 1, "both": 1, "neither": 0,
                 "no_stance": 0}, "row 1: the four categories hold 3 questions but 'questions' is 5"),
    ("docs-needed", {"run": "a", "dataset": "all", "questions": 4, "covered": 3, "covered_share": 1.0, "mean": 2.0,
                     "median": 2.0}, "row 1: 'covered' \\(3\\) and 'covered_share' \\(1.0\\) disagree"),
])
def test_a_result_whose_counts_do_not_add_up_is_refused(tmp_path, kind, row, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"analysis": kind, "k": 5, "depth": 5, "rows": [row]}))
    with pytest.raises(Exception, match=f"bad.json: .*{message}"):
        load_result(path)


def _exported(tmp_path, ids: tuple[str, ...]) -> str:
    """The TREC run `berds export run` writes for a one-question jsonl whose passages have these ids, no scores."""
    from typer.testing import CliRunner

    from berds.cli import app

    ctxs = [{"id": d, "text": f"passage {d}"} for d in ids]
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"id": "q0", "question": "Q?", "perspectives": ["p", "o"], "ctxs": ctxs}) + "\n")
    result = CliRunner().invoke(app, ["export", "run", str(run), "--out", str(tmp_path / "run.trec")])
    assert result.exit_code == 0, result.output
    return (tmp_path / "run.trec").read_text()


def test_export_run_writes_the_ranking_berds_judges_for_trec_tools(tmp_path):
    # a jsonl without scores has every score 0.0; TREC tools order tied passages by docid (z1, m1, a1), so qrels
    # exported from its evaluation could not be paired with it in ranx or trec_eval. `export run` writes the order
    # berds judged.
    import ir_measures

    assert _exported(tmp_path, ("a1", "z1", "m1")) == "q0 Q0 a1 1 3.0 run\nq0 Q0 z1 2 2.0 run\nq0 Q0 m1 3 1.0 run\n"
    qrels = [ir_measures.Qrel("q0", "a1", 1), ir_measures.Qrel("q0", "z1", 0), ir_measures.Qrel("q0", "m1", 0)]
    p1 = ir_measures.calc_aggregate([ir_measures.P @ 1], qrels, ir_measures.read_trec_run(str(tmp_path / "run.trec")))
    assert p1[ir_measures.P @ 1] == 1.0


def test_export_run_writes_a_repeated_passage_once_at_its_first_rank(tmp_path):
    # a bare jsonl with a repeat was refused ("remove the repeat from the file"), though eval judges it with
    # --duplicates keep and export_run promises to write the passage once, at its first rank
    assert _exported(tmp_path, ("a1", "a1", "z1")) == "q0 Q0 a1 1 3.0 run\nq0 Q0 z1 2 1.0 run\n"


def test_report_baseline_without_runs_to_compare_is_refused(tmp_path):
    from berds.errors import BerdsError

    saved = save_result(lean("bm25", (1, 1, 1, 1)), tmp_path / "a.json")
    with pytest.raises(BerdsError, match="--baseline .* give the baseline and at least one more run"):
        build_report([], None, tmp_path / "r", analyses=[saved], baseline="bm25")


def test_a_sycophancy_result_missing_its_document_counts_is_refused_by_row_and_field(tmp_path):
    # the report ended in KeyError: 'docs' (the table and figure print the counts)
    path = tmp_path / "syc.json"
    row = {"label": "a", "query": "question", "p": 10.0, "n": 5.0, "delta": 0.5}
    path.write_text(json.dumps({"analysis": "sycophancy", "k": 5, "rows": [row]}))
    with pytest.raises(Exception, match="syc.json: malformed sycophancy result: row 1: 'docs', 'p_docs', 'n_docs', 'questions' must be whole"):
        load_result(path)
    path.write_text(json.dumps({"analysis": "sycophancy", "k": 5, "rows": [
        {**row, "p_docs": 9, "n_docs": 1, "docs": 5, "questions": 1}]}))
    with pytest.raises(Exception, match="row 1: p_docs=9 and n_docs=1 must be among its docs=5"):
        load_result(path)


def test_compare_csv_holds_one_number_per_cell(tmp_path):
    # the interval was one text cell, "[-100.0, +100.0]"
    import csv

    from berds.evaluate.compare import Comparison, CompareResult
    from berds.evaluate.report import write_compare

    c = Comparison("b", "a", "mrecall@5", 3, 1 / 3, 2 / 3, 1 / 3, -1.0, 1.0, 1.0, 1.0, False, "BCa")
    write_compare(CompareResult("a", [c], judge_id="j", ks=(5,)), tmp_path)
    rows = list(csv.DictReader((tmp_path / "compare.csv").open()))
    assert rows == [{"run": "b", "metric": "mrecall@5", "questions": "3", "baseline %": "33.3", "run %": "66.7",
                     "Δ (points)": "33.3", "95% CI low": "-100.0", "95% CI high": "100.0", "p": "1.0000",
                     "p (Holm)": "1.0000", "significant (α=0.05)": "no", "CI method": "BCa"}]
    assert "| b | mrecall@5 | 3 | 33.3 | 66.7 | +33.3 | [-100.0, +100.0] |" in (tmp_path / "compare.md").read_text()
