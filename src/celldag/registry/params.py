"""Parameters of the registries' entries and the config's overrides: the names each loader and method declares
(``accepted_params``), method variants and ``method_params``, and the file placeholders of a method's params.
"""

from __future__ import annotations

import string

from celldag.extensions import declared_attribute
from celldag.registry.files import (
    DEFAULT_VARIANT,
    FILE_FIELDS,
    UPSTREAM_FIELD,
    ConfigError,
    Registries,
    Source,
    source_of,
)

SWITCH_SECTIONS = ("compute", "downloads")  # the config's sections whose true/false settings --config may spell


def undo_command_line_strings(config: dict) -> None:
    """``--config seeds=[0,1]``, ``compute='{gpus: true}'`` or ``downloads='{strict: true}'``: Snakemake's parser
    leaves nested values as strings. Turn whole-number seeds and true/false switches back into what the schema
    expects."""
    if isinstance(config.get("seeds"), list):
        config["seeds"] = [int(seed) if isinstance(seed, str) and seed.isdigit() else seed for seed in config["seeds"]]
    switches = {"true": True, "false": False}
    for section in SWITCH_SECTIONS:
        if isinstance(config.get(section), dict):
            config[section] = {
                key: switches.get(value, value) if isinstance(value, str) else value
                for key, value in config[section].items()
            }


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
    raise ConfigError(
        f"{where}: unknown {plural_keys(unknown)} {', '.join(map(repr, unknown))}{hints}; "
        f"accepted: {', '.join(sorted(accepted)) or 'none'}"
    )


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
                    f"{where}: method_params.{method}.{fixed[0]}: "
                    f"the variant {method}/{variant} fixes {fixed[0]} itself "
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


def param_origin(
    methods_file: str,
    method: str,
    variant: str,
    name: str,
    variant_params: dict,
    overrides: dict[str, dict],
    source: Source,
) -> str:
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
                where = param_origin(
                    registries.origin("methods", method), method, variant, name, variant_params, overrides, source
                )
                pattern = {**entry["params"], **variant_params}.get(name)
                shown = ", ".join("{" + field + "}" for field in fields)
                if not isinstance(pattern, str) or not pattern:
                    raise ConfigError(
                        f"{where}: the path of a file the method reads, relative to the working "
                        f"directory, with placeholders {shown}; got {pattern!r}"
                    )
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
