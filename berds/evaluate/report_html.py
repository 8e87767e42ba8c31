"""``berds report ... --html``: one self-contained page to browse (no server, no network, no script from elsewhere).

The page holds

* a sortable leaderboard: MRecall@k and Precision@k per run with 95% intervals (percentile bootstrap over
  questions) and n, and a column per metric for a *corrected* estimate where one is given (``corrected=``);
* the MRecall–Precision trade-off plot (inline SVG drawn here: one point per run and k, with its intervals);
* per question, for a chosen run, the perspectives × top-k passages grid with what the judge said supported
  what, and where human labels are given (``human=``, ``report --labels``) what the annotators said, disagreements
  marked; a click on a cell (or a rank) shows the passage.

The data sit in the page as JSON (``<script type="application/json">``); the passages' texts, the bulk of it, as
gzip + base64, unpacked by the browser's own ``DecompressionStream`` the first time a question is opened, so a
large evaluation (800 questions × 3 runs) stays a few MB and opens at once. ``page_data`` builds that data model:
``runs[i]["corrected"]`` is where corrected estimates (``{"MRecall@5": {"mean", "low", "high", "n"}}``) go.
A grid entry is ``[passage numbers, judge masks]``, or with human labels for that question ``[passage numbers,
judge masks, human-yes masks, labelled masks]`` (bit i: perspective i).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

INTERVAL = "95% percentile bootstrap over questions, 2,000 resamples"
PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def bootstrap_interval(values: Sequence[float], *, resamples: int = 2000, seed: int = 0,
                       confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling questions); (nan, nan) when empty."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def _estimate(values: Sequence[float]) -> dict[str, float | int]:
    low, high = bootstrap_interval(values)
    return {"mean": float(np.mean(values)) if len(values) else float("nan"), "low": low, "high": high,
            "n": len(values)}


def page_data(labels: Sequence[str], runs: Sequence[Any], results: Sequence[Any], ks: Sequence[int], *,
              title: str = "BERDS report", judge_id: str = "", prompt_version: str = "", warning: str | None = None,
              corrected: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
              human: Mapping[tuple[str, str, str], bool] | None = None, title_position: str = "after") -> dict[str, Any]:
    """The page's data model (see the module docstring) from runs and their judged support matrices.

    ``human``: ``(question id, perspective, passage text as judged) -> label`` (``berds.trust.ppi.human_label_index``
    of a labelled-pairs file); the passage text is the judge's (``title_position`` as in the evaluation)."""
    from berds.evaluate.metrics import question_metrics
    from berds.types import Passage

    ks = sorted({int(k) for k in ks})
    depth = ks[-1]
    questions: dict[str, Any] = {}
    for run in runs:
        for qid, q in run.questions.items():
            questions.setdefault(qid, q)
    order = list(questions)
    passages: dict[str, int] = {}
    table: list[list[str]] = []
    run_rows, grids = [], []
    n_human = 0
    for label, run, res in zip(labels, runs, results):
        per_question = {qid: question_metrics(res.support[qid], ks) for qid in run.questions if qid in res.support}
        metrics = {}
        for k in ks:
            metrics[f"MRecall@{k}"] = _estimate([m[f"mrecall@{k}"] for m in per_question.values()])
            metrics[f"Precision@{k}"] = _estimate([m[f"precision@{k}"] for m in per_question.values()])
        run_rows.append({"label": label, "n": len(per_question), "metrics": metrics,
                         "corrected": dict(corrected[label]) if corrected and label in corrected else None})
        grid: list[Any] = []
        for qid in order:
            if qid not in per_question:
                grid.append(None)
                continue
            hits = list(run.hits[qid])[:depth]
            support = np.asarray(res.support[qid], dtype=bool)[:, :depth]
            docs = []
            for h in hits:
                p = h.passage
                if p.id not in passages:
                    passages[p.id] = len(table)
                    table.append([p.id, p.title, p.text])
                docs.append(passages[p.id])
            masks = [int(sum(1 << i for i in np.flatnonzero(support[:, j]))) if j < support.shape[1] else 0
                     for j in range(len(docs))]
            entry = [docs, masks]
            if human:
                perspectives = run.questions[qid].perspectives
                texts = Passage.judge_texts([h.passage for h in hits], title_position)
                said = [[human.get((qid, p, t)) for p in perspectives] for t in texts]
                labelled = [sum(1 << i for i, v in enumerate(col) if v is not None) for col in said]
                if any(labelled):
                    n_human += sum(bin(m).count("1") for m in labelled)
                    entry += [[sum(1 << i for i, v in enumerate(col) if v) for col in said], labelled]
            grid.append(entry)
        grids.append(grid)
    packed = base64.b64encode(gzip.compress(json.dumps(table, ensure_ascii=False).encode("utf-8"), 6, mtime=0))
    return {
        "title": title, "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "judge": judge_id,
        "prompt_version": prompt_version, "warning": warning, "ks": ks, "depth": depth, "interval": INTERVAL,
        "runs": run_rows,
        "questions": [[qid, questions[qid].text, questions[qid].dataset, list(questions[qid].perspectives)]
                      for qid in order],
        "grid": grids,
        "passages_gzip_base64": packed.decode("ascii"),
        "passages": len(table),
        "human_cells": n_human,
    }


# --------------------------------------------------------------------------------------------- the plot


def tradeoff_svg(data: Mapping[str, Any], width: int = 560, height: int = 380) -> str:
    """MRecall@k (x) against Precision@k (y), one colour per run, one point per k joined in k order, with each
    point's intervals as whiskers. Axes in %, 0 to 100."""
    left, right, top, bottom = 56, 150, 16, 44
    # the legend names every run in full (cut to 18 characters, "kialo-wiki-contriever-exp" and "...-mmr" were
    # one name): the plot widens to fit the longest (about 6.5 px a character at font-size 11)
    longest = max((len(r["label"]) for r in data["runs"]), default=0)
    extra = max(0, round(26 + 6.5 * longest + 8) - right)
    right += extra
    width += extra
    pw, ph = width - left - right, height - top - bottom

    def x(v: float) -> float:
        return left + pw * v

    def y(v: float) -> float:
        return top + ph * (1 - v)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="tradeoff" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             "<title>MRecall@k against Precision@k per run</title>",
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>']
    for t in range(0, 101, 20):
        parts.append(f'<line x1="{x(t / 100):.1f}" y1="{top}" x2="{x(t / 100):.1f}" y2="{top + ph}" stroke="#e3e3e3"/>'
                     f'<text x="{x(t / 100):.1f}" y="{top + ph + 14}" text-anchor="middle">{t}</text>'
                     f'<line x1="{left}" y1="{y(t / 100):.1f}" x2="{left + pw}" y2="{y(t / 100):.1f}" stroke="#e3e3e3"/>'
                     f'<text x="{left - 6}" y="{y(t / 100) + 4:.1f}" text-anchor="end">{t}</text>')
    parts.append(f'<text x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">MRecall@k (%)</text>'
                 f'<text transform="translate(14 {top + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
                 "Precision@k (%)</text>")
    placed: list[tuple[float, float]] = []  # the "k=…" labels drawn so far (their left, baseline)

    def label_at(px: float, py: float, text: str) -> tuple[float, float] | None:
        """Where a point's label goes: above right, else below right, else left — never over another label (two
        runs at one point wrote "k=10k=10"); None when every place is taken (the point's tooltip still names it)."""
        w = 6.5 * len(text)
        for lx, ly in ((px + 6, py - 5), (px + 6, py + 14), (px - 6 - w, py - 5), (px - 6 - w, py + 14)):
            if all(abs(lx - ox) >= w or abs(ly - oy) >= 12 for ox, oy in placed):
                placed.append((lx, ly))
                return lx, ly
        return None

    for i, run in enumerate(data["runs"]):
        colour = PALETTE[i % len(PALETTE)]
        points = []
        for k in data["ks"]:
            mr, pr = run["metrics"][f"MRecall@{k}"], run["metrics"][f"Precision@{k}"]
            if any(v is None or v != v for v in (mr["mean"], pr["mean"], mr["low"], pr["low"])):
                continue  # (no questions: no point)
            px, py = x(mr["mean"]), y(pr["mean"])
            points.append((px, py))
            parts.append(f'<line x1="{x(mr["low"]):.1f}" y1="{py:.1f}" x2="{x(mr["high"]):.1f}" y2="{py:.1f}" '
                         f'stroke="{colour}" stroke-opacity="0.6"/>'
                         f'<line x1="{px:.1f}" y1="{y(pr["low"]):.1f}" x2="{px:.1f}" y2="{y(pr["high"]):.1f}" '
                         f'stroke="{colour}" stroke-opacity="0.6"/>'
                         f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{colour}"><title>'
                         f'{html.escape(run["label"])}, k={k}: MRecall {100 * mr["mean"]:.1f}, Precision '
                         f'{100 * pr["mean"]:.1f}</title></circle>')
            where = label_at(px, py, f"k={k}")
            if where is not None:
                parts.append(f'<text x="{where[0]:.1f}" y="{where[1]:.1f}" fill="{colour}">k={k}</text>')
        if len(points) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" points="'
                         + " ".join(f"{a:.1f},{b:.1f}" for a, b in points) + '"/>')
        ly = top + 14 + 16 * i
        parts.append(f'<rect x="{left + pw + 12}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{left + pw + 26}" y="{ly}">{html.escape(run["label"])}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --------------------------------------------------------------------------------------------- the page

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
.board-box{overflow-x:auto;max-width:100%}table.board{border-collapse:collapse;font-size:.92em}
table.board th,table.board td{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:right;white-space:nowrap}
table.board th{cursor:pointer;background:#f0f0f0;user-select:none;white-space:normal;vertical-align:bottom}
table.board th:first-child,table.board td:first-child{text-align:left}
table.board th[aria-sort=ascending]::after{content:" \\25B2"}table.board th[aria-sort=descending]::after{content:" \\25BC"}
.ci{color:#777;font-size:.85em}.warn{background:#fff4d6;padding:.5em;border-left:4px solid #e0a800}
details.q{border-bottom:1px solid #eee;padding:.25em 0}details.q summary{cursor:pointer}
.cov{display:inline-block;min-width:3.5em;color:#555}.full{color:#1b7f3b;font-weight:bold}
table.grid{border-collapse:collapse;margin:.5em 0;font-size:.85em}
table.grid td,table.grid th{border:1px solid #ccc;padding:.2em .4em;text-align:center}
table.grid td.p{text-align:left;max-width:26em}
table.grid td.cell{cursor:pointer;min-width:1.6em}table.grid td.yes{background:#b8e0c2}
table.grid td.sel,table.grid th.sel{outline:2px solid #333}
table.grid td.human{box-shadow:inset 0 0 0 2px #4C72B0}table.grid td.disagree{box-shadow:inset 0 0 0 2px #C44E52}
table.grid td.human sup{color:#4C72B0;font-size:.7em}table.grid td.disagree sup{color:#C44E52}
.passage{background:#f7f7f7;padding:.6em;border-left:4px solid #4C72B0;white-space:pre-wrap;max-width:60em}
"""

SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("berds-data").textContent);
const pct = v => (v === null || v === undefined || Number.isNaN(v)) ? "n/a" : (100 * v).toFixed(1);
const el = (tag, attrs, ...kids) => { const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k); return e; };

// ---- leaderboard
const metricNames = [];
for (const k of D.ks) metricNames.push("MRecall@" + k);
for (const k of D.ks) metricNames.push("Precision@" + k);
const hasCorrected = D.runs.some(r => r.corrected);
function buildBoard() {
  const table = document.getElementById("board");
  const head = el("tr", {}, el("th", {"data-col": "label"}, "run"), el("th", {"data-col": "n"}, "n"));
  for (const m of metricNames) {
    head.append(el("th", {"data-col": m}, m + " (%)"));
    if (hasCorrected) head.append(el("th", {"data-col": "corrected:" + m}, m + " corrected"));
  }
  table.tHead.append(head);
  for (const r of D.runs) {
    const tr = el("tr", {"data-label": r.label, "data-n": r.n}, el("td", {}, r.label), el("td", {}, String(r.n)));
    for (const m of metricNames) {
      const e = r.metrics[m];
      tr.dataset["m_" + m] = e.mean;
      tr.append(el("td", {}, pct(e.mean) + " ", el("span", {class: "ci"}, "[" + pct(e.low) + ", " + pct(e.high) + "]")));
      if (hasCorrected) {
        const c = r.corrected && r.corrected[m];
        tr.dataset["c_" + m] = c ? c.mean : "";
        // n = the labelled questions the estimate rests on (often far fewer than the run's n)
        tr.append(el("td", {}, c ? pct(c.mean) + " " : "n/a",
                     c ? el("span", {class: "ci"}, "[" + pct(c.low) + ", " + pct(c.high) + "] n=" + c.n) : ""));
      }
    }
    table.tBodies[0].append(tr);
  }
  for (const th of head.children) th.addEventListener("click", () => sortBoard(th));
}
function sortBoard(th) {
  const table = document.getElementById("board");
  const col = th.dataset.col;
  const dir = th.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
  for (const other of th.parentNode.children) other.removeAttribute("aria-sort");
  th.setAttribute("aria-sort", dir);
  const key = tr => col === "label" ? tr.dataset.label : col === "n" ? Number(tr.dataset.n)
    : col.startsWith("corrected:") ? Number(tr.dataset["c_" + col.slice(10)] || -1) : Number(tr.dataset["m_" + col]);
  const rows = Array.from(table.tBodies[0].rows);
  rows.sort((a, b) => { const x = key(a), y = key(b); const c = x < y ? -1 : x > y ? 1 : 0;
                        return dir === "ascending" ? c : -c; });
  for (const r of rows) table.tBodies[0].append(r);
}

// ---- passages: gzip + base64, unpacked once, when first needed
let passagesPromise = null;
function passages() {
  if (!passagesPromise) {
    const bytes = Uint8Array.from(atob(D.passages_gzip_base64), c => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    passagesPromise = new Response(stream).text().then(JSON.parse);
  }
  return passagesPromise;
}

// ---- questions
const runSelect = document.getElementById("run");
D.runs.forEach((r, i) => runSelect.append(el("option", {value: String(i)}, r.label)));
function coverage(entry, m) {
  if (!entry) return "not in run";
  let covered = 0; const k = D.depth;
  for (let i = 0; i < m; i++) if (entry[1].slice(0, k).some(mask => mask & (1 << i))) covered++;
  return covered + "/" + m;
}
function buildQuestions() {
  const box = document.getElementById("questions");
  box.textContent = "";
  const run = Number(runSelect.value);
  const frag = document.createDocumentFragment();
  D.questions.forEach((q, qi) => {
    const entry = D.grid[run][qi];
    const cov = coverage(entry, q[3].length);
    const summary = el("summary", {}, el("span", {class: "cov" + (cov === q[3].length + "/" + q[3].length ? " full" : "")}, cov),
                       " ", q[0] + ": " + q[1]);
    const details = el("details", {class: "q", "data-qid": q[0], "data-index": String(qi)}, summary);
    details.addEventListener("toggle", () => { if (details.open && !details.dataset.filled) fillGrid(details, run, qi); });
    frag.append(details);
  });
  box.append(frag);
}
async function fillGrid(details, run, qi) {
  details.dataset.filled = "1";
  const q = D.questions[qi], entry = D.grid[run][qi];
  if (!entry) { details.append(el("p", {}, "This run has no passages for this question.")); return; }
  const [docs, masks] = entry;
  const humanYes = entry[2] || [], labelled = entry[3] || [];  // (only where human labels were given)
  const table = el("table", {class: "grid"});
  const head = el("tr", {}, el("th", {}, "perspective \\ rank"));
  docs.forEach((d, j) => head.append(el("th", {class: "rank", "data-rank": String(j + 1)}, String(j + 1))));
  table.append(head);
  const view = el("div", {class: "passage", hidden: ""});
  q[3].forEach((p, i) => {
    const tr = el("tr", {}, el("td", {class: "p"}, (i + 1) + ". " + p));
    docs.forEach((d, j) => {
      const yes = (masks[j] & (1 << i)) !== 0;
      const said = (labelled[j] & (1 << i)) ? (humanYes[j] & (1 << i)) !== 0 : null;
      const judged = "judge: " + (yes ? "supports" : "does not support");
      const cls = "cell" + (yes ? " yes" : "") + (said === null ? "" : said === yes ? " human" : " human disagree");
      const td = el("td", {class: cls, "data-rank": String(j + 1),
                           title: said === null ? judged : judged + "; human: " + (said ? "supports" : "does not support")},
                    yes ? "\u2713" : "\u00b7");
      if (said !== null) td.append(el("sup", {}, said ? "h\u2713" : "h\u00d7"));
      tr.append(td);
    });
    table.append(tr);
  });
  const show = async (j, target) => {
    for (const s of table.querySelectorAll(".sel")) s.classList.remove("sel");
    target.classList.add("sel");
    const all = await passages();
    const [pid, title, text] = all[docs[j]];
    const supported = q[3].map((p, i) => (masks[j] & (1 << i)) ? (i + 1) : null).filter(x => x !== null);
    const human = q[3].map((p, i) => (labelled[j] & (1 << i)) ? (i + 1) + ((humanYes[j] & (1 << i)) ? " yes" : " no") : null)
                      .filter(x => x !== null);
    view.textContent = "";
    view.append(el("b", {}, "rank " + (j + 1) + " \u2014 " + pid + (title ? " \u2014 " + title : "")), "\n",
                "judge says it supports: " + (supported.length ? "perspective " + supported.join(", ") : "none"),
                human.length ? "\nhuman labels: perspective " + human.join(", ") : "", "\n\n", text);
    view.hidden = false;
  };
  table.addEventListener("click", ev => {
    const cell = ev.target.closest("[data-rank]");
    if (cell) show(Number(cell.dataset.rank) - 1, cell);
  });
  details.append(table, view);
}
runSelect.addEventListener("change", buildQuestions);
buildBoard();
buildQuestions();
window.berdsReadyMs = performance.now();  // (read by benchmarks/bench_report_html.py)
document.body.dataset.ready = "1";
setTimeout(passages, 50);  // unpack the passages once the page is up, so the first click finds them ready
"""


def render_html(data: Mapping[str, Any]) -> str:
    """The page: the data as JSON in the page, the SVG plot, the style and the script (nothing fetched)."""
    # every "<" escaped: no passage text can close the script element or open an HTML comment inside it
    payload = json.dumps(data, ensure_ascii=False, allow_nan=False, default=_no_nan).replace("<", "\\u003c")
    e = html.escape
    warning = f'<p class="warn">{e(data["warning"])}</p>' if data.get("warning") else ""
    corrected = ("Corrected columns: estimates corrected for the judge's errors by human labels, with their 95% "
                 "interval and n = the labelled questions they rest on."
                 if any(r.get("corrected") for r in data["runs"]) else "")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{e(data['title'])}</title>"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>{e(data['title'])}</h1>"
        f"<p>Generated {e(data['generated'])}. Judge: <code>{e(data['judge'])}</code>"
        f"{' (prompt <code>' + e(data['prompt_version']) + '</code>)' if data.get('prompt_version') else ''}. "
        f"{len(data['questions'])} questions, {len(data['runs'])} run{'s' if len(data['runs']) != 1 else ''}, "
        f"top {data['depth']} passages judged.</p>"
        f"{warning}"
        "<h2>Leaderboard</h2>"
        f"<p>Values in %, with {e(data['interval'])} in brackets; n = questions. Click a column to sort. "
        f"{corrected}</p>"
        # (a wide leaderboard, e.g. corrected columns at two k, scrolls in its box instead of widening the page)
        '<div class="board-box"><table class="board" id="board"><thead></thead><tbody></tbody></table></div>'
        "<h2>MRecall–Precision trade-off</h2>"
        f"{tradeoff_svg(data)}"
        "<h2>Questions</h2>"
        "<p>Open a question: its perspectives (rows) against the run's top passages (columns); \u2713 where the judge "
        "said the passage supports the perspective. Click a cell or a rank to read the passage. The count before "
        f"each question is how many of its perspectives the top {data['depth']} cover."
        + (f" {data['human_cells']:,} cells carry a human label (--labels): ringed, with h\u2713 or h\u00d7 beside "
           "the judge's mark; red where the human and the judge disagree." if data.get("human_cells") else "")
        + "</p>"
        '<label>Run: <select id="run"></select></label><div id="questions"></div>'
        f'<script type="application/json" id="berds-data">{payload}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def _no_nan(value: Any) -> Any:
    raise TypeError(f"not JSON: {value!r}")


def _clean(value: Any) -> Any:
    """NaN (a metric of no questions) as null: JSON has no NaN."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def write_html_report(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write the page atomically; returns its path."""
    from berds.io import write_text

    path = Path(path)
    write_text(path, render_html(_clean(dict(data))))
    return path
