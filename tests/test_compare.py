"""Paired comparison with significance (issue 18.4): the exact permutation p-value worked by hand, the bootstrap
interval, Holm across runs, `berds compare`, and `berds report --baseline`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from berds.errors import BerdsError
from berds.evaluate.compare import compare_per_question, holm, paired_difference
from berds.runs import save_run
from berds.types import Hit, Run
from conftest import make_run


def test_exact_permutation_p_value_worked_by_hand():
    # 12 questions; the run gains 1 on four of them and ties on the rest. Under the null each question's pair
    # is swapped with probability 1/2: only the 8 of 2**4 = 16 sign patterns of the four non-zero differences
    # matter, and a mean as extreme as 4/12 (either sign) needs all four to agree: p = 2/16 = 0.125.
    base = np.array([0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1.0])
    run = np.array([1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1.0])
    diff, low, high, p, method = paired_difference(base, run, n_resamples=5000, seed=1)
    assert diff == pytest.approx(4 / 12)
    assert p == pytest.approx(0.125)
    assert 0.0 <= low < diff < high <= 1.0  # a resampled mean of 0/1 differences lies in [0, 1]
    assert method in ("BCa", "percentile")
    # Identical runs: no difference, p = 1, a zero-width interval.
    assert paired_difference(base, base) == (0.0, 0.0, 0.0, 1.0, "all differences equal")
    with pytest.raises(BerdsError, match="equal-length"):
        paired_difference(base, run[:5])


def test_a_clear_difference_on_many_questions_is_significant_and_the_interval_covers_it():
    rng = np.random.default_rng(3)
    base = rng.random(300)
    run = base + 0.05 + rng.normal(0, 0.05, 300)
    diff, low, high, p, _ = paired_difference(base, run, n_resamples=2000, seed=0)
    assert low < 0.05 < high and p < 0.001 and low > 0


def test_holm_matches_its_definition():
    # sorted p: .01, .03, .04 -> ×3, ×2, ×1 = .03, .06, .04 -> monotone: .03, .06, .06
    adjusted, reject = holm([0.01, 0.04, 0.03], 0.05)
    assert adjusted == pytest.approx([0.03, 0.06, 0.06])
    assert reject == [True, False, False]


def test_compare_per_question_applies_holm_per_metric_and_names_the_shared_questions():
    values = {
        "base": {f"q{i}": {"mrecall@5": 0.0, "precision@5": 0.2} for i in range(10)},
        "better": {f"q{i}": {"mrecall@5": 1.0, "precision@5": 0.2} for i in range(10)},
        "same": {f"q{i}": {"mrecall@5": 0.0, "precision@5": 0.2} for i in range(8)},
    }
    comparisons, notes = compare_per_question(values, baseline="base", metrics=["mrecall@5", "precision@5"],
                                              n_resamples=2000)
    by = {(c.run, c.metric): c for c in comparisons}
    better = by[("better", "mrecall@5")]
    # ten gains of 1: exact p = 2 / 2**10; Holm over the two runs doubles the smaller p.
    assert better.p_value == pytest.approx(2 / 1024)
    assert better.p_holm == pytest.approx(min(1.0, 2 * 2 / 1024)) and better.significant
    assert not by[("same", "mrecall@5")].significant and by[("same", "mrecall@5")].questions == 8
    assert any("8 questions" in n for n in notes)
    with pytest.raises(BerdsError, match="unknown baseline"):
        compare_per_question(values, baseline="nope", metrics=["mrecall@5"])


def run_cli(*args: str):
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def shuffled(run: Run, name: str) -> Run:
    """The same passages, the last first (a different top 5 for the overlap judge)."""
    hits = {q: [Hit(h.passage, float(i)) for i, h in enumerate(hs)] for q, hs in run.hits.items()}
    hits = {q: sorted(hs, key=lambda h: -h.score) for q, hs in hits.items()}
    return Run(run.questions, hits, {}, name)


def test_compare_command_and_report_baseline(tmp_path, capsys):
    from berds.cli import main

    base = make_run(n_questions=3, depth=10, name="base")
    a = save_run(base, tmp_path / "base")
    b = save_run(shuffled(base, "other"), tmp_path / "other")
    cache = str(tmp_path / "j.sqlite")
    code, out, err = run_cli("compare", str(a), str(b), "--judge", "judges_for_tests:OverlapJudge", "--k", "5",
                             "--cache", cache, "--resamples", "500", "--out", str(tmp_path / "cmp"), "-q")
    assert code == 0, err
    assert "paired comparison against base" in out
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert saved["baseline"] == "base" and {c["metric"] for c in saved["comparisons"]} == {"mrecall@5", "precision@5"}
    code, out, err = run_cli("report", str(a), str(b), "--judge", "judges_for_tests:OverlapJudge", "--k", "5",
                             "--cache", cache, "--baseline", "base", "--out", str(tmp_path / "report"), "-q")
    assert code == 0, err
    md = (tmp_path / "report" / "report.md").read_text()
    assert "paired comparison against base" in md and "Holm" in md and "Note:" not in md
    assert (tmp_path / "report" / "compare.csv").exists()
    fewer = Run({q: base.questions[q] for q in ("q0", "q1")}, {q: base.hits[q] for q in ("q0", "q1")}, name="fewer")
    code, out, err = run_cli("report", str(a), str(save_run(fewer, tmp_path / "fewer")), "--judge",
                             "judges_for_tests:OverlapJudge", "--k", "5", "--cache", cache, "--baseline", "base",
                             "--out", str(tmp_path / "report2"), "-q")
    assert code == 0, err  # the note on the questions compared reaches the report, not only compare.json
    assert "Note: fewer: compared on the 2 questions it shares with base." in (tmp_path / "report2" / "report.md").read_text()
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(a), "--judge", "judges_for_tests:OverlapJudge"])
    assert exc.value.code == 2 and "at least two runs" in capsys.readouterr().err


def test_report_marks_a_significant_difference(tmp_path):
    from berds.evaluate.report import build_report

    good = make_run(n_questions=12, depth=15, name="good")
    # The same passages with the five off-topic ones first: no perspective in any top 5.
    bad_hits = {q: sorted(hs, key=lambda h: ("unrelated" not in h.passage.text, -h.score))
                for q, hs in good.hits.items()}
    bad_hits = {q: [Hit(h.passage, float(len(hs) - i)) for i, h in enumerate(hs)] for q, hs in bad_hits.items()}
    a = save_run(Run(good.questions, bad_hits, {}, "bad"), tmp_path / "bad")
    b = save_run(good, tmp_path / "good")
    report = build_report([a, b], "judges_for_tests:OverlapJudge", tmp_path / "report", ks=(5,), baseline="bad",
                          cache_path=tmp_path / "j.sqlite")
    rows = [line.split(",") for line in report.files["metrics.csv"].read_text().splitlines()]
    good_all = next(r for r in rows if r[0] == "good" and r[1] == "all")
    bad_all = next(r for r in rows if r[0] == "bad" and r[1] == "all")
    # twelve questions each gain MRecall@5 = 1: exact p = 2/4096, significant after Holm; the mark is in the
    # markdown, the CSV keeps numbers
    assert good_all[3] == "100.0" and bad_all[3] == "0.0"
    md = report.files["metrics.md"].read_text()
    assert "| good | all | 12 | 100.0* |" in md and "| bad | all | 12 | 0.0 |" in md
    assert "| good | all | 12 | 100.0* |" in report.files["report.md"].read_text()


def test_compare_fits_80_columns_takes_a_k_list_and_says_when_questions_differ(tmp_path):
    # the ten-column table cut every header word at 80 columns ('metri c', 'signi fican t'), --k 5,10 was refused
    # (every other command takes comma lists), and runs with different questions were compared on the shared ones
    # without a word on screen
    import re

    from typer.testing import CliRunner

    from berds.cli import app

    a = save_run(make_run(n_questions=3, depth=10, name="bm25"), tmp_path / "bm25")
    b = save_run(shuffled(make_run(n_questions=2, depth=10), "minilm-mmr0.75"), tmp_path / "minilm-mmr0.75")
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--judge", "judges_for_tests:OverlapJudge", "--k",
                                      "5,10", "--resamples", "200", "--cache", str(tmp_path / "j.sqlite"), "-q"],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = " ".join(line for line in lines if line.startswith("┃"))
    for word in ("run", "metric", "base", "Δ", "[CI]", "(Holm)"):
        assert re.search(rf"(^|\s){re.escape(word)}(\s|$)", header.replace("┃", " ")), (word, result.output)
    assert "MRecall@10" in result.output and "Prec@5" in result.output
    assert "note: minilm-mmr0.75: compared on the 2 questions it shares with bm25" in result.output
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--judge", "judges_for_tests:OverlapJudge",
                                      "--alpha", "1.5", "--cache", str(tmp_path / "none.sqlite")])
    assert result.exit_code != 0 and "alpha must be between 0 and 1" in str(result.exception)
    assert not (tmp_path / "none.sqlite").exists()  # refused before any judging


def test_runs_of_two_question_sets_sharing_ids_are_refused_before_judging(tmp_path):
    from dataclasses import replace

    from berds.evaluate.analyses.coverage import analyze_coverage
    from berds.evaluate.compare import compare_paths

    a = make_run(n_questions=2, name="set-a")
    b = make_run(n_questions=2, name="set-b")
    b.questions["q1"] = replace(b.questions["q1"], text="Should homework be abolished?")  # another set's "q1"
    paths = [save_run(a, tmp_path / "a"), save_run(b, tmp_path / "b")]

    class NeverJudge:  # nothing may be judged: the check comes first
        id, prompt_version = "never", "v1"

        def judge(self, pairs):
            raise AssertionError("judged before the question sets were checked")

    message = r"question 'q1' is not the same question in runs 'set-a' and 'set-b' \(the texts differ"
    with pytest.raises(BerdsError, match=message):
        compare_paths(paths, NeverJudge(), ks=(5,), cache_path=tmp_path / "c.sqlite")
    with pytest.raises(BerdsError, match=message):
        analyze_coverage([str(p) for p in paths], NeverJudge(), depth=5, cache_path=str(tmp_path / "c.sqlite"))
    c = make_run(n_questions=2, name="set-c")
    c.questions["q0"] = replace(c.questions["q0"], perspectives=("bike lanes make streets safer",))
    with pytest.raises(BerdsError, match=r"question 'q0' is not the same question .* \(the gold perspectives differ"):
        compare_paths([paths[0], save_run(c, tmp_path / "c")], NeverJudge(), ks=(5,), cache_path=tmp_path / "c.sqlite")


def test_runs_of_one_question_set_are_paired_whatever_their_query_text(tmp_path):
    """The check refused runs of one question set: the sycophancy study's runs (queried with the question, the
    supporting or the opposing perspective, perspectives listed supporting first), exchange-format files without
    question texts (given one numbered by line) in another line order, and texts differing in case or spacing."""
    import json
    from dataclasses import replace

    from berds.evaluate.analyses.common import check_same_question_per_id
    from berds.evaluate.analyses.stance import Stance
    from berds.evaluate.analyses.sycophancy import perspective_queries
    from berds.runs import load_run
    from berds.types import Run

    base = make_run(n_questions=3, depth=4)
    stances = {"q0": Stance("q0", 1, 0, "ok"), "q2": Stance("q2", 0, 1, "ok")}
    study = []
    for query in ("question", "supporting", "opposing"):
        asked = perspective_queries(list(base.questions.values()), stances, query)
        study.append(Run({q.id: q for q in asked}, {q.id: base.hits[q.id] for q in asked}, name=f"query-{query}"))
    check_same_question_per_id(study, [r.name for r in study])
    check_same_question_per_id([base, study[0]], ["base", "query-question"])  # (per-question metrics: any order)
    with pytest.raises(BerdsError, match="lists its gold perspectives in another order"):  # (coverage: row by row)
        check_same_question_per_id([base, study[0]], ["base", "query-question"], ordered=True)
    spaced = Run({q: replace(x, text=f"  {x.text.upper()} ") for q, x in base.questions.items()}, base.hits, name="s")
    check_same_question_per_id([base, spaced], ["base", "s"], ordered=True)

    records = [{"id": f"q{i}", "perspectives": [f"p{i}a", f"p{i}b"], "ctxs": [{"id": f"d{i}", "text": "t", "score": 1.0}]}
               for i in range(3)]
    for name, order in (("a", records), ("b", records[::-1])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in order))
    check_same_question_per_id([load_run(tmp_path / "a.jsonl"), load_run(tmp_path / "b.jsonl")], ["a", "b"])
    other = replace(base.questions["q1"], text="Should homework be abolished?")  # still refused: another set's q1
    with pytest.raises(BerdsError, match="the texts differ"):
        check_same_question_per_id([base, Run({"q1": other}, {"q1": base.hits["q1"]})], ["base", "other"])
