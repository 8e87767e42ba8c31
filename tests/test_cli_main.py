"""The console entry point: usage errors are a short message and exit status 2, never a traceback."""

import subprocess

import pytest

from conftest import berds_cmd


@pytest.mark.parametrize(
    "args, expected",
    [
        (["eval", "run.jsonl", "--k", "abc"], "Invalid value for '--k'"),
        (["eval"], "Missing argument"),
        (["no-such-command"], "No such command 'no-such-command'"),
    ],
)
def test_usage_errors_are_one_message_not_a_traceback(args, expected):
    done = subprocess.run(berds_cmd(*args), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert expected in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
