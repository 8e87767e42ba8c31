"""Paper-style reports: markdown and CSV tables, and PNG figures in the study's style.

``build_report(runs, judge, out)`` judges the runs (through the judgement cache), and writes

* ``metrics.md`` / ``metrics.csv``          — MRecall@k and Precision@k per run (and per dataset), in %,
* ``mrecall_curve.csv`` / ``.png``         — MRecall@k for k = 1..depth, one line per run,
* for every analysis result given (``berds analyze ... --out X.json``): its table as ``<kind>.md/.csv``
  and its figure — stacked bars for leaning (Fig. 2), Δ per setting for sycophancy (Fig. 3),
* ``report.md``                             — all of the above in one page, figures linked.

Figures are drawn with matplotlib's object API on the Agg canvas (no display, no global pyplot state),
so reports work on servers and inside notebooks alike.
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from berds.errors import BerdsError

# Colours of the leaning categories (supporting only, opposing only, both, neither) and of the two sides.
LEANING_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#B0B0B0")
SIDE_COLOURS = {"supporting": "#4C72B0", "opposing": "#DD8452"}


# -------------------------------------------------------------------------------------------- tables


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table; text columns left-aligned, numeric columns right-aligned."""
    def numeric(col: int) -> bool:
        cells = [r[col] for r in rows if col < len(r) and r[col] not in ("", "n/a", "-")]
        return bool(cells) and all(_is_number(c) for c in cells)

    def esc(cell: Any) -> str:
        return str(cell).replace("|", "\\|").replace("\n", " ")

    align = ["---:" if numeric(i) else ":---" for i in range(len(header))]
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _is_number(text: str) -> bool:
    try:
        float(text.removesuffix("*"))  # (a value --baseline marks as significant is still a number)
    except ValueError:
        return False
    return True


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def write_table(stem: str | Path, header: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "",
                md_rows: Sequence[Sequence[Any]] | None = None, notes: Sequence[str] = ()) -> dict[str, Path]:
    """Write ``STEM.csv`` and ``STEM.md`` (atomically; ``md_rows``: other cells for the markdown, e.g. marked
    values; ``notes``: lines under the markdown table, what a reader of the file must know to read it); returns
    their paths."""
    from berds.io import write_text

    stem = Path(stem)
    paths = {"csv": stem.with_name(stem.name + ".csv"), "md": stem.with_name(stem.name + ".md")}
    write_text(paths["csv"], csv_text(header, rows))
    write_text(paths["md"], (f"### {title}\n\n" if title else "")
               + markdown_table(header, [[str(c) for c in r] for r in (rows if md_rows is None else md_rows)])
               + ("\n" + "".join(f"- Note: {n}\n" for n in notes) if notes else ""))
    return paths


# ------------------------------------------------------------------------------------------- figures


def _figure(width: float, height: float) -> Any:
    from berds.lazy import require

    require("matplotlib", extra="analysis", purpose="report figures")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path, *, layout: bool = True) -> Path:
    from berds.io import atomic_write

    path = Path(path)
    if layout:
        fig.tight_layout()
    # the titles also go into the PNG's own Title field: a figure copied out of the report keeps its judge, split, n
    titles = [t.get_text() for t in [getattr(fig, "_suptitle", None), *(ax.title for ax in fig.axes)] if t is not None]
    with atomic_write(path, "wb", encoding=None) as f:
        fig.savefig(f, format="png", metadata={"Title": " | ".join(t for t in titles if t) or path.stem,
                                               "Software": "berds"})
    return path


def figure_caption(judge: str | None, n: int | None = None, split: str | None = None) -> str:
    """What every figure names in its title: the judge (short form), the split and the number of questions."""
    from berds.judges.validation import short_judge_name

    parts = [f"judge {short_judge_name(judge)}" if judge else "judge not recorded"]
    if split:
        parts.append(f"{split} split")
    if n is not None:
        parts.append(f"n={n} questions")
    return ", ".join(parts)


def provenance_table(runs: Sequence[Any], labels: Sequence[str], paths: Sequence[Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows saying where each run came from (its manifest): retriever (or the imported TREC file and
    its sha256), reranker, corpus and its fingerprint, index, k, question set and split."""
    header = ["run", "folder", "retriever", "rerank", "corpus", "index", "k", "questions"]
    rows = []
    for run, label, path in zip(runs, labels, paths):
        m = run.manifest or {}
        retriever = m.get("retriever") or {}
        imported = m.get("imported") or {}
        if imported:
            made = f"imported {Path(str(imported.get('path', '?'))).name} (sha256 {str(imported.get('sha256', ''))[:12]})"
        else:
            made = str(retriever.get("spec") or retriever.get("name") or "not recorded")
        rerank = m.get("rerank") or {}
        corpus = m.get("corpus") or {}
        index = m.get("index") or {}
        qs = m.get("question_set") or {}
        rows.append([label, str(path), made,
                     f"{rerank.get('method')}" + (f" (λ={rerank['lambda']})" if "lambda" in rerank else "") if rerank else "-",
                     f"{corpus.get('path')} ({str(corpus.get('fingerprint', ''))[:12]})" if corpus else "not recorded",
                     str(index.get("path") if isinstance(index, dict) else index or "-"),
                     str(m.get("k", m.get("max_depth", "?"))),
                     f"{qs.get('source', '?')}" + (f" ({qs['split']})" if qs.get("split") else "") if qs else "?"])
    return header, rows


def run_split(run: Any) -> str | None:
    """The question split a run was retrieved for, when its manifest says (``question_set.split``)."""
    qs = (getattr(run, "manifest", None) or {}).get("question_set") or {}
    return qs.get("split") if isinstance(qs, dict) else None


def plot_leaning(result: Any, path: str | Path, *, split: str | None = None) -> Path:
    """Horizontal stacked bars: for each run, the share of questions in each leaning category."""
    from berds.evaluate.analyses.leaning import CATEGORIES, row_shares

    labels = [r["run"] for r in result.rows]
    fig = _figure(7.5, 0.55 * len(labels) + 1.6)
    ax = fig.add_subplot(1, 1, 1)
    left = np.zeros(len(labels))
    for cat, colour in zip(CATEGORIES, LEANING_COLOURS):
        values = np.array([100 * row_shares(r)[cat] for r in result.rows])
        values = np.nan_to_num(values)
        bars = ax.barh(labels, values, left=left, color=colour, label=cat, edgecolor="white")
        for bar, v in zip(bars, values):
            if v >= 7:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2, f"{v:.0f}",
                        ha="center", va="center", fontsize=8, color="white")
        left += values
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"% of two-perspective questions (top {result.k})")
    ax.invert_yaxis()
    n = {r.get("questions") for r in result.rows}
    fig.suptitle(f"Leaning of the top {result.k} — {figure_caption(result.judge, n.pop() if len(n) == 1 else None, split)}",
                 fontsize=9)
    ax.legend(ncol=4, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, path)


QUERY_COLOURS = {"question": "#9e9e9e", "supporting": "#2e7d32", "opposing": "#c62828"}


def plot_sycophancy(result: Any, path: str | Path) -> Path:
    """The study's Fig. 3: Δ (%) per setting, one bar per query (question, supporting, opposing
    perspective), annotated with the p/n document counts."""
    settings = list(dict.fromkeys(r["label"] for r in result.rows))
    queries = [q for q in QUERY_COLOURS if any(r["query"] == q for r in result.rows)]
    fig = _figure(max(5.0, 1.6 * len(settings) + 2), 3.8)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(len(queries), 1)
    x = np.arange(len(settings))
    for i, query in enumerate(queries):
        offset = (i - (len(queries) - 1) / 2) * width
        rows = {r["label"]: r for r in result.rows if r["query"] == query}
        values = [100 * rows[s]["delta"] if s in rows and rows[s]["delta"] is not None else 0.0 for s in settings]
        bars = ax.bar(x + offset, values, width, color=QUERY_COLOURS[query], label=f"query: {query}")
        for bar, s in zip(bars, settings):
            row = rows.get(s)
            if row is None:
                continue
            text = "n/a" if row["delta"] is None else f"{row['p_docs']}/{row['n_docs']}"
            y = bar.get_height()
            ax.text(bar.get_x() + bar.get_width() / 2, y, text, ha="center", va="bottom" if y >= 0 else "top", fontsize=7)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels(settings, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Δ = (p − n) / p  (%)")
    judges = {r.get("judge") for r in result.rows}
    ns = {r.get("questions") for r in result.rows}
    ax.set_title(f"Sycophancy: top {result.k}, bars annotated p/n documents\n"
                 f"{figure_caption(', '.join(sorted(j for j in judges if j)) or None, ns.pop() if len(ns) == 1 else None)}",
                 fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, path)


MRECALL_DIP_NOTE = ("MRecall@k counts a question when min(m, k) of its m perspectives are in the top k: at k < m "
                    "fewer are needed, so the curve can dip as k grows")


def plot_curves(curves: Mapping[str, Sequence[tuple[int, float]]], path: str | Path, *, ylabel: str = "MRecall@k (%)",
                title: str = "", note: str = "") -> Path:
    """One line per run: (k, value in [0, 1]) points, drawn in percent; k ticks are whole numbers, ``note`` a
    caption under the axes (e.g. ``MRECALL_DIP_NOTE``)."""
    from matplotlib.ticker import MaxNLocator

    fig = _figure(6.0, 4.3 if note else 4.0)
    ax = fig.add_subplot(1, 1, 1)
    markers = "osD^vP*X"
    for i, (label, points) in enumerate(curves.items()):
        ks = [p[0] for p in points]
        ax.plot(ks, [100 * p[1] for p in points], marker=markers[i % len(markers)], markersize=3.5, label=label)
    ax.set_xlabel("k")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # (k = 1.5 is no depth)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    if note:
        import textwrap

        fig.text(0.01, 0.01, textwrap.fill(note, 100), fontsize=6.5, color="#555555", va="bottom")
    ax.set_ylim(-2, 102)  # the whole 0-100 % scale, a line at 0 or 100 off the frame
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    if note:
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        return _save(fig, path, layout=False)
    return _save(fig, path)


def plot_tuning(rows: Sequence[Mapping[str, Any]], ks: Sequence[int], path: str | Path, *,
                parameter: str = "lambda", chosen: float | None = None, title: str = "") -> Path:
    """MRecall@k and Precision@k against λ (the grid of ``berds tune mmr``) or another ``parameter``, on a 0-100 %
    axis (an autoscaled one turned a 0.08-point change into a doubling). The un-reranked run (the row whose
    ``parameter`` is None) is a dotted line per metric, ``chosen`` a vertical line; curves with the same values
    share one line and one legend entry (one hid the other)."""
    grid = [r for r in rows if r.get(parameter) is not None]
    base = next((r for r in rows if r.get(parameter) is None), None)
    curves: dict[str, tuple[str, list[tuple[float, float]], float | None]] = {}
    for k in ks:
        for name, key in (("MRecall", "mrecall"), ("Precision", "precision")):
            curves[f"{name}@{k}"] = (f"{key}@{k}", [(float(r[parameter]), float(r[f"{key}@{k}"])) for r in grid],
                                     float(base[f"{key}@{k}"]) if base is not None else None)
    merged: dict[tuple, list[str]] = {}  # identical curves (and bases) drawn once, labelled with every name
    for label, (_, pts, b) in curves.items():
        merged.setdefault((tuple(pts), b), []).append(label)
    fig = _figure(6.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    symbol = "λ" if parameter in ("lambda", "lam") else parameter
    markers = "osD^vP*X"
    for i, ((pts, b), labels) in enumerate(merged.items()):
        line = ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker=markers[i % len(markers)],
                       markersize=4, label=" = ".join(labels),
                       linestyle="-" if labels[0].startswith("MRecall") else "--")[0]
        if b is not None:
            ax.axhline(100 * b, color=line.get_color(), linestyle=":", linewidth=1)
    if base is not None:
        ax.plot([], [], color="grey", linestyle=":", label="original ranking (dotted)")
    if chosen is not None:
        ax.axvline(float(chosen), color="black", linewidth=0.8)
        ax.annotate(f"chosen {symbol}={chosen:g}", (float(chosen), 98), fontsize=7, ha="right", va="top",
                    rotation=90, xytext=(-2, 0), textcoords="offset points")
    ax.set_ylim(-2, 102)  # the whole 0-100 % scale, a line at 0 or 100 off the frame
    ax.set_xlabel(symbol)
    ax.set_ylabel("%")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="best")
    return _save(fig, path)


# -------------------------------------------------------------------------------------------- report


def metrics_rows(label: str, support: Mapping[str, np.ndarray], ks: Sequence[int],
                 datasets: Mapping[str, str]) -> list[list[str]]:
    """Rows ``[run, set, questions, MRecall@k..., Precision@k...]`` in percent, overall and per dataset."""
    from berds.evaluate.metrics import aggregate, question_metrics

    per_question = {qid: question_metrics(m, ks) for qid, m in support.items()}
    averages = aggregate(per_question, datasets)
    counts: dict[str, int] = {"all": len(per_question), "macro": len(per_question)}
    for qid in per_question:
        name = datasets.get(qid) or "-"
        counts[name] = counts.get(name, 0) + 1
    rows = []
    for name, avg in averages.items():
        rows.append([label, name, str(counts.get(name, "")),
                     *[f"{100 * avg[f'mrecall@{k}']:.1f}" for k in ks], *[f"{100 * avg[f'precision@{k}']:.1f}" for k in ks]])
    return rows


def mrecall_curve(support: Mapping[str, np.ndarray], depth: int) -> list[tuple[int, float]]:
    """Mean MRecall@k over questions for k = 1..depth."""
    from berds.evaluate.metrics import mrecall_at_k

    if not support:
        return []
    return [(k, float(np.mean([mrecall_at_k(m, k) for m in support.values()]))) for k in range(1, depth + 1)]


@dataclass
class Report:
    out: Path
    files: dict[str, Path] = field(default_factory=dict)
    sections: list[str] = field(default_factory=list)
    # the headline table (header, rows: overall metrics per run in %, `*` marking a significant difference) that
    # `berds report` prints — it printed only file paths before
    headline: tuple[list[str], list[list[str]]] | None = None


def result_judges(res: Any) -> tuple[str, ...]:
    """The judge ids a result records (sycophancy: per row), ``()`` for a file from an earlier berds."""
    judges = [res.judge] if getattr(res, "judge", None) else [r.get("judge") for r in res.rows if r.get("judge")]
    return tuple(dict.fromkeys(judges))


def _label_key(res: Any) -> str:
    return "label" if res.KIND == "sycophancy" else "run"


def _renamed(res: Any, taken: set[str]) -> Any:
    """``res`` with each run label that is already ``taken`` made distinct (``bm25#2``): tables and figures find
    a run's rows by its label, so two files naming a run alike showed the first one's numbers twice."""
    key = _label_key(res)
    renames: dict[str, str] = {}
    for label in dict.fromkeys(r[key] for r in res.rows):
        new, n = label, 1
        while new in taken or new in renames.values():
            n += 1
            new = f"{label}#{n}"
        renames[label] = new
    if all(a == b for a, b in renames.items()):
        return res
    import copy

    res = copy.copy(res)
    res.rows = [{**r, key: renames[r[key]]} for r in res.rows]
    if hasattr(res, "per_question"):
        res.per_question = {renames.get(k, k): v for k, v in res.per_question.items()}
    return res


def merge_results(results: Sequence[Any]) -> list[Any]:
    """Results of the same kind, depth/k and judge are merged into one (rows concatenated, run labels that repeat
    made distinct), in first-seen order. A coverage result is never merged: its union row belongs to its runs."""
    merged: list[Any] = []
    for res in results:
        key = (res.KIND, getattr(res, "k", None), getattr(res, "depth", None), result_judges(res))
        for i, m in enumerate(merged):
            if res.KIND != "coverage" and (m.KIND, getattr(m, "k", None), getattr(m, "depth", None),
                                           result_judges(m)) == key:
                res = _renamed(res, {r[_label_key(m)] for r in m.rows})
                rows = m.rows + res.rows
                extra = {}
                if hasattr(m, "per_question"):
                    extra["per_question"] = {**m.per_question, **res.per_question}
                if hasattr(m, "judge"):
                    extra["judge"] = m.judge
                kwargs = {"k": m.k} if hasattr(m, "k") else {"depth": m.depth}
                merged[i] = type(m)(**kwargs, rows=rows, **extra)
                break
        else:
            merged.append(res)
    return merged


def judge_line(res: Any) -> str:
    """Which judge a result's numbers come from, for the report and the written table."""
    judges = result_judges(res)
    if not judges:
        return "Judge: not recorded (a result written by an earlier berds)."
    return "Judge: " + ", ".join(f"`{j}`" for j in judges) + "."


def build_report(
    run_paths: Sequence[str | Path],
    judge: str | Any | None,
    out: str | Path,
    *,
    ks: Sequence[int] = (5, 10),
    curve_depth: int | None = None,
    analyses: Sequence[str | Path | Any] = (),
    judge_options: Mapping[str, Any] | None = None,
    cache_path: str | Path | None = None,
    allow_short: bool = False,
    allow_unparsed: bool = False,
    progress: bool = False,
    title: str = "BERDS report",
    baseline: str | None = None,
    html: bool = False,
    corrected: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    human: Mapping[tuple[str, str, str], bool] | None = None,
    extra: Any = None,
) -> Report:
    """Judge ``run_paths`` (cached), and write tables, figures and ``report.md`` into ``out``.

    ``analyses`` are result files from ``berds analyze ... --out`` (or result objects). ``curve_depth``
    (default ``max(ks)``) is how far the MRecall@k curve goes; deeper curves judge more passages.
    ``baseline`` (a run's label or path) marks with ``*`` the overall values that differ significantly from
    it (paired permutation test, Holm-corrected; ``berds.evaluate.compare``) and adds the comparison table.
    ``html`` also writes ``report.html``, one self-contained page to browse (``berds.evaluate.report_html``);
    ``corrected`` (``berds.trust.ppi.page_estimates``) adds the runs' corrected estimates to its leaderboard, and
    ``human`` (``berds.trust.ppi.human_label_index``) the human labels to its grids.
    ``extra(out)`` writes more files that belong to this report and returns ``(files, markdown lines)``: they are
    recorded with the report's own (so a later report into ``out`` without them removes them) and the lines go
    into ``report.md`` after the runs (``berds report --labels``: the corrected estimates).
    """
    from berds.evaluate.analyses.common import judge_runs, run_labels
    from berds.judges.validation import judge_warning
    from berds.evaluate.analyses.results import load_result
    from berds.io import write_text
    from berds.runs import load_run

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ks = tuple(sorted({int(k) for k in ks}))
    if not ks or ks[0] < 1:
        raise BerdsError(f"--k values (ks=) must be positive integers, got {list(ks)}")
    if not run_paths and not analyses:
        raise BerdsError("nothing to report: give run folders and/or --analysis result files")
    if html and not run_paths:
        raise BerdsError("--html (html=) shows judged runs: give run folders")
    if baseline is not None and len(run_paths) < 2:  # (was ignored without a word)
        raise BerdsError("--baseline (baseline=) compares runs: give the baseline and at least one more run")
    report = Report(out)
    from berds import __version__

    md = [f"# {title}", "", f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by berds {__version__}."]
    splits: set[str | None] = set()

    if run_paths:
        if judge is None:
            raise BerdsError("reporting runs needs a judge: --judge NAME")
        depth = max(ks[-1], curve_depth or ks[-1])
        runs = [load_run(p, allow_empty=allow_short) for p in run_paths]
        labels = run_labels(runs, run_paths)
        splits = {run_split(run) for run in runs}
        md += ["", "## Runs", "", markdown_table(*provenance_table(runs, labels, run_paths))]
        if baseline is not None:  # (compared question by question)
            from berds.evaluate.analyses.common import check_same_question_per_id
            from berds.evaluate.compare import check_shared_questions, resolve_baseline

            check_same_question_per_id(runs, labels)
            check_shared_questions(runs, labels, resolve_baseline(baseline, labels, run_paths))
        results = judge_runs(runs, judge, depth, judge_options=judge_options, cache_path=cache_path,
                             allow_short=allow_short, allow_unparsed=allow_unparsed, progress=progress,
                             depth_option="--curve-depth" if depth > ks[-1] else "--k")
        header = ["run", "set", "questions", *[f"MRecall@{k}" for k in ks], *[f"Precision@{k}" for k in ks]]
        rows = []
        for label, run, res in zip(labels, runs, results):
            datasets = {qid: q.dataset for qid, q in run.questions.items()}
            rows += metrics_rows(label, res.support, ks, datasets)
        compared = None
        if baseline is not None:
            from berds.evaluate.compare import compare_results, metric_names, resolve_baseline

            compared = compare_results(results, labels, ks=ks, baseline=resolve_baseline(baseline, labels, run_paths))
        # the CSV keeps plain numbers (a marked "100.0*" read as text in pandas or R; compare.csv holds the tests);
        # the markdown marks the overall row of each run: header columns 3.. are the metrics
        marked = [list(row) for row in rows]
        for row in marked if compared is not None else ():
            for col, metric in enumerate(metric_names(ks), start=3):
                found = compared.find(row[0], metric) if row[1] == "all" else None
                if found is not None and found.significant:
                    row[col] += "*"
        report.files.update({f"metrics.{k}": v for k, v in write_table(out / "metrics", header, rows,
                                                                       md_rows=marked).items()})
        report.headline = (["run", "set", "n", *[f"MRecall@{k}" for k in ks], *[f"Prec@{k}" for k in ks]],
                           [[row[0] if row[1] == "all" else "", *row[1:]] for row in marked])
        md += ["", "## Retrieval quality", "",
               f"Judge: `{results[0].judge_id}` (prompt `{results[0].prompt_version}`). Values in %.", "",
               *([f"**Warning:** {judge_warning(results[0].judge_id)}", ""] if judge_warning(results[0].judge_id) else []),
               markdown_table(header, marked)]
        if compared is not None:
            report.files.update({f"compare.{k}": v for k, v in write_compare(compared, out).items()})
            c_title, c_header, c_rows = compared.table()
            md += ["", f"`*`: differs from `{compared.baseline}` at α={compared.alpha:g} (paired permutation test "
                   "over questions, Holm-corrected per metric).", "", f"### {c_title}", "",
                   markdown_table(c_header, c_rows),
                   *(["", *(f"Note: {note}." for note in compared.notes)] if compared.notes else [])]
        curve_k = curve_depth or ks[-1]
        curves = {label: mrecall_curve({q: m[:, :curve_k] for q, m in res.support.items()}, curve_k)
                  for label, res in zip(labels, results)}
        curve_rows = [[label, k, f"{100 * v:.2f}"] for label, pts in curves.items() for k, v in pts]
        report.files.update({f"mrecall_curve.{k}": v for k, v in
                             write_table(out / "mrecall_curve", ["run", "k", "MRecall@k"], curve_rows).items()})
        report.files["mrecall_curve.png"] = plot_curves(
            curves, out / "mrecall_curve.png", note=MRECALL_DIP_NOTE,
            title=f"MRecall@k — {figure_caption(results[0].judge_id, len(results[0].per_question), splits.pop() if len(splits) == 1 else None)}")
        md += ["### MRecall@k", "", "![MRecall@k](mrecall_curve.png)", ""]
        if html:  # the page to browse; corrected: {label: {"MRecall@5": {"mean", "low", "high", "n"}}}
            from berds.evaluate.report_html import page_data, write_html_report

            report.files["report.html"] = write_html_report(out / "report.html", page_data(
                labels, runs, results, ks, title=title, judge_id=results[0].judge_id,
                prompt_version=results[0].prompt_version, warning=judge_warning(results[0].judge_id), corrected=corrected,
                human=human))
            md += ["Browse the judged passages: [report.html](report.html).", ""]
        if extra is not None:
            extra_files, extra_md = extra(out)
            report.files.update(extra_files)
            md += ["", *extra_md]

    loaded = [load_result(a) if isinstance(a, (str, Path)) else a for a in analyses]
    seen_kinds: dict[str, int] = {}
    for res in merge_results(loaded):
        seen_kinds[res.KIND] = seen_kinds.get(res.KIND, 0) + 1
        stem = res.KIND if seen_kinds[res.KIND] == 1 else f"{res.KIND}-{seen_kinds[res.KIND]}"
        table_title, header, rows = res.table()
        report.files.update({f"{stem}.{k}": v for k, v in write_table(out / stem, header, rows).items()})
        md += ["", f"## {table_title}", "", judge_line(res), "", markdown_table(header, rows)]
        figure = None
        if res.KIND == "leaning":
            figure = plot_leaning(res, out / f"{stem}.png", split=next(iter(splits)) if len(splits) == 1 else None)
        elif res.KIND == "sycophancy":
            figure = plot_sycophancy(res, out / f"{stem}.png")
        if figure is not None:
            report.files[f"{stem}.png"] = figure
            md += [f"![{res.KIND}]({figure.name})", ""]
    write_text(out / "report.md", "\n".join(md).rstrip() + "\n")
    report.files["report.md"] = out / "report.md"
    _record_files(out, report.files.values())
    return report


REPORT_FILES = "report-files.json"


def _record_files(out: Path, files: Any) -> None:
    """List this report's files in ``out`` and delete those a previous report there wrote and this one did not: a
    report made again into its folder (without ``--baseline``, or with fewer analyses) left the old ``compare.*``
    or ``leaning-2.*`` beside it, tables that no longer belonged to it."""
    from berds.io import write_json

    names = sorted({Path(f).name for f in files})
    record = out / REPORT_FILES
    try:
        old = json.loads(record.read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        old = []
    for name in old if isinstance(old, list) else []:
        # only plain names of the kinds this module writes (never a path out of the folder)
        if (isinstance(name, str) and name not in names and name == Path(name).name
                and Path(name).suffix in (".md", ".csv", ".png", ".json", ".html") and name != REPORT_FILES):
            (out / name).unlink(missing_ok=True)
    write_json(record, {"kind": "berds-report", "files": names})


def write_compare(result: Any, out: str | Path) -> dict[str, Path]:
    """``compare.md``, ``compare.csv`` and ``compare.json`` of a ``berds.evaluate.compare.CompareResult``."""
    from berds.io import write_json, write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title, header, rows = result.table()
    paths = {"csv": out / "compare.csv", "md": out / "compare.md"}
    write_text(paths["md"], f"### {title}\n\n" + markdown_table(header, rows))
    # the CSV with one number per cell (the table's "[-1.0, +2.0]" interval was one text cell), rounded as printed
    ci = f"{100 * result.confidence:g}% CI"
    csv_header = ["run", "metric", "questions", "baseline %", "run %", "Δ (points)", f"{ci} low", f"{ci} high", "p",
                  "p (Holm)", f"significant (α={result.alpha:g})", "CI method"]
    csv_rows = [[c.run, c.metric, c.questions, f"{100 * c.baseline_mean:.1f}", f"{100 * c.run_mean:.1f}",
                 f"{100 * c.difference:.1f}", f"{100 * c.ci_low:.1f}", f"{100 * c.ci_high:.1f}", f"{c.p_value:.4f}",
                 f"{c.p_holm:.4f}", "yes" if c.significant else "no", c.ci_method] for c in result.comparisons]
    write_text(paths["csv"], csv_text(csv_header, csv_rows))
    write_json(out / "compare.json", result.to_json())
    paths["json"] = out / "compare.json"
    return paths


def write_analysis(result: Any, json_path: str | Path) -> dict[str, Path]:
    """Save an analysis result as ``X.json`` plus its table (``X.md``, ``X.csv``) and figure (``X.png``)."""
    from berds.evaluate.analyses.results import save_result

    json_path = Path(json_path)
    if json_path.suffix != ".json":
        json_path = json_path.with_name(json_path.name + ".json")
    stem = json_path.with_suffix("")
    paths = {"json": save_result(result, json_path)}
    table_title, header, rows = result.table()
    paths.update(write_table(stem, header, rows, title=f"{table_title}\n\n{judge_line(result)}"))
    if result.KIND == "leaning":
        paths["png"] = plot_leaning(result, stem.with_name(stem.name + ".png"))
    elif result.KIND == "sycophancy":
        paths["png"] = plot_sycophancy(result, stem.with_name(stem.name + ".png"))
    return paths
