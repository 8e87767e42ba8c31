"""``import_trec_run``: a ranking made elsewhere (pyserini, BEIR, PyTerrier, ...) as a berds run folder.

    from berds.retrievers.trec_import import import_trec_run
    run, report = import_trec_run("bm25.trec", corpus="corpora/wiki", questions="kialo", out="runs/kialo-mine")

A TREC run file (``qid Q0 docid rank score tag``) names passages but holds no texts and no perspectives, so
berds cannot judge it by itself. This joins it with the passage store the docids come from (for the texts)
and the question set the qids come from (for the questions and their gold perspectives) and writes the
usual run folder (``berds.runs.save_run``), which ``berds eval`` and the analyses read.

What cannot be joined is reported, never dropped quietly:

* a docid that is not in the store: refused (the wrong store, or a different passage split), unless
  ``missing="drop"``, which leaves it out and records how many in the manifest;
* a qid that is not in the question set: left out (a run over more questions than the set is common),
  counted and listed in the manifest; a file where *no* qid matches is refused (the wrong set or split);
* a question of the set with no line in the file: kept with no passages (``empty_questions`` in the manifest:
  ``berds eval`` refuses it unless ``--allow-short``).

The ranking is the one TREC tools evaluate: by score, best first, ties by docid descending (trec_eval ignores
the rank column). When the file's rank column disagrees, the number of questions so re-ordered is reported.
``k`` cuts each ranking to its first ``k`` passages. The manifest names the source file and its sha256.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError, InputError
from berds.io import sha256_file
from berds.types import Hit, Question, Run

MISSING_MODES = ("refuse", "drop")


@dataclass
class ImportReport:
    """What joining a TREC file with a store and a question set found (printed by ``berds import run``)."""

    source: str
    lines: int
    file_questions: int  # distinct qids in the file
    questions: int  # questions in the set (the run's questions)
    matched: int  # questions of the set with at least one line in the file
    unknown_qids: list[str] = field(default_factory=list)  # in the file, not in the set: left out
    missing_docids: int = 0  # (question, docid) lines whose docid the store lacks (dropped with missing="drop")
    missing_examples: list[str] = field(default_factory=list)
    reordered: int = 0  # questions whose rank column disagreed with the score order
    cut: int = 0  # questions cut to k
    depths: list[int] = field(default_factory=list)

    def as_manifest(self) -> dict[str, Any]:
        return {"unknown_qids": len(self.unknown_qids), "unknown_qid_examples": self.unknown_qids[:20],
                "missing_docids": self.missing_docids, "missing_docid_examples": self.missing_examples[:20],
                "questions_without_lines": self.questions - self.matched,
                "reordered_by_score": self.reordered, "cut_to_k": self.cut}

    def table(self, out: Path | None = None) -> Any:
        from rich.table import Table

        t = Table(title=f"imported: {self.source}", show_header=False)
        t.add_column(style="bold")
        t.add_column(overflow="fold")
        t.add_row("file", f"{self.lines} lines, {self.file_questions} questions")
        t.add_row("question set", f"{self.questions} questions, {self.matched} of them in the file")
        unknown = ", ".join(self.unknown_qids[:3]) + (", ..." if len(self.unknown_qids) > 3 else "")
        t.add_row("unknown qids", f"{len(self.unknown_qids)} (left out){': ' + unknown if unknown else ''}")
        t.add_row("without lines", f"{self.questions - self.matched} questions (kept with no passages)")
        t.add_row("missing docids", f"{self.missing_docids} (dropped)" if self.missing_docids else "0")
        if self.depths:
            d = self.depths
            t.add_row("depth", f"min {min(d)}, mean {sum(d) / len(d):.1f}, max {max(d)}"
                               + (f" ({self.cut} cut to k)" if self.cut else ""))
        if self.reordered:
            t.add_row("re-ordered", f"{self.reordered} question{'s' if self.reordered != 1 else ''}: the rank column "
                                    "disagreed with the scores (ranked by score, as trec_eval does)")
        if out is not None:
            t.add_row("run folder", str(out))
        return t


def import_trec_run(
    trec: str | os.PathLike,
    *,
    corpus: Any,
    questions: Sequence[Question] | str | os.PathLike,
    out: str | os.PathLike | None = None,
    split: str = "test",
    limit: int | None = None,
    k: int | None = None,
    missing: str = "refuse",
    name: str | None = None,
    overwrite: bool = False,
) -> tuple[Run, ImportReport]:
    """Join the TREC run file ``trec`` with the passage store ``corpus`` (a folder or ``PassageStore``) and the
    question set ``questions`` (a name or file for ``load_questions``, read with ``split``/``limit``, or a list of
    ``Question``) into a ``Run``; save it to ``out`` when given. Returns ``(run, report)``; see the module doc for
    what is refused, dropped and reported."""
    from berds.indexes.base import corpus_record, open_store
    from berds.runs import order_ties_like_trec_eval, read_trec

    if missing not in MISSING_MODES:
        raise BerdsError(f"missing must be one of {', '.join(MISSING_MODES)}, got {missing!r}")
    if k is not None and k < 1:
        raise BerdsError(f"k must be at least 1, got {k}")
    path = Path(trec)
    if not path.is_file():
        raise InputError("no such TREC run file", path=path)
    if out is not None and (Path(out) / "manifest.json").exists() and not overwrite:
        raise BerdsError(f"{out} already holds a run — choose another --out or pass --overwrite")
    ranked = read_trec(path)
    tags, lines = _file_info(path)
    if not ranked:
        raise InputError("holds no TREC lines ('qid Q0 docid rank score tag')", path=path)

    if isinstance(questions, (str, os.PathLike)):
        from berds.questions import load_questions

        source = str(questions)
        local = Path(questions).is_file()
        question_source = {"source": source, "split": None if local or source == "demo" else split,
                           **({"path": str(Path(questions).resolve())} if local else {}),
                           **({"limit": limit} if limit else {})}
        qs = load_questions(questions, split, limit=limit, require_perspectives=False)
    else:
        qs = list(questions)[:limit] if limit else list(questions)
        question_source = {"source": "in-memory"}
    question_source["count"] = len(qs)
    if not qs:
        raise BerdsError("no questions to import a run for")
    known = {q.id for q in qs}
    unknown = [qid for qid in ranked if qid not in known]
    if len(unknown) == len(ranked):
        raise InputError(f"none of its {len(ranked)} question ids ({', '.join(list(ranked)[:3])}, ...) is in the "
                         f"question set {question_source['source']!r} ({', '.join(q.id for q in qs[:3])}, ...)",
                         path=path, fix="pass the question set (and --split) the run was made for")

    store = open_store(corpus)
    report = ImportReport(source=str(path), lines=lines, file_questions=len(ranked), questions=len(qs),
                          matched=sum(q.id in ranked for q in qs), unknown_qids=unknown)
    hits: dict[str, list[Hit]] = {}
    for q in qs:
        pairs = ranked.get(q.id, [])
        by_score = sorted(pairs, key=lambda p: (-p[1], _desc(p[0])))  # trec_eval: score desc, then docid desc
        if [d for d, _ in by_score] != [d for d, _ in pairs]:
            report.reordered += 1
        present = [(d, s) for d, s in by_score if d in store]
        if len(present) != len(by_score):
            lost = [d for d, _ in by_score if d not in store]
            report.missing_docids += len(lost)
            report.missing_examples += [f"{q.id}/{d}" for d in lost[:3]]
            if missing == "refuse":
                raise InputError(f"question {q.id!r}: passage {lost[0]!r} is not in the passage store {store.path} "
                                 f"({len(lost)} of this question's {len(by_score)} docids are missing)", path=path,
                                 fix="pass the store whose passage ids the run uses (`berds corpus info STORE` shows "
                                     "its source), or --missing drop to leave such passages out (recorded)")
        if k is not None and len(present) > k:
            present = present[:k]
            report.cut += 1
        passages = store.get_many([d for d, _ in present])
        hits[q.id] = order_ties_like_trec_eval([Hit(p, s) for p, (_, s) in zip(passages, present)])
        report.depths.append(len(hits[q.id]))

    manifest = {
        "retriever": {"name": "trec-import", "tags": tags},
        "imported": {"path": str(path.resolve()), "sha256": sha256_file(path), "lines": lines,
                     "missing": missing, **report.as_manifest()},
        "corpus": corpus_record(store),
        "index": None,
        "k": k if k is not None else max(report.depths, default=0),
        "question_set": question_source,
    }
    run = Run.from_lists(qs, [hits[q.id] for q in qs], manifest=manifest,
                         name=name or (tags[0] if len(tags) == 1 else path.stem))
    if out is not None:
        from berds.runs import save_run

        save_run(run, out, overwrite=overwrite)
    return run, report


def _desc(docid: str) -> tuple[int, ...]:
    """A key that sorts strings in *descending* order inside an ascending sort."""
    return tuple(-ord(c) for c in docid) + (1,)


def _file_info(path: Path) -> tuple[list[str], int]:
    """The distinct run tags (6th column) of the file, in order of first appearance (at most 5), and its
    number of TREC lines."""
    seen: Counter[str] = Counter()
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 6:
                seen[parts[5]] += 1
    return list(seen)[:5], sum(seen.values())
