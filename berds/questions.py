"""Question sets: the three BERDS sets by name, the shipped demo set, or any jsonl.

A question file is jsonl, one ``{"id", "question", "perspectives": [...]}`` per line (as the BERDS release
and ``shared/data/berds-dev`` ship them). ``load_questions(source, split=...)`` resolves ``source``:

1. an existing file path -> read it;
2. ``demo`` -> the demo benchmark shipped inside berds (``berds/data/demo/questions.jsonl``);
3. ``arguana`` / ``kialo`` / ``opinionqa`` -> ``$BERDS_DATA_DIR/{name}.{split}.jsonl`` when that file exists,
   else the berds home cache, else the study's Hugging Face datasets ``timchen0618/Arguana``,
   ``timchen0618/Kialo``, ``timchen0618/OpinionQA`` (``datasets.load_dataset``; written once into the cache);
4. ``delphi`` / ``delphi-controversial`` -> the DELPHI controversial-questions set (Sun et al.): a local
   ``$BERDS_DATA_DIR/delphi.{split}.jsonl``, ``delphi.jsonl`` or the release's tsv, else the home cache, else
   the release downloaded once (``read_delphi`` reads the release's tsv, whose question texts come from the
   Quora Question Pairs file as a second input, and jsonl/json/csv). DELPHI has no gold perspectives.

Gold perspectives: ``berds eval``, ``berds analyze``/``report``, ``berds tune`` and ``berds answers eval
--metric pd`` need them and refuse questions without (``load_questions(..., require_perspectives=True)``,
the default); ``berds retrieve``, ``berds rerank``, ``berds corpus build search`` and ``berds answers eval
--metric da`` do not
(``GOLD_FREE_COMMANDS``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError, InputError, UnknownNameError
from berds.io import check_text_size, home_dir, iter_jsonl, text_limit
from berds.types import Question

DEMO_DIR = Path(__file__).parent / "data" / "demo"
SPLITS = ("dev", "test")
DELPHI_SETS = {"delphi": "DELPHI (Sun et al.): Quora questions with human controversy labels; no gold perspectives",
               "delphi-controversial": "DELPHI, only the questions labelled controversial"}


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


# berds' split names and what `datasets` may call the same split (its file-name rule maps "dev" to "validation")
HUB_SPLIT_NAMES = {"dev": ("dev", "validation"), "test": ("test",)}


def hub_repo(spec: QuestionSetSpec) -> str:
    return os.environ.get(f"BERDS_HF_REPO_{spec.name.upper()}", spec.hf_repo)


GOLD_FREE_COMMANDS = ("berds retrieve", "berds rerank", "berds corpus build search", "berds answers eval --metric da")
GOLD_COMMANDS = ("berds eval", "berds analyze", "berds report", "berds tune", "berds answers eval --metric pd",
                 "berds questions stats")
NO_GOLD_FIX = (f"{', '.join(GOLD_COMMANDS)} need gold perspectives; {', '.join(GOLD_FREE_COMMANDS)} work "
               "without (DELPHI questions have none)")


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


def parse_question(rec: dict[str, Any], *, path: Path | str, line: int, dataset: str = "",
                   require_perspectives: bool = True) -> Question:
    """One question record -> ``Question``; errors name the file, line and the missing/bad field.

    With ``require_perspectives=False`` a record without ``perspectives`` (or with an empty list) becomes a
    question without gold perspectives."""
    qid = rec.get("id", rec.get("qid"))
    if qid is None:
        raise InputError("record has no 'id'", path=path, line=line, fix='each line needs {"id", "question", "perspectives"}')
    qid = record_id(qid, what="question 'id'", path=path, line=line)
    if "question" not in rec and "title" in rec and "text" in rec and "perspectives" not in rec:
        # a corpus file (demo/corpus.jsonl) passed as --questions: its passages would become 300 questions
        raise InputError("looks like a passage (id, title, text), not a question", path=path, line=line,
                         record=str(qid), fix='pass a question set: each line {"id", "question", "perspectives"} '
                                              "(the demo's is berds/data/demo/questions.jsonl, or --questions demo)")
    text = rec.get("question", rec.get("text", rec.get("query")))
    if not isinstance(text, str) or not text.strip():
        raise InputError("record has no 'question' text", path=path, line=line, record=str(qid))
    limit = text_limit()
    check_text_size(text, limit, "the question", path=path, line=line, record=str(qid))
    persp = rec.get("perspectives")
    extra: dict[str, Any] = {}
    if persp is None and "partial_answers" in rec:  # a DebateQA record (its dataset/{test,dev}.jsonl)
        persp, extra = debateqa_perspectives(rec["partial_answers"], path=path, line=line, record=str(qid))
    if persp is None and not require_perspectives:
        persp = []
    if persp is None:
        raise InputError(
            "record has no 'perspectives'", path=path, line=line, record=str(qid),
            fix=f"add a list of perspective statements under 'perspectives' ({NO_GOLD_FIX})",
        )
    if isinstance(persp, str) or not isinstance(persp, list) or (not persp and require_perspectives):
        raise InputError("'perspectives' must be a non-empty list of strings", path=path, line=line, record=str(qid),
                         fix=None if persp else NO_GOLD_FIX)
    for i, perspective in enumerate(persp):
        if isinstance(perspective, str):
            check_text_size(perspective, limit, f"perspective {i}", path=path, line=line, record=str(qid))
    try:
        return Question(str(qid), text, tuple(persp), dataset=str(rec.get("dataset", dataset) or dataset),
                        **({"extra": extra} if extra else {}))
    except ValueError as exc:
        raise InputError(str(exc), path=path, line=line, record=str(qid)) from None


def debateqa_perspectives(partial_answers: Any, *, path: Path | str, line: int, record: str
                          ) -> tuple[list[str], dict[str, Any]]:
    """DebateQA's partial answers (``[{"point_of_view", "explanation"}]``) -> gold perspectives: each partial
    answer's text as DebateQA's P.D. scores it, ``f"{point_of_view}. {explanation}"`` (its eval_PD script; the
    paper's PA = concat(POV, Explan)); ``extra["points_of_view"]`` keeps the POVs alone."""
    if not isinstance(partial_answers, list) or not partial_answers:
        raise InputError("'partial_answers' must be a non-empty list of {\"point_of_view\", \"explanation\"}",
                         path=path, line=line, record=record)
    texts, povs = [], []
    for i, pa in enumerate(partial_answers):
        pov = pa.get("point_of_view") if isinstance(pa, dict) else None
        explanation = pa.get("explanation") if isinstance(pa, dict) else None
        if not isinstance(pov, str) or not pov.strip() or not isinstance(explanation, str):
            raise InputError(f"partial_answers[{i}] needs a 'point_of_view' string and an 'explanation' string",
                             path=path, line=line, record=record)
        texts.append(f"{pov}. {explanation}")
        povs.append(pov)
    return texts, {"points_of_view": povs}


def read_questions(path: str | Path, *, dataset: str = "", require_perspectives: bool = True) -> list[Question]:
    """Read a question jsonl; duplicate ids are an error."""
    path = Path(path)
    dataset = dataset or path.name.split(".")[0]
    out: list[Question] = []
    seen: dict[str, int] = {}
    for line, rec in iter_jsonl(path, what="a questions jsonl"):
        q = parse_question(rec, path=path, line=line, dataset=dataset, require_perspectives=require_perspectives)
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
    local = Path(repo).expanduser().is_dir()  # a copy of the dataset's repository on disk (a mirror's files)
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
               if os.environ.get(v, "").lower() in ("1", "true", "yes", "on")]
    if offline and not local:
        # Checked here, not left to the hub client: it reads the variables once, at import time.
        raise BerdsError(f"{spec.name} ({split}) is not available locally and {offline[0]} is set — {fix}")
    datasets = require("datasets", extra="hub", purpose=f"downloading the BERDS {spec.name} set")
    if not local:
        try:  # one request with a short timeout first: the loader retries an unreachable hub for half a minute
            import huggingface_hub

            huggingface_hub.dataset_info(repo, timeout=10)
        except ImportError:
            pass
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BerdsError(f"could not reach the Hugging Face dataset {repo} for {spec.name} ({split}): {first} — "
                             f"{fix}") from None
    # The study's hub repositories store {name}.dev.jsonl / {name}.test.jsonl with no split config, and
    # `datasets` names a file with "dev" in it "validation": berds' "dev" is read under either name.
    names = [split] + [other for other in HUB_SPLIT_NAMES.get(split, ()) if other != split]
    rows = None
    for i, name in enumerate(names):
        try:
            rows = datasets.load_dataset(str(Path(repo).expanduser()) if local else repo, split=name)
            break
        except Exception as exc:  # the hub client raises many kinds; all mean "not reachable / not there"
            first = str(exc).splitlines()[0] if str(exc) else ""
            if i + 1 < len(names) and "split" in first.lower():  # (an unknown split name: try the next spelling)
                continue
            tried = " or ".join(repr(n) for n in names)
            raise BerdsError(f"could not load {spec.name} ({split}, split {tried}) from the Hugging Face dataset "
                             f"{repo}: {type(exc).__name__}: {first} — {fix}") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    from berds.io import write_jsonl

    write_jsonl(dest, ({**row, "id": row.get("id") if row.get("id") not in (None, "") else f"{spec.name}-{split}-{i}"}
                       for i, row in enumerate(rows)))
    return dest


def resolve_questions_path(source: str, split: str = "test") -> Path:
    """The local jsonl that ``source`` names (downloading a BERDS set once if needed)."""
    path = Path(source)
    if source not in DELPHI_SETS and split not in SPLITS:
        raise BerdsError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if path.is_file() or source == "demo":  # (a folder that shares a set's name, ./demo, is not a question file)
        if split != "test":  # the default: said only when asked for something else
            from berds.io import print_note

            print_note(f"--split {split} does not apply to {source}: its questions are read as they are "
                       "(splits are for the named sets: arguana, kialo, opinionqa)")
        return path if path.is_file() else DEMO_DIR / "questions.jsonl"
    if source in DELPHI_SETS:
        return resolve_delphi_path(split)
    if source == "debateqa":
        return resolve_debateqa_path(split)
    if source not in BERDS_SETS:
        if path.is_dir():
            raise InputError("is a folder, expected a questions .jsonl file", path=source)
        if any(ch in source for ch in "/\\."):
            raise InputError("file not found", path=source, fix="pass an existing questions jsonl or a set name")
        raise UnknownNameError("question set", source, list(BERDS_SETS) + list(DELPHI_SETS) + ["demo", "debateqa"])
    candidates = []
    if os.environ.get("BERDS_DATA_DIR"):
        candidates.append(Path(os.environ["BERDS_DATA_DIR"]) / f"{source}.{split}.jsonl")
    cached = home_dir() / "benchmarks" / f"{source}.{split}.jsonl"
    candidates.append(cached)
    for c in candidates:
        if c.exists():
            return c
    return _hub_download(BERDS_SETS[source], split, cached)


def load_questions(source: str | Path, split: str = "test", *, limit: int | None = None,
                   require_perspectives: bool = True) -> list[Question]:
    """Questions from a path, ``demo``, a BERDS set name (``arguana``/``kialo``/``opinionqa``) or ``delphi``.

    ``require_perspectives`` (the default) refuses questions without gold perspectives, naming the commands
    that work without them; retrieval passes ``False``."""
    source = str(source)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        # 0 gave every question and -1 all but the last, silently
        raise BerdsError(f"--limit (limit=) must be a positive integer or None, got {limit!r}")
    path = resolve_questions_path(source, split)
    if source in DELPHI_SETS or _looks_like_delphi(path):
        # a .json/.csv set of one's own is read the same way but keeps its own name (it was labelled 'delphi')
        own = (source not in DELPHI_SETS and not path.name.lower().startswith("delphi")
               and path.name != DELPHI_RELEASE_NAME)
        questions = read_delphi(path, controversial_only=source == "delphi-controversial",
                                dataset=path.name.split(".")[0] if own else "delphi")
        if require_perspectives:
            require_gold(questions, source=str(path))
    else:
        dataset = source if (source in BERDS_SETS or source in ("demo", "debateqa")) else ""
        questions = read_questions(path, dataset=dataset, require_perspectives=require_perspectives)
    return questions[:limit] if limit else questions


DELPHI_RELEASE_NAME = "controversial_questions_annotated_id_removed.tsv"  # the release's file name


def _looks_like_delphi(path: Path) -> bool:
    return (path.name.lower().startswith("delphi") or path.name == DELPHI_RELEASE_NAME
            or path.suffix.lower() in (".csv", ".json", ".tsv"))


def require_gold(questions: Sequence[Question], *, source: str = "", purpose: str = "this command") -> None:
    """Refuse questions without gold perspectives, naming the first and the commands that work without."""
    missing = [q.id for q in questions if not q.perspectives]
    if missing:
        raise InputError(
            f"{len(missing)} of {len(questions)} questions have no gold perspectives and {purpose} needs them",
            path=source or None, record=missing[0], fix=NO_GOLD_FIX)


# ------------------------------------------------------------------------------------------- DELPHI

# The DELPHI release (github.com/apple/ml-delphi): one TSV, `qid  r1  r2  Controversial question` — the Quora
# Question Pairs question id, the two mean human ratings (r1: strong emotional reaction, r2: diverse and opposing
# opinions; 1 to 5) and the label — with no question text. The paper (Sun et al. 2023, Sec. 3) labels a question
# controversial when both mean ratings are >= 4.0 (which gives the release's label on every row); the text comes
# from the Quora Question Pairs data the qids index (Kaggle's train.csv or quora_duplicate_questions.tsv:
# id, qid1, qid2, question1, question2, is_duplicate), a second input: BERDS_DELPHI_QUESTIONS, or
# $BERDS_DATA_DIR/quora_duplicate_questions.tsv. Override the URL with BERDS_DELPHI_URL.
DELPHI_URL = ("https://raw.githubusercontent.com/apple/ml-delphi/main/dataset/"
              "controversial_questions_annotated_id_removed.tsv")
DELPHI_ID_KEYS = ("id", "qid", "question_id")
DELPHI_TEXT_KEYS = ("question", "question_text", "text", "query")
DELPHI_LABEL_KEYS = ("controversial", "is_controversial", "controversy_label", "controversy", "label",
                     "Controversial question")
DELPHI_RATINGS = ("r1", "r2")  # the release's mean ratings; controversial when both >= DELPHI_MIN_RATING
DELPHI_MIN_RATING = 4.0
QUORA_FILE_NAMES = ("quora_duplicate_questions.tsv", "train.csv")
_TRUE = {"1", "true", "yes", "y", "controversial", "highly controversial"}
_FALSE = {"0", "false", "no", "n", "non-controversial", "not controversial", "noncontroversial"}


def _first(rec: dict[str, Any], keys: Sequence[str]) -> tuple[str | None, Any]:
    for key in keys:
        if key in rec and rec[key] not in (None, ""):
            return key, rec[key]
    return None, None


def parse_controversy_label(value: Any) -> bool | None:
    """DELPHI's controversy label as a bool: booleans, 0/1, yes/no, (non-)controversial; None when unknown."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


def parse_delphi_record(rec: dict[str, Any], *, path: Path | str, line: int, dataset: str = "delphi",
                        question_texts: "QuoraQuestions | None" = None) -> Question:
    """A DELPHI record (field names as in the release or as berds writes them) -> ``Question``.

    ``extra`` gets ``controversial`` (bool, when the record has a label), ``answers`` (per-answer records
    with their perspectives, when given) and every other field as it is. A record with the release's
    ratings ``r1`` and ``r2`` is controversial when both are >= 4.0 (the paper's rule), its own label kept
    as ``release_label``; one without text takes it from ``question_texts`` (the Quora file, by qid)."""
    id_key, qid = _first(rec, DELPHI_ID_KEYS)
    if qid is None:
        raise InputError("record has no id", path=path, line=line, fix=f"give each record one of {', '.join(DELPHI_ID_KEYS)}")
    qid = record_id(qid, what=f"question {id_key!r}", path=path, line=line)
    text_key, text = _first(rec, DELPHI_TEXT_KEYS)
    if (not isinstance(text, str) or not text.strip()) and question_texts is not None:
        text_key, text = None, question_texts.get(str(qid))
        if text is None:
            raise InputError(f"Quora question id {qid} is not in the question-text file ({question_texts.source})",
                             path=path, line=line, record=str(qid),
                             fix="pass the Quora Question Pairs file the DELPHI qids index (Kaggle's train.csv or "
                                 "quora_duplicate_questions.tsv)")
    if not isinstance(text, str) or not text.strip():
        raise InputError("record has no question text", path=path, line=line, record=str(qid),
                         fix=f"give each record one of {', '.join(DELPHI_TEXT_KEYS)}" + (
                             "; the DELPHI release has none: set BERDS_DELPHI_QUESTIONS to the Quora Question Pairs "
                             "file (train.csv or quora_duplicate_questions.tsv), or put it in $BERDS_DATA_DIR"
                             if all(r in rec for r in DELPHI_RATINGS) else ""))
    extra: dict[str, Any] = {k: v for k, v in rec.items() if k not in (id_key, text_key, "perspectives", "answers")}
    label_key, label = _first(rec, DELPHI_LABEL_KEYS)
    if label_key is not None:
        parsed = parse_controversy_label(label)
        if parsed is None:
            raise InputError(f"controversy label {label!r} under {label_key!r} is not a yes/no value", path=path,
                             line=line, record=str(qid), fix="use true/false, 1/0 or controversial/non-controversial")
        extra.pop(label_key, None)
        extra["controversial"] = parsed
    if all(rec.get(r) not in (None, "") for r in DELPHI_RATINGS):
        # the release's ratings: the paper's rule decides (both means >= 4.0); the release's own label is kept
        ratings = []
        for r in DELPHI_RATINGS:
            try:
                ratings.append(float(rec[r]))
            except (TypeError, ValueError):
                raise InputError(f"rating {r}={rec[r]!r} is not a number", path=path, line=line, record=str(qid),
                                 fix="the DELPHI release gives r1 and r2 as mean ratings from 1 to 5") from None
        extra.update(dict(zip(DELPHI_RATINGS, ratings)))
        if "controversial" in extra:
            extra["release_label"] = extra["controversial"]
        extra["controversial"] = all(x >= DELPHI_MIN_RATING for x in ratings)
    answers = rec.get("answers")
    if answers is not None:
        if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
            raise InputError("'answers' must be a list of objects (an answer and its perspectives)", path=path,
                             line=line, record=str(qid))
        for i, a in enumerate(answers):
            persp = a.get("perspectives", [])
            if isinstance(persp, str) or not isinstance(persp, list) or not all(isinstance(p, str) for p in persp):
                raise InputError(f"answers[{i}].perspectives must be a list of strings", path=path, line=line,
                                 record=str(qid))
        extra["answers"] = answers
    gold = rec.get("perspectives") or []
    if isinstance(gold, str) or not isinstance(gold, list):
        raise InputError("'perspectives' must be a list of strings", path=path, line=line, record=str(qid))
    try:
        return Question(str(qid), text.strip(), tuple(gold), dataset=dataset, extra=extra)
    except ValueError as exc:
        raise InputError(str(exc), path=path, line=line, record=str(qid)) from None


def _delphi_records(path: Path) -> Any:
    """``(line, record)`` from a jsonl, a json array (or ``{"data": [...]}``) or a csv/tsv with a header row
    (the DELPHI release is a tsv)."""
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        import csv

        if not path.is_file():
            raise InputError("file not found", path=path)
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
            for row_number, row in enumerate(reader, start=2):
                yield row_number, {k: v for k, v in row.items() if k is not None}
        return
    if suffix == ".json":
        from berds.io import read_json

        data = read_json(path)
        data = data.get("data", data.get("questions")) if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise InputError("expected a JSON array of question records (or {\"data\": [...]})", path=path)
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise InputError(f"item {i} is not an object", path=path)
            yield i + 1, rec  # "line" = position in the array
        return
    yield from iter_jsonl(path, what="a questions jsonl")


class QuoraQuestions:
    """Question texts by Quora qid, from the Quora Question Pairs file the DELPHI qids index (Kaggle's
    ``train.csv`` or ``quora_duplicate_questions.tsv``: ``id, qid1, qid2, question1, question2,
    is_duplicate``). Read once, whole; ``get(qid)`` is the text (the first row that gives it)."""

    def __init__(self, path: str | Path):
        import csv
        import sys

        self.source = path = Path(path)
        if not path.is_file():
            raise InputError("file not found (the Quora Question Pairs file with the DELPHI question texts)",
                             path=path)
        csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # (a few Quora questions run long)
        self.texts: dict[str, str] = {}
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
            need = {"qid1", "qid2", "question1", "question2"}
            if not need <= set(reader.fieldnames or ()):
                raise InputError(f"expected the Quora Question Pairs header (id, qid1, qid2, question1, question2, "
                                 f"is_duplicate), got {reader.fieldnames!r:.120}", path=path, line=1)
            for row in reader:
                for qid, text in ((row["qid1"], row["question1"]), (row["qid2"], row["question2"])):
                    if qid and text and qid.strip() not in self.texts:
                        self.texts[qid.strip()] = text

    def get(self, qid: str) -> str | None:
        return self.texts.get(str(qid))


def delphi_question_texts() -> Path | None:
    """Where the DELPHI question texts are: ``$BERDS_DELPHI_QUESTIONS``, else a Quora Question Pairs file in
    ``$BERDS_DATA_DIR`` (``quora_duplicate_questions.tsv`` or ``train.csv``), else None."""
    if os.environ.get("BERDS_DELPHI_QUESTIONS"):
        return Path(os.environ["BERDS_DELPHI_QUESTIONS"])
    if os.environ.get("BERDS_DATA_DIR"):
        for name in QUORA_FILE_NAMES:
            if (Path(os.environ["BERDS_DATA_DIR"]) / name).is_file():
                return Path(os.environ["BERDS_DATA_DIR"]) / name
    return None


def read_delphi(path: str | Path, *, controversial_only: bool = False, dataset: str = "delphi",
                question_texts: str | Path | None = None) -> list[Question]:
    """Read DELPHI questions (the release's tsv, or jsonl, json, csv); ``controversial_only`` keeps those
    labelled controversial. ``question_texts``: the Quora Question Pairs file for records without text (the
    release has none; default ``delphi_question_texts()``, read only when such a record comes)."""
    path = Path(path)
    out: list[Question] = []
    seen: dict[str, int] = {}
    quora: QuoraQuestions | None = None
    for line, rec in _delphi_records(path):
        if quora is None and not _first(rec, DELPHI_TEXT_KEYS)[0]:
            where = question_texts if question_texts is not None else delphi_question_texts()
            if where is not None:
                quora = QuoraQuestions(where)
        q = parse_delphi_record(rec, path=path, line=line, dataset=dataset, question_texts=quora)
        if q.id in seen:
            raise InputError(f"duplicate question id (first on line {seen[q.id]})", path=path, line=line, record=q.id)
        seen[q.id] = line
        if controversial_only and "controversial" not in q.extra:
            raise InputError("record has no controversy label, so delphi-controversial cannot filter on it", path=path,
                             line=line, record=q.id, fix=f"label it under one of {', '.join(DELPHI_LABEL_KEYS)}")
        if not controversial_only or q.extra["controversial"]:
            out.append(q)
    if not out:
        raise InputError("holds no " + ("controversial " if controversial_only else "") + "questions", path=path)
    return out


def resolve_debateqa_path(split: str = "test") -> Path:
    """DebateQA (Xu et al.): ``$BERDS_DATA_DIR/debateqa.{split}.jsonl``, else ``$BERDS_DATA_DIR/debateqa/{split}.jsonl``
    (its repository's ``dataset/`` folder copied as it is: test.jsonl, 1,000 questions; dev.jsonl, 1,941)."""
    data_dir = os.environ.get("BERDS_DATA_DIR")
    candidates = ([Path(data_dir) / f"debateqa.{split}.jsonl", Path(data_dir) / "debateqa" / f"{split}.jsonl"]
                  if data_dir else [])
    for c in candidates:
        if c.is_file():
            return c
    raise BerdsError(f"DebateQA ({split}) is not available locally — put its {split}.jsonl (the dataset/ folder of "
                     f"github.com/pillowsofwind/DebateQA) at $BERDS_DATA_DIR/debateqa.{split}.jsonl, or pass its path")


def resolve_delphi_path(split: str = "test") -> Path:
    """``$BERDS_DATA_DIR/delphi.{split}.jsonl`` or ``delphi.jsonl``, the home cache, else one download."""
    candidates = []
    if os.environ.get("BERDS_DATA_DIR"):
        data_dir = Path(os.environ["BERDS_DATA_DIR"])
        candidates += [data_dir / f"delphi.{split}.jsonl", data_dir / "delphi.jsonl", data_dir / DELPHI_RELEASE_NAME]
    url = os.environ.get("BERDS_DELPHI_URL", DELPHI_URL)
    suffix = Path(url.split("?")[0]).suffix.lower() if Path(url.split("?")[0]).suffix.lower() in (".csv", ".json", ".tsv") else ".jsonl"
    cached = home_dir() / "benchmarks" / f"delphi{suffix}"
    candidates.append(cached)
    for c in candidates:
        if c.exists():
            return c
    return download_delphi(url, cached)


def _why_not_fetched(exc: Exception, url: str) -> str:
    """A short reason: requests' own text nests urllib3's and was cut mid-word."""
    import requests
    from urllib.parse import urlsplit

    text, host = str(exc), urlsplit(url).netloc
    if isinstance(exc, requests.ConnectionError):
        if any(s in text for s in ("NameResolution", "Name or service not known", "getaddrinfo", "nodename")):
            return f"the host name {host} could not be resolved (no network or no DNS here?)"
        if "refused" in text:
            return f"connection refused by {host}"
    if isinstance(exc, requests.Timeout):
        return f"{host} did not answer in time"
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code} {exc.response.reason or ''}".rstrip()
    return f"{type(exc).__name__}: {text[:200]}"


def download_delphi(url: str, dest: Path) -> Path:
    """Fetch the DELPHI file once into ``dest`` (atomic); a clear error offline or when it fails."""
    where = "$BERDS_DATA_DIR/delphi.jsonl"
    if any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("BERDS_OFFLINE", "HF_HUB_OFFLINE")):
        raise BerdsError(f"DELPHI is not available locally and berds is offline (BERDS_OFFLINE/HF_HUB_OFFLINE) — "
                         f"download {url} elsewhere and pass its path, or put it at {where}")
    import requests

    try:
        response = requests.get(url, timeout=60)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise BerdsError(f"could not fetch DELPHI from {url}: {_why_not_fetched(exc, url)} — download "
                         f"the file from github.com/apple/ml-delphi yourself and pass its path, put it at {where}, "
                         "or set BERDS_DELPHI_URL") from None
    from berds.io import atomic_write

    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(dest, "wb", encoding=None) as out:
        out.write(response.content)
    return dest


# ------------------------------------------------------------------------------------ Table 1 statistics

STAT_TOKENIZERS = ("nltk", "nltk-line")


def word_counter(tokenizer: str = "nltk") -> Any:
    """Words of a perspective as the study's Table 1 counts them: NLTK's ``word_tokenize`` (``nltk``: it
    splits sentences first with NLTK's English punkt model, data one installs once with
    ``python -m nltk.downloader punkt_tab``), or ``nltk-line``: the same word tokenizer on the whole text as
    one sentence (no data needed; a full stop inside a perspective of several sentences stays on its word)."""
    if tokenizer not in STAT_TOKENIZERS:
        raise BerdsError(f"unknown tokenizer {tokenizer!r}; use one of {', '.join(STAT_TOKENIZERS)}")
    from berds.lazy import require

    nltk_tokenize = require("nltk.tokenize", extra="analysis", purpose="Table 1's word counts (NLTK word_tokenize)")
    if tokenizer == "nltk":
        import nltk

        try:
            nltk.data.find("tokenizers/punkt_tab/english/")
        except LookupError:
            raise BerdsError("NLTK's word_tokenize needs its punkt_tab data, which is not installed — run "
                             "`python -m nltk.downloader punkt_tab` once, or pass --tokenizer nltk-line (the same "
                             "word tokenizer, each perspective as one sentence)") from None
        return lambda text: len(nltk_tokenize.word_tokenize(text))
    return lambda text: len(nltk_tokenize.word_tokenize(text, preserve_line=True))


def question_set_statistics(sets: dict[str, dict[str, list[Question]]], *, tokenizer: str = "nltk"
                            ) -> list[dict[str, Any]]:
    """Table 1 of the study for ``{set name: {split: questions}}``: per set and over all, the number of
    questions (and per split), ``perspectives``: the mean number of perspectives per question, and ``words``:
    the mean number of words per perspective (``word_counter``); "all" weighs every question and every
    perspective alike (the study's All row: 2.28 and 13.84 from its three sets)."""
    count = word_counter(tokenizer)
    rows: list[dict[str, Any]] = []
    all_q = all_p = all_w = 0
    all_splits: dict[str, int] = {}
    for name, splits in sets.items():
        questions = [q for qs in splits.values() for q in qs]
        if not questions:
            raise BerdsError(f"{name}: no questions to count")
        perspectives = [p for q in questions for p in q.perspectives]
        words = sum(count(p) for p in perspectives)
        rows.append({"set": name, "questions": len(questions), "splits": {s: len(qs) for s, qs in splits.items()},
                     "perspectives": len(perspectives) / len(questions),
                     "words": words / len(perspectives) if perspectives else 0.0})
        all_q, all_p, all_w = all_q + len(questions), all_p + len(perspectives), all_w + words
        for s, qs in splits.items():
            all_splits[s] = all_splits.get(s, 0) + len(qs)
    if len(rows) > 1:
        rows.append({"set": "all", "questions": all_q, "splits": all_splits, "perspectives": all_p / all_q,
                     "words": all_w / all_p if all_p else 0.0})
    return rows
