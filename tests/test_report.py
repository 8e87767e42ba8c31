"""Reports: markdown/CSV tables with exact content, PNG figures, MRecall@k curves, merging analysis results,
and `berds report` over runs plus saved analyses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.evaluate.analyses.results import save_result
from berds.evaluate.analyses.coverage import CoverageResult
from berds.evaluate.analyses.docs_needed import DocsNeededResult
from berds.evaluate.analyses.leaning import LeaningResult
from berds.evaluate.analyses.sycophancy import SycophancyResult
from berds.evaluate.report import (
    build_report, csv_text, markdown_table, merge_results, mrecall_curve, plot_curves, plot_leaning,
    plot_sycophancy, write_table,
)
from berds.runs import save_run
from conftest import make_run

PNG = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_markdown_table_aligns_numbers_and_escapes_pipes():
    text = markdown_table(["run", "MRecall@5"], [["bm25 | wiki", "33.3"], ["dense", "n/a"]])
    assert text == ("| run | MRecall@5 |\n| :--- | ---: |\n| bm25 \\| wiki | 33.3 |\n| dense | n/a |\n")


def test_write_table_writes_csv_and_markdown(tmp_path):
    paths = write_table(tmp_path / "t", ["a", "b"], [["x,y", 1], ["z", 2.5]], title="T")
    assert paths["csv"].read_text() == 'a,b\n"x,y",1\nz,2.5\n'
    assert paths["md"].read_text() == "### T\n\n| a | b |\n| :--- | ---: |\n| x,y | 1 |\n| z | 2.5 |\n"
    assert csv_text(["h"], []) == "h\n"


def test_mrecall_curve_by_hand():
    support = {"q1": np.array([[1, 0, 0], [0, 0, 1]], bool), "q2": np.array([[0, 1, 0], [1, 0, 0]], bool)}
    # q1 covers both perspectives at k=3; q2 at k=2; at k=1 each covers one of two (m > k: 1 >= 1 counts).
    assert mrecall_curve(support, 3) == [(1, 1.0), (2, 0.5), (3, 1.0)]


LEANING = LeaningResult(5, [{"run": "bm25", "questions": 4, "supporting only": 2, "opposing only": 1, "both": 1,
                             "neither": 0, "no_stance": 0},
                            {"run": "dense", "questions": 4, "supporting only": 0, "opposing only": 0, "both": 3,
                             "neither": 1, "no_stance": 0}])
def syc_row(label, query, p_docs, n_docs, docs=40):
    return {"label": label, "query": query, "p": 100 * p_docs / docs, "n": 100 * n_docs / docs, "p_docs": p_docs,
            "n_docs": n_docs, "docs": docs, "delta": (p_docs - n_docs) / p_docs if p_docs else None, "questions": 4}


SYC_A = SycophancyResult(10, [syc_row("bm25", "question", 12, 6), syc_row("bm25", "supporting", 14, 4),
                              syc_row("bm25", "opposing", 0, 3)])
SYC_B = SycophancyResult(10, [syc_row("dense", "question", 10, 9), syc_row("dense", "supporting", 11, 8),
                              syc_row("dense", "opposing", 8, 10)])


def test_figures_are_pngs(tmp_path):
    assert png_size(plot_leaning(LEANING, tmp_path / "l.png"))[0] > 300
    assert png_size(plot_sycophancy(SYC_A.merge(SYC_B), tmp_path / "s.png"))[0] > 300
    assert png_size(plot_curves({"a": [(1, 0.1), (2, 0.4)], "b": [(1, 0.2), (2, 0.3)]}, tmp_path / "c.png"))[1] > 200


def test_merge_results_joins_rows_of_the_same_kind_and_depth():
    merged = merge_results([SYC_A, LEANING, SYC_B])
    assert [type(m).__name__ for m in merged] == ["SycophancyResult", "LeaningResult"]
    assert [r["label"] for r in merged[0].rows] == ["bm25"] * 3 + ["dense"] * 3
    other_k = SycophancyResult(5, SYC_B.rows)
    assert len(merge_results([SYC_A, other_k])) == 2
    with pytest.raises(BerdsError, match="k=10 and k=5"):
        SYC_A.merge(other_k)


def test_build_report_over_runs_and_saved_analyses(tmp_path):
    from berds.evaluate.evaluation import evaluate_run
    from judges_for_tests import OverlapJudge

    run_a = make_run(n_questions=3, depth=6, name="alpha")
    base = make_run(n_questions=3, depth=6)
    run_b = type(base)(base.questions, {q: list(reversed(h)) for q, h in base.hits.items()}, {}, "beta")
    paths = [save_run(run_a, tmp_path / "alpha"), save_run(run_b, tmp_path / "beta")]
    analyses = [save_result(SYC_A, tmp_path / "syc-a.json"), save_result(SYC_B, tmp_path / "syc-b.json"),
                save_result(LEANING, tmp_path / "leaning.json"),
                save_result(CoverageResult(100, [{"run": "union of 2 runs", "questions": 3, "mrecall": 2 / 3,
                                                  "perspective_recall": 0.9}]), tmp_path / "cov.json"),
                save_result(DocsNeededResult(100, [{"run": "alpha", "dataset": "all", "questions": 3, "covered": 3,
                                                    "covered_share": 1.0, "mean": 4.0, "median": 4.0}]), tmp_path / "dn.json")]
    out = tmp_path / "report"
    report = build_report(paths, "judges_for_tests:OverlapJudge", out, ks=(2, 4), curve_depth=5, analyses=analyses,
                          cache_path=tmp_path / "j.sqlite")
    names = {p.name for p in report.files.values()}
    assert {"metrics.csv", "metrics.md", "mrecall_curve.csv", "mrecall_curve.png", "sycophancy.png", "leaning.png",
            "coverage.md", "docs-needed.csv", "report.md"} <= names
    # The metrics table holds exactly what evaluate_run computes, in percent with one decimal.
    expected = evaluate_run(run_a, OverlapJudge(), (2, 4), progress=False).averages["all"]
    lines = (out / "metrics.csv").read_text().splitlines()
    assert lines[0] == "run,set,questions,MRecall@2,MRecall@4,Precision@2,Precision@4"
    alpha_all = next(l for l in lines if l.startswith("alpha,all,"))
    assert alpha_all == "alpha,all,3," + ",".join(f"{100 * expected[m]:.1f}" for m in
                                                  ("mrecall@2", "mrecall@4", "precision@2", "precision@4"))
    curve = (out / "mrecall_curve.csv").read_text().splitlines()
    assert len(curve) == 1 + 2 * 5 and curve[1].startswith("alpha,1,")
    md = (out / "report.md").read_text()
    assert "![MRecall@k](mrecall_curve.png)" in md and "![sycophancy](sycophancy.png)" in md
    assert "| bm25 | opposing | 0.0 | 7.5 | n/a | 40 | 4 |" in md  # Δ undefined when p = 0
    assert md.count("Retriever sycophancy") == 1  # the two sycophancy files became one table
    with pytest.raises(BerdsError, match="nothing to report"):
        build_report([], None, tmp_path / "empty")


def test_report_command_with_analyses_only(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    saved = save_result(LEANING, tmp_path / "leaning.json")
    result = CliRunner().invoke(app, ["report", "--analysis", str(saved), "--out", str(tmp_path / "r"), "-q"])
    assert result.exit_code == 0, result.output
    assert png_size(tmp_path / "r" / "leaning.png")[0] > 300
    table = (tmp_path / "r" / "leaning.csv").read_text().splitlines()
    assert table[1] == "bm25,4,50.0,25.0,25.0,0.0,0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"analysis": "nonsense"}))
    result = CliRunner().invoke(app, ["report", "--analysis", str(bad), "--out", str(tmp_path / "r2")])
    assert result.exit_code != 0 and "not a berds analysis result" in str(result.exception)


LEAN_ROW = {"run": "a", "questions": 3, "supporting only": 1, "opposing only": 1, "both": 1, "neither": 0, "no_stance": 0}


@pytest.mark.parametrize("data, message", [
    ({"analysis": "leaning", "k": 5, "rows": ["x"]}, "row 1 is not an object"),
    ({"analysis": "leaning", "k": 5, "rows": [{"run": "a"}]}, "row 1: 'questions' must be a count \\(missing\\)"),
    ({"analysis": "leaning", "k": 5, "rows": [{**LEAN_ROW, "questions": "3"}]}, "'questions' must be a count"),
    ({"analysis": "leaning", "k": 5, "rows": []}, "leaning result has no rows"),
    ({"analysis": "leaning", "k": -5, "rows": [LEAN_ROW]}, "'k' must be a positive integer, got -5"),
    ({"analysis": "coverage", "depth": 5, "rows": [{"run": "a", "questions": 3, "mrecall": float("nan"),
                                                    "perspective_recall": 1.0}]}, "'mrecall' must be a share"),
    ({"analysis": "docs-needed", "depth": 5, "rows": [{"run": "a", "dataset": "all", "questions": 1, "covered": 1,
                                                       "covered_share": 1.0, "mean": "x", "median": None}]},
     "'mean' must be a number or null"),
    ({"analysis": "sycophancy", "k": 5, "rows": [{"label": "a", "query": "question", "p": 1.0, "n": 1.0}]},
     "'delta' must be a number or null \\(missing\\)"),
])
def test_report_refuses_a_damaged_analysis_result_by_row_and_field(tmp_path, data, message):
    # these ended `berds report --analysis` in a KeyError / TypeError / format traceback, or printed nan as a share
    from berds.errors import InputError
    from berds.evaluate.analyses.results import load_result

    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=f"bad.json: .*{message}"):
        load_result(path)
