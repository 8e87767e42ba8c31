"""`berds label sample | status | export | import` without a browser: the seeded draw, the task folder and its
checks, the label store (undo, skip, next pair), conflicts, whole questions, κ, Label Studio both ways, and the
refusals (another judge, another task, a hand-edited task, an empty or too large sample)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from berds.errors import BerdsError, InputError
from berds.io import read_json
from berds.trust.labelling import (LabelStore, export_label_studio, export_tsv, import_label_studio, import_tsv,
                                   open_task, sample_task, task_status)
from berds.trust.labelling.store import next_pair
from berds.trust.labels import read_labelled_pairs
from conftest import berds_cmd, subprocess_env
from label_fixtures import evaluated_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs judged by the overlap judge (6 and 4 questions, q0-q3 shared) and one by another threshold."""
    base = tmp_path_factory.mktemp("label-runs")
    return {"a": evaluated_run(base / "a", n_questions=6, name="a"),
            "b": evaluated_run(base / "b", n_questions=4, name="b"),
            "other": evaluated_run(base / "other", n_questions=4, name="other", judge_options={"threshold": 0.9})}


def test_sample_draws_the_same_seeded_questions_from_every_run(runs, tmp_path):
    task, summary = sample_task([runs["a"], runs["b"]], questions=3, seed=11, k=3, out=tmp_path / "t1")
    again, _ = sample_task([runs["a"], runs["b"]], questions=3, seed=11, k=3, out=tmp_path / "t2")
    other, _ = sample_task([runs["a"], runs["b"]], questions=3, seed=12, k=3, out=tmp_path / "t3")
    m = task.manifest
    assert m["questions"] == again.manifest["questions"] and task.id == again.id  # same seed, same task
    assert m["questions"] != other.manifest["questions"]
    assert set(m["questions"]) <= {"q0", "q1", "q2", "q3"}  # only questions both runs hold
    assert m["population"] == {"size": 4, "excluded": {"a": ["q4", "q5"]}}
    assert summary == {"population": 4, "drawn": 3, "pairs": len(task.pairs), "shared": len(task.pairs),
                       "excluded": {"a": 2, "b": 0}}
    assert m["seed"] == 11 and m["k"] == 3 and m["judge"]["id"] == "test-overlap|threshold=0.5"
    assert [r["name"] for r in m["runs"]] == ["a", "b"] and all(len(r["judgements_sha256"]) == 64 for r in m["runs"])
    assert m["berds_version"]
    # the same questions and passages in both runs: every pair once, with both runs as sources
    assert all([s["run"] for s in p["sources"]] == ["a", "b"] for p in task.pairs)
    # every (perspective, passage) pair of each drawn question's top 3, passage text as the judge saw it
    from conftest import make_run

    run = make_run(n_questions=6, name="a")
    for qid in m["questions"]:
        q = run.questions[qid]
        want = {(p, h.passage.judge_text()) for p in q.perspectives for h in run.hits[qid][:3]}
        assert {(p["perspective"], p["document"]) for p in task.pairs if p["qid"] == qid} == want
    from judges_for_tests import OverlapJudge

    judge = OverlapJudge()
    assert all(p["judge_label"] == int(judge.score(p["perspective"], p["document"]) >= 0.5) for p in task.pairs)


def test_sample_refusals(runs, tmp_path):
    with pytest.raises(BerdsError, match="different judges"):
        sample_task([runs["a"], runs["other"]], questions=2, seed=0, k=3, out=tmp_path / "x")
    with pytest.raises(BerdsError, match=r"--questions 5 is more than the 4 question\(s\) every run holds"):
        sample_task([runs["a"], runs["b"]], questions=5, seed=0, k=3, out=tmp_path / "x")
    with pytest.raises(BerdsError, match="--questions must be at least 1"):
        sample_task([runs["a"]], questions=0, seed=0, k=3, out=tmp_path / "x")
    with pytest.raises(InputError, match="deeper than this evaluation judged"):
        sample_task([runs["a"]], questions=2, seed=0, k=6, out=tmp_path / "x")
    unjudged = tmp_path / "unjudged"
    from berds.runs import save_run
    from conftest import make_run

    save_run(make_run(name="u"), unjudged)
    with pytest.raises(InputError, match="has not been evaluated"):
        sample_task([unjudged], questions=1, seed=0, k=3, out=tmp_path / "x")
    # a folder of evaluations (`berds demo`'s eval/JUDGE/RUN) is not a run to `berds eval`: its evaluations are named
    demo_like = tmp_path / "demo-out" / "eval"
    shutil.copytree(next((runs["a"] / "eval").glob("*/judgements.jsonl")).parent, demo_like / "overlap" / "a")
    for folder in (demo_like, demo_like / "overlap"):
        with pytest.raises(InputError, match=r"not an evaluation but a folder of 1: .*overlap[/\\]a") as err:
            sample_task([folder], questions=1, seed=0, k=3, out=tmp_path / "x")
        assert "berds eval" not in str(err.value)
    with pytest.raises(InputError, match="neither a run folder nor an evaluation folder"):
        sample_task([tmp_path / "demo-out"], questions=1, seed=0, k=3, out=tmp_path / "x")
    # runs that share no question: an empty sample
    from berds.evaluate.evaluation import evaluate_paths
    from berds.types import Question, Run

    lone = make_run(n_questions=1, name="lone")
    renamed = Run({"z9": Question("z9", lone.questions["q0"].text, lone.questions["q0"].perspectives)},
                  {"z9": lone.hits["q0"]}, {}, "lone")
    save_run(renamed, tmp_path / "lone")
    evaluate_paths([tmp_path / "lone"], "judges_for_tests:OverlapJudge", ks=(5,), progress=False, use_cache=False)
    with pytest.raises(BerdsError, match="share no evaluated question: nothing to sample"):
        sample_task([runs["a"], tmp_path / "lone"], questions=1, seed=0, k=3, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()
    sample_task([runs["a"]], questions=1, seed=0, k=2, out=tmp_path / "t")
    with pytest.raises(BerdsError, match="already holds a labelling task"):
        sample_task([runs["a"]], questions=1, seed=0, k=2, out=tmp_path / "t")


def test_a_task_edited_by_hand_is_refused(runs, tmp_path):
    task, _ = sample_task([runs["a"]], questions=2, seed=0, k=2, out=tmp_path / "t")
    pairs = tmp_path / "t" / "pairs.jsonl"
    text = pairs.read_text()
    pairs.write_text(text.replace("Evidence shows", "Evidence suggests", 1))
    with pytest.raises(InputError, match="pairs.jsonl was changed after sampling"):
        open_task(tmp_path / "t")
    done = subprocess.run(berds_cmd("label", "serve", str(tmp_path / "t"), "--port", "0"), capture_output=True,
                          text=True, env=subprocess_env(), timeout=60)
    assert done.returncode == 2 and "was changed after sampling" in done.stderr and "Traceback" not in done.stderr
    pairs.write_text(text)
    assert open_task(tmp_path / "t").id == task.id


def test_a_missing_task_folder_is_named_as_missing(tmp_path):
    with pytest.raises(InputError, match="no such folder") as err:
        open_task(tmp_path / "typo")
    assert "manifest" not in str(err.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        open_task(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no manifest.json: not a labelling task"):
        open_task(tmp_path / "empty")


def test_labels_of_another_task_are_refused(runs, tmp_path):
    first, _ = sample_task([runs["a"]], questions=2, seed=0, k=2, out=tmp_path / "first")
    second, _ = sample_task([runs["other"]], questions=2, seed=0, k=2, out=tmp_path / "second")  # another judge
    LabelStore(first.db_path, first.id).put(first.pairs[0]["pair"], "ann", "yes")
    shutil.copy(first.db_path, second.db_path)
    with pytest.raises(InputError, match="these labels belong to another task"):
        task_status(second)
    second.db_path.unlink()
    export_label_studio(first, tmp_path / "first.json")
    with pytest.raises(InputError, match="belongs to another labelling task"):
        import_label_studio(second, tmp_path / "first.json")
    assert not second.db_path.exists() or not LabelStore(second.db_path, second.id).rows()


def test_store_undo_skip_and_next_pair(tmp_path):
    store = LabelStore(tmp_path / "labels.sqlite", "task-id")
    order = ["p1", "p2", "p3"]
    assert next_pair(order, store.of("ann")) == "p1"
    store.put("p1", "ann", "yes")
    store.put("p2", "ann", "skip")
    assert next_pair(order, store.of("ann")) == "p3"
    store.put("p3", "ann", "no")
    assert next_pair(order, store.of("ann")) == "p2"  # skipped pairs come back at the end
    store.put("p2", "ann", "yes")
    assert next_pair(order, store.of("ann")) is None
    store.put("p1", "ann", "no")  # changed mind
    assert store.of("ann") == {"p1": "no", "p2": "yes", "p3": "no"}
    assert store.undo("ann") == "p1" and store.of("ann")["p1"] == "yes"  # the earlier value comes back
    assert store.undo("ann") == "p2" and store.of("ann")["p2"] == "skip"
    assert store.undo("ann") == "p3" and "p3" not in store.of("ann")
    assert store.of("bob") == {} and store.undo("bob") is None  # each annotator undoes only their own
    with pytest.raises(BerdsError, match="annotator name"):
        store.put("p1", "  ", "yes")
    with pytest.raises(BerdsError, match="one of yes, no, skip"):
        store.put("p1", "ann", "maybe")
    with pytest.raises(InputError, match="belong to another task"):
        LabelStore(tmp_path / "labels.sqlite", "another-task")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match="not a readable label database"):
        LabelStore(tmp_path / "junk.sqlite", "task-id")


def test_conflicts_whole_questions_and_kappa(runs, tmp_path):
    task, _ = sample_task([runs["a"]], questions=2, seed=0, k=2, out=tmp_path / "t")
    store = LabelStore(task.db_path, task.id)
    first_q = task.manifest["questions"][0]
    ids = task.questions()[first_q]
    other = task.questions()[task.manifest["questions"][1]]
    # ann labels the whole first question; bob labels 4 of its pairs, disagreeing on one, and skips another
    ann = ["yes", "yes", "no", "no"] + ["no"] * (len(ids) - 4)
    bob = ["yes", "no", "no", "no"]
    for t, (pair, value) in enumerate(zip(ids, ann)):
        store.put(pair, "ann", value, at=100.0 + t)
    for t, (pair, value) in enumerate(zip(ids, bob)):
        store.put(pair, "bob", value, at=200.0 + t)
    store.put(other[0], "bob", "skip")
    store.put(other[1], "ann", "yes")
    status = task_status(task)
    assert [c["pair"] for c in status.conflicts] == [ids[1]]
    assert status.labelled_pairs == len(ids) - 1 + 1 and status.whole_questions == []  # the conflict is no label
    assert status.partial_questions == [first_q, task.manifest["questions"][1]]
    # κ by hand: ann y y n n, bob y n n n -> p_o = 3/4, p_e = 1/2*1/4 + 1/2*3/4 = 1/2, κ = 1/2
    [agreement] = status.agreements
    assert (agreement.first, agreement.second, agreement.n, agreement.questions) == ("ann", "bob", 4, 1)
    assert agreement.kappa == pytest.approx(0.5) and agreement.agreement == pytest.approx(0.75)
    assert agreement.interval[0] != agreement.interval[0]  # one question: no interval claimed
    with pytest.raises(BerdsError, match=r"1 pair\(s\) were labelled both yes and no: pair .* ann yes, bob no"):
        export_tsv(task, tmp_path / "x.tsv")
    assert not (tmp_path / "x.tsv").exists()
    s = export_tsv(task, tmp_path / "first.tsv", conflicts="first")
    assert s.whole_questions == [first_q]
    rows = {p.extra["pair"]: p for p in read_labelled_pairs(tmp_path / "first.tsv")}
    assert rows[ids[1]].label is True and len(rows) == len(ids) + 1  # ann answered first; the skip is no label
    assert other[0] not in rows
    export_tsv(task, tmp_path / "drop.tsv", conflicts="drop")
    assert ids[1] not in {p.extra["pair"] for p in read_labelled_pairs(tmp_path / "drop.tsv")}
    store.put(ids[1], "cy", "no")  # two say no, one yes
    export_tsv(task, tmp_path / "majority.tsv", conflicts="majority")
    assert {p.extra["pair"]: p.label for p in read_labelled_pairs(tmp_path / "majority.tsv")}[ids[1]] is False
    # the command line says the same, and the whole-question count
    done = subprocess.run(berds_cmd("label", "export", str(tmp_path / "t"), "--out", str(tmp_path / "cli.tsv"),
                                    "--conflicts", "majority"), capture_output=True, text=True,
                          env=subprocess_env(COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    assert "1 of 2 questions are labelled whole" in " ".join(done.stdout.split())


def test_nothing_labelled_is_refused(runs, tmp_path):
    task, _ = sample_task([runs["a"]], questions=1, seed=0, k=1, out=tmp_path / "t")
    with pytest.raises(BerdsError, match="has a label yet: nothing to export"):
        export_tsv(task, tmp_path / "x.tsv")


def test_label_studio_round_trip(runs, tmp_path):
    task, _ = sample_task([runs["a"], runs["b"]], questions=2, seed=5, k=2, out=tmp_path / "t")
    store = LabelStore(task.db_path, task.id)
    for i, p in enumerate(task.pairs):
        store.put(p["pair"], "ann", "yes" if i % 3 == 0 else "no")
    store.put(task.pairs[0]["pair"], "bob", "skip")  # a skip is not exported
    n_tasks, n_annotations, config = export_label_studio(task, tmp_path / "ls.json")
    assert (n_tasks, n_annotations) == (len(task.pairs), len(task.pairs))
    import xml.etree.ElementTree as ET

    choices = ET.fromstring(config.read_text()).find("Choices")  # well-formed, and names what the JSON uses
    assert (choices.get("name"), choices.get("toName")) == ("supports", "passage")
    assert [c.get("value") for c in choices] == ["Yes", "No"]
    items = read_json(tmp_path / "ls.json")
    first = items[0]
    assert first["data"]["passage"] == task.pairs[0]["document"] and first["data"]["berds_task"] == task.id
    # the title is shown apart too, as on berds' page (the passage keeps the text the judge read)
    assert [i["data"]["title"] for i in items] == [p["title"] or "" for p in task.pairs]
    assert any(i["data"]["title"] for i in items)
    assert "$title" in [h.get("value") for h in ET.fromstring(config.read_text()).iter("Header")]
    assert first["annotations"][0]["result"][0]["value"] == {"choices": ["Yes"]}
    assert "predictions" not in first  # the judge's verdict only when asked for
    export_label_studio(task, tmp_path / "with-judge.json", judge_predictions=True)
    predicted = [i["predictions"][0]["result"][0]["value"]["choices"] for i in read_json(tmp_path / "with-judge.json")]
    assert predicted == [["Yes" if p["judge_label"] else "No"] for p in task.pairs]
    # what Label Studio's export gives back after more work there: an annotation by user 7, a cancelled one,
    # one without a choice
    items[1]["annotations"].append({"id": 5, "completed_by": 7, "was_cancelled": False,
                                    "result": [{"from_name": "supports", "to_name": "passage", "type": "choices",
                                                "value": {"choices": ["Yes"]}}]})
    items[2]["annotations"].append({"completed_by": {"id": 8, "email": "eve@example.org"}, "was_cancelled": True,
                                    "result": []})
    items[3]["annotations"].append({"completed_by": 9, "result": []})
    (tmp_path / "ls-back.json").write_text(json.dumps(items))
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "t", fresh)
    (fresh / "labels.sqlite").unlink()
    for suffix in ("-wal", "-shm"):
        (fresh / f"labels.sqlite{suffix}").unlink(missing_ok=True)
    counts = import_label_studio(open_task(fresh), tmp_path / "ls-back.json")
    assert counts == {"added": len(task.pairs) + 1, "same": 0, "replaced": 0, "cancelled": 1, "empty": 1}
    back = LabelStore(fresh / "labels.sqlite", task.id)
    assert back.of("ann") == {p: v for p, v in store.of("ann").items()}
    assert back.of("label-studio:7") == {task.pairs[1]["pair"]: "yes"}
    # importing the same file again changes nothing; a different label is refused unless --replace
    assert import_label_studio(open_task(fresh), tmp_path / "ls-back.json")["same"] == len(task.pairs) + 1
    items[0]["annotations"][0]["result"][0]["value"]["choices"] = ["No"]
    (tmp_path / "changed.json").write_text(json.dumps(items))
    with pytest.raises(BerdsError, match="differ from the annotator's stored label"):
        import_label_studio(open_task(fresh), tmp_path / "changed.json")
    assert import_label_studio(open_task(fresh), tmp_path / "changed.json", replace=True)["replaced"] == 1
    items[0]["annotations"][0]["result"][0]["value"]["choices"] = ["Maybe"]
    (tmp_path / "bad.json").write_text(json.dumps(items))
    with pytest.raises(InputError, match=r"task 0 \(0-based\), annotation 0: 'supports' must hold one choice"):
        import_label_studio(open_task(fresh), tmp_path / "bad.json")
    # the CLI round trip: export --format label-studio, import
    done = subprocess.run(berds_cmd("label", "export", str(tmp_path / "t"), "--format", "label-studio", "--out",
                                    str(tmp_path / "cli.json")), capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cli.config.xml").is_file()
    done = subprocess.run(berds_cmd("label", "import", str(tmp_path / "t"), str(tmp_path / "cli.json")),
                          capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert f"0 labels added, 0 replaced, {len(task.pairs)} already stored" in " ".join(done.stdout.split())


def test_status_tables_fit_80_columns(runs, tmp_path, monkeypatch):
    from rich.table import Table

    from test_tables_80 import check, run_80  # (the helpers of the 80-column check of every other table)

    seen: list[str] = []
    original = Table.add_column
    monkeypatch.setattr(Table, "add_column",
                        lambda self, header="", *a, **kw: (seen.append(str(header)), original(self, header, *a, **kw))[1])
    task, _ = sample_task([runs["a"]], questions=2, seed=0, k=2, out=tmp_path / "t")
    store = LabelStore(task.db_path, task.id)
    names = ["a.long.annotator.name@example-university.org", "another.annotator.with.a.long.name@example.org"]
    for i, p in enumerate(task.pairs):
        store.put(p["pair"], names[0], "yes" if i % 2 else "no")
        store.put(p["pair"], names[1], "yes" if i % 3 else "no")
    output = run_80(["label", "status", str(tmp_path / "t")], seen)
    check(output, seen, "berds label status")
    assert "agreement between annotators" in output


def test_a_labelled_tsv_of_the_task_imports_and_another_runs_is_refused(runs, tmp_path):
    task, _ = sample_task([runs["a"]], questions=2, seed=1, k=2, out=tmp_path / "t")
    store = LabelStore(task.db_path, task.id)
    for i, p in enumerate(task.pairs):
        store.put(p["pair"], "ann", "yes" if i % 2 else "no")
    export_tsv(task, tmp_path / "ann.tsv")
    done = subprocess.run(berds_cmd("label", "import", str(tmp_path / "t"), str(tmp_path / "ann.tsv"), "--annotator",
                                    "ann-again"), capture_output=True, text=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    assert f"{len(task.pairs)} labels added, 0 replaced, 0 already stored" in " ".join(done.stdout.split())
    assert store.of("ann-again") == store.of("ann")
    assert task_status(task).agreements[0].kappa == pytest.approx(1.0)
    # the labels of another task's pairs (here: other passages of the run, k=3 instead of 2) name the line
    wider, _ = sample_task([runs["a"]], questions=2, seed=1, k=3, out=tmp_path / "wider")
    wide_store = LabelStore(wider.db_path, wider.id)
    for p in wider.pairs:
        wide_store.put(p["pair"], "ann", "yes")
    export_tsv(wider, tmp_path / "wider.tsv")
    extra = next(i for i, p in enumerate(wider.pairs) if p["pair"] not in task.by_id())
    with pytest.raises(InputError, match=rf"wider.tsv, line {extra + 2}.*not a pair of this task"):
        import_tsv(task, tmp_path / "wider.tsv", annotator="cy")
    assert "cy" not in store.annotators()
    refused = subprocess.run(berds_cmd("label", "import", str(tmp_path / "t"), str(tmp_path / "ann.tsv")),
                             capture_output=True, text=True, env=subprocess_env())
    assert refused.returncode == 2 and "--annotator" in refused.stderr


def test_the_export_is_what_eval_labels_reads(runs, tmp_path):
    """The exported TSV matches the run's pairs in `berds eval --labels` (question id, perspective, judge text):
    every drawn question counts as labelled."""
    task, _ = sample_task([runs["a"]], questions=3, seed=2, k=5, out=tmp_path / "t")
    store = LabelStore(task.db_path, task.id)
    for p in task.pairs:
        store.put(p["pair"], "ann", "no" if p["judge_label"] else "yes")  # a person who disagrees everywhere
    export_tsv(task, tmp_path / "labels.tsv")
    done = subprocess.run(berds_cmd("eval", str(runs["a"]), "--judge", "judges_for_tests:OverlapJudge", "--k", "5",
                                    "--labels", str(tmp_path / "labels.tsv"), "--no-cache", "-q"),
                          capture_output=True, text=True, env=subprocess_env(COLUMNS="100"))
    assert done.returncode == 0, done.stderr
    assert "3/6" in done.stdout, done.stdout  # 3 labelled questions of the run's 6
