"""What a retriever is.

A retriever is **any object** with

* ``name: str`` — a short label (goes into run names and manifests), and
* ``search(questions, *, k) -> list[list[Hit]]`` — one ranked list per question, in the order given,
  best first, at most ``k`` hits each, no passage twice in a list. Scores decrease down a list; equal
  scores are ordered by passage id (``berds.types.rank_hits`` does exactly this).

Optionally it may also have

* ``provenance() -> dict`` — JSON-serialisable facts for the run manifest (index path, corpus
  fingerprint, model and revision, options). Without it the manifest records the name and class;
* ``close()`` — release files, JVM searchers or GPU memory; ``retrieve`` calls it when it created the
  retriever itself.

Nothing has to subclass anything: ``Retriever`` is a ``typing.Protocol``. Factories (classes or
functions) take keyword-only options (``index=...``, ``corpus=...``, ``device=...``); ``berds retrieve
--option key=value`` passes them through. ``berds.testing.check_retriever`` checks the contract.
"""

from __future__ import annotations

import math
from itertools import chain, islice
from operator import gt
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

from berds.errors import BerdsError
from berds.io import no_gc
from berds.types import Hit, Passage, Question, hits_of, rank_hits


@runtime_checkable
class Retriever(Protocol):
    """The retriever contract (see the module docstring)."""

    name: str

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        ...


def provenance_problems(info: Any) -> list[str]:
    """Ways a ``provenance()`` result breaks its contract: it must be JSON plain data (dicts with string
    keys, lists, strings, finite numbers, booleans, None — no paths or objects, which a manifest cannot
    hold as they are), and ``corpus``, when given, is a dict (``{"path", "passages", "fingerprint"}``)."""
    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append(f"{where}: key {key!r} is a {type(key).__name__}, not a string")
                walk(item, f"{where}[{key!r}]")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{where} is {value}, which JSON cannot hold")
        elif not (value is None or isinstance(value, (str, int, float, bool))):
            hint = " (use str(path))" if hasattr(value, "__fspath__") else ""
            problems.append(f"{where} is a {type(value).__name__}, not JSON plain data{hint}")

    if not isinstance(info, dict):
        return [f"provenance() must return a dict, got {type(info).__name__}"]
    walk(info, "provenance()")
    corpus = info.get("corpus")
    if corpus is not None and not isinstance(corpus, dict):  # manifests and summaries read its fields
        problems.append("provenance()['corpus'] must be a dict like {'path': ..., 'passages': ..., 'fingerprint': ...}, "
                        f"got {type(corpus).__name__} {corpus!r}")
    elif corpus is not None:  # (the summary cut an int fingerprint with [:12] and crashed after the run was saved)
        for key, kind in (("path", str), ("fingerprint", str), ("passages", int)):
            value = corpus.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                problems.append(f"provenance()['corpus'][{key!r}] must be {'a string' if kind is str else 'an integer'}"
                                f", got {type(value).__name__} {value!r}")
    return problems


def provenance_of(retriever: Any) -> dict[str, Any]:
    """The retriever's self-description for a manifest (``provenance()`` if it has one, else its class).

    A ``provenance()`` that is not JSON plain data (see ``provenance_problems``) is refused here, before a
    run writes anything."""
    cls = type(retriever)
    info: dict[str, Any] = {"name": getattr(retriever, "name", cls.__name__), "class": f"{cls.__module__}:{cls.__qualname__}"}
    describe = getattr(retriever, "provenance", None)
    if callable(describe):
        extra = describe()
        problems = provenance_problems(extra)
        if problems:
            raise BerdsError(f"{info['class']}.provenance() breaks the retriever contract: " + "; ".join(problems[:3])
                             + " — return plain JSON data (see `berds check-retriever`)")
        info.update(extra)
    return info


def contract_problems(questions: Sequence[Question], results: Any, k: int, *, allow_duplicates: bool = False) -> list[str]:
    """Ways ``results`` (what ``search(questions, k=k)`` returned) break the retriever contract.

    Empty when everything is fine. Used by ``retrieve`` (which refuses a broken result) and by the
    plug-in contract test (which reports every problem). ``allow_duplicates`` is for retrievers that
    declare ``allows_duplicates = True`` (the study's expansion merge keeps repeated passages).
    """
    if not isinstance(results, (list, tuple)):
        return [f"search() must return a list (one list of hits per question), got {type(results).__name__}"]
    if len(results) != len(questions):
        return [f"search() returned {len(results)} lists for {len(questions)} questions"]
    problems = []
    for q, hits in zip(questions, results):
        where = f"question {q.id!r}"
        if not isinstance(hits, (list, tuple)):
            problems.append(f"{where}: expected a list of Hit, got {type(hits).__name__}")
            continue
        problems.extend(_list_problems(where, hits, k, allow_duplicates=allow_duplicates))
    if not problems:
        problems.extend(_id_problems(questions, results))
    return problems


def _id_problems(questions: Sequence[Question], results: Sequence[Sequence[Hit]]) -> list[str]:
    """A passage id holding whitespace cannot go into ``run.trec`` (fields split at whitespace): named here, at the
    batch that returned it, not when the run file is written after the whole retrieval. One C-level pass a batch."""
    ids = [h.passage.id for hits in results for h in hits]
    joined = " ".join(ids)
    if len(joined.split()) == len(ids) and len(joined) == sum(map(len, ids)) + max(len(ids) - 1, 0) \
            and "\x00" not in joined:
        return []
    from berds.runs import id_flaw, one_token

    qid, pid = next((q.id, h.passage.id) for q, hits in zip(questions, results) for h in hits
                    if not one_token(h.passage.id))
    return [f"question {qid!r}: passage id {pid!r} holds {id_flaw(pid)}, which a TREC run file (fields split at "
            "whitespace) cannot carry"]


def _list_problems(where: str, hits: Sequence[Any], k: int, *, allow_duplicates: bool = False) -> list[str]:
    """One pass over a hit list (this runs on every list ``retrieve`` gets, so it must cost little)."""
    problems = []
    if len(hits) > k:
        problems.append(f"{where}: {len(hits)} hits for k={k} (at most k allowed)")
    seen: set[str] = set()
    duplicate = not_finite = unordered = False
    previous_score, previous_id = math.inf, ""
    for h in hits:
        if not isinstance(h, Hit):
            return [f"{where}: expected berds.types.Hit items, got {type(h).__name__}"]
        if not isinstance(h.passage, Passage):  # Hit(passage_id, score) builds: its fields are not checked
            return [f"{where}: a Hit holds a {type(h.passage).__name__} where a berds.types.Passage belongs "
                    "(Hit(Passage(id, text, title), score))"]
        pid, score = h.passage.id, float(h.score)
        if pid in seen:
            duplicate = True
        seen.add(pid)
        if score - score != 0.0:  # inf or nan
            not_finite = True
        elif score > previous_score or (score == previous_score and pid < previous_id):
            unordered = True
        previous_score, previous_id = score, pid
    if duplicate and not allow_duplicates:
        ids = [h.passage.id for h in hits]
        problems.append(f"{where}: passage {next(i for i in ids if ids.count(i) > 1)!r} appears twice")
    if not_finite:
        problems.append(f"{where}: a score is not finite")
    elif unordered:
        problems.append(f"{where}: hits are not ordered best first (score descending, ties by passage id; "
                        "use berds.types.rank_hits)")
    return problems


def is_ranked(hits: Sequence[Hit]) -> bool:
    """True when ``hits`` is already in ``rank_hits`` order (score descending, ties by passage id): one pass, no sort."""
    for a, b in zip(hits, hits[1:]):
        sa, sb = float(a.score), float(b.score)
        if sa < sb or (sa == sb and a.passage.id > b.passage.id):
            return False
    return True


def _in_rank_order(hits: list[Hit], scores: Sequence[float]) -> list[Hit]:
    """``hits`` (whose scores are ``scores``, in order) in ``rank_hits`` order. The usual engine list, scores strictly
    decreasing, is told in C (one pass of ``>`` over neighbours: a third of a sort and a set) instead of
    ``is_ranked``'s Python loop; equal or rising scores take that loop, and a sort when it says so."""
    if all(map(gt, scores, islice(scores, 1, None))):
        return hits
    return hits if is_ranked(hits) else rank_hits(hits)


def _ranked_hits(passages: Iterator[Passage], pairs: Sequence[tuple[str, float]]) -> list[Hit]:
    """Hits of the next ``len(pairs)`` passages with ``pairs``' scores, in ``rank_hits`` order."""
    scores = [x for _, x in pairs]
    hits = hits_of(islice(passages, len(scores)), scores)
    if len(hits) != len(scores):  # (a store that handed back fewer passages than ids: never fewer hits silently)
        raise BerdsError(f"the passage store gave {len(hits)} passages for the {len(scores)} hits of a question")
    return _in_rank_order(hits, scores)


def hits_from_store(store: Any, found: Sequence[Sequence[tuple[str, float]]]) -> list[list[Hit]]:
    """``(passage id, score)`` lists from a search engine -> ranked ``Hit`` lists with their passages.

    All texts of the batch come from the store in one ``get_many``; a list is sorted only when the engine's
    order is not already ``rank_hits`` order (Lucene's and FAISS's usually are).
    """
    # The cyclic GC is paused while the batch's objects are made: they hold no cycles, and with a run's worth of
    # hits alive its full passes cost more than the work itself (measured: up to 2.7x on 100k hits).
    with no_gc():
        passages = iter(store.get_many([pid for pairs in found for pid, _ in pairs]))
        return [_ranked_hits(passages, pairs) for pairs in found]


def hits_from_records(store: Any, found: Sequence[Sequence[tuple[str, float]]], rows: Sequence[Sequence[int]],
                      *, index_path: Any = None) -> list[list[Hit]]:
    """``hits_from_store`` for an engine whose rows are the store's record numbers (a dense index built from that
    store): the batch's Hits are made as their records are read by number (``PassageStore.get_hits``: no id-table
    lookup, one loop that checks, decodes and makes each hit), and their ids must be the ones the engine gave for
    those rows, so a damaged or misplaced id list is never served."""
    with no_gc():  # (as in hits_from_store)
        want = [pid for pairs in found for pid, _ in pairs]
        scores = [x for pairs in found for _, x in pairs]
        flat = list(chain.from_iterable(rows))
        if len(flat) != len(want):
            raise BerdsError(f"the index {index_path} gave {len(flat)} rows for {len(want)} hits")
        hits, got = store.get_hits(flat, scores)
        if got != want:  # (one list comparison: the batch's ids)
            i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            raise BerdsError(f"index {index_path} says row {flat[i]} is passage {want[i]!r}, but record {flat[i]} of "
                             f"the passage store {getattr(store, 'path', '')} holds {got[i]!r}: its docids.txt or the "
                             "store was changed since it was built — rebuild the index (berds index dense ... "
                             "--overwrite always)")
        out, start = [], 0
        for pairs in found:
            end = start + len(pairs)
            out.append(_in_rank_order(hits[start:end], scores[start:end]))
            start = end
        return out
