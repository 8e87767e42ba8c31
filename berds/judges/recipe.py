"""How a worker rebuilds a judge: ``JudgeRecipe`` (a judge name and options) and ``JudgeWorker``.

A judge model is never pickled and shipped to workers; an engine (``berds.engine``) sends the recipe and each
worker builds one judge from it, then answers batches of pairs with ``JudgeWorker.judge_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from berds.engine.recipes import Recipe
from berds.errors import BerdsError


@dataclass(frozen=True)
class JudgedBatch:
    """What a judge worker returns for one batch: the verdicts and the identity of the judge that gave
    them (the driver checks it matches its own before writing the cache)."""

    judge_id: str
    prompt_version: str
    verdicts: list[Any]
    # {repo: (option that pins it, commit)} of hub weights the worker loaded unpinned (the driver checks them
    # against the cache's record, as for a judge in its own process)
    weights: Mapping[str, tuple[str, str]] = field(default_factory=dict)


class JudgeWorker:
    """Holds one judge instance per worker (built from a name and options) and judges batches with it."""

    def __init__(self, *, name: str, options: Mapping[str, Any] | None = None):
        from berds.judges.catalogue import load_judge

        self.judge = load_judge(name, **dict(options or {}))
        self._weights: Mapping[str, tuple[str, str]] | None = None  # read once, after the first batch loaded them

    def judge_batch(self, pairs: Sequence[Any]) -> JudgedBatch:
        verdicts = list(self.judge.judge(list(pairs)))
        if self._weights is None:
            from berds.llm.shared import unpinned_hub_weights

            self._weights = unpinned_hub_weights(self.judge)
        return JudgedBatch(self.judge.id, self.judge.prompt_version, verdicts, self._weights)


@dataclass(frozen=True)
class JudgeRecipe:
    """A judge by name and options (what ``berds eval --judge NAME -o key=value`` gives), buildable anywhere."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))

    def recipe(self) -> Recipe:
        """The worker recipe: one ``JudgeWorker`` per worker, each batch through ``judge_batch``."""
        return Recipe("berds.judges.recipe:JudgeWorker", {"name": self.name, "options": dict(self.options)},
                      method="judge_batch", label=f"judge {self.name}", gpus=1.0 if self.needs_gpu() else 0.0)

    def needs_gpu(self) -> bool:
        """Whether one worker needs a GPU: a catalogue judge tagged ``gpu``, a ``vllm:`` model, or a
        ``device=cuda...`` option (checked without importing the judge)."""
        if str(self.options.get("device", "")).startswith("cuda"):
            return True
        prefix, sep, _ = self.name.partition(":")
        if sep and prefix == "vllm":
            return True
        from berds.judges.catalogue import JUDGES

        return self.name in JUDGES and "gpu" in JUDGES.spec(self.name).tags

    def build(self) -> Any:
        """The judge itself, in this process."""
        from berds.judges.catalogue import load_judge

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
