"""Cluster requests follow the data: memory and runtime from the prepared file's size (celldag.jobs.resources)."""

from __future__ import annotations

import subprocess
import sys

import anndata
import numpy as np
import pytest
import yaml
from conftest import REPO, copy_workflow, run_snakemake
from scipy import sparse

from celldag.jobs import resources

MODELS = yaml.safe_load((REPO / "config/resources.yaml").read_text())


def test_a_request_is_base_plus_slope_times_size_per_attempt_and_pass():
    lineage = MODELS["lineage"]
    assert resources.request(lineage, "run_method", 8192, attempt=1) == {"mem_mb": 7711, "runtime": 78}
    # 1000 + 1e-4 · 8192² = 7710.9 MB; 10 + 1e-6 · 8192² = 77.1 min; a retry doubles both, three seeds triple the slope
    assert resources.request(lineage, "run_method", 8192, attempt=2) == {"mem_mb": 15422, "runtime": 155}
    assert resources.request(lineage, "run_method", 8192, attempt=1, repeats=3)["runtime"] == 212
    # the default run's jobs ask for far less than the fixed 4,000 MB of before; a 100,000-cell one for more
    assert resources.request(lineage, "run_method", 64, attempt=1)["mem_mb"] == 1001
    assert resources.request(MODELS["representation"], "run_method", 700, 1)["mem_mb"] == 2028
    assert resources.request(MODELS["representation"], "run_method", 100_000, 1)["mem_mb"] == 6000


PAPER = yaml.safe_load((REPO / "config/presets/paper.yaml").read_text())["method_params"]


def test_a_gpu_training_job_asks_for_cudas_host_memory_and_time_for_its_steps_at_its_width():
    """The paper preset's CellTreeQM (900 steps, selection auto: up to two fits) on 295 leaves and its sciLaMA
    (500 epochs × 3 phases) on 15,000 cells, five seeds a job, by hand from config/resources.yaml."""
    celltreeqm = {
        **yaml.safe_load((REPO / "config/methods.yaml").read_text())["celltreeqm"]["params"],
        **PAPER["celltreeqm"],
    }
    assert resources.training_steps(celltreeqm, 295) == 1800
    # 1000 + 1e-4 · 295² + 3000 MB; 10 + 5 seeds · 1,800 steps · 50 ms = 17.5 min
    assert resources.gpu_request(MODELS["lineage"], celltreeqm, 295, 1, repeats=5) == {"mem_mb": 4009, "runtime": 18}
    assert resources.gpu_request(MODELS["lineage"], celltreeqm, 295, 2, repeats=5) == {"mem_mb": 8018, "runtime": 35}
    # four times the paper's width: a step bounded at four times the time; no refit: half the steps
    wide = celltreeqm | {"hidden_dim": 4096, "selection": "none"}
    assert (
        resources.gpu_request(MODELS["lineage"], wide, 295, 1, repeats=5)["runtime"] == 10 + 15
    )  # 5 · 900 · 50 ms · 4
    scilama = {"mode": "stepwise", "use_gene_vae": True, **PAPER["scilama"]}
    assert resources.training_steps(scilama, 15_000) == 500 * 3 * 118
    # 2000 + 0.04 · 15,000 + 3000 MB; 30 + 5 · 177,000 · 20 ms = 325 min; the CPU model asked 75 min
    assert resources.gpu_request(MODELS["representation"], scilama, 15_000, 1, 5) == {"mem_mb": 5600, "runtime": 325}
    assert resources.request(MODELS["representation"], "run_method", 15_000, 1, 5)["runtime"] == 75
    assert resources.training_steps(scilama | {"use_gene_vae": False}, 15_000) == 500 * 118
    # scVI's max_epochs null is scvi-tools' rule: 400 epochs up to 20,000 cells, fewer above
    assert resources.training_steps({"max_epochs": None, "batch_size": 128}, 700) == 400 * 6
    assert resources.training_steps({"max_epochs": None, "batch_size": 128}, 80_000) == 100 * 625
    assert resources.model_width({"n_hidden": 128, "hidden_dims": [900, 400]}, ["hidden_dims", "n_hidden"]) == 900


def test_a_gpu_job_of_a_method_that_names_neither_steps_nor_epochs_keeps_the_cpu_runtime():
    lab = {"device": "cuda", "iterations": 10}
    assert resources.training_steps(lab, 500) is None
    cpu = resources.request(MODELS["lineage"], "run_method", 500, 1, 3)
    assert resources.gpu_request(MODELS["lineage"], lab, 500, 1, 3) == {
        "mem_mb": cpu["mem_mb"] + 3000,
        "runtime": cpu["runtime"],
    }


def test_every_shipped_track_has_a_model_for_each_sized_rule():
    tracks = yaml.safe_load((REPO / "config/tracks.yaml").read_text())
    for track in [*tracks, "default"]:
        model = MODELS[track]
        assert model["unit"] in resources.UNITS
        for rule in ("run_method", "evaluate"):
            assert set(model[rule]) == {"mem_mb", "runtime"} and all(len(pair) == 2 for pair in model[rule].values())


def test_rows_come_from_the_header_of_dense_and_sparse_files_and_a_missing_file_is_named(tmp_path):
    anndata.AnnData(X=np.zeros((12, 3))).write_h5ad(tmp_path / "dense.h5ad")
    anndata.AnnData(X=sparse.random(40, 5, density=0.2, format="csr")).write_h5ad(tmp_path / "sparse.h5ad")
    assert resources.prepared_rows(str(tmp_path / "dense.h5ad")) == 12
    assert resources.largest([str(tmp_path / "dense.h5ad"), str(tmp_path / "sparse.h5ad")]) == 40
    # Snakemake shows <TBD> for a resource whose input does not exist yet, if the error names that file
    with pytest.raises(FileNotFoundError) as missing:
        resources.prepared_rows(str(tmp_path / "later.h5ad"))
    assert missing.value.filename == str(tmp_path / "later.h5ad")


def job_resources(log: str, rule: str) -> list[dict[str, str]]:
    """The resources line of every job of ``rule`` in Snakemake's log."""
    found, lines = [], log.splitlines()
    for index, line in enumerate(lines):
        if line.strip() in (f"rule {rule}:", f"localrule {rule}:"):
            block = next(text for text in lines[index + 1 :] if text.strip().startswith("resources:"))
            found.append(dict(item.split("=") for item in block.split(":", 1)[1].strip().split(", ")))
    return found


@pytest.mark.slow
def test_the_jobs_of_a_larger_dataset_ask_for_more(tmp_path):
    workdir = copy_workflow(tmp_path / "run")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    small = {**datasets["bm_default"]["params"], "depth": 4, "count_depth": None}
    datasets |= {
        "bm_16": datasets["bm_default"] | {"params": small},
        "bm_512": datasets["bm_default"] | {"params": small | {"depth": 9}},
    }
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    config = {"datasets": ["bm_16", "bm_512"], "methods": ["nj_raw"], "seeds": [0]}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    log = run_snakemake(workdir, "results/default/scores.parquet").stderr
    requested = sorted((int(r["mem_mb"]), int(r["runtime"])) for r in job_resources(log, "run_method"))
    assert requested == [(1001, 11), (1027, 11)]  # 1000 + 1e-4 · 16² and · 512²; 10 + 1e-6 · n² minutes
    assert sorted(int(r["mem_mb"]) for r in job_resources(log, "evaluate")) == [1001, 1008]
    # every heavy job leaves Snakemake's benchmark beside its log: `celldag resources` sets use beside request
    jobs = resources.measured(str(workdir / "results"), MODELS)
    assert sorted((job["rule"], job["dataset"], job["rows"], job["requested_mb"]) for job in jobs) == [
        ("evaluate", "bm_16", 16, 1001),
        ("evaluate", "bm_512", 512, 1008),
        ("prepare_dataset", "bm_16", 16, None),
        ("prepare_dataset", "bm_512", 512, None),
        ("run_method", "bm_16", 16, 1001),
        ("run_method", "bm_512", 512, 1027),
    ]
    assert all(0 < job["max_rss_mb"] < job["requested_mb"] for job in jobs if job["requested_mb"])
    # exact peaks: run records for training jobs, the log's last line (VmHWM) for the others
    assert all(job["exact_peak"] for job in jobs)
    evaluate_log = (workdir / "results/logs/evaluate/default/bm_512.log").read_text().splitlines()
    assert evaluate_log[-1].startswith("job ended: wall ") and evaluate_log[-1].endswith(" MB")
    printed = subprocess.run(
        [sys.executable, "-m", "celldag.cli", "resources", "--workflow", str(workdir)],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "| run_method | bm_512/nj_raw/default/" in printed and "| 512 |" in printed
