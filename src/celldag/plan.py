"""Planning: (run config, registries) → the runs and files one Snakemake call produces.

Pure functions over plain data, so the expansion is unit-tested by job counts per rule without
Snakemake. The path patterns below are the single place where artifact paths are spelled; the rules
use them as their input/output patterns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from celldag.registry import Registries, split_method_selector

DOWNLOAD = "resources/{dataset}/{file}"
DOWNLOAD_PINS = "resources/{dataset}/checksums.json"
PREPARED = "results/data/{dataset}/seed{seed}.h5ad"
RUN_DIR = "results/runs/{dataset}/{method}/{variant}/seed{seed}"
RUN_OUTPUT = RUN_DIR + "/output.h5ad"
RUN_RECORD = RUN_DIR + "/run.json"
RUN_SCORES = RUN_DIR + "/scores.parquet"
SCORES = "results/scores.parquet"
RUNS = "results/runs.parquet"
LEADERBOARD = "results/leaderboard.md"


@dataclass(frozen=True, order=True)
class Run:
    dataset: str
    method: str
    variant: str
    seed: int

    def path(self, pattern: str) -> str:
        return pattern.format(dataset=self.dataset, method=self.method, variant=self.variant, seed=self.seed)


@dataclass(frozen=True)
class Plan:
    runs: tuple[Run, ...]
    downloads: tuple[str, ...] = ()  # resources/… files of the url datasets the runs use

    @property
    def prepared(self) -> tuple[str, ...]:
        return tuple(sorted({run.path(PREPARED) for run in self.runs}))

    def jobs_per_rule(self) -> Counter:
        """How many jobs of each rule a fresh run of this plan executes (what `snakemake -n` lists)."""
        return +Counter(  # unary + drops rules with no job, as `snakemake -n` lists none
            {
                "download_file": len(self.downloads),
                "prepare_dataset": len(self.prepared),
                "run_method": len(self.runs),
                "evaluate": len(self.runs),
                "aggregate": 1,
                "all": 1,
            }
        )

    @property
    def final_targets(self) -> list[str]:
        return [SCORES, RUNS, LEADERBOARD]


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
                runs.update(Run(dataset, method, variant, seed) for seed in config["seeds"])
    if not runs:
        raise ValueError("the config selects no (dataset, method) pair of the same track: nothing to run")
    downloads = {
        DOWNLOAD.format(dataset=dataset, file=file["name"])
        for dataset in {run.dataset for run in runs}
        if registries.datasets[dataset]["source"] == "url"
        for file in registries.datasets[dataset]["files"]
    }
    return Plan(tuple(sorted(runs)), tuple(sorted(downloads)))


def method_params(method_entry: dict, variant: str) -> dict:
    """The parameters of one variant: the method's shared params overlaid with the variant's own."""
    return {**method_entry["params"], **method_entry["variants"][variant]}
