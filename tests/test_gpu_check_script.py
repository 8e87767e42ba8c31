"""The GPU check script (benchmarks/gpu_check.py) must keep working on machines that rarely see it run: its
dry run (--device cpu: the CPU path against itself) goes through every section except the MiniLM ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_dry_run_reports_every_section_as_passed(tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert len(results) == 7  # the machine and the six checks that need no MiniLM folder
    assert all(figures["ok"] for figures in results.values()), results
    llm = next(v for k, v in results.items() if k.startswith("transformers LLM"))
    assert llm["texts_equal"] and llm["lora_changes_the_answers"]


def test_gpu_check_without_a_gpu_says_so_and_exits_2(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "no CUDA GPU visible" in done.stderr
