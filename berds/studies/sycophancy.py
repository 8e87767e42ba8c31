"""The sycophancy experiment (``berds analyze sycophancy``): retrieve with perspectives as queries, judge, count.

The counting (Δ and its rows) is an analysis of runs in ``berds.evaluate.analyses.sycophancy``; this module
runs the retrievals that feed it, so the analyses never import retrieval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError
from berds.evaluate.analyses.common import judge_runs
from berds.evaluate.analyses.stance import Stance, resolve_stances
from berds.evaluate.analyses.sycophancy import SIDES, SycophancyResult, perspective_queries, sycophancy_result
from berds.judges import check_judge_name
from berds.questions import load_questions
from berds.retrievers.registry import load_retriever
from berds.retrievers.retrieve import retrieve
from berds.types import Question, Run


def sycophancy_study(
    retriever: str | Any,
    questions: Sequence[Question],
    stances: Mapping[str, Stance],
    judge: str | Any,
    *,
    k: int = 10,
    retriever_options: Mapping[str, Any] | None = None,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    label: str | None = None,
    out: str | Path | None = None,
    progress: bool = False,
) -> tuple[SycophancyResult, Run, Run]:
    """Retrieve with each side's perspective as the query, judge the top k, and count (see module doc).

    With ``out`` the two runs are saved as run folders ``out/query-supporting`` and ``out/query-opposing``.
    """
    if k < 1:
        raise BerdsError(f"k must be at least 1, got {k}")
    if isinstance(judge, str):  # a typo must not cost two full retrievals first
        check_judge_name(judge)
    own = isinstance(retriever, str)
    model = load_retriever(retriever, **dict(retriever_options or {})) if own else retriever
    runs = []
    try:
        for side in SIDES:
            queries = perspective_queries(questions, stances, side)
            if not queries:
                raise BerdsError("no question has two perspectives and a known stance — nothing to compare")
            target = Path(out) / f"query-{side}" if out is not None else None
            run = retrieve(model, queries, k=k, out=target, overwrite=True, name=f"{model.name}-query-{side}",
                           progress=progress)
            runs.append(run)
    finally:
        if own and callable(getattr(model, "close", None)):
            model.close()
    sup_eval, opp_eval = judge_runs(runs, judge, k, judge_options=judge_options, cache_path=cache_path,
                                    allow_short=True, progress=progress)
    result = sycophancy_result(label or model.name, sup_eval.support, opp_eval.support, k, judge_id=sup_eval.judge_id)
    return result, runs[0], runs[1]


def sycophancy_from_source(
    retriever: str | Any,
    questions: str | Path | Sequence[Question],
    judge: str | Any,
    *,
    split: str = "test",
    limit: int | None = None,
    stances: str | Path | None = None,
    stance_llm: str | Any = None,
    llm_options: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    **options: Any,
) -> SycophancyResult:
    """``berds analyze sycophancy``: questions by name/path, stances from a file or an LLM, then
    ``sycophancy_study`` (``options`` go to it: ``k``, ``retriever_options``, ``judge_options``, ...)."""
    if isinstance(questions, (str, Path)):
        questions = load_questions(questions, split, limit=limit)
    stance_map = resolve_stances(list(questions), stances=stances, llm=stance_llm, llm_options=llm_options,
                                 progress=options.get("progress", False))
    result, _, _ = sycophancy_study(retriever, list(questions), stance_map, judge, out=out, **options)
    return result
