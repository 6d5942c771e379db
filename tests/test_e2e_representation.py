"""End to end, representation track: pbmc68k_batched → gene table → sciLaMA and baselines → scIB scores.

The gene table comes from a `file` entry the test writes (a seeded parquet under the id go_text), so
the test needs neither the Debian annotation download nor the text model (both have their own tests).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from celldag.plan import GENE_TABLE, RUN_RECORD, make_plan
from celldag.registry import load_config
from conftest import copy_workflow, dry_run_jobs, planned_run, run_snakemake

pytestmark = pytest.mark.e2e

METHODS = ["scilama/text", "scilama/random", "scilama/cell_only", "pca", "genept_w", "scvi/batch"]
CONFIG = {
    "datasets": ["pbmc68k_batched"],
    "methods": METHODS,
    "seeds": [0, 1],
    "method_params": {"scilama": {"hidden_dims": [32, 16], "gene_hidden_dims": [32, 16], "latent_dim": 8,
                                  "max_epochs": 8, "kl_warmup_epochs": 2, "kl_ramp_epochs": 2, "patience": 3}},
    "evaluation": {"paired": [{"method": "scilama/text", "against": ["scilama/random"], "metrics": ["total", "marker_db"]}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    import scanpy as sc

    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"))
    genes = list(sc.datasets.pbmc68k_reduced().raw.var_names)[:700]  # 65 genes get no vector
    vectors = np.random.default_rng(0).normal(size=(len(genes), 16)).astype(np.float32)
    pd.DataFrame({"gene_id": genes, "embedding": list(vectors)}).to_parquet(workdir / "static.parquet")
    embeddings = yaml.safe_load((workdir / "config/embeddings.yaml").read_text())
    embeddings |= {"go_text": {"provider": "celldag.embeddings.providers:from_file", "description": "test table", "license": "generated",
                              "params": {"format": "parquet"},
                              "files": [{"role": "table", "name": "static.parquet", "path": "static.parquet"}]}}  # fmt: skip
    (workdir / "config/embeddings.yaml").write_text(yaml.safe_dump(embeddings))
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(CONFIG))
    listed = dry_run_jobs(workdir)
    run_snakemake(workdir)
    return workdir, listed


def test_dry_run_lists_the_planned_jobs(finished_run):
    workdir, listed = finished_run
    config, registries = load_config(yaml.safe_load(yaml.safe_dump(CONFIG)), "config.yaml", root=workdir)
    assert listed == dict(make_plan(config, registries).jobs_per_rule())
    assert listed["embed_genes"] == 1 and listed["evaluate"] == 1 and listed["run_method"] == len(METHODS)  # each job runs both seeds


def test_scores_cover_every_run_and_mark_scvi_not_applicable(finished_run):
    workdir, _ = finished_run
    scores = pd.read_parquet(workdir / "results/default/scores.parquet")
    totals = scores[scores["metric"] == "total"]
    assert len(totals) == 2 * len(METHODS)
    scvi = totals[totals["method"] == "scvi"]
    assert set(scvi["status"]) == {"not_applicable"} and scvi["value"].isna().all()
    ok = scores[scores["status"] == "ok"]
    for metric in ("total", "bio_conservation", "batch_correction", "ilisi", "silhouette_batch", "nmi_kmeans"):
        values = ok.loc[ok["metric"] == metric, "value"]
        assert len(values) == 2 * (len(METHODS) - 1) and values.between(0, 1).all(), metric
    text = ok[(ok["method"] == "scilama") & (ok["variant"] == "text")]
    # contextual and static marker clustering, on the same marker genes, only where a static table exists
    assert {"marker_db", "marker_db_static", "marker_ch", "marker_ch_static"} <= set(text["metric"])
    cell_only = ok[(ok["method"] == "scilama") & (ok["variant"] == "cell_only")]
    assert "marker_db" not in set(cell_only["metric"])


def test_run_record_counts_genes_and_phases(finished_run):
    workdir, _ = finished_run
    run = planned_run(workdir, "pbmc68k_batched", "scilama", "text", 0)
    record = json.loads((workdir / run.path(RUN_RECORD)).read_text())
    assert record["method_facts"]["genes"] == {"n_modelled": 700, "n_without_embedding": 65}
    phases = record["method_facts"]["training"]["phases"]
    assert list(phases) == ["cell", "gene", "joint"] and all(p["epochs"] >= 1 and p["seconds"] > 0 for p in phases.values())
    assert any(path.endswith(run.path(GENE_TABLE, embedding="go_text")) for path in record["input_sha256"])


def test_leaderboard_reports_the_paired_difference(finished_run):
    workdir, _ = finished_run
    text = (workdir / "results/default/leaderboard.md").read_text()
    assert "## pbmc68k_batched (representation)" in text
    assert "| scilama/text − scilama/random | total |" in text
    assert "not_applicable" in text  # scvi's row says why it has no numbers
