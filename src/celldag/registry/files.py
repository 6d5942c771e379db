"""The registry and config files read: YAML, checked against celldag's JSON schemas with their defaults filled in;
the shipped registries and a lab's overlays merged into ``Registries``; the lab's env files and package folders.
"""

from __future__ import annotations

import importlib
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from celldag.errors import InputError
from celldag.tracks import Track, load_track

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"  # package data: installed with celldag


DEFAULT_VARIANT = "default"


DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's configfile: a --configfile overrides it key by key


# placeholders of a method's file params (a lab's files, e.g. an embedding computed elsewhere): the run's dataset
# and seed, and for a chained track's run the run it chains on (method-variant); plan.method_files fills them
FILE_FIELDS = ("dataset", "seed")


UPSTREAM_FIELD = "upstream"


class ConfigError(InputError):
    """A config or registry file is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Registries:
    datasets: dict[str, dict]
    methods: dict[str, dict]
    embeddings: dict[str, dict] = field(default_factory=dict)
    models: dict[str, dict] = field(default_factory=dict)  # pretrained annotation models (config/models.yaml)
    tracks: dict[str, dict] = field(default_factory=dict)
    origins: dict[str, dict[str, str]] = field(default_factory=dict)  # kind → id → the registry file defining it

    def track(self, track_id: str) -> Track:
        return load_track(self.tracks[track_id]["definition"])

    def origin(self, kind: str, entry_id: str) -> str:
        """The registry file that defines an entry (error messages name it)."""
        return self.origins.get(kind, {}).get(entry_id, f"{kind} registry")


def safe_load(handle):
    """``yaml.safe_load`` with libyaml's safe loader where PyYAML was built with it (its wheels are): the
    registries, published tables included, are read at every workflow parse — each cluster job's too — and
    the pure-Python loader takes ~1 s for them, libyaml's 0.15 s."""
    if hasattr(yaml, "CSafeLoader"):
        return yaml.load(handle, Loader=yaml.CSafeLoader)
    return yaml.safe_load(handle)


def read_yaml(path: str | Path) -> dict:
    try:
        with open(path) as handle:
            data = safe_load(handle)
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: file not found") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must hold a mapping at the top level, got {type(data).__name__}")
    return data


Source = str | Path | dict  # a file name, or top-level key → the file that set it


def source_of(source: Source, key: object = None) -> str:
    if isinstance(source, dict):
        return str(source.get(key) or ", ".join(dict.fromkeys(map(str, source.values()))) or "config")
    return str(source)


def key_sources(config_files: list[str | Path]) -> dict[str, str]:
    """Top-level config key → the last file that sets it (``--configfile`` files override the workflow's)."""
    sources: dict[str, str] = {}
    for path in config_files:
        sources.update(dict.fromkeys(read_yaml(path), str(path)))
    return sources


def apply_schema(data: dict, schema_name: str, source: Source) -> dict:
    """Check ``data`` against ``celldag/schemas/<schema_name>.schema.yaml``, fill defaults in place."""
    import jsonschema
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate as snakemake_validate

    schema_path = SCHEMA_DIR / f"{schema_name}.schema.yaml"
    schema = read_yaml(schema_path)
    # jsonschema's best_match picks the single most relevant error; Snakemake's own message dumps the
    # whole schema, which buries the key that is wrong.
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        path = list(error.absolute_path)
        where = ".".join(str(part) for part in path) or "(top level)"
        message = error.message
        if "propertyNames" in error.schema_path:  # an id; it names paths and wildcards, so no separators
            where, message = (
                f"id {error.instance!r}",
                "ids are lower-case letters, digits and '_', starting with a letter",
            )
        raise ConfigError(f"{source_of(source, path[0] if path else None)}: {where}: {message}")
    try:
        snakemake_validate(data, str(schema_path), set_default=True)
    except WorkflowError as err:  # only reachable if the two validators disagree
        raise ConfigError(f"{source_of(source)}: {err}") from err
    return data


KINDS = ("tracks", "datasets", "methods", "embeddings", "models")


def shipped_registry_files(root: str | Path) -> dict[str, str]:
    """celldag's own registries in a workflow folder ``root`` (a checkout, a copy, a snakedeploy folder)."""
    return {kind: str(Path(root) / "config" / f"{kind}.yaml") for kind in KINDS}


def shipped_registries(workflow: str | Path) -> dict[str, str]:
    """The shipped registries of the celldag workflow folder the CLI is pointed at (``--workflow``)."""
    files = shipped_registry_files(workflow)
    if not Path(files["tracks"]).is_file():
        raise ConfigError(
            f"{files['tracks']}: not found: {Path(workflow).resolve()} is not a celldag workflow folder; "
            "run in one (a checkout, or a snakedeploy folder) or name it with --workflow"
        )
    return files


def check_env_paths(registries: Registries) -> None:
    """An entry's ``env`` that names a file (not a family of celldag's envs/) and its ``packages`` folders exist,
    relative to the working directory (celldag.jobs.envs; the Snakefile checks the families)."""
    for kind in ("datasets", "methods"):
        for entry_id, entry in getattr(registries, kind).items():
            where = f"{registries.origin(kind, entry_id)}: {entry_id}"
            env = entry.get("env", "")
            if env.endswith((".yaml", ".yml")) and not Path(env).is_file():
                raise ConfigError(f"{where}.env: {env}: file not found (paths are relative to the working directory)")
            for index, path in enumerate(entry.get("packages", ())):
                if not Path(path).is_dir():
                    raise ConfigError(
                        f"{where}.packages[{index}]: {path}: no such folder "
                        "(paths are relative to the working directory)"
                    )


def package_folders(registries: Registries) -> list[str]:
    """The ``packages:`` folders of dataset and method entries (relative to the working directory), absolute."""
    folders: list[str] = []
    for kind in ("datasets", "methods"):
        for entry in getattr(registries, kind).values():
            for path in entry.get("packages", ()):
                if str(Path(path).resolve()) not in folders:
                    folders.append(str(Path(path).resolve()))
    return folders


@contextmanager
def on_path(folders: list[str]):
    """``folders`` first on ``sys.path`` while the references are checked, then gone again: a job finds a
    lab's package in its env (--sdm conda), never through the path of the process that parsed the workflow
    (Snakemake appends that path to every script, snakemake#840)."""
    added = [folder for folder in folders if folder not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            sys.path.remove(folder)
        importlib.invalidate_caches()


def shown_path(path: str | Path) -> str:
    """A path as messages show it: relative to the working directory when inside it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(Path.cwd())) if resolved.is_relative_to(Path.cwd()) else str(path)


def read_registries(shipped: dict[str, str], overlays: dict[str, list[str]], source: Source) -> Registries:
    """The shipped registry of each kind with the lab's files merged over it; an id defined twice is an error."""
    entries: dict[str, dict[str, dict]] = {kind: {} for kind in KINDS}
    origins: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
    for kind in KINDS:
        files = [shown_path(shipped[kind])]
        for index, path in enumerate(overlays[kind]):
            if not Path(path).is_file():
                raise ConfigError(
                    f"{source_of(source, 'registries')}: registries.{kind}[{index}]: {path}: file not found "
                    "(paths are relative to the working directory)"
                )
            if Path(path).resolve() != Path(files[0]).resolve():  # the shipped file named again: nothing to add
                files.append(path)
        for path in files:
            for entry_id, entry in apply_schema(read_yaml(path), kind, path).items():
                if entry_id in entries[kind]:
                    raise ConfigError(
                        f"{path}: {entry_id}: {kind} id {entry_id!r} is defined twice, in "
                        f"{origins[kind][entry_id]} and in {path}"
                    )
                entries[kind][entry_id], origins[kind][entry_id] = entry, path
    return Registries(**entries, origins=origins)
