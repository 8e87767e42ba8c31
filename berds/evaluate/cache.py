"""The persistent judgement cache.

A pair judged once is never judged again — across retrievers, rerankers, k and runs. The cache is one
SQLite file in WAL mode keyed by

    (judge id, prompt version, sha256(perspective), sha256(passage text))

Each batch of verdicts is committed in one transaction, so killing an evaluation at any moment keeps
every committed batch and never leaves a half-written row; SQLite's locking lets several evaluations
share one cache file. The key holds full SHA-256 digests of both texts, so a cached answer is only ever
returned for exactly the same judge, prompt, perspective and passage.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from berds.errors import BerdsError
from berds.types import JudgePair, Passage, Verdict

SCHEMA_VERSION = 1
_COLUMNS = ("judge", "prompt", "perspective", "passage", "label", "p_yes", "raw", "detail", "created")
IDS_REDACTED = "ids_redacted"  # meta key: stored judge ids were checked for credentials (see _redact_stored_ids)


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def text_digests(texts: Iterable[str]) -> list[bytes]:
    """``text_digest`` of each text (without a Python call per text: a run has ~80k passages to hash)."""
    sha256 = hashlib.sha256
    return [sha256(text.encode("utf-8")).digest() for text in texts]


def judge_text_digests(passages: Iterable[Passage], title_position: str = "after") -> list[bytes]:
    """``text_digests(Passage.judge_texts(passages, title_position))``, hashed as built: ``Passage.judge_text_digests``."""
    return Passage.judge_text_digests(passages, title_position)


class Digests:
    """``text_digest`` memoised: each distinct text is hashed once however many pairs it is in."""

    def __init__(self) -> None:
        self._seen: dict[str, bytes] = {}

    def __call__(self, text: str) -> bytes:
        d = self._seen.get(text)
        if d is None:
            d = self._seen[text] = text_digest(text)
        return d


def row_verdict(row: tuple[int, float | None, str | None, str]) -> Verdict:
    """A ``Verdict`` from a cached row ``(label, p_yes, detail JSON, raw)`` (``JudgementCache.lookup`` with raw)."""
    label, p_yes, detail, raw = row
    return Verdict(bool(label), p_yes, raw, json.loads(detail) if detail else None)


def default_cache_path() -> Path:
    from berds.io import home_dir

    return home_dir() / "judgements.sqlite"


class JudgementCache:
    """Verdicts keyed by (judge id, prompt version, perspective hash, passage hash)."""

    def __repr__(self) -> str:
        return f"JudgementCache({str(self.path)!r})"

    def __init__(self, path: str | Path | None = None, *, timeout: float = 120.0):
        self.path = Path(path) if path is not None else default_cache_path()
        if path is None and not self.path.exists():  # (an explicit --cache says so in the CLI's option check)
            import sys

            print(f"note: starting the default judgement cache at {self.path}; verdicts are kept there and reused "
                  "(--cache FILE for another, --no-cache for none)", file=sys.stderr)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables - {"meta", "judgements"}:  # another program's database: never add berds' tables to it
                self._db.close()
                raise BerdsError(f"{self.path}: an SQLite database of another program (tables "
                                 f"{', '.join(sorted(tables)[:5])}), not a berds judgement cache — give --cache a "
                                 "new file name or a file berds wrote")
            if "judgements" in tables:  # a table of that name with other columns: not one berds wrote
                columns = [r[1] for r in self._db.execute("PRAGMA table_info(judgements)")]
                if columns != list(_COLUMNS):
                    self._db.close()
                    raise BerdsError(f"{self.path}: its judgements table has columns {', '.join(columns)[:120]}, not "
                                     "those of a berds judgement cache — give --cache a new file name")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(
                """
                CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
                CREATE TABLE IF NOT EXISTS judgements (
                    judge TEXT NOT NULL,
                    prompt TEXT NOT NULL,
                    perspective BLOB NOT NULL,
                    passage BLOB NOT NULL,
                    label INTEGER NOT NULL,
                    p_yes REAL,
                    raw TEXT NOT NULL,
                    detail TEXT,
                    created REAL NOT NULL,
                    PRIMARY KEY (judge, prompt, perspective, passage)
                ) WITHOUT ROWID;
                """
            )
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif str(row[0]).strip() != str(SCHEMA_VERSION):
                raise BerdsError(f"{self.path}: judgement cache schema {row[0]!r:.40}, this berds reads {SCHEMA_VERSION} "
                                 "— give --cache a new file name (or --no-cache)")
            if self._db.execute("SELECT 1 FROM meta WHERE key=?", (IDS_REDACTED,)).fetchone() is None:
                self._redact_stored_ids()
        except sqlite3.DatabaseError as exc:
            import os

            # A cache on a read-only mount or without write permission failed as "unable to open database
            # file — is it a berds cache file?": the file was fine, the write access was missing.
            folder = self.path.parent
            if not os.access(folder, os.W_OK) or (self.path.exists() and not os.access(self.path, os.W_OK)):
                raise BerdsError(f"{self.path}: cannot open the judgement cache ({exc}): the file or its folder is "
                                 "not writable, and berds stores verdicts there (SQLite's write-ahead log needs the "
                                 "folder too) — make both writable, copy the cache to a writable folder, or pass "
                                 "--no-cache") from None
            raise BerdsError(f"{self.path}: cannot open the judgement cache ({exc}) — is it a berds cache file?") from None

    def _redact_stored_ids(self) -> None:
        """Once per cache file: judge ids written by a berds that kept credentials in them (a ``base_url`` with
        ``user:KEY@``) are rewritten as today's berds names the same judge, so the key leaves the file and the
        verdicts stay usable. Where both ids hold a verdict for a pair, the redacted id's (newer) one is kept.
        Freed pages are overwritten (``secure_delete``) and the write-ahead log truncated."""
        from berds.llm.secrets import redact_text

        stored = self._db.execute("SELECT DISTINCT judge, prompt FROM judgements").fetchall()
        changed = [(judge, prompt, *redacted) for judge, prompt in stored
                   if (redacted := (redact_text(judge), redact_text(prompt))) != (judge, prompt)]
        secure_delete = self._db.execute("PRAGMA secure_delete").fetchone()[0]  # (the default differs by platform)
        try:
            if changed:
                self._db.execute("PRAGMA secure_delete=ON")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for judge, prompt, new_judge, new_prompt in changed:
                    self._db.execute("UPDATE OR IGNORE judgements SET judge=?, prompt=? WHERE judge=? AND prompt=?",
                                     (new_judge, new_prompt, judge, prompt))
                    self._db.execute("DELETE FROM judgements WHERE judge=? AND prompt=?", (judge, prompt))
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, '1')", (IDS_REDACTED,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if changed:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.execute(f"PRAGMA secure_delete={int(secure_delete)}")
        except sqlite3.OperationalError as exc:  # a cache this user may only read
            if changed:
                import sys

                print(f"warning: {self.path} holds {len(changed)} judge id(s) with credentials in them, written by "
                      f"an older berds, and could not be rewritten ({exc}); open it once with write access to "
                      "remove them", file=sys.stderr)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _reading(self, doing: str) -> Iterator[None]:
        """SQLite's errors after the file opened (a page damaged past the header, a lock held past the timeout,
        a full disk) as one line naming the cache file, not a traceback from inside sqlite3."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                why = "another process held it locked for longer than the timeout"
            elif "full" in text:
                why = "the disk is full"
            else:
                why = "the file is damaged — delete it (its verdicts are judged again) or give --cache another file"
            raise BerdsError(f"{self.path}: {doing} the judgement cache failed ({text}): {why}") from None

    def __enter__(self) -> "JudgementCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- lookups ---------------------------------------------------------------------------------

    def lookup(self, judge_id: str, prompt_version: str, perspectives: Iterable[bytes], *, with_raw: bool = True
               ) -> dict[bytes, tuple[tuple, ...]]:
        """Every verdict cached for each perspective digest, as columns — the bulk path ``evaluate_run`` uses.

        Returns ``{perspective digest: (passage digests, labels, p_yes values, detail JSONs[, raws])}`` (empty
        tuples where nothing is cached); ``raw``, the judge's text, only ``with_raw``. Without it — what metrics
        read — a detail is returned only where it mentions ``unparsed`` (the one thing metrics ask of it; a debate
        judge keeps whole transcripts there, which are then not read into Python). One query per perspective (a
        perspective belongs to one question, so these are the passages runs retrieved for that question: a few
        hundred at most in practice), in one read snapshot; rows come back as columns without a Python step per
        row, so the caller can place a question's verdicts with numpy (benchmarks/bench_eval_cache.py: level with
        one bulk SELECT of the same verdicts). Rows of passages the caller did not ask for (another run's) are
        returned too: the caller's positions of its passages skip them.
        """
        detail = "detail, raw" if with_raw else "iif(instr(detail, 'unparsed'), detail, NULL)"
        query = f"SELECT passage, label, p_yes, {detail} FROM judgements WHERE judge=? AND prompt=? AND perspective=?"
        width = 5 if with_raw else 4
        out: dict[bytes, tuple[tuple, ...]] = {}
        with self._lock, self._reading("reading"):
            cur = self._db.cursor()
            cur.execute("BEGIN")  # one read snapshot for the whole lookup
            try:
                for persp in perspectives:
                    if persp not in out:
                        rows = cur.execute(query, (judge_id, prompt_version, persp)).fetchall()
                        out[persp] = tuple(zip(*rows)) if rows else ((),) * width
            finally:
                if self._db.in_transaction:
                    cur.execute("COMMIT")
        return out

    def get_many(self, judge_id: str, prompt_version: str, pairs: Sequence[JudgePair]) -> list[Verdict | None]:
        """Cached verdicts for ``pairs`` (None where missing), in order."""
        if not pairs:
            return []
        digest = Digests()
        keys = [(digest(p.perspective), digest(p.passage)) for p in pairs]
        found = {persp: dict(zip(passages, zip(labels, p_yes, details, raws)))
                 for persp, (passages, labels, p_yes, details, raws)
                 in self.lookup(judge_id, prompt_version, (persp for persp, _ in keys)).items()}
        return [None if (row := found[persp].get(passage)) is None else row_verdict(row) for persp, passage in keys]

    def put_many(
        self, judge_id: str, prompt_version: str, pairs: Sequence[JudgePair], verdicts: Sequence[Verdict]
    ) -> None:
        """Store verdicts (replacing existing ones) in a single transaction."""
        if len(pairs) != len(verdicts):
            raise ValueError(f"{len(pairs)} pairs but {len(verdicts)} verdicts")
        now = time.time()
        rows = [
            (
                judge_id, prompt_version, text_digest(p.perspective), text_digest(p.passage),
                int(bool(v.label)), None if v.p_yes is None else float(v.p_yes), v.raw,
                json.dumps(v.detail, ensure_ascii=False) if v.detail else None, now,
            )
            for p, v in zip(pairs, verdicts)
        ]
        with self._lock, self._reading("writing to"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO judgements VALUES (?,?,?,?,?,?,?,?,?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # (SQLite may have rolled back already; ROLLBACK would hide the error)
                    self._db.execute("ROLLBACK")
                raise

    def check_weights(self, judge_id: str, weights: Mapping[str, tuple[str, str]]) -> None:
        """Refuse to add verdicts of hub weights other than those the cached verdicts of ``judge_id`` came from.

        ``weights`` is ``{repo: (option that pins it, commit)}`` for the models the judge loaded without pinning a
        commit (``berds.llm.shared.unpinned_hub_weights``): their id names the repo only, so a repo updated on the
        hub would have its new verdicts mixed with the old ones under one id. The first commits seen are recorded
        in the cache's meta table (older berds versions ignore the rows)."""
        if not weights:
            return
        key = f"weights\x1f{judge_id}"
        with self._lock, self._reading("writing to"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
                try:
                    recorded = json.loads(row[0]) if row else {}
                    if not isinstance(recorded, dict):
                        raise ValueError
                except ValueError:
                    recorded = {}
                changed = {repo: (option, recorded[repo], commit) for repo, (option, commit) in weights.items()
                           if repo in recorded and recorded[repo] != commit}
                if changed:
                    repo, (option, then, now) = next(iter(changed.items()))
                    raise BerdsError(
                        f"judge {judge_id!r}: {repo} is now at commit {now[:12]}, but the verdicts cached for this judge "
                        f"came from commit {then[:12]}; adding to them would mix two models' verdicts under one id (it "
                        f"names the repo, not a commit) — pin one with -o {option}=COMMIT ({then} for the old weights, "
                        f"{now} for the new): its verdicts are then judged under an id that names the commit")
                merged = {**recorded, **{repo: commit for repo, (_, commit) in weights.items()}}
                if merged != recorded:
                    self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(merged, sort_keys=True)))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def count(self, judge_id: str | None = None) -> int:
        with self._lock, self._reading("reading"):
            if judge_id is None:
                return self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]
            return self._db.execute("SELECT COUNT(*) FROM judgements WHERE judge=?", (judge_id,)).fetchone()[0]

    def judges(self) -> list[tuple[str, str, int]]:
        """``(judge id, prompt version, number of cached verdicts)`` for everything in the cache."""
        with self._lock, self._reading("reading"):
            return [tuple(r) for r in self._db.execute(
                "SELECT judge, prompt, COUNT(*) FROM judgements GROUP BY judge, prompt ORDER BY judge, prompt"
            )]


def unique_pairs(pairs: Iterable[JudgePair]) -> list[JudgePair]:
    """Pairs with duplicates (same perspective and passage text) removed, first occurrence kept."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in pairs:
        key = (p.perspective, p.passage)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
