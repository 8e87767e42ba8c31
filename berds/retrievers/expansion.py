"""LLM query expansion: a wrapper that makes any retriever search with several perspectives per question.

The BERDS study's expansion baseline asks an LLM (GPT-4) to write diverse perspectives on the question
as a JSON object (its Table 12 prompt, shipped as ``berds/data/study_prompts/query-expansion.txt``),
searches with one query per perspective — ``question + " " + perspective_text``, as its released
expansion files record — and merges the ranked lists **round-robin in generation order**: rank 1 of every
perspective's list, then rank 2, ..., keeping the first ``k``.

The study's released code keeps a passage that two lists share each time it comes up (``merge=
"keep-duplicates"``, the default here, since it produced the published numbers); its paper says
duplicates are skipped (``merge="skip-duplicates"``). ``query="perspective"`` searches with the
perspective text alone (berds' earlier behaviour).

    from berds.retrievers.expansion import ExpandedRetriever, FileExpander
    base = load_retriever("bm25", index="indexes/wiki-bm25")
    retriever = ExpandedRetriever(base, FileExpander("kialo.dev.expansions.jsonl"))
    hits = retriever.search(questions, k=100)

Perspectives come from an ``Expander``: ``FileExpander`` reads precomputed ones (the study's released
files, one row per perspective, or berds' ``{"id", "question", "expansions": [{"name", "text"}]}`` per
question: see ``read_expansions_and_questions``), ``LLMExpander`` asks any
``berds.llm`` backend. LLM output is parsed tolerantly (code fences, prose around the JSON, trailing
commas, Python-style quotes, nested values); output with no usable perspective raises
``ExpansionParseError`` naming the question and showing the start of the output.

Merged hits are re-scored ``n − position`` (n hits), so a merged list satisfies the retriever contract
(scores decrease down the list) and TREC tools keep the round-robin order (a repeated passage is written
once to ``run.trec``, at its first position; ``run.ctxs.jsonl`` keeps every occurrence). The wrapped run
can be MMR-reranked like any other (``berds.rerank.mmr``).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

from berds.errors import BerdsError, InputError
from berds.llm import load_llm_by_name
from berds.types import Hit, Question

EXPANSION_SEP = "::exp"


@dataclass(frozen=True)
class Expansion:
    """One generated perspective: a short name and the text used as a query.

    ``standalone`` marks a query searched as it is, without the question in front: the question itself, which
    berds adds (``include_question``, ``on_error="question"``) and which is no perspective. Anything a model
    wrote or a file gives is searched as the study did, ``question + " " + text``, whatever its name and text
    (a file records the mark as ``"standalone": true``, so a recorded run replays the same queries).

    ``query`` is the query a file recorded for this perspective (the study's released one-row-per-perspective
    files give it as ``question``): searched as it is in the study's query form, since it is what the study
    searched even where it is not exactly ``question + " " + text`` (a few released rows repeat a quote
    after the question)."""

    name: str
    text: str
    standalone: bool = False
    query: str | None = None


class ExpansionParseError(BerdsError):
    """LLM output from which no perspective could be read."""


# ------------------------------------------------------------------------------------------- prompt


@dataclass(frozen=True)
class ExpansionPrompt:
    """A prompt asking for perspectives as JSON; ``version`` is recorded in run manifests.

    A template with ``[Question]`` is the study's form (the question substituted, nothing else); one
    with ``{question}`` / ``{n}`` slots is a ``str.format`` template (berds' earlier paraphrase)."""

    version: str
    template: str

    @property
    def takes_n(self) -> bool:
        return "{n}" in self.template

    def render(self, question: str, n: int | None = None) -> list[dict[str, str]]:
        if "[Question]" in self.template:
            if n:
                raise BerdsError("the study's expansion prompt (Table 12) lets the model decide how many "
                                 "perspectives to write — drop n, or use prompt=paraphrase, which asks for n")
            return [{"role": "user", "content": self.template.replace("[Question]", question)}]
        how_many = f"{n} " if n else ""
        return [{"role": "user", "content": self.template.format(question=question, n=how_many)}]


def _study_expansion_text() -> str:
    path = Path(__file__).resolve().parent.parent / "data" / "study_prompts" / "query-expansion.txt"
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


# The study's own prompt (Table 12), byte for byte from its released code.
EXPANSION_PROMPT = ExpansionPrompt(version="berds-study-t12-expansion-v1", template=_study_expansion_text())

# berds' earlier wording (a paraphrase that also asks for short argued paragraphs and an optional count).
PARAPHRASE_EXPANSION_PROMPT = ExpansionPrompt(
    version="berds-t12-expansion-v1",
    template=(
        "Here is a question on which people disagree.\n\n"
        "Question: {question}\n\n"
        "Write {n}diverse perspectives on this question: different positions a person could hold, including "
        "opposing ones, not only the most common view. Write each perspective as a short paragraph (two or "
        "three sentences) that states the position and its main reason, so that it could be used to search "
        "for documents that argue for it.\n\n"
        "Answer with a single JSON object and nothing else. Each key is a short name for a perspective "
        "(words joined by underscores, e.g. \"Economic_Cost_Perspective\"), and each value is the text of "
        "that perspective."
    ),
)
EXPANSION_PROMPTS = {"study": EXPANSION_PROMPT, "paraphrase": PARAPHRASE_EXPANSION_PROMPT}
QUERY_FORMS = ("question+perspective", "perspective")
MERGES = ("keep-duplicates", "skip-duplicates")


def expansion_query(question: str, perspective: str, form: str = "question+perspective") -> str:
    """The query searched for one perspective: ``question + " " + perspective`` (the study) or the
    perspective alone."""
    if form == "question+perspective":
        return f"{question} {perspective}"
    if form == "perspective":
        return perspective
    raise BerdsError(f"unknown expansion query form {form!r}; use one of {', '.join(QUERY_FORMS)}")


# ------------------------------------------------------------------------------------------ parsing

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_SMART_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'"})
# Field names that hold a perspective's text / name when the model returns a list of objects.
_TEXT_KEYS = ("text", "perspective", "description", "content", "statement", "argument", "position", "summary",
              "query", "viewpoint", "claim", "value")
_NAME_KEYS = ("name", "title", "label", "perspective_name", "key", "id", "stance")
# Keys of a wrapper object around the perspectives ({"perspectives": [...]}).
_WRAPPER_KEYS = ("perspectives", "expansions", "viewpoints", "positions", "views", "queries", "arguments", "results",
                 "output", "answer", "response", "data")


def _candidates(text: str) -> Iterable[str]:
    """Pieces of ``text`` that may hold the JSON: fenced blocks first, then the whole text."""
    for match in _FENCE.finditer(text):
        body = match.group(2).strip()
        if body:
            yield body
    yield text


def _balanced_end(text: str, start: int) -> int | None:
    """Index of the bracket closing the one at ``start`` (quotes of either kind and escapes respected)."""
    pairs = {"{": "}", "[": "]"}
    stack: list[str] = []
    quote: str | None = None
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return i
        i += 1
    return None


def _decode_at(text: str, start: int) -> Any:
    """The JSON value starting at ``start``; failing that, the bracketed span repaired (trailing commas)
    or read as a Python literal (single quotes). None when nothing works."""
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except RecursionError:  # (a reply nested past the parser's depth: not a list of perspectives)
        return None
    except json.JSONDecodeError:
        pass
    end = _balanced_end(text, start)
    if end is None:
        return None
    body = text[start:end + 1]
    try:
        return json.loads(_TRAILING_COMMA.sub(r"\1", body))
    except RecursionError:
        return None
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _decode_first_value(text: str) -> Any:
    """The first JSON (or Python-literal) object or array in ``text``, ignoring text around it."""
    for variant in dict.fromkeys((text, text.translate(_SMART_QUOTES))):
        for start, ch in enumerate(variant):
            if ch in "{[":
                value = _decode_at(variant, start)
                if isinstance(value, (dict, list)) and value:
                    return value
    return None


def _flatten_text(value: Any) -> str:
    """A perspective's text from a nested value: strings joined in order (lists, dicts, numbers)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Mapping):
        for key in _TEXT_KEYS:
            for k, v in value.items():
                if str(k).lower() == key and isinstance(v, str) and v.strip():
                    return v.strip()
        return " ".join(t for t in (_flatten_text(v) for v in value.values()) if t)
    if isinstance(value, (list, tuple)):
        return " ".join(t for t in (_flatten_text(v) for v in value) if t)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ""
    return ""


def _name_of(item: Mapping[str, Any]) -> str | None:
    for key in _NAME_KEYS:
        for k, v in item.items():
            if str(k).lower() == key and isinstance(v, str) and v.strip():
                return v.strip()
    return None


def _perspectives_from_value(value: Any) -> list[Expansion]:
    if isinstance(value, Mapping):
        # {"perspectives": [...]} and similar wrappers (only when that is all the object holds)
        if len(value) == 1:
            (key, inner), = value.items()
            if str(key).lower() in _WRAPPER_KEYS and isinstance(inner, (list, dict)):
                return _perspectives_from_value(inner)
        # one perspective given as {"name": ..., "text": ...}
        name = _name_of(value)
        text_keys = {k for k in value if str(k).lower() in _TEXT_KEYS and isinstance(value[k], str)}
        if name is not None and text_keys and len(value) <= 4:
            return [Expansion(name, _flatten_text(value))]
        # {name: text or nested value, ...}
        return [Expansion(str(k).strip(), _flatten_text(v)) for k, v in value.items()]
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value, start=1):
            if isinstance(item, str):
                out.append(Expansion(f"perspective_{i}", item.strip()))
            elif isinstance(item, Mapping):
                name = _name_of(item)
                if name is None and len(item) == 1:  # [{"Name": "text"}, ...]
                    (key, inner), = item.items()
                    out.append(Expansion(str(key).strip(), _flatten_text(inner)))
                else:
                    rest = {k: v for k, v in item.items() if str(k).lower() not in _NAME_KEYS} or item
                    out.append(Expansion(name or f"perspective_{i}", _flatten_text(rest)))
            else:
                out.append(Expansion(f"perspective_{i}", _flatten_text(item)))
        return out
    return []


def parse_expansions(output: str, *, qid: str | None = None) -> list[Expansion]:
    """Perspectives from an LLM's answer, in generation order; empty texts and repeated texts are dropped.

    Accepts a JSON object ``{name: text}`` (the prompt's format), a list of strings or of
    ``{"name", "text"}``-like objects, a wrapper such as ``{"perspectives": [...]}``, nested values
    (their strings are joined), code fences, text before/after the JSON, trailing commas and Python-style
    single quotes. Raises ``ExpansionParseError`` when nothing usable is there.
    """
    where = f"question {qid!r}: " if qid else ""
    shown = output.strip().replace("\n", " ")
    shown = (shown[:200] + "…") if len(shown) > 200 else shown
    fix = ("use a stronger model (an answer longer than the expander's 1,024 new tokens is cut off; in Python, "
           "LLMExpander(max_new_tokens=...) sets it — it is no --llm-option), or pass precomputed perspectives "
           "with --expand file --expansions FILE")
    if not output.strip():
        raise ExpansionParseError(f"{where}the LLM returned no text for query expansion — {fix}")
    value = None
    for candidate in _candidates(output):
        value = _decode_first_value(candidate)
        if value is not None:
            break
    if value is None:
        raise ExpansionParseError(
            f"{where}no JSON object or list of perspectives in the LLM output (it began: {shown!r}) — {fix}")
    seen: set[str] = set()
    found = []
    for exp in _perspectives_from_value(value):
        key = " ".join(exp.text.split()).lower()
        if exp.text and key not in seen:
            seen.add(key)
            found.append(Expansion(exp.name or f"perspective_{len(found) + 1}", exp.text))
    if not found:
        raise ExpansionParseError(
            f"{where}the LLM output holds JSON but no perspective text in it (it began: {shown!r}) — {fix}")
    return found


# -------------------------------------------------------------------------------------------- files


def read_expansions(path: str | Path) -> dict[str, list[Expansion]]:
    """``qid -> [Expansion]`` from a jsonl of ``{"id", "question", "expansions": [{"name", "text"}]}``."""
    return read_expansions_and_questions(path)[0]


def read_expansions_and_questions(path: str | Path) -> tuple[dict[str, list[Expansion]], dict[str, str]]:
    """``read_expansions`` and, for records that give one, ``qid -> question text`` (to check the pairing).

    Two shapes are read: berds' per-question ``{"id", "question", "expansions": [{"name", "text"}]}`` and the
    study's released files (``query_exp/data/*_query_exp.*.jsonl``), one row per perspective: ``org_id`` and
    ``org_q`` (the question), ``perspective`` (the name), ``text`` (the perspective) and ``question`` (the
    query it searched). Released rows are grouped by ``org_q`` in file order, as the study's merge
    (``process_query_exp_data.py``) groups them, under the id ``org_id``."""
    from berds.io import iter_jsonl

    path = Path(path)
    out: dict[str, list[Expansion]] = {}
    texts: dict[str, str] = {}
    released: dict[str, str] = {}  # org_q -> the id its rows are grouped under
    for line, rec in iter_jsonl(path):
        if isinstance(rec, dict) and "org_q" in rec and "expansions" not in rec:
            _released_row(rec, path, line, out, texts, released)
            continue
        if released:
            raise InputError("mixes the study's one-row-per-perspective records with per-question ones", path=path,
                             line=line, fix="keep one shape per file")
        qid = rec.get("id")
        if qid is None:
            raise InputError("record has no 'id'", path=path, line=line,
                             fix='each line needs {"id", "question", "expansions": [{"name", "text"}]}, or the '
                                 'study\'s released rows {"org_id", "org_q", "perspective", "text", "question"}')
        qid = str(qid)
        items = rec.get("expansions")
        if not isinstance(items, list) or not items:
            raise InputError("'expansions' must be a non-empty list of {\"name\", \"text\"}", path=path, line=line,
                             record=qid)
        exps = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = {"name": f"perspective_{i + 1}", "text": item}
            text = item.get("text") if isinstance(item, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise InputError(f"expansions[{i}] has no 'text' string", path=path, line=line, record=qid)
            query = item.get("query") if isinstance(item, dict) else None
            if query is not None and not isinstance(query, str):
                raise InputError(f"expansions[{i}].query must be a string", path=path, line=line, record=qid)
            # the text as the file has it: the study queried question + " " + text, end spaces included
            exps.append(Expansion(str(item.get("name") or f"perspective_{i + 1}"), text,
                                  standalone=item.get("standalone") is True if isinstance(item, dict) else False,
                                  query=query))
        if qid in out:
            raise InputError("duplicate question id", path=path, line=line, record=qid)
        out[qid] = exps
        if isinstance(rec.get("question"), str) and rec["question"].strip():
            texts[qid] = rec["question"]
    if not out:
        raise InputError("holds no expansions", path=path)
    return out, texts


def _released_row(rec: dict[str, Any], path: Path, line: int, out: dict[str, list[Expansion]],
                  texts: dict[str, str], released: dict[str, str]) -> None:
    """One row of the study's released expansion files, added to its question's group (see above)."""
    if out and not released:
        raise InputError("mixes the study's one-row-per-perspective records with per-question ones", path=path,
                         line=line, fix="keep one shape per file")
    fields = {}
    for key in ("org_q", "text", "question"):
        value = rec.get(key)
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"the study's expansion row needs a non-empty '{key}' string", path=path, line=line,
                             fix='each row: {"org_id", "org_q", "perspective", "text", "question"} (the study\'s '
                                 "query_exp/data files)")
        fields[key] = value
    org_q = fields["org_q"]
    qid = released.get(org_q)
    if qid is None:
        qid = str(rec["org_id"]) if rec.get("org_id") not in (None, "") else org_q
        if qid in out:
            raise InputError(f"org_id {qid!r} is given to two questions (the other on an earlier line)",
                             path=path, line=line, record=qid)
        released[org_q] = qid
        out[qid] = []
        texts[qid] = org_q
    name = rec.get("perspective")
    out[qid].append(Expansion(str(name) if name not in (None, "") else f"perspective_{len(out[qid]) + 1}",
                              fields["text"], query=fields["question"]))


def expansion_record(e: Expansion) -> dict[str, Any]:
    """An expansion as a file holds it: ``{"name", "text"}`` (the study's format), plus ``"standalone": true``
    for a query searched without the question in front."""
    return {"name": e.name, "text": e.text, **({"standalone": True} if e.standalone else {}),
            **({"query": e.query} if e.query is not None else {})}


def write_expansions(path: str | Path, questions: Sequence[Question], expansions: Mapping[str, Sequence[Expansion]]) -> int:
    """Write expansions in the same jsonl format ``read_expansions`` reads (atomic)."""
    from berds.io import write_jsonl

    return write_jsonl(path, (
        {"id": q.id, "question": q.text, "expansions": [expansion_record(e) for e in expansions[q.id]]}
        for q in questions if q.id in expansions
    ))


# ---------------------------------------------------------------------------------------- expanders


class Expander(Protocol):
    """Where perspectives come from: ``expand(questions) -> {qid: [Expansion]}`` plus ``provenance()``."""

    def expand(self, questions: Sequence[Question]) -> dict[str, list[Expansion]]:
        ...

    def provenance(self) -> dict[str, Any]:
        ...


# What a user can do instead of a file that lacks some questions, in the commands that read one: `berds rerank
# xquad|pm2` and `berds study diversify` take --expansions or --llm; `berds retrieve` takes --expand file|llm.
LLM_INSTEAD = "or have an LLM write them: --llm BACKEND:MODEL in place of --expansions"
RETRIEVE_LLM_INSTEAD = "or have an LLM write them: --expand llm --llm BACKEND:MODEL in place of --expand file --expansions"


class FileExpander:
    """Precomputed perspectives from a jsonl file (e.g. the study's GPT-4 expansions).

    ``instead`` ends the fix of the error for questions the file lacks: the other source of perspectives in the
    caller's command (default: ``--llm``, as ``rerank xquad|pm2`` and ``study diversify`` take it)."""

    def __init__(self, path: str | Path, *, instead: str = LLM_INSTEAD):
        from berds.io import sha256_file

        self.instead = instead
        self.path = Path(path)
        self.expansions, self.question_texts = read_expansions_and_questions(self.path)
        self.sha256 = sha256_file(self.path)

    def expand(self, questions: Sequence[Question]) -> dict[str, list[Expansion]]:
        def plain(text: str) -> str:
            return " ".join(text.split()).casefold()

        # A question's record: the one with its id, unless that record names another question; then the one
        # that names this question (the study's released files key their rows by the question's text, org_q,
        # and their org_id need not be the id a question set gives). Two question sets that both number their
        # questions q0, q1, ... would otherwise mix silently.
        by_text: dict[str, str] = {}
        for key, text in self.question_texts.items():
            by_text.setdefault(plain(text), key)
        keys: dict[str, str] = {}
        for q in questions:
            given = self.question_texts.get(q.id)
            if q.id in self.expansions and (given is None or plain(given) == plain(q.text)):
                keys[q.id] = q.id
            elif plain(q.text) in by_text:
                keys[q.id] = by_text[plain(q.text)]
            elif given is not None:
                raise InputError(
                    f"the expansions for question {q.id!r} were written for another question: {given[:80]!r}, "
                    f"not {q.text[:80]!r}", path=self.path,
                    fix="use the expansions file written for this question set (ids are matched, then question texts)")
        missing = [q.id for q in questions if q.id not in keys]
        if missing:
            raise InputError(
                f"no expansions for {len(missing)} question(s), e.g. {', '.join(map(repr, missing[:3]))}",
                path=self.path, fix=f"use an expansions file written for this question set, {self.instead}",
            )
        return {q.id: list(self.expansions[keys[q.id]]) for q in questions}

    def provenance(self) -> dict[str, Any]:
        return {"source": "file", "path": str(self.path), "sha256": self.sha256}


class LLMExpander:
    """Perspectives written by an LLM (any ``berds.llm`` backend) with the study's expansion prompt.

    Greedy decoding. ``n`` asks for a fixed number of perspectives (default: the model decides).
    ``on_error="raise"`` (default) stops at the first answer with no usable perspective;
    ``"question"`` falls back to the question itself as the only query for that question and counts it.
    """

    ON_ERROR = ("raise", "question")

    def __init__(self, llm: Any, *, prompt: ExpansionPrompt | str = EXPANSION_PROMPT, n: int | None = None,
                 max_new_tokens: int = 1024, on_error: str = "raise", batch_size: int = 16):
        if on_error not in self.ON_ERROR:
            raise BerdsError(f"unknown on_error {on_error!r}; use one of {', '.join(self.ON_ERROR)}")
        if isinstance(prompt, str):
            if prompt not in EXPANSION_PROMPTS:
                raise BerdsError(f"unknown expansion prompt {prompt!r}; use one of {', '.join(EXPANSION_PROMPTS)}")
            prompt = EXPANSION_PROMPTS[prompt]
        if n and not prompt.takes_n:
            raise BerdsError("the study's expansion prompt (Table 12) lets the model decide how many perspectives "
                             "to write — drop n, or use prompt=paraphrase, which asks for n")
        self.llm = llm
        self.prompt = prompt
        self.n = n
        self.max_new_tokens = max_new_tokens
        self.on_error = on_error
        self.batch_size = batch_size
        self.fallbacks: list[str] = []
        self.raw: dict[str, str] = {}

    def expand(self, questions: Sequence[Question]) -> dict[str, list[Expansion]]:
        out: dict[str, list[Expansion]] = {}
        for lo in range(0, len(questions), self.batch_size):
            batch = list(questions[lo:lo + self.batch_size])
            generations = self.llm.generate([self.prompt.render(q.text, self.n) for q in batch],
                                            max_new_tokens=self.max_new_tokens, temperature=0.0)
            if len(generations) != len(batch):
                raise BerdsError(f"LLM {getattr(self.llm, 'id', '?')!r} returned {len(generations)} answers for "
                                 f"{len(batch)} prompts")
            for q, gen in zip(batch, generations):
                self.raw[q.id] = gen.text
                try:
                    out[q.id] = parse_expansions(gen.text, qid=q.id)
                except ExpansionParseError:
                    if self.on_error == "raise":
                        raise
                    self.fallbacks.append(q.id)
                    out[q.id] = [Expansion("question", q.text, standalone=True)]
        return out

    def provenance(self) -> dict[str, Any]:
        return {"source": "llm", "llm": getattr(self.llm, "id", type(self.llm).__name__),
                "prompt_version": self.prompt.version, "n": self.n, "max_new_tokens": self.max_new_tokens,
                "on_error": self.on_error, "fallbacks": len(self.fallbacks)}


# ------------------------------------------------------------------------------------------ merging


def round_robin_merge(ranked_lists: Sequence[Sequence[Hit]], k: int, *, skip_duplicates: bool) -> list[Hit]:
    """Rank 1 of every list (in list order), then rank 2, ...; the first ``k`` kept.

    ``skip_duplicates`` (the paper's description) passes over passages already taken, so ``k`` distinct
    passages come back; without it (the study's released code, which berds follows by default) a passage two
    lists share is kept each time. It has no default: paper and code differ, and the caller says which.
    Lists may have different lengths (exhausted ones are passed over). Returned hits are the input ``Hit``
    objects.
    """
    if k < 1:
        return []
    merged: list[Hit] = []
    seen: set[str] = set()
    longest = max((len(h) for h in ranked_lists), default=0)
    for rank in range(longest):
        for hits in ranked_lists:
            if rank < len(hits):
                hit = hits[rank]
                if not skip_duplicates or hit.passage.id not in seen:
                    seen.add(hit.passage.id)
                    merged.append(hit)
                    if len(merged) == k:
                        return merged
    return merged


def rescore_by_position(hits: Sequence[Hit]) -> list[Hit]:
    """Scores ``n, n−1, ..., 1`` down the list, so the list order is the score order."""
    n = len(hits)
    return [Hit(h.passage, float(n - i)) for i, h in enumerate(hits)]


class ExpandedRetriever:
    """Any retriever, searched with one query per perspective and merged round-robin (see module doc).

    ``k_per_query`` is the depth retrieved for each perspective (default ``k``). ``query`` is
    ``question+perspective`` (the study, default) or ``perspective``; ``merge`` is ``keep-duplicates``
    (the study's code, default) or ``skip-duplicates`` (the paper). ``include_question``
    also searches with the question itself, placed first. ``record_to`` writes the perspectives used to a
    jsonl file (the format ``FileExpander`` reads) after each ``search`` call, so LLM expansions can be
    reused and inspected; records already in that file (a resumed run) are kept.
    """

    def __repr__(self) -> str:
        return f"ExpandedRetriever(name={self.name!r}, base={self.base!r})"

    def __init__(self, base: Any, expander: Expander, *, k_per_query: int | None = None, include_question: bool = False,
                 record_to: str | Path | None = None, query: str = "question+perspective",
                 merge: str = "keep-duplicates"):
        if not callable(getattr(base, "search", None)):
            raise BerdsError(f"{base!r} is not a retriever (it needs a search(questions, *, k) method)")
        expansion_query("", "", query)  # checks the name
        if merge not in MERGES:
            raise BerdsError(f"unknown expansion merge {merge!r}; use one of {', '.join(MERGES)}")
        self.query = query
        self.merge = merge
        self.allows_duplicates = merge == "keep-duplicates"
        self.base = base
        self.expander = expander
        self.k_per_query = k_per_query
        self.include_question = include_question
        self.record_to = Path(record_to) if record_to is not None else None
        self.name = f"{base.name}+expansion"
        self.used: dict[str, list[Expansion]] = {}
        self._records: dict[str, dict[str, Any]] = {}
        if self.record_to is not None and self.record_to.exists():
            # an interrupted run being resumed: keep the perspectives of the questions it already did
            from berds.io import iter_jsonl

            self._records = {str(rec.get("id")): rec for _, rec in iter_jsonl(self.record_to)}

    def search(self, questions: Sequence[Question], *, k: int) -> list[list[Hit]]:
        expansions = self.expander.expand(questions)
        queries: list[Question] = []
        spans: list[tuple[int, int]] = []
        for q in questions:
            exps = list(expansions[q.id])
            if self.include_question:
                exps = [Expansion("question", q.text, standalone=True)] + exps
            if not exps:
                raise BerdsError(f"question {q.id!r}: the expander gave no perspectives")
            self.used[q.id] = exps
            self._records[q.id] = {"id": q.id, "question": q.text,
                                   "expansions": [expansion_record(e) for e in exps]}
            start = len(queries)
            # the study's query for every perspective, even one named "question" whose text is the question
            # (it searched "Q Q" then); only the question berds adds itself is searched alone
            queries += [Question(f"{q.id}{EXPANSION_SEP}{i}",
                                 e.text if e.standalone else
                                 e.query if e.query is not None and self.query == "question+perspective" else
                                 expansion_query(q.text, e.text, self.query),
                                 q.perspectives, q.dataset)
                        for i, e in enumerate(exps)]
            spans.append((start, len(queries)))
        results = self.base.search(queries, k=self.k_per_query or k)
        if len(results) != len(queries):
            raise BerdsError(f"retriever {self.base.name!r} returned {len(results)} lists for {len(queries)} queries")
        skip = self.merge == "skip-duplicates"
        merged = [rescore_by_position(round_robin_merge(results[a:b], k, skip_duplicates=skip)) for a, b in spans]
        if self.record_to is not None:
            from berds.io import write_jsonl

            write_jsonl(self.record_to, self._records.values())
        return merged

    def provenance(self) -> dict[str, Any]:
        from berds.retrievers.base import provenance_of

        base = provenance_of(self.base)
        return {
            "base": {k: v for k, v in base.items() if k not in ("corpus", "index")},
            "corpus": base.get("corpus"),
            "index": base.get("index"),
            "expansion": {**self.expander.provenance(), "merge": f"round-robin in generation order, {self.merge}",
                          "query": self.query,
                          "k_per_query": self.k_per_query, "include_question": self.include_question,
                          "recorded_to": str(self.record_to) if self.record_to else None,
                          "score": "n - position after merging"},
        }

    def close(self) -> None:
        close = getattr(self.base, "close", None)
        if callable(close):
            close()


def expanded_retriever(
    *,
    base: str | Any,
    expand: str,
    base_options: Mapping[str, Any] | None = None,
    expansions: str | Path | None = None,
    llm: str | Any | None = None,
    llm_options: Mapping[str, Any] | None = None,
    n: int | None = None,
    k_per_query: int | None = None,
    include_question: bool = False,
    record_to: str | Path | None = None,
    on_error: str = "raise",
    query: str = "question+perspective",
    merge: str = "keep-duplicates",
    prompt: str = "study",
) -> ExpandedRetriever:
    """A factory for the retriever catalogue: ``base`` (a retriever name + ``base_options``, or an object)
    searched with perspectives from a file (``expand="file"``, ``expansions=PATH``) or an LLM
    (``expand="llm"``, ``llm="BACKEND:MODEL"``). All options are keywords, so ``retrieve`` records them in
    the run manifest and resumes an interrupted run only with the same ones."""
    if expand == "file":
        if expansions is None:
            raise BerdsError("--expand file needs --expansions FILE (a jsonl of {id, question, expansions})")
        if llm is not None or llm_options:  # an LLM that would not be asked anything
            raise BerdsError("--llm and --llm-option are for --expand llm; --expand file reads --expansions only")
        expander: Any = FileExpander(expansions, instead=RETRIEVE_LLM_INSTEAD)
    elif expand == "llm":
        if llm is None:
            raise BerdsError("--expand llm needs --llm BACKEND:MODEL (e.g. openai:gpt-4, transformers:/path)")
        if expansions is not None:  # a file that would not be read
            raise BerdsError("--expansions is for --expand file; --expand llm writes the perspectives with --llm")
        model = load_llm_by_name(llm, **dict(llm_options or {})) if isinstance(llm, str) else llm
        expander = LLMExpander(model, n=n, on_error=on_error, prompt=prompt)
    else:
        raise BerdsError(f"unknown --expand {expand!r}; use file or llm")
    if isinstance(base, str):
        from berds.retrievers.registry import load_retriever

        base_retriever = load_retriever(base, **dict(base_options or {}))
    else:
        if base_options:
            raise BerdsError("base_options cannot be applied to a retriever that is already built")
        base_retriever = base
    return ExpandedRetriever(base_retriever, expander, k_per_query=k_per_query, include_question=include_question,
                             record_to=record_to, query=query, merge=merge)


EXPANDED_FACTORY = "berds.retrievers.expansion:expanded_retriever"


def expansion_options(
    retriever: str,
    options: Mapping[str, Any],
    *,
    expand: str,
    expansions: str | Path | None = None,
    llm: str | None = None,
    llm_options: Mapping[str, Any] | None = None,
    record_to: str | Path | None = None,
    overwrite: bool = False,
    **extra: Any,
) -> tuple[str, dict[str, Any]]:
    """What ``berds retrieve --expand`` hands to ``retrieve``: the wrapper's factory and its options
    (the base retriever's name and options nested inside).

    ``record_to`` (where the perspectives used are written) is kept when ``retrieve`` will resume an
    interrupted run in that folder (its ``.partial.jsonl`` exists) and removed otherwise, so a fresh run
    never inherits another run's perspectives — but not from a finished run that ``retrieve`` will refuse to
    replace (no ``overwrite``): that run keeps the record of its perspectives.
    """
    if record_to is not None:
        from berds.retrievers.retrieve import PARTIAL

        record = Path(record_to)
        finished = (record.parent / "manifest.json").exists()
        if record.exists() and not (record.parent / PARTIAL).exists() and (overwrite or not finished):
            record.unlink()
    opts: dict[str, Any] = {"base": retriever, "base_options": dict(options), "expand": expand}
    if expansions is not None:
        opts["expansions"] = str(expansions)
    if llm is not None:
        opts["llm"] = llm
    if llm_options:
        opts["llm_options"] = dict(llm_options)
    if record_to is not None:
        opts["record_to"] = str(record_to)
    opts.update({k: v for k, v in extra.items() if v is not None})
    return EXPANDED_FACTORY, opts
