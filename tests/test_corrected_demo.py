"""The demo's corrected estimates: the demo labels of a seeded random third of the questions as the human sample
(berds/demo.py), on the shipped BM25 run (no Java, no model: the overlap test judge and the demo labels)."""

from __future__ import annotations

import json

import pytest

from berds.demo import corrected_demo, corrected_demo_table, write_human_sample
from berds.evaluate.evaluation import evaluate_paths
from berds.judges.demo_gold import DemoGoldJudge
from berds.questions import DEMO_DIR
from berds.trust.labels import read_labelled_pairs

pytest.importorskip("ppi_py")


def test_the_corrected_mrecall_covers_the_truth(tmp_path):
    from rich.console import Console

    run = tmp_path / "bm25.jsonl"
    run.write_bytes((DEMO_DIR / "run.ctxs.jsonl").read_bytes())
    judged = [r for _, r, _ in evaluate_paths([run], "judges_for_tests:OverlapJudge", ks=(5, 10), progress=False,
                                              use_cache=False, out=tmp_path / "judged")]
    gold = [r for _, r, _ in evaluate_paths([run], DemoGoldJudge(), ks=(5, 10), progress=False, use_cache=False,
                                            out=tmp_path / "gold")]
    sample = write_human_sample(tmp_path / "human-sample.tsv", [run], gold, depth=10, seed=0)
    record = json.loads(sample.with_suffix(".json").read_text())
    assert record["seed"] == 0 and len(record["questions"]) == 4 and record["of"] == 12
    pairs = read_labelled_pairs(sample)
    assert sorted({p.id for p in pairs}) == record["questions"]
    # the same seed draws the same questions; another seed others
    again = write_human_sample(tmp_path / "again.tsv", [run], gold, depth=10, seed=0)
    assert again.read_bytes() == sample.read_bytes()
    other = write_human_sample(tmp_path / "other.tsv", [run], gold, depth=10, seed=1)
    assert json.loads(other.with_suffix(".json").read_text())["questions"] != record["questions"]

    corrected = corrected_demo([run], judged, sample)[0]
    truth = gold[0].averages["all"]
    for metric in ("mrecall@5", "precision@5", "mrecall@10", "precision@10"):
        row = corrected.find(metric)
        assert row.ppi.n == 4 and row.ppi.N == 12
        assert row.ppi.low <= truth[metric] <= row.ppi.high, (metric, row.ppi, truth[metric])
    console = Console(width=80, record=True)
    console.print(corrected_demo_table([corrected], gold, sample, k=5))
    text = console.export_text()
    assert "corrected by the labels of 4 of 12 questions" in " ".join(text.split())
    assert f"{100 * truth['mrecall@5']:.1f}" in text
