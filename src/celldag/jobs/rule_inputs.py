"""What each job of the workflow reads: the inputs of the rules in ``workflow/rules/*.smk``, from the plan.

Snakemake's input functions (``workflow/rules/common.smk``) are one-line adapters that pass a job's wildcard values
(strings) to a method of ``RuleInputs``, built once per parse from the plan, the registries and the config; so the
paths each rule reads are unit-tested here without Snakemake (``tests/unit/workflow/test_rule_inputs.py``). Paths are
spelled by ``celldag.plan``'s patterns. A job asked for a path this configuration does not make (a key of other
settings, a file no entry downloads, an upstream run not planned) raises ``NotPlanned``, one line naming it.

Only celldag's plan and registry are imported: the Snakefile imports this module at every parse, each job's too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from celldag import plan
from celldag.errors import InputError
from celldag.plan import ChainedRun, Plan, Run
from celldag.registry import Registries


class NotPlanned(InputError):
    """A job's wildcards name a path this configuration does not make; the message says which and why."""


def current_key(found: str, key: str | None, what: str) -> str:
    """The key of a requested path must be the one the current settings give: made here, a path of another key
    would hold a result of settings other than those its key names."""
    if found != key:
        raise NotPlanned(
            f"{what}: key {found} is of other settings than this configuration's ({key}); "
            "make it with the configuration that gives it"
        )
    return key


def gene_table(run: Run, registries: Registries) -> str | None:
    """The gene-embedding table a run reads (its params' ``embedding``), or None."""
    embedding = plan.run_embedding(run, registries)
    return None if embedding is None else run.path(plan.GENE_TABLE, embedding=embedding)


@dataclass(frozen=True)
class RuleInputs:
    """The inputs of every rule's jobs, by their wildcard values; ``config``: the loaded run config (its ``seeds``
    in their order, ``compute.job_per_seed``)."""

    plan: Plan
    registries: Registries
    config: Mapping
    # run → the gene table it reads (None: none), for every planned run: built once, read by run, evaluate, figures
    tables: dict[Run, str | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", {run: gene_table(run, self.registries) for run in self.plan.runs})

    def gene_table(self, run: Run) -> str | None:
        return self.tables[run] if run in self.tables else gene_table(run, self.registries)

    def gene_tables(self, runs: Sequence[Run]) -> list[str]:
        """The gene tables ``runs`` read, each once, sorted."""
        return sorted({table for run in runs if (table := self.gene_table(run)) is not None})

    # ---------------------------------------------------------------- datasets: download, validate, prepare
    def prepared_key(self, dataset: str, data_key: str) -> str:
        """The dataset's data key, which the requested one must be."""
        return current_key(data_key, plan.data_key(self.registries.datasets[dataset]), f"dataset {dataset}")

    def dataset_files(self, dataset: str, data_key: str) -> dict[str, str]:
        """validate_dataset inputs: local paths of a dataset's files by name (downloads of a url source, the given
        paths of a local one)."""
        self.prepared_key(dataset, data_key)  # a path of another entry's key is not made here
        return plan.dataset_files(dataset, self.registries.datasets[dataset])

    def preparation(self, dataset: str, data_key: str) -> dict[str, str]:
        """prepare_dataset inputs: the dataset's files and, for files, their validation report."""
        inputs = self.dataset_files(dataset, data_key)
        if plan.reads_files(self.registries.datasets[dataset]):
            inputs[plan.VALIDATION_INPUT] = plan.VALIDATION.format(dataset=dataset, data_key=data_key)
        return inputs

    def download_entry(self, source: str, file: str) -> dict:
        """download_file's registry file entry (``plan.source_files``)."""
        matches = [f for f in plan.source_files(source, self.registries) if f["name"] == file and "url" in f]
        if not matches:
            raise NotPlanned(f"no registry entry of {source!r} downloads a file {file!r}")
        return matches[0]

    def genes_source(self, dataset: str, data_key: str) -> str:
        """The prepared file dataset_genes reads: preprocessing keeps the same genes for every seed."""
        key = self.prepared_key(dataset, data_key)
        return plan.PREPARED.format(dataset=dataset, data_key=key, seed=min(self.config["seeds"]))

    def embedding(self, embedding: str, dataset: str, data_key: str) -> dict[str, str]:
        """embed_genes inputs: the dataset's gene list, the entry's files by role (org.Hs.eg.db too for Ensembl
        ids), a shuffled entry's base table."""
        entry = self.registries.embeddings[embedding]
        key = self.prepared_key(dataset, data_key)
        inputs = {"genes": plan.DATASET_GENES.format(dataset=dataset, data_key=key)}
        for file in plan.gene_table_files(embedding, self.registries.datasets[dataset], self.registries.embeddings):
            inputs[file["role"]] = (
                plan.DOWNLOAD.format(source=plan.EMBEDDING_SOURCE, file=file["name"]) if "url" in file else file["path"]
            )
        if "of" in entry:
            inputs["base"] = plan.GENE_TABLE.format(embedding=entry["of"], dataset=dataset, data_key=key)
        return inputs

    # ---------------------------------------------------------------- runs and their scoring
    def run_seeds(self, seed: str | None = None) -> list[int]:
        """The seeds of a run_method job (compute.job_per_seed: its own; else every seed of the config)."""
        return plan.job_seeds(self.config, seed)

    def run(self, dataset: str, method: str, variant: str, key: str, seed: str | None = None) -> dict:
        """run_method inputs: the prepared dataset of each seed, the files its method's file params name for each
        seed (a lab's, e.g. an embedding computed elsewhere: an edit reruns the run) and, when the variant names
        one, its gene-embedding table."""
        runs = [plan.make_run(dataset, method, variant, each, self.registries) for each in self.run_seeds(seed)]
        run = runs[0]
        current_key(key, run.key, f"run {run.dataset}/{run.method}/{run.variant}")
        inputs: dict = {
            "prepared": [each.path(plan.PREPARED) for each in runs],
            "files": [path for each in runs for path in plan.run_files(each, self.registries)],
        }
        table = self.gene_table(run)
        if table is not None:
            inputs["embedding"] = table
        return inputs

    def evaluation(self, dataset: str) -> dict[str, list[str]]:
        """evaluate inputs: the dataset's prepared files, every run output on it, the gene tables they read."""
        runs = self.plan.runs_on(dataset)
        return {
            "prepared": sorted({run.path(plan.PREPARED) for run in runs}),
            "outputs": [run.path(plan.RUN_OUTPUT) for run in runs],
            "tables": self.gene_tables(runs),
        }

    @property
    def records(self) -> list[str]:
        """aggregate's records: of every run, then of every chained run."""
        return [run.record for run in self.plan.runs] + [run.record for run in self.plan.chained]

    def figure(self, needs: Sequence[str], track_id: str, dataset: str, name: str) -> dict:
        """A figure rule's inputs: the files its ``needs`` name, for one dataset and track (a chained track's
        figures read its own scores, records, task and outputs); ``name``: the configuration's."""
        chained = self.registries.datasets[dataset]["track"] != track_id
        runs: Sequence[Run | ChainedRun]
        if chained:
            runs = self.plan.chained_on(dataset, track_id)
            scores, prepared = plan.CHAINED_SCORES, plan.CHAIN_TASK
        else:
            runs = self.plan.runs_on(dataset)
            scores, prepared = plan.DATASET_SCORES, plan.PREPARED
        shown = [run for run in runs if run.seed == self.plan.figure_seed]
        paths: dict = {}
        if "scores" in needs:
            paths["scores"] = scores.format(name=name, dataset=dataset, track=track_id)
        if "runs" in needs:
            paths["records"] = [run.record for run in runs]
        if "outputs" in needs or "tables" in needs:
            paths["prepared"] = shown[0].path(prepared)
            paths["outputs"] = [run.output for run in shown]
        if "tables" in needs and not chained:
            paths["tables"] = self.gene_tables(shown)
        return paths

    # ---------------------------------------------------------------- chained tracks (workflow/rules/chained.smk)
    @property
    def chained_tracks(self) -> list[str]:
        """The chained tracks with a planned run: each gets its three rules."""
        return sorted({run.track for run in self.plan.chained})

    def chained_methods(self, track_id: str) -> list[str]:
        """The methods of a chained track one run job runs (its outputs name them)."""
        return sorted({run.chained_method for run in self.plan.chained if run.track == track_id})

    def chained_runs(self, track_id: str, dataset: str, chain_key: str) -> list[ChainedRun]:
        """The planned chained runs a job's wildcards name; a chain key of other settings is refused."""
        runs = self.plan.chained_on(dataset, track_id)
        current_key(chain_key, runs[0].chain_key if runs else None, f"{track_id} on {dataset}")
        return runs

    def chained_prepared(self, dataset: str, data_key: str) -> list[str]:
        """A chained task's inputs: the upstream dataset's prepared file of every seed."""
        key = self.prepared_key(dataset, data_key)
        return [plan.PREPARED.format(dataset=dataset, data_key=key, seed=seed) for seed in self.config["seeds"]]

    def chained_run(self, track_id: str, dataset: str, chain_key: str, method: str, variant: str, key: str) -> dict:
        """Inputs of one run job of a chained track: the task of every seed and the upstream run's output and record."""
        runs = [
            run
            for run in self.chained_runs(track_id, dataset, chain_key)
            if (run.upstream.method, run.upstream.variant, run.upstream.key) == (method, variant, key)
        ]
        if not runs:
            raise NotPlanned(f"no planned run {dataset}/{method}/{variant} with key {key} for {track_id} to chain on")
        by_seed = {run.seed: run for run in runs}
        seeds = self.config["seeds"]
        return {
            "prepared": [by_seed[seed].path(plan.CHAIN_TASK) for seed in seeds],
            "upstream_outputs": [by_seed[seed].upstream.output for seed in seeds],
            "upstream_records": [by_seed[seed].upstream.record for seed in seeds],
            "files": [path for run in runs for path in plan.run_files(run, self.registries)],  # as run()'s
        }

    def chained_evaluation(self, track_id: str, dataset: str) -> dict[str, list[str]]:
        """Inputs of a chained track's scoring on one dataset: its task of every seed, every chained output and every
        chained input (the task with an upstream run's embedding)."""
        runs = self.plan.chained_on(dataset, track_id)
        return {
            "prepared": sorted({run.path(plan.CHAIN_TASK) for run in runs}),
            "outputs": [run.output for run in runs],
            "inputs": sorted({run.path(plan.CHAINED_INPUT) for run in runs}),
            "tables": [],
        }
