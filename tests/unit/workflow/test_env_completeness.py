"""Each conda env (envs/*.yaml) lists every distribution its jobs import.

A rule's env comes from its ``conda:`` directive (workflow/rules/*.smk): a file of envs/, ``dataset_env``
(the env of the dataset's track, config/tracks.yaml) or ``method_env`` (the method's ``env``,
config/methods.yaml). What a job runs is its script (workflow/scripts/*.py) plus the code the registries
name for it: the dataset's loader (and the loaders a lab's entry names), the method's ``run``, the embedding
providers, the track's definition and the references of the roles the job calls (``track.call("scorer",
…)``, a figure's ``draw``). Their import closure is read statically (``ast``), function by function: the
imports inside functions count (the heavy libraries are imported lazily: exactly what an env misses
first), the ``if TYPE_CHECKING:`` blocks do not (never run); a package located with ``find_spec`` (its
data files) and pandas' Parquet engine (``to_parquet`` / ``read_parquet``) count as imports. Each
third-party top-level module is mapped to its distribution with the venv's
``importlib.metadata.packages_distributions()``; each must be a conda entry of the env file (conda-forge
names mapped to PyPI's: tests/unit/workflow/test_envs.py's CONDA_TO_PYPI) or of its pip section. What those
distributions pull in themselves is conda's business, not checked here.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path

import pytest
import yaml
from test_envs import CONDA_TO_PYPI, normalise

from celldag.extensions import find_spec
from celldag.plan import DEVICE_PARAMS
from celldag.registry import read_yaml
from celldag.tracks import Track, load_track

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "workflow/scripts"

# Imports a job reaches that its env need not provide: (top-level module, "celldag.module:unit" that
# imports it) -> why. As short as possible: each entry is a branch the static reading cannot tell is not taken.
ALLOWED = {
    # run_method checks CUDA (importing torch) only for a job that requests a GPU: a method with gpu: true when
    # the run asks for GPUs, or one whose params name a GPU (device: cuda); the envs of those methods list torch:
    # test_gpu_methods_envs_have_torch
    ("torch", "celldag.jobs.runner:cuda_available"): "called for gpu: true methods and device params only",
}

ROLES = {f.name for f in fields(Track) if f.type in ("str", "str | None")}  # what track.call(role, …) may name
# The loaders a lab's own registry entry names (docs/adding-a-dataset.md), by track: its dataset jobs run in
# the track's env like those of a shipped dataset
LAB_LOADERS = {"lineage": "celldag.data.h5ad:prepare_lineage_h5ad", "representation": "celldag.data.h5ad:prepare_h5ad"}


# ---------------------------------------------------------------- the static import closure
# The unit is a top-level function or class (a class with all its methods), or a module's top-level code
# (run on import). A unit reaches the celldag names it refers to (``f``, ``module.f``, a name imported
# from another module, a re-export followed to its origin); a reached unit runs its module's top level
# and its packages' ``__init__``. ``import x`` of a third-party module counts where a reached unit does it.
TOP = "<top>"
# Distributions used through another one, without an import of theirs: pandas' Parquet engine
USED_THROUGH = {"to_parquet": "pyarrow", "read_parquet": "pyarrow"}


def module_path(name: str) -> Path | None:
    """The source of a celldag module or package, found without importing it (nor its parents)."""
    spec = find_spec(name)
    return None if spec is None or spec.origin is None else Path(spec.origin)


def is_module(name: str) -> bool:
    return name.split(".")[0] == "celldag" and module_path(name) is not None


def is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def walk(nodes: Iterable[ast.AST]) -> Iterable[ast.AST]:
    """The nodes and all below them, less the bodies of ``if TYPE_CHECKING:`` (never run)."""
    for node in nodes:
        if is_type_checking(node):
            yield from walk(node.orelse)
            continue
        yield node
        yield from walk(ast.iter_child_nodes(node))


@dataclass(frozen=True)
class Source:
    """A parsed celldag module or workflow script: its units and the names its top level binds."""

    name: str  # dotted module name; a script's is "workflow/scripts/<stem>"
    path: Path
    package: str | None  # where relative imports start (None for a script)
    units: dict[str, list[ast.AST]]  # TOP, and each top-level def / class
    strings: dict[str, str]  # top-level NAME = "literal" (for find_spec(NAME))


@cache
def source(name: str, path: Path | None = None) -> Source:
    if path is None:
        path = module_path(name)
        assert path is not None and path.suffix == ".py", f"no source of {name}"
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    else:
        package = None
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    units: dict[str, list[ast.AST]] = {TOP: []}
    strings = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            units[node.name] = [node]
            # run at import: decorators, default values, base classes
            units[TOP] += node.decorator_list
            if isinstance(node, ast.ClassDef):
                units[TOP] += node.bases + [keyword.value for keyword in node.keywords]
            else:
                units[TOP] += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        else:
            units[TOP].append(node)
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                strings.update((t.id, node.value.value) for t in node.targets if isinstance(t, ast.Name))
    return Source(name, path, package, units, strings)


Target = tuple[str, str]  # (celldag module, unit)


def import_bindings(src: Source, nodes: Iterable[ast.AST]) -> tuple[dict[str, object], dict[str, int], set[str]]:
    """What the imports among ``nodes`` bind (name -> module name, (module, name) or None for third party),
    the third-party top-level modules they import (-> line) and the celldag modules they import."""
    bindings: dict[str, object] = {}
    third_party: dict[str, int] = {}
    modules: set[str] = set()

    def third(name: str, line: int) -> None:
        top = name.split(".")[0]
        if top and top not in sys.stdlib_module_names and top != "__future__":
            third_party.setdefault(top, line)

    for node in walk(nodes):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "celldag":
                    modules.add(alias.name)
                    bindings[alias.asname or "celldag"] = alias.name if alias.asname else "celldag"
                else:
                    third(alias.name, node.lineno)
                    bindings[alias.asname or alias.name.split(".")[0]] = None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = src.package.rsplit(".", node.level - 1)[0] if node.level > 1 else src.package
                name = ".".join(filter(None, [base, node.module]))
            else:
                name = node.module
            if name.split(".")[0] != "celldag":
                third(name, node.lineno)
                bindings.update(dict.fromkeys((a.asname or a.name for a in node.names)))
                continue
            modules.add(name)
            for alias in node.names:
                if is_module(f"{name}.{alias.name}"):
                    modules.add(f"{name}.{alias.name}")
                    bindings[alias.asname or alias.name] = f"{name}.{alias.name}"
                else:
                    bindings[alias.asname or alias.name] = (name, alias.name)
    return bindings, third_party, modules


@cache
def module_bindings(name: str) -> dict[str, object]:
    """Names a celldag module's top level binds: its defs and classes (-> (module, name)) and its imports."""
    src = source(name)
    bindings = import_bindings(src, src.units[TOP])[0]
    bindings.update({unit: (name, unit) for unit in src.units if unit != TOP})
    return bindings


def resolve(module: str, name: str, seen: frozenset = frozenset()) -> Target | str:
    """The unit ``module.name`` is (a re-export followed to where it is defined), or a module."""
    if is_module(f"{module}.{name}"):
        return f"{module}.{name}"
    bound = module_bindings(module).get(name)
    if isinstance(bound, tuple) and bound != (module, name) and bound not in seen:
        return resolve(*bound, seen | {bound})
    if isinstance(bound, str):
        return bound
    return (module, name) if name in source(module).units else (module, TOP)


@dataclass
class Unit:
    third_party: dict[str, int] = field(default_factory=dict)  # top-level module -> line
    reaches: set[Target] = field(default_factory=set)
    roles: set[str] = field(default_factory=set)  # Track roles called: "scorer", …, "figures" (a figure's draw)


@cache
def unit(module: str, name: str, script: Path | None = None) -> Unit:
    src = source(module, script)
    nodes = src.units[name]
    found = Unit()
    local, found.third_party, modules = import_bindings(src, nodes)
    bindings = ({} if script else module_bindings(module)) | local

    def target(node: ast.AST) -> object:
        """What a name or an attribute chain of names stands for: a celldag module, a unit, None."""
        if isinstance(node, ast.Name):
            return bindings.get(node.id)
        if isinstance(node, ast.Attribute):
            base = target(node.value)
            if isinstance(base, str):
                return resolve(base, node.attr)
        return None

    # `f.attribute = …` sets an attribute of f (prepare_h5ad.check_source = …): it does not run f
    assigned = {
        id(node.value) for node in walk(nodes) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }
    for node in walk(nodes):
        if isinstance(node, ast.Name | ast.Attribute) and id(node) not in assigned:
            reached = target(node)
            if isinstance(reached, tuple) and reached[0] != module:
                reached = resolve(*reached)
            if isinstance(reached, str):
                modules.add(reached)
            elif isinstance(reached, tuple) and reached != (module, name):
                found.reaches.add(reached)
        if isinstance(node, ast.Attribute) and node.attr in USED_THROUGH:
            found.third_party.setdefault(USED_THROUGH[node.attr], node.lineno)
        if isinstance(node, ast.Call) and node.args:
            func, first = node.func, node.args[0]
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == "call" and isinstance(first, ast.Constant) and first.value in ROLES:
                found.roles.add(first.value)  # track.call("scorer", …)
            elif called == "load" and isinstance(first, ast.Attribute) and first.attr == "draw":
                found.roles.add("figures")  # extensions.load(figure.draw)
            elif called == "find_spec":  # a package used without importing it (its data files)
                package = first.value if isinstance(first, ast.Constant) else src.strings.get(getattr(first, "id", ""))
                if isinstance(package, str) and package.split(".")[0] not in sys.stdlib_module_names:
                    found.third_party.setdefault(package.split(".")[0], node.lineno)
    for reached in modules:  # importing a module runs its top level and its packages' __init__
        parts = reached.split(".")
        found.reaches |= {(".".join(parts[:depth]), TOP) for depth in range(1, len(parts) + 1)}
    if not script:
        parts = module.split(".")
        found.reaches |= {(".".join(parts[:depth]), TOP) for depth in range(1, len(parts) + 1)}
    found.reaches.discard((module, name))
    return found


@dataclass(frozen=True)
class Job:
    """A family of jobs that run in one env: its scripts, the registry entry points (``module:name``) they
    load, and the tracks whose definitions they load (``celldag.tracks.load_track``) and call."""

    label: str
    scripts: frozenset[str]
    references: frozenset[str]
    tracks: frozenset[str]


def reference_target(reference: str) -> Target:
    module, _, name = reference.partition(":")
    found = resolve(module, name)
    return (found, TOP) if isinstance(found, str) else found


LOAD_TRACK = ("celldag.tracks", "load_track")  # once reached, the job's track definitions are imported


def closure(job: Job, tracks: dict) -> dict[str, list[tuple[str, str]]]:
    """Third-party top-level module -> [(unit "module:name", "path:line")] of every reached unit importing it."""
    scripts = {(f"workflow/scripts/{s}", TOP): SCRIPTS / f"{s}.py" for s in job.scripts}
    units = {target: unit(*target, path) for target, path in scripts.items()}
    pending = [target for found in units.values() for target in found.reaches]
    pending += [reference_target(reference) for reference in job.references]
    definitions = [load_track(tracks[track]["definition"]) for track in sorted(job.tracks)]
    roles: set[str] = set()
    while pending:
        target = pending.pop()
        if target in units:
            continue
        units[target] = unit(*target)
        pending += units[target].reaches
        if target == LOAD_TRACK:
            pending += [reference_target(tracks[track]["definition"]) for track in job.tracks]
        for role in units[target].roles - roles:
            roles.add(role)
            for definition in definitions:
                found = [f.draw for f in definition.figures] if role == "figures" else [getattr(definition, role)]
                pending += [reference_target(reference) for reference in found if reference]
    imports: dict[str, list[tuple[str, str]]] = {}
    for (module, name), found in sorted(units.items()):
        path = scripts.get((module, name)) or source(module).path
        for top, line in found.third_party.items():
            imports.setdefault(top, []).append((f"{module}:{name}", f"{path.relative_to(REPO)}:{line}"))
    return imports


# ---------------------------------------------------------------- which jobs run in which env
RULE = re.compile(r"^\s*rule\b.*?:\s*$", re.M)
ENV_PATH = r"\.\./\.\./envs/([\w-]+)\.yaml"
FAMILY = re.compile(r"[a-z][a-z0-9_-]*")  # an env of celldag's, envs/<family>.yaml


def rule_envs() -> list[tuple[str, str, str]]:
    """(rules file, script stem, conda directive) of every rule with a script; the directive is a path of
    envs/, ``dataset_env`` (the dataset's track's env) or ``method_env`` (the method's env)."""
    found = []
    for rule_file in sorted((REPO / "workflow/rules").glob("*.smk")):
        text = rule_file.read_text()
        starts = [m.start() for m in RULE.finditer(text)] + [len(text)]
        for start, end in zip(starts, starts[1:]):
            block = text[start:end]
            script = re.search(r"^\s*script:\s*\n\s*\"\.\./scripts/(\w+)\.py\"", block, re.M)
            conda = re.search(r"^\s*conda:\s*\n\s*(\S+)", block, re.M)
            if script:
                assert conda, f"{rule_file.name}: a rule running {script[1]}.py has no conda: directive"
                found.append((rule_file.name, script[1], conda[1].strip('",')))
    return found


def env_jobs() -> dict[str, list[Job]]:
    """env name -> the families of jobs that run in it."""
    datasets = read_yaml(REPO / "config/datasets.yaml")
    methods = read_yaml(REPO / "config/methods.yaml")
    embeddings = read_yaml(REPO / "config/embeddings.yaml")
    tracks = read_yaml(REPO / "config/tracks.yaml")
    upstream = {track: load_track(entry["definition"]).upstream for track, entry in tracks.items()}
    rules = rule_envs()
    unknown = {d for _, _, d in rules if d not in ("dataset_env", "method_env") and not re.fullmatch(ENV_PATH, d)}
    assert not unknown, f"conda: {sorted(unknown)}: neither a file of envs/ nor dataset_env / method_env"
    jobs: dict[str, list[Job]] = {}

    def add(env: str, job: Job) -> None:
        if FAMILY.fullmatch(env):  # a lab's own env file (a path) is the lab's to complete
            jobs.setdefault(env, []).append(job)

    # dataset_env: a dataset's jobs run in its entry's env, by default its track's; chained.smk's only for a
    # dataset that chains a track on its own (its task, the chained methods' runs, their scoring), serving
    # that track and its upstream
    for dataset, entry in datasets.items():
        chained = set(entry.get("chained", {}))
        scripts = {s for f, s, d in rules if d == "dataset_env" and (chained or f != "chained.smk")}
        served = {entry["track"], *chained, *(upstream[t] for t in chained)}
        references = {entry["loader"], *(m["run"] for m in methods.values() if m["track"] in chained)}
        job = Job(f"dataset {dataset}'s jobs", frozenset(scripts), frozenset(references), frozenset(served))
        add(entry.get("env") or tracks[entry["track"]].get("env", "lineage"), job)
    for track, loader in LAB_LOADERS.items():
        scripts = {s for f, s, d in rules if d == "dataset_env" and f != "chained.smk"}
        job = Job(f"a lab's {track} dataset's jobs", frozenset(scripts), frozenset({loader}), frozenset({track}))
        add(tracks[track].get("env", "lineage"), job)
    # method_env: a method's run_method jobs run in its env (a chained track's methods run in dataset_env)
    for method, entry in methods.items():
        if upstream[entry["track"]] is None:
            scripts = {s for _, s, d in rules if d == "method_env"}
            job = Job(
                f"method {method}'s jobs", frozenset(scripts), frozenset({entry["run"]}), frozenset({entry["track"]})
            )
            add(entry.get("env", "lineage"), job)
    # an env file named in the rule: every track's (aggregate and report_html load them all), every provider
    for rule_file, script, directive in rules:
        if env := re.fullmatch(ENV_PATH, directive):
            references = {e["provider"] for e in embeddings.values()} if script == "embed_genes" else set()
            job = Job(f"{rule_file}'s {script}.py", frozenset({script}), frozenset(references), frozenset(tracks))
            add(env[1], job)
    return jobs


# ---------------------------------------------------------------- the tests
def env_distributions(path: Path) -> set[str]:
    """Normalised PyPI names of an env file's conda entries (conda-forge names mapped) and its pip section."""
    names = set()
    for entry in yaml.safe_load(path.read_text())["dependencies"]:
        for pin in entry["pip"] if isinstance(entry, dict) else [entry]:
            name = re.split(r"[=<>!~ ]", pin.split("#")[0].strip(), maxsplit=1)[0]
            names.add(normalise(CONDA_TO_PYPI.get(name, name)))
    return names


def test_every_env_lists_the_distributions_its_jobs_import():
    tracks = read_yaml(REPO / "config/tracks.yaml")
    distributions = importlib.metadata.packages_distributions()
    missing: dict[tuple[str, str], str] = {}
    allowances = set()
    for env, jobs in sorted(env_jobs().items()):
        path = REPO / "envs" / f"{env}.yaml"
        assert path.is_file(), f"{jobs[0].label} run in envs/{env}.yaml, which is missing"
        listed = env_distributions(path)
        for job in jobs:
            for top, importers in sorted(closure(job, tracks).items()):
                allowances |= {(top, reached) for reached, _ in importers} & ALLOWED.keys()
                importers = [where for reached, where in importers if (top, reached) not in ALLOWED]
                names = distributions.get(top, [])
                if importers and not any(normalise(name) in listed for name in names):
                    what = names[0] if names else f"{top} (no distribution of the venv provides it)"
                    missing.setdefault(
                        (env, what),
                        f"{env} family: envs/{env}.yaml lacks {what}, which {importers[0]} needs ({job.label})",
                    )
    if missing:
        pytest.fail("an env misses what its jobs import:\n" + "\n".join(missing.values()), pytrace=False)
    assert allowances == ALLOWED.keys(), f"ALLOWED entries no job reaches: {sorted(ALLOWED.keys() - allowances)}"


def test_gpu_methods_envs_have_torch():
    """What ALLOWED's runner:cuda_available entry relies on: every method that can request a GPU (gpu: true, or a
    device param that a config may set to cuda) runs in an env with torch."""
    checked = []
    for method, entry in read_yaml(REPO / "config/methods.yaml").items():
        env = entry.get("env", "lineage")
        if (entry.get("gpu") or set(DEVICE_PARAMS) & set(entry.get("params", {}))) and FAMILY.fullmatch(env):
            listed = env_distributions(REPO / "envs" / f"{env}.yaml")
            assert "torch" in listed, f"method {method} (gpu: true or a device param): envs/{env}.yaml lacks torch"
            checked.append(method)
    assert {"celltreeqm", "triplet", "quadruplet", "scilama", "scvi"} <= set(checked)


def test_the_analysis_sees_the_lazy_imports():
    """Guards against a closure that finds nothing: lazy imports inside functions, a role's reference, a
    figure's draw, a package found with find_spec, each where the code has it."""
    tracks = read_yaml(REPO / "config/tracks.yaml")
    jobs = {job.label: job for family in env_jobs().values() for job in family}
    assert "skbio" in closure(jobs["method nj_raw's jobs"], tracks)  # reconstruct.skbio_nj, via run
    assert "scib_metrics" in closure(jobs["dataset pbmc3k's jobs"], tracks)  # the scorer role
    assert "matplotlib" in closure(jobs["dataset bm_default's jobs"], tracks)  # a figure's draw
    assert "wormneuroatlas" in closure(jobs["dataset cengen_neurons's jobs"], tracks)  # find_spec(PACKAGE)
    assert "sentence_transformers" in closure(jobs["prepare.smk's embed_genes.py"], tracks)  # a provider
    assert "scvi" not in closure(jobs["method pca's jobs"], tracks)  # another method's import
