"""`berds --help` lists its commands grouped by workflow (issue 35): each command names its panel with typer's
rich_help_panel=, and the plain help berds prints (rich's cut long option names) groups by it."""

from __future__ import annotations

import re

from berds.cli import HELP_PANELS, OTHER_PANEL, main

EXPECTED = {
    "Start here": ["demo"],
    "Corpora and indexes": ["questions", "corpus", "index", "encoders"],
    "Retrieve and rerank": ["retrieve", "import", "retrievers", "rerank", "rerankers", "tune"],
    "Judge and evaluate": ["eval", "judges", "judge", "label", "compare", "cache", "answers"],
    "Analyses and reports": ["analyze", "report", "study", "export"],
    "Plug-ins and tools": ["check-retriever", "check-reranker", "check-provider", "llm", "engine"],
}


def test_help_groups_commands_by_workflow(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    try:
        main(["--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line[:-1]
            sections[current] = []
        elif current in HELP_PANELS and (m := re.match(r"  (\S+)", line)):
            sections[current].append(m.group(1))
    panels = [s for s in sections if s in HELP_PANELS]
    assert panels == list(HELP_PANELS)  # in workflow order
    assert OTHER_PANEL not in sections, "every berds command names its workflow panel (rich_help_panel=)"
    for panel, commands in EXPECTED.items():  # in this order, first in their panel
        assert sections[panel][:len(commands)] == commands, (panel, sections[panel])
    assert max(map(len, out.splitlines())) <= 80


def test_a_command_without_a_panel_is_listed_under_other_commands(capsys, monkeypatch):
    import typer

    from berds.cli import WorkflowGroup

    app = typer.Typer(cls=WorkflowGroup, rich_markup_mode=None)
    app.command("eval", rich_help_panel="Judge and evaluate")(lambda: None)
    app.command("newcomer", short_help="Added without a panel.")(lambda: None)
    try:
        app(["--help"], prog_name="berds")
    except SystemExit:
        pass
    out = capsys.readouterr().out
    assert out.index("Judge and evaluate:") < out.index(f"{OTHER_PANEL}:") < out.index("newcomer")
