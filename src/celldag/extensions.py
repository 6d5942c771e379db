"""Entry points: ``package.module:name``, the one way the registries name code (the term of Python packaging).

Tracks, dataset loaders, methods and gene-embedding providers are named this way in the YAML
registries. ``check_entry_point`` verifies an entry point when the config is parsed without importing it
(imports cost seconds per job here: scvi 7 s, scikit-bio 4 s): the module must be findable and
define ``name`` at its top level. ``load`` imports it when a job needs it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import re
import warnings
from functools import cache

from celldag.errors import InputError

ENTRY_POINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
ENTRY_POINT_PATTERN = ENTRY_POINT.pattern  # the registries' JSON schemas use the same rule

# celldag's modules that moved, old name → new: a registry naming the old one keeps working for one release (0.3),
# with a warning naming the new string at every parse; the next release drops the old name.
MOVED_MODULES = {"celldag.annotation.classifiers": "celldag.methods.classifiers"}


def split(entry_point: str) -> tuple[str, str]:
    """(module, name) of ``package.module:name``, a moved module under its new name (``MOVED_MODULES``)."""
    module, _, name = entry_point.partition(":")
    return MOVED_MODULES.get(module, module), name


def check_entry_point(entry_point: str, where: str) -> None:
    """Raise an InputError naming ``where`` unless ``entry_point`` names a top-level definition of a findable module;
    warn (FutureWarning, shown by default) where it names a module that moved."""
    if not ENTRY_POINT.match(entry_point):
        raise InputError(f"{where}: {entry_point!r} is not an entry point of the form 'package.module:name'")
    module, name = split(entry_point)
    if module != entry_point.partition(":")[0]:
        warnings.warn(
            f"{where}: {entry_point!r} names a module that moved, and the old name stops working in "
            f"celldag 0.4: write '{module}:{name}'",
            FutureWarning,
            stacklevel=2,
        )
    if name not in top_level_names(module, where):
        raise InputError(f"{where}: module {module!r} defines no {name!r} at its top level")


def find_spec(module: str):
    """A module's spec without importing it or its parent packages (``importlib.util.find_spec`` runs
    the parents' ``__init__``, which may import torch); None when it is not on the path."""
    parts = module.split(".")
    spec = importlib.util.find_spec(parts[0])
    for depth in range(2, len(parts) + 1):
        if spec is None or spec.submodule_search_locations is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]), list(spec.submodule_search_locations))
    return spec


@cache
def module_source(module: str, where: str) -> ast.Module | None:
    """The parsed source of a findable module; None for a compiled one (readable only by importing it)."""
    spec = find_spec(module)
    if spec is None or spec.origin is None:
        raise InputError(f"{where}: no module {module!r} on the Python path")
    if not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as handle:
        return ast.parse(handle.read(), spec.origin)


@cache
def top_level_names(module: str, where: str) -> frozenset[str]:
    """Names a module binds at its top level, read from its source (functions, classes, assignments, imports)."""
    tree = module_source(module, where)
    if tree is None:
        return frozenset(dir(importlib.import_module(module)))
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


class Unreadable(Exception):
    """A declaration that is not made of literals and names of literals: only importing can tell its value."""


def declared_attribute(entry_point: str, attribute: str, where: str):
    """The value a module assigns to ``<function>.<attribute>`` at its top level, read from the source
    without importing it (the registries name dozens of functions; their modules import torch, anndata,
    scvi: seconds at every parse of the workflow). None when the module makes no such assignment.

    The value may hold literals, ``*`` unpackings, ``tuple()`` / ``list()`` of them and names of top-level
    literals, also imported ones (``from pkg.mod import DEFAULTS``): a dict stands for its keys inside a
    sequence. Anything else (a call, an expression) is read by importing the module after all.
    """
    module, name = split(entry_point)
    try:
        found = _assigned(module, name, attribute, where)
        return None if found is None else _value(found[1], found[0], where)
    except Unreadable:
        return getattr(load(entry_point), attribute, None)


def _assigned(module: str, name: str, attribute: str | None, where: str) -> tuple[str, ast.expr] | None:
    """(module, value) of the last top-level ``name = value`` of ``module`` — ``name.attribute = value``
    with an ``attribute`` — or, when ``name`` is imported there, of its origin; None where there is none."""
    tree = module_source(module, where)
    if tree is None:
        raise Unreadable(module)
    found = None
    for node in tree.body:  # the last assignment is the one the module leaves
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names(target, name, attribute) for target in targets):
                found = node.value
    if found is not None:
        return module, found
    origin = _imported(tree, module, name)
    return None if origin is None else _assigned(origin[0], origin[1], attribute, where)


def _names(target: ast.expr, name: str, attribute: str | None) -> bool:
    """Whether an assignment's target is ``name`` (``name.attribute`` with an ``attribute``)."""
    if attribute is None:
        return isinstance(target, ast.Name) and target.id == name
    return (
        isinstance(target, ast.Attribute)
        and target.attr == attribute
        and isinstance(target.value, ast.Name)
        and target.value.id == name
    )


def _imported(tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """(module, original name) of a name that ``from … import`` binds at the top level of ``module``."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    base = module.rsplit(".", node.level)[0] if node.level else ""
                    return ".".join(filter(None, [base, node.module])), alias.name
    return None


def _value(node: ast.expr, module: str, where: str):
    """A literal (strings, numbers, tuples, lists, dicts) built of literals and names of top-level literals."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(k, module, where): _value(v, module, where) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Tuple | ast.List):
        items = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                items += list(_value(element.value, module, where))  # a dict unpacks to its keys
            else:
                items.append(_value(element, module, where))
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list"):
        if len(node.args) == 1 and not node.keywords:
            values = list(_value(node.args[0], module, where))
            return tuple(values) if node.func.id == "tuple" else values
    if isinstance(node, ast.Name):
        found = _assigned(module, node.id, None, where)
        if found is None:
            raise Unreadable(f"{module}.{node.id}")
        return _value(found[1], found[0], where)
    raise Unreadable(ast.dump(node))


def load(entry_point: str):
    """Import the module of ``entry_point`` and return the object it names."""
    module, name = split(entry_point)
    return getattr(importlib.import_module(module), name)
