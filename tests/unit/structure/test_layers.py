"""celldag's layers: modules import each other without cycles (a cycle ties two modules into one idea that reads
as two), and only from their own floor or lower ones (models never import views, views never import commands).

Every import of a celldag module counts, at the top of a file or inside a function (a function-local import hides
a tie from the reader, not from the graph). ``from celldag.pkg import name`` is an import of the submodule
``celldag.pkg.name`` where one exists, else of the package (its ``__init__``).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from celldag_modules import modules_of
from conftest import REPO

SOURCE = REPO / "src"


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
    paths = modules_of(SOURCE)
    return {name: imports_of(path, set(paths)) - {name} for name, path in paths.items()}


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


# The floors are declared once, in pyproject.toml's import-linter contract ``floors`` (highest first, a module with
# everything under it; lint-imports checks them too). Here, lowest first, each the full names of its modules.
def floors_of_the_contract(pyproject: Path = REPO / "pyproject.toml") -> tuple[tuple[str, ...], ...]:
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    contract = next(contract for contract in contracts if contract["id"] == "floors")
    (container,) = contract["containers"]
    return tuple(
        tuple(f"{container}.{name.strip()}" for name in re.split(r"[:|]", layer))
        for layer in reversed(contract["layers"])
    )


FLOORS = floors_of_the_contract()


def naming(module: str) -> list[int]:
    """The floors whose layers name ``module`` or a package above it: one at most (import-linter refuses a layer
    inside another)."""
    return [
        index for index, names in enumerate(FLOORS) for name in names if module == name or module.startswith(name + ".")
    ]


def floor_of(module: str) -> int:
    """The index in FLOORS of ``module``'s floor. A package no layer can name, because its modules sit on two floors
    (``celldag.report``: its leaderboard is on the results floor), or celldag itself, is on the lowest floor of its
    modules: Python runs it whenever one of them is imported."""
    below = [index for index, names in enumerate(FLOORS) for name in names if name.startswith(module + ".")]
    assert naming(module) or below, (
        f"{module} is on no floor: add it to a layer of the floors contract in pyproject.toml [tool.importlinter]"
    )
    return naming(module)[0] if naming(module) else min(below)


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if floor_of(target) > floor_of(module)
    }


def test_the_floors_find_a_model_importing_a_view():
    graph = {
        "celldag.results.compare": {"celldag.report.comparison", "celldag.plan"},
        "celldag.report.comparison": set(),
        "celldag.plan": {"celldag.registry"},
        "celldag.registry": set(),
    }
    assert upward_imports(graph) == {("celldag.results.compare", "celldag.report.comparison")}


def test_every_module_imports_only_from_its_floor_or_lower_ones():
    upward = sorted(upward_imports(import_graph()))
    assert not upward, (
        "imports from a higher floor (pyproject.toml [tool.importlinter], the floors contract): "
        + "; ".join(f"{a} → {b}" for a, b in upward)
    )


def test_every_module_is_on_a_floor_and_lint_imports_sees_every_import():
    """lint-imports checks only the modules its layers name (its exhaustive option covers celldag's children, not the
    modules of the packages split over two floors): every module is on a floor, and a module no layer names
    (celldag's own __init__, a split package's) imports no celldag module."""
    graph = import_graph()
    for module in graph:
        floor_of(module)
    unchecked = {module: sorted(graph[module]) for module in graph if not naming(module) and graph[module]}
    assert not unchecked, f"imports lint-imports does not check: {unchecked}"


def test_the_import_paths_labs_were_given_still_import():
    """A name that moved down a floor keeps the path the docs once gave labs, as a re-export of the same object."""
    from celldag import tracks
    from celldag.report import figures

    assert figures.COMMON is tracks.COMMON_FIGURES
    assert [figure.name for figure in figures.COMMON] == ["scores", "cost"]


# Basenames two folders of celldag share, each with the reason it is one meaning, not two (docs/design.md, Floors):
# a module that computes beside the report's view that draws it, or each package's own piece of one interface.
SHARED_BASENAMES = {
    "check": ({"commands", "report"}, "commands/check computes the verdict, report/check draws its page"),
    "leaderboard": ({"results", "report"}, "results/leaderboard computes the tables, report/leaderboard draws them"),
    "figures": ({"report", "lineage", "representation", "annotation"}, "the shared figures and each track's"),
    "track": ({"lineage", "representation", "annotation"}, "each track's declaration (celldag.tracks.Track)"),
    "metrics": ({"lineage", "representation", "annotation"}, "each track's metrics"),
    "scoring": ({"lineage", "representation", "annotation"}, "each track's scorer"),
    "model": ({"methods/celltreeqm", "methods/scilama"}, "each trained method's network"),
    "train": ({"methods/celltreeqm", "methods/scilama"}, "each trained method's training loop"),
    "losses": ({"methods/celltreeqm", "methods/scilama"}, "each trained method's losses"),
}


def test_no_two_folders_share_a_module_name_but_the_listed_pairs():
    folders_of: dict[str, set[str]] = {}
    for path in (SOURCE / "celldag").rglob("*.py"):
        if path.name != "__init__.py":
            folder = path.parent.relative_to(SOURCE / "celldag").as_posix()
            folders_of.setdefault(path.stem, set()).add("." if folder == "." else folder)
    shared = {name: folders for name, folders in folders_of.items() if len(folders) > 1}
    assert shared == {name: folders for name, (folders, _why) in SHARED_BASENAMES.items()}


def test_the_top_of_the_package_holds_the_door_the_ground_and_packages():
    modules = sorted(path.stem for path in (SOURCE / "celldag").glob("*.py") if path.stem != "__init__")
    assert modules == [
        "artifacts",
        "bibliography",
        "cli",
        "contracts",
        "document",
        "errors",
        "extensions",
        "multiplicity",
        "plan",
        "provenance",
        "records",
        "release",
        "tracks",
        "training",
    ]
