"""Lucene BM25 indexes (pyserini's Anserini), and exact per-group BM25 for per-question corpora.

**Index folder** (``berds index bm25 CORPUS --out DIR``)::

    meta.json        type "bm25", corpus path + fingerprint, analyzer, contents rule, counts, Java/Anserini
    lucene/          the Lucene index (Anserini SimpleIndexer, DefaultEnglishAnalyzer: Porter stemmer,
                     English stopwords; stores only ids, not texts — texts come from the passage store)
    groups/          only for stores with groups (one small corpus per question; see below)

The document indexed for a passage is ``title + "\\n" + text`` when it has a title (as pyserini's
prebuilt ``wikipedia-dpr-100w`` index), else ``text`` (``contents="title+text"``; ``contents="text"``
drops titles). Passages whose contents are empty cannot be indexed by Anserini; they are counted in
``meta.json`` (``skipped_empty``) and reported, never dropped silently.

**Scoring** is Lucene's ``BM25Similarity`` (Lucene 9) with the study's Pyserini defaults k1=0.9, b=0.4::

    score(q, d) = sum over distinct terms t of q:  c(t, q) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))
    idf(t)      = ln(1 + (N - df + 0.5) / (df + 0.5))

with ``c(t, q)`` the count of ``t`` in the analysed query (Anserini's bag-of-words query boosts a
repeated term), ``N`` the number of documents with at least one token, ``avgdl`` their mean token
count, and ``dl`` the document's token count *as Lucene stores it*: one byte per document
(``SmallFloat.intToByte4``), exact below 24 tokens and rounded down beyond (60 and 61 both read back as
60, 100 as 96). Note Lucene dropped the textbook ``(k1 + 1)`` factor from the numerator (it does not
change rankings). Anserini ranks by score, then docid, and then rounds every score to 4 decimals,
lowering scores that rounding made equal by 1e-6 steps (``anserini_adjust_scores``).

**Per-question corpora** (a store whose passages are split into groups, e.g. web search results per
question): building 2,400 on-disk Lucene indexes is slow and clutters disks, and one shared index with a
per-question filter would compute idf/avgdl over the union of all questions' pages — not what a
per-question corpus means. Instead the build analyses each passage once with the *same* Lucene analyzer
and stores its term counts (``groups/``: a CSR matrix of term ids and frequencies per row). A question is
then scored in memory against its own group with exactly the formula above (group-local N, df, avgdl,
Lucene's length quantisation, Anserini's ordering and rounding): the same ranking and scores a
separate Lucene index per question would give, at numpy speed. ``tests/test_bm25.py`` checks the two agree.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import accumulate
from json.encoder import encode_basestring as _json_string  # the C string escaper json.dumps uses (ensure_ascii=False)
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.indexes.base import (
    IdTable,
    corpus_record,
    damaged_index,
    finish_index_folder,
    open_store,
    prepare_index_folder,
    progress_bar,
    read_ids,
    read_index_meta,
    releases_on_failure,
    whole_store_batches,
    write_id,
    write_id_batch,
)
from berds.io import at_size_limit, atomic_write, space_facts

DEFAULT_K1 = 0.9  # Pyserini / Anserini defaults, used by the BERDS study's BM25 runs
DEFAULT_B = 0.4
ANALYZER = "anserini DefaultEnglishAnalyzer (porter stemmer, English stopwords)"
CONTENTS_MODES = ("title+text", "text")
LUCENE_DIR = "lucene"
GROUPS_DIR = "groups"


# ---------------------------------------------------------------------------- Lucene's BM25, in Python


def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_NUM_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)  # = 24: lengths below this are stored exactly


def lucene_length_byte(length: int) -> int:
    """Lucene's one-byte document length (``SmallFloat.intToByte4``): exact below 24, lossy above."""
    if length < 0:
        raise ValueError("length must be >= 0")
    return length if length < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _long_to_int4(length - _NUM_FREE_VALUES)


def lucene_length(length: int) -> int:
    """The document length BM25 actually sees: ``byte4ToInt(intToByte4(length))`` (e.g. 61 -> 60, 100 -> 96)."""
    b = lucene_length_byte(length)
    return b if b < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES)


LENGTH_TABLE = np.array(
    [b if b < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES) for b in range(256)],
    dtype=np.float32,
)


def bm25_idf(df: int, n_docs: int) -> float:
    """Lucene's BM25 idf: ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (always > 0)."""
    return float(np.log1p((n_docs - df + 0.5) / (df + 0.5)))


def bm25_term_score(tf: float, df: int, n_docs: int, dl: int, avgdl: float, *, k1: float = DEFAULT_K1,
                    b: float = DEFAULT_B, quantise_length: bool = True) -> float:
    """One term's Lucene BM25 contribution: ``idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))``.

    ``dl`` is the raw token count; with ``quantise_length`` it is first passed through Lucene's one-byte
    length encoding (``lucene_length``), as Lucene does. No ``(k1 + 1)`` factor (Lucene 8+).
    """
    length = lucene_length(dl) if quantise_length else dl
    return bm25_idf(df, n_docs) * tf / (tf + k1 * (1 - b + b * length / avgdl))


def anserini_adjust_scores(scores: Sequence[float]) -> np.ndarray:
    """Anserini's final touch on a ranked list (``ScoreTiesAdjusterReranker``), reproduced exactly.

    Every score is rounded to 4 decimals (``Math.round(s * 10000) / 10000``, as float32); when a score is
    within 1e-4 of the (already adjusted) score above it, it is lowered by ``1e-6 * d`` where ``d`` counts
    the ties so far, so the ranking order stays visible in the numbers. ``scores`` must be in rank order.
    """
    out = np.asarray(scores, dtype=np.float32).copy()
    ties = 0
    for i in range(len(out)):
        out[i] = np.float32(math.floor(float(out[i]) * 10000.0 + 0.5) / 10000.0)
        if i == 0 or np.float32(out[i - 1] - out[i]) > np.float32(1e-4):
            ties = 0
        else:
            ties += 1
            out[i] = np.float32(out[i] - np.float32(1e-6) * np.float32(ties))
    return out


# ---------------------------------------------------------------------------- Java side


def passage_contents(title: str, text: str, mode: str = "title+text") -> str:
    """The string indexed for a passage (see the module docstring)."""
    if mode == "title+text":
        return f"{title}\n{text}" if title else text
    if mode == "text":
        return text
    raise BerdsError(f"contents must be one of {', '.join(CONTENTS_MODES)}, got {mode!r}")


class LuceneAnalyzer:
    """Anserini's default English analyzer (the one SimpleIndexer and SimpleSearcher use), from Python.

    Tokens cross from Java as one string (``List.toString()``; analysed tokens never hold spaces), which
    is ~4x faster than iterating a Java list through JNI. ``analyze_many`` analyses a batch in one call,
    joined by a separator token, and falls back to one call per text if a text contains the separator.
    """

    SEPARATOR = "zzzberdspassagebreakzzz"

    def __init__(self) -> None:
        from berds.java import autoclass

        self._analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
        self._utils = autoclass("io.anserini.analysis.AnalyzerUtils")

    def __call__(self, text: str) -> list[str]:
        listed = self._utils.analyze(self._analyzer, text).toString()[1:-1]  # "[tok1, tok2]"
        return listed.split(", ") if listed else []

    def analyze_many(self, texts: Sequence[str]) -> list[list[str]]:
        if len(texts) <= 1 or any(self.SEPARATOR in t for t in texts):
            return [self(t) for t in texts]
        out: list[list[str]] = [[]]
        for token in self(f" {self.SEPARATOR} ".join(texts)):
            if token == self.SEPARATOR:
                out.append([])
            else:
                out[-1].append(token)
        if len(out) != len(texts):  # cannot happen with this analyzer; never guess if it does
            return [self(t) for t in texts]
        return out


class LuceneSearcher:
    """A Lucene BM25 index opened for search (Anserini ``SimpleSearcher``, bag-of-words queries)."""

    def __init__(self, lucene_dir: str | os.PathLike, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B):
        from berds.java import autoclass

        # A query of more than 1,024 distinct terms (Lucene's default clause limit) failed inside Anserini's
        # batch search ("queryCount = 1 is not equal to completedTaskCount = 0"); a bag of words has no
        # runaway expansion for the limit to guard against.
        autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(2**31 - 1)
        # Absolute: the JVM resolves relative paths against the folder it started in, not this process's cwd.
        self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(Path(lucene_dir).resolve()))
        self._searcher.set_bm25(float(k1), float(b))
        self._array_list = autoclass("java.util.ArrayList")
        self.k1, self.b = k1, b

    @property
    def num_docs(self) -> int:
        return int(self._searcher.get_total_num_docs())

    def search(self, queries: Sequence[str], k: int, *, threads: int = 1) -> list[list[tuple[str, float]]]:
        """Top-``k`` ``(docid, score)`` per query, best first (Anserini's order: score, then docid)."""
        if not queries:
            return []
        from berds.java import lucene_bridge

        bridge = lucene_bridge()
        if bridge is None:
            return self.search_hit_by_hit(queries, k, threads=threads)
        found = bridge.search(self._searcher, list(queries), int(k), int(threads))
        ids, scores, offsets = found.docids, found.scores, found.offsets
        return [list(zip(ids[a:b], scores[a:b])) for a, b in zip(offsets, offsets[1:])]

    def search_hit_by_hit(self, queries: Sequence[str], k: int, *, threads: int = 1) -> list[list[tuple[str, float]]]:
        """``search`` without berds' Java class: Anserini's result objects read one by one (slower, same hits)."""
        if not queries:
            return []
        texts, qids = self._array_list(), self._array_list()
        for i, q in enumerate(queries):
            texts.add(q)
            qids.add(str(i))
        found = self._searcher.batch_search(texts, qids, int(k), int(threads))
        out = []
        for i in range(len(queries)):
            hits = found.get(str(i))
            out.append([(h.docid, float(h.score)) for h in hits] if hits is not None else [])
        return out

    def close(self) -> None:
        self._searcher.close()


def open_lucene(index_dir: str | os.PathLike, meta: dict[str, Any], *, k1: float = DEFAULT_K1,
                b: float = DEFAULT_B) -> LuceneSearcher:
    """Open a finished index's Lucene part for search, checked against ``meta.json``: a damaged or
    missing Lucene folder is an error naming it and the rebuild command, not a Java stack trace."""
    folder = Path(index_dir)
    lucene = folder / LUCENE_DIR
    if not lucene.is_dir():
        raise damaged_index(lucene, "the Lucene folder is missing", folder=folder, meta=meta)
    from berds.java import start_jvm

    jnius = start_jvm()  # a JVM that cannot start is its own (clear) error, not a damaged index

    try:
        searcher = LuceneSearcher(lucene, k1=k1, b=b)
        n_docs = searcher.num_docs
    except jnius.JavaException as exc:
        why = (getattr(exc, "classname", "") or "").rsplit(".", 1)[-1] or "Lucene cannot open it"
        detail = str(getattr(exc, "innermessage", "") or "").splitlines()[0:1]
        raise damaged_index(lucene, f"{why}{': ' + detail[0][:200] if detail else ''}", folder=folder, meta=meta) from None
    if "documents" in meta and n_docs != meta["documents"]:
        searcher.close()
        raise damaged_index(lucene, f"Lucene holds {n_docs} documents, meta.json records {meta['documents']}",
                            folder=folder, meta=meta)
    return searcher


# ---------------------------------------------------------------------------- building


@dataclass
class _GroupTermsWriter:
    """Collects per-passage analysed term counts (CSR rows in store order) while the index is built."""

    analyzer: LuceneAnalyzer

    def __post_init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.indptr = [0]
        self.terms: list[np.ndarray] = []
        self.tfs: list[np.ndarray] = []
        self.lengths: list[int] = []

    def add_many(self, contents: Sequence[str]) -> None:
        for tokens in self.analyzer.analyze_many(contents):
            self.add_tokens(tokens)

    def add_tokens(self, tokens: list[str]) -> None:
        counts: dict[int, int] = {}
        for t in tokens:
            tid = self.vocab.setdefault(t, len(self.vocab))
            counts[tid] = counts.get(tid, 0) + 1
        ids = np.fromiter(counts.keys(), dtype=np.int32, count=len(counts))
        order = np.argsort(ids)
        self.terms.append(ids[order])
        self.tfs.append(np.fromiter(counts.values(), dtype=np.int32, count=len(counts))[order])
        self.indptr.append(self.indptr[-1] + len(counts))
        self.lengths.append(len(tokens))

    def save(self, folder: Path, row_groups: np.ndarray, group_names: list[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        _save_npy(folder / "indptr.npy", np.asarray(self.indptr, dtype=np.int64))
        _save_npy(folder / "terms.npy", np.concatenate(self.terms) if self.terms else np.zeros(0, np.int32))
        _save_npy(folder / "tfs.npy", np.concatenate(self.tfs) if self.tfs else np.zeros(0, np.int32))
        _save_npy(folder / "lengths.npy", np.asarray(self.lengths, dtype=np.int32))
        _save_npy(folder / "row-groups.npy", row_groups.astype(np.int32))
        from berds.io import write_json

        write_json(folder / "vocab.json", sorted(self.vocab, key=self.vocab.__getitem__))
        write_json(folder / "group-names.json", group_names)


def _save_npy(path: Path, array: np.ndarray) -> None:
    from berds.io import atomic_write

    with atomic_write(path, "wb", encoding=None) as f:
        np.save(f, array, allow_pickle=False)


def group_row_lists(row_groups: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """For each group number, its rows in ascending order (one stable sort instead of a scan per query)."""
    order = np.argsort(row_groups, kind="stable")
    bounds = np.searchsorted(row_groups[order], np.arange(n_groups + 1))
    return [order[bounds[g]:bounds[g + 1]] for g in range(n_groups)]


def _row_groups(store: Any, ids: list[str]) -> tuple[np.ndarray, list[str]]:
    """Group number of each row (store order), -1 for passages in no group."""
    names = store.groups()
    row_of = {pid: i for i, pid in enumerate(ids)}
    rows = np.full(len(ids), -1, dtype=np.int32)
    for g, name in enumerate(names):
        for pid in store.group_ids(name):
            rows[row_of[pid]] = g
    return rows, names


LUCENE_MAX_TERM_BYTES = 32_766  # Lucene refuses a longer term, and the passage id is indexed as one term


def check_lucene_ids(ids: Sequence[bytes], *, source: Any = None) -> None:
    """Refuse (by name, before Lucene fails mid-batch) a passage id longer than Lucene can index."""
    if ids and max(map(len, ids)) > LUCENE_MAX_TERM_BYTES:
        bad = next(pid for pid in ids if len(pid) > LUCENE_MAX_TERM_BYTES).decode("utf-8")
        raise InputError(f"passage id of {len(bad.encode('utf-8')):,} bytes ({bad[:40]!r}...): Lucene indexes an id as "
                         f"one term of at most {LUCENE_MAX_TERM_BYTES:,} bytes", path=source, record=bad[:80],
                         fix="give passages shorter ids (a hash of a long one will do) and rebuild the corpus")


_WHITESPACE = bytes(i for i in range(128) if chr(i).isspace())  # what str.strip() removes, in ASCII


def _has_words(utf8: bytes) -> bool:
    """``bool(text.strip())`` for ``utf8 = text.encode()`` (decoding only non-ASCII text, where Unicode spaces count)."""
    return bool(utf8.strip(_WHITESPACE)) if utf8.isascii() else bool(utf8.decode("utf-8").strip())


def _utf8_with_ends(texts: Sequence[str]) -> tuple[bytes, list[int]]:
    """``texts`` as one UTF-8 buffer and each text's end offset in it (how ``LuceneBridge`` takes a batch)."""
    encoded = [t.encode("utf-8") for t in texts]
    return b"".join(encoded), list(accumulate(map(len, encoded)))


@releases_on_failure
def build_bm25_index(
    corpus: Any,
    out: str | os.PathLike,
    *,
    contents: str = "title+text",
    threads: int | None = None,
    batch_size: int = 20_000,
    overwrite: str = "missing",
    progress: bool = True,
) -> dict[str, Any]:
    """Build a Lucene BM25 index of a passage store into the folder ``out``; returns its ``meta.json`` (plus
    ``"kept": True`` when an identical finished index was already there and nothing was built).

    ``corpus`` is a ``PassageStore`` or its folder. ``threads`` are Lucene indexing threads (default: every
    core; the store is read and encoded on another thread meanwhile). ``batch_size`` passages go to Lucene per
    call (Anserini waits for all its threads at the end of each call, so larger calls keep the cores busier). A store with
    groups also gets the per-group term counts used for per-question search (module docstring). The
    Lucene part is built in ``out/lucene.partial`` and renamed when complete; ``meta.json`` comes last.
    """
    store = open_store(corpus)
    if len(store) == 0:  # (as a dense build does: an empty index searched without complaint)
        raise InputError("the passage store is empty: nothing to index", path=getattr(store, "path", None))
    passage_contents("", "", contents)  # validate the mode before starting Java
    settings = {"type": "bm25", "corpus_fingerprint": store.fingerprint, "contents": contents, "analyzer": ANALYZER}
    out = Path(out).resolve()  # the JVM resolves relative paths against its own start folder, not our cwd
    if not prepare_index_folder(out, settings, overwrite=overwrite):
        return {**read_index_meta(out, "bm25"), "kept": True}  # (not in the file: says nothing was built)
    from berds.java import autoclass, jvm_info, lucene_bridge

    partial = out / (LUCENE_DIR + ".partial")
    # A Lucene build cannot resume mid-way: start that part over. A build killed after its rename but before
    # meta.json also left lucene/, onto which the rename below failed ("Directory not empty") on every rerun.
    for leftover in (partial, out / LUCENE_DIR):
        if leftover.exists():
            shutil.rmtree(leftover)
    grouped = bool(store.groups())
    terms = _GroupTermsWriter(LuceneAnalyzer()) if grouped else None
    threads = int(threads or os.cpu_count() or 1)
    indexer = autoclass("io.anserini.index.SimpleIndexer")(str(partial), False, threads)
    bridge = lucene_bridge()  # passages go to Lucene as two arrays; without it, as JSON strings
    skipped: list[str] = []
    started = time.perf_counter()
    try:
        # Row ids stream to docids.txt as passages go by (a 21M-passage id list would cost GBs of RAM).
        with progress_bar("passages", enabled=progress) as bar, atomic_write(out / "docids.txt") as id_file, \
                ThreadPoolExecutor(1, thread_name_prefix="berds-bm25-reader") as reader:
            task = bar.add_task("BM25 index", total=len(store))
            if bridge is not None and terms is None and hasattr(store, "iter_utf8_batches"):  # bytes straight to Lucene
                utf8_batches = whole_store_batches(store, batch_size, utf8=True)
                with_title = contents == "title+text"

                def next_batch() -> tuple[int, int, Any, list[str]] | None:
                    """The next batch as LuceneBridge.addPassages's arguments, without building Passages."""
                    batch = next(utf8_batches, None)
                    if batch is None:
                        return None
                    ids = [pid for pid, _, _ in batch]
                    write_id_batch(id_file, ids, source=store.path)
                    check_lucene_ids(ids, source=store.path)
                    texts = [title + b"\n" + text if with_title and title else text for _, title, text in batch]
                    if not all(map(_has_words, texts)):  # (rare) passages with nothing to index are skipped
                        keep = list(map(_has_words, texts))
                        skipped.extend(pid.decode("utf-8") for pid, k in zip(ids, keep) if not k)
                        ids = [pid for pid, k in zip(ids, keep) if k]
                        texts = [text for text, k in zip(texts, keep) if k]
                    return (len(batch), len(ids), (b"".join(ids), list(accumulate(map(len, ids))),
                                                   b"".join(texts), list(accumulate(map(len, texts)))), [])
            else:
                batches = whole_store_batches(store, batch_size)

                def next_batch() -> tuple[int, int, Any, list[str]] | None:
                    """Read and encode the next batch (runs while Lucene indexes the previous one: pyjnius lets go of the GIL)."""
                    batch = next(batches, None)
                    if batch is None:
                        return None
                    texts = [passage_contents(p.title, p.text, contents) for p in batch]
                    ids, kept = [], []
                    for p, text in zip(batch, texts):
                        write_id(id_file, p.id, source=store.path)
                        if text.strip():
                            ids.append(p.id)
                            kept.append(text)
                        else:
                            skipped.append(p.id)
                    check_lucene_ids([i.encode("utf-8") for i in ids], source=store.path)
                    if bridge is not None:  # LuceneBridge.addPassages's arguments
                        payload: Any = (*_utf8_with_ends(ids), *_utf8_with_ends(kept))
                    else:  # SimpleIndexer.addRawDocuments's: one JSON document per passage
                        payload = [f'{{"id":{_json_string(i)},"contents":{_json_string(t)}}}' for i, t in zip(ids, kept)]
                    return len(batch), len(ids), payload, texts

            pending = reader.submit(next_batch)
            while (ready := pending.result()) is not None:
                pending = reader.submit(next_batch)
                n, n_docs, payload, texts = ready
                if terms is not None:
                    terms.add_many(texts)
                if n_docs:
                    added = int(bridge.addPassages(indexer, threads, *payload) if bridge is not None
                                else indexer.addRawDocuments(payload))
                    if added != n_docs:
                        raise BerdsError(f"Lucene indexed {added} of {n_docs} passages in a batch — see the Java log above")
                bar.advance(task, n)
    finally:
        indexer.close()
    seconds = time.perf_counter() - started
    if not any(p.name.startswith("segments_") for p in partial.iterdir()):
        # Anserini's indexer drops Lucene's write errors (a full disk, the file-size limit): without a commit point
        # the folder is no index, and opening it ended in a Java traceback
        raise OSError(errno.EFBIG if at_size_limit(partial) else errno.EIO,
                      f"Lucene could not finish writing the index (no segments file: a write failed; "
                      f"{'; '.join(space_facts(partial))}) — free space (or raise the limit) and run the command "
                      "again", str(partial))
    os.replace(partial, out / LUCENE_DIR)
    if terms is not None:
        row_groups, names = _row_groups(store, read_ids(out / "docids.txt"))
        terms.save(out / GROUPS_DIR, row_groups, names)
    searcher = LuceneSearcher(out / LUCENE_DIR)
    n_docs = searcher.num_docs
    searcher.close()
    if n_docs != len(store) - len(skipped):
        raise BerdsError(f"Lucene holds {n_docs} documents but {len(store) - len(skipped)} were sent — the index at {out} is incomplete")
    return finish_index_folder(
        out, "bm25", **settings,
        corpus=corpus_record(store),
        documents=n_docs,
        skipped_empty=len(skipped),
        skipped_examples=skipped[:10],
        grouped=grouped,
        build_seconds=round(seconds, 3),
        java=jvm_info(),
    )


# ---------------------------------------------------------------------------- per-group search


class GroupedBM25:
    """Exact Lucene BM25 within one group of a store, in memory (see the module docstring).

    Open with ``GroupedBM25(index_dir)``; ``search(group, query, k)`` -> ``[(docid, score)]``.
    """

    def __init__(self, index_dir: str | os.PathLike, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B):
        folder = Path(index_dir) / GROUPS_DIR
        if not folder.is_dir():
            raise InputError("this BM25 index has no per-group term counts (its corpus has no groups)", path=index_dir,
                             fix="search it without groups, or rebuild it from a store with groups")
        from berds.io import read_json

        self.k1, self.b = np.float32(k1), np.float32(b)
        index_dir = Path(index_dir)
        meta = read_index_meta(index_dir) if (index_dir / "meta.json").is_file() else {}

        def load(name: str, mmap: bool = False) -> np.ndarray:
            try:
                return np.load(folder / name, mmap_mode="r" if mmap else None, allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise damaged_index(folder / name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                    folder=index_dir, meta=meta) from None

        self.indptr = load("indptr.npy")
        self.terms = load("terms.npy", mmap=True)
        self.tfs = load("tfs.npy", mmap=True)
        self.lengths = load("lengths.npy")
        self.row_groups = load("row-groups.npy")
        rows = len(self.lengths)
        if (len(self.indptr) != rows + 1 or len(self.row_groups) != rows or len(self.terms) != len(self.tfs)
                or (rows and int(self.indptr[-1]) != len(self.terms))):
            raise damaged_index(folder, "the per-group term count files do not agree in size", folder=index_dir, meta=meta)
        self.term_id = {t: i for i, t in enumerate(read_json(folder / "vocab.json"))}
        self.group_names: list[str] = read_json(folder / "group-names.json")
        self._group_number = {g: i for i, g in enumerate(self.group_names)}
        self._group_rows = group_row_lists(self.row_groups, len(self.group_names))
        self.ids = IdTable(Path(index_dir) / "docids.txt")
        if len(self.ids) != rows:  # (a cut id list gave an IndexError from deep inside a search)
            raise damaged_index(index_dir / "docids.txt", f"{len(self.ids)} row ids for {rows} rows of term counts",
                                folder=index_dir, meta=meta)
        self._analyzer: LuceneAnalyzer | None = None

    def has_group(self, group: str) -> bool:
        return group in self._group_number

    def analyze(self, text: str) -> list[str]:
        if self._analyzer is None:
            self._analyzer = LuceneAnalyzer()
        return self._analyzer(text)

    def search(self, group: str, query: str, k: int) -> list[tuple[str, float]]:
        """Top-``k`` ``(docid, score)`` of ``group`` for ``query``, scored as a Lucene index of that group alone."""
        if group not in self._group_number:
            raise BerdsError(f"group {group!r} is not in this index ({len(self.group_names)} groups)")
        rows = self._group_rows[self._group_number[group]]
        query_counts: dict[int, int] = {}
        for token in self.analyze(query):
            tid = self.term_id.get(token)
            if tid is not None:
                query_counts[tid] = query_counts.get(tid, 0) + 1
        return self.score_rows(rows, query_counts, k)

    def score_rows(self, rows: np.ndarray, query_counts: dict[int, int], k: int) -> list[tuple[str, float]]:
        lengths = self.lengths[rows]
        n_docs = int((lengths > 0).sum())  # Lucene's docCount: documents with at least one token
        if not query_counts or n_docs == 0:
            return []
        avgdl = np.float32(int(lengths.sum()) / n_docs)
        # Lucene precomputes 1 / (k1 * (1 - b + b * L / avgdl)) for each of the 256 length bytes.
        norm_inverse = (np.float32(1) / (self.k1 * ((np.float32(1) - self.b) + self.b * LENGTH_TABLE / avgdl))).astype(np.float32)
        length_bytes = np.array([lucene_length_byte(int(n)) for n in lengths], dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        # Gather the group's (row, term, tf) entries restricted to the query's terms.
        local_rows = np.repeat(np.arange(len(rows)), ends - starts)
        flat = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(rows) else np.zeros(0, np.int64)
        terms = np.asarray(self.terms[flat])
        wanted = np.fromiter(query_counts, dtype=np.int32)
        hit = np.isin(terms, wanted)
        local_rows, terms, tfs = local_rows[hit], terms[hit], np.asarray(self.tfs[flat[hit]]).astype(np.float32)
        scores = np.zeros(len(rows), dtype=np.float64)
        matched = np.zeros(len(rows), dtype=bool)
        for tid, count in query_counts.items():
            sel = terms == tid
            df = int(sel.sum())
            if df == 0:
                continue
            weight = np.float32(count) * np.float32(np.log(1 + (n_docs - df + 0.5) / (df + 0.5)))
            freq = tfs[sel]
            ni = norm_inverse[length_bytes[local_rows[sel]]]
            scores[local_rows[sel]] += weight - weight / (np.float32(1) + freq * ni)
            matched[local_rows[sel]] = True
        candidates = np.nonzero(matched)[0]
        raw = scores[candidates].astype(np.float32)
        docids = [self.ids[int(rows[i])] for i in candidates]
        # Anserini sorts by raw score, then by docid; then rounds and separates ties (anserini_adjust_scores).
        order = sorted(range(len(candidates)), key=lambda j: (-float(raw[j]), docids[j]))[:k]
        adjusted = anserini_adjust_scores([raw[j] for j in order])
        return [(docids[j], float(score)) for j, score in zip(order, adjusted)]


def analyze(texts: Iterable[str]) -> list[list[str]]:
    """Analyse texts with the Lucene analyzer BM25 indexes use (starts Java)."""
    analyzer = LuceneAnalyzer()
    return [analyzer(t) for t in texts]
