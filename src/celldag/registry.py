"""Load and check the run config and the registries (tracks, datasets, methods, gene embeddings).

Each file is checked against its JSON schema in ``celldag/schemas/`` and then passed through
``snakemake.utils.validate`` to fill in the schema defaults. Every code reference (a track's
definition, a dataset's loader, a method's run, an embedding's provider) is checked without
importing it (``celldag.extensions``). Any problem — a wrong type, a missing key, an id no registry
knows, a reference to nothing — raises one ``ConfigError`` naming the file and key, at parse time,
before Snakemake schedules a single job.
"""

from __future__ import annotations

import importlib
import string
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from celldag.errors import InputError
from celldag.extensions import check_reference, declared_attribute
from celldag.tracks import Track, check_track, load_track

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"  # package data: installed with celldag
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


KINDS = ("tracks", "datasets", "methods", "embeddings")


def shipped_registry_files(root: str | Path) -> dict[str, str]:
    """celldag's own registries in a workflow folder ``root`` (a checkout, a copy, a snakedeploy folder)."""
    return {kind: str(Path(root) / "config" / f"{kind}.yaml") for kind in KINDS}


def shipped_registries(workflow: str | Path) -> dict[str, str]:
    """The shipped registries of the celldag workflow folder the CLI is pointed at (``--workflow``)."""
    files = shipped_registry_files(workflow)
    if not Path(files["tracks"]).is_file():
        raise ConfigError(f"{files['tracks']}: not found: {Path(workflow).resolve()} is not a celldag workflow folder; "
                          "run in one (a checkout, or a snakedeploy folder) or name it with --workflow")  # fmt: skip
    return files


def load_config(config: dict, source: Source, root: str | Path | dict[str, str] = ".") -> tuple[dict, Registries]:
    """Validate a run config (already parsed), load the registries and cross-check the ids.

    ``root`` is the celldag workflow folder whose ``config/`` holds the shipped registries, or those
    files by kind (the Snakefile passes them through ``workflow.source_path``: a module finds its own).
    The config's ``registries`` name the lab's files of each kind, relative to the working directory,
    read with the same schemas and merged over the shipped ones.
    """
    undo_command_line_strings(config)
    apply_schema(config, "config", source)
    shipped = root if isinstance(root, dict) else shipped_registry_files(root)
    registries = read_registries(shipped, config["registries"], source)
    check_env_paths(registries)
    with on_path(package_folders(registries)):  # code of a lab's `packages:` is found where its entries say
        check_references(registries)
        check_config_ids(config, registries, source)
        check_param_names(registries)
        fill_keyed_defaults(registries)
        check_method_overrides(config, registries, source)
        apply_method_params(config["method_params"], registries)
        check_method_params(registries, config["method_params"], source)
        check_file_params(registries, config["method_params"], source)
        check_embedding_references(registries)
    check_source_files(registries, "datasets")
    check_source_files(registries, "embeddings")
    return config, registries


def check_env_paths(registries: Registries) -> None:
    """An entry's ``env`` that names a file (not a family of celldag's envs/) and its ``packages`` folders exist,
    relative to the working directory (celldag.envs; the Snakefile checks the families)."""
    for kind in ("datasets", "methods"):
        for entry_id, entry in getattr(registries, kind).items():
            where = f"{registries.origin(kind, entry_id)}: {entry_id}"
            env = entry.get("env", "")
            if env.endswith((".yaml", ".yml")) and not Path(env).is_file():
                raise ConfigError(f"{where}.env: {env}: file not found (paths are relative to the working directory)")
            for index, path in enumerate(entry.get("packages", ())):
                if not Path(path).is_dir():
                    raise ConfigError(f"{where}.packages[{index}]: {path}: no such folder "
                                      "(paths are relative to the working directory)")  # fmt: skip


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
                raise ConfigError(f"{source_of(source, 'registries')}: registries.{kind}[{index}]: {path}: file not found "
                                  "(paths are relative to the working directory)")  # fmt: skip
            if Path(path).resolve() != Path(files[0]).resolve():  # the shipped file named again: nothing to add
                files.append(path)
        for path in files:
            for entry_id, entry in apply_schema(read_yaml(path), kind, path).items():
                if entry_id in entries[kind]:
                    raise ConfigError(f"{path}: {entry_id}: {kind} id {entry_id!r} is defined twice, in "
                                      f"{origins[kind][entry_id]} and in {path}")  # fmt: skip
                entries[kind][entry_id], origins[kind][entry_id] = entry, path
    return Registries(**entries, origins=origins)


def load_workflow_config(
    configfile: str, workflow: str = ".", config_key: str | None = None
) -> tuple[dict, Registries]:
    """The config as Snakemake sees it: config/config.yaml, overridden key by key by ``configfile``;
    with ``config_key``, its section that an outer workflow hands to the celldag module (``config:
    config["celldag"]``). ``workflow``: the celldag workflow folder whose config/ holds the shipped registries."""
    from snakemake.utils import update_config

    files = [configfile]
    if Path(DEFAULT_CONFIG).is_file() and Path(configfile).resolve() != Path(DEFAULT_CONFIG).resolve():
        files.insert(0, DEFAULT_CONFIG)
    config: dict = {}
    for path in files:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such config file (run celldag in the workflow directory)")
        update_config(config, read_yaml(path))
    if config_key is not None:
        if not isinstance(config.get(config_key), dict):
            raise InputError(f"{', '.join(files)}: no section {config_key!r} (--config-key) holding celldag's config")
        config = config[config_key]
    return load_config(config, key_sources(files), root=shipped_registries(workflow))


def check_references(registries: Registries) -> None:
    """Tracks, loaders, methods' run functions and providers exist; track ids and methods' needs are known."""
    for track_id, entry in registries.tracks.items():
        try:
            check_track(track_id, entry, registries.origin("tracks", track_id))
        except InputError as err:
            raise ConfigError(str(err)) from err
    known_tracks = ", ".join(sorted(registries.tracks))
    for kind, field_name in CODE_FIELDS.items():
        for entry_id, entry in getattr(registries, kind).items():
            where = f"{registries.origin(kind, entry_id)}: {entry_id}"
            try:
                check_reference(entry[field_name], f"{where}.{field_name}")
            except InputError as err:
                raise ConfigError(str(err)) from err
            if "track" in entry and entry["track"] not in registries.tracks:
                raise ConfigError(f"{where}.track: unknown track {entry['track']!r}; known: {known_tracks}")
    for dataset, entry in registries.datasets.items():
        if "stands_for" in entry:
            check_stand_in(dataset, entry, registries)
        for chained in entry["chained"]:
            where = f"{registries.origin('datasets', dataset)}: {dataset}.chained.{chained}"
            if chained not in registries.tracks:
                raise ConfigError(f"{where}: unknown track; known: {known_tracks}")
            if registries.track(chained).upstream != entry["track"]:
                raise ConfigError(f"{where}: the {chained} track chains on {registries.track(chained).upstream or 'no track'}"
                                  f", not on this dataset's track {entry['track']}")  # fmt: skip
    for method, entry in registries.methods.items():
        methods_file = registries.origin("methods", method)
        if registries.track(entry["track"]).upstream and list(entry["variants"]) != ["default"]:
            raise ConfigError(f"{methods_file}: {method}.variants: a method of the chained track {entry['track']} has "
                              "one variant, default (its runs are named by the run they chain on); make another "
                              "method id for other params")  # fmt: skip
        unknown = sorted(set(entry["kind_by_variant"]) - set(entry["variants"]))
        if unknown:
            raise ConfigError(f"{methods_file}: {method}.kind_by_variant: {method!r} has no variant {unknown[0]!r}")
        inputs = registries.track(entry["track"]).inputs
        for variant, needs in {None: entry["needs"], **entry["needs_by_variant"]}.items():
            where = f"{methods_file}: {method}." + ("needs" if variant is None else f"needs_by_variant.{variant}")
            if variant is not None and variant not in entry["variants"]:
                raise ConfigError(f"{where}: {method!r} has no variant {variant!r}")
            for need in needs:
                if need not in inputs:
                    raise ConfigError(f"{where}: the {entry['track']} track provides no optional input {need!r}; "
                                      f"known: {', '.join(sorted(inputs)) or 'none'}")  # fmt: skip


PIN_ON_FIRST_FETCH = "pin-on-first-fetch"  # a url's sha256 when the publisher gives none


def check_stand_in(dataset: str, entry: dict, registries: Registries) -> None:
    """A lab's copy stands for another dataset of its track that stands for none itself."""
    where = f"{registries.origin('datasets', dataset)}: {dataset}.stands_for.dataset"
    shipped = entry["stands_for"]["dataset"]
    if shipped == dataset:
        raise ConfigError(f"{where}: a dataset cannot stand for itself")
    if shipped not in registries.datasets:
        raise ConfigError(f"{where}: unknown dataset id {shipped!r}; known: {', '.join(sorted(registries.datasets))}")
    if "stands_for" in registries.datasets[shipped]:
        raise ConfigError(f"{where}: {shipped} stands for {registries.datasets[shipped]['stands_for']['dataset']} "
                          "itself: name that one")  # fmt: skip
    if registries.datasets[shipped]["track"] != entry["track"]:
        raise ConfigError(f"{where}: {shipped} is a {registries.datasets[shipped]['track']} dataset, this one a "
                          f"{entry['track']} one")  # fmt: skip


def check_source_files(registries: Registries, kind: str) -> None:
    """A url must come with its sha256 (or an explicit ``pin-on-first-fetch``); a dataset's files must
    match its source (urls for ``url``, paths for ``local``); file names are unique per entry."""
    for entry_id, entry in getattr(registries, kind).items():
        names = set()
        for index, file in enumerate(entry.get("files", [])):
            where = f"{registries.origin(kind, entry_id)}: {entry_id}.files[{index}]"
            if file["name"] in names:
                raise ConfigError(f"{where}: file name {file['name']!r} given twice")
            names.add(file["name"])
            if "url" in file and "sha256" not in file:
                raise ConfigError(f"{where}: the url {file['url']} has no sha256; give the file's digest, or "
                                  f"'{PIN_ON_FIRST_FETCH}' to trust the first download and pin it")  # fmt: skip
            source = entry.get("source")
            if source in ("url", "local") and ("url" in file) != (source == "url"):
                wanted = "a url" if source == "url" else "a path"
                raise ConfigError(f"{where}: a {source} source lists files by {wanted}")


def check_embedding_references(registries: Registries) -> None:
    """Every ``embedding`` a method variant names, and every entry's ``of``, must exist."""
    known = registries.embeddings
    for method, entry in registries.methods.items():
        for variant, overrides in entry["variants"].items():
            name = {**entry["params"], **overrides}.get("embedding")
            if name is not None and name not in known:
                raise ConfigError(f"{registries.origin('methods', method)}: {method}.variants.{variant}: unknown embedding "
                                  f"{name!r}; known: {', '.join(sorted(known)) or 'none'}")  # fmt: skip
    for embedding, entry in known.items():
        if "of" in entry and entry["of"] not in known:
            raise ConfigError(
                f"{registries.origin('embeddings', embedding)}: {embedding}.of: unknown embedding {entry['of']!r}"
            )


def undo_command_line_strings(config: dict) -> None:
    """``--config seeds=[0,1]`` or ``compute='{gpus: true}'``: Snakemake's parser leaves nested values as
    strings. Turn whole-number seeds and true/false switches back into what the schema expects."""
    if isinstance(config.get("seeds"), list):
        config["seeds"] = [int(seed) if isinstance(seed, str) and seed.isdigit() else seed for seed in config["seeds"]]
    if isinstance(config.get("compute"), dict):
        switches = {"true": True, "false": False}
        config["compute"] = {key: switches.get(value, value) if isinstance(value, str) else value
                             for key, value in config["compute"].items()}  # fmt: skip


CODE_FIELDS = {"datasets": "loader", "methods": "run", "embeddings": "provider"}


def declared_params(reference: str, where: str) -> tuple[frozenset[str] | None, dict[str, str]]:
    """The parameter names a loader or run function accepts (its ``accepted_params``; None: undeclared)
    and, for names it no longer takes, what they became (its ``renamed_params``). Read from the module's
    source when the declaration is made of literals (celldag's are), so that parsing imports nothing."""
    accepted = declared_attribute(reference, "accepted_params", where)
    renamed = declared_attribute(reference, "renamed_params", where) or {}
    return (None if accepted is None else frozenset(accepted)), dict(renamed)


def refuse_unknown(keys, accepted, renamed: dict[str, str], where: str) -> None:
    """One line naming ``where``, the unknown keys (with what a renamed one became) and the accepted ones."""
    unknown = sorted(set(keys) - set(accepted))
    if not unknown:
        return
    hints = "".join(f"; {key} became {renamed[key]}" for key in unknown if key in renamed)
    raise ConfigError(f"{where}: unknown {plural_keys(unknown)} {', '.join(map(repr, unknown))}{hints}; "
                      f"accepted: {', '.join(sorted(accepted)) or 'none'}")  # fmt: skip


def plural_keys(keys: list[str]) -> str:
    return "key" if len(keys) == 1 else "keys"


def check_param_names(registries: Registries) -> None:
    """Every key of a dataset's params is one its loader accepts; every key of a method's params,
    param_schema and variants one its run function accepts (undeclared: the entry's params and
    param_schema are its declaration, and variants may set only those)."""
    for dataset, entry in registries.datasets.items():
        where = f"{registries.origin('datasets', dataset)}: {dataset}"
        accepted, renamed = declared_params(entry["loader"], f"{where}.loader")
        if accepted is not None:
            refuse_unknown(entry["params"], accepted, renamed, f"{where}.params")
    for method, entry in registries.methods.items():
        where = f"{registries.origin('methods', method)}: {method}"
        accepted, renamed = method_param_names(entry)
        refuse_unknown(entry["params"], accepted, renamed, f"{where}.params")
        refuse_unknown(entry["param_schema"], accepted, renamed, f"{where}.param_schema")
        for variant, values in entry["variants"].items():
            refuse_unknown(values, accepted, renamed, f"{where}.variants.{variant}")


def fill_keyed_defaults(registries: Registries) -> None:
    """Write a loader's ``keyed_defaults`` into each of its entries that leaves them out: defaults that changed
    after results were keyed by their entries (``plan.data_key``). An entry relying on the default then gets
    new data and run keys with its new data, and its run records name the value; one that gives a value
    keeps its keys. Read from the module's source, as ``accepted_params``."""
    for dataset, entry in registries.datasets.items():
        where = f"{registries.origin('datasets', dataset)}: {dataset}.loader"
        defaults = declared_attribute(entry["loader"], "keyed_defaults", where)
        if defaults:
            entry["params"] = {**defaults, **entry["params"]}


def method_param_names(entry: dict) -> tuple[frozenset[str], dict[str, str]]:
    accepted, renamed = declared_params(entry["run"], f"{entry['run']}")
    return (
        accepted if accepted is not None else frozenset(entry["params"]) | frozenset(entry["param_schema"])
    ), renamed


def check_method_overrides(config: dict, registries: Registries, source: Source) -> None:
    """The config's ``method_params``: known methods, accepted keys, and no key that a selected variant
    fixes itself (the variant's value would win and the override be dropped unseen)."""
    where = source_of(source, "method_params")
    overrides = config["method_params"]
    for method, params in overrides.items():
        if method not in registries.methods:
            raise ConfigError(f"{where}: method_params.{method}: unknown method id {method!r}")
        accepted, renamed = method_param_names(registries.methods[method])
        refuse_unknown(params, accepted, renamed, f"{where}: method_params.{method}")
    for selector in config["methods"]:
        method, chosen = split_method_selector(selector)
        variants = registries.methods[method]["variants"]
        for variant in [chosen] if chosen else variants:
            fixed = sorted(set(overrides.get(method, {})) & set(variants[variant]))
            if fixed:
                raise ConfigError(
                    f"{where}: method_params.{method}.{fixed[0]}: the variant {method}/{variant} fixes {fixed[0]} itself "
                    f"({fixed[0]}: {variants[variant][fixed[0]]!r}, {registries.origin('methods', method)}), so this "
                    f"override would be dropped; select other variants or define a variant of your own"
                )


def apply_method_params(overrides: dict[str, dict], registries: Registries) -> None:
    """Replace registry parameters by the config's ``method_params`` (checked by ``check_method_overrides``)."""
    for method, params in overrides.items():
        registries.methods[method]["params"].update(params)


def check_method_params(registries: Registries, overrides: dict[str, dict], source: Source) -> None:
    """Every variant's merged params against its method's ``param_schema``: ranges fail at parse time."""
    import jsonschema

    for method, entry in registries.methods.items():
        methods_file = registries.origin("methods", method)
        validator = jsonschema.Draft202012Validator({"type": "object", "properties": entry["param_schema"]})
        for variant, variant_params in entry["variants"].items():
            error = jsonschema.exceptions.best_match(validator.iter_errors({**entry["params"], **variant_params}))
            if error is None:
                continue
            where = param_origin(
                methods_file, method, variant, error.absolute_path[0], variant_params, overrides, source
            )
            raise ConfigError(f"{where}: {error.message}")


def param_origin(methods_file: str, method: str, variant: str, name: str, variant_params: dict,
                 overrides: dict[str, dict], source: Source) -> str:  # fmt: skip
    """Where a method param's value was set: the variant, the config's method_params, or the entry's params."""
    if name in variant_params:
        return f"{methods_file}: {method}.variants.{variant}.{name}"
    if name in overrides.get(method, {}):
        return f"{source_of(source, 'method_params')}: method_params.{method}.{name}"
    return f"{methods_file}: {method}.params.{name}"


def file_params(entry: dict) -> tuple[str, ...]:
    """The params of a method entry whose values name files its run reads (the function's ``file_params``,
    read from its source as ``accepted_params`` is): each run's file is an input of its job, and its sha256
    is in the run record (celldag.plan.method_files). ``check_file_params`` reads it first, with a lab's
    ``packages:`` on the path; the source is cached by module and ``where``, so the plan's later reads
    (input functions, off that path) find it."""
    return tuple(declared_attribute(entry["run"], "file_params", entry["run"]) or ())


def check_file_params(registries: Registries, overrides: dict[str, dict], source: Source) -> None:
    """Every file param of a method is a path pattern in each variant, its placeholders among
    ``FILE_FIELDS`` (and ``UPSTREAM_FIELD`` for a chained track's methods, whose runs each chain on
    one upstream run): a typo fails the parse, not a job."""
    for method, entry in registries.methods.items():
        names = file_params(entry)
        chained = bool(names) and registries.track(entry["track"]).upstream is not None
        fields = FILE_FIELDS + ((UPSTREAM_FIELD,) if chained else ())
        variants = {DEFAULT_VARIANT: {}} if chained else entry["variants"]  # run_chained: its params alone
        for variant, variant_params in variants.items():
            for name in names:
                where = param_origin(registries.origin("methods", method), method, variant, name, variant_params,
                                     overrides, source)  # fmt: skip
                pattern = {**entry["params"], **variant_params}.get(name)
                shown = ", ".join("{" + field + "}" for field in fields)
                if not isinstance(pattern, str) or not pattern:
                    raise ConfigError(f"{where}: the path of a file the method reads, relative to the working "
                                      f"directory, with placeholders {shown}; got {pattern!r}")  # fmt: skip
                try:
                    used = {field for _, field, _, _ in string.Formatter().parse(pattern) if field is not None}
                except ValueError as err:
                    raise ConfigError(f"{where}: {pattern!r} is not a path pattern ({err})") from None
                unknown = sorted(used - set(fields))
                if unknown:
                    raise ConfigError(f"{where}: {pattern!r}: unknown placeholder {{{unknown[0]}}}; known: {shown}")


def split_method_selector(selector: str) -> tuple[str, str | None]:
    """``"celltreeqm/supervised"`` → (``celltreeqm``, ``supervised``); ``"nj_raw"`` → (``nj_raw``, None)."""
    method, _, variant = selector.partition("/")
    return method, (variant or None)


def check_config_ids(config: dict, registries: Registries, source: Source) -> None:
    for index, dataset in enumerate(config["datasets"]):
        if dataset not in registries.datasets:
            raise ConfigError(
                f"{source_of(source, 'datasets')}: datasets[{index}]: unknown dataset id {dataset!r}; "
                f"known ids: {', '.join(sorted(registries.datasets))}"
            )
    for index, selector in enumerate(config["methods"]):
        method, variant = split_method_selector(selector)
        if method not in registries.methods:
            raise ConfigError(
                f"{source_of(source, 'methods')}: methods[{index}]: unknown method id {method!r}; "
                f"known ids: {', '.join(sorted(registries.methods))}"
            )
        variants = registries.methods[method]["variants"]
        if variant is not None and variant not in variants:
            raise ConfigError(
                f"{source_of(source, 'methods')}: methods[{index}]: method {method!r} has no variant {variant!r}; "
                f"known variants: {', '.join(sorted(variants))}"
            )
