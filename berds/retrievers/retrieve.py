"""``retrieve``: run a retriever over a question set, in batches, into a run folder.

    from berds.retrievers import retrieve
    run = retrieve("bm25", "kialo", split="test", k=100, options={"index": "indexes/wiki-bm25"},
                   out="runs/kialo-wiki-bm25")

The run folder (``berds.runs``: ``manifest.json``, ``run.trec``, ``run.ctxs.jsonl``) is what ``berds
eval`` reads. Hit lists are checked against the retriever contract (at most ``k``, best first with
ties broken by passage id, no duplicates) so run files are deterministic; a retriever that breaks it
is named in the error. With ``out`` set, finished batches are appended to ``out/.partial.jsonl``: an
interrupted run started again with the same settings carries on after the last finished batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from berds.errors import BerdsError, InputError
from berds.io import refused_write, sha256_text
from berds.retrievers.base import contract_problems, provenance_of
from berds.runs import id_flaw, one_token
from berds.types import Hit, InvalidScore, Passage, Question, Run

PARTIAL = ".partial.jsonl"


def retrieve(
    retriever: Any,
    questions: Sequence[Question] | str | os.PathLike,
    *,
    k: int = 100,
    split: str = "test",
    limit: int | None = None,
    options: Mapping[str, Any] | None = None,
    out: str | os.PathLike | None = None,
    overwrite: bool = False,
    batch_size: int | None = None,
    name: str | None = None,
    progress: bool = True,
) -> Run:
    """Retrieve the top ``k`` passages for every question; return the ``Run`` (and save it to ``out``).

    ``retriever`` is a catalogue name, ``module:attr``, or a retriever object; ``options`` go to its
    factory (``index=...``, ``corpus=...``, ``device=...``). ``questions`` is a list of ``Question`` or
    a source for ``berds.questions.load_questions`` (``kialo``, ``demo``, a jsonl path) read with
    ``split`` (first ``limit`` questions when set). ``batch_size`` questions go to each ``search`` call (the
    resume unit); by default the retriever's ``search_batch_size`` (BM25: 1,000, as Lucene searches a batch on
    all cores; dense: 256, the encoder batching them itself), else 32. ``progress`` shows a progress bar and a summary.
    """
    if k < 1:
        raise BerdsError(f"k must be at least 1, got {k}")
    if batch_size is not None and batch_size < 1:
        raise BerdsError(f"batch_size must be at least 1, got {batch_size}")
    question_source: dict[str, Any]
    if isinstance(questions, (str, os.PathLike)):
        from berds.questions import load_questions

        local = Path(questions).is_file()
        # a split applies to the named sets only (a file or the demo is read whole): not recorded where it did not
        question_source = {"source": str(questions), "split": None if local or str(questions) == "demo" else split,
                           **({"path": str(Path(questions).resolve())} if local else {}),
                           **({"limit": limit} if limit else {})}
        questions = load_questions(questions, split, limit=limit, require_perspectives=False)  # DELPHI has none
    else:
        question_source = {"source": "in-memory"}
        questions = list(questions)[:limit] if limit else list(questions)
    if not questions:
        raise BerdsError("no questions to retrieve for")
    if bad := next((q for q in questions if not one_token(q.id)), None):  # found now, not when run.trec is written
        raise InputError(f"question id {bad.id!r} holds {id_flaw(bad.id)}, which a TREC run file (fields split at "
                         "whitespace) cannot carry", path=question_source["source"], record=bad.id,
                         fix="give questions ids without spaces, tabs or line breaks")
    # the question texts too: a question edited between a stopped run and its resumption is retrieved again
    texts = sha256_text("\n".join(json.dumps([q.id, q.text], ensure_ascii=False) for q in questions))
    question_source.update(count=len(questions), ids_sha256=sha256_text("\n".join(q.id for q in questions)),
                           texts_sha256=texts)

    out_dir = Path(out) if out is not None else None
    lock, created = None, out_dir is not None and not out_dir.exists()
    if out_dir is not None:
        from berds.io import lock_folder

        out_dir.mkdir(parents=True, exist_ok=True)
        # one retrieve per folder: a second one (other settings) restarted the .partial.jsonl under its own header
        # while the first kept appending, and a resume then took the first one's hits as the second one's
        lock = lock_folder(out_dir, what="berds retrieve")
    try:
        if out_dir is not None and (out_dir / "manifest.json").exists() and not overwrite:
            raise BerdsError(f"{out_dir} already holds a run — choose another --out or pass --overwrite")
        return _retrieve_into(retriever, questions, question_source, k=k, options=options, out_dir=out_dir,
                              overwrite=overwrite, batch_size=batch_size, name=name, progress=progress)
    finally:
        if lock is not None:
            os.close(lock)
        if created and not any(out_dir.iterdir()):  # (a retriever that failed to load leaves no empty folder)
            out_dir.rmdir()


def _retrieve_into(retriever: Any, questions: list[Question], question_source: dict[str, Any], *, k: int,
                   options: Mapping[str, Any] | None, out_dir: Path | None, overwrite: bool, batch_size: int | None,
                   name: str | None, progress: bool) -> Run:
    """``retrieve`` once its questions are read (and its run folder locked)."""
    from berds.retrievers.registry import load_retriever

    texts = question_source["texts_sha256"]
    own = not hasattr(retriever, "search")
    spec_name = retriever if isinstance(retriever, str) else None
    retriever = load_retriever(retriever, **dict(options or {}))
    if batch_size is None:
        batch_size = int(getattr(retriever, "search_batch_size", 32))
    retrieved = False
    try:
        provenance = provenance_of(retriever)
        # and what the retriever says it searches (corpus fingerprint, index, encoder): an index rebuilt at the
        # same path between a stop and a restart would otherwise mix its hits with the old index's in one run
        identity = _jsonable({"retriever": spec_name or provenance["class"], "options": _persistable(options), "k": k,
                              "questions": question_source["ids_sha256"], "question_texts": texts,
                              "provenance": provenance})
        corpus = _searched_store(retriever, provenance)
        done: dict[str, list[Hit]] = {}
        if out_dir is not None:
            done = _read_partial(out_dir / PARTIAL, identity, progress)
        todo = [q for q in questions if q.id not in done]
        started = time.perf_counter()
        with _PartialWriter(out_dir / PARTIAL if out_dir is not None else None, identity, fresh=not done) as partial:
            from berds.indexes.base import progress_bar

            with progress_bar("questions", enabled=progress) as bar:
                task = bar.add_task(f"retrieve {retriever.name}", total=len(questions), completed=len(done))
                for batch in _batches(todo, batch_size):
                    try:
                        results = retriever.search(batch, k=k)
                    except InvalidScore as exc:  # (the plug-in's other errors keep their traceback: it helps)
                        # (a NaN or a string score is refused where the Hit is made, deep in the plug-in)
                        raise BerdsError(f"retriever {retriever.name!r} broke the retriever contract: {exc} "
                                         "(scores are finite numbers; see `berds check-retriever`)") from None
                    except Exception as exc:
                        if not isinstance(exc, BerdsError):  # (a BerdsError is the plug-in's own one-line refusal)
                            # the traceback stays (the plug-in's bug); this last line says whose, on what, what is kept
                            exc.add_note(_failure_note(retriever, batch, len(done), out_dir))
                        raise
                    problems = contract_problems(batch, results, k,
                                                 allow_duplicates=bool(getattr(retriever, "allows_duplicates", False)))
                    if problems:
                        raise BerdsError(f"retriever {retriever.name!r} broke the retriever contract: " + "; ".join(problems[:3]))
                    if corpus is not None:
                        _check_hits_are_the_corpus(retriever, corpus, results)
                    for q, hits in zip(batch, results):
                        done[q.id] = list(hits)
                        partial.write(q.id, hits)
                    partial.commit()  # a finished batch survives kill -9 (it sat in a write buffer before)
                    bar.advance(task, len(batch))
        seconds = time.perf_counter() - started
        retrieved = True
    finally:
        if own and callable(getattr(retriever, "close", None)):
            try:
                retriever.close()
            except Exception as exc:  # a retriever failing to let go of its files must not cost the hits it found
                if retrieved:  # (else the error that stopped the retrieval is the one to report)
                    from berds.io import print_note

                    print_note(f"retriever {retriever.name!r} failed to close ({type(exc).__name__}: {exc}); its hits "
                               "are kept", label="warning")

    manifest = {
        "retriever": {**({"spec": spec_name} if spec_name else {}), "options": _jsonable(_persistable(options)),
                      **{k_: v for k_, v in provenance.items() if k_ not in ("corpus", "index")}},
        "corpus": provenance.get("corpus"),
        "index": provenance.get("index"),
        "k": k,
        "question_set": question_source,
        "timing": {"seconds": round(seconds, 3), "questions_retrieved": len(todo),
                   "resumed": len(questions) - len(todo)},
    }
    run = Run.from_lists(questions, [done[q.id] for q in questions], manifest=_jsonable(manifest),
                         name=name or retriever.name)
    if out_dir is not None:
        from berds.runs import save_run

        save_run(run, out_dir, overwrite=overwrite)
        (out_dir / PARTIAL).unlink(missing_ok=True)
    if progress:
        _summary(run, k, seconds, len(todo), out_dir)
    empty = [qid for qid, hits in run.hits.items() if not hits]
    if empty:  # said even with progress off (and the table says so too): eval/tune/analyze refuse these
        from berds.io import print_note

        where = f" (listed in {out_dir / 'manifest.json'} under empty_questions)" if out_dir is not None else ""
        print_note(
            f"{len(empty)} of {len(run)} questions got no passages{where}: "
            f"{', '.join(empty[:5])}{', ...' if len(empty) > 5 else ''} — `berds eval/tune/analyze` refuse them "
            "unless --allow-short, which scores them as zero", label="warning")
    return run


def _searched_store(retriever: Any, provenance: Mapping[str, Any]) -> Any:
    """The passage store the retriever says it searches (``provenance()["corpus"]``: path and fingerprint), opened
    to check its hits; None when it names none (a plug-in over its own collection: nothing to check against)."""
    from berds.corpora.docstore import PassageStore, is_passage_store

    corpus = provenance.get("corpus")
    path = corpus.get("path") if isinstance(corpus, Mapping) else None
    if not isinstance(path, str) or not is_passage_store(path):
        return None
    store = PassageStore.open(path)
    if corpus.get("fingerprint") not in (None, store.fingerprint):
        raise BerdsError(f"retriever {retriever.name!r} says it searches the corpus at {path} with fingerprint "
                         f"{str(corpus.get('fingerprint'))[:12]}…, but the store there has {store.fingerprint[:12]}… — "
                         "rebuild its index on this corpus")
    return store


def _check_hits_are_the_corpus(retriever: Any, store: Any, results: Sequence[Sequence[Hit]]) -> None:
    """Refuse hits whose passage is not in the corpus the run is recorded under, or whose text differs from it:
    they would be saved under its fingerprint and judged (``check-retriever`` tests the same on its tiny corpus).
    One ``get_many`` per batch: a few microseconds a hit."""
    hits = [h for batch in results for h in batch]
    missing = [h.passage.id for h in hits if h.passage.id not in store]
    if missing:
        raise BerdsError(f"retriever {retriever.name!r} returned {len(missing)} passages that are not in its corpus "
                         f"({store.path}): {', '.join(map(repr, missing[:3]))} — a run holds passages of the corpus "
                         "it is recorded under (see `berds check-retriever`)")
    changed = [h.passage.id for h, p in zip(hits, store.get_many([h.passage.id for h in hits]))
               if (h.passage.text, h.passage.title) != (p.text, p.title)]
    if changed:
        raise BerdsError(f"retriever {retriever.name!r} returned {len(changed)} passages whose text or title differs "
                         f"from its corpus ({store.path}): {', '.join(map(repr, changed[:3]))} — a run holds the "
                         "corpus's passages as stored (see `berds check-retriever`)")


def _failure_note(retriever: Any, batch: Sequence[Question], finished: int, out_dir: Path | None) -> str:
    ids = ", ".join(repr(q.id) for q in batch[:3]) + (f" and {len(batch) - 3} more" if len(batch) > 3 else "")
    kept = (f"the {finished} questions finished before are kept in {out_dir / PARTIAL}: the same command carries on "
            "from there" if out_dir is not None and finished else "nothing was kept")
    return (f"berds: retriever {retriever.name!r} ({type(retriever).__module__}:{type(retriever).__qualname__}) "
            f"raised this searching question{'s' if len(batch) > 1 else ''} {ids}; {kept}")


def _batches(items: list[Question], size: int) -> Iterator[list[Question]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _persistable(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options as they may be written down: no credentials (an ``llm_options`` ``base_url`` with
    ``user:KEY@``, a ``*_token`` option), so manifests never hold a key and resuming does not depend on one."""
    from berds.llm.secrets import redact_options

    return redact_options(dict(options or {}))


def _jsonable(value: Any) -> Any:
    """Options and provenance as plain JSON (paths -> str, tuples -> lists, objects -> their repr)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


class _PartialWriter:
    """Appends finished questions to ``.partial.jsonl`` (first line: the settings they belong to)."""

    def __init__(self, path: Path | None, identity: dict[str, Any], *, fresh: bool):
        self.path, self.identity, self.fresh = path, identity, fresh
        self._f = None

    def __enter__(self) -> "_PartialWriter":
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w" if self.fresh else "a", encoding="utf-8")
            if self.fresh:
                self._f.write(json.dumps({"partial_run": self.identity}) + "\n")
        return self

    def write(self, qid: str, hits: Sequence[Hit]) -> None:
        if self._f is None:
            return
        # a passage without a title field is marked (6th item): the run files and judge texts leave its title out
        rec = {"qid": qid, "hits": [[h.passage.id, h.passage.title, h.passage.text, h.passage.source, float(h.score)]
                                    + ([] if h.passage.title_field else [False]) for h in hits]}
        try:
            self._f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise refused_write(exc, self.path) or exc from None

    def commit(self) -> None:
        """Put what was written on disk: called after each batch, the resume unit."""
        if self._f is not None:
            try:
                self._f.flush()
                os.fsync(self._f.fileno())
            except OSError as exc:  # (a full disk names the file, not only "No space left on device")
                raise refused_write(exc, self.path) or exc from None

    def __exit__(self, *exc: Any) -> None:
        if self._f is not None:
            self.commit()
            self._f.close()


def _read_partial(path: Path, identity: dict[str, Any], progress: bool) -> dict[str, list[Hit]]:
    """Finished questions of an interrupted run with the same settings (others are started over)."""
    if not path.is_file():
        return {}
    done: dict[str, list[Hit]] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        header = json.loads(lines[0]).get("partial_run")
    except (json.JSONDecodeError, AttributeError):
        header = None
    if header != identity:
        if progress:
            from berds.io import print_note

            print_note(f"{path} is from a run with other settings; starting over")
        return {}
    good = 1
    for line in lines[1:]:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break  # the line being written when the run stopped: everything before it is complete
        done[rec["qid"]] = [Hit(Passage(id=i, title=t, text=x, source=s, title_field=not rest), score)
                            for i, t, x, s, score, *rest in rec["hits"]]
        good += 1
    kept = "".join(line + "\n" for line in lines[:good])
    if len(kept) != sum(map(len, lines)) + len(lines) - 1:  # a cut-off last line: the resumed run appends
        from berds.io import atomic_write  # after it, so it goes first (else it swallows the next record)

        with atomic_write(path) as f:
            f.write(kept)
    if progress and done:
        from rich.console import Console

        Console(stderr=True).print(f"resuming: {len(done)} questions already retrieved in {path.parent}", markup=False)
    return done


def _summary(run: Run, k: int, seconds: float, retrieved: int, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    depth = [len(h) for h in run.hits.values()]
    table = Table(title=f"retrieval: {run.name}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")  # a long run folder or corpus path is folded, not cut to "…"
    table.add_row("questions", f"{len(run)} ({retrieved} retrieved now)")
    table.add_row("k", str(k))
    table.add_row("hits per question", f"min {min(depth)}, mean {sum(depth) / len(depth):.1f}, max {max(depth)}")
    empty = [qid for qid, hits in run.hits.items() if not hits]
    # in the table, not only in the line after it: eval, tune and analyze refuse these questions
    table.add_row("no hits", f"[bold yellow]{len(empty)} questions: {', '.join(empty[:3])}{', ...' if len(empty) > 3 else ''}"
                             " (eval refuses them unless --allow-short)[/]" if empty else "0 questions")
    table.add_row("time", f"{seconds:.2f} s ({retrieved / seconds:,.1f} questions/s)" if seconds > 0 and retrieved else f"{seconds:.2f} s")
    corpus = run.manifest.get("corpus") or {}
    if corpus.get("fingerprint"):
        table.add_row("corpus", f"{corpus.get('path')} ({corpus.get('passages')} passages, {corpus['fingerprint'][:12]})")
    if out is not None:
        table.add_row("run folder", str(out))
    Console().print(table)
