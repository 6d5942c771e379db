"""Load and check the run config and the registries (tracks, datasets, methods, gene embeddings).

Each file is checked against its JSON schema in ``celldag/schemas/`` and then passed through
``snakemake.utils.validate`` to fill in the schema defaults. Every entry point (a track's
definition, a dataset's loader, a method's run, an embedding's provider) is checked without
importing it (``celldag.extensions``). Any problem — a wrong type, a missing key, an id no registry
knows, an entry point to nothing — raises one ``ConfigError`` naming the file and key, at parse time,
before Snakemake schedules a single job.

The package, by idea: ``files`` (reading and merging), ``consistency``, ``params``, ``load`` (the whole check); its
names keep the import path they had as one module (``from celldag.registry import load_config``).
"""

from __future__ import annotations

from celldag.registry.consistency import (  # noqa: F401 - the package's names, where labs and the Snakefile import them
    PIN_ON_FIRST_FETCH,
    check_consistency,
    check_embedding_names,
    check_source_files,
    check_stand_in,
)
from celldag.registry.files import (  # noqa: F401 - the package's names, where labs and the Snakefile import them
    DEFAULT_CONFIG,
    DEFAULT_VARIANT,
    FILE_FIELDS,
    KINDS,
    SCHEMA_DIR,
    UPSTREAM_FIELD,
    ConfigError,
    Registries,
    Source,
    apply_schema,
    check_env_paths,
    key_sources,
    on_path,
    package_folders,
    read_registries,
    read_yaml,
    safe_load,
    shipped_registries,
    shipped_registry_files,
    shown_path,
    source_of,
)
from celldag.registry.load import (  # noqa: F401 - the package's names, where labs and the Snakefile import them
    load_config,
    load_workflow_config,
)
from celldag.registry.params import (  # noqa: F401 - the package's names, where labs and the Snakefile import them
    CODE_FIELDS,
    apply_method_params,
    check_config_ids,
    check_file_params,
    check_method_overrides,
    check_method_params,
    check_param_names,
    declared_params,
    file_params,
    fill_keyed_defaults,
    method_param_names,
    param_origin,
    plural_keys,
    refuse_unknown,
    split_method_selector,
    undo_command_line_strings,
)
