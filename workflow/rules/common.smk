# Loads and validates the config and registries, derives wildcard constraints from the registry ids,
# and plans the run with celldag.plan. All helper functions of the rules live here.
import re
from pathlib import Path

from celldag import plan
from celldag.registry import ConfigError, key_sources, load_config

# --configfile files, then --config, override config/config.yaml key by key: errors name what set the key
CONFIG_SOURCES = key_sources(
    [f for f in workflow.configfiles if f not in workflow.overwrite_configfiles]
    + list(workflow.overwrite_configfiles)
)
CONFIG_SOURCES.update(dict.fromkeys(workflow.config_settings.config, "--config"))
try:
    config, REGISTRIES = load_config(config, CONFIG_SOURCES, root=workflow.basedir)
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


def dataset_track(wildcards):
    """The tracks-registry entry of a dataset's track (its `definition` is what jobs load)."""
    return REGISTRIES.tracks[REGISTRIES.datasets[wildcards.dataset]["track"]]


def method_track(wildcards):
    return REGISTRIES.tracks[REGISTRIES.methods[wildcards.method]["track"]]


def dataset_env(wildcards):
    """Dataset preparation and evaluation run in their track's env (scanpy and scIB metrics on one)."""
    return str(Path(workflow.basedir) / "envs" / f"{dataset_track(wildcards)['env']}.yaml")


def method_env(wildcards):
    env = REGISTRIES.methods[wildcards.method]["env"]
    return str(Path(workflow.basedir) / "envs" / f"{env}.yaml")


def dataset_files(wildcards):
    """Local paths of a dataset's files by name: downloads of a url source, the given paths of a local one."""
    return plan.dataset_files(wildcards.dataset, REGISTRIES.datasets[wildcards.dataset])


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
    inputs = {"genes": plan.DATASET_GENES.format(dataset=wildcards.dataset)}
    for file in entry["files"]:
        inputs[file["role"]] = (
            plan.DOWNLOAD.format(source=plan.EMBEDDING_SOURCE, file=file["name"]) if "url" in file else file["path"]
        )
    if "of" in entry:
        inputs["base"] = plan.GENE_TABLE.format(embedding=entry["of"], dataset=wildcards.dataset)
    return inputs


def embedding_entry(wildcards):
    return REGISTRIES.embeddings[wildcards.embedding]


def run_inputs(wildcards):
    """run_method inputs: the prepared dataset and, when the variant names one, its gene-embedding table."""
    run = plan.Run(wildcards.dataset, wildcards.method, wildcards.variant, int(wildcards.seed))
    inputs = {"prepared": plan.PREPARED.format(dataset=run.dataset, seed=run.seed)}
    embedding = plan.run_embedding(run, REGISTRIES)
    if embedding is not None:
        inputs["embedding"] = plan.GENE_TABLE.format(embedding=embedding, dataset=run.dataset)
    return inputs


def evaluation_inputs(wildcards):
    """evaluate inputs: the dataset's prepared files, every run output on it, the gene tables they read."""
    runs = PLAN.runs_on(wildcards.dataset)
    tables = {plan.run_embedding(run, REGISTRIES) for run in runs} - {None}
    return {
        "prepared": sorted({run.path(plan.PREPARED) for run in runs}),
        "outputs": [run.path(plan.RUN_OUTPUT) for run in runs],
        "tables": [plan.GENE_TABLE.format(embedding=e, dataset=wildcards.dataset) for e in sorted(tables)],
    }


def all_run_files(pattern):
    return [run.path(pattern) for run in PLAN.runs]


def genes_source(wildcards):
    """The prepared file dataset_genes reads: preprocessing keeps the same genes for every seed."""
    return plan.PREPARED.format(dataset=wildcards.dataset, seed=min(config["seeds"]))
