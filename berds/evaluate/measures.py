"""BERDS' MRecall@k and Precision@k as ir_measures measures (and so as PyTerrier ``eval_metrics``).

They read the *subtopic qrels* berds writes (``berds export qrels``, ``qrels.qrels_from_judgements``): one line
``qid subtopic docid rel`` per judged (perspective, passage) pair, the subtopic being the 1-based position of the
gold perspective, which ir_measures keeps in its ``iteration`` field (PyTerrier: the ``iteration`` column of a
qrels DataFrame). From those lines, for one question:

* ``m`` = the number of distinct subtopics the question has in the qrels (berds judges every perspective against
  every ranked passage, so every gold perspective has lines, supported or not);
* ``MRecall@k`` = ``1[c >= min(m, k)]``, ``c`` the subtopics with ``rel > 0`` for some passage in the top k;
* ``BERDS_P@k`` = the top-k passages that have ``rel > 0`` for *any* subtopic, divided by ``k`` (fewer than k
  passages: the missing ranks count as unsupported).

exactly ``berds.evaluate.metrics.mrecall_at_k`` / ``precision_at_k``. A passage the qrels do not hold counts as
supporting nothing (a ranking of other passages than those judged needs judging first: ``Judged@k`` says how
much of it was). A question in the qrels that the run lacks scores 0 (ir_measures' default); a question of the run
that the qrels lack is not scored. Ties in score are broken as trec_eval does (docid descending).

ir_measures finds measures by name in ``ir_measures.measures.registry``; ``register()`` adds ``MRecall`` and
``BERDS_P`` there (once), so ``ir_measures.parse_measure("MRecall@5")``, ``berds eval --measure MRecall@5`` and
``pt.Experiment(..., eval_metrics=["MRecall@5"])`` know them. They are computed by ir_measures' ``runtime``
provider (the one behind ``ir_measures.define``): a measure object with a ``runtime_impl``. ir_measures is an
optional extra, so nothing here imports it at module import; ``from berds.evaluate.measures import MRecall``
registers on first use.
"""

from __future__ import annotations

from typing import Any, Iterator

_REGISTERED: dict[str, Any] = {}
_LAST: tuple[Any, Any, Any] | None = None  # (qrels frame, run frame, what _per_question read from them)


def _per_question(qrels: Any, run: Any) -> tuple[dict[str, dict[str, set[str]]], dict[str, set[str]],
                                                 dict[str, list[str]]]:
    """(supported subtopics per qid and docid, all subtopics per qid, ranked docids per qid) from ir_measures'
    pandas frames (``query_id, doc_id, relevance, iteration`` / ``query_id, doc_id, score``)."""
    # flat qrels have no iteration column, or ir_measures' default "0" in it (berds' --flat export writes 0 too);
    # berds' subtopics are perspective positions from 1
    if "iteration" not in qrels.columns or (qrels["iteration"].astype(str) == "0").any():
        raise ValueError("MRecall / BERDS_P need subtopic qrels (the perspective, from 1, in the 'iteration' "
                         "field), got flat qrels: write them with `berds export qrels EVAL_DIR` (not --flat)")
    global _LAST
    if _LAST is not None and _LAST[0] is qrels and _LAST[1] is run:  # the next measure of the same evaluation
        return _LAST[2]
    supports: dict[str, dict[str, set[str]]] = {}
    subtopics: dict[str, set[str]] = {}
    # (.tolist() first: iterating pandas' Arrow-backed string columns item by item was 3 s of 5 on 160k lines)
    for qid, docid, rel, sub in zip(qrels["query_id"].astype(str).tolist(), qrels["doc_id"].astype(str).tolist(),
                                    qrels["relevance"].tolist(), qrels["iteration"].astype(str).tolist()):
        subtopics.setdefault(qid, set()).add(sub)
        if rel > 0:
            supports.setdefault(qid, {}).setdefault(docid, set()).add(sub)
    # trec_eval's order: score descending, ties by docid descending (a stable sort on docid first, then on score)
    ranked = run.assign(query_id=run["query_id"].astype(str), doc_id=run["doc_id"].astype(str))
    ranked = ranked.sort_values("doc_id", ascending=False, kind="stable")
    ranked = ranked.sort_values("score", ascending=False, kind="stable")
    ordered: dict[str, dict[str, None]] = {}
    for qid, docid in zip(ranked["query_id"].tolist(), ranked["doc_id"].tolist()):
        ordered.setdefault(qid, {}).setdefault(docid, None)  # a repeated docid counts once, at its first rank
    result = supports, subtopics, {qid: list(docs) for qid, docs in ordered.items()}
    _LAST = (qrels, run, result)  # ir_measures hands every measure the same two frames: read them once
    return result


def _mrecall(k: int, qrels: Any, run: Any) -> Iterator[tuple[str, float]]:
    supports, subtopics, rankings = _per_question(qrels, run)
    for qid, ranking in rankings.items():
        if qid not in subtopics:
            continue
        found = supports.get(qid, {})
        covered = set().union(*(found.get(d, ()) for d in ranking[:k]))
        yield qid, float(len(covered) >= min(len(subtopics[qid]), k))


def _precision(k: int, qrels: Any, run: Any) -> Iterator[tuple[str, float]]:
    supports, subtopics, rankings = _per_question(qrels, run)
    for qid, ranking in rankings.items():
        if qid not in subtopics:
            continue
        found = supports.get(qid, {})
        yield qid, sum(1 for d in ranking[:k] if found.get(d)) / k


def register() -> dict[str, Any]:
    """Add ``MRecall`` and ``BERDS_P`` to ir_measures' measure registry (idempotent); returns them by name."""
    if _REGISTERED:
        return _REGISTERED
    from berds.lazy import require

    ir_measures = require("ir_measures", extra="analysis", purpose="the MRecall / BERDS_P measures")
    from ir_measures.measures import Measure, ParamInfo

    class _BerdsMeasure(Measure):
        """A BERDS metric over subtopic qrels, computed by ir_measures' runtime provider."""
        SUPPORTED_PARAMS = {"cutoff": ParamInfo(dtype=int, required=True, desc="ranking cutoff k (required)")}
        RUN_INPUTS = ["query_id", "doc_id", "score"]
        QREL_INPUTS = ["query_id", "doc_id", "relevance", "iteration"]
        _impl: Any = None

        def validate_params(self) -> None:
            super().validate_params()
            cutoff = self.params.get("cutoff")
            if cutoff is not None and (type(cutoff) is not int or cutoff < 1):
                raise ValueError(f"{self.NAME} needs a cutoff k >= 1 ({self.NAME}@5), got {cutoff!r}")

        def runtime_impl(self, qrels: Any, run: Any) -> Iterator[Any]:
            cutoff = self.params.get("cutoff")
            if cutoff is None:  # ir_measures leaves required params unchecked until here
                raise ValueError(f"{self.NAME} needs a cutoff: {self.NAME}@k, e.g. {self.NAME}@5")
            for qid, value in type(self)._impl(cutoff, qrels, run):
                yield ir_measures.Metric(qid, self, value)

    class _MRecall(_BerdsMeasure):
        """BERDS MRecall@k: 1 when the top k cover every gold perspective (at least k of them when m > k)."""
        __name__ = "MRecall"
        NAME = "MRecall"
        PRETTY_NAME = "MRecall@k (BERDS)"
        SHORT_DESC = "1 when the top-k passages support all m perspectives (at least min(m, k) of them)"
        _impl = staticmethod(_mrecall)

    class _Precision(_BerdsMeasure):
        """BERDS Precision@k: the share of the top k that support any perspective (denominator k)."""
        __name__ = "BERDS_P"
        NAME = "BERDS_P"
        PRETTY_NAME = "Precision@k (BERDS)"
        SHORT_DESC = "share of the top-k passages that support any perspective (denominator k)"
        _impl = staticmethod(_precision)

    found = {}
    for measure in (_MRecall(), _Precision()):
        existing = ir_measures.measures.registry.get(measure.NAME)
        if existing is None:
            ir_measures.measures.register(measure)
            existing = measure
        found[measure.NAME] = existing  # (a re-import of this module keeps the instance ir_measures already has)
    # the runtime provider computes any measure with a runtime_impl; check it is there (it is in ir_measures >= 0.3)
    if not ir_measures.runtime.supports(found["MRecall"] @ 5):
        raise RuntimeError("ir_measures' runtime provider does not take MRecall")  # pragma: no cover
    _REGISTERED.update(found)
    return _REGISTERED


def __getattr__(name: str) -> Any:
    if name in ("MRecall", "BERDS_P"):
        return register()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
