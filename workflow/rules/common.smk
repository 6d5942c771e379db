# Loads and validates the config and registries, derives wildcard constraints from the registry ids,
# and plans the run with celldag.plan. All helper functions of the rules live here.
import re
from pathlib import Path

from celldag import plan as paths
from celldag.plan import make_plan
from celldag.registry import ConfigError, key_sources, load_config

# --configfile files, then --config, override config/config.yaml key by key: errors name what set the key
CONFIG_SOURCES = key_sources(
    [f for f in workflow.configfiles if f not in workflow.overwrite_configfiles]
    + list(workflow.overwrite_configfiles)
)
CONFIG_SOURCES.update(dict.fromkeys(workflow.config_settings.config, "--config"))
try:
    config, REGISTRIES = load_config(config, CONFIG_SOURCES, root=workflow.basedir)
    PLAN = make_plan(config, REGISTRIES)
except (ConfigError, ValueError) as err:
    raise WorkflowError(f"invalid configuration: {err}") from None


def _one_of(ids):
    return "|".join(re.escape(i) for i in sorted(ids))


wildcard_constraints:
    dataset=_one_of(REGISTRIES.datasets),
    method=_one_of(REGISTRIES.methods),
    variant="[a-z][a-z0-9_]*",
    seed=r"\d+",
    file="[A-Za-z0-9._-]+",


def dataset_entry(wildcards):
    return REGISTRIES.datasets[wildcards.dataset]


def method_entry(wildcards):
    return REGISTRIES.methods[wildcards.method]


def method_track(wildcards):
    return REGISTRIES.methods[wildcards.method]["track"]


def method_env(wildcards):
    env = REGISTRIES.methods[wildcards.method]["env"]
    return str(Path(workflow.basedir) / "envs" / f"{env}.yaml")


def dataset_files(wildcards):
    """Local paths of a url dataset's downloads, by file name ({} for builtin sources)."""
    entry = REGISTRIES.datasets[wildcards.dataset]
    names = [f["name"] for f in entry.get("files", [])] if entry["source"] == "url" else []
    return {name: paths.DOWNLOAD.format(dataset=wildcards.dataset, file=name) for name in names}


def download_entry(wildcards):
    files = REGISTRIES.datasets[wildcards.dataset].get("files", [])
    matches = [f for f in files if f["name"] == wildcards.file]
    if not matches:
        raise WorkflowError(f"dataset {wildcards.dataset!r} lists no file {wildcards.file!r} in its registry entry")
    return matches[0]


def download_pins(wildcards):
    return paths.DOWNLOAD_PINS.format(dataset=wildcards.dataset)


def prepared_dataset(wildcards):
    return paths.PREPARED.format(dataset=wildcards.dataset, seed=wildcards.seed)


def all_run_files(pattern):
    return [run.path(pattern) for run in PLAN.runs]
