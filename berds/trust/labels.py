"""Human-labelled (document, perspective) pairs: the ground truth a perspective judge is checked against.

The file is the BERDS study's human-labelled format, tab-separated with a header row::

    question <TAB> id <TAB> document <TAB> perspective <TAB> label

``label`` is 1 when the document supports the perspective, else 0. Extra columns are kept (``extra``);
an optional ``stance`` column (``support``/``oppose``, also ``pro``/``con``, ``yes``/``no``, ``1``/``-1``)
says whether the perspective answers the question Yes or No — the stance analyses need it. Fields that
contain tabs, newlines or a leading double quote must be quoted CSV-style (as pandas' ``to_csv(sep="\\t")``
writes them). Every problem is reported with the file, the line and the fix.

When a file has no ``stance`` column, ``infer_stances`` offers one named, documented rule
(``negation-cue``): for a question with exactly two distinct perspectives, the one that carries a negation
("not", "no", "n't", "never", ...) while the other does not is ``oppose`` and the other ``support``
(the study's yes/no questions are phrased that way: "X leads to Y." / "X does not lead to Y.").
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from berds.errors import InputError
from berds.types import JudgePair

LABEL_COLUMNS = ("question", "id", "document", "perspective", "label")
STANCES = ("support", "oppose")
_STANCE_WORDS = {
    "support": "support", "supporting": "support", "pro": "support", "yes": "support", "1": "support", "+": "support",
    "+1": "support", "oppose": "oppose", "opposing": "oppose", "con": "oppose", "no": "oppose", "-1": "oppose",
    "-": "oppose",
}
_LABEL_WORDS = {"1": True, "0": False}
_NEGATION = re.compile(r"\b(not|no|never|none|nothing|neither|nor|cannot)\b|n't\b", re.IGNORECASE)


@dataclass(frozen=True)
class LabelledPair:
    """One human-labelled pair. ``line`` is the 1-based line of the record in its file (0 when built in code)."""

    question: str
    id: str
    document: str
    perspective: str
    label: bool
    stance: str | None = None
    line: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)

    def judge_pair(self) -> JudgePair:
        """The pair as a judge sees it (the document text exactly as labelled)."""
        return JudgePair(perspective=self.perspective, passage=self.document, question=self.question)


@dataclass(frozen=True)
class LabelledSet:
    """The pairs of one labelled file, in file order, with the file's SHA-256 (to record what was used)."""

    pairs: tuple[LabelledPair, ...]
    path: str = ""
    sha256: str = ""

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[LabelledPair]:
        return iter(self.pairs)

    def judge_pairs(self) -> list[JudgePair]:
        return [p.judge_pair() for p in self.pairs]

    @property
    def labels(self) -> np.ndarray:
        """Gold labels as a boolean array, in file order."""
        return np.array([p.label for p in self.pairs], dtype=bool)

    @property
    def stances(self) -> list[str | None]:
        return [p.stance for p in self.pairs]

    @property
    def positive_share(self) -> float:
        return float(self.labels.mean()) if self.pairs else float("nan")

    @property
    def questions(self) -> list[str]:
        """Distinct questions, in order of first appearance."""
        return list(dict.fromkeys(p.question for p in self.pairs))

    def subset(self, indices: Iterable[int]) -> "LabelledSet":
        return LabelledSet(tuple(self.pairs[i] for i in indices), self.path, self.sha256)

    def repeats(self) -> dict[str, Any]:
        """Pairs the file lists more than once: the same (perspective, document) the judge sees, whatever the
        question or id. ``{"repeated_rows": rows beyond each pair's first, "conflicting_pairs": pairs labelled
        both 0 and 1, "example_lines": the lines of the first conflicting (else repeated) pair}``. Every row still
        counts in every measure (a study's file may repeat pairs on purpose); the commands only say so."""
        lines: dict[tuple[str, str], list[LabelledPair]] = {}
        for p in self.pairs:
            lines.setdefault((p.perspective, p.document), []).append(p)
        repeated = [rows for rows in lines.values() if len(rows) > 1]
        conflicting = [rows for rows in repeated if len({p.label for p in rows}) > 1]
        example = (conflicting or repeated or [[]])[0]
        return {"repeated_rows": sum(len(rows) - 1 for rows in repeated), "conflicting_pairs": len(conflicting),
                "example_lines": [p.line for p in example]}

    def repeats_note(self) -> str | None:
        """One line for the commands to print when ``repeats`` found any (None when every pair is listed once)."""
        found = self.repeats()
        if not found["repeated_rows"]:
            return None
        conflict = (f", {found['conflicting_pairs']} of them labelled both 0 and 1" if found["conflicting_pairs"]
                    else "")
        return (f"note: {self.path or 'the labelled file'} lists {found['repeated_rows']} row(s) whose (perspective, "
                f"document) pair appears on an earlier line{conflict} (e.g. lines "
                f"{', '.join(map(str, found['example_lines']))}); every row is counted as it stands")

    def with_inferred_stances(self) -> "LabelledSet":
        """A copy where pairs without a stance get one from ``infer_stances`` (``negation-cue``) when it decides."""
        inferred = infer_stances(self.pairs)
        pairs = tuple(p if p.stance is not None else replace(p, stance=s) for p, s in zip(self.pairs, inferred))
        return LabelledSet(pairs, self.path, self.sha256)


def has_negation(text: str) -> bool:
    """True when ``text`` holds a negation word ("not", "no", "never", "n't", ...)."""
    return bool(_NEGATION.search(text))


def infer_stances(pairs: Sequence[LabelledPair]) -> list[str | None]:
    """The ``negation-cue`` stance rule (see the module docstring); None where it cannot decide.

    Per question: exactly two distinct perspectives, exactly one of them negated -> that one is
    ``oppose``, the other ``support``. Questions with one, three or more perspectives, or with both/neither
    negated, get None (their rows are left out of stance analyses, and the reports say how many).
    """
    by_question: dict[str, list[str]] = defaultdict(list)
    for p in pairs:
        if p.perspective not in by_question[p.question]:
            by_question[p.question].append(p.perspective)
    decided: dict[tuple[str, str], str] = {}
    for question, perspectives in by_question.items():
        if len(perspectives) != 2:
            continue
        negated = [has_negation(x) for x in perspectives]
        if negated[0] != negated[1]:
            for text, neg in zip(perspectives, negated):
                decided[(question, text)] = "oppose" if neg else "support"
    return [decided.get((p.question, p.perspective)) for p in pairs]


def _records(text: str, path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(first line of the record, fields)`` for each record; quoted fields may span lines."""
    reader = csv.reader(io.StringIO(text, newline=""), dialect="excel-tab", strict=True)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(
                f"malformed quoting ({exc})", path=path, line=start,
                fix="quote fields that hold tabs, newlines or double quotes CSV-style (\"...\", inner quotes doubled)",
            ) from None
        yield start, row
        start = reader.line_num + 1


def read_labelled_pairs(path: str | Path) -> LabelledSet:
    """Read a labelled tsv (``question, id, document, perspective, label`` [, ``stance``, extra columns]).

    Raises ``InputError`` naming the file and line for: a missing file, non-UTF-8 bytes, a header without
    the required columns, a row with the wrong number of fields, an empty required field, a label other
    than 0/1, an unknown stance word, or a file with no rows.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path, fix="give the path of a labelled tsv (question, id, document, perspective, label)")
    if path.is_dir():
        raise InputError("is a folder, expected a labelled .tsv file", path=path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # a byte-order mark of UTF-16 (Excel's "Unicode Text")
            raise InputError("UTF-16 text, expected UTF-8", path=path, line=1,
                             fix="re-encode the file as UTF-8 (e.g. iconv -f utf-16 -t utf-8)") from None
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte {exc.start})", path=path, line=line,
                         fix="re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    pairs: list[LabelledPair] = []
    header: list[str] | None = None
    for line, row in _records(text, path):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
            missing = [c for c in LABEL_COLUMNS if c not in header]
            if missing:
                raise InputError(
                    f"header lacks column(s) {', '.join(missing)}; found {', '.join(repr(h) for h in header)}",
                    path=path, line=line, fix=f"the first line must name the tab-separated columns {', '.join(LABEL_COLUMNS)}",
                )
            duplicated = sorted({h for h in header if header.count(h) > 1})
            if duplicated:
                raise InputError(f"header repeats column(s) {', '.join(duplicated)}", path=path, line=line)
            continue
        if len(row) != len(header):
            raise InputError(
                f"expected {len(header)} tab-separated fields ({', '.join(header)}), found {len(row)}", path=path, line=line,
                fix="check for a missing/extra tab, or quote a field that contains a tab or newline",
            )
        record = dict(zip(header, row))
        for column in ("question", "document", "perspective"):
            if not record[column].strip():
                raise InputError(f"empty {column!r}", path=path, line=line, record=record["id"] or None)
        raw_label = record["label"].strip()
        if raw_label not in _LABEL_WORDS:
            raise InputError(f"label must be 0 or 1, got {raw_label!r}", path=path, line=line, record=record["id"] or None,
                             fix="1 = the document supports the perspective, 0 = it does not")
        stance = None
        if "stance" in record and record["stance"].strip():
            word = record["stance"].strip().lower()
            if word not in _STANCE_WORDS:
                raise InputError(f"unknown stance {record['stance']!r}", path=path, line=line, record=record["id"] or None,
                                 fix="use support/oppose (or pro/con, yes/no, 1/-1), or leave it empty")
            stance = _STANCE_WORDS[word]
        extra = {k: v for k, v in record.items() if k not in LABEL_COLUMNS and k != "stance"}
        pairs.append(LabelledPair(
            question=record["question"].strip(), id=record["id"].strip(), document=record["document"],
            perspective=record["perspective"].strip(), label=_LABEL_WORDS[raw_label], stance=stance,
            line=line, extra=extra,
        ))
    if header is None:
        raise InputError("the file is empty", path=path, fix=f"write a header row: {chr(9).join(LABEL_COLUMNS)}")
    if not pairs:
        raise InputError("the file has a header but no labelled rows", path=path)
    return LabelledSet(tuple(pairs), str(path), hashlib.sha256(data).hexdigest())


def write_labelled_pairs(path: str | Path, pairs: Iterable[LabelledPair], *, with_stance: bool | None = None) -> int:
    """Write pairs as a labelled tsv (atomically; quoting as pandas does). Returns the number of rows."""
    from berds.io import atomic_write

    pairs = list(pairs)
    if with_stance is None:
        with_stance = any(p.stance for p in pairs)
    extra_cols = list(dict.fromkeys(k for p in pairs for k in p.extra))
    header = list(LABEL_COLUMNS) + (["stance"] if with_stance else []) + extra_cols
    with atomic_write(path) as f:
        writer = csv.writer(f, dialect="excel-tab", lineterminator="\n")
        writer.writerow(header)
        for p in pairs:
            row = [p.question, p.id, p.document, p.perspective, "1" if p.label else "0"]
            if with_stance:
                row.append(p.stance or "")
            row += [p.extra.get(k, "") for k in extra_cols]
            writer.writerow(row)
    return len(pairs)
