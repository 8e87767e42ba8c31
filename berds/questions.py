"""Question sets: the three BERDS sets by name, the shipped demo set, or any jsonl.

A question file is jsonl, one ``{"id", "question", "perspectives": [...]}`` per line (as the BERDS release
and ``shared/data/berds-dev`` ship them). ``load_questions(source, split=...)`` resolves ``source``:

1. an existing file path -> read it;
2. ``demo`` -> the demo benchmark shipped inside berds (``berds/data/demo/questions.jsonl``);
3. ``arguana`` / ``kialo`` / ``opinionqa`` -> ``$BERDS_DATA_DIR/{name}.{split}.jsonl`` when that file exists,
   else the berds home cache, else the study's Hugging Face datasets ``timchen0618/Arguana``,
   ``timchen0618/Kialo``, ``timchen0618/OpinionQA`` (``datasets.load_dataset``; written once into the cache).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from berds.errors import BerdsError, InputError, UnknownNameError
from berds.io import home_dir, iter_jsonl
from berds.types import Question

DEMO_DIR = Path(__file__).parent / "data" / "demo"
SPLITS = ("dev", "test")


@dataclass(frozen=True)
class QuestionSetSpec:
    name: str
    description: str
    hf_repo: str  # a Hugging Face dataset, read with datasets.load_dataset(hf_repo, split=...)


# The BERDS release publishes each set as a Hugging Face dataset (the study's README: load_dataset). A
# mirror can be named with BERDS_HF_REPO_<NAME> (e.g. BERDS_HF_REPO_KIALO=me/Kialo), or the files put in
# $BERDS_DATA_DIR.
BERDS_SETS: dict[str, QuestionSetSpec] = {
    name: QuestionSetSpec(name, desc, repo)
    for name, repo, desc in (
        ("arguana", "timchen0618/Arguana", "ArguAna debates: 2 perspectives per question"),
        ("kialo", "timchen0618/Kialo", "Kialo discussions: 2-4 perspectives per question"),
        ("opinionqa", "timchen0618/OpinionQA", "OpinionQA survey questions: 2 perspectives per question"),
    )
}
EVALUATOR_ADAPTER = "timchen0618/Mistral_BERDS_evaluator"  # LoRA on EVALUATOR_BASE (berds.judges.catalogue)
EVALUATOR_BASE = "mistralai/Mistral-7B-Instruct-v0.2"


def hub_repo(spec: QuestionSetSpec) -> str:
    return os.environ.get(f"BERDS_HF_REPO_{spec.name.upper()}", spec.hf_repo)


def record_id(value: Any, *, what: str, path: Path | str, line: int, record: str | None = None) -> str:
    """An id read from a file as a string: JSON strings and integers only. A dict, list, float or bool
    would otherwise become its Python repr (``"{'a': 1}"``) and match nothing, silently."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise InputError(f"{what} must be a string or an integer, got {type(value).__name__} {shown}", path=path, line=line,
                     record=record)


def parse_question(rec: dict[str, Any], *, path: Path | str, line: int, dataset: str = "") -> Question:
    """One question record -> ``Question``; errors name the file, line and the missing/bad field."""
    qid = rec.get("id", rec.get("qid"))
    if qid is None:
        raise InputError("record has no 'id'", path=path, line=line, fix='each line needs {"id", "question", "perspectives"}')
    qid = record_id(qid, what="question 'id'", path=path, line=line)
    text = rec.get("question", rec.get("text", rec.get("query")))
    if not isinstance(text, str) or not text.strip():
        raise InputError("record has no 'question' text", path=path, line=line, record=str(qid))
    persp = rec.get("perspectives")
    if persp is None:
        raise InputError(
            "record has no 'perspectives'", path=path, line=line, record=str(qid),
            fix="add a list of perspective statements under 'perspectives'",
        )
    if isinstance(persp, str) or not isinstance(persp, list) or not persp:
        raise InputError("'perspectives' must be a non-empty list of strings", path=path, line=line, record=str(qid))
    try:
        return Question(str(qid), text, tuple(persp), dataset=str(rec.get("dataset", dataset) or dataset))
    except ValueError as exc:
        raise InputError(str(exc), path=path, line=line, record=str(qid)) from None


def read_questions(path: str | Path, *, dataset: str = "") -> list[Question]:
    """Read a question jsonl; duplicate ids are an error."""
    path = Path(path)
    dataset = dataset or path.name.split(".")[0]
    out: list[Question] = []
    seen: dict[str, int] = {}
    for line, rec in iter_jsonl(path):
        q = parse_question(rec, path=path, line=line, dataset=dataset)
        if q.id in seen:
            raise InputError(f"duplicate question id (first seen on line {seen[q.id]})", path=path, line=line, record=q.id)
        seen[q.id] = line
        out.append(q)
    if not out:
        raise InputError("holds no questions", path=path)
    return out


def _hub_download(spec: QuestionSetSpec, split: str, dest: Path) -> Path:
    """``datasets.load_dataset(repo, split=split)`` written once as jsonl to ``dest``. Rows without an
    ``id`` get ``{name}-{split}-{row number}``."""
    from berds.lazy import require

    repo = hub_repo(spec)
    fix = (f"download it elsewhere (datasets.load_dataset({repo!r}, split={split!r}).to_json(...)) and pass the "
           f"file's path, or put it at $BERDS_DATA_DIR/{spec.name}.{split}.jsonl")
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
               if os.environ.get(v, "").lower() in ("1", "true", "yes", "on")]
    if offline:
        # Checked here, not left to the hub client: it reads the variables once, at import time.
        raise BerdsError(f"{spec.name} ({split}) is not available locally and {offline[0]} is set — {fix}")
    datasets = require("datasets", extra="hub", purpose=f"downloading the BERDS {spec.name} set")
    try:
        rows = datasets.load_dataset(repo, split=split)
    except Exception as exc:  # the hub client raises many kinds; all mean "not reachable / not there"
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise BerdsError(f"could not load {spec.name} ({split}) from the Hugging Face dataset {repo}: "
                         f"{type(exc).__name__}: {first} — {fix}") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    from berds.io import write_jsonl

    write_jsonl(dest, ({**row, "id": row.get("id") if row.get("id") not in (None, "") else f"{spec.name}-{split}-{i}"}
                       for i, row in enumerate(rows)))
    return dest


def resolve_questions_path(source: str, split: str = "test") -> Path:
    """The local jsonl that ``source`` names (downloading a BERDS set once if needed)."""
    path = Path(source)
    if path.exists():
        return path
    if source == "demo":
        return DEMO_DIR / "questions.jsonl"
    if source not in BERDS_SETS:
        if any(ch in source for ch in "/\\.") :
            raise InputError("file not found", path=source, fix="pass an existing questions jsonl or a set name")
        raise UnknownNameError("question set", source, list(BERDS_SETS) + ["demo"])
    if split not in SPLITS:
        raise BerdsError(f"unknown split {split!r} for {source}; use one of {', '.join(SPLITS)}")
    candidates = []
    if os.environ.get("BERDS_DATA_DIR"):
        candidates.append(Path(os.environ["BERDS_DATA_DIR"]) / f"{source}.{split}.jsonl")
    cached = home_dir() / "benchmarks" / f"{source}.{split}.jsonl"
    candidates.append(cached)
    for c in candidates:
        if c.exists():
            return c
    return _hub_download(BERDS_SETS[source], split, cached)


def load_questions(source: str | Path, split: str = "test", *, limit: int | None = None) -> list[Question]:
    """Questions from a path, ``demo``, or a BERDS set name (``arguana``/``kialo``/``opinionqa``)."""
    source = str(source)
    path = resolve_questions_path(source, split)
    dataset = source if (source in BERDS_SETS or source == "demo") else ""
    questions = read_questions(path, dataset=dataset)
    return questions[:limit] if limit else questions
