"""import-linter's contracts (pyproject.toml [tool.importlinter]: celldag's floors as a layers contract, and no cycles
between the children of a package) hold over celldag, and lint-imports fails on a model that imports a view, even
inside a function, or on a module of celldag given no floor. `make lint` runs lint-imports too;
tests/unit/structure/test_layers.py checks the same floors on its own graph."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"  # installed beside this Python from requirements/lock.txt


def lint_imports(cwd: Path, source: Path | None = None) -> subprocess.CompletedProcess:
    """lint-imports with the contracts of ``cwd``'s pyproject.toml; ``source``: a folder holding a copy of celldag,
    first on PYTHONPATH, so that it is read instead of the installed (editable) one."""
    env = os.environ | ({"PYTHONPATH": str(source)} if source else {})
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_celldag_keeps_its_import_contracts():
    checked = lint_imports(REPO)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Contracts: 2 kept, 0 broken." in checked.stdout


def copy_of_celldag(tmp_path: Path) -> Path:
    """tmp_path/src/celldag, a copy of the package, beside a copy of pyproject.toml (the contracts)."""
    shutil.copytree(REPO / "src/celldag", tmp_path / "src/celldag", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path / "src"


def test_lint_imports_fails_on_a_model_importing_a_view_inside_a_function(tmp_path):
    source = copy_of_celldag(tmp_path)
    published = source / "celldag/results/published.py"
    published.write_text(
        published.read_text() + "\n\ndef view():\n    from celldag.report import html\n\n    return html\n"
    )
    checked = lint_imports(tmp_path, source)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    # the copy is what was read: the installed celldag has no such import
    assert "celldag.results is not allowed to import celldag.report" in checked.stdout
    assert "- celldag.results.published -> celldag.report.html" in checked.stdout
    assert "No cycles are allowed in celldag." in checked.stdout  # report.html imports published


def test_lint_imports_fails_on_a_module_given_no_floor(tmp_path):
    source = copy_of_celldag(tmp_path)
    (source / "celldag/unplaced.py").write_text('"""A module the floors contract does not list."""\n')
    checked = lint_imports(tmp_path, source)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "- celldag.unplaced" in checked.stdout
