"""What a judge is: the ``Judge`` protocol, and ``LazyJudge``, which loads a model only when asked to judge.

A judge is any object with

* ``id``              — a stable identity: model, revision, adapter, answer parsing (keys the cache),
* ``prompt_version``  — the prompt wording's version id (keys the cache too),
* ``judge(pairs)``    — a list of ``Verdict`` for a list of ``JudgePair``, in order.

Judges know nothing of runs or metrics: they answer (perspective, passage) pairs. ``berds.evaluate``
turns runs into pairs, caches the answers and computes metrics.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

from berds.errors import BerdsError
from berds.types import JudgePair, Verdict


@runtime_checkable
class Judge(Protocol):
    id: str
    prompt_version: str

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        ...


JudgeFactory = Callable[[], Any]


def id_number(value: float, digits: int = 6) -> str:
    """A number as a judge id writes it: ``digits`` significant digits where they give the value back exactly (the
    ids written so far), else the shortest text that does. Two thresholds that agree to 6 digits must not share an
    id: a pair scored between them would be served the other threshold's cached label."""
    short = f"{value:.{digits}g}"
    return short if float(short) == float(value) else repr(float(value))


class LazyJudge:
    """A judge whose model loads on first use: cache lookups need only ``id`` and ``prompt_version``.

    Backends build their ``id`` without loading weights, so a fully cached evaluation never loads a model.
    """

    def __repr__(self) -> str:
        state = "loaded" if getattr(self, "_judge", None) is not None else "not loaded yet"
        recipe = getattr(self, "recipe", None)
        return f"LazyJudge({getattr(recipe, 'name', None) or 'judge'}, {state})"

    def __init__(self, factory: JudgeFactory, *, recipe: Any = None):
        self._factory = factory
        self._judge: Any = None
        # How a remote worker rebuilds this judge (``berds.judges.recipe.JudgeRecipe``): engines that run
        # the judge elsewhere build one instance per worker from it instead of pickling the model.
        self.recipe = recipe

    @property
    def inner(self) -> Any:
        if self._judge is None:
            self._judge = self._factory()
        return self._judge

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def prompt_version(self) -> str:
        return self.inner.prompt_version

    @property
    def batch_size(self) -> int:
        return int(getattr(self.inner, "batch_size", 64) or 64)

    def prepare(self) -> None:
        """Load the model now (see ``prepare_judge``)."""
        prepare_judge(self.inner)

    def judge(self, pairs):
        return self.inner.judge(pairs)


def prepare_judge(judge: Any) -> None:
    """Load ``judge``'s model before any progress is shown, so a model that cannot be had fails before the work
    starts (a judge may offer ``prepare()``; one that does not loads on its first batch, as before)."""
    prepare = getattr(judge, "prepare", None)
    if callable(prepare):
        prepare()


def check_verdicts(judge: Any, judge_id: str, pairs: Sequence[JudgePair], verdicts: Any) -> list[Verdict]:
    """What ``judge.judge(pairs)`` returned, checked before it reaches the cache: one ``Verdict`` per pair, in
    order, from a judge whose ``id`` is still ``judge_id`` (the id keys the cache: one that changes between calls
    would file the answers under ids no later evaluation asks for). ``judge`` None skips the id check (answers
    from an engine's worker, whose judge is checked where the batch comes back)."""
    if isinstance(verdicts, Iterator):  # a generator is a fine way to answer
        verdicts = list(verdicts)
    if not isinstance(verdicts, (list, tuple)) or len(verdicts) != len(pairs):
        got = f"{len(verdicts)} verdicts" if isinstance(verdicts, (list, tuple)) else f"a {type(verdicts).__name__}"
        raise BerdsError(f"judge {judge_id!r} returned {got} for {len(pairs)} pairs — judge(pairs) must return a "
                         "list of one berds.types.Verdict per pair, in the pairs' order")
    wrong = next((v for v in verdicts if not isinstance(v, Verdict)), None)
    if wrong is not None:
        raise BerdsError(f"judge {judge_id!r} returned a {type(wrong).__name__} ({wrong!r:.60}) where a "
                         "berds.types.Verdict was expected — wrap each answer: Verdict(label=True or False)")
    now = judge_id if judge is None else judge.id
    if now != judge_id:
        raise BerdsError(f"judge {judge_id!r} changed its id to {now!r} while judging — a judge's id must stay the "
                         "same (it keys the judgement cache): build it once, from the model and options only")
    return list(verdicts)
