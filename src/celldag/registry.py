"""Load and check the run config and the registries (tracks, datasets, methods, gene embeddings).

Each file is checked against its JSON schema in ``celldag/schemas/`` and then passed through
``snakemake.utils.validate`` to fill in the schema defaults. Every code reference (a track's
definition, a dataset's loader, a method's run, an embedding's provider) is checked without
importing it (``celldag.extensions``). Any problem — a wrong type, a missing key, an id no registry
knows, a reference to nothing — raises one ``ConfigError`` naming the file and key, at parse time,
before Snakemake schedules a single job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from celldag.errors import InputError
from celldag.extensions import check_reference
from celldag.tracks import Track, check_track, load_track

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"  # package data: installed with celldag
DEFAULT_VARIANT = "default"


class ConfigError(InputError):
    """A config or registry file is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Registries:
    datasets: dict[str, dict]
    methods: dict[str, dict]
    embeddings: dict[str, dict] = field(default_factory=dict)
    tracks: dict[str, dict] = field(default_factory=dict)

    def track(self, track_id: str) -> Track:
        return load_track(self.tracks[track_id]["definition"])


def read_yaml(path: str | Path) -> dict:
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
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
            where, message = f"id {error.instance!r}", "ids are lower-case letters, digits and '_', starting with a letter"
        raise ConfigError(f"{source_of(source, path[0] if path else None)}: {where}: {message}")
    try:
        snakemake_validate(data, str(schema_path), set_default=True)
    except WorkflowError as err:  # only reachable if the two validators disagree
        raise ConfigError(f"{source_of(source)}: {err}") from err
    return data


def load_config(config: dict, source: Source, root: str | Path = ".") -> tuple[dict, Registries]:
    """Validate a run config (already parsed), load the registries it names and cross-check the ids."""
    undo_command_line_strings(config)
    apply_schema(config, "config", source)
    root = Path(root)
    files = config["registries"]
    registries = Registries(
        **{kind: apply_schema(read_yaml(root / files[kind]), kind, files[kind])
           for kind in ("datasets", "methods", "embeddings", "tracks")}
    )  # fmt: skip
    check_references(registries, files)
    check_config_ids(config, registries, source)
    apply_method_params(config["method_params"], registries, source)
    check_method_params(registries.methods, files["methods"], config["method_params"], source)
    check_embedding_references(registries, files["methods"], files["embeddings"])
    check_source_files(registries.datasets, files["datasets"])
    check_source_files(registries.embeddings, files["embeddings"])
    return config, registries


def check_references(registries: Registries, files: dict[str, str]) -> None:
    """Tracks, loaders, methods' run functions and providers exist; track ids and methods' needs are known."""
    for track_id, entry in registries.tracks.items():
        try:
            check_track(track_id, entry, files["tracks"])
        except InputError as err:
            raise ConfigError(str(err)) from err
    known_tracks = ", ".join(sorted(registries.tracks))
    code = {"datasets": "loader", "methods": "run", "embeddings": "provider"}
    for kind, field_name in code.items():
        for entry_id, entry in getattr(registries, kind).items():
            where = f"{files[kind]}: {entry_id}"
            try:
                check_reference(entry[field_name], f"{where}.{field_name}")
            except InputError as err:
                raise ConfigError(str(err)) from err
            if "track" in entry and entry["track"] not in registries.tracks:
                raise ConfigError(f"{where}.track: unknown track {entry['track']!r}; known: {known_tracks}")
    for method, entry in registries.methods.items():
        unknown = sorted(set(entry["kind_by_variant"]) - set(entry["variants"]))
        if unknown:
            raise ConfigError(f"{files['methods']}: {method}.kind_by_variant: {method!r} has no variant {unknown[0]!r}")
        inputs = registries.track(entry["track"]).inputs
        for variant, needs in {None: entry["needs"], **entry["needs_by_variant"]}.items():
            where = f"{files['methods']}: {method}." + ("needs" if variant is None else f"needs_by_variant.{variant}")
            if variant is not None and variant not in entry["variants"]:
                raise ConfigError(f"{where}: {method!r} has no variant {variant!r}")
            for need in needs:
                if need not in inputs:
                    raise ConfigError(f"{where}: the {entry['track']} track provides no optional input {need!r}; "
                                      f"known: {', '.join(sorted(inputs)) or 'none'}")  # fmt: skip


PIN_ON_FIRST_FETCH = "pin-on-first-fetch"  # a url's sha256 when the publisher gives none


def check_source_files(entries: dict[str, dict], registry_file: str) -> None:
    """A url must come with its sha256 (or an explicit ``pin-on-first-fetch``); a dataset's files must
    match its source (urls for ``url``, paths for ``local``); file names are unique per entry."""
    for entry_id, entry in entries.items():
        names = set()
        for index, file in enumerate(entry.get("files", [])):
            where = f"{registry_file}: {entry_id}.files[{index}]"
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


def check_embedding_references(registries: Registries, methods_file: str, embeddings_file: str) -> None:
    """Every ``embedding`` a method variant names, and every entry's ``of``, must exist."""
    known = registries.embeddings
    for method, entry in registries.methods.items():
        for variant, overrides in entry["variants"].items():
            name = {**entry["params"], **overrides}.get("embedding")
            if name is not None and name not in known:
                raise ConfigError(f"{methods_file}: {method}.variants.{variant}: unknown embedding {name!r}; "
                                  f"known: {', '.join(sorted(known)) or 'none'}")  # fmt: skip
    for embedding, entry in known.items():
        if "of" in entry and entry["of"] not in known:
            raise ConfigError(f"{embeddings_file}: {embedding}.of: unknown embedding {entry['of']!r}")


def undo_command_line_strings(config: dict) -> None:
    """``--config seeds=[0,1]`` or ``compute='{gpus: true}'``: Snakemake's parser leaves nested values as
    strings. Turn whole-number seeds and true/false switches back into what the schema expects."""
    if isinstance(config.get("seeds"), list):
        config["seeds"] = [int(seed) if isinstance(seed, str) and seed.isdigit() else seed for seed in config["seeds"]]
    if isinstance(config.get("compute"), dict):
        switches = {"true": True, "false": False}
        config["compute"] = {key: switches.get(value, value) if isinstance(value, str) else value
                             for key, value in config["compute"].items()}  # fmt: skip


def apply_method_params(overrides: dict[str, dict], registries: Registries, source: Source) -> None:
    """Replace registry parameters by the config's ``method_params`` (only parameters the method has)."""
    for method, params in overrides.items():
        if method not in registries.methods:
            raise ConfigError(f"{source_of(source, 'method_params')}: method_params.{method}: unknown method id {method!r}")
        unknown = sorted(set(params) - set(registries.methods[method]["params"]))
        if unknown:
            raise ConfigError(
                f"{source_of(source, 'method_params')}: method_params.{method}: {method!r} has no parameter {unknown[0]!r}"
            )
        registries.methods[method]["params"].update(params)


def check_method_params(methods: dict[str, dict], methods_file: str, overrides: dict[str, dict], source: Source) -> None:
    """Every variant's merged params against its method's ``param_schema``: ranges fail at parse time."""
    import jsonschema

    for method, entry in methods.items():
        validator = jsonschema.Draft202012Validator({"type": "object", "properties": entry["param_schema"]})
        for variant, variant_params in entry["variants"].items():
            error = jsonschema.exceptions.best_match(validator.iter_errors({**entry["params"], **variant_params}))
            if error is None:
                continue
            name = error.absolute_path[0]
            if name in variant_params:
                where = f"{methods_file}: {method}.variants.{variant}.{name}"
            elif name in overrides.get(method, {}):
                where = f"{source_of(source, 'method_params')}: method_params.{method}.{name}"
            else:
                where = f"{methods_file}: {method}.params.{name}"
            raise ConfigError(f"{where}: {error.message}")


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
