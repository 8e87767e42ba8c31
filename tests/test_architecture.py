"""The layers of berds, checked from the source: no import cycles, and every import points down.

Every ``import berds.x`` / ``from berds.x import y`` counts, including those inside functions (a lazy
import is still a dependency). CONTRIBUTING.md ("Architecture") explains the layers in words.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "berds"

# Bottom-up. A unit (a top-level module or package of berds) may import only units of a lower layer.
LAYERS: list[set[str]] = [
    {"errors", "__init__"},  # berds/__init__.py holds only __version__
    {"types", "lazy", "registry"},
    {"io"},
    {"java", "questions"},
    {"runs"},
    {"engine", "llm"},
    {"corpora"},
    {"indexes"},
    {"retrievers"},
    {"rerank"},
    {"judges"},
    {"evaluate"},
    {"answers"},
    {"trust"},
    {"studies"},
    {"testing", "demo", "pyterrier", "ir_datasets"},  # the last two: berds in PyTerrier / ir_datasets
    {"cli"},
    {"__main__"},  # ``python -m berds`` runs the command line
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The berds modules ``path`` imports (``from berds.a import b`` counts ``berds.a.b`` when b is a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("berds"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("berds"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in modules else node.module)
    return {m for m in out if m in modules}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.fixture(scope="module")
def module_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(path, modules) - {name} for name, path in modules.items()}


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_between_modules(module_graph):
    assert find_cycle(module_graph) is None


def test_no_import_cycle_between_packages(module_graph):
    units: dict[str, set[str]] = {}
    for mod, deps in module_graph.items():
        units.setdefault(unit_of(mod), set()).update(unit_of(d) for d in deps if unit_of(d) != unit_of(mod))
    assert find_cycle(units) is None


def test_every_unit_has_a_layer(module_graph):
    assert {unit_of(m) for m in module_graph} - set(RANK) == set()


def test_imports_point_down_the_layers(module_graph):
    upward = sorted(
        f"{mod} imports {dep}"
        for mod, deps in module_graph.items()
        for dep in deps
        if unit_of(dep) != unit_of(mod) and RANK[unit_of(dep)] >= RANK[unit_of(mod)]
    )
    assert upward == []


def test_judges_engine_and_llm_know_no_runs_or_metrics(module_graph):
    """The issue-11 rules in words: judges know nothing of runs/metrics; the engine and the LLM layer no judge."""
    forbidden = {"judges": {"runs", "evaluate", "trust", "studies", "retrievers", "rerank"},
                 "engine": {"judges", "evaluate", "indexes", "corpora", "retrievers", "llm"},
                 "llm": {"judges", "evaluate", "retrievers"},
                 "rerank": {"evaluate", "judges", "studies"}}
    bad = sorted(f"{m} imports {d}" for m, deps in module_graph.items() for d in deps
                 if unit_of(d) in forbidden.get(unit_of(m), set()))
    assert bad == []
