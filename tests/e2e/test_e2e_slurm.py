"""SLURM end to end: the workflow through profiles/slurm on a throwaway single-node SLURM on 127.0.0.1.

The cluster (tests/support/slurm/cluster.py) has one node with a fake GPU (gres backed by /dev/null), so a
`--gpus=1` job runs and sees CUDA_VISIBLE_DEVICES; torch finds no CUDA device there and the run falls
back to CPU (config `compute.cpu_fallback`). Skipped, with the reason, only where SLURM cannot run
(not installed and no root or apt-get to install it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, dry_run_jobs, planned_run, run_snakemake
from slurm.cluster import PARTITION, Unavailable, running_cluster

from celldag.plan import RUN_RECORD, Run

pytestmark = pytest.mark.e2e

CONFIG = {
    "datasets": ["bm_slurm"],
    "methods": ["nj_raw", "celltreeqm/supervised"],
    "seeds": [0],
    "method_params": {
        "celltreeqm": {
            "steps": 20,
            "quartets_per_step": 256,
            "validation_quartets": 256,
            "validate_every": 10,
            "checkpoint_every": 10,
            "proj_dim": 16,
            "hidden_dim": 32,
            "output_dim": 16,
        },
    },
}
COMPUTE = ["--config", "compute={gpus: true, cpu_fallback: true}"]  # GPU methods ask SLURM for a GPU
# short polling: the plugin waits 40 s before its first status check and backs off to 180 s
FAST_POLLING = ["--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"]


def workflow_copy(workdir: Path) -> Path:
    copy_workflow(workdir)
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["bm_slurm"] = datasets["bm_default"] | {"params": {**datasets["bm_default"]["params"], "depth": 4}}
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(CONFIG))
    return workdir


def slurm_job(run: Run) -> tuple[str, str]:
    """(rule, wildcards) of a run's job as the SLURM plugin names it: the wildcard values joined by '_'
    (the job runs every seed of its variant: no seed wildcard)."""
    return "run_method", "_".join([run.dataset, run.method, run.variant, run.key])


def local_rules(workdir: Path) -> set[str]:
    """Rules Snakemake runs itself: `localrule: True` ones and `all` (no action, never submitted)."""
    names = {"all"}
    for path in [workdir / "workflow/Snakefile", *sorted((workdir / "workflow/rules").glob("*.smk"))]:
        for block in re.split(r"^(?=rule \w+:)", path.read_text(), flags=re.M):
            header = re.match(r"rule (\w+):", block)
            if header and re.search(r"^\s+localrule:\s*True", block, flags=re.M):
                names.add(header.group(1))
    return names


def submissions(log: str) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """From a --verbose Snakemake log: the sbatch command line and the SLURM job id of every submitted job,
    keyed by (rule, wildcards) as the plugin names them in --comment and in the SLURM log path."""
    calls, ids = {}, {}
    for line in log.splitlines():
        if "sbatch call: " in line:
            call = line.split("sbatch call: ", 1)[1].split(" --wrap=", 1)[0]  # the wrapped command is not the request
            comment = re.search(r"--comment '?rule_(\w+?)(?:_wildcards_(\S+?))?'?(?: |$)", call)
            key = (comment.group(1), comment.group(2) or "")
            assert key not in calls, f"submitted twice: {key}"
            calls[key] = call
        submitted = re.search(r"submitted with SLURM jobid (\d+) \(log: (.+)\)\.", line)
        if submitted:
            rule_dir, wildcards = Path(submitted.group(2)).parts[-3:-1]
            ids[(rule_dir.removeprefix("rule_"), wildcards)] = submitted.group(1)
    return calls, ids


@pytest.fixture(scope="module")
def cluster_env(tmp_path_factory):
    """A single-node SLURM for this module, always stopped afterwards."""
    with ExitStack() as stack:
        try:
            env = stack.enter_context(running_cluster(tmp_path_factory.mktemp("slurm")))
        except Unavailable as err:
            pytest.skip(f"no SLURM cluster here: {err}")
        yield env


@pytest.fixture(scope="module")
def slurm_run(cluster_env, tmp_path_factory):
    workdir = workflow_copy(tmp_path_factory.mktemp("slurm_workflow"))
    planned = dry_run_jobs(workdir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "CELLDAG_SLURM_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)  # sbatch --export=ALL would hand it to every job
    env |= cluster_env | {"CELLDAG_SLURM_PARTITION": PARTITION, "no_proxy": "127.0.0.1,localhost"}
    command = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--verbose", *FAST_POLLING, *COMPUTE]
    started = time.monotonic()
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=1200)
    seconds = time.monotonic() - started
    assert result.returncode == 0, (
        f"snakemake --profile profiles/slurm failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    (log_file,) = sorted((workdir / ".snakemake/log").glob("*.snakemake.log"))[-1:]
    return {"workdir": workdir, "planned": planned, "log": log_file.read_text(), "seconds": seconds, "env": env}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    workdir = workflow_copy(tmp_path_factory.mktemp("local_workflow"))
    run_snakemake(workdir, *COMPUTE)
    return workdir


def test_every_job_but_the_local_rules_went_through_sbatch(slurm_run, capsys):
    calls, ids = submissions(slurm_run["log"])
    local = local_rules(slurm_run["workdir"])
    expected = {rule: n for rule, n in slurm_run["planned"].items() if rule not in local}
    assert expected["run_method"] == 2 and "aggregate" in slurm_run["planned"]
    assert Counter(rule for rule, _ in calls) == Counter(expected)
    assert set(ids) == set(calls)  # each sbatch call was accepted and got a job id
    for call in calls.values():
        assert f"-p {PARTITION}" in call  # CELLDAG_SLURM_PARTITION reached sbatch through the profile
        assert " -A " not in call and "--gres" not in call
    # every job finished as COMPLETED in SLURM's eyes too (MinJobAge keeps them in squeue)
    squeue = subprocess.run(
        ["squeue", "-h", "--states=all", "-o", "%i %T"], env=slurm_run["env"], capture_output=True, text=True
    )
    states = dict(line.split() for line in squeue.stdout.splitlines())
    assert {states.get(job_id) for job_id in ids.values()} == {"COMPLETED"}, squeue.stdout
    # the local rules ran here: the leaderboard exists without an sbatch of aggregate
    assert (slurm_run["workdir"] / "results/default/leaderboard.md").exists()
    with capsys.disabled():
        print(
            f"\nSLURM e2e: {len(calls)} sbatch jobs, "
            f"snakemake --profile profiles/slurm took {slurm_run['seconds']:.0f} s"
        )


def test_gpu_jobs_ask_for_a_gpu_and_see_one(slurm_run):
    calls, ids = submissions(slurm_run["log"])
    workdir = slurm_run["workdir"]
    gpu_run, cpu_run = (
        planned_run(workdir, "bm_slurm", method, variant, 0)
        for method, variant in (("celltreeqm", "supervised"), ("nj_raw", "default"))
    )
    gpu_job, cpu_job = slurm_job(gpu_run), slurm_job(cpu_run)
    assert re.search(r"--gpus=1(\s|$)", calls[gpu_job]) and "--cpus-per-gpu=" in calls[gpu_job]
    for key, call in calls.items():
        if key != gpu_job:
            assert "--gpus" not in call and "--cpus-per-task=" in call, call
    gpu = json.loads((workdir / gpu_run.path(RUN_RECORD)).read_text())
    cpu = json.loads((workdir / cpu_run.path(RUN_RECORD)).read_text())
    assert gpu["environment"]["SLURM_JOB_ID"] == ids[gpu_job]
    assert gpu["environment"]["CUDA_VISIBLE_DEVICES"] == "0"  # SLURM handed the job the node's GPU
    assert gpu["status"] == "ok"  # no CUDA device behind it: fell back to CPU (cpu_fallback)
    assert cpu["environment"]["SLURM_JOB_ID"] == ids[cpu_job]
    assert not cpu["environment"].get("CUDA_VISIBLE_DEVICES")
    log = workdir / "results/logs/slurm/rule_run_method" / gpu_job[1] / f"{ids[gpu_job]}.log"
    assert log.exists()  # the profile keeps every job's SLURM log


def test_scores_equal_those_of_a_local_run(slurm_run, local_run):
    keys = ["dataset", "method", "variant", "seed", "metric"]
    on_slurm = pd.read_parquet(slurm_run["workdir"] / "results/default/scores.parquet").sort_values(
        keys, ignore_index=True
    )
    local = pd.read_parquet(local_run / "results/default/scores.parquet").sort_values(keys, ignore_index=True)
    assert len(on_slurm) > 0 and set(on_slurm["method"]) == {"nj_raw", "celltreeqm"}
    pd.testing.assert_frame_equal(on_slurm, local, check_exact=True)


# ---------------------------------------------------------------- celldag as a module of a lab's workflow


def test_a_labs_outer_workflow_runs_through_the_slurm_profile(cluster_env, tmp_path):
    """The outer workflow of tests/support/lab_workflow.py (lineage part: its own rule, dataset, package) from its
    own folder with celldag's profile: celldag's jobs are submitted under their module names, the lab's
    localrule and celldag's runs where Snakemake runs, and the results land in the lab's folder."""
    from lab_workflow import REPO, lab_env, write_lab_workflow

    folder = write_lab_workflow(tmp_path / "pipeline")
    (folder / "config/slurm.yaml").write_text(
        yaml.safe_dump({"celldag": {"datasets": ["lab_lineage"], "methods": ["nj_raw", "lab_corr_nj"]}})
    )
    env = {k: v for k, v in lab_env(folder).items() if not k.startswith(("SLURM_", "SBATCH_", "CELLDAG_SLURM_"))}
    env |= cluster_env | {"CELLDAG_SLURM_PARTITION": PARTITION, "no_proxy": "127.0.0.1,localhost"}
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        str(REPO / "profiles/slurm"),
        "--configfile",
        "config/config.yaml",
        "config/slurm.yaml",
        "--verbose",
        *FAST_POLLING,
    ]
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    log = sorted((folder / ".snakemake/log").glob("*.snakemake.log"))[-1].read_text()
    calls, ids = submissions(log)
    submitted = Counter(rule for rule, _ in calls)
    assert submitted == {
        "celldag_validate_dataset": 1,
        "celldag_prepare_dataset": 1,
        "celldag_run_method": 2,
        "celldag_evaluate": 1,
        **{f"celldag_figure_lineage_{figure}": 1 for figure in ("cost", "distances", "partition", "scores", "trees")},
    }
    assert set(ids) == set(calls)  # every submission accepted
    runs = pd.read_parquet(folder / "results/lab/runs.parquet")
    assert set(zip(runs["method"], runs["status"])) == {("nj_raw", "ok"), ("lab_corr_nj", "ok")}
    records = [json.loads(path.read_text()) for path in folder.glob("results/runs/lab_lineage/lab_corr_nj/**/run.json")]
    assert len(records) == 1 and records[0]["environment"]["SLURM_JOB_ID"] in ids.values()
    assert list(
        (folder / "results/logs/slurm").glob("rule_celldag_run_method/*/*.log")
    )  # SLURM logs in the lab's folder
