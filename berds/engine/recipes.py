"""Recipes: how a worker builds its model, sent to the worker instead of the model itself.

A model (a 7B judge, a dense encoder) is never pickled and shipped to workers: it is large, often holds
GPU memory, and may not pickle at all. Instead an engine sends a ``Recipe`` — an importable factory
name plus keyword options — and each worker builds **one** instance from it, once, then pushes every
batch it receives through one of that instance's methods::

    Recipe("berds.evaluate.embedded:MiniLMEncoder", {"model": "/models/minilm"}, method="encode")
    # worker:  fn = MiniLMEncoder(model="/models/minilm").encode ; out = fn(batch) for each batch

``Recipe.function("pkg.mod:fn", **kwargs)`` wraps a plain function instead (``fn(batch, **kwargs)``),
for work that loads nothing, such as cutting documents into passages.

``JudgeRecipe(name, options)`` is the recipe of a perspective judge loaded by name with
``berds.evaluate.judge.load_judge``; ``JudgeWorker`` is what runs on the worker.
"""

from __future__ import annotations

import functools
import json
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from berds.errors import BerdsError
from berds.registry import import_object


@dataclass(frozen=True)
class Recipe:
    """How a worker builds the callable that processes batches.

    * ``factory`` — ``"package.module:attr"`` of a class or function; called once per worker with
      ``options`` as keyword arguments to build the worker's object.
    * ``method``  — the object's method each batch goes through (``obj.method(batch)``); ``None`` calls
      the object itself (``obj(batch)``).
    * ``label``   — a short name for progress bars and error messages.
    * ``gpus``    — GPUs one worker needs for this model (a hint: a distributed engine reserves that many
      per worker unless it was told otherwise; 0 runs on CPUs).

    Options must be picklable (strings, numbers, paths, lists, dicts): they travel to every worker.
    """

    factory: str
    options: Mapping[str, Any] = field(default_factory=dict)
    method: str | None = None
    label: str = ""
    gpus: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.factory, str) or ":" not in self.factory:
            raise BerdsError(f"recipe factory must be a 'package.module:attr' string, got {self.factory!r}")
        object.__setattr__(self, "options", dict(self.options))
        if not self.label:
            object.__setattr__(self, "label", self.factory.rpartition(":")[2] + (f".{self.method}" if self.method else ""))

    @classmethod
    def function(cls, target: str, *, label: str = "", **kwargs: Any) -> "Recipe":
        """A recipe calling the plain function ``target`` on each batch: ``target(batch, **kwargs)``."""
        return cls("berds.engine.recipes:bind_function", {"target": target, "kwargs": kwargs},
                   label=label or target.rpartition(":")[2])

    def build(self) -> Callable[[Any], Any]:
        """Import the factory, build the worker's object and return the per-batch callable."""
        obj = import_object(self.factory)(**self.options)
        if self.method is None:
            if not callable(obj):
                raise BerdsError(f"recipe {self.label!r}: {self.factory} built a {type(obj).__name__}, "
                                 "which is not callable — name the method to call with method=")
            return obj
        fn = getattr(obj, self.method, None)
        if not callable(fn):
            raise BerdsError(f"recipe {self.label!r}: {type(obj).__name__} built by {self.factory} has no method {self.method!r}")
        return fn

    def key(self) -> str:
        """A stable text identity (two equal recipes build equal workers), used to reuse built workers."""
        return json.dumps([self.factory, self.options, self.method], sort_keys=True, default=repr)

    def check_picklable(self) -> None:
        """Fail early, on the driver, when options cannot travel to a worker."""
        try:
            pickle.dumps(self)
        except Exception as exc:  # pickle raises many types (PicklingError, TypeError, AttributeError)
            raise BerdsError(
                f"recipe {self.label!r} cannot be sent to workers: its options do not pickle ({type(exc).__name__}: {exc}) "
                "— pass paths and names in options, not loaded objects"
            ) from None


def bind_function(*, target: str, kwargs: Mapping[str, Any]) -> Callable[[Any], Any]:
    """``Recipe.function``'s factory: the function ``target`` with ``kwargs`` bound after the batch."""
    fn = import_object(target)
    return functools.partial(fn, **dict(kwargs)) if kwargs else fn


def split_documents_batch(documents: Sequence[Any], **options: Any) -> list[Any]:
    """Corpus building on an engine: a batch of ``Document`` -> the list of their passages, in order.

    Use it as ``Recipe.function("berds.engine.recipes:split_documents_batch", words_per_passage=100)``
    with ``ordered=True`` so the store is written in input order whatever the number of workers. The
    default passage ids (``"{doc_id}-{n}"``) depend only on the document, so they are the same on any
    worker; a corpus-wide counter (``DprCounterIds``) cannot be split across workers.
    """
    from berds.corpora.split import split_document

    out: list[Any] = []
    for doc in documents:
        out.extend(split_document(doc, **options))
    return out


# ------------------------------------------------------------------------------------------ judges


@dataclass(frozen=True)
class JudgedBatch:
    """What a judge worker returns for one batch: the verdicts and the identity of the judge that gave
    them (the driver checks it matches its own before writing the cache)."""

    judge_id: str
    prompt_version: str
    verdicts: list[Any]


class JudgeWorker:
    """Holds one judge instance per worker (built from a name and options) and judges batches with it."""

    def __init__(self, *, name: str, options: Mapping[str, Any] | None = None):
        from berds.evaluate.judge import load_judge

        self.judge = load_judge(name, **dict(options or {}))

    def judge_batch(self, pairs: Sequence[Any]) -> JudgedBatch:
        verdicts = list(self.judge.judge(list(pairs)))
        return JudgedBatch(self.judge.id, self.judge.prompt_version, verdicts)


@dataclass(frozen=True)
class JudgeRecipe:
    """A judge by name and options (what ``berds eval --judge NAME -o key=value`` gives), buildable anywhere."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))

    def recipe(self) -> Recipe:
        """The worker recipe: one ``JudgeWorker`` per worker, each batch through ``judge_batch``."""
        return Recipe("berds.engine.recipes:JudgeWorker", {"name": self.name, "options": dict(self.options)},
                      method="judge_batch", label=f"judge {self.name}", gpus=1.0 if self.needs_gpu() else 0.0)

    def needs_gpu(self) -> bool:
        """Whether one worker needs a GPU: a catalogue judge tagged ``gpu``, a ``vllm:`` model, or a
        ``device=cuda...`` option (checked without importing the judge)."""
        if str(self.options.get("device", "")).startswith("cuda"):
            return True
        prefix, sep, _ = self.name.partition(":")
        if sep and prefix == "vllm":
            return True
        from berds.evaluate.judge import JUDGES

        return self.name in JUDGES and "gpu" in JUDGES.spec(self.name).tags

    def build(self) -> Any:
        """The judge itself, in this process."""
        from berds.evaluate.judge import load_judge

        return load_judge(self.name, **dict(self.options))

    @classmethod
    def from_judge(cls, judge: Any) -> "JudgeRecipe":
        """The recipe a judge carries (``judge.recipe``, set by ``evaluate_paths`` for judges given by name)."""
        recipe = getattr(judge, "recipe", None)
        if isinstance(recipe, JudgeRecipe):
            return recipe
        if isinstance(recipe, Mapping) and isinstance(recipe.get("name"), str):
            return cls(recipe["name"], recipe.get("options") or {})
        raise BerdsError(
            f"a distributed engine rebuilds the judge on every worker from its name and options, but this "
            f"judge ({type(judge).__name__}) carries no recipe — give the judge by name "
            "(berds eval --judge NAME, or evaluate_paths(judge='NAME')), or pass "
            "judge_runner(recipe=JudgeRecipe('NAME', {...}))"
        )
