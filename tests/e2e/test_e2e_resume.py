"""Training jobs killed with SIGKILL resume from their checkpoints and end exactly where an uninterrupted run ends.

Each test copies the workflow into a temp dir, starts Snakemake on one core, SIGKILLs its whole process
group (Snakemake and its job, as a scheduler's kill or a node failure would) once the job has written a
checkpoint, unlocks, reruns, and compares with a run of the same config that was never interrupted:

* CellTreeQM (lineage track, the whole DAG down to ``results/default/scores.parquet``): besides the resume
  itself, the rerun after the kill recomputes exactly the killed job. ``nj_raw`` on the same prepared
  dataset finished before the kill; Snakemake's plan for the rerun holds only the killed ``run_method``
  job and the jobs downstream of it, and every file that existed before the rerun, except the killed
  job's checkpoints and log, is left untouched. So the rerun trusts what the killed Snakemake recorded
  as finished and never reuses what it did not (here its outputs were not written yet; a job killed
  after writing them is redone through ``rerun-incomplete`` in profiles/default).
* sciLaMA (representation track, variant ``self_informed``: the gene VAE reads Xᵀ of the training
  cells, so it needs no downloaded gene table), killed in phase 2 of its 3-phase schedule: the rerun
  reloads phase 1's finished checkpoints instead of training it again, resumes phase 2 mid-way and ends
  with bit-identical cell and gene embeddings. The test stops at the run's output.h5ad: scoring it would
  cost two scib-metrics start-ups (~90 s of compilation each), and the scores are a deterministic
  function of the embeddings it compares.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import TRACKS, copy_workflow, dry_run_jobs, planned_run, run_snakemake

from celldag.plan import PREPARED, RUN_DIR, RUN_LOG, RUN_OUTPUT, RUN_RECORD

pytestmark = pytest.mark.e2e


def start_then_kill(workdir: Path, checkpoint: Path, *args: str, settle: float) -> None:
    """Run Snakemake on one core; SIGKILL its process group ``settle`` s after ``checkpoint`` first appears."""
    with open(workdir / "killed-snakemake.log", "w") as output:  # outside results/: for diagnosing a failure
        process = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--cores", "1", *args],
            cwd=workdir,
            start_new_session=True,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 300
        while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(settle)  # the kill lands mid-training, between two checkpoints
        assert process.poll() is None, (
            f"Snakemake ended (rc {process.returncode}) before it could be killed; make the training longer:\n"
            + (workdir / "killed-snakemake.log").read_text()[-3000:]
        )
        os.killpg(process.pid, signal.SIGKILL)  # Snakemake and its job, as a scheduler's kill would
        process.wait()
    assert checkpoint.exists(), (workdir / "killed-snakemake.log").read_text()[-3000:]


def file_times(root: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in root.rglob("*") if path.is_file()}


def planned_outputs(workdir: Path) -> dict[str, set[str]]:
    """Output files per plan of ``snakemake --summary``: {"update pending": {...}, "no update": {...}}."""
    lines = run_snakemake(workdir, "--summary").stdout.splitlines()
    header = lines.index("output_file\tdate\trule\tlog-file(s)\tstatus\tplan")
    plans: dict[str, set[str]] = {}
    for line in lines[header + 1 :]:
        fields = line.split("\t")
        if len(fields) == 6:
            plans.setdefault(fields[5], set()).add(fields[0])
    return plans


# ---------------------------------------------------------------- CellTreeQM: resume + exactly the killed job


def lineage_workflow(workdir: Path) -> Path:
    copy_workflow(workdir)
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["bm_small"] = datasets["bm_default"] | {"params": {**datasets["bm_default"]["params"], "depth": 4}}
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    methods = yaml.safe_load((workdir / "config/methods.yaml").read_text())
    # device cpu: the resume is promised bit-identical on CPU (a GPU's kernels need not be)
    methods["celltreeqm"]["params"] |= {"steps": 400, "checkpoint_every": 10, "validate_every": 50, "device": "cpu"}
    (workdir / "config/methods.yaml").write_text(yaml.safe_dump(methods))
    config = {"datasets": ["bm_small"], "methods": ["nj_raw", "celltreeqm/supervised"], "seeds": [0]}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    return workdir


def scores(workdir: Path) -> pd.Series:
    table = pd.read_parquet(workdir / "results/default/scores.parquet")
    return table.set_index(["method", "variant", "metric", "seed"])["value"].sort_index()


def test_killed_training_resumes_to_identical_scores_and_only_the_killed_job_reruns(tmp_path):
    uninterrupted = lineage_workflow(tmp_path / "a")
    run_snakemake(uninterrupted)

    killed = lineage_workflow(tmp_path / "b")
    celltreeqm = planned_run(killed, "bm_small", "celltreeqm", "supervised", 0)
    nj_raw = planned_run(killed, "bm_small", "nj_raw", "default", 0)
    finished_first, prepared = nj_raw.path(RUN_OUTPUT), nj_raw.path(PREPARED)
    run_dir = killed / celltreeqm.path(RUN_DIR)
    # killed while training with validation on the simulator's validation replicate (the best step's weights,
    # the validation quartets' stream and the step stream all come back from the checkpoint)
    checkpoint = run_dir / "checkpoint" / "checkpoint.pt"
    # one core, nj_raw first: it has finished (and Snakemake recorded it) before CellTreeQM starts training
    start_then_kill(killed, checkpoint, "--prioritize", finished_first, settle=0.5)
    assert not (run_dir / "output.h5ad").exists() and (killed / finished_first).exists()

    run_snakemake(killed, "--unlock")  # the killed Snakemake left its lock behind
    # the plan: the killed job and what depends on it, nothing that had finished
    figures = [figure.name for figure in TRACKS["lineage"].figures]  # never drawn: Snakemake was killed first
    assert dry_run_jobs(killed) == {
        "run_method": 1,
        "evaluate": 1,
        "aggregate": 1,
        "report_html": 1,
        "all": 1,
        **{f"figure_lineage_{name}": 1 for name in figures},
    }
    plans = planned_outputs(killed)
    assert plans["update pending"] == {
        celltreeqm.path(RUN_OUTPUT),
        celltreeqm.path(RUN_RECORD),
        "results/default/scores/bm_small.parquet",
        "results/default/scores/bm_small.sha256.json",
        "results/default/scores.parquet",
        "results/default/runs.parquet",
        "results/default/floor_cards.parquet",
        "results/default/qc.parquet",
        "results/default/leaderboard.md",
        "results/default/index.html",
        "results/default/leaderboard.html",
        *(f"results/default/figures/bm_small/{name}.png" for name in figures),
    }
    assert {finished_first, prepared} <= plans["no update"]

    before = file_times(killed / "results")
    run_snakemake(killed)
    after = file_times(killed / "results")
    log_path = killed / celltreeqm.path(RUN_LOG)
    finished = {path: mtime for path, mtime in before.items() if not path.is_relative_to(run_dir) and path != log_path}
    assert killed / finished_first in finished and killed / prepared in finished
    assert {path: after.get(path) for path in finished} == finished  # not one byte of them rewritten

    log = log_path.read_text()
    assert "resuming from checkpoint at step" in log
    pd.testing.assert_series_equal(scores(killed), scores(uninterrupted))
    assert not checkpoint.parent.exists()  # removed once the run's outputs are written


# ---------------------------------------------------------------- sciLaMA: killed in phase 2 of 3

# 560 training cells / batch 64 = 9 steps per epoch; 2 KL warm-up epochs, then 58 validated epochs per phase
SCILAMA = {
    "hidden_dims": [32, 16],
    "gene_hidden_dims": [32, 16],
    "latent_dim": 8,
    "batch_size": 64,
    "max_epochs": 60,
    "kl_warmup_epochs": 1,
    "kl_ramp_epochs": 1,
    "patience": 60,
    "checkpoint_every": 1,
    "device": "cpu",  # the resume is promised bit-identical on CPU (a GPU's kernels need not be)
}


def representation_workflow(workdir: Path) -> Path:
    copy_workflow(workdir)
    config = {
        "datasets": ["pbmc68k_batched"],
        "methods": ["scilama/self_informed"],
        "seeds": [0],
        "method_params": {"scilama": SCILAMA},
    }
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    return workdir


def phase_facts(output) -> dict:
    return {
        phase: {key: value for key, value in facts.items() if key != "seconds"}
        for phase, facts in output.uns["training"]["phases"].items()
    }


def test_scilama_killed_in_phase_two_resumes_to_identical_embeddings(tmp_path):
    import anndata

    uninterrupted = representation_workflow(tmp_path / "a")
    run = planned_run(uninterrupted, "pbmc68k_batched", "scilama", "self_informed", 0)  # the same in both copies
    target = run.path(RUN_OUTPUT)
    run_snakemake(uninterrupted, target)

    killed = representation_workflow(tmp_path / "b")
    checkpoints = killed / run.path(RUN_DIR) / "checkpoint"
    # checkpoint/<segment>/: each phase trains a KL warm-up segment, then a validated one with early stopping
    start_then_kill(killed, checkpoints / "gene" / "checkpoint.pt", target, settle=0.3)
    assert not (killed / target).exists()

    run_snakemake(killed, "--unlock")
    run_snakemake(killed, target)
    log = (killed / run.path(RUN_LOG)).read_text()
    # phase 1 and phase 2's warm-up are reloaded, not trained again; phase 2 goes on from its last checkpoint
    for segment in ("cell_warmup", "cell", "gene_warmup"):
        assert re.search(
            rf"already finished at step \d+/\d+ \(checkpoint \S+/checkpoint/{segment}/checkpoint\.pt\)", log
        )
    assert re.search(r"resuming from checkpoint at step \d+/\d+ \(\S+/checkpoint/gene/checkpoint\.pt\)", log)

    resumed, reference = (anndata.read_h5ad(workdir / target) for workdir in (killed, uninterrupted))
    assert resumed.uns["status"] == reference.uns["status"] == "ok"
    assert np.array_equal(resumed.obsm["X_emb"], reference.obsm["X_emb"])
    assert list(resumed.var_names) == list(reference.var_names) and len(resumed.var_names) > 0
    assert np.array_equal(resumed.varm["X_gene_emb"], reference.varm["X_gene_emb"])
    # same epochs, best epochs and best validation losses per phase ("seconds" counts this process only)
    assert phase_facts(resumed) == phase_facts(reference) and set(phase_facts(reference)) == {"cell", "gene", "joint"}
    assert not checkpoints.exists()  # removed once the run's outputs are written
