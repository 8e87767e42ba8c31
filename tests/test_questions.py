"""Question sets: by path, by name through BERDS_DATA_DIR, the shipped demo, and clear errors."""

import json

import pytest

from berds.questions import load_questions
from berds.errors import BerdsError, InputError, UnknownNameError


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_any_user_jsonl_is_a_benchmark(tmp_path):
    p = write(tmp_path / "mine.jsonl", [{"id": 7, "question": "Is tea better than coffee?", "perspectives": ["Tea calms.", "Coffee focuses."]}])
    qs = load_questions(p)
    assert qs[0].id == "7" and qs[0].perspectives == ("Tea calms.", "Coffee focuses.") and qs[0].dataset == "mine"


def test_named_set_from_data_dir(tmp_path, monkeypatch):
    write(tmp_path / "kialo.dev.jsonl", [{"id": "k1", "question": "Q?", "perspectives": ["a", "b", "c"]}])
    monkeypatch.setenv("BERDS_DATA_DIR", str(tmp_path))
    qs = load_questions("kialo", split="dev")
    assert [q.id for q in qs] == ["k1"] and qs[0].dataset == "kialo"


def test_named_set_unreachable_hub_gives_a_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("BERDS_DATA_DIR", raising=False)
    with pytest.raises(BerdsError, match=r"BERDS_DATA_DIR/opinionqa.test.jsonl"):
        load_questions("opinionqa", split="test")


def test_unknown_names_and_splits():
    with pytest.raises(UnknownNameError, match="Did you mean 'kialo'"):
        load_questions("kilao")
    with pytest.raises(BerdsError, match="unknown split"):
        load_questions("kialo", split="train")


def test_a_split_is_checked_for_files_and_the_demo_too_and_said_not_to_apply(tmp_path, capsys):
    with pytest.raises(BerdsError, match="unknown split 'dve'; use one of dev, test"):
        load_questions("demo", split="dve")
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "q1", "question": "Q?", "perspectives": ["a"]}\n')
    assert [q.id for q in load_questions(path, split="dev")] == ["q1"]
    assert "--split dev does not apply to" in " ".join(capsys.readouterr().err.split())
    load_questions(path)  # the default split says nothing
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("row, message", [
    ({"question": "Q?", "perspectives": ["a"]}, "no 'id'"),
    ({"id": 1, "perspectives": ["a"]}, "no 'question'"),
    ({"id": 1, "question": "Q?"}, "no 'perspectives'"),
    ({"id": 1, "question": "Q?", "perspectives": []}, "non-empty list"),
    ({"id": 1, "question": "Q?", "perspectives": ["ok", ""]}, "perspectives[1] must not be empty"),
])
def test_bad_records(tmp_path, row, message):
    p = write(tmp_path / "q.jsonl", [{"id": 0, "question": "fine?", "perspectives": ["x"]}, row])
    with pytest.raises(InputError) as err:
        load_questions(p)
    assert "line 2" in str(err.value) and message in str(err.value)


def test_duplicate_ids(tmp_path):
    p = write(tmp_path / "q.jsonl", [{"id": 1, "question": "a?", "perspectives": ["x"]}] * 2)
    with pytest.raises(InputError, match="line 2.*duplicate question id"):
        load_questions(p)


def test_a_folder_named_like_a_set_does_not_shadow_the_set(tmp_path, monkeypatch):
    """`berds demo --out ./demo` run from that folder's parent must still find the shipped demo questions."""
    from berds.questions import load_questions

    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    assert len(load_questions("demo")) == 12
    (tmp_path / "mine").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        load_questions("mine")


def test_an_unreachable_hub_fails_at_once_for_a_named_set(tmp_path):
    """Without a local copy and with the hub unreachable, one short request decides: no half minute of the
    loader's retries, one line naming the dataset and the fix."""
    import os
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "BERDS_DATA_DIR")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", BERDS_HOME=str(tmp_path / "home"))  # a closed port
    started = time.monotonic()
    code = ("from berds.errors import BerdsError\nfrom berds.questions import load_questions\n"
            "try:\n    load_questions('kialo')\nexcept BerdsError as exc:\n    print(exc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and time.monotonic() - started < 30, done.stderr
    assert "could not reach the Hugging Face dataset" in done.stdout and "$BERDS_DATA_DIR/kialo.test.jsonl" in done.stdout
    assert "Retrying" not in done.stderr and "Traceback" not in done.stderr


def test_a_compressed_questions_file_is_named_as_compressed(tmp_path):
    # it failed as "not UTF-8 text (byte 1 of the line) — re-encode the file (iconv -f latin1 ...)"
    import gzip

    path = tmp_path / "mine.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": "q1", "question": "Is it?", "perspectives": ["yes"]}\n'))
    with pytest.raises(InputError, match=r"mine.jsonl.gz: is gzip-compressed.*gunzip -k mine.jsonl.gz"):
        load_questions(path)
