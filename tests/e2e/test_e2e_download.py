"""End to end through Snakemake: a url dataset is downloaded from 127.0.0.1, checksum-pinned, prepared, scored."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, dry_run_jobs, run_snakemake

from celldag.data.packer2019 import MATRIX
from celldag.plan import make_plan
from celldag.registry import load_config

pytestmark = pytest.mark.e2e


@pytest.fixture
def packer_workflow(tmp_path, geo):  # noqa: F811
    url, checksums, suppl = geo
    workdir = copy_workflow(tmp_path / "wf")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    entry = datasets["celegans_packer2019"]
    # the matrix keeps no sha256 (as GEO's: pinned on first fetch); the annotations get the real ones
    entry["files"] = [
        {"name": name, "url": f"{url}/{name}", "sha256": "pin-on-first-fetch" if name == MATRIX else checksums[name]}
        for name in checksums
    ]
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    config = {"datasets": ["celegans_packer2019"], "methods": ["nj_raw", "upgma_raw"], "seeds": [0]}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    return workdir, suppl, checksums


def test_download_pin_prepare_and_score(packer_workflow):
    workdir, suppl, checksums = packer_workflow
    config, registries = load_config(yaml.safe_load((workdir / "config/config.yaml").read_text()), "c", root=workdir)
    assert dry_run_jobs(workdir) == dict(make_plan(config, registries).jobs_per_rule())
    run_snakemake(workdir)
    pins = json.loads((workdir / "resources/celegans_packer2019/checksums.json").read_text())
    assert pins == {MATRIX: checksums[MATRIX]}
    scores = pd.read_parquet(workdir / "results/default/scores.parquet")
    assert set(scores["method"]) == {"nj_raw", "upgma_raw"} and (scores["status"] == "ok").all()
    assert "## celegans_packer2019 (lineage)" in (workdir / "results/default/leaderboard.md").read_text()

    # the publisher's file changes: a fresh fetch must fail against the pin, and nothing is left behind
    (suppl / MATRIX).write_bytes(gzip.compress(b"%%MatrixMarket matrix coordinate integer general\n1 1 0\n"))
    (workdir / "resources/celegans_packer2019" / MATRIX).unlink()
    result = run_snakemake(workdir, "--forceall", "--retries", "0", check=False)
    assert result.returncode != 0
    log = (workdir / f"results/logs/download/celegans_packer2019/{MATRIX}.log").read_text()
    assert "checksum mismatch" in log and checksums[MATRIX] in log
    assert not (workdir / "resources/celegans_packer2019" / MATRIX).exists()
