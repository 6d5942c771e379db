# Loads and validates the config and registries, derives wildcard constraints from the registry ids,
# and plans the run with celldag.plan. All helper functions of the rules live here.
#
# Files of the workflow itself (shipped registries, conda envs, pyproject.toml) are reached through
# workflow.source_path, relative to this file: as a module (local path or github(...)), they are the
# module's, never the outer workflow's. Results, logs and downloads are relative paths: they land in
# the working directory, the outer workflow's.
import os
import re
import tomllib
from pathlib import Path

import celldag


def workflow_file(relative):
    """A file of the celldag workflow itself, relative to this file: a local module's file where it is,
    a remote module's (github(...), a URL) through Snakemake's source cache."""
    cached = workflow.source_path(relative)
    original = cached.flags.get("sourcecache_entry")
    return os.path.normpath(original) if original and Path(original).is_file() else str(cached)


# The installed package must be the version of these workflow files (a module's rules come from a path
# or a git tag, the package from pip: they can drift). Checked before anything else of celldag is
# imported, with nothing an older or newer package may lack; cluster jobs parse this file again.
PYPROJECT = workflow_file("../../pyproject.toml")
with open(PYPROJECT, "rb") as _pyproject:
    WORKFLOW_VERSION = tomllib.load(_pyproject)["project"]["version"]
if celldag.__version__ != WORKFLOW_VERSION:
    raise WorkflowError(
        f"celldag {celldag.__version__} is installed ({Path(celldag.__file__).parent}), but this workflow "
        f"({PYPROJECT}) is celldag {WORKFLOW_VERSION}: install that version "
        f"(pip install 'celldag @ git+<celldag repository>@v{WORKFLOW_VERSION}', or pip install -e <its checkout>)"
    )

from celldag import plan, resources  # noqa: E402
from celldag.registry import KINDS, ConfigError, key_sources, load_config, read_yaml  # noqa: E402

# --configfile files, then --config, override config/config.yaml key by key: errors name what set the key
CONFIG_SOURCES = key_sources(
    [f for f in workflow.configfiles if f not in workflow.overwrite_configfiles]
    + list(workflow.overwrite_configfiles)
)
CONFIG_SOURCES.update(dict.fromkeys(workflow.config_settings.config, "--config"))
SHIPPED_REGISTRIES = {kind: workflow_file(f"../../config/{kind}.yaml") for kind in KINDS}
try:
    config, REGISTRIES = load_config(config, CONFIG_SOURCES, root=SHIPPED_REGISTRIES)
    PLAN = plan.make_plan(config, REGISTRIES)
except (ConfigError, ValueError) as err:
    raise WorkflowError(f"invalid configuration: {err}") from None


def _one_of(ids):
    return "|".join(re.escape(i) for i in sorted(ids))


wildcard_constraints:
    dataset=_one_of(REGISTRIES.datasets),
    source=_one_of([*REGISTRIES.datasets, plan.EMBEDDING_SOURCE]),
    embedding=_one_of(REGISTRIES.embeddings) if REGISTRIES.embeddings else "(?!)",
    method=_one_of(REGISTRIES.methods),
    variant="[a-z][a-z0-9_]*",
    seed=r"\d+",
    file="[A-Za-z0-9._-]+",
    key=plan.KEY_PATTERN,
    data_key=plan.KEY_PATTERN,
    name=re.escape(config["name"]),  # jobs here make this configuration's scores, never another's


def current_key(found, key, what):
    """The key of a requested path must be the one the current settings give: made here, a path of
    another key would hold a result of settings other than those its key names."""
    if found != key:
        raise WorkflowError(f"{what}: key {found} is of other settings than this configuration's ({key}); "
                            "make it with the configuration that gives it")
    return key


def prepared_key(wildcards):
    entry = REGISTRIES.datasets[wildcards.dataset]
    return current_key(wildcards.data_key, plan.data_key(entry), f"dataset {wildcards.dataset}")


def dataset_entry(wildcards):
    return REGISTRIES.datasets[wildcards.dataset]


def method_entry(wildcards):
    return REGISTRIES.methods[wildcards.method]


def method_gpus(wildcards):
    """1 for training jobs of GPU methods when the config asks for GPUs (sbatch --gpus=1), else 0."""
    return int(config["compute"]["gpus"] and REGISTRIES.methods[wildcards.method]["gpu"])


def per_attempt(base):
    """A resource that grows with each try (1×, 2×, …): a job killed for memory or time asks for more."""

    def resource(wildcards, attempt):
        return base * attempt

    return resource


RESOURCE_MODELS = read_yaml(workflow_file("../../config/resources.yaml"))


def sized(rule_name, resource, repeats, track_id=None):
    """A resource that follows the size of the job's prepared data (celldag.resources, config/resources.yaml),
    × the attempt; ``repeats(wildcards, input)``: the passes the job makes (seeds run, outputs scored).
    ``track_id``: a chained track's own model (else the dataset's track's)."""

    def value(wildcards, input, attempt):
        track = track_id or REGISTRIES.datasets[wildcards.dataset]["track"]
        model = RESOURCE_MODELS.get(track, RESOURCE_MODELS["default"])
        rows = resources.largest(input.prepared)
        return resources.request(model, rule_name, rows, attempt, repeats(wildcards, input))[resource]

    return value


def dataset_track(wildcards):
    """The tracks-registry entry of a dataset's track (its `definition` is what jobs load)."""
    return REGISTRIES.tracks[REGISTRIES.datasets[wildcards.dataset]["track"]]


def method_track(wildcards):
    return REGISTRIES.tracks[REGISTRIES.methods[wildcards.method]["track"]]


def dataset_env(wildcards):
    """Dataset preparation and evaluation run in their track's env (scanpy and scIB metrics on one)."""
    return workflow_file(f"../../envs/{dataset_track(wildcards)['env']}.yaml")


def method_env(wildcards):
    return workflow_file(f"../../envs/{REGISTRIES.methods[wildcards.method]['env']}.yaml")


def dataset_files(wildcards):
    """Local paths of a dataset's files by name: downloads of a url source, the given paths of a local one."""
    prepared_key(wildcards)  # a path of another entry's key is not made here
    return plan.dataset_files(wildcards.dataset, REGISTRIES.datasets[wildcards.dataset])


def preparation_inputs(wildcards):
    """prepare_dataset inputs: the dataset's files and, for files, their validation report."""
    inputs = dataset_files(wildcards)
    if plan.reads_files(REGISTRIES.datasets[wildcards.dataset]):
        inputs[plan.VALIDATION_INPUT] = plan.VALIDATION.format(dataset=wildcards.dataset, data_key=wildcards.data_key)
    return inputs


def download_entry(wildcards):
    if wildcards.source == plan.EMBEDDING_SOURCE:  # files shared by several entries are one download
        files = [f for entry in REGISTRIES.embeddings.values() for f in entry["files"]]
    else:
        files = REGISTRIES.datasets[wildcards.source].get("files", [])
    matches = [f for f in files if f["name"] == wildcards.file and "url" in f]
    if not matches:
        raise WorkflowError(f"no registry entry of {wildcards.source!r} downloads a file {wildcards.file!r}")
    return matches[0]


def download_pins(wildcards):
    return plan.DOWNLOAD_PINS.format(source=wildcards.source)


def embedding_inputs(wildcards):
    """embed_genes inputs: the dataset's gene list, the entry's files by role, a shuffled entry's base table."""
    entry = REGISTRIES.embeddings[wildcards.embedding]
    key = prepared_key(wildcards)
    inputs = {"genes": plan.DATASET_GENES.format(dataset=wildcards.dataset, data_key=key)}
    for file in entry["files"]:
        inputs[file["role"]] = (
            plan.DOWNLOAD.format(source=plan.EMBEDDING_SOURCE, file=file["name"]) if "url" in file else file["path"]
        )
    if "of" in entry:
        inputs["base"] = plan.GENE_TABLE.format(embedding=entry["of"], dataset=wildcards.dataset, data_key=key)
    return inputs


def embedding_entry(wildcards):
    return REGISTRIES.embeddings[wildcards.embedding]


def run_seeds(wildcards):
    """The seeds of a run_method job (compute.job_per_seed: its own; else every seed of the config)."""
    return plan.job_seeds(config, wildcards.get("seed"))


def run_inputs(wildcards):
    """run_method inputs: the prepared dataset of each seed and, when the variant names one, its
    gene-embedding table."""
    runs = [plan.make_run(wildcards.dataset, wildcards.method, wildcards.variant, seed, REGISTRIES)
            for seed in run_seeds(wildcards)]  # fmt: skip
    run = runs[0]
    current_key(wildcards.key, run.key, f"run {run.dataset}/{run.method}/{run.variant}")
    inputs = {"prepared": [each.path(plan.PREPARED) for each in runs]}
    embedding = plan.run_embedding(run, REGISTRIES)
    if embedding is not None:
        inputs["embedding"] = run.path(plan.GENE_TABLE, embedding=embedding)
    return inputs


def evaluation_inputs(wildcards):
    """evaluate inputs: the dataset's prepared files, every run output on it, the gene tables they read."""
    runs = PLAN.runs_on(wildcards.dataset)
    tables = {run.path(plan.GENE_TABLE, embedding=e) for run in runs if (e := plan.run_embedding(run, REGISTRIES))}
    return {
        "prepared": sorted({run.path(plan.PREPARED) for run in runs}),
        "outputs": [run.path(plan.RUN_OUTPUT) for run in runs],
        "tables": sorted(tables),
    }


def all_run_files(pattern):
    return [run.path(pattern) for run in PLAN.runs]


def genes_source(wildcards):
    """The prepared file dataset_genes reads: preprocessing keeps the same genes for every seed."""
    return plan.PREPARED.format(dataset=wildcards.dataset, data_key=prepared_key(wildcards), seed=min(config["seeds"]))


def figure_inputs(needs, track_id):
    """Input function of a figure's rule: the files its ``needs`` name, for one dataset and track (a chained
    track's figures read its own scores, records, task and outputs)."""

    def inputs(wildcards):
        chained = REGISTRIES.datasets[wildcards.dataset]["track"] != track_id
        if chained:
            runs = PLAN.chained_on(wildcards.dataset, track_id)
            scores, prepared = plan.CHAINED_SCORES, plan.CHAIN_TASK
        else:
            runs = PLAN.runs_on(wildcards.dataset)
            scores, prepared = plan.DATASET_SCORES, plan.PREPARED
        shown = [run for run in runs if run.seed == PLAN.figure_seed]
        paths = {}
        if "scores" in needs:
            paths["scores"] = scores.format(name=wildcards.name, dataset=wildcards.dataset, track=track_id)
        if "runs" in needs:
            paths["records"] = [run.record for run in runs]
        if "outputs" in needs or "tables" in needs:
            paths["prepared"] = shown[0].path(prepared)
            paths["outputs"] = [run.output for run in shown]
        if "tables" in needs and not chained:
            tables = {run.path(plan.GENE_TABLE, embedding=e) for run in shown if (e := plan.run_embedding(run, REGISTRIES))}
            paths["tables"] = sorted(tables)
        return paths

    return inputs


# ---- chained tracks (workflow/rules/chained.smk)
CHAINED_TRACKS = sorted({run.track for run in PLAN.chained})
KINDS_OF_ROWS = plan.method_kinds(REGISTRIES) | plan.chained_kinds(PLAN.chained, REGISTRIES)


def chained_methods(track_id):
    return sorted({run.chained_method for run in PLAN.chained if run.track == track_id})


def chained_runs_of(wildcards, track_id):
    """The planned chained runs a job's wildcards name; a chain key of other settings is refused."""
    runs = PLAN.chained_on(wildcards.dataset, track_id)
    current_key(wildcards.chain_key, runs[0].chain_key if runs else None, f"{track_id} on {wildcards.dataset}")
    return runs


def chained_prepared(wildcards):
    """A chained task's inputs: the upstream dataset's prepared file of every seed."""
    key = prepared_key(wildcards)
    return [plan.PREPARED.format(dataset=wildcards.dataset, data_key=key, seed=seed) for seed in config["seeds"]]


def chained_inputs(track_id):
    """Inputs of one run job of a chained track: the task of every seed and the upstream run's output and record."""

    def inputs(wildcards):
        runs = [run for run in chained_runs_of(wildcards, track_id)
                if (run.upstream.method, run.upstream.variant, run.upstream.key)
                == (wildcards.method, wildcards.variant, wildcards.key)]  # fmt: skip
        if not runs:
            raise WorkflowError(f"no planned run {wildcards.dataset}/{wildcards.method}/{wildcards.variant} "
                                f"with key {wildcards.key} for {track_id} to chain on")  # fmt: skip
        by_seed = {run.seed: run for run in runs}
        return {
            "prepared": [by_seed[seed].path(plan.CHAIN_TASK) for seed in config["seeds"]],
            "upstream_outputs": [by_seed[seed].upstream.output for seed in config["seeds"]],
            "upstream_records": [by_seed[seed].upstream.record for seed in config["seeds"]],
        }

    return inputs


def chained_evaluation_inputs(track_id):
    """Inputs of a chained track's scoring on one dataset: its task of every seed and every chained output."""

    def inputs(wildcards):
        runs = PLAN.chained_on(wildcards.dataset, track_id)
        return {
            "prepared": sorted({run.path(plan.CHAIN_TASK) for run in runs}),
            "outputs": [run.output for run in runs],
            "tables": [],
        }

    return inputs
