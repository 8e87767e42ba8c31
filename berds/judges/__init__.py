"""Perspective judges: does this passage support this perspective? (Knows nothing of runs or metrics.)

* ``base``       — the ``Judge`` protocol and ``LazyJudge``;
* ``catalogue``  — ``JUDGES`` (``berds judges list``), ``load_judge``, ``check_judge_name``;
* ``prompts``    — the study's perspective-detection prompts, versioned;
* ``llm_judge``  — ``LLMJudge``: a prompt to any ``berds.llm`` backend, the reply parsed;
* ``embedded``   — the CPU judge; ``debate`` — a devil's-advocate wrapper; ``threshold`` — a calibrated
  P(Yes) threshold; ``demo_gold`` — the demo labels; ``recipe`` — how engine workers rebuild a judge.
"""

from berds.judges.base import Judge, LazyJudge
from berds.judges.catalogue import JUDGES, check_judge_name, load_judge
from berds.judges.llm_judge import LLMJudge, parse_answer

__all__ = ["JUDGES", "Judge", "LazyJudge", "LLMJudge", "check_judge_name", "load_judge", "parse_answer"]
