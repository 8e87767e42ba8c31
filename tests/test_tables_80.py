"""Every table berds prints fits an 80-column terminal, and no header word is broken to get there.

Each command runs in this process at ``COLUMNS=80`` on tiny inputs; every header passed to a rich table
is recorded, and the output must hold each header word whole (a word cut to ``accura…`` or folded
letter by letter is missing) with no line wider than 80.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.table import Table

from berds.runs import save_run
from conftest import make_run

JUDGE = "judges_for_tests:OverlapJudge"
LABELS = str(Path(__file__).resolve().parents[1] / "berds" / "data" / "demo" / "labelled_pairs.tsv")
WIDTH = 80


@pytest.fixture
def headers(monkeypatch):
    """Every header given to ``Table.add_column`` while a command runs."""
    seen: list[str] = []
    original = Table.add_column

    def add_column(self, header="", *args, **kwargs):
        seen.append(str(header))
        return original(self, header, *args, **kwargs)

    monkeypatch.setattr(Table, "add_column", add_column)
    return seen


def header_words(headers: list[str]) -> set[str]:
    words = set()
    for header in headers:
        plain = re.sub(r"\[/?[a-z ]*\]", "", header)  # rich markup
        words.update(w for w in plain.split() if len(w) > 1)
    return words


def run_80(args: list[str], headers: list[str]) -> str:
    from typer.testing import CliRunner

    from berds.cli import app

    headers.clear()
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def check(output: str, headers: list[str], what: str) -> None:
    assert headers, f"{what}: printed no table"
    wide = [line for line in output.splitlines() if len(line) > WIDTH]
    assert not wide, f"{what}: {len(wide)} lines wider than {WIDTH}, e.g.\n{wide[0]}"
    cropped = [line for line in output.splitlines() if line[:1] in "┏┃┡│└" and line.rstrip()[-1:] not in "┓┃┩│┘"]
    assert not cropped, f"{what}: a table was cropped at {WIDTH} columns:\n{cropped[0]}"
    flat = output.replace("\n", " ")
    broken = sorted(w for w in header_words(headers) if w not in flat)
    assert not broken, f"{what}: header words broken or cut at {WIDTH} columns: {broken}\n{output}"


@pytest.fixture
def runs(tmp_path):
    a = save_run(make_run(n_questions=3, depth=10, name="bm25"), tmp_path / "bm25")
    b = save_run(make_run(n_questions=3, depth=10, name="minilm-mmr0.75"), tmp_path / "minilm-mmr0.75")
    return [str(a), str(b)]


def test_eval_and_analysis_tables(tmp_path, runs, headers):
    cache = str(tmp_path / "c.sqlite")
    commands = {
        "eval": ["eval", *runs, "--judge", JUDGE, "--k", "5,10", "--cache", cache, "-q"],
        "analyze coverage": ["analyze", "coverage", *runs, "--judge", JUDGE, "--depth", "10", "--cache", cache, "-q"],
        "analyze docs-needed": ["analyze", "docs-needed", *runs, "--judge", JUDGE, "--depth", "10", "--cache", cache,
                                "-q"],
        "report": ["report", *runs, "--judge", JUDGE, "--k", "5", "--cache", cache, "--out", str(tmp_path / "rep"),
                   "-q"],
        "cache info": ["cache", "info", "--cache", cache],
        "eval --measure": ["eval", *runs, "--judge", JUDGE, "--k", "5,10", "--cache", cache, "-q", "--out",
                           str(tmp_path / "measured"), "--measure", "alpha_nDCG@10", "--measure", "ERR_IA@10",
                           "--measure", "StRecall@10"],
    }
    for what, args in commands.items():
        output = run_80(args, headers)
        check(output, headers, what)


def test_cache_info_keeps_a_long_judge_id_on_one_line(tmp_path, headers):
    from berds.evaluate.cache import JudgementCache
    from berds.types import JudgePair, Verdict

    judge_id = "embedded:v2-minilm-l6-dcde3ec3c6+stance-ac28ba6746"  # the shipped judge's id: 50 characters
    with JudgementCache(tmp_path / "c.sqlite") as cache:
        cache.put_many(judge_id, "embedded-cross-encoder-v2", [JudgePair("p", "passage")], [Verdict(True, 0.9, "")])
    output = run_80(["cache", "info", "--cache", str(tmp_path / "c.sqlite")], headers)
    check(output, headers, "cache info")
    assert judge_id in output and "embedded-cross-encoder-v2" in output, output  # (copied from here into scripts)


def test_judge_trust_tables(tmp_path, runs, headers):
    cache = str(tmp_path / "c.sqlite")
    commands = {
        "judge validate": ["judge", "validate", "--labels", LABELS, "--judge", JUDGE, "--judge", "demo-gold",
                           "--bootstrap", "20", "--cache", cache, "-q"],
        "judge audit": ["judge", "audit", "--labels", LABELS, "--judge", JUDGE, "--run", runs[0], "--run", runs[1],
                        "--cache", cache, "-q"],
        "judge calibrate": ["judge", "calibrate", "--labels", LABELS, "--judge", JUDGE, "--no-save", "--cache", cache,
                            "-q"],
    }
    for what, args in commands.items():
        check(run_80(args, headers), headers, what)


def test_stance_corrected_sycophancy_table(tmp_path, headers):
    from berds.evaluate.analyses.results import save_result
    from berds.evaluate.analyses.sycophancy import SycophancyResult
    from judge_trust_fixtures import write_demo_subset

    saved = save_result(SycophancyResult(5, [
        {"label": "minilm-mmr0.75", "query": q, "p": 60.0, "n": 35.0, "p_docs": 12, "n_docs": 7, "docs": 20,
         "delta": 5 / 12, "questions": 4} for q in ("supporting", "opposing")]), tmp_path / "syco.json")
    output = run_80(["judge", "stance-correct", "--sycophancy", str(saved), "--labels",
                     str(write_demo_subset(tmp_path / "pairs.tsv")), "--judge", JUDGE, "--bootstrap", "20", "--cache",
                     str(tmp_path / "c.sqlite"), "-q"], headers)
    check(output, headers, "judge stance-correct")
    assert "12/7/20" in output and "sensitivity/specificity" in output, output


def test_catalogue_and_setup_tables(tmp_path, headers):
    for args in (["judges", "list"], ["retrievers", "list"], ["encoders", "list"], ["llm", "list"], ["rerankers", "list"],
                 ["engine", "info", "--engine", "local"], ["check-retriever", "word-overlap"]):
        check(run_80(args, headers), headers, " ".join(args))
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"bike lanes and shops {i} " * 30})
                            + "\n" for i in range(20)))
    check(run_80(["corpus", "build", "web", "--jsonl", str(docs), "--out", str(tmp_path / "store")], headers),
          headers, "corpus build")
    check(run_80(["corpus", "info", str(tmp_path / "store")], headers), headers, "corpus info")
    check(run_80(["retrieve", "-r", "word-overlap", "--corpus", str(tmp_path / "store"), "--questions", "demo",
                  "--k", "5", "--out", str(tmp_path / "run")], headers), headers, "retrieve")


def test_tuning_and_demo_tables(headers):
    from rich.console import Console

    from berds.cli.analysis import _print_table
    from berds.demo import agreement_table
    from berds.evaluate.evaluation import evaluate_run
    from berds.judges.demo_gold import DemoGoldJudge  # noqa: F401  (the demo's gold judge exists)
    from berds.studies.tuning import TuneResult, tuning_table
    from judges_for_tests import OverlapJudge

    rows = [{"lambda": lam, "setting": "", "mrecall@5": 0.5, "precision@5": 0.4, "mrecall@10": 0.6, "precision@10": 0.3}
            for lam in (None, 0.5, 0.75, 0.9)]
    result = TuneResult(rows=rows, chosen=0.75, select="mrecall@5", judge_id="embedded:x", ks=(5, 10), runs={})
    header, body = tuning_table(result)
    console = Console(width=WIDTH, record=True, file=open("/dev/null", "w"))
    headers.clear()
    from rich.table import Table as RichTable

    table = RichTable(title="MMR λ tuning on kialo-dev by mrecall@5, in % — judge: embedded")
    for col in header:
        table.add_column(col)
    for row in body:
        table.add_row(*row)
    console.print(table)
    judged = [evaluate_run(make_run(name=n), OverlapJudge(), ks=(5,), progress=False) for n in ("bm25", "minilm")]
    gold = [evaluate_run(make_run(name=n), OverlapJudge(threshold=0.9), ks=(5,), progress=False) for n in ("bm25", "minilm")]
    console.print(agreement_table(judged, gold, "embedded"))
    check(console.export_text(), headers, "tuning and demo tables")
    assert _print_table  # the CLI prints tuning_table through it


def test_corpus_build_bar_fits(tmp_path):
    from rich.console import Console

    from berds.corpora.build import BuildProgress

    live = Console(width=WIDTH, file=open("/dev/null", "w"))
    snapshot = Console(width=WIDTH, record=True, file=open("/dev/null", "w"))
    with BuildProgress("wikipedia (XML dump)", total_bytes=21_000_000_000, console=live) as bar:
        bar.position = lambda: 9_000_000_000
        bar._start -= 600  # ten minutes in: a realistic rate
        bar.update(1_234_567, 14_812_345, force=True)
        snapshot.print(bar._progress.get_renderable())
    text = snapshot.export_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and all(len(line) <= WIDTH for line in lines), text
    assert "14,812,345 passages" in text and "43%" in text and "…" not in text


def test_every_help_page_fits_80_columns_with_every_option_name_whole():
    """`berds ... --help` for every command: no line past 80 columns and no option name cut short (rich's
    option panels used to cut names such as --encoder-option to '--encoder-opti…')."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from berds.cli import app

    paths = []

    def walk(command, path):
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, path + [name])

    root = get_command(app)
    walk(root, [])
    assert len(paths) > 40
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
        assert result.exit_code == 0, (path, result.output)
        wide = [line for line in result.output.splitlines() if len(line) > 80]
        assert not wide, (path, wide)
        assert "…" not in result.output, (path, result.output)
        command = root
        for name in path:
            command = command.commands[name]
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("--") and opt != "--help":
                    assert opt in result.output, (path, opt)
        # each sub-command's one-line description is whole: click cuts a long first sentence to "word..."
        listing = result.output.split("\nCommands:\n", 1)[1] if "\nCommands:\n" in result.output else ""
        assert "..." not in listing, (path, listing)


def test_compare_and_diversify_study_tables(tmp_path, runs, headers):
    from retrieval_fixtures import tiny_bert

    encoder = str(tiny_bert(tmp_path / "encoder"))  # (the table's layout, not its values: any encoder will do)
    demo_run = str(Path(__file__).resolve().parents[1] / "berds" / "data" / "demo" / "run.ctxs.jsonl")
    commands = {
        "compare": ["compare", *runs, "--judge", JUDGE, "--k", "5,10", "--cache", str(tmp_path / "c.sqlite"),
                    "--resamples", "200", "-q"],
        # (Precision@10 folded into "Precision@1" / "0": the header check above catches it)
        "study diversify": ["study", "diversify", demo_run, "--split-dev", "0.5", "--judge", "demo-gold",
                            "--aspects", "oracle", "-s", "pm2", "--model", encoder, "--pooling",
                            "mean", "--depth", "20", "--resamples", "200", "--cache", str(tmp_path / "d.sqlite"),
                            "--out", str(tmp_path / "study"), "-q"],
    }
    for what, args in commands.items():
        output = run_80(args, headers)
        check(output, headers, what)
        if what == "compare":
            # one line per comparison: the run name, each metric and its cells whole (a long run name, the interval
            # and the p-values folded every row onto three lines)
            lines = output.splitlines()
            assert any(line.startswith("│ minilm-mmr0.75 ") for line in lines), output
            metric_rows = [line for line in lines if re.match(r"│\s+(MRecall|Prec)@\d+ ", line)]
            assert len(metric_rows) == 4 and all(re.search(r"[+-]\d+\.\d \[[+-]\d+\.\d,[+-]\d+\.\d\]", line)
                                                 and re.search(r"\d\.\d{4} \(\d\.\d{4}\)", line)
                                                 for line in metric_rows), output


def test_label_plan_tables(tmp_path, headers):
    """`label plan` from validated error rates: its table trades `width now` for the conservative `n PPI 90%`
    and ends with the line of the rates (with both, 3-digit N cut a header word)."""
    from berds.io import write_json
    from berds.judges import load_judge

    run = str(save_run(make_run(n_questions=120, depth=5, name="bm25"), tmp_path / "bm25"))
    cache = str(tmp_path / "c.sqlite")
    run_80(["eval", run, "--judge", JUDGE, "--k", "5", "--cache", cache, "-q"], headers)
    judge_id = load_judge(JUDGE).id
    report = tmp_path / "validate.json"
    write_json(report, {"judges": [{"judge_id": judge_id, "counts": {"tp": 40, "fp": 10, "fn": 20, "tn": 130}}]})
    output = run_80(["label", "plan", run, "--judge", JUDGE, "--validation", str(report), "--target-width", "20",
                     "--cache", cache], headers)
    check(output, headers, "label plan --validation")
    assert "90%" in output and "rates: sensitivity" in output, output
    assert "…" not in output, output  # ("judged" is in the caption too: check's word search would miss "judg…")
