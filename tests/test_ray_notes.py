"""The Ray engine's notes about workers waiting for resources (no Ray cluster needed)."""

import pytest

from berds.engine.ray_engine import _say


def test_a_note_prints_a_label_holding_brackets_as_it_is(capsys):
    # a model path such as /models/[v2]/judge lost "[v2]"; "[/x]" raised a MarkupError in the middle of a job
    _say("2 of 2 Ray workers for 'transformers:/models/[v2]/judge[/x]' are waiting for resources")
    assert "'transformers:/models/[v2]/judge[/x]'" in " ".join(capsys.readouterr().err.split())


def test_all_running_is_said_only_of_the_pool_whose_wait_was_reported(capsys):
    pytest.importorskip("ray")
    from berds.engine.ray_engine import RayEngine, _Slot

    engine = RayEngine()
    engine._waiting_reported = True  # a job ended while some of its workers still waited for resources
    engine._kill_pool()  # the next recipe gets a new pool, which was never reported waiting
    engine._report_all_running([_Slot(started=True), _Slot(started=True)])
    assert "Ray workers are running" not in capsys.readouterr().err
