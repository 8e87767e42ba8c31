"""What every corpus build shares: the report (read / skipped and why / written), progress, size estimate.

A builder turns its source into a stream of ``(passage, group)`` pairs and hands it to
``write_passages``, which writes the store (resuming an interrupted build when asked), keeps the
progress bar moving and fills the ``BuildReport`` whose table ends every build.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from berds.corpora.docstore import DuplicatePassageIdError, PassageRefusedError, PassageStore, PassageStoreWriter, human_bytes, estimate_store_size
from berds.errors import BerdsError, InputError
from berds.types import Passage


@dataclass
class BuildReport:
    """Counts of one build. ``skipped`` maps a reason ("redirect", "empty text", "http 404", ...) to a count."""

    kind: str
    out: str
    documents_read: int = 0
    documents_used: int = 0
    skipped: Counter = field(default_factory=Counter)
    passages_written: int = 0
    passages_resumed: int = 0
    input_bytes: int = 0
    seconds: float = 0.0
    fingerprint: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)  # per-item failures when a builder lists them

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] += n

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "documents_read": self.documents_read, "documents_used": self.documents_used,
            "skipped": dict(self.skipped.most_common()), "passages_written": self.passages_written,
            "passages_resumed": self.passages_resumed, "input_bytes": self.input_bytes,
            "seconds": round(self.seconds, 2), **self.extra,
        }

    def table(self):
        """A rich table: documents read, used, skipped (one row per reason), passages written, time."""
        from rich.table import Table

        t = Table(title=f"corpus build: {self.kind} -> {self.out}", show_header=True, header_style="bold")
        t.add_column("")
        t.add_column("count", justify="right")
        t.add_row("documents read", f"{self.documents_read:,}")
        t.add_row("documents used", f"{self.documents_used:,}")
        for reason, n in self.skipped.most_common():
            t.add_row(f"  skipped: {reason}", f"{n:,}")
        t.add_row("passages written", f"{self.passages_written:,}")
        if self.passages_resumed:
            t.add_row("  of which kept from the interrupted build", f"{self.passages_resumed:,}")
        for key, value in self.extra.items():
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                t.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
        # which record fields were read (detected from each file's first record), under the table: a row this
        # wide squeezed the labels into wrapping in 80 columns
        chosen = Counter(" ".join(f"{role}={name}" for role, name in roles.items() if name) + (" (no id: FILE:LINE)"
                                                                                             if not roles.get("id") else "")
                         for roles in (self.extra.get("jsonl_fields") or {}).values())
        if chosen:
            t.caption = "fields read: " + "; ".join(f"{fields} ({n} file{'s' * (n != 1)})" for fields, n in sorted(chosen.items()))
        # passages this run wrote: those kept from an interrupted build took no time here
        rate = (self.passages_written - self.passages_resumed) / self.seconds if self.seconds else 0.0
        t.add_row("time", f"{self.seconds:,.1f} s ({rate:,.0f} passages/s)")
        if self.fingerprint:
            t.add_row("fingerprint", self.fingerprint[:16])
        return t


def RateColumn(unit: str = "items"):
    """A rich progress column showing the task's completion rate ("12.3 pages/s")."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class _Rate(ProgressColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.1f} {unit.split()[-1]}/s" if speed else f"- {unit.split()[-1]}/s", style="progress.data.speed")

    return _Rate()


class BuildProgress:
    """A rich progress bar over input bytes (when known) showing documents and passages with rates.

    ``position`` is a callable returning how many input bytes have been consumed so far (e.g. the
    ``tell()`` of the compressed file), so the bar and ETA follow the real input even through bz2.
    Updates are throttled (a redraw costs far more than a passage).
    """

    def __init__(self, description: str, *, total_bytes: int | None = None, enabled: bool = True,
                 console: Any = None):
        self.description, self.total_bytes, self.enabled = description, total_bytes, enabled
        self.console = console
        self.position: Callable[[], int] | None = None
        self._progress = None
        self._task = None
        self._last = 0.0
        self._start = time.monotonic()

    def __enter__(self) -> "BuildProgress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            # fits 80 columns: the documents count and input bytes are in the summary table at the end
            columns = [TextColumn("[bold]{task.description}")]
            if self.total_bytes:
                columns += [BarColumn(bar_width=12), TaskProgressColumn(), TimeRemainingColumn()]
            else:
                columns += [TimeElapsedColumn()]
            columns += [TextColumn("{task.fields[passages]:,} passages {task.fields[rate]:,.0f}/s")]
            self._progress = Progress(*columns, console=self.console or Console(stderr=True), transient=False)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total_bytes or None, docs=0, passages=0, rate=0.0)
        return self

    def update(self, docs: int, passages: int, *, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        fields: dict[str, Any] = {"docs": docs, "passages": passages, "rate": passages / max(now - self._start, 1e-9)}
        if self.position is not None:
            fields["completed"] = self.position()
        self._progress.update(self._task, **fields)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            if self.total_bytes and exc[0] is None:
                self._progress.update(self._task, completed=self.total_bytes)
            self._progress.stop()


def check_disk_and_announce(out: Path, *, input_bytes: int, avg_passage_bytes: float, console=None,
                            compression: str = "none", big: int = 200_000_000) -> dict[str, int]:
    """Estimate the store's size from the input size; print it for big builds; refuse when the disk is too small."""
    n_est = int(input_bytes / max(avg_passage_bytes, 1.0))
    est = estimate_store_size(n_est, avg_passage_bytes, compression=compression)
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    free = shutil.disk_usage(parent).free
    if input_bytes >= big and console is not None:
        console.print(
            f"estimate: ~{n_est:,} passages -> ~{human_bytes(est['disk_bytes'])} on disk "
            f"(free: {human_bytes(free)}), ~{human_bytes(est['writer_memory_bytes'])} writer memory", highlight=False,
            markup=False)
    if est["disk_bytes"] > free:
        raise BerdsError(
            f"not enough disk for {out}: the store needs ~{human_bytes(est['disk_bytes'])} but only {human_bytes(free)} is free "
            "— free some space or choose another --out"
        )
    return est


HEAD_BYTES = 1 << 16
_CHUNK = 1 << 20


def _head_sha256(path: str | os.PathLike, nbytes: int) -> str:
    """SHA-256 of the first ``nbytes`` bytes of ``path``, read in 1 MB chunks (memory stays flat)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while nbytes > 0 and (chunk := f.read(min(_CHUNK, nbytes))):
            digest.update(chunk)
            nbytes -= len(chunk)
    return digest.hexdigest()


def build_identity(metadata: dict | None) -> dict | None:
    """What a resumed build must share with the interrupted one: the same options, and inputs that begin
    with the same bytes (a completed download of a truncated file passes; another file does not —
    resuming with it would mix two corpora in one store). Each input's whole content is hashed as it is
    when the build starts; the hash of its first 64 KiB is a fast first test."""
    source = (metadata or {}).get("source") or {}
    paths = source.get("paths") or ([source["path"]] if source.get("path") else [])
    if not paths:
        return None
    inputs = []
    for p in paths:
        size = Path(p).stat().st_size
        head = min(size, HEAD_BYTES)
        inputs.append({"path": str(p), "bytes": size, "head_bytes": head, "head_sha256": _head_sha256(p, head),
                       "sha256": _head_sha256(p, size)})
    return {"kind": source.get("kind"), "inputs": inputs, "options": (metadata or {}).get("options")}


def _same_start(was: dict, now: dict) -> bool:
    """Whether the current input ``now`` begins with the bytes the interrupted build recorded in ``was``."""
    if now["bytes"] < was["head_bytes"] or _head_sha256(now["path"], was["head_bytes"]) != was["head_sha256"]:
        return False
    if "sha256" not in was:  # a checkpoint written before whole-file hashes: the head check is all there is
        return True
    if now["bytes"] < was["bytes"]:
        return False
    if now["bytes"] == was["bytes"] and "sha256" in now:
        return now["sha256"] == was["sha256"]
    return _head_sha256(now["path"], was["bytes"]) == was["sha256"]


def resume_problem(recorded: dict | None, current: dict | None) -> str | None:
    """Why the interrupted build (``recorded``) cannot be resumed with ``current`` inputs (None when it can)."""
    if recorded is None or current is None:
        return None
    if recorded.get("kind") != current.get("kind") or recorded.get("options") != current.get("options"):
        return "the interrupted build used other options or another kind of input"
    old, new = recorded.get("inputs", []), current.get("inputs", [])
    if len(old) != len(new):
        return f"the interrupted build read {len(old)} input files, this one {len(new)}"
    for was, now in zip(old, new):
        if not _same_start(was, now):
            return f"{now['path']} is not the input the interrupted build read ({was['path']}: other contents)"
    return None


def _empty_build_error(report: BuildReport, metadata: dict | None, out: Any) -> InputError:
    """Why a build wrote no passages, naming its input (when it has one file) and what was skipped."""
    source = (metadata or {}).get("source") or {}
    paths = source.get("paths") or ([source["path"]] if source.get("path") else [])
    n = report.documents_read
    skipped = ", ".join(f"{reason} {k:,}" for reason, k in report.skipped.most_common())
    what = f"{n:,} document{'s' * (n != 1)} read" + (f", skipped: {skipped}" if skipped else "")
    kept = "left as it was" if Path(out).exists() else "not created"
    return InputError(f"no passages to store ({what}); {out} is {kept}", path=paths[0] if len(paths) == 1 else None,
                      fix="check the input: every document in it was empty or skipped")


def write_passages(
    stream: Iterable[tuple[Passage, str | None]],
    out: str | os.PathLike,
    report: BuildReport,
    *,
    progress: BuildProgress | None = None,
    overwrite: bool = False,
    resume: bool = False,
    metadata: dict | None = None,
    shard_size: int = 1_000_000,
    compression: str = "none",
    locate: Callable[[], dict] | None = None,
    allow_empty: bool = False,
) -> PassageStore:
    """Write ``(passage, group)`` pairs to a store at ``out``, filling ``report`` as it goes.

    A build that yields no passage at all is refused (``allow_empty`` lets it through): an empty store
    would index and search without complaint, and with ``overwrite`` it would replace a good one.

    With ``resume=True`` the finished shards of an interrupted build of ``out`` are kept and the first
    ``writer.resumed_passages`` items of ``stream`` (which must be deterministic) are skipped.
    ``locate()`` (optional) says where the passage being added came from, as ``InputError`` keywords
    (``path``, ``line``, ``record``, ``fix``): a repeated passage id is then reported there.
    """
    start = time.monotonic()
    identity = build_identity(metadata)
    writer = PassageStoreWriter(out, shard_size=shard_size, overwrite=overwrite, metadata=metadata,
                                compression=compression, resume=resume, identity=identity,
                                resume_check=lambda recorded: resume_problem(recorded, identity))
    with writer:
        skip = writer.resumed_passages
        report.passages_resumed = skip
        iterator: Iterator[tuple[Passage, str | None]] = iter(stream)
        if skip:
            for _ in islice(iterator, skip):
                pass
        for passage, group in iterator:
            try:
                writer.add(passage, group=group)
            except PassageRefusedError as exc:  # named where it came from: the input file and line
                if locate is None:
                    raise
                where = locate()
                if isinstance(exc, DuplicatePassageIdError):
                    where = {"fix": f"passage ids must be unique within a store ({out})", **where}
                else:  # (the builder's fix is about repeated ids)
                    where["fix"] = exc.fix
                raise InputError(exc.what, **where) from None
            if progress is not None:
                progress.update(report.documents_read, len(writer))
        if not len(writer) and not allow_empty:
            writer.abort()  # (nothing committed: the folder goes)
            raise _empty_build_error(report, metadata, out)
        report.passages_written = len(writer)
        report.seconds = time.monotonic() - start
        report.fingerprint = writer.fingerprint
        writer.metadata = {**writer.metadata, "report": report.as_dict(), "documents": report.documents_used,
                           **({"inputs": identity["inputs"]} if identity else {})}
    if progress is not None:
        progress.update(report.documents_read, report.passages_written, force=True)
    return PassageStore.open(out)
