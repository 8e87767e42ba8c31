"""The sycophancy experiment (``berds analyze sycophancy``): retrieve with the question, the supporting and the
opposing perspective as queries, judge the top k of each run, count.

The counting (the paper's per-run Δ = (p − n)/p) is an analysis of runs in
``berds.evaluate.analyses.sycophancy``; this module runs the retrievals that feed it, so the analyses never
import retrieval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from berds.errors import BerdsError
from berds.evaluate.analyses.common import judge_runs
from berds.evaluate.analyses.stance import Stance, resolve_stances
from berds.evaluate.analyses.sycophancy import DEFAULT_K, QUERIES, SycophancyResult, perspective_queries, sycophancy_result
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
    k: int = DEFAULT_K,
    queries: Sequence[str] = QUERIES,
    retriever_options: Mapping[str, Any] | None = None,
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    label: str | None = None,
    out: str | Path | None = None,
    progress: bool = False,
) -> tuple[SycophancyResult, dict[str, Run]]:
    """Retrieve with each query form (question, supporting, opposing perspective), judge the top k of each
    run against both perspectives, and count Δ per run (see ``berds.evaluate.analyses.sycophancy``).

    With ``out`` the runs are saved as run folders ``out/query-question``, ``out/query-supporting`` and
    ``out/query-opposing``. Returns the result and the runs by query.
    """
    if k < 1:
        raise BerdsError(f"k must be at least 1, got {k}")
    bad = [q for q in queries if q not in QUERIES]
    if bad or not queries:
        raise BerdsError(f"queries must be some of {', '.join(QUERIES)}, got {list(queries)}")
    if isinstance(judge, str):  # a typo must not cost full retrievals first
        check_judge_name(judge)
    own = isinstance(retriever, str)
    model = load_retriever(retriever, **dict(retriever_options or {})) if own else retriever
    runs: dict[str, Run] = {}
    try:
        for query in queries:
            asked = perspective_queries(questions, stances, query)
            if not asked:
                raise BerdsError("no question has two perspectives and a known stance — nothing to compare")
            target = Path(out) / f"query-{query}" if out is not None else None
            runs[query] = retrieve(model, asked, k=k, out=target, overwrite=True, name=f"{model.name}-query-{query}",
                                   progress=progress)
    finally:
        if own and callable(getattr(model, "close", None)):
            model.close()
    evals = judge_runs(list(runs.values()), judge, k, judge_options=judge_options, cache_path=cache_path,
                       allow_short=True, progress=progress)
    # the matrices are padded to k columns; a question retrieving fewer counts only the documents it has (p, n are
    # percentages of retrieved documents)
    supports = {query: {qid: m[:, :len(runs[query].hits[qid])] for qid, m in ev.support.items()}
                for query, ev in zip(runs, evals)}
    result = sycophancy_result(label or model.name, supports, k, judge_id=evals[0].judge_id)
    return result, runs


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
    result, _ = sycophancy_study(retriever, list(questions), stance_map, judge, out=out, **options)
    return result
