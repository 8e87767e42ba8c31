"""Judge validity against human labels: statistics checked by hand, the labelled-file reader, and judges
run through real backends (a scripted judge LLM behind the real OpenAI-compatible server process)."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.judges.llm_judge import LLMJudge
from berds.types import Verdict
from berds.trust.labels import LabelledPair, infer_stances, read_labelled_pairs, write_labelled_pairs
from berds.trust.validate import (
    bootstrap_intervals, classification_metrics, cohen_kappa, confusion_counts, mcnemar, mcnemar_paired,
    validate,
)
from conftest import berds_cmd, subprocess_env
from judge_trust_fixtures import ScriptedJudgeLLM, pair_hash, served, write_demo_subset

# ----------------------------------------------------------------------------------- statistics by hand


def test_metrics_and_kappa_match_a_hand_computed_table():
    gold = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    pred = [1, 1, 0, 1, 0, 0, 0, 0, 0, 0]
    assert confusion_counts(gold, pred) == (2, 1, 1, 6)
    m = classification_metrics(gold, pred)
    assert m["accuracy"] == pytest.approx(0.8)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["positive_share"] == pytest.approx(0.3)
    # p_o = 0.8, p_e = 0.3*0.3 + 0.7*0.7 = 0.58 -> kappa = 0.22 / 0.42
    assert m["kappa"] == pytest.approx(0.22 / 0.42)
    assert cohen_kappa(pred, gold) == pytest.approx(0.22 / 0.42)  # symmetric


def test_degenerate_cases_are_defined():
    m = classification_metrics([0, 0, 0], [0, 0, 0])
    assert m["accuracy"] == 1.0 and m["precision"] == 0.0 and m["recall"] == 0.0 and m["f1"] == 0.0
    assert math.isnan(m["kappa"])  # p_e = 1: kappa undefined
    assert cohen_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="4 labels but pred has 3"):
        confusion_counts([1, 0, 1, 0], [1, 0, 1])


def test_mcnemar_exact_and_chi_square_by_hand():
    r = mcnemar(1, 9)
    assert r.exact_p == pytest.approx(2 * (1 + 10) / 1024)          # 2 * P(X <= 1), X ~ Bin(10, 1/2)
    assert r.chi2 == pytest.approx((8 - 1) ** 2 / 10)                 # (|b - c| - 1)^2 / (b + c)
    assert r.chi2_p == pytest.approx(math.erfc(math.sqrt(4.9 / 2)))  # = 0.02686...
    assert r.chi2_p == pytest.approx(0.026857, abs=1e-6)
    assert mcnemar(0, 0).exact_p == 1.0 and mcnemar(5, 5).exact_p == 1.0 and mcnemar(5, 5).chi2 == 0.0
    assert mcnemar(0, 6).exact_p == pytest.approx(2 / 64)
    assert mcnemar(3000, 3300).exact_p < 1e-3  # big n: exact integer arithmetic, no overflow
    paired = mcnemar_paired([1, 1, 0, 0, 1], [1, 0, 1, 1, 1])
    assert (paired.b, paired.c) == (1, 2)


def test_bootstrap_interval_agrees_with_the_normal_approximation():
    rng = np.random.default_rng(3)
    gold = rng.random(400) < 0.5
    pred = np.where(rng.random(400) < 0.8, gold, ~gold)
    acc = float((pred == gold).mean())
    lo, hi = bootstrap_intervals(gold, pred, n_boot=4000, seed=1)["accuracy"]
    half = 1.96 * math.sqrt(acc * (1 - acc) / 400)
    assert lo < acc < hi
    assert lo == pytest.approx(acc - half, abs=0.01) and hi == pytest.approx(acc + half, abs=0.01)
    again = bootstrap_intervals(gold, pred, n_boot=4000, seed=1)
    assert again["accuracy"] == (lo, hi)  # seeded: reproducible
    # ten times the data -> an interval about sqrt(10) times narrower
    wide = bootstrap_intervals(np.tile(gold, 10), np.tile(pred, 10), n_boot=2000, seed=1)["accuracy"]
    assert (wide[1] - wide[0]) == pytest.approx((hi - lo) / math.sqrt(10), rel=0.2)



def _one_draw_intervals(gold, pred, n_boot, seed, groups=None):
    """The bootstrap as first written: every resample drawn at once (the figures in the docs came from this)."""
    from berds.trust.validate import _metrics_from_counts

    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, gold.size, size=(n_boot, gold.size))
        gs, ps = gold[idx], pred[idx]
        counts = ((gs & ps).sum(1), (~gs & ps).sum(1), (gs & ~ps).sum(1), (~gs & ~ps).sum(1))
    else:
        _, code = np.unique(np.asarray(groups).astype(str), return_inverse=True)
        per = np.stack([np.bincount(code, weights=m, minlength=code.max() + 1)
                        for m in (gold & pred, ~gold & pred, gold & ~pred, ~gold & ~pred)], axis=1)
        counts = per[rng.integers(0, code.max() + 1, size=(n_boot, code.max() + 1))].sum(1).T
    tail = 100 * (1 - 0.95) / 2
    return {k: (float(np.percentile(v[~np.isnan(v)], tail)), float(np.percentile(v[~np.isnan(v)], 100 - tail)))
            for k, v in _metrics_from_counts(*counts).items()}


@pytest.mark.parametrize("block", [1 << 20, 1000, 7])
def test_resamples_drawn_in_blocks_give_the_intervals_of_one_draw(monkeypatch, block):
    import berds.trust.validate as validate_module

    monkeypatch.setattr(validate_module, "_BLOCK", block)
    rng = np.random.default_rng(5)
    gold, pred = rng.random(163) < 0.2, rng.random(163) < 0.25
    groups = rng.integers(0, 10, 163)
    assert bootstrap_intervals(gold, pred, n_boot=999, seed=4) == _one_draw_intervals(gold, pred, 999, 4)
    assert bootstrap_intervals(gold, pred, n_boot=999, seed=4, groups=groups) == \
        _one_draw_intervals(gold, pred, 999, 4, groups)


def test_the_bootstrap_memory_does_not_grow_with_resamples_times_pairs():
    # 100,000 resamples of 3,000 pairs held 3.5 GB (every resample's indices at once)
    import tracemalloc

    rng = np.random.default_rng(1)
    gold, pred = rng.random(3000) < 0.3, rng.random(3000) < 0.3
    tracemalloc.start()
    try:
        bootstrap_intervals(gold, pred, n_boot=10_000, seed=0)
        bootstrap_intervals(gold, pred, n_boot=10_000, seed=0, groups=np.arange(3000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20, f"peak {peak / 2**20:.0f} MiB"  # (one draw: 240 MiB of indices alone)


def test_question_bootstrap_with_one_pair_per_question_is_the_pair_bootstrap():
    rng = np.random.default_rng(5)
    gold = rng.random(60) < 0.3
    pred = np.where(rng.random(60) < 0.75, gold, ~gold)
    groups = [f"q{i:03d}" for i in range(60)]  # sorted labels = pair order, so both draw the same indices
    assert bootstrap_intervals(gold, pred, n_boot=500, seed=2, groups=groups) == \
        bootstrap_intervals(gold, pred, n_boot=500, seed=2)


def test_question_bootstrap_sees_correlated_errors_that_pair_resampling_hides():
    # two questions of 50 pairs: the judge gets every pair of one right and every pair of the other wrong
    gold = np.tile([True, False], 50)
    pred = np.concatenate([gold[:50], ~gold[50:]])
    groups = ["a"] * 50 + ["b"] * 50
    by_pair = bootstrap_intervals(gold, pred, n_boot=2000, seed=0)["accuracy"]
    by_question = bootstrap_intervals(gold, pred, n_boot=2000, seed=0, groups=groups)["accuracy"]
    assert 0.35 < by_pair[0] < 0.5 < by_pair[1] < 0.65
    assert by_question == (0.0, 1.0)  # a resample can hold question a twice, or b twice
    with pytest.raises(ValueError, match="groups has 3 labels but there are 100 pairs"):
        bootstrap_intervals(gold, pred, groups=["a", "b", "c"])


def test_validate_resamples_questions_when_asked(tmp_path):
    class YesJudge:
        id, prompt_version, name = "yes-to-all", "v1", "yes"

        def judge(self, pairs):
            return [Verdict(True, 1.0, "Yes") for _ in pairs]

    # 3 questions x 4 pairs; the judge answers Yes to everything
    rows = [LabelledPair(f"question {q}?", f"{q}-{i}", f"document {q} {i}", f"perspective {i}", (q + i) % 3 == 0)
            for q in range(3) for i in range(4)]
    path = tmp_path / "pairs.tsv"
    write_labelled_pairs(path, rows)
    labelled = read_labelled_pairs(path)
    judge = YesJudge()
    report = validate(labelled, [judge], n_boot=200, resample="questions", progress=False)
    assert report.to_json()["bootstrap"]["resample"] == "questions" and report.questions == 3
    (row,) = report.judges
    expected = bootstrap_intervals(labelled.labels, np.ones(12, dtype=bool), n_boot=200, seed=0,
                                   groups=[p.question for p in labelled])
    assert row.intervals == expected
    with pytest.raises(BerdsError, match="resample must be one of pairs, questions"):
        validate(labelled, [judge], resample="judges", progress=False)


# ----------------------------------------------------------------------------------- the labelled file

HEADER = "question\tid\tdocument\tperspective\tlabel\n"


def test_reader_keeps_quoted_fields_and_line_numbers(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text(
        HEADER
        + 'Q1?\t1\t"a document with a\ttab and\na newline"\tP one.\t1\n'
        + "Q1?\t2\tplain document\tP two.\t0\n"
        + "\n"
        + 'Q2?\t3\t"He said ""no"" twice"\tP three.\t0\n',
        encoding="utf-8",
    )
    s = read_labelled_pairs(path)
    assert [p.line for p in s] == [2, 4, 6]
    assert s.pairs[0].document == "a document with a\ttab and\na newline"
    assert s.pairs[2].document == 'He said "no" twice'
    assert s.labels.tolist() == [True, False, False]
    assert len(s.sha256) == 64
    again = tmp_path / "again.tsv"
    write_labelled_pairs(again, s.pairs)
    assert [(p.document, p.perspective, p.label) for p in read_labelled_pairs(again)] == \
        [(p.document, p.perspective, p.label) for p in s]


@pytest.mark.parametrize("body, message", [
    ("question\tid\tdocument\tlabel\nq\t1\td\t1\n", r"line 1: header lacks column\(s\) perspective"),
    (HEADER + "q\t1\td\tp\t1\nq\t2\td\tp\n", r"line 3: expected 5 tab-separated fields .* found 4"),
    (HEADER + "q\t1\td\tp\t1\nq\t2\td\tp\tyes\n", r"line 3, record '2': label must be 0 or 1, got 'yes'"),
    (HEADER + "q\t1\t \tp\t1\n", r"line 2, record '1': empty 'document'"),
    (HEADER.replace("label\n", "label\tstance\n") + "q\t1\td\tp\t1\tmaybe\n", r"line 2, record '1': unknown stance 'maybe'"),
    ("", r"the file is empty"),
    (HEADER, r"header but no labelled rows"),
])
def test_reader_errors_name_the_file_and_line(tmp_path, body, message):
    path = tmp_path / "bad.tsv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(InputError, match=message) as info:
        read_labelled_pairs(path)
    assert str(path) in str(info.value)


def test_reader_rejects_bytes_that_are_not_utf8_with_the_line(tmp_path):
    path = tmp_path / "latin.tsv"
    path.write_bytes(HEADER.encode() + b"q\t1\tcaf\xe9\tp\t1\n")
    with pytest.raises(InputError, match=r"line 2: not UTF-8"):
        read_labelled_pairs(path)
    with pytest.raises(InputError, match="file not found"):
        read_labelled_pairs(tmp_path / "missing.tsv")


def test_negation_cue_stances():
    def pair(q, p):
        return LabelledPair(q, "1", "doc", p, True)

    pairs = [pair("Q?", "X leads to Y."), pair("Q?", "X does not lead to Y."), pair("Q?", "X leads to Y."),
             pair("R?", "A is good."), pair("R?", "B is good."),                         # neither negated
             pair("S?", "one"), pair("S?", "two"), pair("S?", "three isn't")]            # three perspectives
    assert infer_stances(pairs) == ["support", "oppose", "support", None, None, None, None, None]


# ----------------------------------------------------------------------------------- judges side by side


@pytest.fixture(scope="module")
def labelled_path(tmp_path_factory):
    return write_demo_subset(tmp_path_factory.mktemp("labels") / "pairs.tsv")


@pytest.fixture(scope="module")
def noisy_server(labelled_path, tmp_path_factory):
    """The scripted judge LLM with 20% of its answers wrong, behind the real OpenAI-compatible server."""
    with served("judge_trust_fixtures:ScriptedJudgeLLM", str(labelled_path), options=["errors=0.2"],
                extra_args=["--served-model-name", "scripted"], log_dir=tmp_path_factory.mktemp("server")) as url:
        yield url


def expected_noisy_labels(labelled, rate=0.2):
    return np.array([p.label != (pair_hash(p.perspective, p.document, "errors") < rate) for p in labelled], dtype=bool)


@pytest.mark.network
def test_validate_two_judges_through_the_server_and_in_process(labelled_path, noisy_server):
    from berds.evaluate.cache import JudgementCache
    from berds.llm.openai_backend import OpenAILLM

    labelled = read_labelled_pairs(labelled_path)
    noisy = LLMJudge(OpenAILLM("scripted", base_url=noisy_server, concurrency=4))
    exact = LLMJudge(ScriptedJudgeLLM(str(labelled_path)))
    with JudgementCache(labelled_path.parent / "cache.sqlite") as cache:
        report = validate(labelled, {"noisy": noisy, "exact": exact}, cache=cache, n_boot=300, progress=False)
        assert cache.count(noisy.id) == len(labelled)  # every answer went into the cache

    gold, pred = labelled.labels, expected_noisy_labels(labelled)
    assert 0 < (pred != gold).sum() < len(gold)
    rows = {r.name: r for r in report.judges}
    assert rows["exact"].metrics["accuracy"] == 1.0 and rows["exact"].metrics["kappa"] == 1.0
    assert rows["noisy"].predictions.tolist() == pred.tolist()
    assert rows["noisy"].counts == {"tp": int((gold & pred).sum()), "fp": int((~gold & pred).sum()),
                                    "fn": int((gold & ~pred).sum()), "tn": int((~gold & ~pred).sum())}
    assert rows["noisy"].metrics["accuracy"] == pytest.approx((pred == gold).mean())
    lo, hi = rows["noisy"].intervals["f1"]
    assert lo <= rows["noisy"].metrics["f1"] <= hi
    (cmp,) = report.comparisons
    assert cmp.agreement == pytest.approx((pred == gold).mean())
    # McNemar on correctness: the exact judge is right wherever the noisy one is wrong, never the reverse
    assert (cmp.mcnemar.b, cmp.mcnemar.c) == (0, int((pred != gold).sum()))
    assert cmp.mcnemar.exact_p < 1e-6
    assert report.gold_positive_share == pytest.approx(gold.mean())


@pytest.mark.network
def test_cli_validate_with_an_annotator_column(labelled_path, noisy_server, tmp_path):
    # a second "annotator" who disagrees with the gold label on every 7th pair
    labelled = read_labelled_pairs(labelled_path)
    second = [p.label if i % 7 else not p.label for i, p in enumerate(labelled)]
    pairs = [LabelledPair(p.question, p.id, p.document, p.perspective, p.label, p.stance, p.line,
                          {"label2": "1" if s else "0"}) for p, s in zip(labelled, second)]
    path = tmp_path / "two-annotators.tsv"
    write_labelled_pairs(path, pairs)
    out = tmp_path / "report.json"
    proc = subprocess.run(
        berds_cmd("judge", "validate", "--labels", str(path), "--judge", "openai:scripted", "-o", f"base_url={noisy_server}",
                  "--column", "label2", "--bootstrap", "200", "--out", str(out), "--cache", str(tmp_path / "c.sqlite"), "-q",
                  "--markdown"),
        capture_output=True, text=True, env=subprocess_env(), timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    judge_row, column_row = report["judges"]
    assert column_row["name"] == "column:label2"
    gold = labelled.labels
    assert column_row["metrics"]["accuracy"] == pytest.approx(np.mean(np.array(second) == gold))
    assert judge_row["metrics"]["accuracy"] == pytest.approx((expected_noisy_labels(labelled) == gold).mean())
    assert report["comparisons"][0]["first"] == "openai:scripted"
    assert "| openai:scripted |" in proc.stdout  # the markdown table for READMEs


def test_cli_validate_reports_a_bad_file_on_one_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text(HEADER + "q\t1\td\tp\t2\n", encoding="utf-8")
    proc = subprocess.run(berds_cmd("judge", "validate", "--labels", str(path), "--judge", "embedded"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert proc.returncode == 2
    assert f"{path}, line 2, record '1': label must be 0 or 1, got '2'" in proc.stderr.replace("\n", "")
    assert "Traceback" not in proc.stderr


def test_resamples_where_kappa_is_undefined_are_counted_and_said():
    """A small file with few Yes: some resamples hold only pairs both raters call No, where κ is 0/0. They were
    dropped from the interval without a word."""
    from berds.trust.validate import ValidationReport, score_predictions, undefined_resample_notes

    gold = np.array([1, 0, 0, 0, 0, 0], dtype=bool)
    pred = np.array([1, 1, 0, 0, 0, 0], dtype=bool)
    row = score_predictions("j", gold, pred, n_boot=400, seed=0)
    # κ is 0/0 where both raters give one same answer throughout: a resample of the 4 pairs both call No only,
    # P = (4/6)^6 ≈ 0.088: about 35 of 400
    assert 15 < row.undefined_resamples["kappa"] < 65 and row.resamples == 400
    assert "precision" not in row.undefined_resamples or row.undefined_resamples["precision"] < 400
    report = ValidationReport("x.tsv", "0" * 64, 6, 1 / 6, [row], [], 400, 0)
    [note] = [n for n in undefined_resample_notes(report) if "kappa in" in n]
    assert f"kappa in {row.undefined_resamples['kappa']} of 400" in note and "other resamples only" in note
    assert row.to_json()["ci95_undefined_resamples"]["kappa"] == row.undefined_resamples["kappa"]
    full = score_predictions("k", np.array([1, 0] * 30, dtype=bool), np.array([1, 0] * 30, dtype=bool), n_boot=200)
    assert full.undefined_resamples == {} and "ci95_undefined_resamples" not in full.to_json()
