"""From the label store to files: the labelled-pairs TSV ``berds judge validate`` reads, Label Studio JSON
both ways, and the task's status (progress per annotator, whole questions, agreement between annotators).

One label per pair: the label every annotator who answered gave it. A pair two annotators answered
differently is a *conflict*: export lists them and refuses unless ``conflicts`` says what to do —
``first`` (the label given first), ``majority`` (the label most annotators gave; a tie drops the pair) or
``drop`` (leave the pair out). Skipped pairs are not labels. A question is *whole* when every pair of its
top k has a label: the corrected estimates use whole questions only, so export and status count them.

Agreement: for each two annotators, Cohen's κ over the pairs both answered, with its n and a 95% percentile
bootstrap interval that resamples questions (``berds.trust.validate``), as ``judge validate`` does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from berds.errors import BerdsError, InputError
from berds.trust.labelling.store import LabelStore, check_annotator
from berds.trust.labelling.task import LabelTask

CONFLICT_POLICIES = ("first", "majority", "drop")
LS_FROM, LS_TO = "supports", "passage"  # the names of the Choices control and the Text it labels (config below)
LS_CHOICES = {"Yes": "yes", "No": "no"}
META_ANNOTATORS = "berds_annotators"  # task meta: annotation id -> berds annotator (survives Label Studio)

LABEL_STUDIO_CONFIG = """<View>
  <Header value="Question"/>
  <Text name="question" value="$question"/>
  <Header value="Perspective"/>
  <Text name="perspective" value="$perspective"/>
  <Header value="Passage"/>
  <Header value="$title" size="5"/>
  <Text name="passage" value="$passage"/>
  <Header value="Does the passage support the perspective?"/>
  <Choices name="supports" toName="passage" choice="single" showInline="true" required="true">
    <Choice value="Yes" hotkey="y"/>
    <Choice value="No" hotkey="n"/>
  </Choices>
</View>
"""


@dataclass
class Agreement:
    """Cohen's κ between two annotators over the ``n`` pairs both answered (yes/no), from ``questions`` questions."""

    first: str
    second: str
    n: int
    questions: int
    agreement: float
    kappa: float
    interval: tuple[float, float]

    def to_json(self) -> dict[str, Any]:
        return {"annotators": [self.first, self.second], "n": self.n, "questions": self.questions,
                "agreement": self.agreement, "kappa": self.kappa, "kappa_ci95": list(self.interval)}


@dataclass
class TaskStatus:
    pairs: int
    questions: int
    per_annotator: dict[str, dict[str, int]]       # annotator -> {"yes", "no", "skip", "labelled"}
    labelled_pairs: int                              # pairs with an agreed label (under the conflict policy)
    conflicts: list[dict[str, Any]]                  # pairs answered both yes and no
    whole_questions: list[str]                       # every pair labelled
    partial_questions: list[str]                     # some pairs labelled, not all
    agreements: list[Agreement] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "questions": self.questions, "annotators": self.per_annotator,
                "labelled_pairs": self.labelled_pairs, "conflicts": len(self.conflicts),
                "whole_questions": len(self.whole_questions), "partial_questions": self.partial_questions,
                "agreement": [a.to_json() for a in self.agreements]}


def _answers(store: LabelStore) -> dict[str, list[tuple[float, str, str]]]:
    """pair -> [(time, annotator, yes/no)] oldest first (skips left out)."""
    out: dict[str, list[tuple[float, str, str]]] = {}
    for pair, annotator, value, at, _ in store.rows():
        if value != "skip":
            out.setdefault(pair, []).append((at, annotator, value))
    return out


def resolve(answers: list[tuple[float, str, str]], conflicts: str | None) -> str | None:
    """The pair's label from its answers under the policy (None: dropped); agreeing answers give their label."""
    values = {v for _, _, v in answers}
    if len(values) == 1:
        return values.pop()
    if conflicts == "first":
        return answers[0][2]
    if conflicts == "majority":
        (top, n), *rest = Counter(v for _, _, v in answers).most_common()
        return None if rest and rest[0][1] == n else top
    return None  # drop (or no policy: the caller refuses first)


def agreements(task: LabelTask, store: LabelStore, *, n_boot: int = 1000, seed: int = 0) -> list[Agreement]:
    """κ for every two annotators who answered some pair both (yes/no)."""
    import numpy as np

    from berds.trust.validate import bootstrap_intervals, classification_metrics

    qid_of = {p["pair"]: p["qid"] for p in task.pairs}
    by_annotator: dict[str, dict[str, bool]] = {}
    for pair, annotator, value, _, _ in store.rows():
        if value != "skip" and pair in qid_of:
            by_annotator.setdefault(annotator, {})[pair] = value == "yes"
    out = []
    for a, b in combinations(sorted(by_annotator), 2):
        both = [p for p in by_annotator[a] if p in by_annotator[b]]
        if not both:
            continue
        x = np.array([by_annotator[a][p] for p in both])
        y = np.array([by_annotator[b][p] for p in both])
        groups = [qid_of[p] for p in both]
        m = classification_metrics(x, y)
        n_questions = len(set(groups))
        # (one question: every resample is that question, so no interval is claimed)
        interval = (bootstrap_intervals(x, y, n_boot=n_boot, seed=seed, groups=groups)["kappa"] if n_questions > 1
                    else (float("nan"), float("nan")))
        out.append(Agreement(a, b, len(both), n_questions, m["accuracy"], m["kappa"], interval))
    return out


def task_status(task: LabelTask, *, conflicts: str | None = None) -> TaskStatus:
    """Progress per annotator, labelled pairs and whole questions, conflicts, and κ between annotators."""
    store = LabelStore(task.db_path, task.id)
    valid = task.by_id()
    per: dict[str, Counter] = {}
    for pair, annotator, value, _, _ in store.rows():
        if pair in valid:
            per.setdefault(annotator, Counter())[value] += 1
    answers = {p: a for p, a in _answers(store).items() if p in valid}
    conflicting = [{"pair": p, "qid": valid[p]["qid"], "answers": {who: v for _, who, v in a}}
                   for p, a in answers.items() if len({v for _, _, v in a}) > 1]
    labelled = {p for p, a in answers.items() if resolve(a, conflicts) is not None}
    whole, partial = [], []
    for qid, ids in task.questions().items():
        done = sum(p in labelled for p in ids)
        if ids and done == len(ids):
            whole.append(qid)
        elif done:
            partial.append(qid)
    per_annotator = {a: {"yes": c["yes"], "no": c["no"], "skip": c["skip"], "labelled": c["yes"] + c["no"]}
                     for a, c in sorted(per.items())}
    return TaskStatus(len(task.pairs), len(task.questions()), per_annotator, len(labelled), conflicting, whole,
                      partial, agreements(task, store))


def export_tsv(task: LabelTask, out: str | Path, *, conflicts: str | None = None) -> TaskStatus:
    """Write the labelled-pairs TSV (``question, id, document, perspective, label`` + ``dataset, pair,
    annotators, judge_label``): one row per labelled pair, in task order. Conflicting pairs are refused
    (listed) unless ``conflicts`` is one of ``first``, ``majority``, ``drop``."""
    from berds.trust.labels import LabelledPair, write_labelled_pairs

    if conflicts is not None and conflicts not in CONFLICT_POLICIES:
        raise BerdsError(f"unknown --conflicts {conflicts!r}; use one of {', '.join(CONFLICT_POLICIES)}")
    status = task_status(task, conflicts=conflicts)
    if status.conflicts and conflicts is None:
        shown = "; ".join(f"pair {c['pair']} (question {c['qid']}): " +
                          ", ".join(f"{who} {v}" for who, v in sorted(c["answers"].items()))
                          for c in status.conflicts[:5])
        more = f" and {len(status.conflicts) - 5} more" if len(status.conflicts) > 5 else ""
        raise BerdsError(f"{len(status.conflicts)} pair(s) were labelled both yes and no: {shown}{more} — settle them "
                         "on the page, or choose --conflicts first|majority|drop")
    if not status.labelled_pairs:
        raise BerdsError(f"no pair of {task.folder} has a label yet: nothing to export "
                         f"(label some with `berds label serve {task.folder}`)")
    store = LabelStore(task.db_path, task.id)
    answers = _answers(store)
    rows = []
    for p in task.pairs:
        given = answers.get(p["pair"])
        label = resolve(given, conflicts) if given else None
        if label is None:
            continue
        rows.append(LabelledPair(
            question=p["question"], id=p["qid"], document=p["document"], perspective=p["perspective"],
            label=label == "yes",
            extra={"dataset": p.get("dataset") or "", "pair": p["pair"],
                   "annotators": ",".join(sorted({who for _, who, _ in given})), "judge_label": str(p["judge_label"])}))
    write_labelled_pairs(out, rows, with_stance=False)
    return status


# ---------------------------------------------------------------------------------------------- Label Studio


def export_label_studio(task: LabelTask, out: str | Path, *, judge_predictions: bool = False
                        ) -> tuple[int, int, Path]:
    """Label Studio tasks (one per pair, ``data`` with question, perspective and passage -- the text the judge read,
    title included, as on berds' own page -- and the passage's title apart, shown above it; plus the berds ids
    that bring the labels back) with each annotator's yes/no as an annotation (``result`` of ``choices``;
    the annotator's name in ``berds_annotator``, and under the annotation's ``id`` in the task's
    ``meta.berds_annotators``, which Label Studio keeps), and the labelling config beside it (``OUT.config.xml``).
    ``judge_predictions`` adds the judge's verdict as each task's prediction (Label Studio pre-fills it, which
    anchors annotators on it: off by default). Returns (tasks, annotations, config path)."""
    from berds.io import write_json, write_text

    store = LabelStore(task.db_path, task.id)
    given: dict[str, list[tuple[str, str, float]]] = {}
    for pair, annotator, value, at, _ in store.rows():
        if value != "skip":
            given.setdefault(pair, []).append((annotator, value, at))
    items, n_annotations = [], 0
    for p in task.pairs:
        # Label Studio drops unknown annotation keys on import (berds_annotator, created_at) and gives every
        # imported annotation to the importing user; it keeps an annotation's "id" as its import_id and the
        # task's meta. So each annotation gets a file-wide id and meta.berds_annotators maps it to its annotator:
        # Label Studio's export then still says whose each label is (checked with label-studio 1.23.2).
        annotations = []
        for annotator, value, at in given.get(p["pair"], []):
            n_annotations += 1
            annotations.append({
                "id": n_annotations,
                "result": [{"from_name": LS_FROM, "to_name": LS_TO, "type": "choices",
                            "value": {"choices": ["Yes" if value == "yes" else "No"]}}],
                "was_cancelled": False, "berds_annotator": annotator, "created_at": _iso(at)})
        item = {"data": {"question": p["question"], "perspective": p["perspective"], "passage": p["document"],
                         "title": p.get("title") or "", "qid": p["qid"], "pair": p["pair"], "berds_task": task.id},
                "annotations": annotations}
        if annotations:
            item["meta"] = {META_ANNOTATORS: {str(a["id"]): a["berds_annotator"] for a in annotations}}
        if judge_predictions:
            item["predictions"] = [{"model_version": task.judge_id, "result": [
                {"from_name": LS_FROM, "to_name": LS_TO, "type": "choices",
                 "value": {"choices": ["Yes" if p["judge_label"] else "No"]}}]}]
        items.append(item)
    out = Path(out)
    write_json(out, items)
    config = out.with_name(out.name.removesuffix(".json") + ".config.xml")
    write_text(config, LABEL_STUDIO_CONFIG)
    return len(items), n_annotations, config


def _iso(at: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _annotator_of(annotation: dict[str, Any], exported: dict[str, Any]) -> str:
    """Who gave a Label Studio annotation: berds' own field (berds' export file itself), else the annotator
    berds exported it as (its ``import_id`` in the task's ``meta.berds_annotators``, ``exported`` here: what
    Label Studio's export gives back), else ``completed_by``: ``label-studio:<user id>``. The plain JSON export
    writes the id; a snapshot export with ``completed_by`` expanded writes an object with id and email, and
    takes the id too, so one person has one name whichever export is imported (email/username only without
    an id)."""
    name = annotation.get("berds_annotator")
    if isinstance(name, str) and name.strip():
        return name
    import_id = annotation.get("import_id")
    if import_id is not None and str(import_id) in exported:
        return exported[str(import_id)]
    who = annotation.get("completed_by")
    if isinstance(who, dict):
        who = who.get("id") if who.get("id") is not None else (who.get("email") or who.get("username"))
    if isinstance(who, (int, str)) and not isinstance(who, bool) and str(who).strip():
        return f"label-studio:{who}"
    raise ValueError("names no annotator (no 'completed_by')")


def _choice_of(annotation: dict[str, Any]) -> str | None:
    """yes/no from an annotation's ``result`` (the ``supports`` choices); None when it holds none."""
    result = annotation.get("result")
    if not isinstance(result, list):
        raise ValueError("has no 'result' list")
    picked = None
    for region in result:
        if not isinstance(region, dict) or region.get("type") != "choices" or region.get("from_name") != LS_FROM:
            continue
        choices = (region.get("value") or {}).get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or choices[0] not in LS_CHOICES:
            raise ValueError(f"'{LS_FROM}' must hold one choice, Yes or No, got {choices!r}")
        picked = LS_CHOICES[choices[0]]
    return picked


def _store_answers(task: LabelTask, path: Path, wanted: dict[tuple[str, str], str], counts: Counter, *,
                   replace: bool, source: str) -> dict[str, int]:
    """Put ``(pair, annotator) -> yes/no`` into the task's store: an equal stored label counts as ``same``; a
    different one is refused (all of them listed first) unless ``replace``."""
    store = LabelStore(task.db_path, task.id)
    have = {(p, a): v for p, a, v, _, _ in store.rows()}
    clashes = [(p, a, have[(p, a)], v) for (p, a), v in wanted.items() if have.get((p, a)) not in (None, "skip", v)]
    if clashes and not replace:
        shown = "; ".join(f"{a} on pair {p}: stored {old}, file {new}" for p, a, old, new in clashes[:5])
        raise BerdsError(f"{len(clashes)} label(s) in {path} differ from the annotator's stored label ({shown}) — "
                         "pass --replace to take the file's")
    for (pair, annotator), value in wanted.items():
        old = have.get((pair, annotator))
        if old == value:
            counts["same"] += 1
            continue
        store.put(pair, annotator, value, source=source)
        counts["replaced" if old not in (None, "skip") else "added"] += 1
    return dict(counts)


def import_tsv(task: LabelTask, path: str | Path, *, annotator: str, replace: bool = False) -> dict[str, int]:
    """A labelled-pairs TSV (an earlier export, a colleague's labels) into the store as ``annotator``'s labels.
    Each row must be a pair of this task — the same question id, perspective and passage text (the judge's) —
    or the file is refused naming the line; a pair listed twice with both labels is refused too."""
    from berds.trust.labelling.task import pair_id
    from berds.trust.labels import read_labelled_pairs

    annotator = check_annotator(annotator)
    labelled = read_labelled_pairs(path)
    pairs = task.by_id()
    wanted: dict[tuple[str, str], str] = {}
    lines: dict[str, int] = {}
    for row in labelled:
        key = pair_id(row.id, row.perspective, row.document)
        if key not in pairs:
            raise InputError("not a pair of this task: no pair has this question id, perspective and passage text",
                             path=path, line=row.line, record=row.id or None,
                             fix=f"import only labels of the pairs {task.folder} was sampled with (the document column "
                                 "must be the passage as the judge saw it)")
        value = "yes" if row.label else "no"
        if wanted.get((key, annotator), value) != value:
            raise InputError(f"labels this pair {value} and, on line {lines[key]}, the other way", path=path,
                             line=row.line, record=row.id or None)
        wanted[(key, annotator)] = value
        lines.setdefault(key, row.line)
    return _store_answers(task, Path(path), wanted, Counter(added=0, same=0, replaced=0), replace=replace, source="tsv")


def import_label_studio(task: LabelTask, path: str | Path, *, replace: bool = False) -> dict[str, int]:
    """Read Label Studio's JSON export (a list of tasks with ``data`` and ``annotations``) back into the store.

    Tasks must carry this task's ``berds_task`` and a ``pair`` of it (as ``export_label_studio`` wrote them); a
    file from another task, run or judge is refused whole, before anything is stored. Cancelled annotations and
    ones without a choice are counted and left out. An annotator's earlier label that differs is refused unless
    ``replace``. Returns counts: ``added``, ``same``, ``replaced``, ``cancelled``, ``empty``."""
    from berds.io import read_json

    path = Path(path)
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError("expected Label Studio's JSON export: a list of tasks", path=path)
    pairs = task.by_id()
    wanted: dict[tuple[str, str], str] = {}
    counts = Counter(added=0, same=0, replaced=0, cancelled=0, empty=0)
    for index, item in enumerate(data):
        where = f"task {index} (0-based)"
        item_data = item.get("data") if isinstance(item, dict) else None
        if not isinstance(item_data, dict):
            raise InputError(f"{where} has no 'data' object", path=path)
        if item_data.get("berds_task") != task.id:
            raise InputError(f"{where} belongs to another labelling task (berds_task "
                             f"{str(item_data.get('berds_task'))[:12]}..., this task is {task.id[:12]}...) — its pairs "
                             "come from another sample, run or judge", path=path,
                             fix=f"import it into the task it was exported from, not {task.folder}")
        pair = item_data.get("pair")
        if pair not in pairs:
            raise InputError(f"{where}: pair {pair!r} is not in this task", path=path)
        meta = item.get("meta")
        exported = meta.get(META_ANNOTATORS) if isinstance(meta, dict) else None
        if exported is not None and not (isinstance(exported, dict) and all(
                isinstance(v, str) for v in exported.values())):
            raise InputError(f"{where}: meta.{META_ANNOTATORS} must map annotation ids to annotator names",
                             path=path)
        for a_index, annotation in enumerate(item.get("annotations") or []):
            try:
                if not isinstance(annotation, dict):
                    raise ValueError("is not an object")
                if annotation.get("was_cancelled"):
                    counts["cancelled"] += 1
                    continue
                value = _choice_of(annotation)
                if value is None:
                    counts["empty"] += 1
                    continue
                annotator = check_annotator(_annotator_of(annotation, exported or {}))
            except (ValueError, BerdsError) as exc:
                raise InputError(f"{where}, annotation {a_index}: {exc}", path=path) from None
            key = (pair, annotator)
            if wanted.get(key, value) != value:
                raise InputError(f"{where}: {annotator} labelled pair {pair} both yes and no in this file", path=path)
            wanted[key] = value
    return _store_answers(task, path, wanted, counts, replace=replace, source="label-studio")
