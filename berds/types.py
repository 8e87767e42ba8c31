"""The data model every part of berds speaks.

* ``Question``  — a contentious question and its gold perspectives (BERDS: 2, up to 4 for kialo).
* ``Passage``   — a retrievable unit of text (a 100-word passage) with an optional title and source.
* ``Hit``       — a passage retrieved for a question, with the retriever's score.
* ``Run``       — the ranked hits of one retriever for a set of questions, plus provenance (manifest).
* ``JudgePair`` — one (perspective, passage text) pair put to a perspective judge.
* ``Verdict``   — what a judge said about one pair: label, P(Yes) when known, raw output.
* ``Judgement`` — a verdict placed in a run: which question, passage and perspective it is about.

Ids are always strings. All types are frozen dataclasses; constructors validate their fields and raise
``ValueError`` with the field name, so bad records are caught at the boundary where they enter.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence


def _check_str(value: Any, name: str, *, allow_empty: bool = False) -> None:
    if type(value) is str and (allow_empty or value.strip()):  # the common case, checked first (hot on run loading)
        return
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty")


@dataclass(frozen=True)
class Question:
    """A question with its gold perspectives (each a short statement a passage may support).

    ``perspectives`` is empty for sets without gold perspectives (DELPHI): such questions can be retrieved
    for, and the commands that need gold perspectives refuse them (``berds.questions.require_gold``).
    ``extra`` keeps a set's other fields (DELPHI's controversy label); it takes no part in equality.
    """

    id: str
    text: str
    perspectives: tuple[str, ...]
    dataset: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        _check_str(self.id, "question id")
        _check_str(self.text, "question text")
        if isinstance(self.perspectives, str) or not isinstance(self.perspectives, (list, tuple)):
            raise ValueError("perspectives must be a list of strings")
        object.__setattr__(self, "perspectives", tuple(self.perspectives))
        for i, p in enumerate(self.perspectives):
            _check_str(p, f"perspectives[{i}]")


@dataclass(frozen=True)
class Passage:
    """A retrievable passage. ``source`` is the url or id of the document it was cut from.

    ``title_field`` is False only for a passage read from a record with no ``title`` field at all: the
    study's judge saw ``text + " " + title`` whenever the field existed, even empty.
    """

    id: str
    text: str
    title: str = ""
    source: str = ""
    title_field: bool = field(default=True, compare=False)

    # Written out rather than generated: a frozen dataclass's __init__ sets each field through
    # object.__setattr__, which made building passages (100 per question on every search, one per stored
    # passage) a third of the store's write time. @dataclass keeps an __init__ defined in the class body.
    def __init__(self, id: str, text: str, title: str = "", source: str = "", title_field: bool = True) -> None:
        d = self.__dict__
        d["id"], d["text"], d["title"], d["source"], d["title_field"] = id, text, title, source, title_field
        # One test for the usual case (every field a str, a non-blank id): runs hold ~100 passages per question.
        if type(text) is str and type(title) is str and type(source) is str and type(id) is str and id.strip():
            return
        self.__post_init__()

    def __post_init__(self) -> None:
        _check_str(self.id, "passage id")
        _check_str(self.text, "passage text", allow_empty=True)
        _check_str(self.title, "passage title", allow_empty=True)
        _check_str(self.source, "passage source", allow_empty=True)

    def judge_text(self, title_position: str = "after") -> str:
        """The text shown to a perspective judge.

        The BERDS study gives the judge ``text + " " + title`` whenever the record has a title field, even
        an empty one (``title_position="after"``, the default and the study's behaviour; so an empty title
        leaves a trailing space). ``"before"`` puts the title first (``title + " " + text``, nothing added
        for an empty title), ``"none"`` drops it.
        """
        if title_position == "after" and self.title_field:
            return f"{self.text} {self.title}"
        if not self.title or title_position in ("none", "after"):
            return self.text
        if title_position == "before":
            return f"{self.title} {self.text}"
        raise ValueError(f"title_position must be 'after', 'before' or 'none', got {title_position!r}")

    @staticmethod
    def judge_texts(passages: "Iterable[Passage]", title_position: str = "after") -> list[str]:
        """``judge_text`` of many passages; the study's case (``after``) without a method call per passage."""
        if title_position == "after":
            return [f"{p.text} {p.title}" if p.title_field else p.text for p in passages]
        return [p.judge_text(title_position) for p in passages]

    @staticmethod
    def judge_text_digests(passages: "Iterable[Passage]", title_position: str = "after") -> list[bytes]:
        """The SHA-256 digest of each ``judge_text`` (what the judgement cache keys passages by), each text
        hashed as it is built: the study's case (``after``) without a list of 80k texts in between. Here, not in
        ``evaluate.cache``, because the run reader hashes while it reads (``runs.read_ctxs_jsonl(judge_digests=)``)."""
        sha256 = hashlib.sha256
        if title_position != "after":
            return [sha256(t.encode("utf-8")).digest() for t in Passage.judge_texts(passages, title_position)]
        return [sha256(f"{p.text} {p.title}".encode("utf-8") if p.title_field else p.text.encode("utf-8")).digest()
                for p in passages]


class InvalidScore(ValueError):
    """``Hit``'s refusal of a score that is not a number (or is NaN): a ValueError callers can tell apart from
    others (``berds.retrievers.retrieve`` names the plug-in that made it)."""


@dataclass(frozen=True)
class Hit:
    """A passage retrieved for a question. Rank is the position in ``Run.hits[qid]`` (1-based)."""

    passage: Passage
    score: float = 0.0

    def __init__(self, passage: Passage, score: float = 0.0) -> None:  # hand-written for speed, as Passage's
        d = self.__dict__
        d["passage"], d["score"] = passage, score
        if type(score) is not float or score != score:  # the usual case is a float that is not NaN
            self.__post_init__()

    def __post_init__(self) -> None:
        if isinstance(self.score, numbers.Real) and not isinstance(self.score, (int, float)):
            self.__dict__["score"] = float(self.score)  # a numpy scalar (float32 from FAISS or torch): a plain float
        if not isinstance(self.score, (int, float)) or isinstance(self.score, bool) or math.isnan(self.score):
            raise InvalidScore(f"score of passage {self.passage.id!r} must be a number, got {self.score!r}")


def plain_scores(scores: Sequence[float]) -> bool:
    """True when every score is a plain ``float`` and none is NaN (an engine's list, from ``.tolist()``): what
    ``Hit.__init__`` would accept unchanged, so hits with these scores may be made without calling it. Two C-level
    passes; a NaN, or inf and -inf together, sums to NaN and says False (``Hit``'s own check then)."""
    total = sum(scores) if set(map(type, scores)) <= {float} else math.nan
    return total == total


def hits_of(passages: Iterable[Passage], scores: Sequence[float]) -> list[Hit]:
    """``[Hit(p, s) for p, s in zip(passages, scores)]``. When every score is a plain float and none is NaN (an
    engine's list), the hits are made without a call to ``Hit.__init__`` each: a search makes 100 per question."""
    if plain_scores(scores):
        new = object.__new__
        out: list[Hit] = []
        add = out.append
        for passage, score in zip(passages, scores):
            hit = new(Hit)
            d = hit.__dict__
            d["passage"] = passage
            d["score"] = score
            add(hit)
        return out
    return [Hit(p, s) for p, s in zip(passages, scores)]


def rank_hits(hits: Iterable[Hit]) -> list[Hit]:
    """Order hits best first: by score descending, ties broken by passage id ascending (deterministic)."""
    return sorted(hits, key=lambda h: (-float(h.score), h.passage.id))


@dataclass(frozen=True)
class Run:
    """Ranked hits per question. ``questions`` and ``hits`` share keys, in the run's question order.

    ``hits[qid]`` is best first, exactly as the retriever (or the file) ranked it. ``manifest`` says what
    produced the run (retriever and options, corpus fingerprint, index, expansion/rerank provenance).
    """

    questions: Mapping[str, Question]
    hits: Mapping[str, Sequence[Hit]]
    manifest: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        missing = [qid for qid in self.questions if qid not in self.hits]
        extra = [qid for qid in self.hits if qid not in self.questions]
        if missing or extra:
            raise ValueError(
                f"run {self.name!r}: questions without hits {missing[:5]}, hits without questions {extra[:5]}"
            )
        for qid, q in self.questions.items():
            if q.id != qid:
                raise ValueError(f"run {self.name!r}: question stored under {qid!r} has id {q.id!r}")
        object.__setattr__(self, "hits", {qid: tuple(self.hits[qid]) for qid in self.questions})

    @classmethod
    def from_lists(
        cls,
        questions: Sequence[Question],
        hits: Sequence[Sequence[Hit]],
        *,
        manifest: Mapping[str, Any] | None = None,
        name: str = "",
    ) -> "Run":
        """Build a run from parallel lists (one list of ranked hits per question)."""
        if len(questions) != len(hits):
            raise ValueError(f"{len(questions)} questions but {len(hits)} hit lists")
        qs: dict[str, Question] = {}
        for q in questions:
            if q.id in qs:
                raise ValueError(f"duplicate question id {q.id!r}")
            qs[q.id] = q
        return cls(qs, {q.id: list(h) for q, h in zip(questions, hits)}, dict(manifest or {}), name)

    def top(self, qid: str, k: int | None = None) -> tuple[Hit, ...]:
        ranked = self.hits[qid]
        return tuple(ranked if k is None else ranked[:k])

    def __len__(self) -> int:
        return len(self.questions)

    def __repr__(self) -> str:  # short: the default printed every passage (14.7 million characters for 258x100)
        depth = [len(h) for h in self.hits.values()]
        return (f"Run(name={self.name!r}, questions={len(self)}, hits={sum(depth):,}, "
                f"depth={min(depth, default=0)}-{max(depth, default=0)}, empty={sum(d == 0 for d in depth)})")


@dataclass(frozen=True)
class JudgePair:
    """One pair put to a perspective judge: does ``passage`` support ``perspective``?

    ``passage`` is the exact text the judge sees (see ``Passage.judge_text``). ``question`` is context for
    reports only (labelled files carry it): verdicts are cached by (perspective, passage), and
    ``evaluate_run`` leaves it empty, so a judge must not let it change a verdict.
    """

    perspective: str
    passage: str
    question: str = ""


def _scalar(value: Any) -> Any:
    """The Python value of a 0-d numpy or torch array or scalar (``torch.tensor(0.7) > 0.5``), else ``value``."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "shape", None) == () else value


@dataclass(frozen=True)
class Verdict:
    """A judge's answer for one pair. ``p_yes`` is P(Yes) when the backend exposes it.

    ``label`` must be a bool (numpy's or torch's 0-d bool and 0/1 are taken as one); ``p_yes`` a number in [0, 1] or None
    (NaN is taken as None); ``raw`` a string. Anything else raises ``ValueError``: a label of ``"No"`` would
    otherwise count as Yes.

    ``detail`` holds backend extras worth keeping (e.g. a debate transcript); it must be JSON-serialisable.
    """

    label: bool
    p_yes: float | None = None
    raw: str = ""
    detail: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        label, p = self.label, self.p_yes
        if type(label) is not bool:
            # a bool of numpy or torch (a comparison of scores) and 0/1 are unambiguous; anything else ("No", 0.7,
            # None) would be read by its truth value and count a No as a Yes
            value = _scalar(label)
            if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
                label = bool(value)
            else:
                raise ValueError(f"Verdict label must be True or False, got {label!r} ({type(label).__name__}): "
                                 "parse the judge's answer into a bool")
            self.__dict__["label"] = label
        if p is not None and (type(p) is not float or not 0.0 <= p <= 1.0):
            value = _scalar(p)
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and (
                    math.isnan(value) or 0.0 <= value <= 1.0):
                p = None if math.isnan(value) else float(value)  # NaN: unknown, as the cache stores it
            else:
                raise ValueError(f"Verdict p_yes must be a probability in [0, 1] or None, got {p!r}")
            self.__dict__["p_yes"] = p
        if not isinstance(self.raw, str):
            raise ValueError(f"Verdict raw must be the judge's answer as a string, got {type(self.raw).__name__}")


@dataclass(frozen=True)
class Judgement:
    """A verdict about one retrieved passage and one gold perspective of a question."""

    qid: str
    docid: str
    rank: int
    perspective_index: int
    label: bool
    p_yes: float | None = None
    raw: str = ""
