"""Shared fixtures: tiny questions and runs written by the tests themselves."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).parent

# The suite is the CPU suite CI runs: on a GPU machine, models that pick "cuda when available" would run there in
# bfloat16 and answer otherwise than the CPU references the tests compare with. GPUs are hidden from the tests
# (and their subprocesses) unless BERDS_TEST_GPU=1; benchmarks/gpu_check.py is the GPU-against-CPU check.
if os.environ.get("BERDS_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from berds.types import Hit, Passage, Question, Run  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own berds home (judgement cache, downloads) and no hub access."""
    home = tmp_path_factory.mktemp("berds-home")
    monkeypatch.setenv("BERDS_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # rich's global console (progress bars use it) keeps the width of the test that made it (COLUMNS=100 in one,
    # 80 in another): each test starts without one
    import rich

    monkeypatch.setattr(rich, "_console", None)
    yield


def make_run(n_questions: int = 3, depth: int = 6, name: str = "tiny") -> Run:
    """Questions about bikes/taxes/phones; passages repeat some perspective words so overlap judges fire."""
    topics = [
        ("Should cities build more bike lanes?", ["bike lanes make streets safer", "bike lanes hurt local shops"]),
        ("Should sugary drinks be taxed?", ["sugar taxes reduce obesity", "sugar taxes burden poor families", "taxes fund health programs"]),
        ("Should phones be banned in schools?", ["phones distract students from learning", "phones help students in emergencies"]),
    ]
    questions, hits = [], []
    for qi in range(n_questions):
        text, persps = topics[qi % len(topics)]
        q = Question(f"q{qi}", text, tuple(persps), dataset="arguana" if qi % 2 == 0 else "kialo")
        rows = []
        for r in range(depth):
            if r % 3 == 0:
                body = f"Evidence shows {persps[r // 3 % len(persps)]} in many places."
            elif r % 3 == 1:
                body = f"An unrelated passage number {r} about gardening and weather."
            else:
                body = f"Both sides agree: {persps[0]}; others note {persps[-1]}."
            rows.append(Hit(Passage(f"d{qi}-{r}", body, title=f"Doc {qi}-{r}"), score=float(depth - r)))
        questions.append(q)
        hits.append(rows)
    return Run.from_lists(questions, hits, manifest={"retriever": {"name": "hand-made"}}, name=name)


@pytest.fixture
def tiny_run() -> Run:
    return make_run()


@pytest.fixture
def ctxs_file(tmp_path, tiny_run) -> Path:
    """A BERDS-format jsonl as the original scripts consume it (int ids, missing scores on purpose)."""
    path = tmp_path / "legacy.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for qid, q in tiny_run.questions.items():
            ctxs = [{"id": i, "title": h.passage.title, "text": h.passage.text} for i, h in enumerate(tiny_run.hits[qid])]
            f.write(json.dumps({"id": qid, "question": q.text, "perspectives": list(q.perspectives), "ctxs": ctxs}) + "\n")
    return path


def default_sigint() -> None:
    """``preexec_fn`` for a child the test interrupts: a suite started in the background by a shell without job
    control inherits SIGINT ignored, and so would the child, which then never sees the Ctrl-C the test sends."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def berds_cmd(*args: str) -> list[str]:
    """Command line running the berds CLI with this interpreter (works without the console script on PATH)."""
    return [sys.executable, "-c", "from berds.cli import main; main()", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env
