"""`berds report --html`: one self-contained page, checked in a real headless Chromium (no console errors, sorting,
a question's grid, a passage on click, a screenshot with a non-empty table)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest

import berds
from berds.runs import load_run, save_run
from berds.types import Hit, Run
from conftest import berds_cmd, subprocess_env

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
DEMO_RUN = Path(berds.__file__).parent / "data" / "demo" / "run.ctxs.jsonl"


def two_runs(folder: Path) -> list[Path]:
    """The shipped demo run and the same passages in reverse order: two runs that score differently."""
    run = load_run(DEMO_RUN)
    hits = {q: [Hit(h.passage, float(len(hs) - i)) for i, h in enumerate(reversed(hs))] for q, hs in run.hits.items()}
    save_run(run, folder / "forward")
    save_run(Run(run.questions, hits, {}, "reversed"), folder / "reversed")
    return [folder / "forward", folder / "reversed"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html")
    runs = two_runs(folder)
    proc = subprocess.run(berds_cmd("report", *map(str, runs), "--judge", "demo-gold", "--k", "5,10", "--html",
                                    "--out", str(folder / "report"), "--quiet", "--cache", str(folder / "j.sqlite")),
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return folder / "report"


@contextlib.contextmanager
def chromium_page(tmp_path: Path):
    """A page in headless Chromium (offline, fresh profile) and the list its console errors, page errors and any
    request leaving the file go to."""
    sync_api = pytest.importorskip("playwright.sync_api")
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=str(CHROMIUM),
                                                       headless=True, args=FLAGS, offline=True)
        try:
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: errors.append(f"fetched {r.url}") if not r.url.startswith(("file:", "data:", "blob:")) else None)
            yield page, errors
        finally:
            context.close()


def page_json(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="berds-data">(.*?)</script>', text, re.S)
    return json.loads(found.group(1))


def test_the_page_is_self_contained_and_its_figures_are_berds_own(report):
    text = (report / "report.html").read_text(encoding="utf-8")
    assert not re.search(r'\b(src|href)="(https?:)?//', text) and "<link" not in text  # nothing fetched
    data = page_json(report / "report.html")
    metrics = {row["run"]: row for row in
               __import__("csv").DictReader(io.StringIO((report / "metrics.csv").read_text()))}
    for run in data["runs"]:
        for name in ("MRecall@5", "Precision@10"):
            estimate = run["metrics"][name]
            assert f"{100 * estimate['mean']:.1f}" == metrics[run["label"]][name]
            assert estimate["low"] <= estimate["mean"] <= estimate["high"] and estimate["n"] == 12
        assert run["corrected"] is None  # the place for corrected estimates, empty without labels
    assert "report.html" in (report / "report.md").read_text()
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="tradeoff"' in text


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_in_headless_chromium(report, tmp_path):
    data = page_json(report / "report.html")
    with chromium_page(tmp_path) as (page, errors):
        page.goto((report / "report.html").as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=10_000)

        # sorting: descending on the first click, ascending on the second
        def order() -> list[str]:
            return page.eval_on_selector_all("#board tbody tr", "rows => rows.map(r => r.dataset.label)")
        by_mrecall = sorted(data["runs"], key=lambda r: r["metrics"]["MRecall@5"]["mean"])
        page.click("#board th[data-col='MRecall@5']")
        assert order() == [r["label"] for r in reversed(by_mrecall)]
        page.click("#board th[data-col='MRecall@5']")
        assert order() == [r["label"] for r in by_mrecall]
        page.click("#board th[data-col='label']")
        assert order() == sorted((r["label"] for r in data["runs"]), reverse=True)

        # a question expands into its perspectives x passages grid, as judged
        question = data["questions"][0]
        docs, masks = data["grid"][0][0]
        page.click("details.q[data-index='0'] summary")
        page.wait_for_selector("details.q[data-index='0'] table.grid")
        rows = page.locator("details.q[data-index='0'] table.grid tr")
        assert rows.count() == 1 + len(question[3])
        ticks = page.locator("details.q[data-index='0'] td.yes").count()
        assert ticks == sum(bin(m).count("1") for m in masks) and ticks > 0
        # a click on a cell shows that passage
        page.click("details.q[data-index='0'] td.cell[data-rank='1']")
        view = page.locator("details.q[data-index='0'] .passage")
        view.wait_for(state="visible")
        first = load_run(DEMO_RUN).hits[question[0]][0].passage
        assert first.id in view.inner_text() and first.text[:60] in view.inner_text()
        # another run in the selector shows its own grid
        page.select_option("#run", "1")
        page.click("details.q[data-index='0'] summary")
        page.click("details.q[data-index='0'] td.cell[data-rank='1']")
        assert data["passages"] > 0

        # a screenshot of the leaderboard is a table, not a blank box
        png = page.locator("#board").screenshot()

        # corrected estimates (the --labels slot) get their own sortable columns
        from berds.evaluate.report_html import render_html

        for i, run in enumerate(data["runs"]):
            run["corrected"] = {m: {"mean": 0.1 + 0.3 * i, "low": 0.05, "high": 0.9, "n": 4}
                                for m in ("MRecall@5", "MRecall@10", "Precision@5", "Precision@10")}
        (tmp_path / "corrected.html").write_text(render_html(data), encoding="utf-8")
        page.set_viewport_size({"width": 1280, "height": 720})
        page.goto((tmp_path / "corrected.html").as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=10_000)
        page.click("#board th[data-col='corrected:MRecall@5']")
        assert order() == [r["label"] for r in reversed(data["runs"])]
        # each corrected estimate says how many labelled questions it rests on (4 here, of the run's 12)
        cell = page.locator("#board tbody tr").first.locator("td").nth(3).inner_text()
        assert cell.startswith("40.0") and cell.endswith("n=4"), cell
        # ten columns scroll inside the leaderboard's box; the page itself is no wider than the window
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert not errors, errors
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("L")
    pixels = list(image.getdata())
    dark = sum(1 for v in pixels if v < 128)
    assert image.width > 200 and image.height > 40
    assert 0.01 < dark / len(pixels) < 0.5  # text on a light background
    assert len(set(pixels)) > 10  # glyphs, rules and the header's shade


def test_html_needs_runs(tmp_path):
    proc = subprocess.run(berds_cmd("report", "--html", "--out", str(tmp_path / "r"), "--analysis", "x.json"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert proc.returncode == 2 and "--html shows judged runs" in proc.stderr  # (the CLI drops the API's "(html=)")


def test_corrected_estimates_and_hostile_text_in_the_data_model(tmp_path):
    from types import SimpleNamespace

    import numpy as np

    from berds.evaluate.report_html import page_data, render_html
    from berds.types import Passage, Question

    q = Question("q1", "Is <b>this</b> safe?", ("a </script><!-- b", "c"))
    run = Run.from_lists([q], [[Hit(Passage("p1", "text </script><script>alert(1)</script>", title="t"), 1.0)]],
                         name="r")
    res = SimpleNamespace(support={"q1": np.array([[True], [False]])})
    corrected = {"r": {"MRecall@1": {"mean": 0.4, "low": 0.2, "high": 0.6, "n": 1}}}
    data = page_data(["r"], [run], [res], [1], corrected=corrected)
    assert data["runs"][0]["corrected"] == corrected["r"] and data["runs"][0]["metrics"]["MRecall@1"]["mean"] == 1.0  # m = 2 > k = 1: one suffices
    page = render_html(data)
    assert page.count("</script>") == 2 and "<!-- b" not in page  # the page's own two script elements only
    assert page_json_text(page)["questions"][0][3][0] == "a </script><!-- b"


def page_json_text(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="berds-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def test_the_plot_legend_names_long_runs_in_full():
    """Run names cut to 18 characters made "kialo-wiki-contriever-exp" and "kialo-wiki-contriever-mmr" one name."""
    from berds.evaluate.report_html import tradeoff_svg

    point = {"mean": 0.5, "low": 0.4, "high": 0.6, "n": 10}
    names = ["kialo-wiki-contriever-exp", "kialo-wiki-contriever-mmr", "bm25"]
    svg = tradeoff_svg({"ks": [5], "runs": [{"label": n, "metrics": {"MRecall@5": point, "Precision@5": point}}
                                           for n in names]})
    legend = re.findall(r'<text x="([\d.]+)" y="[\d.]+">([^<]+)</text>', svg)
    shown = {text: float(x) for x, text in legend}
    assert all(n in shown for n in names), shown
    width = float(re.search(r'<svg [^>]*width="(\d+)"', svg).group(1))
    assert shown[names[0]] + 6.5 * len(names[0]) <= width  # the longest name fits inside the plot
    # short names keep the plot at its usual size
    assert 'width="560"' in tradeoff_svg({"ks": [5], "runs": [{"label": "bm25", "metrics": {
        "MRecall@5": point, "Precision@5": point}}]})


def test_point_labels_of_the_plot_never_overlap():
    """Two runs at the same point wrote their "k=10" labels on top of each other ("k=10k=10")."""
    from berds.evaluate.report_html import tradeoff_svg

    point = {"mean": 0.5, "low": 0.4, "high": 0.6, "n": 10}
    runs = [{"label": f"run{i}", "metrics": {"MRecall@10": point, "Precision@10": point}} for i in range(3)]
    svg = tradeoff_svg({"ks": [10], "runs": runs})
    spots = [(float(x), float(y)) for x, y in re.findall(r'<text x="([\d.]+)" y="([\d.]+)" fill="#\w+">k=10</text>', svg)]
    assert len(spots) == 3  # three labels fit around one point
    for i, (x1, y1) in enumerate(spots):
        for x2, y2 in spots[i + 1:]:
            assert abs(x1 - x2) >= 6.5 * 4 or abs(y1 - y2) >= 12, spots


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_human_labels_sit_beside_the_judges_verdicts_in_the_grid(tmp_path):
    """`report --labels --html`: labelled cells are ringed with the human's answer; a disagreement is marked."""
    import dataclasses

    from berds.trust.labels import read_labelled_pairs, write_labelled_pairs

    run = load_run(DEMO_RUN)
    save_run(run, tmp_path / "forward")
    pairs = list(read_labelled_pairs(Path(berds.__file__).parent / "data" / "demo" / "labelled_pairs.tsv"))
    top = {(q, h.passage.judge_text("after")) for q, hs in run.hits.items() for h in hs[:5]}
    first_q = next(iter(run.hits))
    flip = next(i for i, p in enumerate(pairs) if p.id == first_q and (p.id, p.document) in top)
    pairs[flip] = dataclasses.replace(pairs[flip], label=not pairs[flip].label)  # the judge (demo-gold) is now "wrong"
    write_labelled_pairs(tmp_path / "labels.tsv", pairs)
    proc = subprocess.run(berds_cmd("report", str(tmp_path / "forward"), "--judge", "demo-gold", "--k", "5", "--html",
                                    "--labels", str(tmp_path / "labels.tsv"), "--out", str(tmp_path / "report"),
                                    "--quiet", "--cache", str(tmp_path / "j.sqlite")),
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = page_json(tmp_path / "report" / "report.html")
    qi = [q[0] for q in data["questions"]].index(first_q)
    docs, masks, human_yes, labelled = data["grid"][0][qi]
    n_labelled = sum(bin(m).count("1") for m in labelled)
    assert n_labelled > 0 and data["human_cells"] >= n_labelled
    disagree = sum(bin((m ^ h) & lab).count("1") for m, h, lab in zip(masks, human_yes, labelled))
    assert disagree == 1  # the flipped pair, and only it
    with chromium_page(tmp_path) as (page, errors):
        page.goto((tmp_path / "report" / "report.html").as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=10_000)
        page.click(f"details.q[data-index='{qi}'] summary")
        grid = f"details.q[data-index='{qi}'] table.grid"
        page.wait_for_selector(grid)
        assert page.locator(f"{grid} td.human").count() == n_labelled
        bad = page.locator(f"{grid} td.disagree")
        assert bad.count() == 1 and "human:" in bad.first.get_attribute("title")
        bad.first.click()
        view = page.locator(f"details.q[data-index='{qi}'] .passage")
        view.wait_for(state="visible")
        assert "human labels: perspective" in view.inner_text()
        assert "cells carry a human label" in page.inner_text("body")
        assert not errors, errors
