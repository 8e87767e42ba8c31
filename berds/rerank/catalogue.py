"""The reranker catalogue: built-ins and plug-ins, declared like retrievers, loaded lazily.

``RERANKERS`` lists specs (name, ``"module:attr"`` factory, default options, description); listing it
(``berds rerankers list``) imports nothing heavy. Third-party packages add rerankers through the
``berds.rerankers`` entry-point group::

    [project.entry-points."berds.rerankers"]
    my-reranker = "my_pkg.rerank:MyReranker"

and ``load_reranker("my_pkg.rerank:MyReranker")`` works without registering anything. A reranker is any
object with a ``name`` and ``rerank(run, *, progress=False) -> Run`` (``berds.rerank.base.Reranker``);
``berds check-reranker NAME`` checks one against the contract.
"""

from __future__ import annotations

import inspect
from typing import Any

from berds.errors import BerdsError
from berds.registry import Catalogue, Spec, import_object

RERANKERS: Catalogue[Any] = Catalogue("reranker", entry_point_group="berds.rerankers")

RERANKERS.register(Spec(
    name="mmr", loader="berds.rerank.mmr:MMRReranker",
    description="Maximal Marginal Relevance (the study's Eq. 1 and released code); parameter lam (λ, Table 7 presets).",
    tags=("embeddings", "implicit"),
))
for _name, _what in (("dpp", "greedy determinantal point process; parameters diversity, scale"),
                     ("msd", "max-sum diversification; parameter diversity"),
                     ("cover", "facility-location coverage; parameters diversity, gamma"),
                     ("ssd", "sliding spectrum decomposition; parameters diversity, gamma, window")):
    RERANKERS.register(Spec(name=_name, loader=f"berds.rerank.setselect:{_name}",
                            description=f"pyversity {_what} (needs berds[diversify]).",
                            tags=("embeddings", "implicit", "pyversity")))
RERANKERS.register(Spec(
    name="xquad", loader="berds.rerank.explicit:XQuADReranker",
    description="xQuAD over LLM-written perspectives (expansions=PATH or llm=BACKEND:MODEL); parameter lam.",
    tags=("embeddings", "explicit"),
))
RERANKERS.register(Spec(
    name="pm2", loader="berds.rerank.explicit:PM2Reranker",
    description="PM2 (proportional seats per perspective; expansions=PATH or llm=BACKEND:MODEL); parameter lam.",
    tags=("embeddings", "explicit"),
))


def accepted_options(factory: Any) -> list[str] | None:
    """Keyword options ``factory`` accepts, or None when it takes any keyword. A factory whose ``**options``
    go on to ``EmbeddingReranker`` (a subclass, or a function annotated to return one) accepts its options too."""
    from berds.rerank.base import EmbeddingReranker

    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return None
    names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        hint = getattr(factory, "__annotations__", {}).get("return", "")
        embedding = (inspect.isclass(factory) and issubclass(factory, EmbeddingReranker)) or (
            isinstance(hint, str) and hint.endswith("Reranker"))
        if not embedding:
            return None
        names |= {p.name for p in inspect.signature(EmbeddingReranker.__init__).parameters.values()
                  if p.kind is p.KEYWORD_ONLY}
    return sorted(names)


def load_reranker(name: str | Any, **options: Any) -> Any:
    """A ready reranker from a catalogue name, an entry-point name, ``module:attr``, or an instance.

    ``options`` override the spec's defaults; ``None`` values are dropped; a misspelt option is named with
    the accepted ones.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if not isinstance(name, str):
        if options:
            raise BerdsError("options cannot be applied to a reranker that is already built")
        check_is_reranker(name, repr(name))
        return name
    spec = RERANKERS.spec(name)
    factory = import_object(spec.loader)
    merged = {**spec.options, **options}
    if not callable(factory) or (hasattr(factory, "rerank") and not inspect.isclass(factory)):
        if merged:
            raise BerdsError(f"{spec.loader} is a ready reranker object; it takes no options (got {', '.join(merged)})")
        reranker = factory
    else:
        known = accepted_options(factory)
        unknown = [k for k in merged if known is not None and k not in known]
        if unknown:
            raise BerdsError(f"reranker {name!r} does not take option(s) {', '.join(map(repr, unknown))} "
                             f"(it takes: {', '.join(known or []) or 'none'})")
        reranker = factory(**merged)
    check_is_reranker(reranker, spec.loader)
    return reranker


def check_is_reranker(obj: Any, where: str) -> None:
    if not isinstance(getattr(obj, "name", None), str) or not callable(getattr(obj, "rerank", None)):
        raise BerdsError(f"{where} did not give a reranker: it needs a `name` string and a "
                         "`rerank(run, *, progress=False)` method (see berds.rerank.base)")


def reranked_run_problems(before: Any, after: Any) -> list[str]:
    """What is wrong with ``after`` as a reranking of ``before`` (empty when nothing): the reranker contract
    ``berds check-reranker`` tests and ``rerank_file`` enforces before writing a run."""
    import math

    from berds.types import Run

    if not isinstance(after, Run):
        return [f"rerank must return a berds.types.Run, got {type(after).__name__}"]
    problems = []
    if list(after.questions) != list(before.questions):
        problems.append("the output must have the input's questions in the input's order")
        return problems
    from collections import Counter

    for qid in before.questions:
        given = {h.passage.id: h.passage for h in before.hits[qid]}
        out = after.hits[qid]
        ids = [h.passage.id for h in out]
        # a passage may appear as often as the input repeats it (the study's expansion merge keeps repeats), no more;
        # (counted only when the output has a repeat: the usual ranking has none, and a set is one C-level pass)
        if len(set(ids)) != len(ids) and Counter(ids) - Counter(h.passage.id for h in before.hits[qid]):
            problems.append(f"question {qid!r}: duplicate passages")
        foreign = [i for i in ids if i not in given]
        if foreign:
            problems.append(f"question {qid!r}: passages not in its input list: {foreign[:3]}")
        # (a reranker hands the input's own Passage objects back: `is` settles those without comparing texts)
        changed = [h.passage.id for h in out if h.passage.id in given and h.passage is not given[h.passage.id]
                   and h.passage != given[h.passage.id]]
        if changed:
            problems.append(f"question {qid!r}: passage text or title changed: {changed[:3]}")
        scores = [float(h.score) for h in out]
        if not all(map(math.isfinite, scores)):
            problems.append(f"question {qid!r}: scores must be finite")
        elif any(b > a for a, b in zip(scores, scores[1:])):
            problems.append(f"question {qid!r}: scores must not increase down the list (TREC tools sort by score)")
    return problems



def tunable(reranker: Any) -> tuple[str | None, tuple[float, ...]]:
    """The parameter a study tunes for this reranker and its default grid (``(None, ())`` if none)."""
    return getattr(reranker, "parameter", None), tuple(getattr(reranker, "grid", ()) or ())


def rerank_file(name: str | Any, run_path: Any, out: Any, *, options: dict[str, Any] | None = None,
                overwrite: bool = False, progress: bool = False,
                extra_provenance: dict[str, Any] | None = None, run: Any = None) -> tuple[Any, Any, Any]:
    """``berds rerank NAME RUN --out OUT``: load the run, rerank it, save it; returns (reranker, run, folder). ``out`` is
    locked while it runs (another rerank into it is refused at once).

    ``run``: the run at ``run_path`` already loaded (``load_run(run_path, allow_empty=True,
    require_perspectives=False)``), so a caller that needs it too reads the file once."""
    import os
    from pathlib import Path

    from berds.io import lock_folder, prefetch_environment_info

    prefetch_environment_info()  # (the manifest's versions, read while the run is reranked)
    out = Path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    # one rerank per folder, as retrieve: two into one --out both computed to the end, then one was refused
    lock = lock_folder(out, what="berds rerank")
    try:
        return _rerank_into(name, run_path, out, options=options, overwrite=overwrite, progress=progress,
                            extra_provenance=extra_provenance, run=run)
    finally:
        if lock is not None:
            os.close(lock)
        if created and out.is_dir() and not any(out.iterdir()):  # (a refused or failed rerank leaves no empty folder)
            out.rmdir()


def _rerank_into(name: str | Any, run_path: Any, out: Any, *, options: dict[str, Any] | None, overwrite: bool,
                 progress: bool, extra_provenance: dict[str, Any] | None, run: Any = None) -> tuple[Any, Any, Any]:
    """``rerank_file`` once ``out`` is locked."""
    from berds.runs import load_run, save_run
    from berds.types import Run

    if (out / "manifest.json").exists() and not overwrite:  # fail before the (slow) embedding step
        raise BerdsError(f"{out} already holds a run — choose another --out or pass --overwrite")
    reranker = load_reranker(name, **dict(options or {}))
    if run is None:
        run = load_run(run_path, allow_empty=True, require_perspectives=False)  # no gold needed; empty stays empty
    kwargs: dict[str, Any] = {}
    try:
        params = inspect.signature(reranker.rerank).parameters
    except (TypeError, ValueError):
        params = {}
    if "progress" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["progress"] = progress
    if "input_path" in params:
        kwargs["input_path"] = str(run_path)
    if extra_provenance and "extra_provenance" in params:
        kwargs["extra_provenance"] = extra_provenance
    given = Run(dict(run.questions), dict(run.hits), {}, run.name)  # what to check against, should rerank edit `run`
    reranked = reranker.rerank(run, **kwargs)
    problems = reranked_run_problems(given, reranked)
    if problems:  # as retrieve does for retrievers: a broken ranking is never written as a run
        raise BerdsError(f"reranker {reranker.name!r} broke the reranker contract: {'; '.join(problems[:3])}"
                         f"{f' (and {len(problems) - 3} more)' if len(problems) > 3 else ''} — "
                         "`berds check-reranker` lists every check")
    return reranker, reranked, save_run(reranked, out, overwrite=overwrite)
