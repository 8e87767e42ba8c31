"""The scripts' one-line errors print a path as it is (rich markup in it is not applied)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_stance_check_names_a_bracketed_path_as_it_is(tmp_path, capsys):
    missing = tmp_path / "questions[old]" / "q[/x].jsonl"  # "[old]" was dropped; "[/x]" raised a MarkupError
    assert _script("stance_check").main(["--questions", str(missing)]) == 2
    assert str(missing) in "".join(capsys.readouterr().out.split())


def test_training_script_names_a_bracketed_path_as_it_is(tmp_path, capsys):
    dev = tmp_path / "dev[old]"
    dev.mkdir()
    assert _script("train_embedded_judge").main(["--berds-dev", str(dev), "--train-sets", "nope",
                                                 "--out", str(tmp_path / "o")]) == 2
    assert str(dev / "nope.dev.jsonl") in "".join(capsys.readouterr().out.split())
