"""`berds export run` takes a ranking that repeats a passage (judged with `eval --duplicates keep`)."""

from __future__ import annotations

import json


def test_export_run_writes_a_repeated_passage_once_at_its_first_rank(tmp_path):
    # a bare jsonl with a repeat was refused ("remove the repeat from the file"), though eval judges it with
    # --duplicates keep and export_run promises to write the passage once, at its first rank
    from typer.testing import CliRunner

    from berds.cli import app

    ctxs = [{"id": d, "text": f"passage {d}"} for d in ("a1", "a1", "z1")]
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"id": "q0", "question": "Q?", "perspectives": ["p", "o"], "ctxs": ctxs}) + "\n")
    result = CliRunner().invoke(app, ["export", "run", str(run), "--out", str(tmp_path / "run.trec")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run.trec").read_text() == "q0 Q0 a1 1 3.0 run\nq0 Q0 z1 2 1.0 run\n"
