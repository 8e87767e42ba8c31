"""Question sets: the three BERDS sets by name, the shipped demo set, or any jsonl.

A question file is jsonl, one ``{"id", "question", "perspectives": [...]}`` per line (as the BERDS release
and ``shared/data/berds-dev`` ship them). ``load_questions(source, split=...)`` resolves ``source``:

1. an existing file path -> read it;
2. ``demo`` -> the demo benchmark shipped inside berds (``berds/data/demo/questions.jsonl``);
3. ``arguana`` / ``kialo`` / ``opinionqa`` -> ``$BERDS_DATA_DIR/{name}.{split}.jsonl`` when that file exists,
   else the berds home cache, else the public Hugging Face dataset repo (downloaded once into the cache).
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
    hf_repo: str
    hf_file: str  # "{split}" is replaced by the split name


# The BERDS release (timchen0618/berds) publishes each set as a jsonl per split. The repo and file names
# can be overridden with BERDS_HF_REPO / a local file when a mirror differs.
BERDS_SETS: dict[str, QuestionSetSpec] = {
    name: QuestionSetSpec(name, desc, "timchen0618/BERDS", f"{name}_{{split}}.jsonl")
    for name, desc in (
        ("arguana", "ArguAna debates: 2 perspectives per question"),
        ("kialo", "Kialo discussions: 2-4 perspectives per question"),
        ("opinionqa", "OpinionQA survey questions: 2 perspectives per question"),
    )
}


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
    from berds.lazy import require

    hub = require("huggingface_hub", extra="dense", purpose=f"downloading the BERDS {spec.name} set")
    repo = os.environ.get("BERDS_HF_REPO", spec.hf_repo)
    filename = spec.hf_file.format(split=split)
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        # Checked here, not left to the hub client: it reads the variable once, at import time.
        raise BerdsError(
            f"{spec.name} ({split}) is not available locally and HF_HUB_OFFLINE is set — download "
            f"{repo}/{filename} elsewhere and pass its path, or put it at $BERDS_DATA_DIR/{spec.name}.{split}.jsonl"
        )
    try:
        local = hub.hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset")
    except Exception as exc:  # the hub client raises many kinds; all mean "not reachable / not there"
        raise BerdsError(
            f"could not fetch {spec.name} ({split}) from the Hugging Face dataset {repo}/{filename}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} — download the jsonl yourself and pass its "
            f"path, or put it at $BERDS_DATA_DIR/{spec.name}.{split}.jsonl"
        ) from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    from berds.io import atomic_write

    with open(local, "rb") as src, atomic_write(dest, "wb") as out:
        out.write(src.read())
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
