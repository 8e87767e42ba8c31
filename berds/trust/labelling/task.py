"""A labelling task: the (perspective, passage) pairs of a seeded random sample of whole questions.

``sample_task(evaluations, questions=N, seed=S, k=K, out=TASK)`` reads evaluated runs (a run folder with
``eval/JUDGE/judgements.jsonl``, an evaluation folder such as ``NAME.eval/``, or the ``judgements.jsonl``
itself), draws N questions uniformly at random without replacement (``numpy.random.default_rng(seed)``) from
the questions *every* run holds, and writes every (perspective, passage) pair of their top k — so whole
questions are labelled, the unit a corrected MRecall@k needs. The passage text is the one the judge saw
(``text + " " + title``, ``--title-position``), the form the labelled-pairs TSV carries. A pair that several
runs share (same question, perspective and text) is written once, with the rank and verdict of each run.

The TASK folder::

    manifest.json   seed, k, questions drawn (in draw order), population, runs + hashes, judge, berds version,
                    and the sha256 of pairs.jsonl
    pairs.jsonl     one pair per line (``pair`` id, ``qid``, ``question``, ``perspective``, ``document``,
                    ``judge_label``, ``sources``)
    labels.sqlite   the labels (``berds.trust.labelling.store``), made on first use

``open_task(TASK)`` reads it back and refuses a pairs file edited after sampling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from berds.errors import BerdsError, InputError

TASK_KIND = "berds-label-task"
TASK_FORMAT = 1
MANIFEST = "manifest.json"
PAIRS = "pairs.jsonl"
LABELS_DB = "labels.sqlite"


def pair_id(qid: str, perspective: str, document: str) -> str:
    """A pair's stable id: the first 16 hex digits of sha256 over (question id, perspective, judge text)."""
    return hashlib.sha256("\0".join((qid, perspective, document)).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Evaluation:
    """One evaluated run as the task reads it: its judgements and the run they were made on."""

    name: str
    folder: Path            # the folder holding judgements.jsonl and metrics.json
    run_path: Path          # the run folder or jsonl that was judged
    judge_id: str
    prompt_version: str
    depth: int              # how many ranks were judged
    judgements_sha256: str
    run_sha256: str
    # qid -> rank (1-based) -> docid, and (qid, perspective index, docid) -> judge label
    ranking: dict[str, dict[int, str]] = field(repr=False, default_factory=dict)
    labels: dict[tuple[str, int, str], int] = field(repr=False, default_factory=dict)


def _evaluation_folder(path: Path) -> Path:
    """The folder with judgements.jsonl for ``path`` (that folder, a run folder with one ``eval/JUDGE``, or
    the judgements file itself)."""
    if path.is_file():
        if path.name != "judgements.jsonl":
            raise InputError("expected an evaluated run: a run folder, an evaluation folder or its judgements.jsonl",
                             path=path, fix="run `berds eval` on the run first and pass the run folder (or NAME.eval/)")
        return path.parent
    if not path.is_dir():
        raise InputError("no such evaluation folder or run folder", path=path)
    if (path / "judgements.jsonl").is_file():
        return path
    found = sorted((path / "eval").glob("*/judgements.jsonl")) if (path / "eval").is_dir() else []
    if len(found) == 1:
        return found[0].parent
    if len(found) > 1:
        names = ", ".join(str(f.parent) for f in found[:4])
        raise InputError(f"holds {len(found)} evaluations (by different judges): {names}", path=path,
                         fix="pass the one whose judge you want to check, e.g. " + str(found[0].parent))
    if not (path / "run.ctxs.jsonl").is_file():
        # not a run: a folder of evaluations (`berds demo`'s eval/JUDGE/RUN, `eval --out` with several runs)
        inside = sorted(f.parent for f in path.glob("*/judgements.jsonl")) or \
            sorted(f.parent for f in path.glob("*/*/judgements.jsonl"))
        if inside:
            names = " ".join(str(f) for f in inside[:4]) + (" ..." if len(inside) > 4 else "")
            raise InputError(f"is not an evaluation but a folder of {len(inside)}: {names}", path=path,
                             fix="pass the evaluation folders of the runs to label (judged by one judge), "
                                 f"e.g. `berds label sample {inside[0]} ...`")
        raise InputError("is neither a run folder nor an evaluation folder (no run.ctxs.jsonl, no "
                         "judgements.jsonl)", path=path,
                         fix="pass what `berds eval` wrote: a run folder it judged, its --out folder or the "
                             "judgements.jsonl")
    raise InputError("holds no judgements.jsonl: this run has not been evaluated", path=path,
                     fix=f"run `berds eval {path} --judge NAME` first")


def _run_of(folder: Path, metrics: dict[str, Any]) -> Path:
    """The run an evaluation folder was made from: ``RUN/eval/JUDGE`` -> ``RUN``; else the source path its
    metrics.json records; else ``NAME.jsonl`` beside ``NAME.eval/``."""
    if folder.parent.name == "eval" and (folder.parent.parent / "run.ctxs.jsonl").is_file():
        return folder.parent.parent
    source = ((metrics.get("run_manifest") or {}).get("source") or {}).get("path")
    if source and Path(source).exists():
        return Path(source)
    if folder.name.endswith(".eval"):
        stem = folder.name[: -len(".eval")]
        for suffix in (".jsonl", ".ctxs.jsonl", ".json"):
            if (folder.parent / (stem + suffix)).is_file():
                return folder.parent / (stem + suffix)
    raise InputError("cannot find the run this evaluation was made from (its metrics.json names none that exists)",
                     path=folder, fix="keep the run beside its evaluation, or evaluate it again with `berds eval`")


def read_evaluation(path: str | Path) -> Evaluation:
    """An evaluated run: its judge (from metrics.json), its judgements and the run file (hashed)."""
    from berds.evaluate.qrels import read_judgements
    from berds.io import read_json, sha256_file
    from berds.runs import CTXS, run_stem

    path = Path(path)
    folder = _evaluation_folder(path)
    if not (folder / "metrics.json").is_file():
        raise InputError("no metrics.json beside judgements.jsonl: not an evaluation `berds eval` wrote", path=folder)
    metrics = read_json(folder / "metrics.json")
    judge = metrics.get("judge") if isinstance(metrics, dict) else None
    if not isinstance(judge, dict) or not judge.get("id"):
        raise InputError("metrics.json names no judge (expected {\"judge\": {\"id\": ...}})", path=folder / "metrics.json")
    run_path = _run_of(folder, metrics)
    qrels, ranks = read_judgements(folder / "judgements.jsonl")
    ranking: dict[str, dict[int, str]] = {}
    for qid, docid, rank in ranks:
        ranking.setdefault(qid, {})[rank] = docid
    labels = {(qid, int(sub) - 1, docid): rel for qid, sub, docid, rel in qrels}
    run_file = run_path / CTXS if run_path.is_dir() else run_path
    name = metrics.get("run") or run_stem(run_path)
    return Evaluation(name=str(name), folder=folder, run_path=run_path, judge_id=str(judge["id"]),
                      prompt_version=str(judge.get("prompt_version", "")), depth=int(metrics.get("depth") or 0),
                      judgements_sha256=sha256_file(folder / "judgements.jsonl"), run_sha256=sha256_file(run_file),
                      ranking=ranking, labels=labels)


@dataclass(frozen=True)
class LabelTask:
    """A task folder read back: its manifest and pairs (in the order the page shows them)."""

    folder: Path
    manifest: dict[str, Any]
    pairs: tuple[dict[str, Any], ...]

    @property
    def id(self) -> str:
        """The task's id: the sha256 of its pairs file (labels, imports and stores carry it)."""
        return self.manifest["pairs"]["sha256"]

    @property
    def judge_id(self) -> str:
        return self.manifest["judge"]["id"]

    @property
    def db_path(self) -> Path:
        return self.folder / LABELS_DB

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {p["pair"]: p for p in self.pairs}

    def questions(self) -> dict[str, list[str]]:
        """qid -> the ids of its pairs, questions in draw order."""
        out: dict[str, list[str]] = {q: [] for q in self.manifest["questions"]}
        for p in self.pairs:
            out.setdefault(p["qid"], []).append(p["pair"])
        return out


def open_task(folder: str | Path) -> LabelTask:
    """Read a task folder; a pairs file whose sha256 is not the manifest's (edited by hand) is refused."""
    from berds.io import iter_jsonl, read_json, sha256_file

    folder = Path(folder)
    if not folder.exists():
        raise InputError("no such folder", path=folder,
                         fix="give a task folder made by `berds label sample EVAL... --questions N --seed S --out TASK`")
    if not folder.is_dir():
        raise InputError("not a folder: a labelling task is the folder `berds label sample --out` made", path=folder)
    if not (folder / MANIFEST).is_file():
        raise InputError(f"no {MANIFEST}: not a labelling task", path=folder,
                         fix="make one with `berds label sample EVAL... --questions N --seed S --out TASK`")
    manifest = read_json(folder / MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("kind") != TASK_KIND:
        raise InputError(f"not a labelling task's manifest (kind is not {TASK_KIND!r})", path=folder / MANIFEST)
    if manifest.get("format") != TASK_FORMAT:
        raise InputError(f"task format {manifest.get('format')!r}, this berds reads format {TASK_FORMAT}",
                         path=folder / MANIFEST)
    pairs_file = folder / PAIRS
    if not pairs_file.is_file():
        raise InputError(f"the task has no {PAIRS}", path=folder)
    want = (manifest.get("pairs") or {}).get("sha256")
    have = sha256_file(pairs_file)
    if have != want:
        raise InputError(f"{PAIRS} was changed after sampling (its sha256 {have[:12]}... is not the manifest's "
                         f"{str(want)[:12]}...): labels could no longer be matched to what the judge saw",
                         path=pairs_file, fix="restore the file, or sample a new task with `berds label sample`")
    pairs = tuple(record for _, record in iter_jsonl(pairs_file, what="label task pairs"))
    if len(pairs) != manifest["pairs"].get("count"):
        raise InputError(f"holds {len(pairs)} pairs, the manifest says {manifest['pairs'].get('count')}", path=pairs_file)
    return LabelTask(folder, manifest, pairs)


def sample_task(
    evaluations: Sequence[str | Path],
    *,
    questions: int,
    seed: int,
    k: int,
    out: str | Path,
    title_position: str = "after",
) -> tuple[LabelTask, dict[str, Any]]:
    """``berds label sample``: draw ``questions`` whole questions at random (seeded) from what every
    evaluation holds, write the task folder ``out``, and return it with a summary (population, excluded
    questions per run, pairs, pairs shared by several runs)."""
    import numpy as np

    from berds import __version__
    from berds.io import check_writable, new_manifest, write_json, write_jsonl
    from berds.runs import load_run

    if not evaluations:
        raise BerdsError("give at least one evaluated run (EVAL...)")
    if questions < 1:
        raise BerdsError(f"--questions must be at least 1, got {questions}")
    if k < 1:
        raise BerdsError(f"--k must be at least 1, got {k}")
    out = Path(out)
    if (out / MANIFEST).exists() or (out / PAIRS).exists():
        raise BerdsError(f"{out} already holds a labelling task: choose another --out (its labels are kept there)")
    check_writable(out, folder=True)
    evals = [read_evaluation(p) for p in evaluations]
    resolved = [e.folder.resolve() for e in evals]
    if len(set(resolved)) < len(resolved):
        raise BerdsError("the same evaluation is given twice")
    judges = {(e.judge_id, e.prompt_version) for e in evals}
    if len(judges) > 1:
        listing = "; ".join(f"{e.folder}: {e.judge_id} ({e.prompt_version})" for e in evals)
        raise BerdsError(f"the runs were judged by different judges ({listing}) — a task checks one judge: "
                         "evaluate every run with the same --judge, or sample them separately")
    for e in evals:
        if e.depth and k > e.depth:
            raise InputError(f"--k {k} is deeper than this evaluation judged (the top {e.depth})", path=e.folder,
                             fix=f"use --k {e.depth} or less, or evaluate again with --k {k}")
    runs = [load_run(e.run_path, allow_empty=True, duplicates="keep") for e in evals]
    names = [e.name for e in evals]
    if len(set(names)) < len(names):  # two runs named alike: tell them apart by their folders
        names = [f"{e.name} ({e.folder})" for e in evals]
    shared = set(evals[0].ranking)
    for e, run in zip(evals, runs):
        shared &= set(e.ranking) & set(run.questions)
    population = sorted(shared)
    excluded = {name: sorted(set(e.ranking) - shared) for name, e in zip(names, evals)}
    if not population:
        raise BerdsError("the runs share no evaluated question: nothing to sample (" +
                         ", ".join(f"{n}: {len(e.ranking)} questions" for n, e in zip(names, evals)) + ")")
    if questions > len(population):
        raise BerdsError(f"--questions {questions} is more than the {len(population)} question(s) "
                         f"{'every run holds' if len(evals) > 1 else 'the run holds'}: ask for at most {len(population)}")
    rng = np.random.default_rng(seed)
    drawn = [population[i] for i in rng.choice(len(population), size=questions, replace=False)]

    pairs: dict[str, dict[str, Any]] = {}
    for e, run, name in zip(evals, runs, names):
        for qid in drawn:
            question = run.questions[qid]
            by_docid = {h.passage.id: h.passage for h in run.hits.get(qid, [])}
            for rank in range(1, k + 1):
                docid = e.ranking[qid].get(rank)
                if docid is None:  # a short question (evaluated with --allow-short): no passage at this rank
                    continue
                passage = by_docid.get(docid)
                if passage is None:
                    raise InputError(f"question {qid!r}: the judgements rank passage {docid!r} at {rank}, but the run "
                                     "has no such passage — the run changed after it was evaluated",
                                     path=e.run_path, fix="evaluate the run again with `berds eval`")
                document = passage.judge_text(title_position)
                for i, perspective in enumerate(question.perspectives):
                    verdict = e.labels.get((qid, i, docid))
                    if verdict is None:
                        raise InputError(f"question {qid!r}: no verdict for perspective {i + 1} and passage {docid!r}",
                                         path=e.folder / "judgements.jsonl",
                                         fix="evaluate the run again with `berds eval`")
                    key = pair_id(qid, perspective, document)
                    record = pairs.get(key)
                    if record is None:
                        record = pairs[key] = {
                            "pair": key, "qid": qid, "question": question.text, "dataset": question.dataset,
                            "perspective_index": i, "perspective": perspective, "document": document,
                            "docid": docid, "title": passage.title, "judge_label": verdict, "sources": []}
                    elif record["judge_label"] != verdict:
                        raise InputError(f"question {qid!r}: the same pair got verdict {record['judge_label']} in one "
                                         f"run and {verdict} in {name} from the same judge", path=e.folder,
                                         fix="evaluate the runs again through one judgement cache")
                    record["sources"].append({"run": name, "rank": rank, "docid": docid})
    if not pairs:
        raise BerdsError(f"the {len(drawn)} question(s) drawn have no (perspective, passage) pair in their top {k}: "
                         "an empty sample")
    # pairs in draw order, then perspective, then first rank
    order = {q: i for i, q in enumerate(drawn)}
    records = sorted(pairs.values(), key=lambda p: (order[p["qid"]], p["perspective_index"], p["sources"][0]["rank"]))
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / PAIRS, records)
    from berds.io import sha256_file

    shared_pairs = sum(len({s["run"] for s in p["sources"]}) > 1 for p in records)
    (judge_id, prompt_version), = judges
    manifest = new_manifest(
        TASK_KIND, format=TASK_FORMAT, berds_version=__version__, seed=seed, k=k, title_position=title_position,
        sampling="uniform without replacement over the questions every run holds (sorted ids), numpy default_rng(seed)",
        questions_requested=questions, questions=drawn,
        population={"size": len(population), "excluded": {n: q for n, q in excluded.items() if q}},
        judge={"id": judge_id, "prompt_version": prompt_version},
        runs=[{"name": n, "evaluation": str(e.folder), "run": str(e.run_path), "judgements_sha256": e.judgements_sha256,
               "run_sha256": e.run_sha256} for n, e in zip(names, evals)],
        pairs={"file": PAIRS, "count": len(records), "shared_by_runs": shared_pairs, "sha256": sha256_file(out / PAIRS)},
    )
    write_json(out / MANIFEST, manifest)
    summary = {"population": len(population), "drawn": len(drawn), "pairs": len(records), "shared": shared_pairs,
               "excluded": {n: len(q) for n, q in excluded.items()}}
    return open_task(out), summary
