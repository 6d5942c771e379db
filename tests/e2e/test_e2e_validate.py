"""`celldag validate` on shipped and broken datasets, and a pipeline run that meets a broken lab dataset.

The broken copy is scanpy's bundled PBMC with five things wrong at once: validation lists all five;
Snakemake stops at the first, in the prepare job, with one line on the console and no traceback,
before any training job, leaving no prepared file behind.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, copy_workflow, planned_run, run_snakemake

pytestmark = pytest.mark.e2e
CELLDAG = str(Path(sys.executable).with_name("celldag"))


def validate(workdir: Path, *datasets: str) -> subprocess.CompletedProcess:
    return subprocess.run([CELLDAG, "validate", *datasets], cwd=workdir, capture_output=True, text=True, timeout=300)


def test_shipped_datasets_validate_with_their_reports():
    result = validate(REPO, "pbmc68k_batched", "cengen_neurons")
    assert result.returncode == 0, result.stderr
    report = result.stdout
    for line in (
        "dataset pbmc68k_batched (representation track)",
        "cells:                 700 (train 558, val 142)",
        "genes:                 765 (765 in the source)",
        "batches:               3: batch0 234, batch1 233, batch2 233",
        "input counts:          no (raw integer counts (layers['counts']))",
        "methods:               not_applicable: scvi/batch, scvi/no_batch",
        "marker genes:          14 of 17 in the data",
        "dataset cengen_neurons (lineage track)",
        "leaves:                101 (tree over the same leaves)",
        "features:              2000",
        "replicate pair:        no (one profile per leaf)",
        "input counts:          no (raw counts per leaf: the scored cells' UMI counts summed "
        "(layers['counts'], obs['count_total']))",
        "methods:               not_applicable: bonsai/default, celltreeqm/supervised, quadruplet/supervised, "
        "triplet/supervised",
    ):
        assert line in report
    assert report.count("no problems found") == 2


@pytest.fixture(scope="module")
def broken_workflow(tmp_path_factory) -> Path:
    """A workflow copy whose registry adds `lab_pbmc`: a local h5ad with five problems."""
    import scanpy as sc

    workdir = copy_workflow(tmp_path_factory.mktemp("broken"))
    source = sc.datasets.pbmc68k_reduced()
    adata = source.raw.to_adata()  # log-normalised values where the entry promises counts
    adata.obs = source.obs[["bulk_labels"]].copy()
    x = adata.X.toarray() if hasattr(adata.X, "toarray") else np.array(adata.X)
    x[0, 0] = np.nan
    adata.X = x
    adata.obs_names = [adata.obs_names[1], *adata.obs_names[1:]]  # a duplicated barcode
    adata.var_names = [adata.var_names[1], *adata.var_names[1:]]  # a duplicated gene
    adata.write_h5ad(workdir / "lab.h5ad")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["lab_pbmc"] = {
        "track": "representation",
        "source": "local",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "description": "a lab's PBMC, broken",
        "license": "test",
        "files": [{"name": "lab.h5ad", "path": "lab.h5ad"}],
        "params": {"file": "lab.h5ad", "label_key": "bulk_labels", "batch_key": "donor"},
    }
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    config = {"datasets": ["lab_pbmc"], "methods": ["pca"], "seeds": [0]}
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    return workdir


def test_validating_a_broken_copy_lists_every_problem(broken_workflow):
    result = validate(broken_workflow, "lab_pbmc")
    assert result.returncode == 1
    problems = [line.strip() for line in result.stdout.splitlines() if line.startswith("    - ")]
    assert problems == [
        "- lab.h5ad: obs_names: 1 duplicated cell ids (first: ['AAATTCGATGCACA-1'])",
        "- lab.h5ad: var_names: 1 duplicated gene names (first: ['TNFRSF4']); "
        "set duplicate_genes: make_unique to suffix them",
        "- lab.h5ad: obs['donor']: missing batch column (obs columns: ['bulk_labels'])",
        "- lab.h5ad: X: 1 NaN or infinite values",
    ]
    assert "4 problems:" in result.stdout


def test_pipeline_stops_at_the_validate_job_with_one_line(broken_workflow):
    result = run_snakemake(broken_workflow, check=False)
    assert result.returncode != 0
    console = result.stdout + result.stderr
    assert (
        "error: lab.h5ad: obs_names: 1 duplicated cell ids (first: ['AAATTCGATGCACA-1']) "
        "(and 3 more problems: `celldag validate lab_pbmc` lists them all)"
    ) in console
    assert "Traceback" not in console
    assert "rule prepare_dataset" not in console and "rule run_method" not in console  # nothing after validation
    assert not any(path.is_file() for path in (broken_workflow / "results/data/lab_pbmc").rglob("*"))
    data_key = planned_run(broken_workflow, "lab_pbmc", "pca", "default", 0).data_key
    log = (broken_workflow / f"results/logs/validate_dataset/lab_pbmc/{data_key}.log").read_text()
    assert log.startswith("error: lab.h5ad: obs_names: 1 duplicated cell ids")


def test_unknown_id_is_one_line_and_exit_2(broken_workflow):
    result = validate(broken_workflow, "lab_pbcm")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown dataset id 'lab_pbcm'; known ids: ")
    assert result.stderr.count("\n") == 1


def test_a_valid_lab_lineage_dataset_validates_and_runs(tmp_path):
    """cells × features with a clone column and a Newick file: validate says fine, the pipeline scores it."""
    import anndata
    import pandas as pd

    workdir = copy_workflow(tmp_path / "lab")
    rng = np.random.default_rng(0)
    leaves = [f"L{i}" for i in range(8)]
    profile = {leaf: rng.normal(size=20) * 3 for leaf in leaves}
    clone = np.repeat(leaves, 5)
    x = np.stack([np.exp(profile[leaf] / 3) * 5 for leaf in clone])
    cells = anndata.AnnData(
        X=rng.poisson(x).astype(np.float32),
        obs=pd.DataFrame({"clone": clone}, index=[f"c{i}" for i in range(clone.size)]),
    )
    cells.write_h5ad(workdir / "clones.h5ad")
    (workdir / "tree.nwk").write_text("(((L0,L1),(L2,L3)),((L4,L5),(L6,L7)));")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["lab_clones"] = {
        "track": "lineage",
        "source": "local",
        "loader": "celldag.data.h5ad:prepare_lineage_h5ad",
        "description": "clones",
        "license": "test",
        "files": [{"name": "clones.h5ad", "path": "clones.h5ad"}, {"name": "tree.nwk", "path": "tree.nwk"}],
        "params": {"file": "clones.h5ad", "leaf_key": "clone", "newick": "tree.nwk", "replicates": True},
    }
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    (workdir / "config/config.yaml").write_text(
        yaml.safe_dump({"datasets": ["lab_clones"], "methods": ["nj_raw"], "seeds": [0]})
    )
    result = validate(workdir, "lab_clones")
    assert result.returncode == 0, result.stdout
    assert "leaves:                8 (tree over the same leaves)" in result.stdout
    assert "replicate pair:        yes (train/test layers)" in result.stdout
    # validation_cells: auto (the default): every leaf has 2 training cells, so each gives one
    assert "validation replicate:  yes, 8 of 8 leaves (layer validation)" in result.stdout
    run_snakemake(workdir)
    scores = pd.read_parquet(workdir / "results/default/scores.parquet").set_index("metric")["value"]
    assert 0 <= scores["rf"] <= 1 and 0 <= scores["quartet_dist"] <= 1
