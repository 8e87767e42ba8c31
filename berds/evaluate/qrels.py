"""Judgements as TREC diversity qrels, and diversity measures through ir_measures.

A berds evaluation judges every (perspective, passage) pair of the top k passages. Written as qrels with the
perspectives as *subtopics* -- one line ``qid subtopic docid rel`` per judged pair, the layout of the TREC Web
track's diversity qrels that ``ndeval`` reads -- any IR toolkit's diversity measures run on it. Subtopics are
the 1-based positions of the question's gold perspectives; ``rel`` is the judge's label (1/0); a passage
retrieved at several ranks gets one line per subtopic (its labels agree: same text, same verdict).

``berds eval --measure alpha_nDCG@10 --measure ERR_IA@10 --measure StRecall@10`` computes measures with
ir_measures (its ``pyndeval`` provider) over these qrels and the run's ranking; nothing is hand-written here.
ndeval's rules apply: a subtopic counts only when some judged passage supports it, so ``StRecall@k`` is the
share of *supported* perspectives covered -- not MRecall's share of all gold perspectives -- and the ideal
ranking of alpha-nDCG / ERR-IA is built (greedily) from the judged passages only. Runs evaluated together
are therefore measured against their judgements pooled (``pool_qrels``, TREC pooling; ``--qrels-pool runs``,
the default), so that every run is normalised by the same ideal; ``--qrels-pool single`` measures each run
against its own judgements.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from berds.errors import BerdsError, InputError
from berds.runs import fields_intact, id_flaw, one_token

QrelRow = tuple[str, str, str, int]  # (qid, subtopic, docid, rel)
RunRow = tuple[str, str, int]        # (qid, docid, rank)

# A question berds evaluated with no passage to judge (an empty ranking, --allow-short) has no judgement, so no qrels
# line: ir_measures (and trec_eval, PyTerrier) would leave it out of their averages, while berds counts it
# (MRecall 0, Precision 0). One line ``qid 1 NO_PASSAGE_JUDGED 0`` puts it in the qrels; a question of the qrels
# that the run lacks scores 0 there, as in berds. (Its passage id is no passage: nothing retrieved matches it.)
NO_PASSAGE_JUDGED = "berds:no-passage-judged"


def unjudged_rows(evaluated: Iterable[str], rows: Sequence[QrelRow]) -> list[QrelRow]:
    """The placeholder line (``NO_PASSAGE_JUDGED``) of every evaluated question that ``rows`` do not hold."""
    judged = {q for q, _, _, _ in rows}
    return [(q, "1", NO_PASSAGE_JUDGED, 0) for q in dict.fromkeys(evaluated) if q not in judged]


def evaluated_questions(judgements: str | Path) -> list[str]:
    """The questions of the evaluation a ``judgements.jsonl`` belongs to: ``per_question`` of the ``metrics.json``
    berds eval writes beside it (none when there is no such file)."""
    metrics = Path(judgements).parent / "metrics.json"
    if not metrics.is_file():
        return []
    from berds.io import read_json

    try:
        per_question = read_json(metrics).get("per_question")
    except (ValueError, OSError, AttributeError):
        raise InputError("is not the metrics.json berds eval writes", path=metrics,
                         fix="evaluate the run again (berds eval) or pass judgements.jsonl from a folder without it"
                         ) from None
    return [str(q) for q in per_question] if isinstance(per_question, dict) else []


def check_measures(names: Sequence[str], *, depth: int | None = None) -> list[Any]:
    """Parse measure names with ir_measures (``alpha_nDCG@10``, ``ERR_IA@10``, ``StRecall@10``, ``MRecall@5``, ...).

    ``depth``: how many ranks are judged (the largest ``--k``). Only judged passages reach the measures, so a
    cut-off beyond it would be computed on a shorter list under a deeper name (alpha_nDCG@10 of 5 passages):
    refused, naming the ``--k`` that judges deep enough."""
    if not names:
        return []
    from berds.lazy import require

    ir_measures = require("ir_measures", extra="analysis", purpose="diversity measures (--measure)")
    from berds.evaluate.measures import register

    register()  # BERDS' own MRecall@k / BERDS_P@k, by name (berds/evaluate/measures.py)
    out = []
    for name in names:
        try:
            measure = ir_measures.parse_measure(name)
            measure.validate_params()  # (ir_measures asserts: a required cutoff missing)
            out.append(measure)
        except (NameError, ValueError, SyntaxError, TypeError, AssertionError) as exc:
            raise BerdsError(f"unknown --measure {name!r} ({exc}) — use ir_measures names such as alpha_nDCG@10, "
                             "ERR_IA@10, StRecall@10 (https://ir-measur.es)") from None
        cutoff = measure.params.get("cutoff")
        if depth is not None and cutoff is not None and cutoff > depth:
            raise BerdsError(f"--measure {name} needs the top {cutoff} passages judged, but --k judges only the "
                             f"top {depth} — add {cutoff} to --k (e.g. --k {depth},{cutoff})")
    return out


def read_judgements(path: str | Path, *, unjudged: bool = False) -> tuple[list[QrelRow], list[RunRow]]:
    """Qrels and the ranking from an evaluation's ``judgements.jsonl`` (or a folder holding one). ``unjudged``:
    add the ``NO_PASSAGE_JUDGED`` line of each question the evaluation scored without judging a passage (what
    every qrels berds hands to a measure does, so its averages run over berds' questions)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.rglob("judgements.jsonl"))
        if len(found) > 1:  # e.g. a run folder judged by two judges: say which, so one can be picked
            where = ", ".join(str(f.parent.relative_to(path)) for f in found[:5]) + (", ..." if len(found) > 5 else "")
            raise InputError(f"holds {len(found)} judgements.jsonl files, expected one ({where})", path=path,
                             fix=f"pass the folder of the evaluation you want, e.g. {found[0].parent}")
        if not found:
            raise InputError("holds no judgements.jsonl", path=path,
                             fix="pass the evaluation folder `berds eval` wrote (or the judgements.jsonl itself)")
        path = found[0]
    if not path.is_file():
        raise InputError("no such judgements file or evaluation folder", path=path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("not UTF-8 text", path=path, line=data.count(b"\n", 0, exc.start) + 1,
                         fix="pass the judgements.jsonl `berds eval` wrote") from None
    lines = [line for line in text.splitlines() if line.strip()]
    try:  # one C-level parse of the whole file; on any error, parse line by line to name the bad line
        records = json.loads("[" + ",".join(lines) + "]")
        fields = [_judgement_fields(r) for r in records]
    except (ValueError, KeyError, TypeError, RecursionError):
        fields = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            record = None
            try:
                record = json.loads(line)
                fields.append(_judgement_fields(record))
            except RecursionError:
                raise InputError("JSON nested too deeply (over about 1,000 levels)", path=path, line=line_number,
                                 fix='expected {"qid", "docid", "rank", "perspective", "label"} as berds eval writes'
                                 ) from None
            except (ValueError, KeyError, TypeError) as exc:
                if isinstance(record, dict) and "ctxs" in record:  # (a run given for its judgements)
                    raise InputError("this is a run (its record has 'ctxs'), not the judgements of an evaluation",
                                     path=path, line=line_number,
                                     fix="pass the evaluation folder `berds eval` wrote (or its judgements.jsonl)"
                                     ) from None
                raise InputError(f"not a judgement record ({type(exc).__name__}: {exc})", path=path, line=line_number,
                                 fix='expected {"qid", "docid", "rank", "perspective", "label"} as berds eval writes'
                                 ) from None
    labels: dict[tuple[str, str, str], int] = {}
    ranks: dict[tuple[str, int], str] = {}
    for qid, docid, rank, subtopic, label in fields:
        key = (qid, subtopic, docid)
        labels[key] = max(label, labels.get(key, 0))
        ranks.setdefault((qid, rank), docid)
    if not labels:
        raise InputError("holds no judgements", path=path)
    rows = [(q, s, d, r) for (q, s, d), r in labels.items()]
    if unjudged:
        rows += unjudged_rows(evaluated_questions(path), rows)
    return rows, [(q, d, rank) for (q, rank), d in ranks.items()]


def _judgement_fields(r: Mapping[str, Any]) -> tuple[str, str, int, str, int]:
    """``(qid, docid, rank, subtopic, rel)`` of one judgements.jsonl record; int() would quietly turn a label of 0.9
    into 0 and a perspective of -1 into subtopic 0, so anything but berds' own values is refused."""
    rank, perspective, label = r["rank"], r["perspective"], r["label"]
    if type(rank) is not int or rank < 1:
        raise ValueError(f"'rank' must be an integer >= 1, got {rank!r}")
    if type(perspective) is not int or perspective < 0:
        raise ValueError(f"'perspective' must be an index >= 0, got {perspective!r}")
    if label not in (0, 1) or isinstance(label, float):
        raise ValueError(f"'label' must be 0 or 1, got {label!r}")
    return str(r["qid"]), str(r["docid"]), rank, str(perspective + 1), int(label)


def qrels_from_judgements(judgements: Iterable[Any], evaluated: Iterable[str] = ()
                          ) -> tuple[list[QrelRow], list[RunRow]]:
    """Qrels and ranking from ``berds.types.Judgement`` objects (``EvalResult.judgements(run)``); ``evaluated``
    (``result.per_question``): the evaluation's questions, those without a judgement get ``NO_PASSAGE_JUDGED``."""
    labels: dict[tuple[str, str, str], int] = {}
    ranks: dict[tuple[str, int], str] = {}
    for j in judgements:
        key = (j.qid, str(j.perspective_index + 1), j.docid)
        labels[key] = max(int(j.label), labels.get(key, 0))
        ranks.setdefault((j.qid, j.rank), j.docid)
    rows = [(q, s, d, r) for (q, s, d), r in labels.items()]
    return rows + unjudged_rows(evaluated, rows), [(q, d, rank) for (q, rank), d in ranks.items()]


def check_trec_ids(path: str | Path, run: Any) -> None:
    """Refuse, before judging, a run whose question or passage ids hold whitespace: its qrels could not be written
    (``qrels_text`` would refuse them only after every pair was judged)."""
    for qid, hits in run.hits.items():
        bad = [qid] if not one_token(qid) else [h.passage.id for h in hits if not one_token(h.passage.id)][:1]
        if bad:
            raise InputError(f"question {qid!r}: the id {bad[0]!r} holds {id_flaw(bad[0])}, which TREC qrels cannot carry "
                             "(--qrels)", path=path, fix="give ids without whitespace or NUL characters, or drop --qrels")


def qrels_text(rows: Sequence[QrelRow], *, source: str | Path | None = None) -> str:
    """``qid subtopic docid rel`` lines; ids holding whitespace (which the format cannot carry) are refused, naming
    ``source`` (the judgements they came from) when given."""
    text = "".join([f"{q} {s} {d} {r}\n" for q, s, d, r in rows])
    if not fields_intact(text, len(rows), 4):  # one C-level pass instead of a check per id
        bad = next((q, d) for q, _, d, _ in rows if not (one_token(q) and one_token(d)))
        message = (f"question/passage id {bad[0]!r} / {bad[1]!r} holds "
                   f"{id_flaw(bad[0] if not one_token(bad[0]) else bad[1])}, which the TREC qrels format cannot carry")
        if source is not None:
            raise InputError(message, path=source, fix="evaluate a run whose ids hold no whitespace or NUL characters")
        raise BerdsError(message)
    return text


def write_qrels(rows: Sequence[QrelRow], path: str | Path, *, source: str | Path | None = None) -> int:
    """Write ``qid subtopic docid rel`` lines atomically; returns the number of lines."""
    from berds.io import atomic_write

    text = qrels_text(rows, source=source)
    with atomic_write(path) as f:
        f.write(text)
    return len(rows)


def flat_qrels(rows: Sequence[QrelRow]) -> list[QrelRow]:
    """Ordinary (non-diversity) qrels: one ``qid 0 docid rel`` line per judged passage, ``rel`` 1 when it supports
    any perspective — the relevance berds' Precision@k counts. Tools that read TREC qrels without subtopics (ranx,
    ir_measures' P/nDCG/RR, trec_eval) keep one line per (qid, docid): given the subtopic file, they took the label
    of whichever perspective came last."""
    best: dict[tuple[str, str], int] = {}
    for q, _, d, r in rows:
        best[(q, d)] = max(r, best.get((q, d), 0))
    return [(q, "0", d, r) for (q, d), r in best.items()]


def export_qrels(source: str | Path, out: str | Path, *, flat: bool = False) -> int:
    """``berds export qrels``: an evaluation folder or judgements.jsonl -> a TREC diversity qrels file (perspectives
    as subtopics, for ndeval's measures), or with ``flat`` ordinary qrels (``flat_qrels``)."""
    rows, _ = read_judgements(source, unjudged=True)
    return write_qrels(flat_qrels(rows) if flat else rows, out, source=source)


def export_run(source: str | Path, out: str | Path, *, tag: str | None = None) -> int:
    """``berds export run``: a run (folder or BERDS jsonl) as a TREC run file in the order berds judges it, to go
    with ``export_qrels``. Rank r of n gets the score n − r + 1, so trec_eval, ir_measures and ranx read that very
    ranking: a jsonl without scores has every score 0.0, and TREC tools put tied passages in docid order. Returns
    the number of lines (a passage kept twice in a ranking is written once, at its first rank)."""
    from berds.runs import load_run, write_trec
    from berds.types import Hit, Run

    run = load_run(source, allow_empty=True, duplicates="keep")  # (write_trec keeps a repeat's first rank)
    hits = {q: [Hit(h.passage, float(len(hs) - i)) for i, h in enumerate(hs)] for q, hs in run.hits.items()}
    write_trec(Run(run.questions, hits, run.manifest, run.name), out, tag=tag)
    return sum(len({h.passage.id for h in hs}) for hs in hits.values())


def compute_measures(measures: Sequence[Any | str], qrels: Sequence[QrelRow], ranking: Sequence[RunRow]
                     ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(mean over questions, per question)`` of ir_measures ``measures`` for qrels + ranking.

    The ranking becomes scores ``-rank`` (best first); qrels' subtopics go into ir_measures' ``iteration``
    field, which is where its ndeval provider reads subtopics from."""
    parsed = check_measures([str(m) for m in measures])
    if not parsed:
        return {}, {}
    import ir_measures

    qrel_objects = [ir_measures.Qrel(q, d, int(r), s) for q, s, d, r in qrels]
    run_objects = [ir_measures.ScoredDoc(q, d, float(-rank)) for q, d, rank in ranking]
    per_question: dict[str, dict[str, float]] = {}
    try:
        for metric in ir_measures.iter_calc(parsed, qrel_objects, run_objects):
            per_question.setdefault(metric.query_id, {})[str(metric.measure)] = float(metric.value)
    except ValueError as exc:  # e.g. a measure no installed provider supports
        raise BerdsError(f"ir_measures cannot compute {', '.join(map(str, parsed))}: {str(exc).splitlines()[0]} — "
                         "pip install 'berds[analysis]' (ir-measures + pyndeval)") from None
    names = [str(m) for m in parsed]
    means = {name: sum(row.get(name, 0.0) for row in per_question.values()) / len(per_question)
             for name in names} if per_question else {name: float("nan") for name in names}
    return means, per_question


QRELS_POOLS = ("runs", "single")


def pool_qrels(row_sets: Iterable[Sequence[QrelRow]]) -> list[QrelRow]:
    """TREC pooling of several runs' judgements (one judge): every judged (question, perspective, passage) of
    any run, supported when any judgement of it says so (one judge gives a passage one verdict per
    perspective). Evaluated against this pool, the ideal ranking of alpha-nDCG / ERR-IA is the same for every
    run, so the runs' values compare; with each run's own judgements a run that found fewer supporting
    passages is normalised by a smaller ideal."""
    labels: dict[tuple[str, str, str], int] = {}
    for rows in row_sets:
        for q, sub, d, r in rows:
            labels[(q, sub, d)] = max(int(r), labels.get((q, sub, d), 0))
    return [(q, sub, d, r) for (q, sub, d), r in labels.items()]


def add_measures_to_outputs(files: Mapping[str, Path], measures: Sequence[str], qrels_out: str | Path | None = None,
                            *, pooled: Sequence[QrelRow] | None = None, pool: str = "single") -> dict[str, float]:
    """After ``berds eval`` wrote an evaluation: compute ``measures`` from its judgements.jsonl, store them in its
    metrics.json (``"ir_measures"``: mean and per question) and write the qrels to ``qrels_out`` when given.
    ``pooled``: the qrels to measure against (``pool_qrels`` of every run evaluated together; ``pool`` names
    it in metrics.json) instead of this run's own judgements (``qrels_out`` always gets the run's own)."""
    from berds.io import read_json, write_json

    rows, ranking = read_judgements(files["judgements"], unjudged=True)
    if qrels_out is not None:
        write_qrels(rows, qrels_out)
    if not measures:
        return {}
    means, per_question = compute_measures(measures, pooled if pooled is not None else rows, ranking)
    # A run folder gets metrics.json twice: at its top and beside the judgements (eval/<judge>/); update both.
    for target in dict.fromkeys([Path(files["metrics"]), Path(files["judgements"]).parent / "metrics.json"]):
        if target.exists():
            metrics = read_json(target)
            metrics["ir_measures"] = {"mean": means, "per_question": per_question,
                                      "provider": _providers(means), "questions": len(per_question),
                                      "qrels": pool if pooled is not None else "single",
                                      **({"qrels_lines": len(pooled)} if pooled is not None else {})}
            write_json(target, metrics)
    return means


def _providers(means: Mapping[str, float]) -> str:
    """Which ir_measures providers computed the measures (berds' own through its runtime provider)."""
    ours = [n for n in means if n.split("@")[0] in ("MRecall", "BERDS_P")]
    parts = (["pyndeval"] if len(ours) < len(means) else []) + (["runtime: berds.evaluate.measures"] if ours else [])
    return f"ir_measures ({', '.join(parts)})"


def qrels_paths(qrels: str | Path, run_paths: Sequence[str | Path]) -> list[Path]:
    """``--qrels OUT``: the file itself for one run; for several, ``OUT/<name>.qrels`` with each run's whole name,
    parents added where two would collide (the names of ``berds eval --out``'s sub-folders). Cutting the name at
    its first dot gave ``minilm-mmr0.5`` and ``minilm-mmr0.75`` one file, and two runs called ``run`` one file."""
    from berds.evaluate.evaluation import distinct_names
    from berds.runs import run_stem

    if len(run_paths) == 1:
        return [Path(qrels)]
    paths = [Path(p) for p in run_paths]
    return [Path(qrels) / f"{name}.qrels" for name in distinct_names([run_stem(p) for p in paths], paths)]


def measures_table(rows: Sequence[tuple[str, Mapping[str, Mapping[str, float]], Mapping[str, float]]],
                   pool: str | None = None) -> Any:
    """A rich table: run and the ir_measures means, in percent; ``pool`` says in the title which qrels the
    measures used. MRecall@k / Prec@k are left out: ``berds eval`` prints them in the table just above."""
    from rich.table import Table

    measure_names = list(dict.fromkeys(k for _, _, measures in rows for k in measures))
    qrels = ({"runs": f"the judgements of all {len(rows)} runs pooled as qrels",
              "single": "each run's own judgements as qrels"}.get(pool or "", "the judgements as qrels"))
    table = Table(title=f"diversity measures (ir_measures over {qrels})", pad_edge=False)
    table.add_column("run", overflow="fold")
    for title in measure_names:
        # "alpha_nDCG" over "@10": the cut-off on a line of its own, and never narrower than the name (the run
        # name folds instead), so 8 columns fit in 80 with every header word whole
        lines = title.replace("@", "\n@", 1)
        table.add_column(lines, justify="right", min_width=max(map(len, lines.split("\n"))))
    for run_name, _, measures in rows:
        table.add_row(run_name, *[f"{100 * measures[n]:.1f}" if n in measures else "" for n in measure_names])
    return table
