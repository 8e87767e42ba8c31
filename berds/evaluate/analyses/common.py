"""What the analyses share: judged support matrices for runs, and result files.

Every analysis works on *support matrices* (``berds.evaluate.metrics``): for a question with ``m``
perspectives and ``n`` ranked passages, ``S[i, j]`` says whether passage ``j`` supports perspective ``i``.
``judge_runs`` produces them through the judgement cache (pairs judged once are never judged again), so
the analyses of runs that were already evaluated cost no judge calls.

Each analysis result is a dataclass with ``KIND``, ``to_json()``, ``from_json()`` and ``table()``
(title, header, rows of strings); ``berds.evaluate.analyses.results`` writes and reads them as JSON, and
``berds report`` turns them into markdown/CSV tables and plots.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError
from berds.types import Run

Supports = Mapping[str, np.ndarray]  # qid -> (perspectives x passages) booleans


def build_judge(judge: str | Any, options: Mapping[str, Any] | None = None) -> Any:
    """A judge object from a name (loaded lazily: a fully cached analysis never loads a model)."""
    if not isinstance(judge, str):
        return judge
    from berds.judges import LazyJudge, load_judge

    opts = dict(options or {})
    return LazyJudge(lambda: load_judge(judge, **opts))


def judge_runs(
    runs: Sequence[Run],
    judge: str | Any,
    depth: int,
    *,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    use_cache: bool = True,
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
    depth_option: str = "--k",
) -> list[Any]:
    """``EvalResult`` of each run at ``depth`` (its ``support[qid]`` is the matrix over the top ``depth``);
    ``depth_option`` is the option that asked for that depth, named when a question has fewer passages."""
    from berds.evaluate.cache import JudgementCache
    from berds.evaluate.evaluation import evaluate_run, note_unparsed

    if not allow_short:
        check_depth(runs, depth, depth_option)
    judge = build_judge(judge, judge_options)
    cache = JudgementCache(cache_path) if use_cache else None
    try:
        results = [evaluate_run(run, judge, (depth,), cache=cache, allow_short=allow_short,
                                allow_unparsed=allow_unparsed, progress=progress)
                   for run in runs]
    finally:
        if cache is not None:
            cache.close()
    if allow_unparsed:
        note_unparsed(results)
    else:  # (each run's unparsed share was checked as it was judged; not one Yes in any of them is checked here)
        from berds.evaluate.evaluation import check_unparsed

        check_unparsed(results)
    return results


def check_depth(runs: Sequence[Run], depth: int, option: str) -> None:
    """Refuse, before judging, a question with fewer than ``depth`` passages, naming the option that asked for the
    depth (the evaluation's own refusal says --k, which misled ``--depth`` and ``--curve-depth`` users)."""
    from berds.evaluate.evaluation import short_question

    for run in runs:
        short = next((qid for qid, hits in run.hits.items() if len(hits) < depth), None)
        if short is not None:
            raise short_question(run, short, f"{option} {depth}", depth,
                                 fix=f"use a smaller {option}, retrieve more passages, or pass --allow-short to count "
                                     "the missing ranks as unsupported")


def run_label(run: Run, path: str | Path | None = None) -> str:
    """A short label for tables: the run's name, else its folder/file name."""
    if run.name:
        return run.name
    return Path(path).name if path is not None else "run"


def unique_labels(labels: Sequence[str]) -> list[str]:
    """Labels made distinct by appending ``#2``, ``#3`` to repeats."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def run_labels(runs: Sequence[Run], paths: Sequence[str | Path]) -> list[str]:
    """Distinct table labels for runs loaded from ``paths``: ``run_label`` each, and where two are alike the folders
    that tell them apart, as ``berds eval`` names them (``a/run.jsonl``, ``b/run.jsonl`` -> ``a-run``, ``b-run``;
    ``run``, ``run#2`` did not say which was which); the same path given twice is numbered."""
    from berds.evaluate.evaluation import distinct_names

    names = [run_label(r, p) for r, p in zip(runs, paths)]
    try:
        names = distinct_names(names, [Path(p) for p in paths])
    except BerdsError:  # the same run given twice
        pass
    return unique_labels(names)


def pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}"


def check_same_question_per_id(runs: Sequence[Run], labels: Sequence[str], *, ordered: bool = False,
                               why: str = "their coverage is united perspective by perspective") -> None:
    """Runs are paired question by question on ids: an id two runs share must be the same question there (text
    and gold perspectives). Runs of two question sets that both number their questions q0, q1, ... were paired
    without a word. Checked before any judging.

    The gold perspectives, which every metric is measured against, must be the same, in the same order only when
    ``ordered`` (coverage unites support matrices row by row; per-question metrics do not depend on the order:
    the sycophancy study's runs list them supporting first). A run's question text is its query, so texts are
    compared without case or spacing, and not where one is a perspective of the question (a sycophancy run
    queried with it) or a file gave none (``NO_QUESTION_TEXT``, numbered by line, so it differs for the same
    question in two files)."""
    from berds.runs import NO_QUESTION_TEXT

    none = re.compile(re.escape(NO_QUESTION_TEXT).replace(re.escape("{line}"), r"\d+"))

    def text(q: Any) -> str | None:
        return None if q.text in q.perspectives or none.fullmatch(q.text) else " ".join(q.text.split()).casefold()

    def gold(q: Any) -> tuple[str, ...]:
        return tuple(q.perspectives) if ordered else tuple(sorted(q.perspectives))

    seen: dict[str, tuple[str, Any]] = {}  # qid -> (label of the first run with it, its question)
    for label, run in zip(labels, runs):
        for qid, q in run.questions.items():
            first = seen.setdefault(qid, (label, q))
            texts = text(first[1]), text(q)
            if gold(first[1]) != gold(q) and sorted(first[1].perspectives) == sorted(q.perspectives):
                raise BerdsError(f"question {qid!r} lists its gold perspectives in another order in runs {first[0]!r} "
                                 f"and {label!r}, and {why} — use runs whose questions list them in one order")
            if gold(first[1]) != gold(q) or (None not in texts and texts[0] != texts[1]):
                what = "gold perspectives" if gold(first[1]) != gold(q) else "texts"
                raise BerdsError(f"question {qid!r} is not the same question in runs {first[0]!r} and {label!r} (the "
                                 f"{what} differ): these runs come from different question sets, and results are "
                                 "paired by question id — compare runs of one question set")


def same_questions(labels: Sequence[str], supports: Sequence[Supports]) -> list[str]:
    """The question ids shared by all runs, in the first run's order; differing sets are an error."""
    first = list(supports[0])
    for label, s in zip(labels[1:], supports[1:]):
        if set(s) != set(first):
            only_a = sorted(set(first) - set(s))[:3]
            only_b = sorted(set(s) - set(first))[:3]
            raise BerdsError(f"runs {labels[0]!r} and {label!r} cover different questions "
                             f"(only in the first: {only_a}, only in the second: {only_b}) — compare runs of one question set")
    return first
