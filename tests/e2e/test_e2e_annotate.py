"""End to end, a lab's own cells: config `annotate` names a registry dataset and the lab's h5ad; the annotate_query
rule prepares the reference like any dataset and writes the query's sets, calls and shift verdicts."""

from __future__ import annotations

import anndata
import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import copy_workflow, run_snakemake

pytestmark = pytest.mark.e2e


def lab_query(path):
    """200 cells of pbmc68k_reduced's log-normalised values in two samples; the second with added noise."""
    import scanpy as sc

    source = sc.datasets.pbmc68k_reduced()
    values = np.asarray(source.raw.X.toarray() if hasattr(source.raw.X, "toarray") else source.raw.X)[:200].copy()
    noisy = np.random.default_rng(0).exponential(1.5, size=(100, values.shape[1]))
    values[100:] += noisy
    obs = pd.DataFrame({"sample": ["clean"] * 100 + ["noisy"] * 100}, index=source.obs_names[:200])
    anndata.AnnData(X=values.astype(np.float32), obs=obs, var=pd.DataFrame(index=source.raw.var_names)).write_h5ad(path)


def test_a_labs_query_is_annotated_by_the_workflow_and_bad_settings_stop_it_before_any_job(tmp_path):
    workdir = copy_workflow(tmp_path / "workflow")
    lab_query(workdir / "lab.h5ad")
    config = {"name": "lab", "datasets": ["pbmc68k_batched"], "methods": ["pca"], "seeds": [0],
              "annotate": {"pbmc_lab": {"reference": "pbmc68k_batched", "query": "lab.h5ad", "batch_key": "sample",
                                        "classifier": "knn"}}}  # fmt: skip
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "results/lab/annotate/pbmc_lab")
    out = workdir / "results/lab/annotate/pbmc_lab"
    assert sorted(p.name for p in out.iterdir() if p.name != ".snakemake_timestamp") == [
        "annotated.h5ad", "batches.tsv", "cells.tsv", "report.md", "run.json"]  # fmt: skip
    batches = pd.read_csv(out / "batches.tsv", sep="\t").set_index("batch")
    assert batches.loc["noisy", "verdict"].startswith("shifted")
    assert batches.loc["clean", "verdict"].startswith("no shift detected")
    annotated = anndata.read_h5ad(out / "annotated.h5ad")
    assert annotated.n_obs == 200 and annotated.obs["celldag_set_size"].min() >= 0
    assert annotated.uns["celldag_annotate"]["request"]["classifier"] == "knn"

    config["annotate"]["pbmc_lab"]["classifier"] = "no_such_classifier"
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    failed = run_snakemake(workdir, "-n", "results/lab/annotate/pbmc_lab", check=False)
    assert failed.returncode != 0
    assert "--classifier 'no_such_classifier': not a method of the annotation track" in failed.stderr + failed.stdout
