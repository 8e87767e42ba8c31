"""Recipes: how a worker builds its model, sent to the worker instead of the model itself.

A model (a 7B judge, a dense encoder) is never pickled and shipped to workers: it is large, often holds
GPU memory, and may not pickle at all. Instead an engine sends a ``Recipe`` — an importable factory
name plus keyword options — and each worker builds **one** instance from it, once, then pushes every
batch it receives through one of that instance's methods::

    Recipe("berds.indexes.embedding:ShardEncoder", {"spec": "minilm"}, method="encode_shard")
    # worker:  fn = MiniLMEncoder(model="/models/minilm").encode ; out = fn(batch) for each batch

``Recipe.function("pkg.mod:fn", **kwargs)`` wraps a plain function instead (``fn(batch, **kwargs)``),
for work that loads nothing, such as cutting documents into passages.

The engine knows nothing of what a recipe builds: judges (``berds.judges.recipe``), encoders
(``berds.indexes.embedding``) and passage splitting (``berds.corpora.split``) write their own recipes.
"""

from __future__ import annotations

import functools
import json
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

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
