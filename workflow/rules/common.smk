# Loads and validates the config and registries, derives wildcard constraints from the registry ids,
# and plans the run with celldag.plan. All helper functions of the rules live here.
#
# Files of the workflow itself (shipped registries, conda envs, pyproject.toml) are reached through
# workflow.source_path, relative to this file: as a module (local path or github(...)), they are the
# module's, never the outer workflow's. Results, logs and downloads are relative paths: they land in
# the working directory, the outer workflow's.
import functools
import os
import re
import tomllib
from pathlib import Path

from snakemake.settings.types import DeploymentMethod
from snakemake.sourcecache import HostingProviderFile, LocalGitFile, LocalSourceFile

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

from celldag import envs as celldag_envs, plan, resources  # noqa: E402
from celldag.registry import KINDS, ConfigError, key_sources, load_config, read_yaml  # noqa: E402
from celldag.registry import package_folders as registry_package_folders  # noqa: E402

# Every job checks that it runs the workflow's celldag, from its own env under --sdm conda
# (celldag.envs.job_environment_problem): jobs inherit these variables; cluster jobs parse this file again.
SDM_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
os.environ[celldag_envs.VERSION_VARIABLE] = WORKFLOW_VERSION
if SDM_CONDA:
    os.environ[celldag_envs.SDM_CONDA_VARIABLE] = "1"
else:
    os.environ.pop(celldag_envs.SDM_CONDA_VARIABLE, None)
RULES_DIR = workflow.current_basedir  # this file's folder as Snakemake reads it: a path, a git or hosted source, a URL

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


# ---- conda envs (--sdm conda): a family's envs/<family>.yaml, or a lab's env file, plus celldag itself and the
# lab's `packages:`, generated into .snakemake/celldag-envs/ (celldag.envs; docs/running.md#conda-environments).
# Rules name envs/<family>.yaml literally, or dataset_env / method_env; use_generated_envs() at the end of the
# Snakefile points the literal ones at their generated env. Without --sdm conda the files are the given ones.
def workflow_tree():
    """The celldag workflow folder these rules come from, as celldag.envs reads it: a local checkout, a
    gitfile(...) repository or github(...)/gitlab(...) source at its resolved commit, or a URL."""
    root = RULES_DIR.join("../..")
    if isinstance(root, LocalGitFile):
        commit = celldag_envs.git_commit(root.repo_path, root.ref)
        origin = f"git repository {os.path.abspath(root.repo_path)} commit {commit}"
        return celldag_envs.git_tree(root.repo_path, commit, root.path, origin)
    if isinstance(root, HostingProviderFile):  # Snakemake reads these from its bare clone of the repository
        pyproject = RULES_DIR.join("../../pyproject.toml")
        pyproject.cache_path = workflow.sourcecache.cache_path
        pyproject.fetch_if_required()
        clone = pyproject.hosted_repo.repo_clone
        commit = celldag_envs.git_commit(clone, root.ref)
        origin = f"git repository https://{root.host}/{root.repo} commit {commit}"
        return celldag_envs.git_tree(clone, commit, root.path, origin)
    if isinstance(root, LocalSourceFile):
        return celldag_envs.directory_tree(Path(root.get_path_or_uri(secret_free=True)))

    def read(path):  # a URL: file by file through Snakemake's source cache
        with workflow.sourcecache.open(RULES_DIR.join(f"../../{path}"), "rb") as handle:
            return handle.read()

    # what src/celldag holds at a URL cannot be listed: the files of the installed celldag (its version is
    # this workflow's, checked above), each read from the URL
    package_files = celldag_envs.directory_files(Path(celldag.__file__).parent)
    return celldag_envs.reader_tree(read, package_files, f"URL {root.get_path_or_uri(secret_free=True)}")


@functools.cache
def workflow_celldag():
    """(workflow folder, celldag package of its source): read once per parse, when a generated env is first asked for."""
    tree = workflow_tree()
    return tree, celldag_envs.celldag_package(tree)


def family_pins(tree, family):
    """Pin files of envs/<family>.yaml by platform (snakedeploy pin-conda-envs writes them beside it)."""
    names = [n for n in tree.listing("envs") if n.startswith(f"{family}.") and n.endswith(".pin.txt")]
    if not tree.listing("envs"):  # a URL: no listing, so the platforms conda knows
        names = [f"{family}.{p}.pin.txt" for p in celldag_envs.PLATFORMS
                 if workflow.sourcecache.exists(RULES_DIR.join(f"../../envs/{family}.{p}.pin.txt"))]  # fmt: skip
    return {name[len(family) + 1 : -len(".pin.txt")]: tree.read(f"envs/{name}") for name in names}


@functools.cache
def generated_env(env, packages):
    """Write (when changed) the generated env of a family or a lab's env file with celldag and ``packages``;
    its absolute path."""
    try:
        tree, package = workflow_celldag()
        if celldag_envs.FAMILY.match(env):
            base_text, base_path = tree.read(f"envs/{env}.yaml").decode(), f"envs/{env}.yaml of {tree.origin}"
            pins = family_pins(tree, env)
        else:
            base = Path(env).resolve()
            base_text, base_path = base.read_text(), str(base)
            pins = {p.name[len(base.stem) + 1 : -len(".pin.txt")]: p.read_bytes() for p in base.parent.glob(f"{base.stem}.*.pin.txt")}
        lab_packages = [celldag_envs.path_package(path) for path in packages]
        generated = celldag_envs.write_env(Path(celldag_envs.GENERATED_DIR), celldag_envs.env_name(env, packages),
                                           base_text, base_path, [package, *lab_packages], pins)  # fmt: skip
    except celldag_envs.EnvError as err:
        raise WorkflowError(f"conda env {env}: {err}") from None
    return str(generated.env_file)


def celldag_env(env, packages=()):
    """The conda env file of a family (``lineage``) or a lab's env file (a path), with a lab's ``packages``:
    under --sdm conda the generated one, else the file itself."""
    if SDM_CONDA:
        return generated_env(env, tuple(packages))
    return workflow_file(f"../../envs/{env}.yaml") if celldag_envs.FAMILY.match(env) else os.path.abspath(env)


def dataset_env(wildcards):
    """A dataset's jobs run in its entry's env, by default its track's (scanpy and scIB metrics on one)."""
    entry = REGISTRIES.datasets[wildcards.dataset]
    return celldag_env(entry.get("env") or dataset_track(wildcards)["env"], entry.get("packages", ()))


def method_env(wildcards):
    entry = REGISTRIES.methods[wildcards.method]
    return celldag_env(entry["env"], entry.get("packages", ()))


def use_generated_envs():
    """Under --sdm conda, point each rule of this workflow that names envs/<family>.yaml literally at the
    generated env of that family (called at the end of the Snakefile, once every rule is defined)."""
    if not SDM_CONDA:
        return
    for each in workflow.rules:
        if not isinstance(each.conda_env, str) or str(each.basedir) != str(RULES_DIR):
            continue  # a function of ours (dataset_env, method_env), or an outer workflow's rule
        literal = re.fullmatch(r"\.\./\.\./envs/([a-z][a-z0-9_-]*)\.yaml", each.conda_env)
        if literal:
            each.conda_env = lambda wildcards, family=literal[1]: celldag_env(family)


def check_entry_envs():
    """Each registry entry's env family is a file envs/<family>.yaml of this workflow (env files and packages
    folders of a lab's entries: celldag.registry.check_env_paths)."""
    families = {}
    for kind in ("datasets", "methods"):
        for entry_id, entry in getattr(REGISTRIES, kind).items():
            env = entry.get("env")
            if env and celldag_envs.FAMILY.match(env):
                if env not in families:
                    families[env] = workflow.sourcecache.exists(RULES_DIR.join(f"../../envs/{env}.yaml"))
                if not families[env]:
                    raise WorkflowError(f"invalid configuration: {REGISTRIES.origin(kind, entry_id)}: {entry_id}.env: "
                                        f"no env family {env!r} (envs/{env}.yaml of the celldag workflow)")  # fmt: skip


check_entry_envs()
if not SDM_CONDA:  # a plain run's jobs import a lab's `packages:` through PYTHONPATH, which they inherit
    celldag_envs.put_on_pythonpath(registry_package_folders(REGISTRIES))


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
    """embed_genes inputs: the dataset's gene list, the entry's files by role (org.Hs.eg.db too for Ensembl ids),
    a shuffled entry's base table."""
    entry = REGISTRIES.embeddings[wildcards.embedding]
    key = prepared_key(wildcards)
    inputs = {"genes": plan.DATASET_GENES.format(dataset=wildcards.dataset, data_key=key)}
    for file in plan.gene_table_files(wildcards.embedding, REGISTRIES.datasets[wildcards.dataset], REGISTRIES.embeddings):
        inputs[file["role"]] = (
            plan.DOWNLOAD.format(source=plan.EMBEDDING_SOURCE, file=file["name"]) if "url" in file else file["path"]
        )
    if "of" in entry:
        inputs["base"] = plan.GENE_TABLE.format(embedding=entry["of"], dataset=wildcards.dataset, data_key=key)
    return inputs


def embedding_entry(wildcards):
    return REGISTRIES.embeddings[wildcards.embedding]


def embedding_dataset_entry(wildcards):
    """The dataset's registry entry: its gene_ids and species say how its genes meet the table's."""
    return REGISTRIES.datasets[wildcards.dataset]


def run_seeds(wildcards):
    """The seeds of a run_method job (compute.job_per_seed: its own; else every seed of the config)."""
    return plan.job_seeds(config, wildcards.get("seed"))


def run_inputs(wildcards):
    """run_method inputs: the prepared dataset of each seed, the files its method's file params name for
    each seed (a lab's, e.g. an embedding computed elsewhere: an edit reruns the run) and, when the variant
    names one, its gene-embedding table."""
    runs = [plan.make_run(wildcards.dataset, wildcards.method, wildcards.variant, seed, REGISTRIES)
            for seed in run_seeds(wildcards)]  # fmt: skip
    run = runs[0]
    current_key(wildcards.key, run.key, f"run {run.dataset}/{run.method}/{run.variant}")
    inputs = {"prepared": [each.path(plan.PREPARED) for each in runs],
              "files": [path for each in runs for path in plan.run_files(each, REGISTRIES)]}  # fmt: skip
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
            "files": [path for run in runs for path in plan.run_files(run, REGISTRIES)],  # as run_inputs'
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
