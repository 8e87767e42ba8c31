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


def test_notes_and_tables_show_run_names_and_paths_holding_brackets_as_they_are(tmp_path, capsys):
    # the eval table dropped "[old]" from the run's name, and the cache note from the path ("[/x]" raised)
    from berds.questions import DEMO_DIR
    from berds.runs import load_run, save_run

    folder = tmp_path / "bm25[old]"
    run = load_run(DEMO_DIR / "run.ctxs.jsonl")
    save_run(run, folder)
    (tmp_path / "c[" / "x]").mkdir(parents=True)
    cache = tmp_path / "c[" / "x]" / "j.sqlite"  # "c[/x]" in the text: a closing tag to rich
    main(["eval", str(folder), "--judge", "demo-gold", "--k", "5", "--cache", str(cache), "-q"])
    out, err = capsys.readouterr()
    flat_out, flat_err = "".join(out.split()), "".join(err.split())
    assert "bm25[old]" in flat_out  # the metrics table's run column
    assert f"nocacheat{cache}yet".replace(" ", "") in flat_err


def test_print_note_prints_its_text_as_it_is(capsys):
    from berds.io import print_note

    print_note("a path runs[old]/x and [/bold] too", label="warning")
    assert "warning: a path runs[old]/x and [/bold] too" in " ".join(capsys.readouterr().err.split())


def test_the_demos_next_steps_print_an_out_folder_holding_brackets_as_it_is(tmp_path, capsys):
    from rich.console import Console

    from berds.demo import next_steps, print_next_steps

    out = tmp_path / "demo[old]"
    print_next_steps(next_steps(out, "embedded", ["bm25", "minilm"]), Console(width=400))
    printed = capsys.readouterr().out
    import shlex

    assert f"Outputs in {out}/" in printed and f"--out {shlex.quote(str(out / 'report'))}" in printed  # "[old]" was dropped


def test_judge_notes_print_a_labels_path_holding_brackets_as_it_is(tmp_path, capsys):
    from rich.console import Console

    from berds.cli.judge_trust import _note_repeats

    (tmp_path / "labels[").mkdir()
    labels = tmp_path / "labels[" / "x].tsv"  # "[/x]" in the text
    labels.write_text("question\tid\tdocument\tperspective\tlabel\nQ?\tq1\tdoc\tp\t1\nQ?\tq1\tdoc\tp\t1\n")
    _note_repeats(labels, Console(width=400))  # "[/x]" raised a MarkupError
    assert f"note: {labels} lists 1 row(s)" in " ".join(capsys.readouterr().out.split())
