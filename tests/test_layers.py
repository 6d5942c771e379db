"""celldag's layers: modules import each other without cycles (a cycle ties two modules into one idea that reads
as two), and only from their own floor or lower ones (models never import views, views never import commands).

Every import of a celldag module counts, at the top of a file or inside a function (a function-local import hides
a tie from the reader, not from the graph). ``from celldag.pkg import name`` is an import of the submodule
``celldag.pkg.name`` where one exists, else of the package (its ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

SOURCE = REPO / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The celldag modules ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("celldag")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("celldag"):
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules
            found |= submodules or {node.module}
            if len(submodules) < len(node.names):  # names of the module itself, beside its submodules
                found.add(node.module)
    return found & modules


def import_graph() -> dict[str, set[str]]:
    paths = sorted(SOURCE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imports_of(path, modules) - {module_name(path)} for path in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_cycle_finder_finds_a_cycle_through_a_function_local_import(tmp_path, monkeypatch):
    package = tmp_path / "celldag"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("def f():\n    from celldag.view import render\n")
    (package / "view.py").write_text("from celldag import model\n")
    (package / "leaf.py").write_text("import celldag.model\n")
    monkeypatch.setattr(__import__(__name__), "SOURCE", tmp_path)
    assert cycles(import_graph()) == [["celldag.model", "celldag.view"]]


def test_celldag_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 90 and "celldag.plan" in graph["celldag.embeddings.providers"]  # the graph is read
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" ⇄ ".join(component) for component in found)


# The floors, lowest first: a module imports only from its own floor or lower ones. A module belongs to the floor
# of the longest prefix that names it (``celldag.report.leaderboard``, a model of results, before ``celldag.report``).
FLOORS = (
    ("base", ("celldag", "celldag.errors", "celldag.provenance")),
    ("registry", ("celldag.extensions", "celldag.tracks", "celldag.contracts", "celldag.artifacts", "celldag.records",
                  "celldag.registry")),
    ("plan", ("celldag.plan",)),
    ("science", ("celldag.data", "celldag.embeddings", "celldag.lineage", "celldag.representation", "celldag.annotation",
                 "celldag.methods", "celldag.training")),
    ("execution", ("celldag.joblog", "celldag.archives", "celldag.prepare", "celldag.runner", "celldag.chained",
                   "celldag.scoring", "celldag.download", "celldag.resources", "celldag.envs", "celldag.prefetch")),
    ("results", ("celldag.tolerance", "celldag.compare", "celldag.published", "celldag.record_differences",
                 "celldag.report.leaderboard", "celldag.reference")),
    # a track's figures are views of its scores: they sit on the report floor, beside the shared ones they draw with
    ("report", ("celldag.report", "celldag.lineage.figures", "celldag.representation.figures", "celldag.annotation.figures")),
    ("commands", ("celldag.cli", "celldag.audit", "celldag.validate", "celldag.check", "celldag.reference_runs")),
)  # fmt: skip


def floor_of(module: str) -> int:
    """The index in FLOORS of the floor whose longest prefix names ``module``."""
    named = [(len(prefix), index) for index, (_, prefixes) in enumerate(FLOORS) for prefix in prefixes
             if module == prefix or (prefix != "celldag" and module.startswith(prefix + "."))]  # fmt: skip
    assert named, f"{module} is on no floor: add it to FLOORS in {__file__}"
    return max(named)[1]


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(module, target) for module, targets in graph.items() for target in targets
            if floor_of(target) > floor_of(module)}  # fmt: skip


def test_the_floors_find_a_model_importing_a_view():
    graph = {"celldag.compare": {"celldag.report.comparison", "celldag.plan"}, "celldag.report.comparison": set(),
             "celldag.plan": {"celldag.registry"}, "celldag.registry": set()}  # fmt: skip
    assert upward_imports(graph) == {("celldag.compare", "celldag.report.comparison")}


def test_every_module_imports_only_from_its_floor_or_lower_ones():
    upward = sorted(upward_imports(import_graph()))
    assert not upward, "imports from a higher floor (tests/test_layers.py FLOORS): " + "; ".join(f"{a} → {b}" for a, b in upward)


def test_the_import_paths_labs_were_given_still_import():
    """A name that moved down a floor keeps the path the docs once gave labs, as a re-export of the same object."""
    from celldag import tracks
    from celldag.report import figures

    assert figures.COMMON is tracks.COMMON_FIGURES
    assert [figure.name for figure in figures.COMMON] == ["scores", "cost"]
