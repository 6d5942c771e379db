"""A CellTreeQM training killed with SIGKILL resumes from its checkpoint and ends with identical scores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from conftest import copy_workflow, run_snakemake

pytestmark = pytest.mark.e2e

RUN = "results/runs/bm_small/celltreeqm/supervised/seed0"


def workflow(workdir):
    copy_workflow(workdir)
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["bm_small"] = datasets["bm_default"] | {"params": {**datasets["bm_default"]["params"], "depth": 4}}
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    methods = yaml.safe_load((workdir / "config/methods.yaml").read_text())
    methods["celltreeqm"]["params"] |= {"steps": 400, "checkpoint_every": 10, "validate_every": 50}
    (workdir / "config/methods.yaml").write_text(yaml.safe_dump(methods))
    config = {"datasets": ["bm_small"], "methods": ["celltreeqm/supervised"], "seeds": [0]}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    return workdir


def scores(workdir):
    return pd.read_parquet(workdir / "results/scores.parquet").set_index(["metric", "seed"])["value"].sort_index()


def test_killed_training_resumes_to_identical_scores(tmp_path):
    uninterrupted = workflow(tmp_path / "a")
    run_snakemake(uninterrupted)

    killed = workflow(tmp_path / "b")
    checkpoint = killed / RUN / "checkpoint" / "checkpoint.pt"
    process = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1"], cwd=killed, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # a few more checkpoints: the kill lands mid-training, between two of them
    assert process.poll() is None, "the training finished before it could be killed; make it longer"
    os.killpg(process.pid, signal.SIGKILL)  # Snakemake and its job, as a scheduler's kill would
    process.wait()
    assert checkpoint.exists() and not (killed / RUN / "output.h5ad").exists()

    run_snakemake(killed, "--unlock")  # the killed Snakemake left its lock behind
    run_snakemake(killed)
    log = (killed / "results/logs/run_method/bm_small/celltreeqm/supervised/seed0.log").read_text()
    assert "resuming from checkpoint at step" in log
    pd.testing.assert_series_equal(scores(killed), scores(uninterrupted))
    assert not checkpoint.parent.exists()  # removed once the run's outputs are written
