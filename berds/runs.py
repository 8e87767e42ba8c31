"""Runs on disk.

A run folder holds

* ``manifest.json``   — what produced the run (retriever + options, corpus + fingerprint, index,
  expansion/rerank provenance, versions);
* ``run.trec``        — ``qid Q0 docid rank score tag`` lines, ranks from 1, tied scores ordered by docid
  descending (trec_eval's own order, so trec_eval/ir_measures and ranx agree on the file);
* ``run.ctxs.jsonl``  — the BERDS exchange format, one question per line:
  ``{"id", "question", "perspectives", "ctxs": [{"id", "title", "text", "score"}]}``.

``load_run`` reads a run folder or a single BERDS-format jsonl exactly as the original BERDS scripts
consume it (``ctxs`` entries need ``text``; ``title``, ``id`` and ``score`` are optional; a line in the
original exchange format with only ``perspectives`` + ``ctxs`` gets the id ``line-N``, N its line number).
``write_legacy_predictions`` / ``read_predictions`` write and read the original evaluation's prediction
files (``*.mistralpred*``: per ctx, ``mistral-preds`` = one boolean per perspective).
"""

from __future__ import annotations

import hashlib
import math
import re
from operator import attrgetter, gt
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from berds.questions import parse_question, record_id
from berds.errors import BerdsError, InputError
from berds.io import (
    MAX_TEXT_CHARS,
    atomic_write,
    check_text_size,
    jsonl_lines,
    jsonl_record,
    new_manifest,
    no_gc,
    read_json,
    sha256_file,
    text_limit,
    write_json,
)
from berds.types import Hit, Passage, Question, Run

MANIFEST = "manifest.json"
TREC = "run.trec"
CTXS = "run.ctxs.jsonl"
EVAL_DIR = "eval"  # a run folder's evaluations: eval/<judge>/ (berds eval writes them there)


# ------------------------------------------------------------------------------------------- writing


def _score(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else "0.0"


def _strictly_falling(values: Sequence[float]) -> bool:
    """Every value finite and below the one before it (two C-level passes; a sum past the float range just
    answers False)."""
    return math.isfinite(sum(values)) and all(map(gt, values, values[1:]))


def order_ties_like_trec_eval(hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` with each run of equal scores reordered by docid *descending*, the order trec_eval (and so
    ir_measures / pytrec_eval) gives tied documents whatever the file says. Hits with different scores keep
    their places. Written this way, a run reads the same in berds, trec_eval and tools that keep file
    order among ties (ranx)."""
    if _strictly_falling([h.score for h in hits]):  # the usual run: no ties, nothing to reorder
        return list(hits)
    scores = [_score(h.score) for h in hits]  # once per hit (it was twice per comparison: a save called it 4x)
    out: list[Hit] = []
    i, n = 0, len(hits)
    while i < n:
        j = i + 1
        while j < n and scores[j] == scores[i]:
            j += 1
        if j - i > 1:
            out += sorted(hits[i:j], key=lambda h: h.passage.id, reverse=True)
        else:
            out.append(hits[i])
        i = j
    return out


def one_token(text: str) -> bool:
    """``text`` is not empty and holds no whitespace (``str.split``'s: Unicode spaces and line breaks included) and
    no NUL character (trec_eval and other C readers end a field at one)."""
    parts = text.split()
    return len(parts) == 1 and len(parts[0]) == len(text) and "\x00" not in text


def id_flaw(text: str, *, line_breaks: bool = False) -> str:
    """What an id that is not ``one_token`` holds, for the error: a NUL character, else whitespace (with
    ``line_breaks``, a line break is named as such)."""
    if "\x00" in text:
        return "a NUL character"
    if line_breaks and (len(text.splitlines()) > 1 or text != text.rstrip("\r\n")):
        return "a line break"
    return "whitespace"


def fields_intact(text: str, lines: int, fields: int) -> bool:
    """Whether ``text`` — ``lines`` lines of ``fields`` fields, joined by one space, each line ended by a newline —
    splits back into exactly those fields (no field held whitespace or was empty). One C-level pass."""
    tokens = text.split()
    return (len(tokens) == lines * fields and sum(map(len, tokens)) + lines * fields == len(text)
            and "\x00" not in text)


def trec_scores(scores: Sequence[float]) -> list[float]:
    """Scores for one question's TREC lines, strictly decreasing in run order, so that every TREC tool reads
    the run in that order (trec_eval sorts ties by docid, ranx reorders ties in lists of 16 or more itself).
    Distinct scores stay as they are; each run of tied scores is spread evenly below its value, above the next
    lower score (1 below for a tie at the bottom). A list whose scores rise somewhere, are not finite, or are
    too close to spread in float precision gets ``n - position`` instead. The original scores stay in
    ``run.ctxs.jsonl``."""
    values = [float(x) for x in scores]
    n = len(values)
    if _strictly_falling(values):  # no ties to spread
        return values
    if all(math.isfinite(x) for x in values) and all(values[i] >= values[i + 1] for i in range(n - 1)):
        out = list(values)
        i = 0
        while i < n:
            j = i + 1
            while j < n and values[j] == values[i]:
                j += 1
            if j - i > 1:
                top = values[i]
                gap = (top - values[j]) if j < n else 1.0
                for m in range(i + 1, j):
                    out[m] = top - gap * (m - i) / (j - i)
            i = j
        if all(out[i] > out[i + 1] for i in range(n - 1)) and all(math.isfinite(x) for x in out):
            return out
    return [float(n - i) for i in range(n)]


def write_trec(run: Run, path: str | Path, tag: str | None = None, *, ties_ordered: bool = False) -> str:
    """TREC run file: hits in run order with tied scores ordered docid-descending
    (``order_ties_like_trec_eval``), rank = position from 1, scores made strictly decreasing in that order
    (``trec_scores``: trec_eval/ir_measures and ranx then read the same ranking at any depth; the original
    scores are those of ``run.ctxs.jsonl``). A docid repeated within a question (a merge that keeps
    duplicates) is written once, at its first position: TREC tools hold one score per docid.

    Returns the file's SHA-256 (hex), computed from the bytes as they are written (no second read).
    ``ties_ordered``: the caller already put ``run``'s ties in that order (``save_run`` does)."""
    tag = re.sub(r"\s", "_", tag or run.name or "berds")
    lines: list[str] = []
    for qid, hits in run.hits.items():
        firsts = hits if ties_ordered else order_ties_like_trec_eval(hits)
        ids = [h.passage.id for h in firsts]
        if len(set(ids)) != len(ids):  # a repeated docid: keep its first position
            seen: set[str] = set()
            firsts = [h for h in firsts if not (h.passage.id in seen or seen.add(h.passage.id))]
            ids = [h.passage.id for h in firsts]
        scores = trec_scores([h.score for h in firsts])
        lines += [f"{qid} Q0 {docid} {rank} {_score(score)} {tag}\n"
                  for rank, (docid, score) in enumerate(zip(ids, scores), start=1)]
    text = "".join(lines)
    if not fields_intact(text, len(lines), 6):  # an id holding whitespace would shift the fields after it
        qid, docid = next((q, h.passage.id) for q, hs in run.hits.items() for h in hs
                          if not (one_token(q) and one_token(h.passage.id)))
        raise InputError(f"question id {qid!r} / passage id {docid!r} holds "
                         f"{id_flaw(qid if not one_token(qid) else docid)}, which a TREC run file (fields split at "
                         "whitespace, ended at a NUL) cannot carry", path=path, record=qid,
                         fix="give questions and passages ids without spaces, tabs, line breaks or NUL characters")
    data = text.encode("utf-8")
    with atomic_write(path, "wb") as f:  # (bytes: what is hashed is exactly what is on disk)
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def ctxs_record(question: Question, hits: Sequence[Hit], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": question.id,
        "question": question.text,
        "perspectives": list(question.perspectives),
        "ctxs": [  # no "title" key for a passage read without one: the judge text depends on it
            {"id": h.passage.id, **({"title": h.passage.title} if h.passage.title_field else {}),
             "text": h.passage.text, "score": float(h.score)}
            for h in hits
        ],
    }
    if question.dataset:
        rec["dataset"] = question.dataset
    if extra:
        rec.update(extra)
    return rec


def write_ctxs_jsonl(
    run: Run, path: str | Path, *, extra: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """BERDS exchange format; ``extra[qid]`` adds fields to a question's line (e.g. legacy predictions).
    Returns the file's SHA-256 (hex), hashed line by line as it is written (``save_run`` records it: a second
    pass over the file cost as much as writing the TREC file)."""
    digest = hashlib.sha256()
    with atomic_write(path, "wb") as f:
        for qid, q in run.questions.items():
            added = (extra or {}).get(qid)
            line = _ctxs_line(ctxs_record(q, run.hits[qid], added), extra_fields=bool(added))
            digest.update(line)
            f.write(line)
    return digest.hexdigest()


def _ctxs_line(rec: dict[str, Any], *, extra_fields: bool) -> bytes:
    """One jsonl line: orjson (20x faster than ``json`` on 100 ctxs, the bulk of ``berds rerank``'s output time)
    where it writes what ``json`` would read back the same: finite scores and no extra fields (legacy
    predictions may hold NaN, which orjson writes as null, or integers past 64 bits). Else ``json``, which
    writes Infinity/NaN as ``load_run`` reads them."""
    import orjson

    if not extra_fields and math.isfinite(sum(c["score"] for c in rec["ctxs"])):
        try:
            return orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:  # (a lone surrogate: json reports it below as before)
            pass
    import json

    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


def _ctxs_sha256_on_record(folder: Path) -> str | None:
    """The ``ctxs_sha256`` of the run a folder holds now (None: no readable run)."""
    try:
        manifest = read_json(folder / MANIFEST)
    except (OSError, BerdsError):
        return None
    return manifest.get("ctxs_sha256") if isinstance(manifest, dict) else None


def save_run(run: Run, out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write a run folder (manifest, TREC file, BERDS jsonl). Refuses to replace a run unless ``overwrite``; a
    replaced run's evaluations (``eval/``) go with it, unless the new ranking file is byte-identical."""
    out = Path(out_dir)
    if (out / MANIFEST).exists() and not overwrite:
        raise BerdsError(f"{out} already holds a run — choose another --out or pass --overwrite")
    out.mkdir(parents=True, exist_ok=True)
    replaced = _ctxs_sha256_on_record(out)
    # ties in trec_eval's order in both files, so berds' metrics and TREC tools see the same ranking
    run = Run(run.questions, {qid: order_ties_like_trec_eval(h) for qid, h in run.hits.items()}, run.manifest, run.name)
    trec_sha256 = write_trec(run, out / TREC, ties_ordered=True)
    ctxs_sha256 = write_ctxs_jsonl(run, out / CTXS)
    if (out / EVAL_DIR).is_dir() and replaced != ctxs_sha256:
        # the evaluations in eval/ were of the run this one replaces: left there, they would read as this run's
        import shutil

        shutil.rmtree(out / EVAL_DIR)
    depth = [len(h) for h in run.hits.values()]
    empty = empty_questions(run)
    repeats = any(len({h.passage.id for h in hits}) != len(hits) for hits in run.hits.values())
    manifest = new_manifest(
        "run",
        name=run.name,
        questions=len(run),
        min_depth=min(depth, default=0),
        max_depth=max(depth, default=0),
        empty_questions=empty,  # retrieved nothing: eval/tune/analyze refuse them unless --allow-short
        ctxs_sha256=ctxs_sha256,  # ties the manifest to this ctxs file (checked on load)
        trec_sha256=trec_sha256,  # ... and to this TREC file, written from the same ranking
        # a ranking that repeats passages on purpose (the study's expansion merge): read back as it is
        **({DUPLICATES_KEY: "kept"} if repeats else {}),
        # the fields set above come from this run: a loaded run's manifest holds its own (load, subset, save)
        **{k: v for k, v in run.manifest.items()
           if k not in ("kind", "created", "versions", "name", "questions", "min_depth", "max_depth", "ctxs_sha256",
                        "trec_sha256", "empty_questions", DUPLICATES_KEY)},
    )
    write_json(out / MANIFEST, manifest)  # written last: its presence marks a complete run
    return out


# ------------------------------------------------------------------------------------------- reading


def run_stem(path: str | Path) -> str:
    """A run's name from its path: a folder's whole name, a file's name less ``.jsonl``/``.ctxs.jsonl``
    (never cut at the first dot: ``minilm-mmr0.5.jsonl`` -> ``minilm-mmr0.5``)."""
    path = Path(path)
    name = path.name
    if path.is_dir():
        return name
    for suffix in (".jsonl.gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith(".ctxs"):
        name = name[: -len(".ctxs")]
    return name or path.name


passage_of = attrgetter("passage")  # Hit -> Passage


def _synth_id(title: str, text: str) -> str:
    return "h" + hashlib.sha1(f"{title}\n{text}".encode("utf-8")).hexdigest()[:16]


def _parse_ctx(ctx: Any, *, path: Path, line: int, qid: str, pos: int, limit: int = MAX_TEXT_CHARS) -> tuple[Hit, bool]:
    where = f"{qid} ctxs[{pos}]"
    if not isinstance(ctx, dict):
        raise InputError(f"expected an object with 'text', got {type(ctx).__name__}", path=path, line=line, record=where)
    text = ctx.get("text")
    if not isinstance(text, str):
        raise InputError("passage has no 'text' string", path=path, line=line, record=where)
    check_text_size(text, limit, "the passage's text", path=path, line=line, record=where)
    title_field = "title" in ctx
    title = ctx.get("title") or ""
    if not isinstance(title, str):
        title = str(title)
    synthesized = ctx.get("id") in (None, "")
    pid = _synth_id(title, text) if synthesized else record_id(ctx["id"], what="passage 'id'", path=path, line=line,
                                                                  record=where)
    raw_score = ctx.get("score", 0.0)
    try:
        score = float(raw_score) if raw_score not in (None, "") else 0.0
    except (TypeError, ValueError):
        raise InputError(f"score {raw_score!r} is not a number", path=path, line=line, record=where) from None
    if math.isnan(score):
        score = 0.0
    return Hit(Passage(pid, text, title, title_field=title_field), score), synthesized


def _parse_ctxs(ctxs: list, *, path: Path, line: int, qid: str, exact: bool = True,
                limit: int = MAX_TEXT_CHARS) -> tuple[list[Hit], int] | None:
    """A question's ctxs as hits, and how many had their id synthesised. A ctx with a string id, title and text
    and a float score (what berds writes) is taken directly; anything else goes through ``_parse_ctx`` — or,
    for a record not read by ``json`` itself (``exact=False``), returns None: read the line again with ``json``."""
    hits: list[Hit] = []
    synthesized = 0
    for pos, ctx in enumerate(ctxs):
        if type(ctx) is dict:
            pid, title, text, score = ctx.get("id"), ctx.get("title"), ctx.get("text"), ctx.get("score")
            if type(pid) is str and pid and type(title) is str and type(text) is str and type(score) is float \
                    and score == score and len(text) <= limit:
                hits.append(Hit(Passage(pid, text, title), score))
                continue
        if not exact:
            return None
        hit, synth = _parse_ctx(ctx, path=path, line=line, qid=qid, pos=pos, limit=limit)
        hits.append(hit)
        synthesized += synth
    return hits, synthesized


_QUESTION_FIELDS = ("id", "qid", "question", "text", "query", "dataset")


def _orjson_record(raw: bytes) -> dict[str, Any] | None:
    """orjson's reading of a run line (2.5x faster than ``json``), or None where it could differ from ``json``'s
    in a field a run reader uses: orjson reads an integer past 64 bits as a float, so a float in a question
    field sends the line to ``json`` (and so does any ctx not in berds' own form: see ``_parse_ctxs``). Lines
    orjson refuses (NaN, lone surrogates, malformed JSON) go to ``json`` too, which reads or reports them."""
    import orjson

    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(rec) is not dict or any(type(rec.get(key)) is float for key in _QUESTION_FIELDS):
        return None
    perspectives = rec.get("perspectives")
    if type(perspectives) is list and not all(type(p) is str for p in perspectives):
        return None
    return rec


DUPLICATE_POLICIES = ("refuse", "dedupe", "keep")
DUPLICATES_KEY = "duplicate_passages"  # manifest key of a run folder whose rankings repeat passages on purpose


def unique_hits(hits: list[Hit], *, duplicates: str, path: Path, line: int, qid: str,
                duplicates_option: str | None = None) -> list[Hit]:
    """A question's ranking with each passage once. A passage listed twice would count twice in
    Precision@k (and fill two of the k slots); ``duplicates="refuse"`` (default) stops with an error naming
    the file, line and both positions, ``"dedupe"`` keeps the first (best-ranked) occurrence, ``"keep"``
    keeps every occurrence (what the study's query-expansion merge produced and its evaluation counted; a
    run folder written with repeats says so in its manifest and is read this way by default).

    ``duplicates_option`` names the caller's option that sets the policy (``berds eval``'s ``--duplicates``):
    the refusal's fix offers it. Without one (``rerank``, ``study``, ``report``, ... have none) it offers only
    what the user can do there: remove the repeat from the file."""
    if duplicates not in DUPLICATE_POLICIES:
        raise BerdsError(f"duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {duplicates!r}")
    if duplicates == "keep" or len({hit.passage.id for hit in hits}) == len(hits):  # (the usual case: no repeats)
        return list(hits)
    first: dict[str, int] = {}
    kept: list[Hit] = []
    for pos, hit in enumerate(hits):
        pid = hit.passage.id
        if pid in first:
            if duplicates == "refuse":
                raise InputError(f"passage {pid!r} is listed twice in this question's ctxs (positions {first[pid]} and {pos})",
                                 path=path, line=line, record=qid,
                                 fix=f"remove the repeat, or pass {duplicates_option} dedupe to keep only its first "
                                     "occurrence" if duplicates_option else
                                     "remove the repeat from the file, keeping its first (best-ranked) occurrence")
            continue
        first[pid] = pos
        kept.append(hit)
    return kept


def read_ctxs_jsonl(path: str | Path, *, allow_empty_ctxs: bool = False, duplicates: str = "refuse",
                    require_perspectives: bool = True, duplicates_option: str | None = None,
                    allow_empty_option: str | None = "--allow-short",
                    judge_digests: dict[str, list[bytes]] | None = None, title_position: str = "after",
                    digest: Any = None) -> Run:
    """A BERDS-format jsonl -> ``Run`` (hits in file order, which is the ranking; see ``unique_hits``).

    ``require_perspectives=False`` reads runs over questions without gold perspectives (DELPHI retrievals).
    ``allow_empty_option``: the command's option that takes empty questions, offered when one is refused
    (``None``: the command has none).

    ``judge_digests``: a dict to fill with ``qid ->`` the digests of each ranked passage's judge text (as
    ``Passage.judge_text_digests(passages, title_position)`` gives them); each passage's text and
    title are then dropped as its line is read (left ``""``; ids and scores stay), so a fully cached evaluation never holds the run's texts.

    ``digest``: a ``hashlib`` object fed the file's bytes as they are read (``load_run`` checks the manifest's
    checksum with it)."""
    with no_gc():
        return _read_ctxs_jsonl(Path(path), allow_empty_ctxs, duplicates, require_perspectives, duplicates_option,
                                allow_empty_option, judge_digests, title_position, digest)


NO_QUESTION_TEXT = "(question on line {line})"  # the text of a record that has none (the exchange format)


def _read_ctxs_jsonl(path: Path, allow_empty_ctxs: bool, duplicates: str, require_perspectives: bool,
                     duplicates_option: str | None = None, allow_empty_option: str | None = "--allow-short",
                     judge_digests: dict[str, list[bytes]] | None = None, title_position: str = "after",
                     digest: Any = None) -> Run:
    questions: list[Question] = []
    hits: list[list[Hit]] = []
    reader = _LineReader(path, allow_empty_ctxs, duplicates, require_perspectives, duplicates_option, allow_empty_option)
    for _, _, q, qhits in reader.records(digest):
        questions.append(q)
        hits.append(qhits)
        if judge_digests is not None:  # hashed now, the texts dropped: memory stays flat whatever the run's size
            judge_digests[q.id] = _drop_texts(qhits, title_position)
    if not questions:
        raise InputError("holds no questions", path=path)
    return Run.from_lists(questions, hits, manifest=reader.manifest(), name=run_stem(path))


def _drop_texts(hits: list[Hit], title_position: str) -> list[bytes]:
    """The digests of ``hits``' judge texts; their passages' texts and titles are then dropped (left ``""``)."""
    sds = Passage.judge_text_digests(map(passage_of, hits), title_position)
    for hit in hits:  # (passages just made by the reader, shared with nothing: set as Passage.__init__ does)
        hit.passage.__dict__["text"] = hit.passage.__dict__["title"] = ""
    return sds


class _Counting:
    """A ``digest`` for ``jsonl_lines`` that counts the bytes read (a line's offset, to read it again) and feeds them
    on to a hash, if any."""

    def __init__(self, inner: Any = None) -> None:
        self.read, self.inner = 0, inner

    def update(self, raw: bytes) -> None:
        self.read += len(raw)
        if self.inner is not None:
            self.inner.update(raw)


class _LineReader:
    """The lines of a BERDS-format jsonl as ``(line, byte offset, Question, hits)``, with every check
    ``read_ctxs_jsonl`` makes (it reads through this); ``record_at`` reads one line again by its offset."""

    def __init__(self, path: Path, allow_empty_ctxs: bool, duplicates: str, require_perspectives: bool,
                 duplicates_option: str | None, allow_empty_option: str | None) -> None:
        self.path, self.allow_empty_ctxs, self.duplicates = path, allow_empty_ctxs, duplicates
        self.require_perspectives, self.duplicates_option = require_perspectives, duplicates_option
        self.allow_empty_option, self.limit = allow_empty_option, text_limit()
        self.synthesized = self.exchange_only = 0

    def manifest(self) -> dict[str, Any]:
        """The manifest of a run read from a bare jsonl (complete once every line is read)."""
        manifest: dict[str, Any] = {"source": {"format": "berds-ctxs-jsonl", "path": str(self.path)}}
        if self.synthesized:
            manifest["source"]["synthesized_passage_ids"] = self.synthesized
        if self.exchange_only:
            manifest["source"]["ids_from_line_numbers"] = self.exchange_only
        return manifest

    def records(self, digest: Any = None) -> Iterator[tuple[int, int, Question, list[Hit]]]:
        seen: dict[str, int] = {}
        counter = _Counting(digest)
        for line, raw in jsonl_lines(self.path, what="a BERDS-format run", digest=counter):
            parsed = self.parse(line, raw)
            if parsed is None:
                continue
            q, hits = parsed
            if q.id in seen:
                raise InputError(f"duplicate question id (first on line {seen[q.id]})", path=self.path, line=line,
                                 record=q.id)
            seen[q.id] = line
            yield line, (0 if line == 1 else counter.read - len(raw)), q, hits

    def record_at(self, line: int, offset: int) -> tuple[Question, list[Hit]]:
        """The question on ``line`` (at byte ``offset``) read again, as ``records`` gave it."""
        with open(self.path, "rb") as f:
            f.seek(offset)
            raw = f.readline()
        if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        parsed = self.parse(line, raw, count=False)
        assert parsed is not None, f"{self.path}: line {line} was read before"
        return parsed

    def parse(self, line: int, raw: bytes, *, count: bool = True) -> tuple[Question, list[Hit]] | None:
        """One line as (question, hits); None for a line of Unicode whitespace."""
        path, limit = self.path, self.limit
        rec, exact = _orjson_record(raw), False
        if rec is None:
            rec, exact = jsonl_record(raw, path, line), True
            if rec is None:
                return None
        if isinstance(rec, dict) and "perspectives" in rec and "ctxs" in rec and not (
                {"id", "qid"} & rec.keys() and {"question", "text", "query"} & rec.keys()):
            # the original exchange format needs only perspectives + ctxs: the line number stands in
            rec = {**rec, "id": rec.get("id", rec.get("qid", f"line-{line}")),
                   "question": rec.get("question", rec.get("text", rec.get("query", NO_QUESTION_TEXT.format(line=line))))}
            self.exchange_only += count
        q = parse_question(rec, path=path, line=line, dataset=str(rec.get("dataset", "")),
                           require_perspectives=self.require_perspectives)
        ctxs = rec.get("ctxs")
        if ctxs is None:
            raise InputError("record has no 'ctxs' (the retrieved passages)", path=path, line=line, record=q.id,
                             fix='add "ctxs": [{"id", "title", "text", "score"}, ...]')
        if not isinstance(ctxs, list):
            raise InputError("'ctxs' must be a list of passages", path=path, line=line, record=q.id)
        if not ctxs and not self.allow_empty_ctxs:
            fix = "re-run retrieval for it or drop the question"
            if self.allow_empty_option:
                fix = (f"re-run retrieval for it, drop the question, or pass {self.allow_empty_option} to score it as "
                       "zero (no passage supports any perspective)")
            raise InputError("'ctxs' is empty: nothing was retrieved for this question", path=path, line=line,
                             record=q.id, fix=fix)
        parsed = _parse_ctxs(ctxs, path=path, line=line, qid=q.id, exact=exact, limit=limit)
        if parsed is None:  # a ctx not in berds' own form, in a line orjson read: read it with json
            parsed = _parse_ctxs(jsonl_record(raw, path, line)["ctxs"], path=path, line=line, qid=q.id, limit=limit)
        hits, synth = parsed
        self.synthesized += synth * count
        return q, unique_hits(hits, duplicates=self.duplicates, path=path, line=line, qid=q.id,
                              duplicates_option=self.duplicates_option)


class RunStream:
    """A run read question by question, for work whose memory must not grow with the run (``berds eval``'s
    streamed evaluation): a run folder or BERDS-format jsonl with every check ``load_run`` makes, the
    end-of-file ones (no questions, the manifest's checksum or counts) once the last line is read.

    ``streamable`` is False for a run folder whose ``run.trec`` must be compared with the whole ranking (one not
    written by ``save_run`` beside this ctxs file): read it with ``load_run``. ``questions()`` yields ``(line,
    byte offset, Question, hits, digests)``: each ranked passage's judge-text digest (``title_position``), and
    hits whose texts and titles are dropped (``keep_texts=False``). ``manifest`` is complete after a full pass."""

    def __init__(self, path: str | Path, *, allow_empty: bool = False, duplicates: str = "refuse",
                 duplicates_option: str | None = None, allow_empty_option: str | None = "--allow-short",
                 title_position: str = "after") -> None:
        self.path = path = Path(path)
        self.title_position = title_position
        self.folder_manifest: dict[str, Any] | None = None
        self.streamable = True
        if path.is_dir():
            ctxs, manifest, duplicates = _folder_prelude(path, duplicates)
            self.folder_manifest = manifest
            if (path / TREC).exists() and duplicates in ("refuse", "keep") and not _written_together(manifest, path / TREC):
                self.streamable = False
            self.name = manifest.get("name") or path.name
        else:
            if not path.exists():
                raise InputError("no such run folder or file", path=path)
            _refuse_non_jsonl_run(path)
            ctxs = path
            self.name = run_stem(path)
        self.duplicates = duplicates
        self.reader = _LineReader(ctxs, allow_empty, duplicates, True, duplicates_option, allow_empty_option)

    @property
    def manifest(self) -> dict[str, Any]:
        if self.folder_manifest is None:
            return self.reader.manifest()
        self.folder_manifest.setdefault("source", {"format": "run-folder", "path": str(self.path)})
        return self.folder_manifest

    def questions(self, *, keep_texts: bool = False) -> Iterator[tuple[int, int, Question, list[Hit], list[bytes]]]:
        manifest = self.folder_manifest
        digest = hashlib.sha256() if manifest and manifest.get("ctxs_sha256") is not None else None
        count, depths = 0, [math.inf, 0]
        self.reader.synthesized = self.reader.exchange_only = 0
        for line, offset, q, hits in self.reader.records(digest):
            count += 1
            depths[0], depths[1] = min(depths[0], len(hits)), max(depths[1], len(hits))
            if keep_texts:
                yield line, offset, q, hits, Passage.judge_text_digests(map(passage_of, hits), self.title_position)
            else:
                yield line, offset, q, hits, _drop_texts(hits, self.title_position)
        if not count:
            raise InputError("holds no questions", path=self.reader.path)
        if manifest:
            _check_manifest_counts(manifest, self.reader.path, count, int(depths[0]), depths[1],
                                   depths=self.duplicates != "dedupe",
                                   ctxs_sha256=digest.hexdigest() if digest is not None else None)

    def question_at(self, line: int, offset: int) -> tuple[Question, list[Hit], list[bytes]]:
        """The question ``questions()`` gave at ``line``/``offset``, read again (texts dropped)."""
        q, hits = self.reader.record_at(line, offset)
        return q, hits, _drop_texts(hits, self.title_position)


def question_line(path: str | Path | None, qid: str) -> int | None:
    """The line of a ctxs jsonl that holds question ``qid``, for an error found after reading (the ``Run`` keeps
    no line numbers); None when it cannot be found."""
    if not path or not Path(path).is_file():
        return None
    path = Path(path)
    try:
        for line, raw in jsonl_lines(path):
            rec = _orjson_record(raw) or jsonl_record(raw, path, line) or {}
            if str(rec.get("id", rec.get("qid", f"line-{line}"))) == qid:
                return line
    except (BerdsError, OSError):
        return None
    return None


def empty_questions(run: Run) -> list[str]:
    """Ids of the questions for which nothing was retrieved."""
    return [qid for qid, hits in run.hits.items() if not hits]


def check_manifest(manifest: Mapping[str, Any], run: Run, ctxs: Path, *, depths: bool = True,
                   ctxs_sha256: str | None = None) -> None:
    """Refuse a run folder whose ``manifest.json`` describes another run than its ``run.ctxs.jsonl``
    (copied in from elsewhere, or a ctxs file replaced by hand): the manifest is what eval reports.
    ``ctxs_sha256``: the ctxs file's hash, taken while it was read (else it is read again here)."""
    depth = [len(h) for h in run.hits.values()]
    _check_manifest_counts(manifest, ctxs, len(run), min(depth, default=0), max(depth, default=0), depths=depths,
                           ctxs_sha256=ctxs_sha256)


def _check_manifest_counts(manifest: Mapping[str, Any], ctxs: Path, questions: int, min_depth: int, max_depth: int,
                           *, depths: bool = True, ctxs_sha256: str | None = None) -> None:
    """``check_manifest`` from the run's counts (a run read question by question keeps no ``Run``)."""
    path = ctxs.parent / MANIFEST
    fix = "the manifest belongs to another run: re-run `berds retrieve`, or remove manifest.json to use the ctxs file alone"
    if manifest.get("kind") not in (None, "run"):
        raise InputError(f"is a {manifest.get('kind')!r} manifest, not a run's", path=path, fix=fix)
    recorded = manifest.get("ctxs_sha256")
    if recorded is not None:
        if recorded != (ctxs_sha256 or sha256_file(ctxs)):
            raise InputError(f"does not match {CTXS} (its recorded SHA-256 differs)", path=path, fix=fix)
        return
    found = {"questions": questions, "min_depth": min_depth, "max_depth": max_depth}
    if not depths:  # a deduplicated reading is shorter than what the manifest counted
        found = {"questions": questions}
    for key, value in found.items():
        if key in manifest and manifest[key] != value:
            raise InputError(f"records {key}={manifest[key]} but {CTXS} has {value}", path=path, fix=fix)


def _written_together(manifest: Mapping[str, Any], trec: Path) -> bool:
    """Whether the TREC file is, by its SHA-256, the one ``save_run`` wrote beside the ctxs file this manifest
    records (``check_manifest`` checks that one): the two then hold the same ranking, and parsing every TREC line
    to compare them (a quarter of a cached evaluation's time) is skipped."""
    recorded = manifest.get("trec_sha256")
    return bool(recorded and manifest.get("ctxs_sha256")) and recorded == sha256_file(trec)


def load_run(path: str | Path, *, allow_empty: bool = False, duplicates: str = "refuse",
             require_perspectives: bool = True, duplicates_option: str | None = None,
             allow_empty_option: str | None = "--allow-short",
             judge_digests: dict[str, list[bytes]] | None = None, title_position: str = "after") -> Run:
    """A run folder (``manifest.json`` + ``run.ctxs.jsonl``, checked against its ``run.trec``) or a single
    BERDS-format jsonl. ``duplicates`` and ``duplicates_option``: see ``unique_hits``.

    Questions with no passages are refused unless ``allow_empty`` (they then score zero); the refusal offers
    ``allow_empty_option`` (``None`` where the command has no such option). A run folder's manifest is checked
    against its ctxs file. ``judge_digests``/``title_position``: see ``read_ctxs_jsonl`` (a run without texts).
    """
    path = Path(path)
    if path.is_dir():
        ctxs, manifest, duplicates = _folder_prelude(path, duplicates)
        digest = hashlib.sha256() if manifest.get("ctxs_sha256") is not None else None  # (hashed as it is read)
        run = read_ctxs_jsonl(ctxs, allow_empty_ctxs=allow_empty, duplicates=duplicates,
                              require_perspectives=require_perspectives, duplicates_option=duplicates_option,
                              allow_empty_option=allow_empty_option, judge_digests=judge_digests,
                              title_position=title_position, digest=digest)
        if (path / TREC).exists() and duplicates in ("refuse", "keep") and not _written_together(manifest, path / TREC):
            check_trec_matches(path / TREC, run)  # (a deduplicated ranking differs from it)
        if manifest:
            check_manifest(manifest, run, ctxs, depths=duplicates != "dedupe",
                           ctxs_sha256=digest.hexdigest() if digest is not None else None)
        manifest.setdefault("source", {"format": "run-folder", "path": str(path)})
        return Run(run.questions, run.hits, manifest, manifest.get("name") or path.name)
    if not path.exists():
        raise InputError("no such run folder or file", path=path)
    _refuse_non_jsonl_run(path)
    return read_ctxs_jsonl(path, allow_empty_ctxs=allow_empty, duplicates=duplicates,
                           require_perspectives=require_perspectives, duplicates_option=duplicates_option,
                           allow_empty_option=allow_empty_option, judge_digests=judge_digests,
                           title_position=title_position)


def _folder_prelude(path: Path, duplicates: str) -> tuple[Path, dict[str, Any], str]:
    """A run folder's ctxs file, manifest (``{}`` when it has none) and duplicates policy (``keep`` where its
    manifest says the repeats are on purpose), with the checks made before its ctxs file is read."""
    ctxs = path / CTXS
    if not ctxs.exists():
        inside = sorted(p.name for p in path.iterdir() if (p / CTXS).is_file())
        if inside:  # a folder of runs (demo-out/runs) given for the runs in it
            shown = ", ".join(inside[:5]) + (", ..." if len(inside) > 5 else "")
            raise InputError(f"no {CTXS} in this folder, but it holds run folders ({shown})", path=path,
                             fix=f"pass the runs themselves, e.g. {path / '*'}")
        raise InputError(
            f"no {CTXS} in this folder", path=path,
            fix="pass a run folder written by `berds retrieve` or a BERDS-format .jsonl file",
        )
    for name in (MANIFEST, TREC):
        if (path / name).is_dir():
            raise InputError(f"{name} is a folder, expected a file", path=path / name,
                             fix="remove it (the run folder is read without it) or rewrite the run with `berds retrieve`")
    manifest = read_json(path / MANIFEST) if (path / MANIFEST).exists() else {}
    if not isinstance(manifest, dict):
        raise InputError(f"expected a JSON object, got {type(manifest).__name__}", path=path / MANIFEST,
                         fix="restore the manifest written with the run, or remove it")
    if duplicates == "refuse" and manifest.get(DUPLICATES_KEY) == "kept":
        duplicates = "keep"  # written so on purpose (the study's expansion merge)
    return ctxs, manifest, duplicates


def _refuse_non_jsonl_run(path: Path) -> None:
    """A compressed file or a TREC run given as the run: each failed on its first line as bad UTF-8 or bad JSON.
    (The compressed check, which ``jsonl_lines`` makes too, comes first here: sniffing a binary file for a TREC
    line would read it up to its first newline byte.)"""
    from berds.io import refuse_compressed

    refuse_compressed(path, "a BERDS-format run")
    if path.name == MANIFEST and (path.parent / CTXS).is_file():  # failed as 'malformed JSON' on line 1
        raise InputError("is a run folder's manifest, not a run", path=path,
                         fix=f"pass the run folder itself: {path.parent}")
    with open(path, "rb") as f:
        first = next((line for line in f if line.strip()), b"")
    parts = first.split()
    if len(parts) == 6 and parts[1] == b"Q0" and not first.lstrip().startswith(b"{"):
        raise InputError("is a TREC run file, which holds no passage texts or perspectives to judge", path=path,
                         fix=f"pass the run folder that holds it ({path.parent}: manifest.json, {CTXS}, {TREC}) "
                             "or a BERDS-format jsonl; a TREC run made elsewhere becomes a run folder with "
                             f"`berds import run --trec {path} --corpus STORE --questions SET --out RUN`")



def _first_occurrences(hits: Sequence[Hit]) -> list[Hit]:
    seen: set[str] = set()
    return [h for h in hits if not (h.passage.id in seen or seen.add(h.passage.id))]


def check_trec_matches(path: Path, run: Run) -> None:
    """Check a run folder's ``run.trec`` line by line against the ranking in its ``run.ctxs.jsonl``: six
    fields, an integer rank, a numeric score, a known question, the same passage at that rank, and every
    ranked passage present. Errors name the file and line (a hand-edited or truncated TREC file would
    otherwise disagree silently with what is evaluated)."""
    # run.trec lists a repeated passage once, at its first rank (write_trec)
    run = Run(run.questions, {qid: _first_occurrences(hits) for qid, hits in run.hits.items()}, run.manifest, run.name)
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise InputError(f"expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}", path=path, line=lineno,
                                 fix=f"rewrite it from {CTXS} or remove it")
            qid, _, docid, rank_text, score_text, _ = parts
            try:
                rank, score = int(rank_text), float(score_text)
            except ValueError:
                raise InputError("rank must be an integer and score a number", path=path, line=lineno) from None
            hits = run.hits.get(qid)
            if hits is None:
                raise InputError(f"question {qid!r} is not in {CTXS}", path=path, line=lineno)
            if not 1 <= rank <= len(hits) or hits[rank - 1].passage.id != docid:
                want = hits[rank - 1].passage.id if 1 <= rank <= len(hits) else f"nothing (it has {len(hits)} passages)"
                raise InputError(f"rank {rank} of question {qid!r} is {docid!r}, but {CTXS} has {want!r} there",
                                 path=path, line=lineno, fix=f"the two files of a run must agree: rewrite {TREC} from {CTXS}")
            if math.isnan(score):
                raise InputError("score is NaN", path=path, line=lineno)
            seen[qid] = seen.get(qid, 0) + 1
    for qid, hits in run.hits.items():
        if seen.get(qid, 0) != len(hits):
            raise InputError(f"question {qid!r} has {seen.get(qid, 0)} lines here but {len(hits)} passages in {CTXS}",
                             path=path, fix=f"the file is incomplete: rewrite {TREC} from {CTXS}")


def read_trec(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """``qid -> [(docid, score), ...]`` in rank order; malformed lines, bad UTF-8 and a docid listed twice for
    one question (TREC tools hold one score per docid) name the line."""
    from berds.io import refuse_compressed

    path = Path(path)
    refuse_compressed(path, "a TREC run file")
    out: dict[str, list[tuple[str, int, float]]] = {}
    first: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8-sig") as f:  # (a byte-order mark would start the first qid)
        try:
            for lineno, line in enumerate(f, start=1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) != 6:
                    raise InputError(f"expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}", path=path,
                                     line=lineno)
                try:
                    rank, score = int(parts[3]), float(parts[4])
                except ValueError:
                    raise InputError("rank must be an integer and score a number", path=path, line=lineno) from None
                if not math.isfinite(score):
                    raise InputError(f"score is {parts[4]}, not a finite number", path=path, line=lineno)
                if (seen := first.setdefault((parts[0], parts[2]), lineno)) != lineno:
                    raise InputError(f"question {parts[0]!r} lists passage {parts[2]!r} again (first on line {seen})",
                                     path=path, line=lineno, fix="keep one line per question and passage")
                out.setdefault(parts[0], []).append((parts[2], rank, score))
        except UnicodeDecodeError as exc:
            raise InputError(f"is not UTF-8 text ({exc.reason} at byte {exc.start} of a read block)", path=path,
                             fix="a TREC run file is plain text: qid Q0 docid rank score tag") from None
    return {q: [(d, s) for d, _, s in sorted(v, key=lambda x: x[1])] for q, v in out.items()}


LEGACY_PREDICTIONS = "run.mistralpred.jsonl"  # the original evaluation finds prediction files by ".mistralpred"
PREDICTIONS_FIELD = "mistral-preds"


def write_legacy_predictions(run: Run, support: Mapping[str, Any], path: str | Path) -> Path:
    """Write what the original BERDS evaluation reads in its compute-only mode: the exchange format with,
    in *each* judged ctx, ``"mistral-preds"``: a list of booleans, one per perspective (``support[qid]`` is
    the perspectives x judged-passages matrix). Only the judged passages are written. Atomic."""
    import json

    path = Path(path)
    with atomic_write(path) as f:
        for qid, q in run.questions.items():
            matrix = support[qid]
            depth = len(matrix[0]) if len(matrix) else 0
            rec = ctxs_record(q, run.hits[qid][:depth])
            for j, ctx in enumerate(rec["ctxs"]):
                ctx[PREDICTIONS_FIELD] = [bool(matrix[i][j]) for i in range(len(q.perspectives))]
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


GPT4_PREDICTIONS_FIELD = "gpt4-preds"  # the study's GPT-4 judgements, in files named with ".gpt4pred"


def predictions_field(path: str | Path, first_ctx: Mapping[str, Any] | None = None) -> str:
    """Which ctx field holds a prediction file's judgements. The study's compute-only mode decides by the
    file name: ``gpt4-preds`` when it contains ``.gpt4pred``, else ``mistral-preds`` (and it refuses a name
    with neither ``.gpt4pred`` nor ``.mistralpred``). berds takes any name: one with neither marker uses the
    field its first ctx carries (``mistral-preds`` when both or none are there)."""
    name = Path(path).name
    if ".gpt4pred" in name:
        return GPT4_PREDICTIONS_FIELD
    if ".mistralpred" in name or first_ctx is None:
        return PREDICTIONS_FIELD
    if GPT4_PREDICTIONS_FIELD in first_ctx and PREDICTIONS_FIELD not in first_ctx:
        return GPT4_PREDICTIONS_FIELD
    return PREDICTIONS_FIELD


def read_predictions(path: str | Path, *, allow_empty: bool = False, duplicates: str = "keep",
                     duplicates_option: str | None = None) -> tuple[Run, dict[str, list[list[bool]]]]:
    """A file with predictions already in it (the original compute-only mode): ``(run, support)``, where
    ``support[qid][i][j]`` is ctx ``j``'s prediction for perspective ``i`` (``mistral-preds``, or
    ``gpt4-preds`` in the study's GPT-4 files: see ``predictions_field``). Predictions must be booleans (the
    original code counts any non-empty string, "No" included, as true, so strings are refused rather than
    guessed).

    ``duplicates``: a ctx that repeats a passage of the same question (every query-expansion run of the study
    keeps them) is counted with its own prediction under ``"keep"`` (default: what the original evaluation
    does), dropped with its prediction under ``"dedupe"`` (the first occurrence stays), refused under
    ``"refuse"`` (see ``unique_hits``)."""
    import json

    if duplicates not in DUPLICATE_POLICIES:
        raise BerdsError(f"duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {duplicates!r}")
    path = Path(path)
    run = read_ctxs_jsonl(path, allow_empty_ctxs=allow_empty, duplicates="keep")
    support: dict[str, list[list[bool]]] = {}
    hits: dict[str, list[Hit]] = {}
    with open(path, encoding="utf-8") as f:
        records = [(n, json.loads(line)) for n, line in enumerate(f, start=1) if line.strip()]
    field_name = None
    for (line, rec), (qid, q) in zip(records, run.questions.items()):
        if field_name is None and rec["ctxs"]:
            field_name = predictions_field(path, rec["ctxs"][0])
        rows: list[list[bool]] = [[] for _ in q.perspectives]
        for j, ctx in enumerate(rec["ctxs"]):
            preds = ctx.get(field_name)
            if preds is None:
                if j == 0:
                    raise InputError(f"ctxs[0] has no '{field_name}'", path=path, line=line, record=qid,
                                     fix=f"each judged ctx needs '{field_name}': one boolean per perspective "
                                         "(berds eval --write-legacy writes such files; the study's GPT-4 files carry "
                                         f"'{GPT4_PREDICTIONS_FIELD}' and '.gpt4pred' in their name)")
                break  # the judged passages come first; the rest were not judged
            if not isinstance(preds, list) or len(preds) != len(q.perspectives) or not all(
                    isinstance(x, bool) for x in preds):
                raise InputError(f"ctxs[{j}].{field_name} must be a list of {len(q.perspectives)} booleans "
                                 f"(one per perspective), got {preds!r:.80}", path=path, line=line, record=qid)
            for i, x in enumerate(preds):
                rows[i].append(x)
        qhits = list(run.hits[qid])
        if duplicates != "keep":
            kept = unique_hits(qhits, duplicates=duplicates, path=path, line=line, qid=qid,
                               duplicates_option=duplicates_option)
            if len(kept) != len(qhits):  # drop each repeated ctx with its predictions (the first one stays)
                first = {}
                for j, h in enumerate(qhits):
                    first.setdefault(h.passage.id, j)
                keep = [first[h.passage.id] == j for j, h in enumerate(qhits)]
                rows = [[x for x, k in zip(row, keep) if k] for row in rows]
                qhits = kept
        hits[qid] = qhits
        support[qid] = rows
    if duplicates != "keep":
        run = Run(run.questions, hits, manifest=run.manifest, name=run.name)
    return run, support


def iter_passages(run: Run) -> Iterable[Passage]:
    """Every distinct passage of a run (first occurrence wins)."""
    seen: set[str] = set()
    for hits in run.hits.values():
        for h in hits:
            if h.passage.id not in seen:
                seen.add(h.passage.id)
                yield h.passage
