"""The labelling server's HTTP side (real uvicorn on 127.0.0.1, no browser): what it refuses, and that the
judge's verdict only goes out when asked for."""

from __future__ import annotations

import json

import pytest
import requests

from berds.errors import BerdsError
from berds.trust.labelling import LabelStore, sample_task
from berds.trust.labelling.server import MAX_BODY, LabelServer
from label_fixtures import evaluated_run


@pytest.fixture
def served(tmp_path):
    evaluated_run(tmp_path / "run", n_questions=2)
    task, _ = sample_task([tmp_path / "run"], questions=1, seed=0, k=2, out=tmp_path / "task")
    with LabelServer(task, port=0) as server:
        yield task, server


def post(server, path, payload, **headers):
    return requests.post(server.url + path.lstrip("/"), data=json.dumps(payload),
                         headers={"Content-Type": "application/json", **headers}, timeout=10)


def test_labels_are_stored_and_refusals_are_clear(served):
    task, server = served
    first = task.pairs[0]["pair"]
    page = requests.get(server.url, timeout=10)
    assert page.status_code == 200 and "berds label" in page.text
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    state = requests.get(server.url + "api/next", params={"annotator": "ann"}, timeout=10).json()
    assert state["pair"]["pair"] == first and "judge" not in state["pair"]  # hidden unless asked
    asked = requests.get(server.url + "api/next", params={"annotator": "ann", "judge": "1"}, timeout=10).json()
    assert asked["pair"]["judge"]["label"] == ("yes" if task.pairs[0]["judge_label"] else "no")
    done = post(server, "/api/label", {"annotator": "ann", "pair": first, "value": "yes"})
    assert done.status_code == 200 and done.json()["progress"]["labelled"] == 1
    assert LabelStore(task.db_path, task.id).of("ann") == {first: "yes"}
    # not JSON (a plain form post another web page could send without asking): refused
    form = requests.post(server.url + "api/label", data={"annotator": "x", "pair": first, "value": "no"}, timeout=10)
    assert form.status_code == 415
    foreign = post(server, "/api/label", {"annotator": "x", "pair": first, "value": "no"}, Origin="http://evil.test")
    assert foreign.status_code == 403 and "own page" in foreign.json()["error"]
    big = post(server, "/api/label", {"annotator": "x", "pair": first, "value": "no", "pad": "x" * MAX_BODY})
    assert big.status_code == 413
    assert post(server, "/api/label", {"annotator": "x", "pair": "nope", "value": "no"}).status_code == 400
    assert post(server, "/api/label", {"annotator": "x", "pair": first, "value": "maybe"}).status_code == 400
    assert post(server, "/api/label", {"annotator": "", "pair": first, "value": "no"}).status_code == 400
    assert post(server, "/api/label", [1, 2]).status_code == 400
    rebound = requests.get(server.url + "api/next", params={"annotator": "ann"}, headers={"Host": "evil.test"},
                           timeout=10)
    assert rebound.status_code == 400  # a page that rebinds its domain to 127.0.0.1 reads nothing
    assert LabelStore(task.db_path, task.id).annotators() == ["ann"]  # nothing refused was stored
    undone = post(server, "/api/undo", {"annotator": "ann"}).json()
    assert undone["undone"] == first and undone["progress"]["labelled"] == 0


def test_a_taken_port_is_one_line(served):
    task, server = served
    with pytest.raises(BerdsError, match=f"cannot listen on 127.0.0.1:{server.port}"):
        LabelServer(task, port=server.port)


def test_the_title_is_split_from_the_judge_text_only_when_it_is_exactly_there():
    from berds.trust.labelling.server import split_title

    assert split_title("Some text. A title", "A title") == ("A title", "Some text.")  # after (the study's)
    assert split_title("A title Some text.", "A title") == ("A title", "Some text.")  # --title-position before
    assert split_title("Some text.", "A title") == ("", "Some text.")  # none: the page shows the text as is
    assert split_title("Some text.", "") == ("", "Some text.")
