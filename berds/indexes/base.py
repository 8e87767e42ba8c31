"""Self-describing index folders.

Every index berds builds is a folder with a small ``meta.json`` written *last* (its presence marks a
finished index)::

    {"kind": "index", "type": "bm25" | "dense", "format": 1,
     "corpus": {"path": ..., "fingerprint": ..., "passages": ..., "groups": ...},
     ... type-specific fields: analyzer and Lucene version (bm25); encoder spec, dimension,
     FAISS factory (dense) ...,
     "created": ..., "versions": {...}}

Loading reads ``meta.json`` and checks the type; a retriever compares the corpus fingerprint with the
passage store it reads texts from, and a dense retriever compares the encoder, so an index is never
silently searched with the wrong corpus or the wrong model.

Rebuilding is an explicit choice (``overwrite``): ``"never"`` refuses when a finished index exists,
``"missing"`` (default) keeps a finished index built from the same corpus with the same settings and
resumes an unfinished one, ``"always"`` rebuilds from scratch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from berds.errors import BerdsError, InputError
from berds.io import empty_folder, lock_folder, new_manifest, read_json, write_json
from berds.runs import fields_intact, id_flaw, one_token

INDEX_META = "meta.json"
BUILDING_MARKER = ".building.json"  # settings of a build in progress; removed when meta.json is written
INDEX_KIND = "index"
INDEX_FORMAT = 1
OVERWRITE_MODES = ("never", "missing", "always")


def open_store(corpus: Any) -> Any:
    """A ``PassageStore`` from a store object or a path (the passage store is the corpus of an index)."""
    from berds.corpora.docstore import PassageStore

    if isinstance(corpus, PassageStore):
        return corpus
    if isinstance(corpus, (str, os.PathLike)):
        return PassageStore.open(corpus)
    if hasattr(corpus, "fingerprint") and hasattr(corpus, "iter_batches"):
        return corpus  # anything store-like (duck-typed)
    raise BerdsError(f"expected a passage store or its folder, got {type(corpus).__name__}")


def whole_store_batches(store: Any, batch_size: int, *, utf8: bool = False) -> Any:
    """``store.iter_batches`` (or ``iter_utf8_batches``) for a read of the whole store that builds something:
    a ``PassageStore`` checks each record's CRC-32 as it reads it (store format 3; a format-2 store recomputes its
    fingerprint on the way and refuses the last batch) and that no record is missing, so no index or encoding is
    finished from damaged text. Duck-typed stores are read as they are."""
    from berds.corpora.docstore import PassageStore

    read = store.iter_utf8_batches if utf8 else store.iter_batches
    return read(batch_size, verify=True) if isinstance(store, PassageStore) else read(batch_size)


def corpus_record(store: Any) -> dict[str, Any]:
    """What an index or run records about its corpus: path, fingerprint, size, number of groups."""
    return {
        "path": str(Path(store.path).resolve()) if getattr(store, "path", None) else None,
        "fingerprint": store.fingerprint,
        "passages": len(store),
        "groups": len(store.groups()),
    }


def is_index(path: str | os.PathLike) -> bool:
    p = Path(path) / INDEX_META
    if not p.is_file():
        return False
    try:
        meta = read_json(p)
    except BerdsError:
        return False
    return isinstance(meta, dict) and meta.get("kind") == INDEX_KIND


def read_index_meta(path: str | os.PathLike, expect_type: str | None = None) -> dict[str, Any]:
    """``meta.json`` of a finished index; errors say what is wrong and how to build one."""
    folder = Path(path)
    build_hint = f"build one with `berds index {expect_type or 'bm25|dense'} CORPUS --out {folder}`"
    if not folder.exists():
        raise InputError("no index here (folder not found)", path=folder, fix=build_hint)
    meta_path = folder / INDEX_META
    if not meta_path.is_file():
        from berds.corpora.docstore import is_passage_store

        if is_passage_store(folder):  # the corpus given where its index goes
            raise InputError("is a passage store (a corpus), not an index", path=folder,
                             fix=f"build its index with `berds index {expect_type or 'bm25|dense'} {folder} --out "
                                 "INDEX_FOLDER` and pass that folder (the store goes to --corpus)")
        unfinished = (folder / BUILDING_MARKER).is_file()
        why = "unfinished index (no meta.json yet)" if unfinished else "not an index folder (no meta.json)"
        fix = "re-run the same `berds index ...` command to resume it" if unfinished else build_hint
        raise InputError(why, path=folder, fix=fix)
    try:
        meta = read_json(meta_path)
    except InputError as exc:  # (written atomically: damaged from outside, so nothing in it can be trusted)
        what = str(exc).removesuffix(f" — {exc.fix}") if exc.fix else str(exc)
        raise InputError(f"damaged index ({what})", fix=f"remove {folder} and {build_hint}") from None
    if not isinstance(meta, dict) or meta.get("kind") != INDEX_KIND:
        raise InputError("meta.json does not describe a berds index", path=meta_path, fix=build_hint)
    if meta.get("format") != INDEX_FORMAT:
        raise InputError(f"index format {meta.get('format')!r} is not supported (expected {INDEX_FORMAT})",
                         path=meta_path, fix="rebuild the index with this version of berds")
    if expect_type and meta.get("type") != expect_type:
        raise InputError(f"this is a {meta.get('type')!r} index, expected a {expect_type!r} index",
                         path=folder, fix=f"pass a {expect_type} index (see its meta.json 'type')")
    return meta


def write_index_meta(path: str | os.PathLike, index_type: str, **fields: Any) -> dict[str, Any]:
    """Write ``meta.json`` (last step of a build) and return it."""
    fields = {k: v for k, v in fields.items() if k not in ("type", "format")}
    meta = new_manifest(INDEX_KIND, type=index_type, format=INDEX_FORMAT, **fields)
    write_json(Path(path) / INDEX_META, meta)
    return meta


def rebuild_command(folder: str | os.PathLike, meta: Mapping[str, Any] | None) -> str:
    """The command that rebuilds the index in ``folder`` from scratch, from what its ``meta.json`` records."""
    meta = meta or {}
    kind = meta.get("type") or "bm25|dense"
    corpus = (meta.get("corpus") or {}).get("path") or "CORPUS"
    extra = ""
    if kind == "dense":
        extra = f" --encoder {(meta.get('encoder') or {}).get('name') or 'NAME'}"
        faiss_kind = (meta.get("faiss") or {}).get("kind")
        if faiss_kind and faiss_kind != "flat":
            extra += f" --faiss {faiss_kind}"
    elif meta.get("contents") and meta.get("contents") != "title+text":
        extra = f" --contents {meta['contents']}"
    return f"berds index {kind} {corpus}{extra} --out {folder} --overwrite always"


def damaged_index(file: str | os.PathLike, why: str, *, folder: str | os.PathLike, meta: Mapping[str, Any] | None) -> InputError:
    """The error for a damaged file inside a finished index: names the file and the command that rebuilds it."""
    return InputError(f"damaged index file ({why})", path=file, fix=f"rebuild the index: {rebuild_command(folder, meta)}")


def check_same_corpus(meta: Mapping[str, Any], store: Any, *, index_path: str | os.PathLike) -> None:
    """Refuse to read passages for an index from a store with a different fingerprint."""
    want = meta.get("corpus", {}).get("fingerprint")
    if want and want != store.fingerprint:
        raise BerdsError(
            f"index {index_path} was built from corpus {meta['corpus'].get('path')} (fingerprint {want[:12]}), "
            f"but the passage store {getattr(store, 'path', '?')} has fingerprint {store.fingerprint[:12]} — "
            "pass the corpus the index was built from (--corpus), or rebuild the index"
        )


def open_index_corpus(meta: Mapping[str, Any], corpus: Any, *, index_path: str | os.PathLike) -> Any:
    """The passage store for an index: ``corpus`` when given, else the path recorded in ``meta.json``."""
    if corpus is None:
        recorded = meta.get("corpus", {}).get("path")
        if not recorded:
            raise BerdsError(f"index {index_path} records no corpus path — pass --corpus")
        if not Path(recorded).exists():
            raise InputError(f"the corpus this index was built from is not at {recorded} any more", path=index_path,
                             fix="pass its new location with --corpus (the fingerprint is checked)")
        corpus = recorded
    store = open_store(corpus)
    check_same_corpus(meta, store, index_path=index_path)
    return store


def prepare_index_folder(out: str | os.PathLike, settings: Mapping[str, Any], *, overwrite: str,
                         redone: Sequence[str] = ()) -> bool:
    """Get ``out`` ready for a build; return False when a finished, identical index is already there.

    ``settings`` are the build's identity (type, corpus fingerprint, analyzer/encoder, FAISS choice). A
    finished index whose ``meta.json`` has the same values is kept under ``overwrite="missing"``; an
    unfinished build of the same settings (marked by ``.building.json``) is resumed. ``redone`` names
    settings of a step every run does from scratch (the FAISS index over the embeddings): an unfinished
    build that differs only in those is resumed too. A folder holding anything else is never cleared.
    """
    if overwrite not in OVERWRITE_MODES:
        raise BerdsError(f"overwrite must be one of {', '.join(OVERWRITE_MODES)}, got {overwrite!r}")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise InputError("exists and is a file, not an index folder", path=folder, fix="choose another --out")
    # The folder is made and locked before anything in it is read or cleared: a build that locked only after
    # _prepare could clear (--overwrite always) the files of another build that had made the folder meanwhile.
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock_index_folder(folder)
    try:
        building = _prepare(folder, settings, overwrite, redone)
    except BaseException:
        release_index_folder(folder)
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # (a refused build leaves no empty folder behind)
        raise
    if not building:
        release_index_folder(folder)
    return building


# Index folders this process is building, each held by an exclusive lock on an open descriptor. A second build
# of the same --out at once took the first one's .building.json for an interrupted build and cleared its files
# (a Java traceback in one, an index the count check had to catch in the other). Per process and re-entrant: a
# build that failed in this process may be tried again in it.
_BUILD_LOCKS: dict[str, int] = {}


def lock_index_folder(folder: Path) -> None:
    """Hold ``folder`` for this process's build; refuse it when another process is building there."""
    key = str(folder.resolve())
    if key in _BUILD_LOCKS:
        return
    fd = lock_folder(folder, what="berds index build")
    if fd is not None:
        _BUILD_LOCKS[key] = fd


def release_index_folder(folder: Path) -> None:
    fd = _BUILD_LOCKS.pop(str(Path(folder).resolve()), None)
    if fd is not None:
        os.close(fd)


def releases_on_failure(build: Any) -> Any:
    """Decorate ``build(corpus, out, ...)`` so a build that raises lets go of ``out`` for other processes."""
    import functools

    @functools.wraps(build)
    def wrapper(corpus: Any, out: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        try:
            return build(corpus, out, *args, **kwargs)
        except BaseException:
            release_index_folder(Path(out))
            raise

    return wrapper


def _prepare(folder: Path, settings: Mapping[str, Any], overwrite: str, redone: Sequence[str] = ()) -> bool:
    marker = folder / BUILDING_MARKER
    settings = dict(settings)
    if (folder / INDEX_META).is_file():
        meta = read_index_meta(folder)
        if overwrite == "always":
            empty_folder(folder)  # (only a folder holding a berds index or an unfinished build)
        else:
            differs = {k: (meta.get(k), v) for k, v in settings.items() if meta.get(k) != v}
            if overwrite == "never" or differs:
                what = "" if not differs else " with different settings (" + ", ".join(
                    f"{k}: {_short(old)} -> {_short(new)}" for k, (old, new) in list(differs.items())[:3]) + ")"
                raise InputError(f"an index already exists here{what}", path=folder,
                                 fix="pass --overwrite always to rebuild it, or choose another --out")
            return False
    elif marker.is_file():
        started = read_json(marker)
        if overwrite == "always" or not _wrote_anything(folder, marker):
            # (a build refused before its first shard, e.g. an encoder option the model cannot take, has nothing
            # to keep: the corrected command starts over instead of being told to pass --overwrite always)
            empty_folder(folder)  # (only a folder holding a berds index or an unfinished build)
        elif differing := sorted(_differing(started, json.loads(json.dumps(settings))) - set(redone)):
            raise InputError(f"an unfinished index build with different settings ({', '.join(differing)}) is here",
                             path=folder, fix="pass --overwrite always to start over, or choose another --out")
        else:  # resumed: a killed build's half-written temporary files would stay in the finished index
            for stale in [*folder.glob(".*.tmp"), *folder.glob("*/.*.tmp")]:
                stale.unlink(missing_ok=True)
    elif folder.is_dir() and any(folder.iterdir()):
        from berds.corpora.docstore import is_passage_store

        what = "is a passage store (a corpus), not an index" if is_passage_store(folder) else \
            "exists and holds files that are not a berds index"  # (--out given the corpus folder)
        raise InputError(what, path=folder, fix="choose another (new or empty) --out folder")
    write_json(marker, settings)
    return True


def index_meta_sha256(folder: str | os.PathLike) -> str:
    """The SHA-256 of an index's ``meta.json``, written last by each build: which build of the folder was searched
    (recorded in run manifests; a rebuild at the same path, even with the same settings, changes it)."""
    from berds.io import sha256_file

    return sha256_file(Path(folder) / INDEX_META)


def _wrote_anything(folder: Path, marker: Path) -> bool:
    """Whether an unfinished build in ``folder`` wrote anything besides its marker (empty sub-folders do not count)."""
    return any(p != marker and not p.is_dir() for p in folder.rglob("*"))


def _differing(a: Any, b: Any) -> set[str]:
    """Keys whose values differ between two settings dicts (everything, when either is not a dict)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return {"*"}
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def finish_index_folder(out: str | os.PathLike, index_type: str, **fields: Any) -> dict[str, Any]:
    """Write ``meta.json`` (the last step of a build) and drop the unfinished-build marker."""
    meta = write_index_meta(out, index_type, **fields)
    (Path(out) / BUILDING_MARKER).unlink(missing_ok=True)
    release_index_folder(Path(out))
    return meta


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."




ROW_ID_FIX = ("give passages ids without spaces, tabs, line breaks or NUL characters (e.g. replace them with '_') "
              "and rebuild the corpus")


def check_row_ids(ids: Sequence[str], *, source: Any = None) -> None:
    """Refuse passage ids holding whitespace or a line break: the index's id list holds one id per line and
    berds' run files are TREC files, whose fields are split at whitespace (an id ``"a b"`` would shift every
    field after it). One C-level split per batch; the offending id is named."""
    if ids and not one_token("".join(ids)):
        bad = next(pid for pid in ids if not one_token(pid))
        raise InputError(f"passage id {bad!r} holds {id_flaw(bad, line_breaks=True)}, which the index's id list (one id per line) and TREC "
                         "run files (fields split at whitespace) cannot carry", path=source, record=bad, fix=ROW_ID_FIX)


def write_id(f: Any, pid: str, *, source: Any = None) -> None:
    """Append one row id to an open ids file (see ``write_ids``; ``check_row_ids`` says which ids are refused)."""
    if not one_token(pid):
        check_row_ids([pid], source=source)
    f.write(pid)
    f.write("\n")


def write_id_batch(f: Any, ids: Sequence[bytes], *, source: Any = None) -> None:
    """``write_id`` for a batch of ids given as UTF-8 bytes: one check and one write."""
    if ids:
        text = b"\n".join(ids).decode("utf-8") + "\n"
        if not fields_intact(text, len(ids), 1):  # (one C-level split for the batch)
            check_row_ids([pid.decode("utf-8") for pid in ids], source=source)
        f.write(text)


def write_ids(path: str | os.PathLike, ids: Iterable[str]) -> None:
    """Row -> passage id, one id per line, written atomically (ids with whitespace or line breaks are refused)."""
    from berds.io import atomic_write

    with atomic_write(path) as f:
        for pid in ids:
            write_id(f, pid)


class IdTable:
    """Row -> passage id for a ``write_ids`` file, compactly: one bytes blob plus line offsets.

    21M DPR ids cost ~0.3 GB this way instead of ~1.5 GB as a list of Python strings.
    ``table[i]`` is the id of row ``i``; ``len(table)`` the number of rows.
    """

    def __init__(self, path: str | os.PathLike):
        import numpy as np

        try:
            self._blob = Path(path).read_bytes()
        except FileNotFoundError:
            raise InputError("index is incomplete: row ids file is missing", path=path, fix="rebuild the index") from None
        ends = np.flatnonzero(np.frombuffer(self._blob, dtype=np.uint8) == 10)
        self._starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        self._ends = ends.astype(np.int64)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, row: int) -> str:
        return self._blob[self._starts[row]:self._ends[row]].decode("utf-8")

    def many(self, rows: Any) -> list[str]:
        """The ids of ``rows`` (a numpy integer array), in order: the offsets of all of them in one numpy step,
        where ``[table[r] for r in rows]`` pays two numpy scalar lookups per row (FAISS hits: k per query)."""
        blob = self._blob
        return [blob[s:e].decode("utf-8") for s, e in zip(self._starts[rows].tolist(), self._ends[rows].tolist())]


def read_ids(path: str | os.PathLike) -> list[str]:
    """The ids written by ``write_ids``, in row order."""
    try:
        with open(path, encoding="utf-8", newline="\n") as f:
            return [line[:-1] if line.endswith("\n") else line for line in f]
    except FileNotFoundError:
        raise InputError("index is incomplete: row ids file is missing", path=path, fix="rebuild the index") from None


def progress_bar(unit: str, *, enabled: bool = True) -> Any:
    """A rich progress bar showing done/total, rate (``unit``/s) and time left; ``enabled=False`` hides it.

    Use as ``with progress_bar("passages") as bar: task = bar.add_task("indexing", total=n); bar.advance(task, m)``.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            done = task.completed - task.fields.get("started_at", 0)  # (work resumed from disk is not this run's)
            if task.finished and task.elapsed:
                # the whole run's mean, as the summaries print it: rich's own is the last 30 s's, and the two
                # disagreed at the end of a long run
                speed = done / task.elapsed
            else:  # rich's speed needs two samples: a build advanced in one big batch showed "- passages/s" to the end
                speed = task.speed or (done / task.elapsed if task.elapsed else None)
            return Text(f"{speed:,.1f} {unit}/s" if speed else f"- {unit}/s", style="progress.data.speed")

    class ResumingProgress(Progress):
        def add_task(self, description: str, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("started_at", kwargs.get("completed", 0))
            return super().add_task(description, *args, **kwargs)

    # "left" follows the time left (it stood between the elapsed and the remaining time: "0:00:01 left -:--:--"
    # read as one second left); the elapsed time is left out so that 21M passages fit 80 columns
    return ResumingProgress(
        TextColumn("[progress.description]{task.description}"), BarColumn(bar_width=12), MofNCompleteColumn(),
        RateColumn(), TimeRemainingColumn(), TextColumn("left"), disable=not enabled, transient=False,
    )
