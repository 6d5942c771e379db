"""celldag's own modules are imported at the top of a file, where a reader sees every tie (docs/design.md).

A function-local import is kept for start-up only: a job, the Snakefile's parse and ``celldag --help`` are fresh
processes that must not load scipy, torch or matplotlib they never use. So an import of a celldag module inside a
function is allowed exactly where that module loads, when imported, a third-party package the importing module
does not load itself; the test names the packages, so the reason of each one stays visible and no hand-kept
allow-list can go stale. Everywhere else the import belongs at the top.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from celldag_modules import modules_of
from conftest import REPO

SOURCE = REPO / "src"


def imported_names(node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """What an import statement loads: celldag modules (``from pkg import sub`` loads the submodule, and a module
    loads its parent packages) and the top-level names of other packages."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif node.level:  # celldag spells its imports absolutely; a relative one would be read wrongly here
        raise AssertionError(f"relative import at line {node.lineno}: celldag imports by absolute name")
    else:
        names = {f"{node.module}.{alias.name}" for alias in node.names} & modules or {node.module}
        names.add(node.module)
    loaded = set()
    for name in names:
        parts = name.split(".")
        loaded |= (
            {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules if parts[0] == "celldag" else {parts[0]}
        )
    return loaded


def top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: the module's body, its if/try/with/class blocks (not a
    ``TYPE_CHECKING`` block), never a function's body."""
    found, blocks = [], [tree.body]
    while blocks:
        for node in blocks.pop():
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
                blocks += [
                    getattr(node, field) for field in ("body", "orelse", "finalbody") if getattr(node, field, None)
                ]
                blocks += [handler.body for handler in getattr(node, "handlers", [])]
    return found


def local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [
        node
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]


def needless_local_imports(source: Path) -> list[str]:
    """``module:line imports target`` for every function-local import of a celldag module that defers nothing."""
    trees = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in modules_of(source).items()}
    modules = set(trees)
    direct = {
        name: set().union(*(imported_names(node, modules) for node in top_level_imports(tree)))
        for name, tree in trees.items()
    }
    third_party: dict[str, set[str]] = {}

    def loads(module: str) -> set[str]:
        """The third-party packages importing ``module`` loads, through the celldag modules it imports."""
        if module not in third_party:
            third_party[module] = set()  # a cycle adds nothing (test_layers forbids them anyway)
            outside = {name for name in direct[module] - modules if name not in sys.stdlib_module_names}
            third_party[module] = outside - {"__future__"} | set().union(
                *map(loads, direct[module] & modules - {module})
            )
        return third_party[module]

    needless = []
    for name, tree in sorted(trees.items()):
        for node in local_imports(tree):
            # the root package is loaded by any celldag import: named only when imported for itself
            targets = {target for target in imported_names(node, modules) if target.startswith("celldag.")} - {name}
            targets = targets or {"celldag"} & imported_names(node, modules) - {name}
            if targets and not set().union(*map(loads, targets)) - loads(name):
                needless.append(f"{name}:{node.lineno} imports {', '.join(sorted(targets))}")
    return needless


def test_a_local_import_that_defers_nothing_is_found(tmp_path):
    package = tmp_path / "celldag"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "light.py").write_text("import json\nimport numpy\n")
    (package / "plotting.py").write_text("import matplotlib.pyplot\n")
    (package / "user.py").write_text(
        "import numpy\n\n"
        "def f():\n    from celldag.light import dumps\n\n"  # loads only numpy, which user loads itself
        "def g():\n    from celldag import plotting\n"  # defers matplotlib: allowed
    )
    assert needless_local_imports(tmp_path) == ["celldag.user:4 imports celldag.light"]


def test_celldag_modules_are_imported_at_the_top_unless_that_would_load_a_package_early():
    needless = needless_local_imports(SOURCE)
    assert not needless, (
        "import these at the top of the file: they load no third-party package the module "
        "does not load already: " + "; ".join(needless)
    )
