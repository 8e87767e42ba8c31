"""What a judge is: the ``Judge`` protocol, and ``LazyJudge``, which loads a model only when asked to judge.

A judge is any object with

* ``id``              — a stable identity: model, revision, adapter, answer parsing (keys the cache),
* ``prompt_version``  — the prompt wording's version id (keys the cache too),
* ``judge(pairs)``    — a list of ``Verdict`` for a list of ``JudgePair``, in order.

Judges know nothing of runs or metrics: they answer (perspective, passage) pairs. ``berds.evaluate``
turns runs into pairs, caches the answers and computes metrics.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from berds.types import JudgePair, Verdict


@runtime_checkable
class Judge(Protocol):
    id: str
    prompt_version: str

    def judge(self, pairs: Sequence[JudgePair]) -> list[Verdict]:
        ...


JudgeFactory = Callable[[], Any]


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
