"""--allow-unparsed on commands whose tables cannot flag the unparsed share says so on stderr."""

from __future__ import annotations

from berds.evaluate.compare import compare_paths
from berds.runs import save_run
from conftest import make_run
from judges_for_tests import HalfUnparsedJudge


def test_compare_with_allow_unparsed_notes_the_share_on_stderr(tmp_path, capsys):
    # the refusal promised the answers would be flagged, but compare/report/analyze accepted them without a word
    paths = [save_run(make_run(n_questions=3, depth=6, name=n), tmp_path / n) for n in ("a", "b")]
    compare_paths(paths, HalfUnparsedJudge(), ks=(5,), cache_path=tmp_path / "j.sqlite", allow_unparsed=True,
                  n_resamples=100)
    err = capsys.readouterr().err
    assert "note: run 'a': the judge 'test-half-unparsed' answered neither Yes nor No" in err, err
    assert "run 'b'" in err and "counted as No (accepted by --allow-unparsed)" in err, err


def test_study_diversify_takes_allow_unparsed_which_its_refusal_names(tmp_path, monkeypatch):
    # the refusal said 'pass --allow-unparsed', an option study diversify did not have. The embedding model is a
    # bag of letters: loading MiniLM would take seconds, and the encoder is not what is checked here
    from typer.testing import CliRunner

    import berds.rerank.embeddings as embeddings
    from analysis_fixtures import LettersEncoder
    from berds.cli import app

    monkeypatch.setattr(embeddings, "load_encoder", lambda *a, **k: LettersEncoder())
    run = save_run(make_run(n_questions=4, depth=6, name="r"), tmp_path / "r")
    args = ["study", "diversify", str(run), "--split-dev", "0.5", "--judge", "judges_for_tests:HalfUnparsedJudge",
            "-s", "mmr", "--grid", "mmr=0.5", "--depth", "6", "--k", "5", "--resamples", "100",
            "--cache", str(tmp_path / "j.sqlite"), "--embedding-cache", str(tmp_path / "e.sqlite"), "-q"]
    accepted = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "s"), "--allow-unparsed"])
    assert accepted.exit_code == 0, (accepted.output, accepted.exception)
    assert "counted as No (accepted by --allow-unparsed)" in accepted.output, accepted.output
