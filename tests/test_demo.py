"""`berds demo`: the whole pipeline on the shipped demo data, and the demo-gold judge."""

import pytest

from berds.questions import DEMO_DIR
from berds.demo import DemoGoldJudge, run_demo
from berds.errors import BerdsError
from berds.runs import load_run
from berds.types import JudgePair


def test_shipped_demo_run_is_a_valid_berds_jsonl():
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    assert len(run) == 12 and all(len(h) == 20 for h in run.hits.values())


def test_demo_gold_judge_knows_only_demo_passages():
    judge = DemoGoldJudge()
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    q = run.questions["demo-01"]
    verdicts = judge.judge([JudgePair(p, h.passage.judge_text()) for h in run.hits["demo-01"] for p in q.perspectives])
    assert any(v.label for v in verdicts) and not all(v.label for v in verdicts)
    with pytest.raises(BerdsError, match="only knows the demo corpus"):
        judge.judge([JudgePair(q.perspectives[0], "a passage that is not in the demo corpus")])


@pytest.mark.slow
@pytest.mark.java
def test_whole_pipeline_on_demo_data(tmp_path, capfd):
    results = run_demo(tmp_path / "demo", judge="judges_for_tests:OverlapJudge", ks=(5, 10), progress=False)
    assert "Loading weights" not in "".join(capfd.readouterr())  # model loads are quiet (each load, not globally)
    names = [r.run_name for r in results["judge"]]
    assert names == ["bm25", "minilm", "minilm-mmr0.75"]
    truth = {r.run_name: r.averages["all"] for r in results["gold"]}
    for metrics in truth.values():
        assert 0.0 < metrics["mrecall@10"] <= 1.0 and 0.0 < metrics["precision@5"] <= 1.0
    for sub in ("corpus", "indexes/bm25/meta.json", "indexes/minilm/meta.json", "runs/bm25/run.trec",
                "runs/minilm-mmr0.75/manifest.json", "judgements.sqlite"):
        assert (tmp_path / "demo" / sub).exists(), sub
    # a second run reuses everything: the overlap judge is answered from the cache
    again = run_demo(tmp_path / "demo", judge="judges_for_tests:OverlapJudge", ks=(5, 10), progress=False, gold=False)
    assert all(r.stats.judged == 0 for r in again["judge"])
    assert [r.per_question for r in again["judge"]] == [r.per_question for r in results["judge"]]
    # it ends by saying where its outputs are and what to run next: each command works as printed
    import shlex

    from berds.cli import main
    from berds.demo import next_steps

    lines = next_steps(tmp_path / "demo", "judges_for_tests:OverlapJudge", names)
    assert any("Outputs" in line and "judgements.sqlite" in line for line in lines)
    commands = [shlex.split(line.split("#")[0]) for line in lines if line.strip().startswith("berds ")]
    assert [c[1] for c in commands] == ["report", "retrieve", "import"]
    for command in commands:
        try:
            main(command[1:] + ["-q"])
        except SystemExit as exc:
            assert not exc.code, command


def test_bad_demo_options_fail_before_anything_is_built(tmp_path):
    from berds.demo import run_demo
    from berds.errors import BerdsError

    with pytest.raises(BerdsError, match="unknown judge 'nosuch'"):
        run_demo(tmp_path / "a", judge="nosuch", progress=False)
    with pytest.raises(BerdsError, match="λ must be between 0 and 1, got 2"):
        run_demo(tmp_path / "b", mmr_lambda=2.0, progress=False)
    with pytest.raises(BerdsError, match="between 1 and the demo's depth 20"):
        run_demo(tmp_path / "c", ks=(5, 50), progress=False)
    assert not any(tmp_path.iterdir())  # nothing was built
