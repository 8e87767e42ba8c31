"""The console entry point: usage errors are a short message and exit status 2, never a traceback."""

import subprocess

import pytest

from conftest import berds_cmd


@pytest.mark.parametrize(
    "args, expected",
    [
        (["eval", "run.jsonl", "--k", "abc"], "Invalid value for '--k'"),
        (["eval"], "name at least one run folder"),
        (["no-such-command"], "No such command 'no-such-command'"),
    ],
)
def test_usage_errors_are_one_message_not_a_traceback(args, expected):
    done = subprocess.run(berds_cmd(*args), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert expected in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_cache_info_on_a_missing_file_says_so_and_creates_nothing(tmp_path):
    from conftest import subprocess_env

    missing = tmp_path / "typo.sqlite"
    done = subprocess.run(berds_cmd("cache", "info", "--cache", str(missing)), capture_output=True, text=True,
                          env=subprocess_env(BERDS_HOME=str(tmp_path / "home")), timeout=120)
    assert done.returncode == 2 and "typo.sqlite: no judgement cache here" in done.stderr
    assert not missing.exists()


def test_llm_serve_refuses_a_port_out_of_range():
    done = subprocess.run(berds_cmd("llm", "serve", "-m", "any-model", "--port", "99999"), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Invalid value for '--port'" in done.stderr and "Traceback" not in done.stderr


def test_rounds_without_a_debate_judge_names_the_fix():
    done = subprocess.run(berds_cmd("eval", "run.jsonl", "--judge", "embedded", "--rounds", "2"), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "use --judge debate:embedded --rounds 2" in done.stderr


@pytest.mark.parametrize("args, option", [
    (["index", "dense", "corpus", "--out", "x", "--batch-size", "0"], "--batch-size"),  # was range() ValueError
    (["index", "bm25", "corpus", "--out", "x", "--threads", "0"], "--threads"),  # was a Java stack trace
    (["judge", "calibrate", "--labels", "x.tsv", "--judge", "embedded", "--bins", "0"], "--bins"),  # was ValueError
    (["analyze", "coverage", "run", "--depth", "0"], "--depth"),  # the error spoke of "--k values"
])
def test_sizes_below_their_minimum_are_usage_errors(args, option):
    done = subprocess.run(berds_cmd(*args), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"Invalid value for '{option}'" in done.stderr


def test_python_m_server_refuses_a_port_out_of_range_before_loading_the_model():
    import sys

    done = subprocess.run([sys.executable, "-m", "berds.llm.server", "--model", "no-such-model", "--port", "99999"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--port must be between 0 and 65535" in done.stderr
    assert "Traceback" not in done.stderr


def option_callbacks(flag: str) -> list[tuple[str, object]]:
    """``(command path, callback)`` for every CLI option named ``flag`` (typer wraps callbacks: unwrapped)."""
    from typer.main import get_command

    from berds.cli import app

    found = []

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, path + [name])
        for param in getattr(command, "params", []):
            if flag in getattr(param, "opts", []):
                found.append((" ".join(path), getattr(param.callback, "__wrapped__", param.callback)))

    walk(get_command(app), [])
    return found


def test_every_out_option_is_checked_before_the_command_starts(tmp_path):
    """Each command that writes to ``--out`` refuses a file where its folder goes (or a folder where its file
    goes) as a usage error, before reading its inputs (which do not exist here: the check comes first)."""
    from berds.cli.options import out_file_callback, out_folder_callback

    a_file, a_folder = tmp_path / "a-file", tmp_path / "a-folder"
    a_file.write_text("x")
    a_folder.mkdir()
    checked = option_callbacks("--out")
    assert len(checked) >= 20
    unchecked = [path for path, callback in checked if callback not in (out_file_callback, out_folder_callback)]
    assert not unchecked, f"--out without a writability check: {unchecked}"
    for args, wrong in ((["retrieve", "-r", "bm25", "--questions", "demo"], a_file),
                        (["export", "qrels", str(tmp_path / "no-such-eval")], a_folder),
                        (["report", str(tmp_path / "no-such-run"), "--judge", "embedded"], a_file)):
        done = subprocess.run(berds_cmd(*args, "--out", str(wrong)), capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Invalid value for '--out'" in done.stderr, done.stderr
        assert str(wrong) in done.stderr and "Traceback" not in done.stderr


def test_every_cache_file_option_refuses_a_missing_folder_and_says_when_it_starts_a_new_cache(tmp_path):
    """A typo in --cache must not quietly start an empty cache and judge everything again: each judgement/score
    cache option refuses a folder that does not exist (before any work, creating nothing) and says when it
    creates a new cache file (`cache info` has its own check: the file must exist)."""
    from berds.cli.options import cache_file_callback

    options = option_callbacks("--cache")
    folder_caches = {"corpus build search", "cache info"}  # a page-cache folder; a cache that must exist
    unchecked = [path for path, callback in options if callback is not cache_file_callback and path not in folder_caches]
    assert len(options) >= 14 and not unchecked, unchecked

    missing = tmp_path / "no-such-folder" / "j.sqlite"
    done = subprocess.run(berds_cmd("eval", str(tmp_path / "run"), "--judge", "embedded", "--cache", str(missing)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no such folder — check --cache for a typo" in " ".join(done.stderr.split())
    assert not missing.parent.exists() and "Traceback" not in done.stderr
    new = tmp_path / "j.sqlite"
    done = subprocess.run(berds_cmd("eval", str(tmp_path / "run"), "--judge", "embedded", "--cache", str(new)),
                          capture_output=True, text=True, timeout=120)
    said = " ".join(done.stderr.split())
    assert "note: no cache at" in said and "yet: a new, empty one will be started there" in said
    assert "no such run folder or file" in said  # (then the run is looked for)


def test_a_file_the_system_refuses_is_one_line_naming_it(tmp_path):
    from pathlib import Path

    from conftest import subprocess_env

    labels = Path(__file__).resolve().parents[1] / "berds" / "data" / "demo" / "labelled_pairs.tsv"
    out = "/proc/berds-report.json"  # nothing can be created in /proc, not even by root
    done = subprocess.run(berds_cmd("judge", "validate", "--labels", str(labels), "--judge", "demo-gold", "--no-cache",
                                    "--bootstrap", "0", "-q", "--out", out),
                          capture_output=True, text=True, env=subprocess_env(COLUMNS="200"), timeout=120)
    assert done.returncode in (1, 2), done.stderr  # 2: refused up front (not root); 1: refused by the system
    assert "Traceback" not in done.stderr and "error:" in done.stderr and out in done.stderr, done.stderr


def test_the_cli_builds_only_the_command_it_runs():
    """berds.cli.main hands typer an app holding only the command named (typer builds every registered command's
    click object on each call: issue 36, rerank's start-up); anything else gets the whole app."""
    from berds.cli import _app_for, app

    one = _app_for(["rerank", "mmr", "RUN", "--out", "x"])
    assert [c.name for c in one.registered_commands] == ["rerank"] and one.registered_groups == []
    assert one.registered_callback is app.registered_callback and len(app.registered_commands) > 1
    assert [g.name for g in _app_for(["corpus", "build"]).registered_groups] == ["corpus"]
    for args in ([], ["--version"], ["--help"], ["rerankk"]):
        assert _app_for(args) is app
