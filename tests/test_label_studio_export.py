"""`berds label import` reads what a real Label Studio writes: exports captured from label-studio 1.23.2 by
``scripts/check_label_studio.py`` (trimmed to the tasks with annotations; emails anonymised), with the task
they came from (``tests/data/label_studio/``: its manifest and pairs).

What the check found, and these tests hold: Label Studio drops ``berds_annotator`` on import and gives every
imported annotation to the importing user (``completed_by`` 1), keeping only the annotation's ``id`` (as
``import_id``) and the task's ``meta``; berds' export writes both, so the annotators come back as themselves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from berds.errors import BerdsError, InputError
from berds.trust.labelling import LabelStore, export_label_studio, import_label_studio, open_task

DATA = Path(__file__).parent / "data" / "label_studio"
# the check's labels given in berds before the export (pairs by task order), and what Label Studio's users
# did: user 1 (the admin who imported) a Yes changed to No, a skip and a Yes; user 7 a No
PAIRS = [json.loads(line)["pair"] for line in (DATA / "pairs.jsonl").read_text().splitlines()]
IN_BERDS = [(0, "alice", "yes"), (1, "alice", "yes"), (1, "bob", "no"), (2, "bob", "skip")]
FROM_LABEL_STUDIO = [(3, "label-studio:1", "no"), (4, "label-studio:7", "no"), (6, "label-studio:1", "yes")]


def _task(tmp_path: Path, name: str, labelled: bool = True):
    folder = tmp_path / name
    folder.mkdir()
    for file in ("manifest.json", "pairs.jsonl"):
        shutil.copy(DATA / file, folder / file)
    task = open_task(folder)
    if labelled:
        store = LabelStore(task.db_path, task.id)
        for i, annotator, value in IN_BERDS:
            store.put(PAIRS[i], annotator, value)
    return task


def _labels(task) -> list[tuple[str, str, str]]:
    return sorted((p, a, v) for p, a, v, _, _ in LabelStore(task.db_path, task.id).rows())


def _want(rows) -> list[tuple[str, str, str]]:
    return sorted((PAIRS[i], a, v) for i, a, v in rows)


def test_a_real_export_brings_every_annotator_back_and_reimport_changes_nothing(tmp_path):
    task = _task(tmp_path, "t")
    counts = import_label_studio(task, DATA / "ls-export.json")
    assert counts == {"added": 3, "same": 3, "replaced": 0, "cancelled": 1, "empty": 0}
    assert _labels(task) == _want(IN_BERDS + FROM_LABEL_STUDIO)
    before = LabelStore(task.db_path, task.id).rows()
    assert import_label_studio(task, DATA / "ls-export.json")["same"] == 6
    assert LabelStore(task.db_path, task.id).rows() == before  # not even a timestamp moved


def test_the_names_come_from_the_file_not_from_the_store(tmp_path):
    # a task that never saw alice or bob (labels moved to another machine): the export names them itself
    task = _task(tmp_path, "t", labelled=False)
    assert import_label_studio(task, DATA / "ls-export.json")["added"] == 6
    assert _labels(task) == _want([r for r in IN_BERDS if r[2] != "skip"] + FROM_LABEL_STUDIO)


def test_a_snapshot_export_with_users_expanded_gives_the_same_names(tmp_path):
    # the snapshot export writes completed_by as {id, email, ...}: the same person, the same name (the id)
    plain, snapshot = _task(tmp_path, "plain", labelled=False), _task(tmp_path, "snapshot", labelled=False)
    import_label_studio(plain, DATA / "ls-export.json")
    assert json.loads((DATA / "ls-snapshot.json").read_text())[3]["annotations"][0]["completed_by"]["email"]
    assert import_label_studio(snapshot, DATA / "ls-snapshot.json")["cancelled"] == 1
    assert _labels(snapshot) == _labels(plain)


def test_an_exported_label_changed_in_label_studio_needs_replace(tmp_path):
    task = _task(tmp_path, "t")
    import_label_studio(task, DATA / "ls-export.json")
    with pytest.raises(BerdsError, match=f"alice on pair {PAIRS[0]}: stored yes, file no"):
        import_label_studio(task, DATA / "ls-export-changed.json")
    assert import_label_studio(task, DATA / "ls-export-changed.json", replace=True)["replaced"] == 1
    assert LabelStore(task.db_path, task.id).of("alice") == {PAIRS[0]: "no", PAIRS[1]: "yes"}


def test_the_export_still_writes_what_label_studio_kept(tmp_path):
    # berds' export of the same labels: the data, the annotation ids and the meta Label Studio gave back
    task = _task(tmp_path, "t")
    export_label_studio(task, tmp_path / "ls.json")
    ours = {i["data"]["pair"]: i for i in json.loads((tmp_path / "ls.json").read_text())}
    real = json.loads((DATA / "ls-export.json").read_text())
    for item in real:
        mine = ours[item["data"]["pair"]]
        assert item["data"] == mine["data"]
        from_berds = [a for a in item["annotations"] if a["import_id"] is not None]
        assert [a["import_id"] for a in from_berds] == [a["id"] for a in mine["annotations"]]
        assert [a["result"] for a in from_berds] == [a["result"] for a in mine["annotations"]]
        assert item["meta"] == mine.get("meta", {})


def test_a_broken_annotator_map_is_refused(tmp_path):
    task = _task(tmp_path, "t", labelled=False)
    items = json.loads((DATA / "ls-export.json").read_text())
    items[1]["meta"]["berds_annotators"] = ["alice", "bob"]
    (tmp_path / "bad.json").write_text(json.dumps(items))
    with pytest.raises(InputError, match=r"task 1 \(0-based\): meta.berds_annotators must map annotation ids"):
        import_label_studio(task, tmp_path / "bad.json")
    assert not LabelStore(task.db_path, task.id).rows()  # refused before anything was stored
