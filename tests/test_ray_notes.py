"""The Ray engine's notes about workers waiting for resources (no Ray cluster needed)."""

from berds.engine.ray_engine import _say


def test_a_note_prints_a_label_holding_brackets_as_it_is(capsys):
    # a model path such as /models/[v2]/judge lost "[v2]"; "[/x]" raised a MarkupError in the middle of a job
    _say("2 of 2 Ray workers for 'transformers:/models/[v2]/judge[/x]' are waiting for resources")
    assert "'transformers:/models/[v2]/judge[/x]'" in " ".join(capsys.readouterr().err.split())
