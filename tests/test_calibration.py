"""Calibration of P(Yes): reliability tables, ECE and thresholds checked by hand; P(Yes) from real
token log-probabilities (tiny transformers model, and over HTTP from the server process); thresholds stored
by judge id and used by ``calibrated:NAME``."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from berds.errors import BerdsError, InputError
from berds.judges import LLMJudge, load_judge
from berds.judges.threshold import CalibrationStore, ThresholdJudge
from berds.judges.base import id_number
from berds.trust.calibration import (
    brier_score, calibrate, choose_threshold, expected_calibration_error, maximum_calibration_error, objective_curve,
    reliability_table, threshold_candidates,
)
from berds.trust.labels import read_labelled_pairs
from berds.types import JudgePair, Verdict
from conftest import berds_cmd, subprocess_env
from judge_trust_fixtures import pair_hash, served, write_demo_subset
from judge_trust_fixtures import embedded_judge, embedded_small  # noqa: F401  (pytest fixtures)
from llm_fixtures import tiny_mistral  # noqa: F401  (a pytest fixture)

# ----------------------------------------------------------------------------------- by hand


def test_reliability_ece_mce_and_brier_on_a_tiny_table():
    p, gold = [0.1, 0.1, 0.9, 0.9, 0.9], [0, 1, 1, 1, 0]
    bins = reliability_table(p, gold, n_bins=10)
    assert len(bins) == 10 and [b.count for b in bins] == [0, 2, 0, 0, 0, 0, 0, 0, 0, 3]
    assert bins[1].mean_p == pytest.approx(0.1) and bins[1].observed == 0.5 and bins[1].gap == pytest.approx(0.4)
    assert bins[9].observed == pytest.approx(2 / 3)
    # ECE = 2/5 * |0.5 - 0.1| + 3/5 * |2/3 - 0.9| = 0.16 + 0.14
    assert expected_calibration_error(p, gold) == pytest.approx(0.30)
    assert maximum_calibration_error(p, gold) == pytest.approx(0.4)
    assert brier_score(p, gold) == pytest.approx((0.01 + 0.81 + 0.01 + 0.01 + 0.81) / 5)
    # a perfectly calibrated table has ECE 0
    assert expected_calibration_error([0.25] * 4 + [0.75] * 4, [1, 0, 0, 0, 1, 1, 1, 0]) == pytest.approx(0.0)


def test_bin_edges_are_closed_on_the_left_and_the_last_bin_includes_one():
    counts = [b.count for b in reliability_table([0.0, 0.1, 0.3, 0.7, 0.9, 1.0], [0] * 6, n_bins=10)]
    assert counts == [1, 1, 0, 1, 0, 0, 0, 1, 0, 2]
    quantile = reliability_table([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], n_bins=2, strategy="quantile")
    assert [(b.lo, b.hi, b.count, b.observed) for b in quantile] == [(0.0, 0.25, 2, 0.0), (0.25, 1.0, 2, 1.0)]
    with pytest.raises(ValueError, match="probabilities in"):
        reliability_table([0.5, float("nan")], [0, 1])
    with pytest.raises(BerdsError, match="unknown binning"):
        reliability_table([0.5], [1], strategy="log")


def test_threshold_choice_by_hand_including_the_tie_rule():
    p, gold = [0.2, 0.4, 0.6, 0.8], [0, 1, 0, 1]
    assert threshold_candidates(p).tolist() == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])
    # F1 at 0.1, 0.3, 0.5, 0.7, 0.9 = 4/6, 4/5, 2/4, 2/3, 0
    assert objective_curve(p, gold, [0.1, 0.3, 0.5, 0.7, 0.9], "f1").tolist() == pytest.approx([4 / 6, 0.8, 0.5, 2 / 3, 0.0])
    best = choose_threshold(p, gold, objective="f1")
    assert (best.threshold, best.value) == (pytest.approx(0.3), pytest.approx(0.8))
    # accuracy: 0.3 and 0.7 tie at 0.75, both 0.2 from 0.5 -> the lower one
    assert choose_threshold(p, gold, objective="accuracy").threshold == pytest.approx(0.3)
    assert choose_threshold(p, gold, objective="youden").value == pytest.approx(0.5)


def test_objective_curve_matches_a_direct_computation():
    rng = np.random.default_rng(0)
    p, gold = rng.random(300).round(2), rng.random(300) < 0.3
    ts = threshold_candidates(p)
    for objective in ("f1", "accuracy", "youden"):
        direct = []
        for t in ts:
            y = p >= t
            tp, fp, fn, tn = (gold & y).sum(), (~gold & y).sum(), (gold & ~y).sum(), (~gold & ~y).sum()
            direct.append({"f1": 2 * tp / max(2 * tp + fp + fn, 1), "accuracy": (tp + tn) / 300,
                           "youden": tp / (tp + fn) + tn / (tn + fp) - 1}[objective])
        assert objective_curve(p, gold, ts, objective) == pytest.approx(direct)


# ----------------------------------------------------------------------------------- store and wrapper


def test_store_round_trip_and_errors(tmp_path):
    store = CalibrationStore(tmp_path / "calibration.json")
    with pytest.raises(BerdsError, match=r"no calibration stored for judge 'j1' .* run `berds judge calibrate"):
        store.threshold_for("j1")
    store.put({"judge_id": "j1", "prompt_version": "v1", "threshold": 0.42})
    store.put({"judge_id": "j2", "prompt_version": "v1", "threshold": 0.7})
    assert CalibrationStore(tmp_path / "calibration.json").threshold_for("j1", "v1") == 0.42
    assert sorted(store.records()) == ["j1", "j2"]
    with pytest.raises(BerdsError, match="calibrated with prompt 'v1' but now uses 'v2'"):
        store.threshold_for("j1", "v2")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="other.json: not a berds calibration file"):
        CalibrationStore(tmp_path / "other.json").get("j1")


def test_threshold_judge_relabels_by_p_yes():
    from judges_for_tests import OverlapJudge

    inner = OverlapJudge(threshold=0.5)
    pairs = [JudgePair("bike lanes safer streets", "bike lanes"), JudgePair("bike lanes safer streets", "nothing")]
    judge = ThresholdJudge(inner, 0.4)
    assert [v.label for v in judge.judge(pairs)] == [True, False]  # 0.5 >= 0.4, 0.0 < 0.4
    assert [v.label for v in ThresholdJudge(inner, 0.6).judge(pairs)] == [False, False]
    assert judge.id == f"{inner.id}|calibrated-threshold=0.4" and judge.prompt_version == inner.prompt_version

    class NoProbability:
        id, prompt_version = "np", "v"

        def judge(self, pairs):
            return [Verdict(True) for _ in pairs]

    (v,) = ThresholdJudge(NoProbability(), 0.9).judge(pairs[:1])
    assert v.label is True and v.detail == {"no_p_yes": True}
    with pytest.raises(BerdsError, match=r"threshold must be a number in \[0, 1\]"):
        ThresholdJudge(inner, 1.5)


# ----------------------------------------------------------------------------------- real backends


@pytest.fixture(scope="module")
def dev_path(tmp_path_factory):
    return write_demo_subset(tmp_path_factory.mktemp("dev") / "dev.tsv")


@pytest.fixture(scope="module")
def holdout_path(tmp_path_factory):
    return write_demo_subset(tmp_path_factory.mktemp("holdout") / "holdout.tsv", ("demo-05", "demo-06"))


@pytest.fixture(scope="module")
def overconfident_server(dev_path, holdout_path, tmp_path_factory):
    """The scripted judge, wrong on 25% of pairs but always 80% sure (P(Yes) is 0.8 or 0.2), served over HTTP.
    Its truth table covers the dev and the held-out pairs."""
    both = tmp_path_factory.mktemp("both") / "both.tsv"
    dev_lines = dev_path.read_text().splitlines()
    both.write_text("\n".join(dev_lines + holdout_path.read_text().splitlines()[1:]) + "\n")
    with served("judge_trust_fixtures:ScriptedJudgeLLM", str(both), options=["errors=0.25", "confidence=0.8"],
                extra_args=["--served-model-name", "scripted"], log_dir=tmp_path_factory.mktemp("server")) as url:
        yield url


@pytest.mark.network
def test_calibrate_over_http_matches_the_hand_computed_ece_and_feeds_calibrated_judges(
        dev_path, holdout_path, overconfident_server, tmp_path):
    from berds.llm.openai_backend import OpenAILLM

    dev, held = read_labelled_pairs(dev_path), read_labelled_pairs(holdout_path)
    judge = LLMJudge(OpenAILLM("scripted", base_url=overconfident_server, concurrency=8))
    store = CalibrationStore(tmp_path / "calibration.json")
    result = calibrate(dev, judge, holdout=held, store=store, progress=False)

    gold = dev.labels
    wrong = np.array([pair_hash(p.perspective, p.document, "errors") < 0.25 for p in dev])
    said_yes = gold != wrong
    assert result.n_scored == len(dev)  # every answer came with log-probabilities over HTTP
    # P(Yes) = 0.8 for the Yes answers, 0.2 for the No answers
    ece = (said_yes.sum() / len(dev)) * abs(gold[said_yes].mean() - 0.8) + \
          ((~said_yes).sum() / len(dev)) * abs(gold[~said_yes].mean() - 0.2)
    assert result.ece == pytest.approx(ece)
    assert [b.count for b in result.bins if b.count] == [int((~said_yes).sum()), int(said_yes.sum())]
    assert result.threshold.threshold == pytest.approx(0.5)  # the midpoint between its only two scores
    assert result.dev_at_threshold == result.dev_default
    assert result.holdout_default is not None and 0 < result.holdout_ece < 1

    record = store.get(judge.id)
    assert record["threshold"] == pytest.approx(0.5) and record["dev"]["sha256"] == dev.sha256
    calibrated = load_judge("calibrated:openai:scripted", base_url=overconfident_server,
                            calibration=str(store.path))
    assert isinstance(calibrated, ThresholdJudge) and calibrated.threshold == pytest.approx(0.5)
    assert calibrated.id == f"{judge.id}|calibrated-threshold=0.5"


@pytest.mark.network
def test_cli_calibrate_then_eval_with_the_calibrated_judge(dev_path, overconfident_server, tmp_path):
    from berds.runs import save_run
    from berds.types import Hit, Passage, Question, Run

    env = subprocess_env()
    cache = tmp_path / "cache.sqlite"
    out = tmp_path / "calibration-report.json"
    proc = subprocess.run(berds_cmd("judge", "calibrate", "--labels", str(dev_path), "--judge", "openai:scripted",
                                    "-o", f"base_url={overconfident_server}", "--objective", "accuracy",
                                    "--cache", str(cache), "--out", str(out), "-q"),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    store = Path(os.environ["BERDS_HOME"]) / "calibration.json"  # the default place
    assert report["store"] == str(store) and report["objective"] == "accuracy"
    assert len(report["reliability"]) == 10
    assert "use --judge calibrated:openai:scripted" in proc.stdout.replace("\n", "")

    dev = read_labelled_pairs(dev_path)
    q = Question("q1", dev.pairs[0].question, (dev.pairs[0].perspective,))
    run = Run.from_lists([q], [[Hit(Passage(f"p{i}", p.document), 5.0 - i) for i, p in enumerate(dev.pairs[:6:2])]],
                         name="tiny")
    run_dir = save_run(run, tmp_path / "run")
    proc = subprocess.run(berds_cmd("eval", str(run_dir), "--judge", "calibrated:openai:scripted", "--k", "3",
                                    "-o", f"base_url={overconfident_server}", "--cache", str(cache), "-q"),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["judge"]["id"].endswith(f"|calibrated-threshold={id_number(report['threshold'])}")


def test_p_yes_of_a_tiny_transformers_judge_is_the_renormalised_first_token_softmax(dev_path, tiny_mistral):
    torch = pytest.importorskip("torch")
    from berds.llm.transformers_backend import TransformersLLM

    dev = read_labelled_pairs(dev_path).subset(range(0, 176, 40))  # 5 pairs
    llm = TransformersLLM(str(tiny_mistral), device="cpu", batch_size=8)
    vocab = llm.tokenizer.get_vocab()
    judge = LLMJudge(llm, top_logprobs=len(vocab), max_new_tokens=2)
    result = calibrate(dev, judge, n_bins=5, progress=False)
    assert result.n_scored == len(dev)
    verdicts = judge.judge(dev.judge_pairs())
    yes_ids = [i for t, i in vocab.items() if t.replace("▁", "").lower() == "yes"]
    no_ids = [i for t, i in vocab.items() if t.replace("▁", "").lower() == "no"]
    for pair, verdict in zip(dev.judge_pairs(), verdicts):
        text = llm.render(judge.render(pair))  # the prompt as sent (a Mistral: no system turn, as in the study)
        ids = llm.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            probs = torch.softmax(llm.model(input_ids=ids).logits[0, -1].float(), dim=-1)
        yes, no = float(probs[yes_ids].sum()), float(probs[no_ids].sum())
        assert verdict.p_yes == pytest.approx(yes / (yes + no), rel=1e-3)
    assert 0.0 <= result.ece <= 1.0 and math.isfinite(result.brier)


def test_calibrate_the_embedded_judge_and_load_it_calibrated(embedded_judge, embedded_small, tmp_path):
    small, cache = embedded_small
    store = CalibrationStore(tmp_path / "calibration.json")
    result = calibrate(small, embedded_judge, cache=cache, store=store, objective="accuracy", progress=False)
    p = np.array([v.p_yes for v in cache.get_many(embedded_judge.id, embedded_judge.prompt_version, small.judge_pairs())])
    assert result.n_scored == len(small) and sum(b.count for b in result.bins) == len(small)
    assert result.ece == pytest.approx(expected_calibration_error(p, small.labels))
    best = choose_threshold(p, small.labels, objective="accuracy")
    assert result.threshold.threshold == best.threshold
    assert result.dev_at_threshold["accuracy"] == pytest.approx(best.value)
    judge = load_judge("calibrated:embedded", calibration=str(store.path))
    assert isinstance(judge, ThresholdJudge) and judge.threshold == pytest.approx(best.threshold)
    assert judge.id == f"{embedded_judge.id}|calibrated-threshold={id_number(best.threshold)}"


def test_calibrating_a_judge_without_p_yes_says_what_is_needed(dev_path):
    class LabelsOnly:
        id, prompt_version = "labels-only", "v"

        def judge(self, pairs):
            return [Verdict(True) for _ in pairs]

    with pytest.raises(BerdsError, match=r"reported no P\(Yes\) for any of the 176 pairs .* needs log-probabilities"):
        calibrate(read_labelled_pairs(dev_path), LabelsOnly(), progress=False)


def test_a_held_out_file_sharing_pairs_with_the_dev_file_is_named_not_held_out(tmp_path):
    # the held-out rows were printed as held out whatever the file held, the dev rows at the tuned threshold were
    # not marked in-sample, and the held-out ECE the docs quote was printed nowhere
    from rich.console import Console

    from berds.trust.calibration import threshold_rich_table
    from berds.trust.labels import LabelledPair, write_labelled_pairs

    class Scorer:
        id, prompt_version = "scorer", "v1"

        def judge(self, pairs):
            return [Verdict(p.passage.endswith("yes"), 0.8 if p.passage.endswith("yes") else 0.3) for p in pairs]

    def pairs(questions):
        return [LabelledPair(f"q{q}?", f"{q}-{i}", f"doc {q} {i} " + ("yes" if i % 2 else "no"), f"p{q}", i % 3 == 1)
                for q in questions for i in range(4)]

    write_labelled_pairs(tmp_path / "dev.tsv", pairs([0, 1]))
    write_labelled_pairs(tmp_path / "mixed.tsv", pairs([1, 2]))  # question 1's 4 pairs are dev pairs
    write_labelled_pairs(tmp_path / "new.tsv", pairs([3]))
    dev = read_labelled_pairs(tmp_path / "dev.tsv")

    def caption(holdout):
        result = calibrate(dev, Scorer(), holdout=read_labelled_pairs(tmp_path / holdout), progress=False)
        console = Console(width=300, record=True)
        console.print(threshold_rich_table(result))
        return result, " ".join(console.export_text().split())

    mixed, text = caption("mixed.tsv")
    assert mixed.holdout_labels["pairs_in_dev"] == 4 and mixed.holdout_labels["questions_in_dev"] == 1
    assert "dev rows at the threshold are in-sample" in text
    assert f"held-out: 8 pairs, ECE {mixed.holdout_ece:.3f} (8 with P(Yes))" in text
    assert "NOT held out: 4 of its pairs and 1 of its questions are in the dev file" in text
    fresh, text = caption("new.tsv")
    assert fresh.holdout_labels["pairs_in_dev"] == 0 and "NOT held out" not in text
