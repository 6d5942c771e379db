"""docs/running.md's partition-limits file, through the installed SLURM plugin's choice of a partition per job: the
jobs that request a GPU (resource gpu=1: celldag.plan.requests_gpu) go to the GPU partition, every other to the CPU
one. What the plugin reads of a job is its resources and threads (snakemake_executor_plugin_slurm.partitions)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace

from conftest import REPO
from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file


def documented_partitions(tmp_path: Path) -> Path:
    """The ```yaml block of docs/running.md that holds a partition-limits file, written to a file."""
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs/running.md").read_text(), flags=re.S)
    (block,) = [block for block in blocks if re.search(r"^partitions:$", block, flags=re.M)]
    path = tmp_path / "partitions.yaml"
    path.write_text(block)
    return path


def job(rule: str, threads: int = 1, **resources) -> SimpleNamespace:
    """A job as the plugin sees it, with profiles/slurm's defaults (cpus_per_gpu: threads)."""
    resources = {"mem_mb": 4000, "runtime": 60, "cpus_per_gpu": threads} | resources
    return SimpleNamespace(name=rule, threads=threads, resources=resources)


def test_the_documented_partition_file_sends_gpu_jobs_to_the_gpu_partition(tmp_path):
    partitions = read_partition_file(documented_partitions(tmp_path))
    assert [p.name for p in partitions] == ["cpu", "gpu"]
    log = logging.getLogger("slurm-partitions")
    chosen = {
        name: get_best_partition(partitions, each, log)
        for name, each in {
            "run_method celltreeqm (device: cuda)": job("run_method", gpu=1, mem_mb=7711, runtime=78),
            "run_method nj_raw": job("run_method", gpu=0),
            "evaluate": job("evaluate", mem_mb=8000),
            "prepare_dataset": job("prepare_dataset", mem_mb=500, runtime=120),
        }.items()
    }
    assert chosen == {
        "run_method celltreeqm (device: cuda)": "gpu",
        "run_method nj_raw": "cpu",
        "evaluate": "cpu",
        "prepare_dataset": "cpu",
    }
    assert get_best_partition(partitions, job("run_method", gpu=8), log) is None  # more GPUs than a node has
