"""One-line errors and notes print user text as it is: rich markup in a path or value is not applied."""

import pytest

from berds.cli import main


@pytest.mark.parametrize("folder", ["runs[old]", "runs[/x]"])
def test_an_error_names_a_path_holding_brackets_as_it_is(tmp_path, capsys, folder):
    # "[old]" was taken for a style tag and left out of the path named; "[/x]" ended in a MarkupError traceback
    missing = tmp_path / folder / "run.jsonl"
    with pytest.raises(SystemExit) as exit_:
        main(["export", "run", str(missing), "--out", str(tmp_path / "o.trec")])
    assert exit_.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{missing}: no such run folder or file" in err



def test_export_names_the_file_it_wrote_as_it_is(tmp_path, capsys):
    from berds.types import Hit, Passage, Question, Run
    from berds.runs import write_ctxs_jsonl

    run = tmp_path / "run.jsonl"
    write_ctxs_jsonl(Run({"q1": Question("q1", "Q?", ("a", "b"))}, {"q1": [Hit(Passage("p1", "text"), 1.0)]}), run)
    out = tmp_path / "trec[v2]" / "run.trec"  # "[v2]" was read as a style tag and left out of the path shown
    out.parent.mkdir()
    main(["export", "run", str(run), "--out", str(out)])
    assert f"1 run lines (qid Q0 docid rank score tag) → {out}" in " ".join(capsys.readouterr().out.split())
