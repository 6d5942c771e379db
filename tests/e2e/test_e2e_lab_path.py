"""Snakemake meets a lab dataset with a bad input, 3 seeds: the validate_dataset job before every preparation
shows its one-line error once, Snakemake's retry (meant for jobs out of memory) exits at once instead of
doing the work again, and no seed is prepared."""

from __future__ import annotations

import pytest
import yaml
from conftest import copy_workflow, planned_run, run_snakemake
from lab_data import lab_dataset, leaves

from celldag.jobs.joblog import NOT_RETRIED

pytestmark = pytest.mark.e2e
SEEDS = [0, 1, 2]


def test_an_input_error_shows_once_per_job_and_its_retry_redoes_nothing(tmp_path):
    workdir = copy_workflow(tmp_path / "lab")
    profiles = leaves()  # z-scored-like values, registered with the default values: counts
    lab_dataset(workdir, "lab_lineage", profiles, values="counts")
    config = {"datasets": ["lab_lineage"], "methods": ["nj_raw"], "seeds": SEEDS}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, check=False)
    assert result.returncode != 0
    console = result.stdout + result.stderr
    line = (
        f"error: {workdir}/lab_lineage/cells.h5ad: X: negative counts (min {profiles.X.min():g}); "
        "set values: transformed for log-transformed or z-scored input"
    )
    assert console.count(line) == 1  # one validation job for the 3 seeds (was a line per seed's preparation)
    # Snakemake still retries the job, with twice the memory as for one killed for memory ...
    assert console.count("Trying to restart job") == 1
    assert console.count("mem_mb=16000") == 1
    # ... and the retry only writes the line to its log
    data_key = planned_run(workdir, "lab_lineage", "nj_raw", "default", 0).data_key
    log = workdir / f"results/logs/validate_dataset/lab_lineage/{data_key}.log"
    assert log.read_text() == f"{line}\n{NOT_RETRIED}\n"
    assert not (workdir / f"results/data/lab_lineage/{data_key}").exists()  # no report, no prepared seed
    assert "rule prepare_dataset" not in console and "rule run_method" not in console
