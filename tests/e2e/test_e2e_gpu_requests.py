"""Which jobs ask for a GPU, as `snakemake -n` shows each job's resources: a training job whose params name a GPU
(`device: cuda`, `accelerator: gpu`) asks whatever compute.gpus says, `compute.gpus: true` adds the `device: auto`
jobs of methods marked `gpu: true`, and no other job asks (celldag.plan.requests_gpu). Under profiles/slurm a job's
gpu=1 is its `sbatch --gpus=1` (tests/e2e/test_e2e_slurm.py)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow, run_snakemake

from celldag.plan import make_plan
from celldag.registry import load_workflow_config

pytestmark = pytest.mark.e2e

# the paper preset's device: cuda (celltreeqm, triplet, quadruplet, scilama) and accelerator: gpu (scvi)
PAPER_GPU_METHODS = {"celltreeqm", "triplet", "quadruplet", "scilama", "scvi"}
PAPER_CPU_METHODS = {"nj_raw", "nj_pca", "upgma_raw", "pca", "harmony", "genept_w"}


def fields(line: str) -> dict[str, str]:
    """``a=1, b=x y`` (a dry run's wildcards or resources line) as a dict."""
    return dict(item.split("=", 1) for item in line.split(", ")) if line else {}


def dry_run(workdir: Path, *args: str) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(rule, wildcards, resources) of every job `snakemake -n` lists, checked against its job-stats table."""
    out = run_snakemake(workdir, "-n", *args).stdout
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \w+:$)", out, flags=re.M)[1:]:
        rule = re.match(r"(?:local)?rule (\w+):", block).group(1)
        lines = dict(re.findall(r"^    (wildcards|resources): (.*)$", block, flags=re.M))
        jobs.append((rule, fields(lines.get("wildcards", "")), fields(lines.get("resources", ""))))
    stats = re.search(r"^Job stats:\n.*?\n-+ +-+\n(.*?)^total +\d+$", out, flags=re.M | re.S).group(1)
    listed = {rule: int(count) for rule, count in re.findall(r"^(\w+) +(\d+)$", stats, flags=re.M)}
    assert Counter(rule for rule, _, _ in jobs) == listed
    return jobs


def run_method_gpus(jobs) -> Counter:
    """(method, variant, gpu resource) → how many run_method jobs; every other job must ask for no GPU."""
    asked = Counter()
    for rule, wildcards, resources in jobs:
        if rule == "run_method":
            asked[wildcards["method"], wildcards["variant"], resources["gpu"]] += 1
        else:
            assert resources.get("gpu", "0") == "0", (rule, wildcards, resources)
    return asked


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("gpu_requests"))


def test_the_paper_presets_training_jobs_ask_for_a_gpu_as_shipped(workdir, monkeypatch):
    """`--configfile config/presets/paper.yaml` as docs/running.md gives it, no compute.gpus: every job of its
    cuda and gpu methods asks for one GPU; no baseline's job asks, nor any download, preparation, evaluation,
    figure or report job."""
    jobs = dry_run(workdir, "--configfile", "config/presets/paper.yaml")
    asked = Counter()
    for (method, _, gpu), count in run_method_gpus(jobs).items():
        asked[method, gpu] += count
    monkeypatch.chdir(workdir)  # load_workflow_config reads config/config.yaml under the configfile, as Snakemake
    plan = make_plan(*load_workflow_config("config/presets/paper.yaml", str(workdir)))
    planned = Counter(method for _, method, *_ in {plan.job_of(run) for run in plan.runs})
    assert set(planned) == PAPER_GPU_METHODS | PAPER_CPU_METHODS
    assert asked == {(method, "1" if method in PAPER_GPU_METHODS else "0"): count for method, count in planned.items()}
    assert {rule for rule, _, _ in jobs} >= {"download_file", "prepare_dataset", "evaluate", "aggregate", "report_html"}


def test_a_method_named_cuda_by_method_params_is_the_only_one_that_asks(workdir):
    """A small config: triplet `device: cuda` through method_params (all its variants), every other method
    `device: auto` (or no device: nj_raw, pca), kNN annotation chained on the representation runs."""
    (workdir / "one_cuda.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "one_cuda",
                "datasets": ["bm_default", "pbmc68k_batched"],
                "seeds": [0, 1],
                "methods": [
                    "nj_raw",
                    "celltreeqm/supervised",
                    "triplet",
                    "quadruplet/supervised",
                    "scilama/text",
                    "scvi",
                    "pca",
                    "knn",
                ],
                "method_params": {"triplet": {"device": "cuda"}},
            }
        )
    )
    jobs = dry_run(workdir, "--configfile", "one_cuda.yaml")
    assert Counter(rule for rule, _, _ in jobs)["run_annotation"] == 4  # scilama/text, scvi ×2, pca: no GPU
    asked = {(method, variant): gpu for method, variant, gpu in run_method_gpus(jobs)}
    assert asked == {
        ("nj_raw", "default"): "0",
        ("celltreeqm", "supervised"): "0",
        ("quadruplet", "supervised"): "0",
        ("triplet", "supervised"): "1",
        ("triplet", "high_level_partition"): "1",
        ("triplet", "partially_labelled"): "1",
        ("scilama", "text"): "0",
        ("scvi", "batch"): "0",
        ("scvi", "no_batch"): "0",
        ("pca", "default"): "0",
    }
    # compute.gpus: true adds the device: auto jobs of methods marked gpu: true; a method set to the CPU never asks
    (workdir / "gpus.yaml").write_text(
        yaml.safe_dump(
            {
                "compute": {"gpus": True},
                "method_params": {"triplet": {"device": "cuda"}, "scilama": {"device": "cpu"}},
            }
        )
    )
    with_gpus = {
        (m, v): gpu for m, v, gpu in run_method_gpus(dry_run(workdir, "--configfile", "one_cuda.yaml", "gpus.yaml"))
    }
    assert with_gpus == asked | {
        ("celltreeqm", "supervised"): "1",
        ("quadruplet", "supervised"): "1",
        ("scvi", "batch"): "1",
        ("scvi", "no_batch"): "1",
    }


def test_a_gpu_jobs_requests_follow_its_steps_and_leave_room_for_cuda_in_host_memory(workdir):
    """Once its data are prepared, a dry run shows what each run_method job asks: the `device: cuda` triplet
    (3,000 steps, selection auto: up to 6,000 a seed) config/resources.yaml's CPU memory plus 3,000 MB for CUDA
    and 10 min + 2 seeds × 6,000 steps × 50 ms; nj_raw on the same 64 leaves the CPU model's request."""
    (workdir / "sized.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "sized",
                "datasets": ["bm_default"],
                "seeds": [0, 1],
                "methods": ["nj_raw", "triplet/supervised"],
                "method_params": {"triplet": {"device": "cuda", "steps": 3000}},
            }
        )
    )
    run_snakemake(workdir, "--configfile", "sized.yaml", "--until", "prepare_dataset")
    asked = {
        (wildcards["method"], resources["mem_mb"], resources["runtime"])
        for rule, wildcards, resources in dry_run(workdir, "--configfile", "sized.yaml")
        if rule == "run_method"
    }
    assert asked == {("nj_raw", "1001", "11"), ("triplet", "4001", "20")}
