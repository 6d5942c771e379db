"""Planning: (run config, registries) → the runs and files one Snakemake call produces.

Pure functions over plain data, so the expansion is unit-tested by job counts per rule without
Snakemake. The path patterns below are the single place where artifact paths are spelled, every job's log
included; the rules use them as their input, output and log patterns, and ``parse`` reads a path back into its
fields (the report finds a run's log from its record so).

Prepared datasets and runs are keyed by the settings that determine them (``data_key``, ``key``): two
configurations share what they compute alike and keep apart what they compute differently. Scores and
the leaderboard belong to a configuration: they sit under its ``name``.
"""

from __future__ import annotations

import pathlib
import re
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from celldag.provenance import config_hash
from celldag.registry import UPSTREAM_FIELD, Registries, file_params, split_method_selector

EMBEDDING_SOURCE = "embeddings"  # resources/embeddings/ holds gene-embedding inputs (no dataset has this id)
MODEL_SOURCE = "models"  # resources/models/ holds the registry's pretrained annotation models (config/models.yaml)
DOWNLOAD = "resources/{source}/{file}"  # source: a dataset id, EMBEDDING_SOURCE or MODEL_SOURCE
DOWNLOAD_PINS = "resources/{source}/checksums.json"
KEY_DIGITS = 10  # hex digits of a settings key (40 bits): two settings of one run clash with odds ~1e-12
KEY_PATTERN = f"[0-9a-f]{{{KEY_DIGITS}}}"
PREPARED = "results/data/{dataset}/{data_key}/seed{seed}.h5ad"
# `celldag validate`'s report of a dataset read from files, made before any of its preparations
VALIDATION = "results/data/{dataset}/{data_key}/validation.txt"
VALIDATION_INPUT = "celldag/validation"  # its name among prepare_dataset's inputs: never a file's name (no '/')
DATASET_GENES = "results/data/{dataset}/{data_key}/genes.txt"
# the table's folder is its embedding id: scoring finds a run's static table by it
GENE_TABLE = "results/embeddings/{embedding}/{dataset}-{data_key}.parquet"
RUN_DIR = "results/runs/{dataset}/{method}/{variant}/{key}/seed{seed}"
RUN_OUTPUT = RUN_DIR + "/output.h5ad"
RUN_RECORD = RUN_DIR + "/run.json"
RUN_LOG = "results/logs/run_method/{dataset}/{method}/{variant}/{key}/seed{seed}.log"
# a configuration's own files, under its name (config key `name`)
DATASET_SCORES = "results/{name}/scores/{dataset}.parquet"  # every run on one dataset: metric start-up is paid once
SCORES = "results/{name}/scores.parquet"
RUNS = "results/{name}/runs.parquet"
FLOOR_CARDS = (
    "results/{name}/floor_cards.parquet"  # each metric's null and oracle per dataset (celldag.results.floor_cards)
)
QC = "results/{name}/qc.parquet"  # the quality checks, with their severities (celldag.results.qc)
LEADERBOARD = "results/{name}/leaderboard.md"
FIGURE = "results/{name}/figures/{dataset}/{figure}.png"  # a figure of its track (celldag.tracks.Figure)
INDEX = "results/{name}/index.html"  # leaderboards, figures and failed runs on one static page
LEADERBOARD_HTML = "results/{name}/leaderboard.html"
# a chained track (celldag.tracks.Track.upstream): its task per dataset seed (labels, splits, groups), then
# per run of the upstream track one job running the chained track's methods on that run's output
CHAIN_TASK = "results/data/{dataset}/{data_key}/{track}-{chain_key}/seed{seed}.h5ad"
CHAINED_DIR = RUN_DIR + "/{track}-{chain_key}"  # inside the upstream run's directory
CHAINED_INPUT = CHAINED_DIR + "/input.h5ad"  # the task with the upstream output's cell embedding as X
CHAINED_OUTPUT = CHAINED_DIR + "/{chained_method}/output.h5ad"
CHAINED_RECORD = CHAINED_DIR + "/{chained_method}/run.json"
CHAINED_LOG = "results/logs/run_chained/{dataset}/{method}/{variant}/{key}/{track}-{chain_key}.log"
CHAINED_SCORES = "results/{name}/scores/{dataset}.{track}.parquet"
ANNOTATED = "results/{name}/annotate/{query}"  # a lab's query annotated (config `annotate`, celldag.commands.annotate)
ANNOTATE_LOG = "results/logs/annotate_query/{name}/{query}.log"
# every job's log (Snakemake's `log:`), under results/logs/<what the job does>/; RUN_LOG and CHAINED_LOG above
DOWNLOAD_LOG = "results/logs/download/{source}/{file}.log"
VALIDATION_LOG = "results/logs/validate_dataset/{dataset}/{data_key}.log"
PREPARE_LOG = "results/logs/prepare_dataset/{dataset}/{data_key}/seed{seed}.log"
DATASET_GENES_LOG = "results/logs/dataset_genes/{dataset}/{data_key}.log"
GENE_TABLE_LOG = "results/logs/embed_genes/{embedding}/{dataset}-{data_key}.log"
EVALUATE_LOG = "results/logs/evaluate/{name}/{dataset}.log"
CHAIN_TASK_LOG = "results/logs/{track}_task/{dataset}/{data_key}-{chain_key}.log"
CHAINED_EVALUATE_LOG = "results/logs/evaluate_{track}/{name}/{dataset}.log"
FIGURE_LOG = "results/logs/figures/{name}/{dataset}/{figure}.log"
AGGREGATE_LOG = "results/logs/aggregate/{name}.log"
REPORT_LOG = "results/logs/report_html/{name}.log"
# embed_genes' input file that maps a dataset's human Ensembl ids to symbols: org.Hs.eg.db (config/embeddings.yaml)
ORG_ROLE = "org_hs_eg_sqlite"


@dataclass(frozen=True, order=True)
class Run:
    dataset: str
    method: str
    variant: str
    seed: int
    key: str  # run_key(): names the run's directory
    data_key: str  # data_key(): names its prepared dataset's directory

    def path(self, pattern: str, **fields: str) -> str:
        return pattern.format(**asdict(self), **fields)

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.method}/{self.variant}/{self.seed}"

    @property
    def output(self) -> str:
        return self.path(RUN_OUTPUT)

    @property
    def record(self) -> str:
        return self.path(RUN_RECORD)


@dataclass(frozen=True, order=True)
class ChainedRun:
    """A method of a chained track run on the output of one upstream run (e.g. kNN on scVI's embedding).

    Its rows in the scores are named (``chained_method``, ``label``): the method, and the upstream run's
    method/variant in the variant column."""

    upstream: Run
    track: str
    chained_method: str
    chain_key: str  # chain_key(): the task params and the track's selected methods determine its files

    @property
    def dataset(self) -> str:
        return self.upstream.dataset

    @property
    def seed(self) -> int:
        return self.upstream.seed

    @property
    def label(self) -> str:
        return f"{self.upstream.method}/{self.upstream.variant}"

    def path(self, pattern: str, **fields: str) -> str:
        return self.upstream.path(
            pattern, track=self.track, chained_method=self.chained_method, chain_key=self.chain_key, **fields
        )

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.chained_method}/{self.label}/{self.seed}"

    @property
    def output(self) -> str:
        return self.path(CHAINED_OUTPUT)

    @property
    def record(self) -> str:
        return self.path(CHAINED_RECORD)


@dataclass(frozen=True)
class Plan:
    name: str  # the configuration's: its scores and leaderboard go to results/{name}/
    runs: tuple[Run, ...]
    downloads: tuple[str, ...] = ()  # resources/… files of the url datasets and gene embeddings the runs use
    gene_tables: tuple[str, ...] = ()  # results/embeddings/… tables the runs (and shuffled controls) read
    figures: tuple[tuple[str, str, str, str], ...] = ()  # (rule, dataset, figure, track): each dataset's figures of
    #                                                       its track and of the tracks chained on it
    figure_seed: int = 0  # the seed whose outputs figures draw (trees, UMAPs): the config's smallest
    job_per_seed: bool = False  # config compute.job_per_seed: a run_method job per seed, else per variant
    file_datasets: frozenset[str] = frozenset()  # datasets read from files (url, local): validated before preparing
    chained: tuple[ChainedRun, ...] = ()  # runs of chained tracks on the outputs of `runs`
    queries: tuple[tuple[str, str], ...] = ()  # config `annotate`: (query, its reference's prepared file), by query

    @property
    def prepared(self) -> tuple[str, ...]:
        return tuple(sorted({run.path(PREPARED) for run in self.runs}))

    @property
    def validations(self) -> tuple[str, ...]:
        return tuple(sorted({run.path(VALIDATION) for run in self.runs if run.dataset in self.file_datasets}))

    @property
    def dataset_scores(self) -> tuple[str, ...]:
        return tuple(sorted({run.path(DATASET_SCORES, name=self.name) for run in self.runs}))

    def runs_on(self, dataset: str) -> list[Run]:
        return [run for run in self.runs if run.dataset == dataset]

    def chained_on(self, dataset: str, track: str) -> list[ChainedRun]:
        return [run for run in self.chained if run.dataset == dataset and run.track == track]

    @property
    def chained_scores(self) -> tuple[str, ...]:
        return tuple(sorted({run.path(CHAINED_SCORES, name=self.name) for run in self.chained}))

    def jobs_per_rule(self) -> Counter:
        """How many jobs of each rule a fresh run of this plan executes (what `snakemake -n` lists)."""
        tables_of = {table.rsplit("/", 1)[1] for table in self.gene_tables}  # one gene list per dataset
        return +Counter(  # unary + drops rules with no job, as `snakemake -n` lists none
            {
                "download_file": len(self.downloads),
                "validate_dataset": len(self.validations),
                "prepare_dataset": len(self.prepared),
                "dataset_genes": len(tables_of),
                "embed_genes": len(self.gene_tables),
                "run_method": len({self.job_of(run) for run in self.runs}),
                "evaluate": len(self.dataset_scores),
                **self.chained_jobs(),
                "aggregate": 1,
                **Counter(rule for rule, *_ in self.figures),
                "report_html": 1,
                "all": 1,
            }
        )

    def chained_jobs(self) -> Counter:
        """Jobs of the chained tracks' rules: a task per dataset, a run per upstream job, an evaluate per dataset."""
        jobs = set()
        for r in self.chained:
            up = r.upstream
            jobs |= {
                ("task", r.track, r.dataset, r.chain_key),
                ("evaluate", r.track, r.dataset),
                ("run", r.track, r.dataset, up.method, up.variant, up.key),
            }
        return Counter(chained_rule(step, track) for step, track, *_ in jobs)

    def job_of(self, run: Run) -> tuple:
        """What names a run's run_method job: the run itself, or with the seeds in one job its variant."""
        return (run.dataset, run.method, run.variant, run.key) + ((run.seed,) if self.job_per_seed else ())

    @property
    def figure_paths(self) -> list[str]:
        return [FIGURE.format(name=self.name, dataset=dataset, figure=figure) for _, dataset, figure, _ in self.figures]

    @property
    def annotated(self) -> list[str]:
        """The folders of the config's `annotate` queries: the `annotate` rule's targets."""
        return [ANNOTATED.format(name=self.name, query=query) for query, _ in self.queries]

    @property
    def final_targets(self) -> list[str]:
        return [pattern.format(name=self.name) for pattern in (SCORES, RUNS, LEADERBOARD, INDEX)] + self.annotated


def job_seeds(config: dict, seed: str | None = None) -> list[int]:
    """The seeds one run_method job runs: its ``seed`` wildcard's, or with the seeds in one job all of them."""
    return [int(seed)] if config["compute"]["job_per_seed"] else list(config["seeds"])


def seeds_per_job(config: dict) -> int:
    return 1 if config["compute"]["job_per_seed"] else len(config["seeds"])


def job_files(pattern: str, config: dict) -> list[str]:
    """A run_method job's files of ``pattern`` (RUN_OUTPUT, RUN_RECORD, RUN_LOG), as Snakemake patterns:
    ``pattern`` itself with a job per seed, else one path per seed with the other wildcards kept."""
    if config["compute"]["job_per_seed"]:
        return [pattern]
    return [fill(pattern, seed=seed) for seed in config["seeds"]]


class _Wildcards(dict):
    def __missing__(self, field: str) -> str:
        return "{" + field + "}"


def fill(pattern: str, **values) -> str:
    """``pattern`` with the fields of ``values`` filled in and the others left as Snakemake wildcards."""
    return pattern.format_map(_Wildcards(values))


def parse(pattern: str, path: str) -> dict[str, str] | None:
    """The fields of ``path``, a file of ``pattern`` (each field within one folder name), or None where it is not
    one: ``fill``'s inverse."""
    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+?)", re.escape(pattern))
    found = re.fullmatch(regex, path)
    return None if found is None else found.groupdict()


def checksums_path(scores_path: str) -> str:
    """The per-row digests of a scores table (for celldag audit) beside it: ``….parquet`` → ``….sha256.json``; also of
    a pattern (``DATASET_SCORES``, ``CHAINED_SCORES``)."""
    return str(pathlib.PurePosixPath(scores_path).with_suffix(".sha256.json"))


def log_of_record(record: str) -> str | None:
    """The log of the job that wrote a run record: RUN_LOG for a run's, CHAINED_LOG for a chained track's (one
    job per upstream run); None for a file at neither path."""
    for record_pattern, log_pattern in ((CHAINED_RECORD, CHAINED_LOG), (RUN_RECORD, RUN_LOG)):
        fields = parse(record_pattern, record)
        if fields is not None:
            return fill(log_pattern, **fields)
    return None


# Snakemake's benchmark of each heavy job (wall s, max RSS MB, …, a TSV row): what config/resources.yaml's
# requests are fitted to, in every run of every lab
PREPARE_BENCHMARK = PREPARE_LOG.replace(".log", ".benchmark.tsv")  # beside the job's log, as run_benchmark's
EVALUATE_BENCHMARK = EVALUATE_LOG.replace(".log", ".benchmark.tsv")


def run_benchmark(config: dict) -> str:
    """The run_method job's benchmark file: one per job (per seed with ``compute.job_per_seed``)."""
    if config["compute"]["job_per_seed"]:
        return RUN_LOG.replace(".log", ".benchmark.tsv")
    return RUN_LOG.replace("/seed{seed}.log", "/benchmark.tsv")


def chained_rule(step: str, track_id: str) -> str:
    """The rules of a chained track: ``annotation_task``, ``run_annotation``, ``evaluate_annotation``."""
    return f"{track_id}_task" if step == "task" else f"{step}_{track_id}"


def figure_rule(track_id: str, figure: str) -> str:
    """The rule drawing one figure of a track (a rule per figure: each has its own caption in the report)."""
    return f"figure_{track_id}_{figure}"


def settings_key(settings: dict) -> str:
    """A short name for the settings that determine an artifact: equal settings, equal key, in any process."""
    return config_hash(settings)[:KEY_DIGITS]


def data_key(dataset_entry: dict) -> str:
    """The key of a dataset's prepared files: its registry entry (loader, params, files) determines them."""
    return settings_key(preparation_entry(dataset_entry))


# entries of a dataset that change where its jobs run, not what they compute (celldag.jobs.envs)
WHERE_IT_RUNS = ("env", "packages")
# what to cite for an entry and under which license its implementation runs, and the works behind a track's metrics
# (celldag cite): a corrected reference recomputes nothing. A dataset's license stays in its key: it has keyed the
# prepared files since it was required
CITATION = ("reference", "license", "references")


def preparation_entry(dataset_entry: dict) -> dict:
    """A dataset entry without ``chained``: which tracks chain on its runs changes neither its prepared files
    nor its runs (adding the annotation track to a dataset recomputes nothing of the representation track);
    nor ``env`` and ``packages``: the conda env its jobs run in under --sdm conda; nor ``stands_for``: which
    published tables its scores are held against; nor ``reference``: the work to cite."""
    left_out = ("chained", "stands_for", "reference", *WHERE_IT_RUNS)
    return {key: value for key, value in dataset_entry.items() if key not in left_out}


def run_key(dataset_entry: dict, params: dict) -> str:
    """The key of a run's directory: its prepared dataset and the variant's merged params (registry,
    config ``method_params``, variant) determine its output. The seed has a directory of its own."""
    return settings_key({"dataset": preparation_entry(dataset_entry), "params": params})


def make_run(dataset: str, method: str, variant: str, seed: int, registries: Registries) -> Run:
    """One run with its keys, from registries that hold the config's ``method_params`` (``load_config``)."""
    entry = registries.datasets[dataset]
    params = method_params(registries.methods[method], variant)
    return Run(dataset, method, variant, seed, key=run_key(entry, params), data_key=data_key(entry))


def method_variants(selector: str, methods: dict[str, dict]) -> list[tuple[str, str]]:
    method, variant = split_method_selector(selector)
    variants = [variant] if variant else list(methods[method]["variants"])
    return [(method, name) for name in variants]


def make_plan(config: dict, registries: Registries) -> Plan:
    """Every selected method × every selected dataset of the same track × every seed."""
    runs = set()
    for selector in config["methods"]:
        for method, variant in method_variants(selector, registries.methods):
            track = registries.methods[method]["track"]
            for dataset in config["datasets"]:
                if registries.datasets[dataset]["track"] != track:
                    continue
                runs.update(make_run(dataset, method, variant, seed, registries) for seed in config["seeds"])
    if not runs:
        raise ValueError("the config selects no (dataset, method) pair of the same track: nothing to run")
    downloads = {
        DOWNLOAD.format(source=dataset, file=file["name"])
        for dataset in {run.dataset for run in runs}
        if registries.datasets[dataset]["source"] == "url"
        for file in registries.datasets[dataset]["files"]
    }
    tables = set()
    for run in runs:
        for embedding in embeddings_needed(run_embedding(run, registries), registries.embeddings):
            tables.add((embedding, run.dataset, run.path(GENE_TABLE, embedding=embedding)))
    downloads |= {
        DOWNLOAD.format(source=EMBEDDING_SOURCE, file=file["name"])
        for embedding, dataset in {(embedding, dataset) for embedding, dataset, _ in tables}
        for file in gene_table_files(embedding, registries.datasets[dataset], registries.embeddings)
        if "url" in file
    }
    downloads |= {
        settings["model"]
        for query, settings in annotate_settings(config, registries).items()  # models
        if config["annotate"][query].get("model") in registries.models
    }  # of the registry
    gene_tables = {path for _, _, path in tables}
    figures = []
    for dataset in sorted({run.dataset for run in runs}):
        track_id = registries.datasets[dataset]["track"]
        figures += [
            (figure_rule(track_id, f.name), dataset, f.name, track_id) for f in registries.track(track_id).figures
        ]
    file_datasets = frozenset(run.dataset for run in runs if reads_files(registries.datasets[run.dataset]))
    chained = chained_runs(config, registries, runs)
    warn_of_idle_methods(config, registries, runs, chained)
    for dataset, track_id in sorted({(run.dataset, run.track) for run in chained}):
        figures += [
            (figure_rule(track_id, f.name), dataset, f.name, track_id) for f in registries.track(track_id).figures
        ]
    clashes = sorted(
        key for key, count in Counter((dataset, name) for _, dataset, name, _ in figures).items() if count > 1
    )
    if clashes:  # a chained track's figures share its dataset's folder with the upstream track's
        raise ValueError(f"two tracks of dataset {clashes[0][0]!r} declare a figure {clashes[0][1]!r}")
    return Plan(
        config["name"],
        tuple(sorted(runs)),
        tuple(sorted(downloads)),
        tuple(sorted(gene_tables)),
        tuple(figures),
        figure_seed=min(config["seeds"]),
        job_per_seed=config["compute"]["job_per_seed"],
        file_datasets=file_datasets,
        chained=tuple(sorted(chained)),
        queries=tuple(sorted(annotate_references(config, registries).items())),
    )


def annotate_references(config: dict, registries: Registries) -> dict[str, str]:
    """Each query of config ``annotate`` → its reference: a labelled h5ad the config names (a path ending in .h5ad,
    as given: ``celldag annotate`` prepares a plain one itself), or the prepared file of a representation dataset
    of the registry (at the query's seed, default 0), which ``prepare_dataset`` makes like any other."""
    references = {}
    for query, settings in config.get("annotate", {}).items():
        dataset = settings["reference"]
        if dataset.endswith(".h5ad"):
            references[query] = dataset
            continue
        entry = registries.datasets.get(dataset)
        if entry is None or entry["track"] != "representation":
            raise ValueError(f"annotate.{query}.reference: {dataset!r} is not a dataset of the representation track")
        references[query] = PREPARED.format(dataset=dataset, data_key=data_key(entry), seed=settings.get("seed", 0))
    return references


def model_file(model: str, registries: Registries, where: str) -> str:
    """The file a query's ``model`` names: a .pkl path as given, or the download of a pretrained model of the
    registry (``resources/models/<name>``); an id the registry lacks is refused, naming ``where``."""
    if model.endswith(".pkl"):
        return model
    if model not in registries.models:
        known = ", ".join(sorted(registries.models)) or "none"
        raise ValueError(f"{where}: {model!r} is neither a .pkl file nor a pretrained model of the registry ({known})")
    return DOWNLOAD.format(source=MODEL_SOURCE, file=registries.models[model]["file"]["name"])


def annotate_settings(config: dict, registries: Registries) -> dict[str, dict]:
    """Each query of config ``annotate`` → its settings, with a ``model`` given as the file read (``model_file``)."""
    return {
        query: settings
        | (
            {"model": model_file(settings["model"], registries, f"annotate.{query}.model")}
            if "model" in settings
            else {}
        )
        for query, settings in config.get("annotate", {}).items()
    }


def source_files(source: str, registries: Registries) -> list[dict]:
    """The registry's file entries downloaded into ``resources/<source>/``: a dataset's, the gene embeddings' (files
    shared by several entries are one download) or the pretrained models'."""
    if source == EMBEDDING_SOURCE:
        return [file for entry in registries.embeddings.values() for file in entry["files"]]
    if source == MODEL_SOURCE:
        return [entry["file"] for entry in registries.models.values()]
    return registries.datasets[source].get("files", [])


def chained_runs(config: dict, registries: Registries, runs: set[Run]) -> list[ChainedRun]:
    """Every selected method of a chained track × every run of its upstream track on a dataset that lists
    the chained track under ``chained`` (a run that is not ok gives its chained runs that status)."""
    selected = selected_methods(config, registries)
    chained = []
    for run in runs:
        entry = registries.datasets[run.dataset]
        for track_id, task in entry["chained"].items():
            methods = sorted({m for m in selected if registries.methods[m]["track"] == track_id})
            key = chain_key(task, {method: registries.methods[method] for method in methods})
            chained += [ChainedRun(run, track_id, method, key) for method in methods]
    return chained


def selected_methods(config: dict, registries: Registries) -> list[str]:
    """The method ids the config selects, in its order, each once (a variant selector names its method)."""
    return list(
        dict.fromkeys(m for selector in config["methods"] for m, _ in method_variants(selector, registries.methods))
    )


def warn_of_idle_methods(config: dict, registries: Registries, runs: set[Run], chained: list[ChainedRun]) -> None:
    """A warning per selected method that runs nowhere: a typo in ``datasets`` or a dataset of another track
    otherwise leaves a method silently out of the leaderboard. A chained track's method runs only on a
    selected dataset listing its track under ``chained`` that has a run of the upstream track."""
    planned = {run.method for run in runs} | {run.chained_method for run in chained}
    for method in selected_methods(config, registries):
        if method in planned:
            continue
        track_id = registries.methods[method]["track"]
        upstream = registries.track(track_id).upstream
        where = f"of its track ({track_id!r})"
        if upstream is not None:
            where = f"listing {track_id!r} under chained with a run of a selected {upstream!r} method"
        # the message names the method: Python shows each distinct warning once per process
        warnings.warn(f"method {method!r} runs on no selected dataset: none {where}")


def without_citation(entry: dict) -> dict:
    """A registry entry less what cites it (``CITATION``): what its jobs compute from, so that a corrected reference
    or license changes no key and, passed as a rule's params, reruns no job (Snakemake's params trigger)."""
    return {key: value for key, value in entry.items() if key not in CITATION}


def chain_key(task: dict, methods: dict[str, dict]) -> str:
    """The key of a chained track's files on a dataset: its task params and the entries of the methods run
    on each upstream output (one job runs them all, so a change to one reruns that job), less their citations."""
    computed = {method: without_citation(entry) for method, entry in methods.items()}
    return settings_key({"task": task, "methods": computed})


def chained_kinds(chained: Sequence[ChainedRun], registries: Registries) -> dict[str, str]:
    """ "method/variant" → kind of each chained run's rows: a control where its upstream run is a control
    (a representation control carries through to the annotation on it), else its own method's kind."""
    kinds = {}
    for run in chained:
        upstream = method_kind(registries.methods[run.upstream.method], run.upstream.variant)
        own = registries.methods[run.chained_method]["kind"]
        kinds[f"{run.chained_method}/{run.label}"] = "control" if "control" in (upstream, own) else own
    return kinds


def reads_files(entry: dict) -> bool:
    """A dataset read from files (downloaded or a lab's own, perhaps written by a rule of the lab's
    workflow): its files are validated by a job of their own before any preparation reads them."""
    return entry["source"] in ("url", "local")


def dataset_files(dataset_id: str, entry: dict) -> dict[str, str]:
    """A dataset's files by name: where a url source's downloads land, a local source's own paths."""
    files = entry.get("files", []) if entry["source"] in ("url", "local") else []
    return {f["name"]: f["path"] if "path" in f else DOWNLOAD.format(source=dataset_id, file=f["name"]) for f in files}


def run_embedding(run: Run, registries: Registries) -> str | None:
    """The gene-embedding id a run reads (its params' ``embedding``), or None."""
    return method_params(registries.methods[run.method], run.variant).get("embedding")


def embeddings_needed(embedding: str | None, embeddings: dict[str, dict]) -> list[str]:
    """``embedding`` and, for a shuffled control, the entry it shuffles (its table is the input)."""
    needed = []
    while embedding is not None and embedding not in needed:
        needed.append(embedding)
        embedding = embeddings[embedding].get("of")
    return needed


def declared_genes(dataset_entry: dict) -> tuple[str, str]:
    """(what the dataset's var_names are, its species): the registry entry's, by default symbols of human genes.

    Defaults here, not in the schema: a filled-in default would change every existing entry and so the
    key of every prepared dataset (``data_key``).
    """
    return dataset_entry.get("gene_ids", "symbol"), dataset_entry.get("species", "human")


def gene_table_files(embedding: str, dataset_entry: dict, embeddings: dict[str, dict]) -> list[dict]:
    """The registry files rule embed_genes reads for ``embedding``'s table of a dataset: the embedding entry's
    own, and for human Ensembl ids org.Hs.eg.db to map them (the file entry of the embeddings registry that
    lists it, e.g. go_text's: one download serves both; ``celldag.embeddings.gene_ids``)."""
    files = list(embeddings[embedding]["files"])
    if declared_genes(dataset_entry) != ("ensembl", "human") or any(file["role"] == ORG_ROLE for file in files):
        return files
    listed = [file for entry in embeddings.values() for file in entry["files"] if file["role"] == ORG_ROLE]
    if not listed:
        raise ValueError(
            f"a dataset with gene_ids: ensembl needs org.Hs.eg.db to map its ids to symbols: no entry of "
            f"the embeddings registry lists a file with role {ORG_ROLE!r} (config/embeddings.yaml's go_text does)"
        )
    return [*files, listed[0]]


def method_params(method_entry: dict, variant: str) -> dict:
    """The parameters of one variant: the method's shared params overlaid with the variant's own."""
    return {**method_entry["params"], **method_entry["variants"][variant]}


# the params that tell a method where it trains: torch's `device` (auto | cpu | cuda | cuda:N), Lightning's
# `accelerator` (auto | cpu | gpu | cuda)
DEVICE_PARAMS = ("device", "accelerator")


def names_gpu(params: Mapping) -> bool:
    """Whether a run's params put its training on a GPU: ``device: cuda`` or ``cuda:N``, ``accelerator: gpu`` or
    ``cuda``."""
    values = [params.get(name) for name in DEVICE_PARAMS]
    return any(isinstance(value, str) and (value in ("cuda", "gpu") or value.startswith("cuda:")) for value in values)


def requests_gpu(params: Mapping, gpu_method: bool, gpus: bool) -> bool:
    """Whether a training job asks its scheduler for a GPU (resource gpu=1, sbatch --gpus=1), from its run's
    resolved params (``method_params`` of the registry entry with the config's ``method_params``), the registry's
    ``gpu`` flag of its method and the config's ``compute.gpus``.

    Params that name a GPU (``names_gpu``) ask for one whatever ``compute.gpus`` says: such a run trains nowhere
    else. Params that name another device (``device: cpu``) never ask. Where they leave the choice to the method
    (``auto``, or no device param), a method marked ``gpu: true`` asks when ``compute.gpus`` is true."""
    if names_gpu(params):
        return True
    if any(params.get(name) not in (None, "auto") for name in DEVICE_PARAMS):  # cpu, or another device
        return False
    return bool(gpu_method and gpus)


def job_gpus(method_entry: dict, variant: str, gpus: bool) -> int:
    """The GPUs a run_method job of ``variant`` asks for (0 or 1; ``requests_gpu``); ``gpus``: compute.gpus."""
    return int(requests_gpu(method_params(method_entry, variant), method_entry["gpu"], gpus))


def method_files(
    method_entry: dict, params: dict, dataset: str, seed: int, upstream: str | None = None
) -> dict[str, str]:
    """param → the file it names for one run: the pattern of each of the method's file params with
    {dataset} and {seed} filled in, and for a run chained on ``upstream`` ("method/variant") {upstream},
    as method-variant (a label's '/' would be a folder)."""
    fields = {"dataset": dataset, "seed": seed} | ({UPSTREAM_FIELD: upstream.replace("/", "-")} if upstream else {})
    return {name: params[name].format(**fields) for name in file_params(method_entry)}


def run_files(run: Run | ChainedRun, registries: Registries) -> list[str]:
    """The files of its method's file params a planned run reads: inputs of its job (an edit reruns it)."""
    if isinstance(
        run, ChainedRun
    ):  # run_chained runs a chained method with its params (its variant names the upstream)
        entry = registries.methods[run.chained_method]
        return list(method_files(entry, entry["params"], run.dataset, run.seed, run.label).values())
    entry = registries.methods[run.method]
    return list(method_files(entry, method_params(entry, run.variant), run.dataset, run.seed).values())


def method_kind(method_entry: dict, variant: str) -> str:
    """method, baseline or control: the variant's own kind where the registry gives one, else the method's."""
    return method_entry.get("kind_by_variant", {}).get(variant, method_entry["kind"])


def method_kinds(registries: Registries) -> dict[str, str]:
    """ "method/variant" → method | baseline | control, for every variant of the registry."""
    return {
        f"{method}/{variant}": method_kind(entry, variant)
        for method, entry in registries.methods.items()
        for variant in entry["variants"]
    }


def method_needs(method_entry: dict, variant: str) -> list[str]:
    """The optional inputs of its track that one variant cannot do without."""
    return [*method_entry.get("needs", []), *method_entry.get("needs_by_variant", {}).get(variant, [])]
