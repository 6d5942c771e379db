"""The run config and the registries loaded and checked in one call (``load_config``), or as Snakemake reads them from
the workflow's config files (``load_workflow_config``).
"""

from __future__ import annotations

from pathlib import Path

from celldag.errors import InputError
from celldag.registry.consistency import check_consistency, check_embedding_names, check_source_files
from celldag.registry.files import (
    DEFAULT_CONFIG,
    Registries,
    Source,
    apply_schema,
    check_env_paths,
    key_sources,
    on_path,
    package_folders,
    read_registries,
    read_yaml,
    shipped_registries,
    shipped_registry_files,
)
from celldag.registry.params import (
    apply_method_params,
    check_config_ids,
    check_file_params,
    check_method_overrides,
    check_method_params,
    check_param_names,
    fill_keyed_defaults,
    undo_command_line_strings,
)


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
        check_consistency(registries)
        check_config_ids(config, registries, source)
        check_param_names(registries)
        fill_keyed_defaults(registries)
        check_method_overrides(config, registries, source)
        apply_method_params(config["method_params"], registries)
        check_method_params(registries, config["method_params"], source)
        check_file_params(registries, config["method_params"], source)
        check_embedding_names(registries)
    check_source_files(registries, "datasets")
    check_source_files(registries, "embeddings")
    return config, registries


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
