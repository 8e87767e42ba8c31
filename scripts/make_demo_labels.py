"""Regenerate ``berds/data/demo/labelled_pairs.tsv`` from the demo questions, corpus and labels.

The demo benchmark keeps its gold labels in ``labels.jsonl`` (one record per passage written for a
question: which of that question's perspectives the passage supports). This script expands them into
the study's human-labelled pair format, one row per (passage, perspective of its question)::

    question <TAB> id <TAB> document <TAB> perspective <TAB> label

``id`` is the question id, ``document`` is the judge input (``text + " " + title``, as the BERDS
study shows passages to its perspective detector, with tabs and newlines replaced by spaces) and
``label`` is 1 when the passage supports the perspective, else 0. Rows follow ``labels.jsonl`` order,
then perspective order. Run it after editing any of the three source files::

    python scripts/make_demo_labels.py            # rewrite the tsv
    python scripts/make_demo_labels.py --check    # exit 1 if the tsv is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from berds.errors import BerdsError, InputError
from berds.io import iter_jsonl, write_text
from berds.types import Passage

DEMO_DIR = Path(__file__).resolve().parent.parent / "berds" / "data" / "demo"
TSV_NAME = "labelled_pairs.tsv"
TSV_HEADER = ("question", "id", "document", "perspective", "label")


def _one_line(text: str) -> str:
    """Make ``text`` safe for a tsv cell: tabs, carriage returns and newlines become spaces."""
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def _require_keys(rec: dict, keys: tuple[str, ...], path: Path, line: int) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise InputError(
            f"missing field(s) {', '.join(missing)}", path=path, line=line,
            fix=f"each record needs {', '.join(keys)}",
        )


def labelled_pair_rows(demo_dir: str | Path = DEMO_DIR) -> list[tuple[str, str, str, str, int]]:
    """The tsv rows (without header) implied by ``questions.jsonl``, ``corpus.jsonl`` and ``labels.jsonl``.

    Raises ``InputError`` naming the file and line when a label points at an unknown question or
    passage, or at a perspective index the question does not have.
    """
    demo_dir = Path(demo_dir)
    questions: dict[str, dict] = {}
    q_path = demo_dir / "questions.jsonl"
    for line, rec in iter_jsonl(q_path):
        _require_keys(rec, ("id", "question", "perspectives"), q_path, line)
        questions[rec["id"]] = rec

    passages: dict[str, Passage] = {}
    c_path = demo_dir / "corpus.jsonl"
    for line, rec in iter_jsonl(c_path):
        _require_keys(rec, ("id", "title", "text"), c_path, line)
        passages[rec["id"]] = Passage(id=rec["id"], text=rec["text"], title=rec["title"], source=rec.get("source", ""))

    rows: list[tuple[str, str, str, str, int]] = []
    l_path = demo_dir / "labels.jsonl"
    for line, rec in iter_jsonl(l_path):
        _require_keys(rec, ("passage_id", "question_id", "supports"), l_path, line)
        question = questions.get(rec["question_id"])
        if question is None:
            raise InputError(f"unknown question id {rec['question_id']!r}", path=l_path, line=line,
                             fix=f"use an id from {q_path.name}")
        passage = passages.get(rec["passage_id"])
        if passage is None:
            raise InputError(f"unknown passage id {rec['passage_id']!r}", path=l_path, line=line,
                             fix=f"use an id from {c_path.name}")
        perspectives = question["perspectives"]
        supports = rec["supports"]
        if not isinstance(supports, list) or any(
            not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(perspectives) for i in supports
        ):
            raise InputError(
                f"supports must list perspective indices 0..{len(perspectives) - 1}, got {supports!r}",
                path=l_path, line=line,
            )
        document = _one_line(passage.judge_text("after"))
        for index, perspective in enumerate(perspectives):
            rows.append((
                _one_line(question["question"]), question["id"], document, _one_line(perspective),
                int(index in supports),
            ))
    return rows


def render_tsv(rows: list[tuple[str, str, str, str, int]]) -> str:
    """Header plus one tab-separated line per row, newline-terminated."""
    lines = ["\t".join(TSV_HEADER)]
    lines += ["\t".join(str(cell) for cell in row) for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-dir", type=Path, default=DEMO_DIR, help="folder holding the demo jsonl files")
    parser.add_argument("--check", action="store_true", help="only verify that the tsv is up to date")
    args = parser.parse_args(argv)
    try:
        rows = labelled_pair_rows(args.demo_dir)
    except BerdsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = render_tsv(rows)
    target = args.demo_dir / TSV_NAME
    positives = sum(row[4] for row in rows)
    if args.check:
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current != text:
            print(f"{target} is out of date; run python scripts/make_demo_labels.py", file=sys.stderr)
            return 1
        print(f"{target} is up to date ({len(rows)} pairs, {positives} positive)")
        return 0
    write_text(target, text)
    print(f"wrote {target}: {len(rows)} pairs, {positives} positive ({positives / max(len(rows), 1):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
