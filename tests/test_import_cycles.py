"""celldag's modules import each other without cycles: a cycle ties two modules into one idea that reads as two.

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
