"""Labels in SQLite (``TASK/labels.sqlite``), written as they are given.

One row per (pair, annotator) in ``labels`` (``yes``, ``no`` or ``skip``, with the time it was given and where
it came from: the page or a Label Studio import). Every change is also appended to ``events`` with the value
it replaced, so an annotator's last change can be undone. The database runs in WAL mode with
``synchronous=FULL`` and each label is its own committed transaction: closing the tab or killing the server
(even ``kill -9``) loses nothing that was answered. Several annotators (and several server threads) write at
once; SQLite serialises the writes.

The store records the id of its task (the sha256 of its pairs file); a store that belongs to another task is
refused, so labels are never matched to pairs they were not given for.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Iterable

from berds.errors import BerdsError, InputError

VALUES = ("yes", "no", "skip")
MAX_ANNOTATOR = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS labels (
    pair TEXT NOT NULL, annotator TEXT NOT NULL,
    value TEXT NOT NULL CHECK (value IN ('yes', 'no', 'skip')),
    at REAL NOT NULL, source TEXT NOT NULL DEFAULT 'page',
    PRIMARY KEY (pair, annotator));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, pair TEXT NOT NULL, annotator TEXT NOT NULL,
    value TEXT NOT NULL, previous TEXT, previous_at REAL, at REAL NOT NULL, undone INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS events_by_annotator ON events (annotator, undone, id);
"""


def check_annotator(name: Any) -> str:
    """An annotator name: 1 to 64 printable characters, surrounding spaces removed."""
    if not isinstance(name, str) or not name.strip():
        raise BerdsError("an annotator name is needed (1 to 64 characters)")
    name = name.strip()
    if len(name) > MAX_ANNOTATOR or not name.isprintable():
        raise BerdsError(f"annotator names are 1 to {MAX_ANNOTATOR} printable characters, got {name[:80]!r}")
    return name


class LabelStore:
    """The labels of one task (``task_id``) in the SQLite file ``path``; made on first use."""

    def __init__(self, path: str | Path, task_id: str, *, create: bool = True):
        self.path = Path(path)
        self.task_id = task_id
        if not self.path.exists() and not create:
            raise InputError("no labels yet (the task has no labels.sqlite)", path=self.path.parent,
                             fix=f"label some pairs first: berds label serve {self.path.parent}")
        try:
            with closing(self._connect()) as db, db:
                db.executescript(_SCHEMA)
                db.execute("INSERT OR IGNORE INTO meta VALUES ('task', ?)", (task_id,))
                (owner,) = db.execute("SELECT value FROM meta WHERE key = 'task'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a readable label database ({exc})", path=self.path,
                             fix="restore it from a copy, or move it away to start the task's labels afresh") from None
        if owner != task_id:
            raise InputError(f"these labels belong to another task (id {owner[:12]}..., this task is "
                             f"{task_id[:12]}...): they were given for other pairs", path=self.path,
                             fix="put back the task folder these labels came with, or move the file away")

    def _connect(self) -> sqlite3.Connection:
        # autocommit mode: each write opens its own BEGIN IMMEDIATE (the writer lock first, so no upgrade deadlock)
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=30000")
        return db

    # ------------------------------------------------------------------ writing

    def put(self, pair: str, annotator: str, value: str, *, source: str = "page", at: float | None = None) -> None:
        """Record ``value`` (yes/no/skip) for (pair, annotator), replacing an earlier one; undoable."""
        if value not in VALUES:
            raise BerdsError(f"a label is one of {', '.join(VALUES)}, got {value!r}")
        annotator = check_annotator(annotator)
        now = time.time() if at is None else at
        with closing(self._connect()) as db, db:
            db.execute("BEGIN IMMEDIATE")
            old = db.execute("SELECT value, at FROM labels WHERE pair = ? AND annotator = ?", (pair, annotator)).fetchone()
            db.execute("INSERT OR REPLACE INTO labels VALUES (?, ?, ?, ?, ?)", (pair, annotator, value, now, source))
            db.execute("INSERT INTO events (pair, annotator, value, previous, previous_at, at) VALUES (?, ?, ?, ?, ?, ?)",
                       (pair, annotator, value, old[0] if old else None, old[1] if old else None, now))

    def undo(self, annotator: str) -> str | None:
        """Take back ``annotator``'s last change (the earlier value, if any, comes back); the pair's id, or None
        when there is nothing to undo."""
        annotator = check_annotator(annotator)
        with closing(self._connect()) as db, db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT id, pair, previous, previous_at FROM events WHERE annotator = ? AND undone = 0 "
                             "ORDER BY id DESC LIMIT 1", (annotator,)).fetchone()
            if row is None:
                return None
            event, pair, previous, previous_at = row
            if previous is None:
                db.execute("DELETE FROM labels WHERE pair = ? AND annotator = ?", (pair, annotator))
            else:
                db.execute("UPDATE labels SET value = ?, at = ? WHERE pair = ? AND annotator = ?",
                           (previous, previous_at, pair, annotator))
            db.execute("UPDATE events SET undone = 1 WHERE id = ?", (event,))
            return pair

    # ------------------------------------------------------------------ reading

    def rows(self) -> list[tuple[str, str, str, float, str]]:
        """Every label: ``(pair, annotator, value, time, source)``, oldest first."""
        with closing(self._connect()) as db:
            return db.execute("SELECT pair, annotator, value, at, source FROM labels ORDER BY at, annotator").fetchall()

    def of(self, annotator: str) -> dict[str, str]:
        """pair -> value for one annotator."""
        with closing(self._connect()) as db:
            return dict(db.execute("SELECT pair, value FROM labels WHERE annotator = ?", (annotator,)).fetchall())

    def annotators(self) -> list[str]:
        with closing(self._connect()) as db:
            return [a for (a,) in db.execute("SELECT DISTINCT annotator FROM labels ORDER BY annotator")]


def next_pair(order: Iterable[str], mine: dict[str, str]) -> str | None:
    """The next pair for an annotator: the first in task order they have not answered; once none is left,
    the first they skipped (skipped pairs come back at the end); None when every pair has yes or no."""
    skipped = None
    for pair in order:
        value = mine.get(pair)
        if value is None:
            return pair
        if value == "skip" and skipped is None:
            skipped = pair
    return skipped
