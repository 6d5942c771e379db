# Loads and validates the config and registries, derives wildcard constraints from the registry ids, plans the
# run with celldag.plan, and looks things up for the rules. What a job reads is celldag.jobs.rule_inputs' (the input
# functions here pass a job's wildcards to it); which conda env it runs in, celldag.jobs.envs' (RuleEnvs): what those
# need of Snakemake — the workflow's files through its source cache, --sdm conda — is passed in from here.
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
# the shipped reference (reference/default/ of the checkout beside pyproject.toml): where a copy of the workflow has
# none (a remote module, a lab's folder), paths into it name no file, and what reads them does without
SHIPPED_REFERENCE = os.path.join(os.path.dirname(PYPROJECT), "reference", "default")
with open(PYPROJECT, "rb") as _pyproject:
    WORKFLOW_VERSION = tomllib.load(_pyproject)["project"]["version"]
if celldag.__version__ != WORKFLOW_VERSION:
    raise WorkflowError(
        f"celldag {celldag.__version__} is installed ({Path(celldag.__file__).parent}), but this workflow "
        f"({PYPROJECT}) is celldag {WORKFLOW_VERSION}: install that version "
        f"(pip install 'celldag @ git+<celldag repository>@v{WORKFLOW_VERSION}', or pip install -e <its checkout>)"
    )

# One version holds many commits: the package's source must also be the one these workflow files go with. A local
# checkout's src/celldag says which; a workflow read from elsewhere (github(...), a URL, gitfile(...)) names it in
# workflow/celldag-source.sha256, one small file read without the network (celldag.release).
from celldag import release as celldag_release  # noqa: E402

_LOCAL_SOURCE = (
    Path(workflow.current_basedir.get_path_or_uri(secret_free=True), "../../src/celldag").resolve()
    if isinstance(workflow.current_basedir, LocalSourceFile)
    else None
)
if _LOCAL_SOURCE is not None and _LOCAL_SOURCE.is_dir():
    WORKFLOW_SOURCE_DIGEST, _DIGEST_ORIGIN = celldag_release.source_digest(_LOCAL_SOURCE), str(_LOCAL_SOURCE)
else:
    _DIGEST_ORIGIN = workflow_file("../celldag-source.sha256")
    WORKFLOW_SOURCE_DIGEST = celldag_release.read_workflow_digest(_DIGEST_ORIGIN)
if celldag_release.package_digest() != WORKFLOW_SOURCE_DIGEST:
    raise WorkflowError(
        f"celldag {celldag.__version__} is installed ({Path(celldag.__file__).parent}, source sha256 "
        f"{celldag_release.package_digest()[:16]}), but this workflow's celldag ({_DIGEST_ORIGIN}) has source sha256 "
        f"{WORKFLOW_SOURCE_DIGEST[:16]}: the same version from another commit. Install the workflow's own "
        f"(pip install -e <its checkout>, or the release tag's package for a tagged workflow)"
    )

from celldag.commands import annotate as celldag_annotate  # noqa: E402
from celldag.jobs import envs as celldag_envs, resources, rule_inputs
from celldag import plan
from celldag.results import qc as celldag_qc  # noqa: E402
from celldag.errors import InputError  # noqa: E402
from celldag.registry.params import split_method_selector  # noqa: E402
from celldag.registry import KINDS, ConfigError, key_sources, load_config, read_yaml  # noqa: E402
from celldag.registry import package_folders as registry_package_folders  # noqa: E402

# Every job checks that it runs the workflow's celldag, from its own env under --sdm conda
# (celldag.jobs.envs.job_environment_problem): jobs inherit these variables; cluster jobs parse this file again.
SDM_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
celldag_envs.set_job_variables(WORKFLOW_VERSION, SDM_CONDA)
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
    # a lab's queries (config `annotate`): their methods and settings checked now, before any job
    ANNOTATE_REFERENCES = dict(PLAN.queries)
    ANNOTATE_SETTINGS = plan.annotate_settings(config, REGISTRIES)  # a registry model named by its download
    ANNOTATE_REQUESTS = {query: celldag_annotate.request_of(settings, ANNOTATE_REFERENCES[query], "")
                         for query, settings in ANNOTATE_SETTINGS.items()}
    for _request in ANNOTATE_REQUESTS.values():
        celldag_annotate.check_request(_request, REGISTRIES.methods)
except (ConfigError, ValueError, InputError) as err:
    raise WorkflowError(f"invalid configuration: {err}") from None
INPUTS = rule_inputs.RuleInputs(PLAN, REGISTRIES, config)  # what each job reads, by its wildcards


def _one_of(ids):
    return "|".join(re.escape(i) for i in sorted(ids))


wildcard_constraints:
    dataset=_one_of(REGISTRIES.datasets),
    source=_one_of([*REGISTRIES.datasets, plan.EMBEDDING_SOURCE, plan.MODEL_SOURCE]),
    embedding=_one_of(REGISTRIES.embeddings) if REGISTRIES.embeddings else "(?!)",
    method=_one_of(REGISTRIES.methods),
    variant="[a-z][a-z0-9_]*",
    seed=r"\d+",
    file="[A-Za-z0-9._-]+",
    key=plan.KEY_PATTERN,
    data_key=plan.KEY_PATTERN,
    name=re.escape(config["name"]),  # jobs here make this configuration's scores, never another's


# ---- input functions: a job's wildcard values (strings) to celldag.jobs.rule_inputs; a path this configuration does
# not make (a key of other settings: no job writes a result under settings it did not run with) stops the DAG
def planned(inputs, *names):
    """Snakemake's function of ``inputs`` (a RuleInputs method), called with the job's wildcards ``names``."""

    def function(wildcards):
        try:
            return inputs(*(wildcards.get(name) for name in names))
        except rule_inputs.NotPlanned as err:
            raise WorkflowError(str(err)) from None

    return function


dataset_files = planned(INPUTS.dataset_files, "dataset", "data_key")
preparation_inputs = planned(INPUTS.preparation, "dataset", "data_key")
download_entry = planned(INPUTS.download_entry, "source", "file")
genes_source = planned(INPUTS.genes_source, "dataset", "data_key")
embedding_inputs = planned(INPUTS.embedding, "embedding", "dataset", "data_key")
run_seeds = planned(INPUTS.run_seeds, "seed")
run_inputs = planned(INPUTS.run, "dataset", "method", "variant", "key", "seed")
evaluation_inputs = planned(INPUTS.evaluation, "dataset")
chained_prepared = planned(INPUTS.chained_prepared, "dataset", "data_key")


def figure_inputs(needs, track_id):
    return planned(functools.partial(INPUTS.figure, needs, track_id), "dataset", "name")


def chained_inputs(track_id):
    return planned(functools.partial(INPUTS.chained_run, track_id), "dataset", "chain_key", "method", "variant", "key")


def chained_evaluation_inputs(track_id):
    return planned(functools.partial(INPUTS.chained_evaluation, track_id), "dataset")


# ---- lookups of the rules' params and resources. Entries go to the jobs less their citations (plan.without_citation):
# a corrected reference or license reruns no job.
def dataset_entry(wildcards):
    return plan.without_citation(REGISTRIES.datasets[wildcards.dataset])


def method_entry(wildcards):
    return plan.without_citation(REGISTRIES.methods[wildcards.method])


def method_gpus(wildcards):
    """1 for a training job that trains on a GPU (sbatch --gpus=1), else 0: celldag.plan.requests_gpu, from the
    variant's params (device: cuda, accelerator: gpu), the method's `gpu` flag and compute.gpus."""
    return plan.job_gpus(REGISTRIES.methods[wildcards.method], wildcards.variant, config["compute"]["gpus"])


def per_attempt(base):
    """A resource that grows with each try (1×, 2×, …): a job killed for memory or time asks for more."""

    def resource(wildcards, attempt):
        return base * attempt

    return resource


RESOURCE_MODELS = read_yaml(workflow_file("../../config/resources.yaml"))


def sized(rule_name, resource, repeats, track_id=None):
    """A resource that follows the size of the job's prepared data (celldag.jobs.resources, config/resources.yaml),
    × the attempt; ``repeats(wildcards, input)``: the passes the job makes (seeds run, outputs scored).
    ``track_id``: a chained track's own model (else the dataset's track's)."""

    def value(wildcards, input, attempt):
        track = track_id or REGISTRIES.datasets[wildcards.dataset]["track"]
        model = RESOURCE_MODELS.get(track, RESOURCE_MODELS["default"])
        rows = resources.largest(input.prepared)
        return resources.request(model, rule_name, rows, attempt, repeats(wildcards, input))[resource]

    return value


def trained_sized(resource):
    """run_method's ``resource``: ``sized``'s, or for a job that trains on a GPU (``method_gpus``) on a track
    with a ``gpu_run_method`` model, the GPU's (celldag.jobs.resources.gpu_request: host memory for CUDA, runtime
    from the run's steps or max_epochs and its width)."""

    def value(wildcards, input, attempt):
        model = RESOURCE_MODELS.get(REGISTRIES.datasets[wildcards.dataset]["track"], RESOURCE_MODELS["default"])
        if not (method_gpus(wildcards) and "gpu_run_method" in model):
            return sized("run_method", resource, lambda wildcards, input: len(input.prepared))(wildcards, input, attempt)
        params = plan.method_params(REGISTRIES.methods[wildcards.method], wildcards.variant)
        rows = resources.largest(input.prepared)
        return resources.gpu_request(model, params, rows, attempt, len(input.prepared))[resource]

    return value


def track_entry(track_id):
    """A tracks-registry entry less the works behind its metrics (`references:`, plan.without_citation): its
    `definition` is what jobs load, and a corrected citation reruns no job."""
    return plan.without_citation(REGISTRIES.tracks[track_id])


def all_track_entries():
    return {track_id: track_entry(track_id) for track_id in REGISTRIES.tracks}


def dataset_track(wildcards):
    """The tracks-registry entry of a dataset's track (its `definition` is what jobs load)."""
    return track_entry(REGISTRIES.datasets[wildcards.dataset]["track"])


def method_track(wildcards):
    return track_entry(REGISTRIES.methods[wildcards.method]["track"])


def download_pins(wildcards):
    return plan.DOWNLOAD_PINS.format(source=wildcards.source)


def embedding_entry(wildcards):
    return plan.without_citation(REGISTRIES.embeddings[wildcards.embedding])


def embedding_dataset_entry(wildcards):
    """The dataset's registry entry: its gene_ids and species say how its genes meet the table's."""
    return plan.without_citation(REGISTRIES.datasets[wildcards.dataset])


KINDS_OF_ROWS = plan.method_kinds(REGISTRIES) | plan.chained_kinds(PLAN.chained, REGISTRIES)


# ---- conda envs (--sdm conda): a family's envs/<family>.yaml, or a lab's env file, plus celldag itself and the
# lab's `packages:`, generated into .snakemake/celldag-envs/ (celldag.jobs.envs.RuleEnvs; docs/running.md#conda-environments).
# Rules name envs/<family>.yaml literally, or dataset_env / method_env; use_generated_envs() at the end of the
# Snakefile points the literal ones at their generated env. Without --sdm conda the files are the given ones.
def workflow_source(relative):
    """A file of the celldag workflow as Snakemake's source cache reads it, ``relative`` to the workflow folder."""
    return RULES_DIR.join(f"../../{relative}")


def workflow_has(relative):
    return workflow.sourcecache.exists(workflow_source(relative))


def read_workflow_file(relative):
    with workflow.sourcecache.open(workflow_source(relative), "rb") as handle:
        return handle.read()


def workflow_tree():
    """The celldag workflow folder these rules come from, as celldag.jobs.envs reads it: a local checkout, a
    gitfile(...) repository or github(...)/gitlab(...) source at its resolved commit, or a URL."""
    root = RULES_DIR.join("../..")
    if isinstance(root, LocalGitFile):
        return celldag_envs.git_source_tree(root.repo_path, root.ref, root.path, os.path.abspath(root.repo_path))
    if isinstance(root, HostingProviderFile):  # Snakemake reads these from its bare clone of the repository
        pyproject = workflow_source("pyproject.toml")
        pyproject.cache_path = workflow.sourcecache.cache_path
        pyproject.fetch_if_required()
        return celldag_envs.git_source_tree(pyproject.hosted_repo.repo_clone, root.ref, root.path,
                                            f"https://{root.host}/{root.repo}")
    if isinstance(root, LocalSourceFile):
        return celldag_envs.directory_tree(Path(root.get_path_or_uri(secret_free=True)))
    return celldag_envs.url_tree(read_workflow_file, Path(celldag.__file__).parent, root.get_path_or_uri(secret_free=True))


ENVS = celldag_envs.RuleEnvs(SDM_CONDA, workflow_tree, lambda family: workflow_file(f"../../envs/{family}.yaml"),
                             workflow_has)


def celldag_env(env, packages=()):
    """The conda env file of a family (``lineage``) or a lab's env file (a path), with a lab's ``packages``."""
    try:
        return ENVS.env_file(env, packages)
    except celldag_envs.EnvError as err:
        raise WorkflowError(str(err)) from None


def dataset_env(wildcards):
    """A dataset's jobs run in its entry's env, by default its track's (scanpy and scIB metrics on one)."""
    entry = REGISTRIES.datasets[wildcards.dataset]
    return celldag_env(entry.get("env") or dataset_track(wildcards)["env"], entry.get("packages", ()))


def annotate_methods(query):
    """The registry entries (without citations) of a query's representation method and classifier."""
    request = ANNOTATE_REQUESTS[query]
    chosen = (split_method_selector(request.representation)[0], split_method_selector(request.classifier)[0])
    return {m: plan.without_citation(REGISTRIES.methods[m]) for m in chosen}


def method_env(wildcards):
    entry = REGISTRIES.methods[wildcards.method]
    return celldag_env(entry["env"], entry.get("packages", ()))


def use_generated_envs():
    """Under --sdm conda, point each rule of this workflow that names envs/<family>.yaml literally at the
    generated env of that family (called at the end of the Snakefile, once every rule is defined)."""
    if not SDM_CONDA:
        return
    for each in workflow.rules:  # an outer workflow's rules are its own
        family = celldag_envs.literal_family(each.conda_env) if str(each.basedir) == str(RULES_DIR) else None
        if family:
            each.conda_env = lambda wildcards, family=family: celldag_env(family)


# each registry entry's env family is a file envs/<family>.yaml of this workflow (env files and packages folders
# of a lab's entries: celldag.registry.check_env_paths)
_env_problem = celldag_envs.entry_env_problem(REGISTRIES, workflow_has)
if _env_problem:
    raise WorkflowError(f"invalid configuration: {_env_problem}")
if not SDM_CONDA:  # a plain run's jobs import a lab's `packages:` through PYTHONPATH, which they inherit
    celldag_envs.put_on_pythonpath(registry_package_folders(REGISTRIES))
