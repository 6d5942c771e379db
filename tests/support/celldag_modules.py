"""celldag's modules by dotted name, read from a source folder (``src``, or a built copy in a test): the import
graph of test_layers and the import-placement rule of test_imports_at_top read the same names."""

from __future__ import annotations

from pathlib import Path


def module_name(path: Path, source: Path) -> str:
    """``celldag.report.html`` for ``source/celldag/report/html.py``; a package by its folder's name."""
    parts = path.relative_to(source).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(source: Path) -> dict[str, Path]:
    """Every module under ``source`` by dotted name, in path order."""
    return {module_name(path, source): path for path in sorted(source.rglob("*.py"))}
