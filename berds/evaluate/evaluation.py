"""Judge a run and compute its metrics: the heart of ``berds eval``.

``evaluate_run(run, judge, ks=(5, 10))``

1. builds every (perspective, passage) pair of the top ``max(ks)`` passages of each question (the
   passage text is ``text + " " + title``, as in the study),
2. reads what the judgement cache already holds (``overwrite`` decides what is reused),
3. judges the missing pairs in batches — each batch committed to the cache before the next starts, so an
   interrupted evaluation resumes where it stopped — with a progress bar,
4. computes MRecall@k / Precision@k per question, per dataset and overall.

The judge is loaded only if some pair is missing from the cache. ``evaluate_paths`` (``berds eval``) reads a run
question by question where it can (the streamed evaluation at the end of this module), so its memory does not grow
with the run.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from operator import attrgetter
from json.encoder import encode_basestring as json_string  # json.dumps(str, ensure_ascii=False), without its layers
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError, InputError
from berds.io import check_writable, no_gc
from berds.evaluate.cache import Digests, JudgementCache, judge_text_digests, text_digests
from berds.evaluate.judging import judge_missing
from berds.evaluate.metrics import aggregate, question_metrics, repeat_metrics
from berds.runs import EVAL_DIR, RunStream, run_stem
from berds.types import Judgement, JudgePair, Passage, Run, Verdict

OVERWRITE_POLICIES = ("only-missing", "always", "never")
TITLE_POSITIONS = ("after", "before", "none")


MAX_UNPARSED = 0.05  # above this share of unparsed (or not plain) answers a result is flagged and refused unless allowed


@dataclass
class JudgeStats:
    pairs: int = 0          # distinct (perspective, passage) pairs needed
    cached: int = 0         # answered from the cache
    judged: int = 0         # sent to the judge in this call
    unparsed: int = 0       # judge answers its parse rule could not read (counted as No), per verdict used
    seconds: float = 0.0    # time spent judging
    verdicts: int = 0       # (perspective, passage) verdicts the metrics use (the shares' denominator)
    unclear: int = 0        # answers with no plain Yes/No (the strict parse fails; unparsed ones included), which
                            # the study's rule reads anyway: a judge answering nonsense scores clean zeros under it
    yes: int = -1           # verdicts that are Yes (-1: not counted, e.g. a result read back from an old file)

    @property
    def unparsed_share(self) -> float:
        return self.unparsed / self.verdicts if self.verdicts else 0.0

    @property
    def unclear_share(self) -> float:
        return self.unclear / self.verdicts if self.verdicts else 0.0

    def problems(self, limit: float = MAX_UNPARSED, *, yes_elsewhere: bool = False) -> list[str]:
        """What makes the judge's answers look unusable, in a few words each (empty when nothing does): more
        than ``limit`` of them unparsed, more than ``limit`` with no plain Yes/No, or not one Yes (which a run of
        off-topic passages may earn honestly: ``check_unparsed`` refuses it only when nothing judged with it got
        a Yes either)."""
        out = []
        if self.unparsed_share > limit:
            out.append(f"{100 * self.unparsed_share:.1f}% unparsed")
        elif self.unclear_share > limit:
            out.append(f"{100 * self.unclear_share:.1f}% not a plain Yes/No")
        if self.yes == 0 and self.verdicts and not yes_elsewhere:
            out.append("no Yes")
        return out


class TextsDropped(BerdsError):
    """``evaluate_run`` was given a run without its passage texts (``digests``) and some pair is not cached:
    ``evaluate_paths`` then reads the run again with its texts and judges."""


class UnparsedAnswersError(BerdsError):
    """Too many of the judge's answers were neither Yes nor No: the metrics would be mostly guesses."""


@dataclass
class EvalResult:
    """Everything ``berds eval`` reports. ``support[qid]`` is the (perspectives x passages) matrix."""

    run_name: str
    judge_id: str
    prompt_version: str
    ks: tuple[int, ...]
    depth: int
    support: dict[str, np.ndarray]
    p_yes: dict[str, np.ndarray]
    per_question: dict[str, dict[str, float]]
    averages: dict[str, dict[str, float]]
    stats: JudgeStats
    datasets: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    # a run whose rankings repeat passages: per question, repeats@k and precision_once@k (metrics.repeat_metrics)
    repeats: dict[str, dict[str, float]] = field(default_factory=dict)

    def __repr__(self) -> str:  # (the dataclass repr printed every support matrix: pages for a real run)
        overall = self.averages.get("all", {})
        means = "".join(f", {name}={value:.3f}" for name, value in overall.items())
        return f"EvalResult(run={self.run_name!r}, judge={self.judge_id!r}, questions={len(self.per_question)}{means})"

    def judgements(self, run: Run) -> list[Judgement]:
        """One ``Judgement`` per (question, judged passage, perspective); a short question's missing ranks have none."""
        out = []
        for qid, matrix in self.support.items():
            hits = run.hits[qid]
            for i in range(matrix.shape[0]):
                for j in range(min(matrix.shape[1], len(hits))):
                    p = self.p_yes[qid][i, j]
                    out.append(Judgement(qid, hits[j].passage.id, j + 1, i, bool(matrix[i, j]),
                                         None if np.isnan(p) else float(p)))
        return out

    def judgements_key(self, run: Run) -> str:
        """sha256 over what decides ``judgements.jsonl``: the judge id, and per question its id, the ranked
        passage ids judged and the label and P(Yes) matrices (``write_eval_outputs`` skips an unchanged file)."""
        digest = judgements_key_start(self.judge_id)
        for qid, matrix in self.support.items():
            judgements_key_update(digest, qid, [h.passage.id for h in run.hits[qid][:matrix.shape[1]]], matrix,
                                  self.p_yes[qid])
        return digest.hexdigest()

    def judgement_chunks(self, run: Run) -> Iterator[str]:
        """``judgement_lines``, one question's lines joined per chunk (fewer, larger writes)."""
        return map("".join, self._question_lines(run))

    def judgement_lines(self, run: Run) -> Iterator[str]:
        """The lines of ``judgements.jsonl`` (what ``judgements`` holds, as JSON), built without a
        ``json.dumps`` per line: each id is escaped once, numbers are formatted as ``json`` would."""
        for lines in self._question_lines(run):
            yield from lines

    def _question_lines(self, run: Run) -> Iterator[list[str]]:
        """Each question's ``judgements.jsonl`` lines."""
        tail = judgement_tail(self.judge_id)
        for qid, matrix in self.support.items():
            yield question_judgement_lines(qid, [h.passage.id for h in run.hits[qid][:matrix.shape[1]]], matrix,
                                           self.p_yes[qid], tail)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_name,
            "judge": {"id": self.judge_id, "prompt_version": self.prompt_version},
            "ks": list(self.ks),
            "depth": self.depth,
            "averages": self.averages,
            "per_question": self.per_question,
            "judging": vars(self.stats),
            **({"run_manifest": self.manifest} if self.manifest else {}),
            **({"repeats": {"averages": aggregate(self.repeats, self.datasets), "per_question": self.repeats}}
               if self.repeats else {}),
        }


passage_of = attrgetter("passage")  # Hit -> Passage, without a Python step per hit


def judgement_tail(judge_id: str) -> str:
    """The end every ``judgements.jsonl`` line of ``judge_id`` shares."""
    return f', "judge": {json.dumps(judge_id, ensure_ascii=False)}}}\n'


def question_judgement_lines(qid: str, ids: Sequence[str], matrix: np.ndarray, p_yes: np.ndarray, tail: str) -> list[str]:
    """One question's ``judgements.jsonl`` lines (``EvalResult.judgement_lines``): its ranked passage ids ``ids``
    (the judged ones: a short question has fewer than the matrices' columns), labels and P(Yes)."""
    n = min(matrix.shape[1], len(ids))
    q = json.dumps(qid, ensure_ascii=False)
    # what every line of a rank shares, built once per question, then one f-string per line
    heads = [f'{{"qid": {q}, "docid": {json_string(pid)}, "rank": {j}, "perspective": '
             for j, pid in enumerate(ids[:n], start=1)]
    labels, probs = matrix[:, :n].astype(int).tolist(), p_yes[:, :n].tolist()
    return [f'{head}{i}, "label": {label}, "p_yes": {"null" if p != p else repr(p)}{tail}'
            for i, (row, prow) in enumerate(zip(labels, probs)) for head, label, p in zip(heads, row, prow)]


def judgements_key_start(judge_id: str) -> Any:
    """The hash ``EvalResult.judgements_key`` starts from; ``judgements_key_update`` adds each question."""
    return hashlib.sha256(f"judgements-v1\0{judge_id}\0".encode("utf-8"))


def judgements_key_update(digest: Any, qid: str, ids: Sequence[str], matrix: np.ndarray, p_yes: np.ndarray) -> None:
    n = min(matrix.shape[1], len(ids))
    digest.update("\0".join([qid, *ids[:n]]).encode("utf-8"))
    digest.update(f"\0{matrix.shape[0]}x{n}\0".encode("ascii"))
    digest.update(np.ascontiguousarray(matrix[:, :n], dtype=bool).tobytes())
    digest.update(np.ascontiguousarray(p_yes[:, :n], dtype=np.float64).tobytes())


def short_question(run: Run, qid: str, asked: str, depth: int, *, fix: str) -> InputError:
    """The refusal of question ``qid``, which has fewer passages than ``asked`` (``k=5``, ``--depth 100``) needs,
    named by its line in the run's ctxs file."""
    from berds.runs import CTXS, question_line

    source = run.manifest.get("source", {}).get("path")
    source = Path(source) / CTXS if source and Path(source).is_dir() else source
    return InputError(f"question has {len(run.hits[qid])} passages but {asked} needs {depth}",
                      path=source or run.name or None, line=question_line(source, qid), record=qid, fix=fix)


def question_passages(run: Run, depth: int, *, allow_short: bool = False) -> dict[str, tuple[tuple[str, ...], list[Passage]]]:
    """``qid -> (perspectives, the top depth passages)``; a question with fewer is refused unless ``allow_short``."""
    out: dict[str, tuple[tuple[str, ...], list[Passage]]] = {}
    for qid, q in run.questions.items():
        hits = run.hits[qid][:depth]
        if len(hits) < depth and not allow_short:
            raise short_question(run, qid, f"k={depth}", depth,
                                 fix="use a smaller --k (ks=), retrieve more passages, or pass --allow-short "
                                     "(allow_short=True) to score missing ranks as unsupported")
        out[qid] = (tuple(q.perspectives), list(map(passage_of, hits)))
    return out


def question_texts(run: Run, depth: int, *, title_position: str = "after", allow_short: bool = False
                   ) -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """``qid -> (perspectives, texts of the top depth passages as the judge sees them)``."""
    return {qid: (perspectives, Passage.judge_texts(passages, title_position))
            for qid, (perspectives, passages) in question_passages(run, depth, allow_short=allow_short).items()}


def pairs_for_run(run: Run, depth: int, *, title_position: str = "after", allow_short: bool = False
                  ) -> dict[str, list[list[JudgePair]]]:
    """``qid -> [perspective index][rank index] -> JudgePair`` over the top ``depth`` passages."""
    return {qid: [[JudgePair(perspective=p, passage=t) for t in texts] for p in perspectives]
            for qid, (perspectives, texts) in question_texts(run, depth, title_position=title_position,
                                                              allow_short=allow_short).items()}


MAX_K = 10_000  # deepest cut-off evaluated (the study's deepest is 100)


@dataclass(frozen=True)
class EvalOptions:
    """How an evaluation runs — one value the CLI, the demo, the analyses and studies pass along.

    * ``ks`` — the cut-offs (MRecall@k / Precision@k for each); the top ``max(ks)`` passages are judged;
    * ``overwrite`` — ``only-missing`` (reuse cached verdicts, judge the rest), ``always`` (re-judge and
      replace), ``never`` (cached verdicts only; fail if any pair is missing);
    * ``title_position`` — the judge sees ``text + " " + title`` (``after``, the study), ``before`` or ``none``;
    * ``allow_short`` — score questions with fewer than ``max(ks)`` passages (missing ranks unsupported);
    * ``batch_size`` — pairs per judge batch (default: 4 x the judge's own batch size);
    * ``progress`` — show progress bars;
    * ``cache_path`` / ``use_cache`` — the judgement cache file (default ``$BERDS_HOME/judgements.sqlite``);
    * ``out`` / ``write_legacy`` — where ``evaluate_paths`` writes, and whether it also writes inline predictions;
    * ``judge_runner`` — replaces ``judge_missing`` (``berds.evaluate.judging.judge_runner_for(engine)``);
    * ``duplicates`` — a passage listed twice in one question's ranking: ``refuse`` (default; a run folder
      whose manifest says its repeats are on purpose is read with ``keep``), ``dedupe`` or ``keep``;
    * ``matrices`` — ``evaluate_paths`` keeps each question's support and P(Yes) matrices in its results
      (``False``: ``support``/``p_yes`` are left empty where a run is evaluated question by question, and memory
      stays flat with the run's size);
    * ``stream`` — ``evaluate_paths`` reads a run question by question where nothing needs it whole
      (the streamed evaluation below); ``False`` reads every run whole first (the same outputs, more memory).

    Values are checked when the options are made, before any run is read or judged.
    """

    ks: tuple[int, ...] = (5, 10)
    overwrite: str = "only-missing"
    title_position: str = "after"
    allow_short: bool = False
    batch_size: int | None = None
    progress: bool = True
    cache_path: str | Path | None = None
    use_cache: bool = True
    out: str | Path | None = None
    write_legacy: bool = False
    judge_runner: Callable[..., dict[tuple[str, str], Verdict]] | None = None
    allow_unparsed: bool = False
    max_unparsed: float = MAX_UNPARSED
    duplicates: str = "refuse"  # a passage twice in one ranking: "refuse", "dedupe" or "keep" (berds.runs.unique_hits)
    description: str | None = None  # the judging bar's label (default: "judging RUN NAME")
    # evaluate_paths: keep each question's support and P(Yes) matrices in its results (EvalResult.support, .p_yes);
    # `berds eval` needs only the metrics and says False: its memory then does not grow with the run
    matrices: bool = True
    # evaluate_paths: read each run question by question where nothing needs the whole run (False: every run is
    # read whole first, as before issue 36; the outputs are the same)
    stream: bool = True

    def __post_init__(self) -> None:
        if self.duplicates not in ("refuse", "dedupe", "keep"):
            raise BerdsError(f"unknown --duplicates (duplicates=) {self.duplicates!r}; use refuse, dedupe or keep")
        if self.overwrite not in OVERWRITE_POLICIES:
            raise BerdsError(f"unknown overwrite policy {self.overwrite!r}; use one of {', '.join(OVERWRITE_POLICIES)}")
        if self.title_position not in TITLE_POSITIONS:
            raise BerdsError(f"unknown --title-position (title_position=) {self.title_position!r}; use one of "
                             f"{', '.join(TITLE_POSITIONS)}")
        ks = tuple(sorted({int(k) for k in self.ks}))
        if not ks or ks[0] < 1:
            raise BerdsError(f"--k values (ks=) must be positive integers, got {list(self.ks)}")
        if ks[-1] > MAX_K:  # (with --allow-short a k past every ranking is allowed: it sizes each verdict matrix)
            raise BerdsError(f"--k (ks=) {ks[-1]} is more than berds evaluates ({MAX_K:,} passages per question)")
        object.__setattr__(self, "ks", ks)
        if self.batch_size is not None and self.batch_size < 1:
            raise BerdsError(f"batch size must be at least 1, got {self.batch_size}")

    def but(self, **changes: Any) -> "EvalOptions":
        """A copy with some fields changed (``options.but(ks=(5,), progress=False)``)."""
        return replace(self, **changes)


def as_options(options: "EvalOptions | Sequence[int] | None", changes: Mapping[str, Any]) -> EvalOptions:
    """``EvalOptions`` from an options value, a bare sequence of k values, or nothing, plus keyword changes."""
    if options is None:
        base = EvalOptions()
    elif isinstance(options, EvalOptions):
        base = options
    else:
        base = EvalOptions(ks=tuple(options))
    return base.but(**changes) if changes else base


NO_VERDICTS: tuple[tuple, ...] = ((), (), (), ())  # a perspective with nothing cached, as columns


def verdict_matrices(pds: Sequence[bytes], sds: Sequence[bytes], depth: int, found: Mapping[bytes, tuple[tuple, ...]]
                     ) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """One question's support and P(Yes) matrices (perspectives x ``depth`` ranks; ranks past a short question's
    last passage stay unsupported and NaN), its count of unparsed answers and of answers with no plain Yes/No
    (``JudgeStats.unclear``: unparsed or ``strict_unparsed``), from each perspective's verdicts as
    columns (``found``, as ``JudgementCache.lookup`` gives them); None when some pair has no verdict there. Each
    perspective's verdicts are placed at their passages' ranks with numpy, not one Python step per pair;
    verdicts of passages not ranked here (another run's, in a shared cache) are skipped."""
    m, n = len(pds), len(sds)
    s = np.zeros((m, depth), dtype=bool)
    py = np.full((m, depth), np.nan)
    if not (m and n):
        return s, py, 0, 0
    rank = dict(zip(sds, range(n)))  # (a passage listed twice: its last rank; the others copied below)
    columns = [found.get(pd, NO_VERDICTS) for pd in pds]
    # Rows come sorted by passage digest, so when the same passages are cached for every perspective (the usual
    # case) one set of positions serves them all and each field is placed for the whole question at once.
    together = all(c[0] == columns[0][0] for c in columns[1:])
    groups = [(slice(None), columns)] if together else [(i, [c]) for i, c in enumerate(columns)]
    unparsed_at: np.ndarray | None = None
    unclear_at: np.ndarray | None = None
    for rows, group in groups:
        at = list(map(rank.get, group[0][0]))
        keep = [k for k, j in enumerate(at) if j is not None] if None in at else None  # (other runs' passages)
        if keep is not None:
            at = [at[k] for k in keep]
        if len(at) < len(rank):
            return None
        at = np.array(at, dtype=np.intp)  # (once, for both fields)
        labels = np.array([c[1] for c in group], dtype=bool)
        probs = np.array([c[2] for c in group], dtype=float)  # (None becomes NaN)
        if keep is not None:
            labels, probs = labels[:, keep], probs[:, keep]
        s[rows, at] = labels if together else labels[0]
        py[rows, at] = probs if together else probs[0]
        for i, c in (enumerate(group) if together else [(rows, group[0])]):
            if any(c[3]):  # (only a detail that mentions the key is parsed: a debate judge keeps transcripts there)
                if unparsed_at is None:
                    unparsed_at, unclear_at = np.zeros((m, n), dtype=bool), np.zeros((m, n), dtype=bool)
                details = [json.loads(d) if d and "unparsed" in d else {} for d in c[3]]
                flags = [bool(d.get("unparsed")) for d in details]
                unclear = [bool(d.get("unparsed") or d.get("strict_unparsed")) for d in details]
                unparsed_at[i, at] = [flags[k] for k in keep] if keep is not None else flags
                unclear_at[i, at] = [unclear[k] for k in keep] if keep is not None else unclear
    if len(rank) < n:  # a passage listed twice (duplicates kept on purpose): every rank holds its verdicts
        for j, sd in enumerate(sds):
            if rank[sd] != j:
                s[:, j], py[:, j] = s[:, rank[sd]], py[:, rank[sd]]
                if unparsed_at is not None:
                    unparsed_at[:, j] = unparsed_at[:, rank[sd]]
                    unclear_at[:, j] = unclear_at[:, rank[sd]]
    if unparsed_at is None:
        return s, py, 0, 0
    return s, py, int(unparsed_at.sum()), int(unclear_at.sum())


def evaluate_run(
    run: Run,
    judge: Any,
    options: EvalOptions | Sequence[int] | None = None,
    *,
    cache: JudgementCache | None = None,
    digests: Mapping[str, Sequence[bytes]] | None = None,
    **changes: Any,
) -> EvalResult:
    """Judge the top ``max(ks)`` passages of every question against every perspective; compute metrics.

    ``judge`` is any Judge (wrap it in ``LazyJudge`` to load a model only when something is missing from
    the cache). ``options`` is an ``EvalOptions`` (or just the k values); keyword ``changes`` override its
    fields (``evaluate_run(run, judge, ks=(5,), progress=False)``).

    ``digests``: each question's judge-text digests, for a run read without its texts (``load_run(...,
    judge_digests=...)`` with the same ``title_position``); a pair missing from the cache then raises
    ``TextsDropped`` before anything is judged.
    """
    opts = as_options(options, changes)
    from berds.questions import require_gold

    require_gold(list(run.questions.values()), source=run.name, purpose="evaluation (MRecall/Precision)")
    ks, overwrite, title_position, allow_short = opts.ks, opts.overwrite, opts.title_position, opts.allow_short
    progress, judge_runner, batch_size = opts.progress, opts.judge_runner, opts.batch_size
    depth = ks[-1]
    # The cyclic GC is paused while hundreds of thousands of small acyclic objects (digests, rows, matrices) are
    # made (berds.io.no_gc), but not while a judge runs: a model may make cyclic garbage for hours.
    with no_gc():
        grid = question_passages(run, depth, allow_short=allow_short)
        # Verdicts are keyed by (perspective digest, passage digest): each perspective is hashed once, each passage
        # as its judge text is built (passages rarely repeat across questions: looking a long text up in a memo
        # costs as much as hashing it, and building the texts first cost a fifth more)
        digest = Digests()
        wanted: dict[bytes, dict[bytes, None]] = {}
        keys: dict[str, tuple[list[bytes], list[bytes]]] = {}
        for qid, (perspectives, passages) in grid.items():
            pds = [digest(t) for t in perspectives]
            sds = judge_text_digests(passages, title_position) if digests is None else list(digests[qid][:len(passages)])
            ranked = dict.fromkeys(sds)  # shared by the question's perspectives (wanted is only read), copied on merge
            for pd in pds:
                have = wanted.get(pd)
                wanted[pd] = ranked if have is None else {**have, **ranked}
            keys[qid] = (pds, sds)
        stats = JudgeStats(pairs=sum(map(len, wanted.values())))

        # The cached verdicts of each perspective, as columns: (passage digests, labels, p_yes, detail JSONs),
        # placed in each question's matrices (None where a pair has no verdict yet)
        found: dict[bytes, tuple[tuple, ...]] = {}
        if cache is not None and overwrite != "always":
            found = cache.lookup(judge.id, judge.prompt_version, wanted, with_raw=False)
        matrices = {qid: verdict_matrices(pds, sds, depth, found) for qid, (pds, sds) in keys.items()}
        missing: list[JudgePair] = []
        have: dict[bytes, set[bytes]] = {}
        if all(placed is not None for placed in matrices.values()):
            stats.cached = stats.pairs
        elif digests is not None:
            raise TextsDropped(f"run {run.name!r}: some pairs are not cached and the run was read without its texts")
        else:  # (a fully cached evaluation skips these walks over every pair)
            stats.cached = sum(sum(map(wanted[pd].__contains__, columns[0])) for pd, columns in found.items())
            have = {pd: set(columns[0]) for pd, columns in found.items()}
            texts = {d: t for qid, (perspectives, passages) in grid.items()
                     for d, t in zip((*keys[qid][0], *keys[qid][1]),
                                     (*perspectives, *Passage.judge_texts(passages, title_position)))}
            missing = [JudgePair(perspective=texts[pd], passage=texts[sd])
                       for pd, sds in wanted.items() for sd in sds if sd not in have.get(pd, ())]
    if missing and overwrite == "never":
        raise BerdsError(
            f"{len(missing)} of {stats.pairs} pairs are not in the judgement cache for judge {judge.id!r} and "
            f"--overwrite never forbids judging them — use --overwrite only-missing"
        )
    if missing:
        started = time.perf_counter()
        runner = judge_runner or judge_missing
        bs = batch_size or int(getattr(judge, "batch_size", 0) or 64) * 4
        answered = runner(judge, missing, cache, batch_size=bs, progress=progress, description=opts.description or f"judging {run.name or 'run'}")
        added: dict[bytes, list[tuple]] = {}
        for (perspective, passage), v in answered.items():
            pd, sd = digest(perspective), digest(passage)
            # Only the pairs asked for are added: a verdict for a pair already cached (or never asked) would sit
            # in the columns beside the cached row, be placed over it in some questions and not others, and make
            # up the count of a pair the runner left out, whose rank would then stay unsupported without a word
            if sd in wanted.get(pd, ()) and sd not in have.get(pd, ()):
                added.setdefault(pd, []).append((sd, int(bool(v.label)), v.p_yes, json.dumps(v.detail) if v.detail else None))
        if sum(map(len, added.values())) < len(missing):
            raise BerdsError(f"the judge runner answered {sum(map(len, added.values()))} of the {len(missing)} pairs it "
                             f"was given for judge {judge.id!r} — every pair needs a verdict")
        for pd, rows in added.items():  # appended to the perspective's columns
            found[pd] = tuple(old + new for old, new in zip(found.get(pd, NO_VERDICTS), zip(*rows)))
        stats.judged = len(missing)
        stats.seconds = time.perf_counter() - started
        with no_gc():
            for qid, placed in matrices.items():
                if placed is None:
                    pds, sds = keys[qid]
                    matrices[qid] = placed = verdict_matrices(pds, sds, depth, found)
                    if placed is None:
                        raise BerdsError(f"question {qid!r}: some pairs have no verdict after judging — the judge "
                                         "runner returned fewer verdicts than it was given")

    with no_gc():
        support: dict[str, np.ndarray] = {}
        p_yes: dict[str, np.ndarray] = {}
        per_question: dict[str, dict[str, float]] = {}
        stats.yes = 0
        for qid, (s, py, unparsed, unclear) in matrices.items():
            stats.unparsed += unparsed
            stats.unclear += unclear
            stats.yes += int(s.sum())
            stats.verdicts += len(keys[qid][0]) * len(keys[qid][1])
            support[qid], p_yes[qid] = s, py
            per_question[qid] = question_metrics(s, ks)
    datasets = {qid: q.dataset for qid, q in run.questions.items()}
    result = EvalResult(
        run_name=run.name, judge_id=judge.id, prompt_version=judge.prompt_version, ks=ks, depth=depth,
        support=support, p_yes=p_yes, per_question=per_question,
        averages=aggregate(per_question, datasets), stats=stats, datasets=datasets, manifest=dict(run.manifest),
        repeats=run_repeats(run, support, ks),
    )
    if not opts.allow_unparsed:  # (not one Yes is the caller's to judge: another run of the command may have some)
        check_unparsed([result], opts.max_unparsed, yes_check=False)
    return result


def run_repeats(run: Run, support: Mapping[str, np.ndarray], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """``metrics.repeat_metrics`` of every question, when some question's top ``max(ks)`` repeats a passage
    (else empty: a run without repeats reports nothing more)."""
    from berds.evaluate.metrics import repeat_metrics

    depth = max(ks)
    ids = {qid: [h.passage.id for h in run.hits[qid][:depth]] for qid in support}
    if all(len(set(v)) == len(v) for v in ids.values()):
        return {}
    return {qid: repeat_metrics(ids[qid], support[qid], ks) for qid in support}


def repeats_table(results: Sequence[EvalResult]) -> Any:
    """A rich table of the results whose rankings repeat passages (None when none do): per run and k, the
    top-k slots that repeat a passage ranked above (of all top-k slots), Precision@k as evaluated (every
    slot counts, the study's way) and Precision@k with each passage counted once."""
    shown = [r for r in results if r.repeats]
    if not shown:
        return None
    from rich.table import Table

    table = Table(title="Repeated passages in the top k (counted in Precision, as the study did)")
    table.add_column("run", overflow="fold")
    for name in ("k", "repeated slots", "Prec@k", "Prec@k, each passage once"):
        table.add_column(name, justify="right")
    for r in shown:
        for k in r.ks:
            repeats = int(sum(q[f"repeats@{k}"] for q in r.repeats.values()))
            slots = k * len(r.repeats)
            once = sum(q[f"precision_once@{k}"] for q in r.repeats.values()) / len(r.repeats)
            table.add_row(r.run_name or "-", str(k), f"{repeats} of {slots}",
                          f"{100 * r.averages['all'][f'precision@{k}']:.1f}", f"{100 * once:.1f}")
    return table


def answer_problems(r: EvalResult, limit: float = MAX_UNPARSED, *, yes_elsewhere: bool = False) -> str:
    """One result's answer problems in words ('' when none): see ``JudgeStats.problems``; ``yes_elsewhere``:
    the judge said Yes in another result of the same command, so a run without any Yes is not its fault."""
    s = r.stats
    words = []
    if s.unparsed_share > limit:
        words.append(f"neither Yes nor No {s.unparsed} of {s.verdicts} times ({100 * s.unparsed_share:.1f}%), "
                     "counted as No")
    elif s.unclear_share > limit:
        words.append(f"no plain Yes/No {s.unclear} of {s.verdicts} times ({100 * s.unclear_share:.1f}%), which the "
                     "study's rule read anyway (nonsense is No)")
    if s.yes == 0 and s.verdicts and not yes_elsewhere:
        words.append(f"not one Yes in {s.verdicts} verdicts")
    return "; ".join(words)


def check_unparsed(results: Sequence[EvalResult], limit: float = MAX_UNPARSED, *, written: str = "",
                   yes_check: bool = True) -> None:
    """Refuse results whose judge's answers look unusable (``JudgeStats.problems``: more than ``limit`` unparsed,
    more than ``limit`` with no plain Yes/No, or — with ``yes_check`` — not one Yes in any of ``results``) — the
    metrics would be clean-looking guesses. Their verdicts are cached, so re-running with ``--allow-unparsed``
    judges nothing again."""
    yes_elsewhere = not yes_check or any(r.stats.yes > 0 for r in results)
    bad = [(r, answer_problems(r, limit, yes_elsewhere=yes_elsewhere)) for r in results]
    bad = [(r, why) for r, why in bad if why]
    if bad:
        what = "; ".join(f"run {r.run_name!r}: {why}" for r, why in bad)
        raise UnparsedAnswersError(
            f"the judge {bad[0][0].judge_id!r} answered like a broken judge ({what}; limit {100 * limit:g}%){written} "
            "— check the judge, its prompt and -o parse=..., or pass --allow-unparsed to accept the result "
            "(it is then flagged)")


def note_unparsed(results: Sequence[EvalResult], limit: float = MAX_UNPARSED) -> None:
    """With ``--allow-unparsed``, one line on stderr per result with answer problems: commands whose tables have
    no place for them (compare, report, analyze, tune) would otherwise accept the guesses without a word."""
    yes_elsewhere = any(r.stats.yes > 0 for r in results)
    for r in results:
        if why := answer_problems(r, limit, yes_elsewhere=yes_elsewhere):
            print(f"note: run {r.run_name!r}: the judge {r.judge_id!r} answered {why} (accepted by --allow-unparsed)",
                  file=sys.stderr)


def judge_slug(judge_id: str) -> str:
    """A file-name-safe short form of a judge id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", judge_id).strip("_")[:80]


def write_eval_outputs(result: EvalResult, run: Run, out_dir: str | Path, *, legacy_jsonl: bool = False) -> dict[str, Path]:
    """Write ``metrics.json`` and ``judgements.jsonl`` (and optionally the legacy inline predictions).

    ``metrics.json`` records what ``judgements.jsonl`` holds (``judgements_file``: a key over the judge, the
    ranked ids and the verdict matrices, and the file's sha256 and size). A re-evaluation that would write
    the same judgements leaves the file as it is, once its bytes are checked against that record; anything
    else (other verdicts, an edited or truncated file) writes it again. ``judgements.jsonl`` is written
    before ``metrics.json``, so a record never describes a file that was not finished.
    """
    from berds.io import atomic_write, write_json
    from berds.runs import LEGACY_PREDICTIONS, write_legacy_predictions

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"metrics": out / "metrics.json", "judgements": out / "judgements.jsonl"}
    key = result.judgements_key(run)
    record = previous_judgements_record(paths, key)
    if record is None:
        digest, size = hashlib.sha256(), 0
        with atomic_write(paths["judgements"], "wb", encoding=None) as f:
            for chunk in result.judgement_chunks(run):
                data = chunk.encode("utf-8")
                digest.update(data)
                size += len(data)
                f.write(data)
        record = {"key": key, "sha256": digest.hexdigest(), "bytes": size}
    write_json(paths["metrics"], {**result.to_json(), "judgements_file": record})
    if legacy_jsonl:  # what the original evaluation's compute-only mode reads (berds.runs.read_predictions)
        paths["legacy"] = write_legacy_predictions(run, result.support, out / LEGACY_PREDICTIONS)
    return paths


def previous_judgements_record(paths: Mapping[str, Path], key: str | None) -> dict[str, Any] | None:
    """The ``judgements_file`` record of the ``metrics.json`` in ``paths`` when the ``judgements.jsonl`` beside it
    holds what ``key`` describes (its bytes checked against the record; ``key`` None: whatever it describes), else
    None: the file is written again."""
    from berds.io import read_json, sha256_file

    try:
        previous = read_json(paths["metrics"]).get("judgements_file") if paths["metrics"].is_file() else None
        if (isinstance(previous, dict) and (key is None or previous.get("key") == key) and paths["judgements"].is_file()
                and paths["judgements"].stat().st_size == previous.get("bytes")
                and sha256_file(paths["judgements"]) == previous.get("sha256")):
            return previous
    except (BerdsError, OSError, AttributeError):  # an unreadable earlier metrics.json: write both afresh
        return None
    return None


PREDICTIONS_JUDGE = "predictions-in-file"


def evaluate_predictions(path: str | Path, options: EvalOptions | Sequence[int] | None = None, *,
                         duplicates: str = "keep", duplicates_option: str | None = None, **changes: Any
                         ) -> tuple[Run, EvalResult]:
    """The original evaluation's compute-only mode: metrics from the ``mistral-preds`` (``gpt4-preds`` in
    the study's ``.gpt4pred`` files) already stored in each ctx of ``path`` (as ``--write-legacy`` writes
    them); no judge, no cache. The top ``max(ks)`` passages must carry predictions (``allow_short``: missing
    ones count as unsupported). A ctx that repeats a passage counts with its own prediction (``duplicates=
    "keep"``, the original's reading of its query-expansion runs); ``"dedupe"``/``"refuse"``: see
    ``berds.runs.read_predictions``."""
    from berds.runs import read_predictions

    opts = as_options(options, changes)
    run, labels = read_predictions(path, allow_empty=opts.allow_short,  # (an empty question scores zero)
                                   duplicates=duplicates, duplicates_option=duplicates_option)
    depth = max(opts.ks)
    support: dict[str, np.ndarray] = {}
    per_question: dict[str, dict[str, float]] = {}
    for qid, rows in labels.items():
        judged = len(rows[0]) if rows else 0
        if judged < depth and not opts.allow_short:
            raise InputError(f"question has predictions for {judged} passages but k={depth} needs {depth}",
                             path=path, record=qid,
                             fix="use a smaller --k (ks=), or --allow-short (allow_short=True) to count missing ranks as "
                                 "unsupported")
        s = np.zeros((len(rows), depth), dtype=bool)
        for i, row in enumerate(rows):
            s[i, : min(depth, len(row))] = row[:depth]
        support[qid] = s
        per_question[qid] = question_metrics(s, opts.ks)
    datasets = {qid: q.dataset for qid, q in run.questions.items()}
    n = sum(m.size for m in support.values())
    result = EvalResult(
        run_name=run.name, judge_id=PREDICTIONS_JUDGE, prompt_version=f"from:{Path(path).name}", ks=opts.ks,
        depth=depth, support=support, p_yes={q: np.full(m.shape, np.nan) for q, m in support.items()},
        per_question=per_question, averages=aggregate(per_question, datasets),
        stats=JudgeStats(pairs=n), datasets=datasets, manifest=dict(run.manifest),
        repeats=run_repeats(run, support, opts.ks),
    )
    return run, result


def metrics_table(results: Sequence[EvalResult], *, title: str = "BERDS metrics",
                  max_unparsed: float = MAX_UNPARSED) -> Any:
    """A rich table: one row per run (and per dataset when a run mixes several), metrics in percent.

    The judge is named in the title (and in a column when they differ); a judge not validated on held-out
    human labels gets a warning line under the table, with its measured figure (then the value is a rich
    ``Group`` of the table and that line). When a judge left
    answers unparsed, their share is shown under the run's name, with ``!`` past ``max_unparsed``.
    """
    from rich.table import Table

    from berds.judges.validation import judge_warning, short_judge_name

    ks = sorted({k for r in results for k in r.ks})
    judges = sorted({r.judge_id for r in results})
    multi_set = any(len(r.averages) > 1 for r in results)
    yes_elsewhere = any(r.stats.yes > 0 for r in results)
    unparsed = any(r.stats.unparsed or r.stats.problems(max_unparsed, yes_elsewhere=yes_elsewhere) for r in results)
    warnings = [w for w in dict.fromkeys(judge_warning(j) for j in judges) if w]
    names = sorted({short_judge_name(j) for j in judges})
    from rich.markup import escape

    table = Table(title=escape(f"{title} — judge: {', '.join(names)}"))
    table.add_column("run", overflow="fold")
    if len(judges) > 1:
        table.add_column("judge", overflow="fold")
    if multi_set:
        table.add_column("set")
    table.add_column("n", justify="right")
    for k in ks:
        table.add_column(f"MRecall@{k}", justify="right")
    for k in ks:
        table.add_column(f"Prec@{k}", justify="right")
    for r in results:
        counts: dict[str, int] = {"all": len(r.per_question), "macro": len(r.per_question)}
        for qid in r.per_question:
            name = r.datasets.get(qid) or "-"
            counts[name] = counts.get(name, 0) + 1
        for name, avg in r.averages.items():
            cells = [f"{100 * avg[f'mrecall@{k}']:.1f}" if f"mrecall@{k}" in avg else "" for k in ks]
            cells += [f"{100 * avg[f'precision@{k}']:.1f}" if f"precision@{k}" in avg else "" for k in ks]
            row = [escape(r.run_name) if name == "all" else ""]
            problems = r.stats.problems(max_unparsed, yes_elsewhere=yes_elsewhere) if name == "all" else []
            if problems:  # under the run's name: the table stays narrow
                row[0] += "".join(f"\n[bold red]{p} ![/]" for p in problems)
            elif unparsed and name == "all" and r.stats.unparsed:
                row[0] += f"\n[dim]{100 * r.stats.unparsed_share:.1f}% unparsed[/]"
            if len(judges) > 1:
                row.append(short_judge_name(r.judge_id) if name == "all" else "")
            if multi_set:
                row.append(name)
            table.add_row(*row, str(counts.get(name, "")), *cells)
    if not warnings:
        return table
    from rich.console import Group
    from rich.text import Text

    return Group(table, *(Text.assemble(("warning: ", "bold yellow"), w) for w in warnings))


def distinct_names(names: Sequence[str], paths: Sequence[Path], *, sep: str = "-") -> list[str]:
    """``names`` made distinct where two are equal, by the end of their paths: a name that is its path's
    stem gets the parent folders that tell them apart (``a/run.jsonl``, ``b/run.jsonl`` -> ``a-run``,
    ``b-run``); another name gets the path in brackets (two runs named ``minilm`` in ``runs/x`` and
    ``runs/y`` -> ``minilm (x)``, ``minilm (y)``). The same path given twice is refused."""
    out = list(names)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    for name, idx in groups.items():
        if len(idx) < 2:
            continue
        resolved = [Path(paths[i]).resolve() for i in idx]
        if len(set(resolved)) < len(resolved):
            raise BerdsError(f"the same run is given twice: {paths[idx[0]]}")
        tails = [[*r.parent.parts, run_stem(r)] for r in resolved]
        labels: list[str] = [str(r) for r in resolved]
        for depth in range(1, max(len(t) for t in tails) + 1):
            candidate = []
            for tail in tails:
                part = tail[-depth:]
                candidate.append(sep.join(part) if part[-1] == name else f"{name} ({'/'.join(part)})")
            if len(set(candidate)) == len(candidate):
                labels = candidate
                break
        for i, label in zip(idx, labels):
            out[i] = label
    return out


def eval_output_dirs(run_paths: Sequence[Path], out: str | Path | None) -> list[Path]:
    """Where each evaluation's files go: ``--out`` (a sub-folder per run when several, named by the run's
    whole file or folder name, parents added where two would collide), else the run folder (``RUN/``) or,
    for a single jsonl file, ``NAME.eval/`` beside it."""
    stems = [run_stem(p) for p in run_paths]
    if out is not None:
        out = Path(out)
        if len(run_paths) == 1:
            return [out]
        return [out / name for name in distinct_names(stems, run_paths)]
    return [p if p.is_dir() else p.with_name(stem + ".eval") for p, stem in zip(run_paths, stems)]


def eval_output_dir(run_path: Path, out: str | Path | None, n_runs: int) -> Path:
    """One run's output folder (see ``eval_output_dirs``, which also keeps several runs apart)."""
    if out is not None and n_runs > 1:
        return Path(out) / run_stem(run_path)
    return eval_output_dirs([run_path], out)[0]


def evaluate_paths(
    paths: Sequence[str | Path],
    judge: str | Any,
    options: EvalOptions | Sequence[int] | None = None,
    *,
    judge_options: Mapping[str, Any] | None = None,
    check_run: Callable[[Path, Run], None] | None = None,
    **changes: Any,
) -> list[tuple[Path, EvalResult, dict[str, Path]]]:
    """``berds eval``: load each run (folder or BERDS jsonl), judge it through the shared cache, write
    ``metrics.json`` + ``judgements.jsonl`` next to it (or under ``options.out``), and return the results.

    ``judge`` is a judge or a name (with ``judge_options``); a judge given by name is built lazily, so a
    fully cached evaluation never loads a model. ``options``/``changes`` as in ``evaluate_run``.
    ``check_run(path, run)`` is called for every run after all are loaded and before any judging (e.g. the
    ids a qrels file must carry), so what an output needs fails before an hour of judging.
    """
    from berds.judges import LazyJudge, check_judge_name, load_judge
    from berds.judges.recipe import JudgeRecipe
    from berds.runs import load_run

    opts = as_options(options, changes)
    if isinstance(judge, str):
        check_judge_name(judge)
    # parse everything first: bad input fails fast
    # Runs are read without their passage texts (each hashed as its line is read, then dropped), so a cached
    # re-evaluation's memory does not grow with the texts; a run with a pair to judge is read again with them.
    # Not where something else reads the texts: a check_run (--labels), legacy predictions, or re-judging all.
    lean = opts.use_cache and check_run is None and not opts.write_legacy and opts.overwrite != "always"
    digests: dict[Path, dict[str, list[bytes]]] = {}

    def read(p: str | Path, lean: bool) -> Run:
        sink = digests.setdefault(Path(p), {}) if lean else None
        return load_run(p, allow_empty=opts.allow_short, duplicates=opts.duplicates, duplicates_option="--duplicates",
                        judge_digests=sink, title_position=opts.title_position)

    if isinstance(judge, str):
        name, jopts = judge, dict(judge_options or {})
        judge = LazyJudge(lambda: load_judge(name, **jopts), recipe=JudgeRecipe(name, jopts))
    if lean and opts.stream:  # question by question (the streamed evaluation, below): memory flat with the run's size
        results = _evaluate_streamed([Path(p) for p in paths], judge, opts, read, digests)
    else:
        results = _evaluate_whole(paths, judge, opts, check_run, read, digests, lean=lean)
    if not opts.allow_unparsed:
        check_unparsed([r for _, r, _ in results], opts.max_unparsed,
                       written=" (metrics.json and judgements.jsonl were written for inspection)")
    return results


def _outputs_of(path: Path, target: Path, judge_id: str) -> Path:
    """The folder of a run's ``metrics.json`` + ``judgements.jsonl``: ``--out``'s, or RUN/eval/JUDGE/ in a run
    folder evaluated in place (which also gets the latest metrics at its top level)."""
    return target / EVAL_DIR / judge_slug(judge_id) if target == path else target


def _evaluate_whole(paths: Sequence[str | Path], judge: Any, opts: EvalOptions, check_run: Any, read: Any,
                    digests: dict[Path, dict[str, list[bytes]]], *, lean: bool
                    ) -> list[tuple[Path, EvalResult, dict[str, Path]]]:
    """``evaluate_paths`` with every run read whole first (``evaluate_run`` + ``write_eval_outputs``); ``lean``:
    without their texts where nothing needs them (read again with them when a pair is to be judged)."""
    runs = [(Path(p), read(p, lean)) for p in paths]
    targets = eval_output_dirs([p for p, _ in runs], opts.out)
    for target in targets:  # every output path is checked before anything is judged
        check_writable(target, folder=True)
    if check_run is not None:
        for path, run in runs:
            check_run(path, run)
    if not opts.allow_short:  # a short run refused before the runs ahead of it are judged, not after
        for _, run in runs:
            question_passages(run, max(opts.ks))
    labels = distinct_names([run.name for _, run in runs], [p for p, _ in runs], sep="/")
    runs = [(p, run if label == run.name else Run(run.questions, run.hits, run.manifest, label))
            for (p, run), label in zip(runs, labels)]
    cache = JudgementCache(opts.cache_path) if opts.use_cache else None
    results = []
    try:
        for (path, run), target in zip(runs, targets):
            results.append((path, *_evaluate_read(path, run, target, judge, opts, cache, read, digests)))
    finally:
        if cache is not None:
            cache.close()
    return results


def _evaluate_read(path: Path, run: Run, target: Path, judge: Any, opts: EvalOptions, cache: Any, read: Any,
                   digests: dict[Path, dict[str, list[bytes]]]) -> tuple[EvalResult, dict[str, Path]]:
    """One run already read: judged, its outputs written."""
    try:
        result = evaluate_run(run, judge, opts.but(allow_unparsed=True), cache=cache,  # checked once written
                              digests=digests.get(path))
    except TextsDropped:  # something to judge: the texts are needed after all
        run = Run(run.questions, read(path, False).hits, run.manifest, run.name)
        digests.pop(path, None)
        result = evaluate_run(run, judge, opts.but(allow_unparsed=True), cache=cache)
    files = write_eval_outputs(result, run, _outputs_of(path, target, result.judge_id), legacy_jsonl=opts.write_legacy)
    if target == path:  # a run folder also gets the latest metrics at its top level
        from berds.io import write_json

        write_json(path / "metrics.json", result.to_json())
        files["metrics"] = path / "metrics.json"
    return result, files


def _evaluate_streamed(paths: list[Path], judge: Any, opts: EvalOptions, read: Any,
                       digests: dict[Path, dict[str, list[bytes]]]) -> list[tuple[Path, EvalResult, dict[str, Path]]]:
    """``evaluate_paths`` reading each run question by question (the streamed evaluation below): every run is read
    (and checked) once before anything is judged; a run folder whose TREC file must be compared with the whole
    ranking is read whole, as before."""
    targets = eval_output_dirs(paths, opts.out)
    for target in targets:  # (before the runs are read: their judgements are written as they are read)
        check_writable(target, folder=True)
    from berds.evaluate.cache import default_cache_path

    # a cache file that does not exist yet is made (and its note printed) once every run has been read, as before
    exists = Path(opts.cache_path if opts.cache_path is not None else default_cache_path()).exists()
    cache: Any = JudgementCache(opts.cache_path) if exists else None
    firsts: list[Any] = []  # per run: (RunStream, its first pass) or (None, the Run read whole)
    results = []
    # the output folders this call makes (a pending file's): removed again, when empty, if it fails
    made = {folder for target in targets for folder in (target, *target.parents, target / EVAL_DIR,
                                                        target / EVAL_DIR / judge_slug(judge.id)) if not folder.exists()}
    try:
        for path, target in zip(paths, targets):
            stream = stream_run(path, opts)
            if stream is None:
                firsts.append((None, read(path, True)))
            else:
                judgements = _outputs_of(path, target, judge.id) / "judgements.jsonl"
                firsts.append((stream, stream_first_pass(stream, judge, opts, cache or EmptyCache(),
                                                           judgements)))
        names = []
        for (stream, got), path in zip(firsts, paths):  # short runs refused before any is judged
            if stream is None:
                if not opts.allow_short:
                    question_passages(got, max(opts.ks))
                names.append(got.name)
            else:
                if got.short is not None:
                    raise stream_short_error(stream, stream.name, got, opts.ks[-1])
                names.append(stream.name)
        labels = distinct_names(names, paths, sep="/")
        if cache is None:
            cache = JudgementCache(opts.cache_path)
        runner = opts.judge_runner or judge_missing
        for i, ((stream, got), path, target, label) in enumerate(zip(firsts, paths, targets, labels)):
            if stream is None:
                run = got if label == got.name else Run(got.questions, got.hits, got.manifest, label)
                results.append((path, *_evaluate_read(path, run, target, judge, opts, cache, read, digests)))
                continue
            out = _outputs_of(path, target, judge.id)
            result, pending, key = stream_finish(stream, label, judge, opts, cache, got, out / "judgements.jsonl",
                                                    runner)
            firsts[i] = (stream, None)  # (its pending file is handed on)
            try:
                files = stream_write_outputs(result, pending, key, out, got.unchanged if pending is None else None)
            except BaseException:
                if pending is not None:
                    pending.drop()
                raise
            if target == path:
                from berds.io import write_json

                write_json(path / "metrics.json", result.to_json())
                files["metrics"] = path / "metrics.json"
            results.append((path, result, files))
    except BaseException:
        for stream, got in firsts:  # what an error left pending is removed, and the folders made for it
            if stream is not None and got is not None and got.pending is not None:
                got.pending.drop()
        for folder in sorted(made, key=lambda f: len(f.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:  # (not made, or not empty: outputs of the runs finished before)
                pass
        raise
    finally:
        if cache is not None:
            cache.close()
    return results


# ------------------------------------------------------------------------- streamed evaluation
# ``berds eval`` over a run read question by question: memory that does not grow with the run (issue 36).
#
# ``evaluate_paths`` evaluates a run this way whenever it needs nothing of the whole run at once (it does for a
# ``check_run``, legacy predictions, ``--overwrite always``, ``--no-cache``, or a run folder whose TREC file must be
# compared with the whole ranking). One pass (``_StreamPass``) reads the run line by line (``berds.runs.RunStream``: every
# check ``load_run`` makes, each passage's judge text hashed and dropped as it is read), looks the verdicts of
# ``STREAM_BATCH`` questions up at a time, computes each question's metrics and writes its ``judgements.jsonl`` lines to a
# temporary file beside the output; what a question leaves behind is its metrics (and, with
# ``EvalOptions.matrices``, its support and P(Yes) matrices). The outputs are byte for byte those of the whole-run
# path (``evaluate_run`` + ``write_eval_outputs``; tests/test_evaluate.py compares them).
#
# Every run is read once before anything is judged, so bad input fails first, as before. A run whose pairs are all
# cached is then done: its files are renamed into place. A run with pairs to judge is read twice more: once keeping
# the texts of its missing pairs only, which are judged in one list in the whole-run path's order (each batch
# committed to the cache as it is answered: a killed evaluation resumes), and once more to write its outputs.

STREAM_BATCH = 64  # questions per cache lookup: a few hundred perspectives, each one query in one read snapshot


class EmptyCache:
    """The lookups of a judgement cache file that does not exist yet: nothing cached (the first passes do not create
    it: a run refused while it is read leaves no new cache file and no note about one)."""

    def lookup(self, judge_id: str, prompt_version: str, perspectives: Any, *, with_raw: bool = True) -> dict:
        return {pd: NO_VERDICTS for pd in perspectives}


class _Dropped(Exception):
    """Thrown into a pending file's ``atomic_write`` to remove it."""


class PendingFile:
    """A file written under a temporary name beside ``path`` (``berds.io.atomic_write``, which makes its folder),
    held open across the runs of one evaluation: ``commit`` renames it into place, ``drop`` removes it."""

    def __init__(self, path: Path) -> None:
        from berds.io import atomic_write

        self.path = path
        self._cm = atomic_write(path, "wb")
        self.file = self._cm.__enter__()
        self.sha256, self.size, self.done = hashlib.sha256(), 0, False

    def write(self, data: bytes) -> None:
        self.sha256.update(data)
        self.size += len(data)
        self.file.write(data)

    def commit(self) -> None:
        self.done = True
        self._cm.__exit__(None, None, None)

    def drop(self) -> None:
        if self.done:  # (committed or dropped already)
            return
        self.done = True
        self._cm.__exit__(_Dropped, _Dropped(), None)


@dataclass
class _StreamPass:
    """What one pass over a run gathered."""

    stats: JudgeStats = field(default_factory=JudgeStats)
    per_question: dict[str, dict[str, float]] = field(default_factory=dict)
    repeats: dict[str, dict[str, float]] = field(default_factory=dict)
    datasets: dict[str, str] = field(default_factory=dict)
    support: dict[str, np.ndarray] = field(default_factory=dict)
    p_yes: dict[str, np.ndarray] = field(default_factory=dict)
    missing: dict[bytes, dict[bytes, None]] = field(default_factory=dict)  # perspective -> passages not cached
    texts: dict[bytes, str] = field(default_factory=dict)  # (keep_texts) digest -> text of the missing pairs
    short: Any = None  # the first question shorter than the depth: (Question, hits), refused after every run is read
    key: Any = None
    pending: PendingFile | None = None
    unchanged: dict[str, Any] | None = None  # the record of an intact judgements.jsonl already there (none written)


def _stream_pass(stream: RunStream, judge_id: str, prompt_version: str, opts: EvalOptions, cache: JudgementCache,
                 out: PendingFile | None, *, keep_texts: bool = False,
                 extra: dict[bytes, dict[bytes, tuple]] | None = None) -> _StreamPass:
    """Read ``stream`` once: verdicts from ``cache`` (plus ``extra``: verdicts just answered that a runner did not
    store), metrics per question and, while every pair is cached, the judgement lines into ``out``. Pairs not
    cached are gathered in ``missing`` (with their texts, ``keep_texts``) in the order ``evaluate_run`` judges
    them: perspectives by first appearance, each one's passages by first appearance."""
    depth = opts.ks[-1]
    got = _StreamPass(pending=out, key=judgements_key_start(judge_id))
    tail = judgement_tail(judge_id)
    first_seen: dict[bytes, int] = {}  # perspective -> its first question's line << 40 | byte offset (one int)
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
            pds = text_digests(q.perspectives)  # (no memo: it would keep every perspective's text)
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
                    first_seen[pd] = line << 40 | offset
                    stats.pairs += len(unique)
                    continue
                known = shared.get(pd)
                if known is None:  # a perspective of an earlier question too (rare): that question read again
                    _, _, earlier = stream.question_at(first >> 40, first & (1 << 40) - 1)
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
            if len(set(ids)) != len(ids):  # (a question without repeats: its entry is made from its metrics at the end)
                got.repeats[q.id] = repeat_metrics(ids, s, opts.ks)
            if opts.matrices:
                got.support[q.id], got.p_yes[q.id] = s, py
            if not got.missing:
                judgements_key_update(got.key, q.id, ids, s, py)
                if got.pending is not None:
                    got.pending.write("".join(question_judgement_lines(q.id, ids, s, py, tail)).encode("utf-8"))
        batch.clear()

    with no_gc():  # (as the whole-run path reads: the objects of a question are freed by their counts, no cycles)
        for item in stream.questions(keep_texts=keep_texts):
            batch.append(item)
            if len(batch) == STREAM_BATCH:
                flush()
        flush()
    # (perspectives first seen, in the order evaluate_run's `wanted` has them; the missing pairs follow it)
    if got.missing:
        got.missing = {pd: got.missing[pd] for pd in first_seen if pd in got.missing}
    return got


def _stream_result(stream: RunStream, name: str, judge: Any, opts: EvalOptions, got: _StreamPass) -> EvalResult:
    return EvalResult(
        run_name=name, judge_id=judge.id, prompt_version=judge.prompt_version, ks=opts.ks, depth=opts.ks[-1],
        support=got.support, p_yes=got.p_yes, per_question=got.per_question,
        averages=aggregate(got.per_question, got.datasets), stats=got.stats, datasets=got.datasets,
        manifest=dict(stream.manifest), repeats=_all_repeats(got.repeats, got.per_question, opts.ks))


def _all_repeats(repeats: dict[str, dict[str, float]], per_question: Mapping[str, Mapping[str, float]],
                 ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """``run_repeats`` from the entries of the questions that repeat a passage: empty when none does, else one per
    question, those of the others from their metrics (no repeat: ``repeats@k`` 0, ``precision_once@k`` =
    ``precision@k``, what ``repeat_metrics`` gives them)."""
    if not repeats:
        return {}
    return {qid: repeats.get(qid) or {key: value for k in ks for key, value in
                                      ((f"repeats@{k}", 0.0), (f"precision_once@{k}", row[f"precision@{k}"]))}
            for qid, row in per_question.items()}


def stream_short_error(stream: RunStream, name: str, got: _StreamPass, depth: int) -> InputError:
    """The refusal ``evaluate_paths`` gives a run with a question shorter than ``depth`` (``question_passages``)."""
    q, hits = got.short
    return short_question(Run({q.id: q}, {q.id: hits}, stream.manifest, name), q.id, f"k={depth}", depth,
                          fix="use a smaller --k (ks=), retrieve more passages, or pass --allow-short "
                              "(allow_short=True) to score missing ranks as unsupported")


def stream_first_pass(stream: RunStream, judge: Any, opts: EvalOptions, cache: JudgementCache | EmptyCache,
                      judgements: Path) -> _StreamPass:
    """The pass every run gets before anything is judged; its judgements are pending in ``judgements``' folder,
    unless an intact ``judgements.jsonl`` is there already (a re-evaluation: ``stream_finish`` then compares keys
    and writes the file only if it changed)."""
    paths = {"metrics": judgements.parent / "metrics.json", "judgements": judgements}
    unchanged = previous_judgements_record(paths, None)
    pending = None if unchanged is not None else PendingFile(judgements)
    try:
        got = _stream_pass(stream, judge.id, judge.prompt_version, opts, cache, pending)
    except BaseException:
        if pending is not None:
            pending.drop()
        raise
    got.unchanged = unchanged
    return got


def stream_finish(stream: RunStream, name: str, judge: Any, opts: EvalOptions, cache: JudgementCache,
                  got: _StreamPass, judgements: Path, judge_runner: Callable[..., Any]
                  ) -> tuple[EvalResult, PendingFile | None, Any]:
    """The run's result, its pending judgements file (None: the one there holds the same) and the key of what it
    holds: at once when every pair was cached in the first pass, else after judging the missing pairs (the run
    read again for their texts) and a last pass."""
    if not got.missing:
        got.stats.cached = got.stats.pairs
        if got.pending is None and not (got.unchanged and got.unchanged.get("key") == got.key.hexdigest()):
            pending = PendingFile(judgements)  # the file there holds other judgements: read again to write them
            try:
                got = replace(_stream_pass(stream, judge.id, judge.prompt_version, opts, cache, pending),
                              stats=got.stats, unchanged=None)
            except BaseException:
                pending.drop()
                raise
        return _stream_result(stream, name, judge, opts, got), got.pending, got.key
    texts = _stream_pass(stream, judge.id, judge.prompt_version, opts, cache, None, keep_texts=True)  # (judged since?)
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
        last = _stream_pass(stream, judge.id, judge.prompt_version, opts, cache, pending, extra=extra)
    except BaseException:
        pending.drop()
        raise
    if last.missing:
        pending.drop()
        raise BerdsError(f"run {name!r}: some pairs have no verdict after judging — the judge runner returned fewer "
                         "verdicts than it was given")
    last.stats.judged, last.stats.seconds = judged, seconds
    last.stats.cached = last.stats.pairs - judged
    return _stream_result(stream, name, judge, opts, last), pending, last.key


def stream_write_outputs(result: EvalResult, pending: PendingFile | None, key: Any, out_dir: Path,
                         unchanged: dict[str, Any] | None = None) -> dict[str, Path]:
    """``write_eval_outputs`` for a streamed run: its judgements are written already (``pending``), or the file
    there holds the same (``pending`` None: ``unchanged`` is its record, checked by the first pass); an unchanged
    file is left as it is (the pending one dropped), else the pending one takes its place, then ``metrics.json``."""
    from berds.io import write_json

    paths = {"metrics": out_dir / "metrics.json", "judgements": out_dir / "judgements.jsonl"}
    key = key.hexdigest()
    record = unchanged if pending is None else previous_judgements_record(paths, key)
    if record is not None:
        if pending is not None:
            pending.drop()
    else:
        pending.commit()
        record = {"key": key, "sha256": pending.sha256.hexdigest(), "bytes": pending.size}
    write_json(paths["metrics"], {**result.to_json(), "judgements_file": record})
    return paths


def stream_run(path: Path, opts: EvalOptions) -> RunStream | None:
    """The run at ``path`` opened to be read question by question (its folder-level checks made), or None where it
    must be read whole (``RunStream.streamable``)."""
    stream = RunStream(path, allow_empty=opts.allow_short, duplicates=opts.duplicates, duplicates_option="--duplicates",
                       title_position=opts.title_position)
    return stream if stream.streamable else None
