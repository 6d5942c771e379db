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
    config = {
        "name": "lab",
        "datasets": ["pbmc68k_batched"],
        "methods": ["pca"],
        "seeds": [0],
        "annotate": {
            "pbmc_lab": {
                "reference": "pbmc68k_batched",
                "query": "lab.h5ad",
                "batch_key": "sample",
                "classifier": "knn",
            }
        },
    }
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "results/lab/annotate/pbmc_lab")
    out = workdir / "results/lab/annotate/pbmc_lab"
    assert sorted(p.name for p in out.iterdir() if p.name != ".snakemake_timestamp") == [
        "annotated.h5ad",
        "batches.tsv",
        "cells.tsv",
        "report.md",
        "run.json",
    ]
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


def test_a_query_naming_a_registry_model_reads_its_verified_download_from_a_strict_mirror(tmp_path):
    """config ``annotate`` with ``model: <id>`` (issue 52): the lab's own models registry names a CellTypist model by
    URL and sha256; download_file fetches it from the mirror alone (strict: the origin is never contacted) into
    resources/models/, and annotate_query calibrates it on the reference and reports CellTypist's own rules."""
    import scanpy as sc

    from celldag.annotation import celltypist as ct
    from celldag.artifacts import sha256_file
    from celldag.jobs.download import mirror_path

    workdir = copy_workflow(tmp_path / "workflow")
    lab_query(workdir / "lab.h5ad")
    source = sc.datasets.pbmc68k_reduced()  # the model's own cells: log-normalised genes, bulk_labels
    url = "https://models.example.org/lab/lab_pbmc.pkl"
    served = tmp_path / "mirror" / mirror_path(url)
    served.parent.mkdir(parents=True)
    values = np.asarray(source.raw.X.toarray() if hasattr(source.raw.X, "toarray") else source.raw.X)
    ct.write_model(
        ct.train(values, source.obs["bulk_labels"].astype(str).to_numpy(), list(source.raw.var_names)), served
    )
    models = {
        "lab_pbmc": {
            "classifier": "celltypist",
            "description": "the lab's PBMC model",
            "license": "CC0-1.0",
            "file": {"name": "lab_pbmc.pkl", "url": url, "sha256": sha256_file(served)},
        }
    }
    (workdir / "lab_models.yaml").write_text(yaml.safe_dump(models))
    config = {
        "name": "lab",
        "datasets": ["pbmc68k_batched"],
        "methods": ["pca"],
        "seeds": [0],
        "registries": {"models": ["lab_models.yaml"]},
        "downloads": {"mirror": str(tmp_path / "mirror"), "strict": True},
        "annotate": {
            "pbmc_lab": {
                "reference": "pbmc68k_batched",
                "query": "lab.h5ad",
                "batch_key": "sample",
                "model": "lab_pbmc",
            }
        },
    }
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "results/lab/annotate/pbmc_lab")
    assert sha256_file(workdir / "resources/models/lab_pbmc.pkl") == sha256_file(served)
    out = workdir / "results/lab/annotate/pbmc_lab"
    cells = pd.read_csv(out / "cells.tsv", sep="\t", index_col="cell", keep_default_na=False)
    assert {"celltypist_best_match", "celltypist_prob_match"} <= set(cells.columns) and len(cells) == 200
    assert sha256_file(served) in (out / "run.json").read_text()  # the model's digest is on the record
