"""Round-trip berds' Label Studio files through a running Label Studio, and say what came back.

    python scripts/check_label_studio.py --url http://127.0.0.1:8080 --token TOKEN [--save DIR] [--keep]

``TOKEN`` is a legacy API token (Label Studio >= 1.10 needs "legacy tokens" enabled for the organisation, e.g.
start it with ``LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true``). The script

1. makes a small labelling task as docs/labelling.md does (the demo run, the ``embedded`` judge, 2 questions,
   top 2) and labels some pairs through berds' API (alice yes, alice yes + bob no on one pair, a skip);
2. writes ``berds label export --format label-studio`` with and without ``--judge-predictions`` and, for
   each, creates a project with the exported config, imports the tasks and checks what Label Studio holds
   (every task, its data, the annotations and predictions) and that it refuses a task the config cannot show;
3. labels as annotators would in the project with predictions (a Yes changed to No, a No by a second user, a
   skip, a Yes), exports it with Label Studio's own JSON export and runs ``berds label import`` on it: the
   labels stored must be exactly those given (berds' annotators under their names, Label Studio's as
   ``label-studio:<user id>``) and importing again must change nothing;
4. changes an annotation berds exported (alice's) in Label Studio: the import must refuse it, and take it
   with ``--replace``.

It prints a table of the checks and exits 1 when one fails. The projects and the second user it makes are
deleted at the end unless ``--keep``. ``--save DIR`` keeps Label Studio's exports (tests/data/label_studio/
holds a trimmed one). Needs only berds (requests is one of its dependencies), not Label Studio's SDK.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
DEMO_RUN = ROOT / "berds" / "data" / "demo" / "run.ctxs.jsonl"
TIMEOUT = 60


class LabelStudio:
    """The few REST calls the check needs (token auth)."""

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201, 204), **kw: Any) -> Any:
        r = self.session.request(method, self.url + path, timeout=TIMEOUT, **kw)
        if r.status_code not in ok:
            raise SystemExit(f"Label Studio: {method} {path} answered {r.status_code}: {r.text[:500]}")
        return r.json() if r.content and "json" in r.headers.get("content-type", "") else None

    def status(self, method: str, path: str, **kw: Any) -> int:
        """The answer's status code alone (for the calls that must be refused)."""
        return self.session.request(method, self.url + path, timeout=TIMEOUT, **kw).status_code

    def version(self) -> str:
        r = self.session.get(self.url + "/api/version", timeout=TIMEOUT)
        return (r.json().get("release") or r.json().get("label-studio-os-package", {}).get("version")
                if r.ok else "?") or "?"

    def tasks(self, project: int) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        page = 1
        while True:
            r = self.session.get(self.url + "/api/tasks", timeout=TIMEOUT,
                                 params={"project": project, "fields": "all", "page": page, "page_size": 100})
            if r.status_code == 404 or not r.json().get("tasks"):  # past the last page
                return got
            got += r.json()["tasks"]
            if len(got) >= r.json().get("total", 0):
                return got
            page += 1

    def annotate(self, task: int, choice: str | None, *, user: int | None = None) -> int:
        """An annotation as the labelling page posts it (choice None: the task skipped, ``was_cancelled``)."""
        result = [] if choice is None else [{"from_name": "supports", "to_name": "passage", "type": "choices",
                                             "value": {"choices": [choice]}}]
        body: dict[str, Any] = {"result": result, "was_cancelled": choice is None}
        if user is not None:
            body["completed_by"] = user
        return self.call("POST", f"/api/tasks/{task}/annotations/", json=body)["id"]

    def change(self, annotation: int, choice: str) -> None:
        self.call("PATCH", f"/api/annotations/{annotation}/", json={"result": [
            {"from_name": "supports", "to_name": "passage", "type": "choices", "value": {"choices": [choice]}}]})

    def export(self, project: int) -> list[dict[str, Any]]:
        """The JSON export (the project's Export button): the tasks with annotations, ``completed_by`` an id."""
        return self.call("GET", f"/api/projects/{project}/export", params={"exportType": "JSON"})

    def snapshot(self, project: int) -> list[dict[str, Any]]:
        """A snapshot export with ``completed_by`` expanded (an object with id and email), every task."""
        made = self.call("POST", f"/api/projects/{project}/exports/", json={
            "title": "berds check", "serialization_options": {"annotations__completed_by": {"only_id": False}}})
        for _ in range(60):
            if made.get("status") == "completed":
                return self.call("GET", f"/api/projects/{project}/exports/{made['id']}/download",
                                 params={"exportType": "JSON"})
            if made.get("status") == "failed":
                break
            time.sleep(1)
            made = self.call("GET", f"/api/projects/{project}/exports/{made['id']}")
        raise SystemExit(f"Label Studio: the snapshot export of project {project} did not complete: {made}")


def berds(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "berds", *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"berds {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return " ".join(done.stdout.split())


class Checks:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, bool]] = []

    def __call__(self, what: str, want: Any, got: Any) -> bool:
        self.rows.append((what, _short(want), _short(got), want == got))
        return want == got

    def table(self, version: str) -> bool:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"berds ⇄ Label Studio {version}", title_justify="left")
        for name in ("check", "expected", "got"):
            table.add_column(name, overflow="fold", ratio=1)
        table.add_column("ok", no_wrap=True)
        for what, want, got, ok in self.rows:
            table.add_row(what, want, got, "yes" if ok else "NO")
        Console(width=80).print(table)
        return all(ok for *_, ok in self.rows)


def _short(value: Any) -> str:
    """A cell: a list by its length (the ok column says whether it matched whole), a dict as key=value."""
    if isinstance(value, list):
        return f"{len(value)} items"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _flat(labels: dict[tuple[str, str], str]) -> list[tuple[str, str, str]]:
    return sorted((pair, annotator, value) for (pair, annotator), value in labels.items())


def make_task(work: Path) -> Path:
    """The docs' task, smaller: the demo run judged by ``embedded``, 2 questions, top 2."""
    berds("eval", str(DEMO_RUN), "--judge", "embedded", "--k", "5", "--out", str(work / "eval"))
    berds("label", "sample", str(work / "eval"), "--questions", "2", "--seed", "7", "--k", "2",
          "--out", str(work / "task"))
    return work / "task"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="Label Studio's address, e.g. http://127.0.0.1:8080")
    parser.add_argument("--token", default=os.environ.get("LABEL_STUDIO_TOKEN"),
                        help="a legacy API token of an administrator (default: $LABEL_STUDIO_TOKEN)")
    parser.add_argument("--save", type=Path, help="keep Label Studio's exports in this folder")
    parser.add_argument("--keep", action="store_true", help="leave the projects and the second user in Label Studio")
    args = parser.parse_args()
    if not args.token:
        parser.error("give --token or set LABEL_STUDIO_TOKEN")

    from berds.errors import BerdsError
    from berds.trust.labelling import LabelStore, import_label_studio, open_task

    ls = LabelStudio(args.url, args.token)
    version = ls.version()
    me = ls.call("GET", "/api/current-user/whoami")["id"]
    check = Checks()
    work = Path(tempfile.mkdtemp(prefix="berds-ls-check-"))
    projects: list[int] = []
    second = None
    try:
        task = open_task(make_task(work))
        pairs = [p["pair"] for p in task.pairs]
        if len(pairs) < 7:
            raise SystemExit(f"the task has {len(pairs)} pairs; the check needs 7")
        store = LabelStore(task.db_path, task.id)
        store.put(pairs[0], "alice", "yes")
        store.put(pairs[1], "alice", "yes")
        store.put(pairs[1], "bob", "no")  # a conflict in berds: two annotators, both must come back as themselves
        store.put(pairs[2], "bob", "skip")  # not exported
        given = {(p, a): v for p, a, v, _, _ in store.rows()}

        for variant, extra in (("plain", []), ("predictions", ["--judge-predictions"])):
            out = work / f"ls-{variant}.json"
            berds("label", "export", str(task.folder), "--format", "label-studio", "--out", str(out), *extra)
            items = json.loads(out.read_text())
            config = out.with_name(out.stem + ".config.xml").read_text()
            project = ls.call("POST", "/api/projects", json={
                "title": f"berds check {variant} {time.strftime('%H%M%S')}", "label_config": config})["id"]
            projects.append(project)
            check(f"{variant}: config valid", 200, ls.status("POST", f"/api/projects/{project}/validate/",
                                                             json={"label_config": config}))
            counts = ls.call("POST", f"/api/projects/{project}/import", json=items)
            n_predictions = len(items) if extra else 0
            check(f"{variant}: imported", {"tasks": len(items), "annotations": 3, "predictions": n_predictions},
                  {"tasks": counts["task_count"], "annotations": counts["annotation_count"],
                   "predictions": counts["prediction_count"]})
            held = sorted(ls.tasks(project), key=lambda t: t["id"])
            check(f"{variant}: data kept", [i["data"] for i in items], [t["data"] for t in held])
            check(f"{variant}: annotations kept", [[a["result"] for a in i["annotations"]] for i in items],
                  [[a["result"] for a in t["annotations"]] for t in held])
            # what makes berds' meta needed: every imported annotation is the importing user's
            check(f"{variant}: imported as", f"user {me}",
                  " ".join(sorted({f"user {a['completed_by']}" for t in held for a in t["annotations"]})))
            check(f"{variant}: meta kept", [i.get("meta", {}) for i in items], [t["meta"] for t in held])
            check(f"{variant}: predictions kept",
                  [[(task.judge_id, p["result"]) for p in i.get("predictions", [])] for i in items],
                  [[(p["model_version"], p["result"]) for p in t["predictions"]] for t in held])
            # the config names $passage: a task without it is refused (Label Studio checks data against config)
            bad = [{"data": {k: v for k, v in items[0]["data"].items() if k != "passage"}}]
            check(f"{variant}: no passage refused", 400,
                  ls.status("POST", f"/api/projects/{project}/import", json=bad))
        by_pair = {t["data"]["pair"]: t["id"] for t in held}  # the project with predictions

        # annotators at work: a Yes changed to No, a second user's No, a skip, a Yes
        second = ls.call("POST", "/api/users/", json={
            "email": f"second-{int(time.time())}@example.org", "username": f"second{int(time.time())}",
            "password": "berds-check-second", "first_name": "Second", "last_name": "Annotator"})["id"]
        changed = ls.annotate(by_pair[pairs[3]], "Yes")
        ls.change(changed, "No")
        ls.annotate(by_pair[pairs[4]], "No", user=second)
        ls.annotate(by_pair[pairs[5]], None)
        ls.annotate(by_pair[pairs[6]], "Yes")
        exported = ls.export(project)
        first_export = work / "ls-export.json"
        first_export.write_text(json.dumps(exported, indent=1))
        check("export: tasks", 6, len(exported))  # the tasks with annotations (pairs 0, 1, 3-6)
        want = dict(given) | {(pairs[3], f"label-studio:{me}"): "no", (pairs[4], f"label-studio:{second}"): "no",
                              (pairs[6], f"label-studio:{me}"): "yes"}
        counts = import_label_studio(task, first_export)
        check("import: counts", {"added": 3, "same": 3, "replaced": 0, "cancelled": 1, "empty": 0}, counts)
        stored = {(p, a): v for p, a, v, _, _ in LabelStore(task.db_path, task.id).rows()}
        check("import: labels stored", _flat(want), _flat(stored))
        again = berds("label", "import", str(task.folder), str(first_export))
        check("re-import (CLI)", "0 labels added, 0 replaced, 6 already stored; 1 cancelled and 0 empty "
              "annotations left out", again)
        check("re-import: store same", _flat(want),
              sorted((p, a, v) for p, a, v, _, _ in LabelStore(task.db_path, task.id).rows()))
        snapshot = work / "ls-snapshot.json"
        snapshot.write_text(json.dumps(ls.snapshot(project), indent=1))
        check("snapshot: same labels", {"added": 0, "same": 6, "replaced": 0, "cancelled": 1, "empty": 0},
              import_label_studio(task, snapshot))

        # alice's exported Yes changed to No in Label Studio: refused, then taken with --replace
        alice = next(a["id"] for t in exported if t["data"]["pair"] == pairs[0] for a in t["annotations"])
        ls.change(alice, "No")
        second_export = work / "ls-export-changed.json"
        second_export.write_text(json.dumps(ls.export(project), indent=1))
        try:
            import_label_studio(task, second_export)
            refused = "imported"
        except BerdsError as exc:
            refused = "refused" if "alice on pair" in str(exc) else str(exc)[:40]
        check("changed: refused", "refused", refused)
        check("changed: --replace", 1, import_label_studio(task, second_export, replace=True)["replaced"])
        check("changed: alice now", "no", LabelStore(task.db_path, task.id).of("alice")[pairs[0]])
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            for name in (first_export, snapshot, second_export):
                shutil.copy(name, args.save / name.name)
            for name in ("manifest.json", "pairs.jsonl"):
                shutil.copy(task.folder / name, args.save / name)
            print(f"Label Studio's exports and the task → {args.save}")
    except BerdsError as exc:  # berds refused what Label Studio gave: a failed check, shown in the table
        check("stopped: berds refused", "", str(exc))
    finally:
        if not args.keep:
            for project in projects:
                ls.call("DELETE", f"/api/projects/{project}/", ok=(200, 204, 404))
            if second is not None:
                ls.call("DELETE", f"/api/users/{second}/", ok=(200, 204, 404, 403, 405))
        shutil.rmtree(work, ignore_errors=True)
    return 0 if check.table(version) else 1


if __name__ == "__main__":
    sys.exit(main())
