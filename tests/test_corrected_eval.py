"""``berds eval --labels``: human labels matched to a run, the corrected estimates printed and written, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from berds.runs import save_run
from berds.trust.labels import LabelledPair, write_labelled_pairs
from berds.types import Passage
from conftest import make_run

pytest.importorskip("ppi_py")

JUDGE = "judges_for_tests:OverlapJudge"


def human(perspective: str, text: str) -> bool:
    """The 'human' of these tests: a passage supports a perspective when it states it word for word."""
    return perspective in text


def label_rows(run, qids, *, depth=5, title_position="after", only=None):
    """Labelled pairs of every top-``depth`` (perspective, passage) pair of ``qids`` (``only``: a cut to fewer)."""
    rows = []
    for qid in qids:
        q = run.questions[qid]
        texts = Passage.judge_texts([h.passage for h in run.hits[qid][:depth]], title_position)
        for p in q.perspectives:
            for t in texts:
                rows.append(LabelledPair(q.text, qid, t, p, human(p, t)))
    return rows[:only] if only else rows


def labels_of_another_run(path):
    """Labelled pairs of another run's questions (ids "xq0", "xq1"): none matches the run of ``setup``."""
    other = make_run(n_questions=6, depth=6, name="other")
    write_labelled_pairs(path, [LabelledPair(p.question, "x" + p.id, p.document, p.perspective, p.label)
                                for p in label_rows(other, ["q0", "q1"])])
    return path


def cli(*args):
    from typer.testing import CliRunner

    from berds.cli import app

    from berds.errors import BerdsError

    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})
    wide = [line for line in result.stdout.splitlines() if len(line) > 80]
    assert not wide, wide  # every table fits an 80-column terminal
    if isinstance(result.exception, BerdsError):  # what berds.cli.main prints on one line, exiting 2
        assert "\n" not in str(result.exception)
        return 2, result.stdout, result.stderr + f"error: {result.exception}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def setup(tmp_path):
    run = make_run(n_questions=6, depth=6, name="tiny")
    folder = save_run(run, tmp_path / "tiny")
    return run, folder, tmp_path


def test_eval_labels_prints_and_writes_estimates(setup):
    run, folder, tmp = setup
    rows = label_rows(run, ["q0", "q1", "q3", "q4"]) + label_rows(run, ["q2"], only=4)  # q2: partly labelled
    labels = tmp / "labels.tsv"
    write_labelled_pairs(labels, rows)
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", labels)
    assert code == 0, (out, err)
    assert "PPI" in out and "labels only" in out and "4/6" in out
    assert "q2" in err and "partly labelled" in err
    assert "include every run you correct in `berds label sample`" in " ".join(err.split())  # why it matters
    metrics = json.loads((folder / "metrics.json").read_text())
    corrected = metrics["corrected"]
    assert corrected["partly_labelled_questions"] == {"5": ["q2"]}
    assert corrected["labelled_questions"] == {"5": ["q0", "q1", "q3", "q4"]}
    assert corrected["labels"]["matched_pairs"] == len(rows)
    # the estimate by hand: judged mean over all 6 + mean(human - judged) over the 4 labelled
    judged = metrics["per_question"]
    truth = {}
    for qid in ["q0", "q1", "q3", "q4"]:
        q = run.questions[qid]
        texts = Passage.judge_texts([h.passage for h in run.hits[qid][:5]], "after")
        s = np.array([[human(p, t) for t in texts] for p in q.perspectives])
        truth[qid] = float(s.any(axis=1).sum() >= min(len(q.perspectives), 5))
    expected = (np.mean([judged[q]["mrecall@5"] for q in judged])
                + np.mean([truth[q] - judged[q]["mrecall@5"] for q in truth]))
    est = corrected["estimates"]["all"]["mrecall@5"]
    assert est["ppi"]["value"] == pytest.approx(expected)
    assert est["ppi"]["n"] == 4 and est["ppi"]["N"] == 6
    assert est["labels_only"]["value"] == pytest.approx(np.mean(list(truth.values())))
    assert est["judged"] == pytest.approx(metrics["averages"]["all"]["mrecall@5"])
    # two datasets (arguana / kialo): per dataset and macro, too
    assert set(corrected["estimates"]) == {"all", "arguana", "kialo", "macro"}
    # the judge's own folder has them as well
    inner = next((folder / "eval").iterdir()) / "metrics.json"
    assert json.loads(inner.read_text())["corrected"]["estimates"] == corrected["estimates"]
    # labels of the top 5 at k=6: no question is whole there, and the note says to label deeper
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5,6", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", labels, "--out", tmp / "deeper")
    assert code == 0, (out, err)
    assert "none is whole at k=6: label the top 6 (`berds label sample --k 6`)" in " ".join(err.split())


def test_labels_of_another_run_are_refused(setup, tmp_path):
    run, folder, tmp = setup
    labels = labels_of_another_run(tmp / "other.tsv")
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", labels)
    assert code == 2 and "none of its" in err and "matches run" in err and "Traceback" not in err
    assert not (folder / "metrics.json").exists()  # refused before any judging


def test_labels_of_other_passage_text_are_refused(setup):
    """Labels made on the text the judge saw with --title-position before do not match an 'after' evaluation."""
    run, folder, tmp = setup
    labels = tmp / "before.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1"], title_position="before"))
    code, _, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                       "--labels", labels)
    assert code == 2 and "title-position" in err
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", labels, "--title-position", "before", "--out", tmp / "before-eval")
    assert code == 0, err
    assert "2/6" in out


def test_a_pair_labelled_twice_differently_names_both_lines(setup):
    run, folder, tmp = setup
    rows = label_rows(run, ["q0"])
    flipped = LabelledPair(rows[3].question, rows[3].id, rows[3].document, rows[3].perspective, not rows[3].label)
    labels = tmp / "twice.tsv"
    write_labelled_pairs(labels, [*rows, flipped])
    code, _, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                       "--labels", labels)
    # header on line 1: rows[3] is on line 5, the copy on the last line
    assert code == 2 and "line 5" in err and f"line {len(rows) + 2}" in err
    assert not (folder / "metrics.json").exists()  # refused before any judging


def test_no_whole_question_labelled(setup):
    run, folder, tmp = setup
    labels = tmp / "part.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0"], only=3) + label_rows(run, ["q1"], only=2))
    code, _, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                       "--labels", labels)
    assert code == 2 and "no question of run" in err and "q0" in err and "q1" in err
    assert not (folder / "metrics.json").exists()  # refused before any judging


def test_labels_for_questions_the_run_lacks_are_reported(setup):
    run, folder, tmp = setup
    bigger = make_run(n_questions=8, depth=6, name="tiny")
    labels = tmp / "more.tsv"
    write_labelled_pairs(labels, label_rows(bigger, ["q0", "q1", "q2", "q7"]))
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", labels)
    assert code == 0, err
    n7 = len(label_rows(bigger, ["q7"]))
    assert f"{n7} labelled pair(s) are for questions the run does not have" in err
    assert json.loads((folder / "metrics.json").read_text())["corrected"]["labels"]["unmatched_pairs"] == {
        "questions": n7, "pairs": 0, "deeper": 0}
    # labels drawn at k=6 for an evaluation at k=5: the rank-6 pairs are named as deeper ranks, not as strangers
    deep = tmp / "deep.tsv"
    write_labelled_pairs(deep, label_rows(run, ["q0", "q1", "q2"], depth=6))
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", deep)
    assert code == 0, err
    n6 = len(label_rows(run, ["q0", "q1", "q2"], depth=6)) - len(label_rows(run, ["q0", "q1", "q2"]))
    assert f"{n6} of them for passages it ranks below that" in " ".join(err.split())
    assert json.loads((folder / "metrics.json").read_text())["corrected"]["labels"]["unmatched_pairs"] == {
        "questions": 0, "pairs": n6, "deeper": n6}


def test_bad_population_refused_before_judging(setup):
    run, folder, tmp = setup
    labels = tmp / "l.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1"]))
    code, _, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                       "--labels", labels, "--population", "all")
    assert code == 2 and "--population" in err
    assert not (folder / "metrics.json").exists()


def test_compare_labels_gives_each_run_and_the_paired_difference(setup):
    from berds.runs import Run

    run, folder, tmp = setup
    # a second run: the same questions, each ranking reversed
    other = Run(run.questions, {q: list(reversed(h)) for q, h in run.hits.items()}, run.manifest, "reversed")
    other_folder = save_run(other, tmp / "reversed")
    labels = tmp / "both.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1", "q3", "q4"]) + label_rows(other, ["q0", "q1", "q3", "q4"]))
    code, out, err = cli("compare", folder, other_folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite",
                         "-q", "--labels", labels, "--out", tmp / "cmp", "--resamples", "200")
    assert code == 0, (out, err)
    assert "reversed − tiny" in " ".join(out.split())
    saved = json.loads((tmp / "cmp" / "corrected.json").read_text())["runs"]
    by_run = {c["run"]: c["estimates"]["all"] for c in saved}
    assert set(by_run) == {"tiny", "reversed", "reversed − tiny"}
    for metric in ("mrecall@5", "precision@5"):
        diff = by_run["reversed − tiny"][metric]
        # the same labelled questions for both: the estimator is linear, so the difference of the estimates
        assert diff["ppi"]["value"] == pytest.approx(by_run["reversed"][metric]["ppi"]["value"]
                                                     - by_run["tiny"][metric]["ppi"]["value"])
        assert diff["judged"] == pytest.approx(by_run["reversed"][metric]["judged"] - by_run["tiny"][metric]["judged"])
        assert diff["ppi"]["n"] == 4 and -1 <= diff["ppi"]["ci95"][0] <= diff["ppi"]["ci95"][1] <= 1
    # the same comparison again into the same folder without --labels: no stale corrected tables beside it
    code, out, err = cli("compare", folder, other_folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite",
                         "-q", "--out", tmp / "cmp", "--resamples", "200")
    assert code == 0, (out, err)
    assert (tmp / "cmp" / "compare.json").exists()
    assert not any((tmp / "cmp" / f"corrected.{ext}").exists() for ext in ("json", "md", "csv"))


def test_report_labels_writes_corrected_tables(setup):
    run, folder, tmp = setup
    labels = tmp / "l.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1", "q3"]))
    code, out, err = cli("report", folder, "--judge", JUDGE, "--k", "5", "--out", tmp / "report", "--cache",
                         tmp / "c.sqlite", "-q", "--labels", labels, "--html")
    assert code == 0, (out, err)
    saved = json.loads((tmp / "report" / "corrected.json").read_text())["runs"]
    page = (tmp / "report" / "report.html").read_text()  # the page's leaderboard carries the same estimates
    data = json.loads(page.split('<script type="application/json" id="berds-data">', 1)[1].split("</script>", 1)[0])
    shown = data["runs"][0]["corrected"]["MRecall@5"]
    assert shown["n"] == 3 and shown["mean"] == pytest.approx(saved[0]["estimates"]["all"]["mrecall@5"]["ppi"]["value"])
    assert [c["run"] for c in saved] == ["tiny"]  # no --baseline: no differences
    assert saved[0]["estimates"]["all"]["mrecall@5"]["ppi"]["n"] == 3
    csv = (tmp / "report" / "corrected.csv").read_text().splitlines()
    assert csv[0].startswith("run,metric,set,judged,PPI") and len(csv) == 1 + 2 * 4  # 2 metrics x all/2 sets/macro
    # report.md, the report itself, shows them (it used to name only the judged figures)
    md = (tmp / "report" / "report.md").read_text()
    assert "## Corrected estimates" in md and "[corrected.csv](corrected.csv)" in md
    assert "| tiny | mrecall@5 | all | " in md
    # the same report made again without --labels takes its corrected tables away (they no longer belong to it)
    code, out, err = cli("report", folder, "--judge", JUDGE, "--k", "5", "--out", tmp / "report", "--cache",
                         tmp / "c.sqlite", "-q")
    assert code == 0, (out, err)
    assert not any((tmp / "report" / f"corrected.{ext}").exists() for ext in ("json", "md", "csv"))
    assert "Corrected" not in (tmp / "report" / "report.md").read_text()
    code, _, err = cli("report", "--out", tmp / "r2", "--labels", labels)
    assert code == 2 and "name the runs" in err


def test_runs_given_as_objects_with_names_and_a_baseline_label(setup):
    """What `study diversify --labels` does with its test runs (Run objects named by the study's row labels)."""
    from berds.runs import Run
    from berds.trust.ppi import corrected_runs

    run, folder, tmp = setup
    other = Run(run.questions, {q: list(reversed(h)) for q, h in run.hits.items()}, run.manifest, "x")
    labels = tmp / "both.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1", "q3"]) + label_rows(other, ["q0", "q1", "q3"]))
    corrected = corrected_runs([run, other], JUDGE, labels, ks=(5,), names=["base run", "mmr"], baseline="base run",
                               cache_path=tmp / "c.sqlite")
    assert [c.run for c in corrected] == ["base run", "mmr", "mmr − base run"]
    assert corrected[2].find("mrecall@5").ppi.n == 3


def test_options_without_labels_are_refused(setup):
    run, folder, tmp = setup
    for command in (["eval", folder], ["compare", folder, folder], ["report", folder, "--out", tmp / "r"]):
        code, _, err = cli(*command, "--judge", JUDGE, "--population", "superpopulation", "--cache", tmp / "c.sqlite")
        assert code == 2 and "give --labels too" in err, command
    code, _, err = cli("eval", "--from-predictions", folder / "run.ctxs.jsonl", "--k", "5", "--labels", tmp / "x.tsv")
    assert code == 2 and "--from-predictions" in err


def test_superpopulation_and_tuned_lambda_through_eval(setup):
    run, folder, tmp = setup
    labels = tmp / "l.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1", "q3", "q4"]))
    code, out, err = cli("eval", folder, "--judge", JUDGE, "--k", "5", "--cache", tmp / "c.sqlite", "-q",
                         "--labels", labels, "--population", "superpopulation", "--ppi-lambda", "tuned")
    assert code == 0, err
    corrected = json.loads((folder / "metrics.json").read_text())["corrected"]
    assert corrected["population"] == "superpopulation" and corrected["lambda"] == "tuned"
    assert "questions like these" in " ".join(out.split())
    for row in corrected["estimates"].values():
        for metric in row.values():
            assert all(math.isfinite(x) for x in [metric["ppi"]["value"], *metric["ppi"]["ci95"]])


def test_labels_sampled_under_one_judge_correct_another(setup):
    """Human labels do not depend on the judge: a sample drawn from one judge's evaluation corrects another judge
    of the same run; the labels-only estimate is the same for both, the PPI estimates use each judge's values."""
    run, folder, tmp = setup
    labels = tmp / "l.tsv"
    write_labelled_pairs(labels, label_rows(run, ["q0", "q1", "q3", "q4"]))
    estimates = {}
    for threshold in ("0.5", "1.5"):  # (1.5: a judge that never says Yes)
        out = tmp / f"t{threshold}"
        # (a judge with no Yes at all is flagged as broken: accepted here, it is the point of the test)
        accept = ["--allow-unparsed"] if threshold == "1.5" else []
        code, _, err = cli("eval", folder, "--judge", JUDGE, "--judge-option", f"threshold={threshold}", "--k", "5",
                           "--cache", tmp / "c.sqlite", "-q", "--labels", labels, "--out", out, *accept)
        assert code == 0, err
        estimates[threshold] = json.loads((out / "metrics.json").read_text())["corrected"]["estimates"]["all"]
    for metric in ("mrecall@5", "precision@5"):
        assert estimates["0.5"][metric]["labels_only"] == estimates["1.5"][metric]["labels_only"]
        assert estimates["0.5"][metric]["ppi"]["n"] == estimates["1.5"][metric]["ppi"]["n"] == 4
    assert estimates["0.5"]["precision@5"]["judged"] != estimates["1.5"]["precision@5"]["judged"]


def test_compare_refuses_labels_of_another_run_before_judging(setup):
    run, folder, tmp = setup
    labels = labels_of_another_run(tmp / "other.tsv")
    code, _, err = cli("compare", folder, folder, "--judge", JUDGE, "--cache", tmp / "never.sqlite", "-q",
                       "--labels", labels)
    assert code == 2 and "none of its" in err
    assert not (tmp / "never.sqlite").exists()  # no judging started: the cache was never opened
