"""The contract test plug-in authors run: ``check_retriever`` on a tiny built-in corpus.

From pytest::

    from berds.testing import assert_retriever_contract

    def test_my_retriever():
        assert_retriever_contract("my_pkg.retrievers:MyRetriever")   # or an instance, or a registered name

and from the shell: ``berds check-retriever my_pkg.retrievers:MyRetriever``.

A retriever given by name or ``module:attr`` is built with ``corpus=PATH`` (a tiny passage store written
here: 12 passages on four topics) when its factory takes a ``corpus`` keyword, plus any ``options``. A
ready instance is checked as it is, on the same three questions. The checks:

=====================  ======================================================================
builds                 the factory returns an object with ``name`` and ``search``
name                   ``name`` is a non-empty string
search signature       ``search(questions, *, k)`` accepts ``k`` as a keyword
contract               one list per question, ``Hit`` items, at most ``k``, no duplicates, finite
                       scores, best first with ties broken by passage id (``rank_hits``)
input intact           ``search`` leaves the list of questions it is given as it was
empty input            ``search([], k=...)`` returns ``[]``
deterministic          the same call twice gives the same ids and scores
batch = one by one     searching questions together or one at a time gives the same lists
                       (both up to ties: ``rankings_agree`` lets passages whose scores differ by
                       float noise, 1e-5, swap places, as batched matrix products make them do)
k                      ``k=1`` gives at most one hit, the same as the top of a deeper search
provenance             ``provenance()``, if defined, returns JSON plain data (``corpus`` as a dict)
passages intact        (on the tiny corpus) returned passages exist there with their texts unchanged
sanity (warning only)  the passage written to answer each question is retrieved in the top ``k``
time                   each ``search`` call returns within ``timeout`` seconds (default 60; a hung
                       one is reported and the checker stops, leaving it behind: it is not closed)
=====================  ======================================================================
"""

from __future__ import annotations

import inspect
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from berds.errors import BerdsError
from berds.types import Passage, Question

TINY_PASSAGES = (
    Passage("bees-1", "Honey bees pollinate crops such as almonds and apples; without them yields fall sharply.", "Bees"),
    Passage("bees-2", "A hive of honey bees keeps its brood warm by clustering and shivering through the winter.", "Bees"),
    Passage("bees-3", "Pesticides called neonicotinoids harm bee colonies, and several countries restrict them.", "Pesticides"),
    Passage("tides-1", "Ocean tides rise and fall twice a day because of the gravitational pull of the moon.", "Tides"),
    Passage("tides-2", "Spring tides happen when the sun and moon line up; neap tides when they are at right angles.", "Tides"),
    Passage("tides-3", "Tidal power stations turn the flow of the tides into electricity with underwater turbines.", "Tidal power"),
    Passage("bread-1", "Sourdough bread rises because wild yeast and lactic bacteria in the starter produce gas.", "Bread"),
    Passage("bread-2", "Kneading dough develops gluten, which traps gas so the loaf can rise in the oven.", "Bread"),
    Passage("bread-3", "Rye flour holds little gluten, so rye bread is dense unless wheat flour is added.", "Rye"),
    Passage("chess-1", "In chess the queen moves any number of squares along a rank, file or diagonal.", "Chess"),
    Passage("chess-2", "Castling moves the king two squares toward a rook and puts the rook beside it.", "Chess"),
    Passage("chess-3", "A chess clock limits each player's thinking time; flag fall loses the game.", "Chess clock"),
)
TINY_QUESTIONS = (
    Question("q-bees", "Why do honey bees matter for pollinating crops like almonds?", ("Bees raise crop yields.", "Crops can be pollinated otherwise.")),
    Question("q-tides", "What makes ocean tides rise and fall twice a day?", ("The moon's gravity.", "The sun's gravity.")),
    Question("q-bread", "Why does sourdough bread rise without added yeast?", ("Wild yeast makes gas.", "Bacteria make gas.")),
)
EXPECTED = {"q-bees": "bees-1", "q-tides": "tides-1", "q-bread": "bread-1"}


def tiny_corpus(folder: str | Path) -> Path:
    """Write (or reuse) the tiny passage store under ``folder`` and return its path."""
    from berds.corpora.docstore import PassageStore, is_passage_store, write_passage_store

    from berds.errors import InputError

    path = Path(folder) / "berds-tiny-corpus"
    if is_passage_store(path):
        try:
            if len(PassageStore.open(path)) == len(TINY_PASSAGES):
                return path
        except InputError:  # written by an older berds: write it again
            pass
    write_passage_store(TINY_PASSAGES, path, overwrite=True, metadata={"source": "berds.testing tiny corpus"})
    return path


def tiny_questions() -> list[Question]:
    """The three questions the contract checks search for (a new list each call)."""
    return list(TINY_QUESTIONS)


@dataclass(frozen=True)
class Check:
    """One contract point: ``status`` is "pass", "fail" or "warn"; ``detail`` says what was seen."""

    name: str
    status: str  # "pass", "fail" or "warn"
    detail: str = ""


@dataclass
class ContractReport:
    """The outcome of ``check_retriever``: one ``Check`` per contract point."""

    retriever: str
    checks: list[Check] = field(default_factory=list)
    kind: str = "retriever"

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def summary(self) -> str:
        lines = [f"{self.kind} contract for {self.retriever}: {'OK' if self.ok else 'FAILED'}"]
        lines += [f"  [{c.status}] {c.name}" + (f": {c.detail}" if c.detail else "") for c in self.checks]
        return "\n".join(lines)

    def table(self) -> Any:
        from rich.table import Table

        table = Table(title=f"{self.kind} contract: {self.retriever}")
        for col in ("check", "result", "detail"):
            table.add_column(col, overflow="fold")
        style = {"pass": "green", "fail": "bold red", "warn": "yellow"}
        for c in self.checks:
            table.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", c.detail)
        return table


def check_retriever(retriever: Any, *, k: int = 3, options: dict[str, Any] | None = None,
                    workdir: str | Path | None = None, timeout: float | None = 60.0) -> ContractReport:
    """Check ``retriever`` (a name, ``module:attr``, class, or instance) against the retriever contract.

    Returns a ``ContractReport``; nothing is raised for a broken retriever (see
    ``assert_retriever_contract`` for pytest). ``workdir`` holds the tiny corpus (a temporary folder
    by default). ``timeout``: seconds a ``search`` call may take (``None``: no limit).
    """
    if k < 2:
        raise BerdsError("check_retriever needs k >= 2 (it compares k=1 with a deeper search)")
    label = retriever if isinstance(retriever, str) else getattr(retriever, "name", None) or type(retriever).__name__
    report = ContractReport(str(label))
    with tempfile.TemporaryDirectory(prefix="berds-check-") as tmp:
        corpus = tiny_corpus(workdir or tmp)
        built, on_tiny = _build(retriever, corpus, dict(options or {}), report)
        if built is None:
            return report
        hung = False
        try:
            _run_checks(built, on_tiny, corpus, k, report, timeout)
        except _Hung:
            hung = True  # its search is still running: closing it under that call could hang too
        finally:
            if not hung and built is not retriever and callable(getattr(built, "close", None)):
                try:
                    built.close()
                except Exception as exc:  # a plug-in's exception is a failed check, as in search()
                    report.checks.append(Check("close", "fail", f"close() raised {type(exc).__name__}: {exc}"))
    return report


def assert_retriever_contract(retriever: Any, **kwargs: Any) -> ContractReport:
    """``check_retriever`` that raises ``AssertionError`` listing every failed check (for pytest)."""
    report = check_retriever(retriever, **kwargs)
    if not report.ok:
        raise AssertionError(report.summary())
    return report


def _build(retriever: Any, corpus: Path, options: dict[str, Any], report: ContractReport) -> tuple[Any, bool]:
    from berds.registry import import_object
    from berds.retrievers.registry import RETRIEVERS, accepts_option, load_retriever

    if hasattr(retriever, "search") and not inspect.isclass(retriever):
        report.checks.append(Check("builds", "pass", "given a ready instance"))
        return retriever, False
    try:
        if inspect.isclass(retriever) or (callable(retriever) and not isinstance(retriever, str)):
            factory, target = retriever, retriever
        else:
            spec = RETRIEVERS.spec(retriever)
            factory, target = import_object(spec.loader), retriever
            options = {**spec.options, **options}
        ready = hasattr(factory, "search") and not inspect.isclass(factory)  # module:attr naming an instance
        on_tiny = not ready and "corpus" not in options and "index" not in options and accepts_option(factory, "corpus")
        if on_tiny:
            options["corpus"] = str(corpus)
        built = load_retriever(target, **options) if isinstance(target, str) else factory(**options)
    except BerdsError as exc:
        report.checks.append(Check("builds", "fail", str(exc)))
        return None, False
    except Exception as exc:  # a plug-in's own bug: report it instead of crashing the checker
        report.checks.append(Check("builds", "fail", f"{type(exc).__name__}: {exc}"))
        return None, False
    if not isinstance(getattr(built, "name", None), str) or not callable(getattr(built, "search", None)):
        report.checks.append(Check("builds", "fail", f"got {type(built).__name__}, which lacks `name` or `search`"))
        return None, False
    given = [f"{key}=" for key in ("index", "corpus") if key in options]
    how = (f"built with corpus={corpus.name}" if on_tiny else "a ready instance, checked as it is" if ready
           else f"built with the {' and '.join(given)} given, not the tiny corpus" if given
           else "built without the tiny corpus (factory takes no `corpus`)")
    report.checks.append(Check("builds", "pass", how))
    return built, on_tiny


class _Hung(Exception):
    """A ``search`` call outlived the checker's timeout (reported as the failed ``time`` check)."""


def _call(fn: Any, timeout: float | None) -> tuple[bool, Any, BaseException | None]:
    """``fn()`` in a daemon thread given ``timeout`` seconds: (finished, result, exception). A plug-in that hangs
    cannot be stopped from Python; the thread is left behind and dies with the process."""
    if timeout is None:
        try:
            return True, fn(), None
        except Exception as exc:
            return True, None, exc
    import threading

    box: list[Any] = [None, None]

    def target() -> None:
        try:
            box[0] = fn()
        except BaseException as exc:  # (handed to the caller, which decides)
            box[1] = exc

    thread = threading.Thread(target=target, name="berds-check-retriever-search", daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), box[0], box[1]


def _run_checks(r: Any, on_tiny: bool, corpus: Path, k: int, report: ContractReport,
                timeout: float | None = None) -> None:
    from berds.retrievers.base import contract_problems, provenance_problems

    add = report.checks.append
    add(Check("name", "pass" if r.name.strip() else "fail", repr(r.name)))
    describe = getattr(r, "provenance", None)
    if callable(describe):
        try:
            problems = provenance_problems(describe())
        except Exception as exc:  # a plug-in's exception is a failed check
            problems = [f"provenance() raised {type(exc).__name__}: {exc}"]
        add(Check("provenance", "fail" if problems else "pass", "; ".join(problems[:3])))
    try:
        params = inspect.signature(r.search).parameters
        takes_k = "k" in params and params["k"].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        takes_k = takes_k or any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        takes_k = True
    add(Check("search signature", "pass" if takes_k else "fail", "" if takes_k else "search() must accept k as a keyword"))
    if not takes_k:
        return
    questions = tiny_questions()
    changed_input: list[bool] = []

    def search(qs: list[Question], kk: int) -> Any:
        given = list(qs)  # the retriever's own list: whatever it does to it is seen here, not in ``questions``
        finished, result, exc = _call(lambda: r.search(given, k=kk), timeout)
        if not finished:
            add(Check("time", "fail", f"search({len(qs)} question{'s' if len(qs) != 1 else ''}, k={kk}) did not "
                      f"return within {timeout:g} s{f' on the {len(TINY_PASSAGES)}-passage corpus' if on_tiny else ''}; "
                      "the remaining checks were not run"))
            raise _Hung
        changed_input.append(given != list(qs))
        if exc is not None:
            if not isinstance(exc, Exception):
                raise exc  # KeyboardInterrupt, SystemExit: not the plug-in's check to fail
            return None, f"search raised {type(exc).__name__}: {exc}"  # a plug-in's exception is a failed check
        return result, None

    results, err = search(questions, k)
    problems = [err] if err else contract_problems(questions, results, k)
    add(Check("contract", "fail" if problems else "pass", "; ".join(problems[:4]) or
              f"{sum(len(h) for h in results)} hits for {len(questions)} questions at k={k}"))
    if changed_input[0]:  # retrieve() pairs each result list with the question at its place in the list it passed
        add(Check("input intact", "fail", "search changed the list of questions it was given (reordered, added or "
                  "removed some): copy it before sorting or filtering, and return one list per question in its order"))
    if problems:
        return
    empty, err = search([], k)
    ok = err is None and isinstance(empty, list) and len(empty) == 0
    add(Check("empty input", "pass" if ok else "fail", err or ("" if ok else f"search([]) returned {empty!r}")))

    again, err = search(questions, k)
    same = err is None and _same_lists(again, results)
    add(Check("deterministic", "pass" if same else "fail", err or ("" if same else "a second identical call returned different hits")))

    singles = []
    for q in questions:
        one, err = search([q], k)
        if err or not isinstance(one, list) or len(one) != 1:
            singles = None
            break
        singles.append(one[0])
    same = singles is not None and _same_lists(singles, results)
    add(Check("batch = one by one", "pass" if same else "fail",
              "" if same else "searching questions one at a time gives different lists than searching them together"))

    top1, err = search(questions, 1)
    ok = err is None and not contract_problems(questions, top1, 1) and all(
        (not a and not b) or (a and b and a[0].passage.id == b[0].passage.id) for a, b in zip(top1, results))
    add(Check("k", "pass" if ok else "fail", err or ("" if ok else "k=1 is not the top hit of the k search")))

    if on_tiny:
        from berds.corpora.docstore import PassageStore

        store = PassageStore.open(corpus)
        bad = [h.passage.id for hits in results for h in hits
               if h.passage.id not in store or store.get(h.passage.id).text != h.passage.text]
        add(Check("passages intact", "fail" if bad else "pass",
                  f"not in the corpus or text changed: {bad[:3]}" if bad else ""))
        found = sum(EXPECTED[q.id] in [h.passage.id for h in hits] for q, hits in zip(questions, results))
        add(Check("sanity", "pass" if found == len(questions) else "warn",
                  f"the answering passage is in the top {k} for {found}/{len(questions)} questions"))


def rankings_agree(a: Any, b: Any, *, tol: float = 1e-5) -> bool:
    """Whether two ranked lists of ``(id, score)`` are the same ranking up to ties.

    Scores must agree place by place within ``tol`` (relative to the score's size, absolute below 1); within a
    run of places whose scores lie within ``tol`` of their neighbours, the ids may come in any order, and the
    last such run may hold other ids (a tie cut off at ``k``). This is how two batchings of the same model are
    compared: their float sums differ in the last bits, so exact ties and near-ties may swap.
    """
    a, b = list(a), list(b)
    if len(a) != len(b):
        return False
    scores_a, scores_b = [float(s) for _, s in a], [float(s) for _, s in b]
    if not all(_close(x, y, tol) for x, y in zip(scores_a, scores_b)):
        return False
    start = 0
    for end in range(1, len(a) + 1):  # cut a into runs of tied places
        if end < len(a) and _close(scores_a[end - 1], scores_a[end], tol):
            continue
        if end < len(a) and {i for i, _ in a[start:end]} != {i for i, _ in b[start:end]}:
            return False
        start = end
    return True


def _close(x: float, y: float, tol: float) -> bool:
    if not (math.isfinite(x) and math.isfinite(y)):
        return x == y
    return abs(x - y) <= tol * max(1.0, abs(x), abs(y))


def _same_lists(results: Any, other: Any) -> bool:
    """One list per question in each, each pair the same ranking up to ties (``rankings_agree``)."""
    return len(results) == len(other) and all(
        rankings_agree([(h.passage.id, h.score) for h in x], [(h.passage.id, h.score) for h in y])
        for x, y in zip(results, other))


# ------------------------------------------------------------------------------------------ rerankers
#
# The same for rerankers (``berds.rerank.base.Reranker``)::
#
#     from berds.testing import assert_reranker_contract
#
#     def test_my_reranker():
#         assert_reranker_contract("my_pkg.rerank:MyReranker", options={"encoder": my_encoder})
#
# and ``berds check-reranker NAME -o key=value``. The run it reranks: the three tiny questions, each with all
# twelve tiny passages scored by word overlap with the question (best first, ties by id).
#
# =====================  ======================================================================
# builds                 the factory returns an object with ``name`` and ``rerank``
# name                   ``name`` is a non-empty string
# contract               a ``Run`` with the same questions in the same order; each question's passages
#                        come from its input list, texts unchanged, none more often than the input has it;
#                        finite scores that do not increase down the list
# provenance             ``manifest["rerank"]["method"]`` names the method; ``manifest["input_run"]`` is there
# input intact           the input run is unchanged afterwards
# deterministic          the same call twice gives the same lists
# empty run              a run without questions gives a run without questions
# one by one (warning)   reranking one question alone gives its list from the whole run (not so for
#                        rerankers that look across questions, e.g. the ``dataset-max`` normalisation)
# keeps passages (warn)  every input passage is still in the output (a reranker may cut on purpose)
# =====================  ======================================================================


_INPUT_CHANGED = ("rerank changed the run it was given (its hits, questions or manifest): build new lists and a new "
                  "manifest dict instead")


def tiny_run() -> Any:
    """The run ``check_reranker`` reranks (see the table above)."""
    import re

    from berds.types import Hit, Run

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z]+", text.lower()))

    hits = []
    for q in TINY_QUESTIONS:
        scored = [Hit(p, float(len(words(q.text) & words(p.title + " " + p.text)))) for p in TINY_PASSAGES]
        hits.append(sorted(scored, key=lambda h: (-h.score, h.passage.id)))
    return Run.from_lists(list(TINY_QUESTIONS), hits, manifest={"retriever": {"name": "word-overlap"}}, name="tiny")


def check_reranker(reranker: Any, *, options: dict[str, Any] | None = None) -> ContractReport:
    """Check ``reranker`` (a name, ``module:attr``, class, or instance) against the reranker contract;
    ``options`` go to its factory. Returns a ``ContractReport``; nothing is raised for a broken reranker."""
    from berds.rerank.catalogue import load_reranker
    from berds.types import Run

    label = reranker if isinstance(reranker, str) else getattr(reranker, "name", None) or type(reranker).__name__
    report = ContractReport(str(label), kind="reranker")
    add = report.checks.append
    try:
        if hasattr(reranker, "rerank") and not inspect.isclass(reranker):
            built = load_reranker(reranker)
        elif not isinstance(reranker, str):
            built = reranker(**dict(options or {}))
        else:
            built = load_reranker(reranker, **dict(options or {}))
    except Exception as exc:  # a plug-in's own bug or a bad option: report it
        add(Check("builds", "fail", f"{type(exc).__name__}: {exc}" if not isinstance(exc, BerdsError) else str(exc)))
        return report
    if not isinstance(getattr(built, "name", None), str) or not callable(getattr(built, "rerank", None)):
        add(Check("builds", "fail", f"got {type(built).__name__}, which lacks `name` or `rerank`"))
        return report
    add(Check("builds", "pass"))
    add(Check("name", "pass" if built.name.strip() else "fail", repr(built.name)))

    def call(run: Any) -> tuple[Any, str | None]:
        try:
            return built.rerank(run), None
        except Exception as exc:  # report a plug-in's exception as a failed check
            return None, f"rerank raised {type(exc).__name__}: {exc}"

    run = tiny_run()
    before = _input_signature(run)
    given = tiny_run()  # an untouched copy: a reranker that edits its input is judged against what it was given
    out, err = call(run)
    intact = _input_signature(run) == before
    problems = [err] if err else reranked_run_problems(given, out)
    add(Check("contract", "fail" if problems else "pass", "; ".join(problems[:4])))
    if problems:
        if not intact:
            add(Check("input intact", "fail", _INPUT_CHANGED))
        return report
    rerank_info = out.manifest.get("rerank") if isinstance(out.manifest, dict) or hasattr(out.manifest, "get") else None
    method = rerank_info.get("method") if isinstance(rerank_info, dict) else None
    ok = isinstance(method, str) and method.strip() and "input_run" in out.manifest
    add(Check("provenance", "pass" if ok else "fail",
              "" if ok else 'the output manifest needs "rerank": {"method": ...} and "input_run"'))
    add(Check("input intact", "pass" if intact else "fail", "" if intact else _INPUT_CHANGED))
    run = given  # the later calls get runs as made, whatever the first call did to its input
    again, err = call(tiny_run())
    same = err is None and _run_signature(again) == _run_signature(out)
    add(Check("deterministic", "pass" if same else "fail", err or ("" if same else "a second call gave other lists")))
    empty, err = call(Run({}, {}, {}, "empty"))
    ok = err is None and isinstance(empty, Run) and len(empty.questions) == 0
    add(Check("empty run", "pass" if ok else "fail", err or ("" if ok else "a run without questions must stay empty")))
    alone_ok = True
    for qid in run.questions:
        one, err = call(Run({qid: run.questions[qid]}, {qid: run.hits[qid]}, dict(run.manifest), "one"))
        if err or [h.passage.id for h in one.hits[qid]] != [h.passage.id for h in out.hits[qid]]:
            alone_ok = False
            break
    add(Check("one by one", "pass" if alone_ok else "warn",
              "" if alone_ok else "a question reranked alone is ordered differently than within the whole run"))
    kept = all({h.passage.id for h in out.hits[q]} == {h.passage.id for h in run.hits[q]} for q in run.questions)
    add(Check("keeps passages", "pass" if kept else "warn", "" if kept else "some input passages are not in the output"))
    return report


def check_provider(provider: Any, *, options: dict[str, Any] | None = None,
                   query: str = "Should cities build more bike lanes?", num: int = 3) -> ContractReport:
    """Check a search provider (a name, ``module:attr``, class or instance) against the provider contract
    (``berds.corpora.search``): it builds, has ``name``, ``search`` and a ``cache_params()`` dict, and
    ``search(query, num=num)`` returns at most ``num`` ``SearchResult`` s with addresses (http(s), else a
    warning), ranks from 1 in order (a warning otherwise), and ``num=1`` gives at most one. It searches for real:
    two calls to the provider's API. Nothing is raised for a broken provider."""
    from berds.corpora.search import SEARCH_PROVIDERS, provider_problems, search_result_problems

    label = provider if isinstance(provider, str) else getattr(provider, "name", None) or type(provider).__name__
    report = ContractReport(str(label), kind="search provider")
    add = report.checks.append
    try:
        if isinstance(provider, str):
            built = SEARCH_PROVIDERS.create(provider, **dict(options or {}))
        elif inspect.isclass(provider) or (callable(provider) and not hasattr(provider, "search")):
            built = provider(**dict(options or {}))
        else:
            built = provider
    except Exception as exc:  # a plug-in's own bug or a bad option: report it
        add(Check("builds", "fail", str(exc) if isinstance(exc, BerdsError) else f"{type(exc).__name__}: {exc}"))
        return report
    try:
        problems = provider_problems(built)
    except Exception as exc:  # cache_params() raised
        problems = [f"cache_params() raised {type(exc).__name__}: {exc}"]
    add(Check("builds", "fail" if problems else "pass", "; ".join(problems)))
    if problems:
        return report
    for n in (num, 1):
        try:
            results = built.search(query, num=n)
        except Exception as exc:  # (a BerdsError is the provider's own one-line refusal: its message is enough)
            add(Check(f"search num={n}", "fail", str(exc) if isinstance(exc, BerdsError)
                      else f"search raised {type(exc).__name__}: {exc}"))
            return report
        problems = search_result_problems(results, n)
        add(Check(f"search num={n}", "fail" if problems else "pass",
                  "; ".join(problems[:2]) or f"{len(results)} results"))
        if problems:
            return report
        if n == num:
            web = all(r.url.startswith(("http://", "https://")) for r in results)
            add(Check("addresses", "pass" if web else "warn",
                      "" if web else "some urls are not http(s): the fetcher records them as failed pages"))
            ranks = [r.rank for r in results] == list(range(1, len(results) + 1))
            add(Check("ranks", "pass" if ranks else "warn",
                      "" if ranks else f"ranks are {[r.rank for r in results][:5]}, expected 1, 2, ... in order"))
            if not results:
                add(Check("results", "warn", f"no results for {query!r}: a corpus built with it would be empty"))
    return report


def reranked_run_problems(before: Any, after: Any) -> list[str]:
    """What is wrong with ``after`` as a reranking of ``before`` (see ``berds.rerank.catalogue``)."""
    from berds.rerank.catalogue import reranked_run_problems as problems

    return problems(before, after)


def assert_reranker_contract(reranker: Any, **kwargs: Any) -> ContractReport:
    """``check_reranker`` that raises ``AssertionError`` listing every failed check (for pytest)."""
    report = check_reranker(reranker, **kwargs)
    if not report.ok:
        raise AssertionError(report.summary())
    return report


def _run_signature(run: Any) -> Any:
    return [(qid, [(h.passage.id, h.passage.text, float(h.score)) for h in run.hits[qid]]) for qid in run.questions]


def _input_signature(run: Any) -> Any:
    """What a reranker must leave as it found it: questions, ranked passages and scores, and the manifest
    (a plain dict, so a reranker can write into the caller's run by mistake)."""
    import json

    return ([(qid, run.questions[qid], [(h.passage, float(h.score)) for h in run.hits[qid]]) for qid in run.questions],
            list(run.hits), json.dumps(run.manifest, sort_keys=True, default=repr))
