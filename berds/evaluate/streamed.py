"""``berds eval`` over a run read question by question: memory that does not grow with the run (issue 36).

``evaluate_paths`` evaluates a run this way whenever it needs nothing of the whole run at once (it does for a
``check_run``, legacy predictions, ``--overwrite always``, ``--no-cache``, or a run folder whose TREC file must be
compared with the whole ranking). One pass (``_Pass``) reads the run line by line (``berds.runs.RunStream``: every
check ``load_run`` makes, each passage's judge text hashed and dropped as it is read), looks the verdicts of
``BATCH`` questions up at a time, computes each question's metrics and writes its ``judgements.jsonl`` lines to a
temporary file beside the output; what a question leaves behind is its metrics (and, with
``EvalOptions.matrices``, its support and P(Yes) matrices). The outputs are byte for byte those of the whole-run
path (``evaluate_run`` + ``write_eval_outputs``; tests/test_evaluate.py compares them).

Every run is read once before anything is judged, so bad input fails first, as before. A run whose pairs are all
cached is then done: its files are renamed into place. A run with pairs to judge is read twice more: once keeping
the texts of its missing pairs only, which are judged in one list in the whole-run path's order (each batch
committed to the cache as it is answered: a killed evaluation resumes), and once more to write its outputs.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from berds.errors import BerdsError, InputError
from berds.evaluate.cache import Digests, JudgementCache
from berds.evaluate.evaluation import (NO_VERDICTS, EvalOptions, EvalResult, JudgeStats, judgement_tail,
                                       judgements_key_start, judgements_key_update, question_judgement_lines,
                                       short_question, verdict_matrices)
from berds.evaluate.metrics import aggregate, question_metrics, repeat_metrics
from berds.runs import RunStream
from berds.types import JudgePair, Run

BATCH = 64  # questions per cache lookup: a few hundred perspectives, each one query in one read snapshot


class _Dropped(Exception):
    """Thrown into a pending file's ``atomic_write`` to remove it."""


class PendingFile:
    """A file written under a temporary name beside ``path`` (``berds.io.atomic_write``), held open across the
    runs of one evaluation: ``commit`` renames it into place, ``drop`` removes it (and the folders made for it)."""

    def __init__(self, path: Path) -> None:
        from berds.io import atomic_write

        self.path = path
        missing = []
        probe = path.parent
        while not probe.exists() and probe.parent != probe:
            missing.append(probe)
            probe = probe.parent
        self._made = missing  # deepest first: removed again if nothing is committed
        self._cm = atomic_write(path, "wb")
        self.file = self._cm.__enter__()
        self.sha256, self.size = hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        self.sha256.update(data)
        self.size += len(data)
        self.file.write(data)

    def commit(self) -> None:
        self._cm.__exit__(None, None, None)

    def drop(self) -> None:
        self._cm.__exit__(_Dropped, _Dropped(), None)
        for folder in self._made:
            try:
                folder.rmdir()
            except OSError:  # (something else was put there)
                break


@dataclass
class _Pass:
    """What one pass over a run gathered."""

    stats: JudgeStats = field(default_factory=JudgeStats)
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)
    repeats: dict[str, dict[str, float]] = field(default_factory=dict)
    any_repeat: bool = False
    datasets: dict[str, str] = field(default_factory=dict)
    support: dict[str, np.ndarray] = field(default_factory=dict)
    p_yes: dict[str, np.ndarray] = field(default_factory=dict)
    missing: dict[bytes, dict[bytes, None]] = field(default_factory=dict)  # perspective -> passages not cached
    texts: dict[bytes, str] = field(default_factory=dict)  # (keep_texts) digest -> text of the missing pairs
    short: Any = None  # the first question shorter than the depth: (Question, hits), refused after every run is read
    key: Any = None
    pending: PendingFile | None = None


def _pass(stream: RunStream, judge_id: str, prompt_version: str, opts: EvalOptions, cache: JudgementCache,
          out: PendingFile | None, *, keep_texts: bool = False, extra: dict[bytes, dict[bytes, tuple]] | None = None
          ) -> _Pass:
    """Read ``stream`` once: verdicts from ``cache`` (plus ``extra``: verdicts just answered that a runner did not
    store), metrics per question and, while every pair is cached, the judgement lines into ``out``. Pairs not
    cached are gathered in ``missing`` (with their texts, ``keep_texts``) in the order ``evaluate_run`` judges
    them: perspectives by first appearance, each one's passages by first appearance."""
    depth = opts.ks[-1]
    got = _Pass(pending=out, key=judgements_key_start(judge_id))
    tail = judgement_tail(judge_id)
    digest = Digests()
    first_seen: dict[bytes, tuple[int, int]] = {}  # perspective -> (line, offset) of its first question
    shared: dict[bytes, set[bytes]] = {}  # perspectives of several questions: their passages so far (distinct pairs)
    stats = got.stats
    stats.yes = 0
    batch: list[tuple] = []

    def flush() -> None:
        rows = []
        for line, offset, q, hits, sds in batch:
            if len(hits) < depth and not opts.allow_short:
                if got.short is None:
                    got.short = (q, hits)
                continue
            pds = [digest(t) for t in q.perspectives]
            rows.append((line, offset, q, hits[:depth], sds[:depth], pds))
        wanted = dict.fromkeys(pd for *_, pds in rows for pd in pds)
        found = cache.lookup(judge_id, prompt_version, wanted, with_raw=False)
        if extra:
            for pd in wanted.keys() & extra.keys():
                cached = set(found[pd][0])
                new = [(sd, *row) for sd, row in extra[pd].items() if sd not in cached]
                if new:
                    found[pd] = tuple(old + added for old, added in zip(found.get(pd, NO_VERDICTS), zip(*new)))
        for line, offset, q, hits, sds, pds in rows:
            unique = set(sds)
            for pd in dict.fromkeys(pds):  # distinct pairs, as evaluate_run counts them over the whole run
                first = first_seen.get(pd)
                if first is None:
                    first_seen[pd] = (line, offset)
                    stats.pairs += len(unique)
                    continue
                known = shared.get(pd)
                if known is None:  # a perspective of an earlier question too (rare): that question read again
                    _, _, earlier = stream.question_at(*first)
                    known = shared[pd] = set(earlier[:depth])
                stats.pairs += len(unique - known)
                known |= unique
            placed = verdict_matrices(pds, sds, depth, found)
            if placed is None:
                for pd in pds:
                    have = set(found.get(pd, NO_VERDICTS)[0])
                    for sd in sds:
                        if sd not in have:
                            got.missing.setdefault(pd, {})[sd] = None
                if keep_texts:
                    texts = q.perspectives, [h.passage.judge_text(opts.title_position) for h in hits]
                    got.texts.update(zip(pds, texts[0]))
                    got.texts.update(zip(sds, texts[1]))
                if got.pending is not None:  # this pass's judgements cannot be complete: none are written
                    got.pending.drop()
                    got.pending = None
                continue
            s, py, unparsed, unclear = placed
            stats.unparsed += unparsed
            stats.unclear += unclear
            stats.yes += int(s.sum())
            stats.verdicts += len(pds) * len(sds)
            ids = [h.passage.id for h in hits]
            got.per_question[q.id] = question_metrics(s, opts.ks)
            got.datasets[q.id] = q.dataset
            got.repeats[q.id] = repeat_metrics(ids, s, opts.ks)
            got.any_repeat = got.any_repeat or len(set(ids)) != len(ids)
            if opts.matrices:
                got.support[q.id], got.p_yes[q.id] = s, py
            if got.pending is not None and not got.missing:
                judgements_key_update(got.key, q.id, ids, s, py)
                got.pending.write("".join(question_judgement_lines(q.id, ids, s, py, tail)).encode("utf-8"))
        batch.clear()

    for item in stream.questions(keep_texts=keep_texts):
        batch.append(item)
        if len(batch) == BATCH:
            flush()
    flush()
    # (perspectives first seen, in the order evaluate_run's `wanted` has them; the missing pairs follow it)
    if got.missing:
        got.missing = {pd: got.missing[pd] for pd in first_seen if pd in got.missing}
    return got


def _result(stream: RunStream, name: str, judge: Any, opts: EvalOptions, got: _Pass) -> EvalResult:
    return EvalResult(
        run_name=name, judge_id=judge.id, prompt_version=judge.prompt_version, ks=opts.ks, depth=opts.ks[-1],
        support=got.support, p_yes=got.p_yes, per_question=got.per_question,
        averages=aggregate(got.per_question, got.datasets), stats=got.stats, datasets=got.datasets,
        manifest=dict(stream.manifest), repeats=got.repeats if got.any_repeat else {})


def short_error(stream: RunStream, name: str, got: _Pass, depth: int) -> InputError:
    """The refusal ``evaluate_paths`` gives a run with a question shorter than ``depth`` (``question_passages``)."""
    q, hits = got.short
    return short_question(Run({q.id: q}, {q.id: hits}, stream.manifest, name), q.id, f"k={depth}", depth,
                          fix="use a smaller --k (ks=), retrieve more passages, or pass --allow-short "
                              "(allow_short=True) to score missing ranks as unsupported")


def first_pass(stream: RunStream, judge: Any, opts: EvalOptions, cache: JudgementCache, judgements: Path) -> _Pass:
    """The pass every run gets before anything is judged; its judgements are pending in ``judgements``' folder."""
    pending = PendingFile(judgements)
    try:
        return _pass(stream, judge.id, judge.prompt_version, opts, cache, pending)
    except BaseException:
        pending.drop()
        raise


def finish(stream: RunStream, name: str, judge: Any, opts: EvalOptions, cache: JudgementCache, got: _Pass,
           judgements: Path, judge_runner: Callable[..., Any]) -> tuple[EvalResult, PendingFile, Any]:
    """The run's result, its pending judgements file and the key of what that file holds: at once when every pair
    was cached in the first pass, else after judging the missing pairs (the run read again for their texts) and
    a last pass."""
    if not got.missing:
        got.stats.cached = got.stats.pairs
        return _result(stream, name, judge, opts, got), got.pending, got.key
    texts = _pass(stream, judge.id, judge.prompt_version, opts, cache, None, keep_texts=True)  # (judged since?)
    pairs = [(pd, sd) for pd, sds in texts.missing.items() for sd in sds]
    judged, seconds, extra = 0, 0.0, None
    if pairs:
        if opts.overwrite == "never":
            raise BerdsError(
                f"{len(pairs)} of {texts.stats.pairs} pairs are not in the judgement cache for judge {judge.id!r} and "
                f"--overwrite never forbids judging them — use --overwrite only-missing")
        started = time.perf_counter()
        missing = [JudgePair(perspective=texts.texts[pd], passage=texts.texts[sd]) for pd, sd in pairs]
        bs = opts.batch_size or int(getattr(judge, "batch_size", 0) or 64) * 4
        answered = judge_runner(judge, missing, cache, batch_size=bs, progress=opts.progress,
                                description=opts.description or f"judging {name or 'run'}")
        asked = set(pairs)
        digest = Digests()
        extra = {}
        for (perspective, passage), v in answered.items():
            key = (digest(perspective), digest(passage))
            if key in asked:  # (only the pairs asked for: see evaluate_run)
                asked.discard(key)
                extra.setdefault(key[0], {})[key[1]] = (int(bool(v.label)), v.p_yes,
                                                        json.dumps(v.detail) if v.detail else None)
        if asked:
            raise BerdsError(f"the judge runner answered {len(pairs) - len(asked)} of the {len(pairs)} pairs it "
                             f"was given for judge {judge.id!r} — every pair needs a verdict")
        judged, seconds = len(pairs), time.perf_counter() - started
    pending = PendingFile(judgements)
    try:
        last = _pass(stream, judge.id, judge.prompt_version, opts, cache, pending, extra=extra)
    except BaseException:
        pending.drop()
        raise
    if last.missing:
        pending.drop()
        raise BerdsError(f"run {name!r}: some pairs have no verdict after judging — the judge runner returned fewer "
                         "verdicts than it was given")
    last.stats.judged, last.stats.seconds = judged, seconds
    last.stats.cached = last.stats.pairs - judged
    return _result(stream, name, judge, opts, last), pending, last.key


def write_outputs(result: EvalResult, pending: PendingFile, key: Any, out_dir: Path) -> dict[str, Path]:
    """``write_eval_outputs`` for a streamed run: its judgements are written already (``pending``); an unchanged
    file is left as it is (the pending one dropped), else the pending one takes its place, then ``metrics.json``."""
    from berds.evaluate.evaluation import previous_judgements_record
    from berds.io import write_json

    paths = {"metrics": out_dir / "metrics.json", "judgements": out_dir / "judgements.jsonl"}
    key = key.hexdigest()
    record = previous_judgements_record(paths, key)
    if record is not None:
        pending.drop()
    else:
        pending.commit()
        record = {"key": key, "sha256": pending.sha256.hexdigest(), "bytes": pending.size}
    write_json(paths["metrics"], {**result.to_json(), "judgements_file": record})
    return paths


def streamable(path: Path, opts: EvalOptions) -> RunStream | None:
    """The run at ``path`` opened to be read question by question (its folder-level checks made), or None where it
    must be read whole (``RunStream.streamable``)."""
    stream = RunStream(path, allow_empty=opts.allow_short, duplicates=opts.duplicates, duplicates_option="--duplicates",
                       title_position=opts.title_position)
    return stream if stream.streamable else None


__all__ = ["BATCH", "PendingFile", "first_pass", "finish", "write_outputs", "streamable", "short_error"]
