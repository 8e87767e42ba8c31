"""A hub model loaded without a pinned commit is named by its repo alone in the judge id, so a repo updated on the
hub (and in the local cache) would have its new verdicts added to the old ones under one id. The judgement cache
records the commit the verdicts came from and refuses to mix. A real Hugging Face cache layout (snapshots and a
``refs/main``) holding tiny models, read offline by transformers through ``berds eval`` in a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from berds.runs import save_run
from conftest import berds_cmd, make_run, subprocess_env
from llm_fixtures import build_tiny_mistral

REPO = "org/tiny-judge"
OLD, NEW = "a" * 40, "b" * 40


def publish(hub: Path, commit: str, seed: int) -> None:
    """Put a snapshot of the tiny model under ``commit`` and point ``refs/main`` at it, as a download does."""
    repo = hub / "models--org--tiny-judge"
    build_tiny_mistral(repo / "snapshots" / commit, seed=seed)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def evaluate(run: Path, cache: Path, hub: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        berds_cmd("eval", str(run), "--judge", f"transformers:{REPO}", "-o", "device=cpu", *options, "--k", "3",
                  "--cache", str(cache), "--allow-unparsed", "-q"),
        capture_output=True, text=True, timeout=300,
        env=subprocess_env(HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))


@pytest.mark.ray
@pytest.mark.slow
def test_verdicts_of_an_updated_hub_repo_are_not_mixed_under_one_id(tmp_path):
    pytest.importorskip("ray")
    hub, cache = tmp_path / "hub", tmp_path / "j.sqlite"
    publish(hub, OLD, seed=0)
    first = save_run(make_run(n_questions=2, depth=3, name="first"), tmp_path / "first")
    done = evaluate(first, cache, hub)
    assert done.returncode == 0, done.stderr

    publish(hub, NEW, seed=1)  # the repo was updated; the local cache now loads the new commit
    more = save_run(make_run(n_questions=3, depth=3, name="more"), tmp_path / "more")  # pairs not cached yet
    refused = evaluate(more, cache, hub)
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert f"{REPO} is now at commit {NEW[:12]}" in message and f"came from commit {OLD[:12]}" in message, message
    assert "-o revision=COMMIT" in message and "Traceback" not in refused.stderr

    # the same on a Ray worker (a local Ray instance): the worker
    # reports the commit it loaded and the driver checks it before writing
    through_engine = evaluate(more, cache, hub, "--engine", "ray")
    assert through_engine.returncode != 0
    assert f"came from commit {OLD[:12]}" in " ".join(through_engine.stderr.split()), through_engine.stderr

    again = evaluate(first, cache, hub)  # fully cached: read back, nothing judged, nothing mixed
    assert again.returncode == 0, again.stderr
    pinned = evaluate(more, cache, hub, "-o", f"revision={NEW}")  # an id naming the commit: judged afresh
    assert pinned.returncode == 0, pinned.stderr


def test_a_local_model_folder_records_nothing(tmp_path):
    from berds.llm.shared import unpinned_hub_weights
    from berds.llm.transformers_backend import TransformersLLM

    folder = build_tiny_mistral(tmp_path / "tiny")
    assert unpinned_hub_weights(TransformersLLM(str(folder))) == {}
