"""References to code in the registries: ``package.module:name``, the one way to name an extension.

Tracks, dataset loaders, methods and gene-embedding providers are named this way in the YAML
registries. ``check_reference`` verifies a reference when the config is parsed without importing it
(imports cost seconds per job here: scvi 7 s, scikit-bio 4 s): the module must be findable and
define ``name`` at its top level. ``load`` imports it when a job needs it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from functools import cache

from celldag.errors import InputError

REFERENCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
REFERENCE_PATTERN = REFERENCE.pattern  # the registries' JSON schemas use the same rule


def split(reference: str) -> tuple[str, str]:
    module, _, name = reference.partition(":")
    return module, name


def check_reference(reference: str, where: str) -> None:
    """Raise an InputError naming ``where`` unless ``reference`` names a top-level definition of a findable module."""
    if not REFERENCE.match(reference):
        raise InputError(f"{where}: {reference!r} is not a reference of the form 'package.module:name'")
    module, name = split(reference)
    if name not in top_level_names(module, where):
        raise InputError(f"{where}: module {module!r} defines no {name!r} at its top level")


@cache
def top_level_names(module: str, where: str) -> frozenset[str]:
    """Names a module binds at its top level, read from its source (functions, classes, assignments, imports)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package is missing
        spec = None
    if spec is None or spec.origin is None:
        raise InputError(f"{where}: no module {module!r} on the Python path")
    if not spec.origin.endswith(".py"):  # a compiled module: its names are not readable without importing it
        return frozenset(dir(importlib.import_module(module)))
    with open(spec.origin, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), spec.origin)
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def load(reference: str):
    """Import the module of ``reference`` and return the object it names."""
    module, name = split(reference)
    return getattr(importlib.import_module(module), name)
