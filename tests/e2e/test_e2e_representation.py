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
from conftest import copy_workflow, dry_run_jobs, planned_run, run_snakemake

from celldag.plan import GENE_TABLE, RUN_RECORD, make_plan
from celldag.registry import load_config

pytestmark = pytest.mark.e2e

METHODS = ["scilama/text", "scilama/random", "scilama/cell_only", "pca", "genept_w", "scvi/batch"]
CLASSIFIERS = ["knn", "logistic"]  # the annotation track, chained on every representation run (docs/annotation.md)
CONFIG = {
    "datasets": ["pbmc68k_batched"],
    "methods": METHODS + CLASSIFIERS,
    "seeds": [0, 1],
    "method_params": {
        "scilama": {
            "hidden_dims": [32, 16],
            "gene_hidden_dims": [32, 16],
            "latent_dim": 8,
            "max_epochs": 8,
            "kl_warmup_epochs": 2,
            "kl_ramp_epochs": 2,
            "patience": 3,
        }
    },
    "evaluation": {
        "paired": [{"method": "scilama/text", "against": ["scilama/random"], "metrics": ["total", "marker_db"]}]
    },
}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    import scanpy as sc

    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"))
    genes = list(sc.datasets.pbmc68k_reduced().raw.var_names)[:700]  # 65 genes get no vector
    vectors = np.random.default_rng(0).normal(size=(len(genes), 16)).astype(np.float32)
    pd.DataFrame({"gene_id": genes, "embedding": list(vectors)}).to_parquet(workdir / "static.parquet")
    embeddings = yaml.safe_load((workdir / "config/embeddings.yaml").read_text())
    embeddings |= {
        "go_text": {
            "provider": "celldag.embeddings.providers:from_file",
            "description": "test table",
            "license": "generated",
            "params": {"format": "parquet"},
            "files": [{"role": "table", "name": "static.parquet", "path": "static.parquet"}],
        }
    }
    (workdir / "config/embeddings.yaml").write_text(yaml.safe_dump(embeddings))
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(CONFIG))
    listed = dry_run_jobs(workdir)
    run_snakemake(workdir)
    return workdir, listed


def test_dry_run_lists_the_planned_jobs(finished_run):
    workdir, listed = finished_run
    config, registries = load_config(yaml.safe_load(yaml.safe_dump(CONFIG)), "config.yaml", root=workdir)
    assert listed == dict(make_plan(config, registries).jobs_per_rule())
    assert (
        listed["embed_genes"] == 1 and listed["evaluate"] == 1 and listed["run_method"] == len(METHODS)
    )  # each job runs both seeds


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
    assert list(phases) == ["cell", "gene", "joint"] and all(
        p["epochs"] >= 1 and p["seconds"] > 0 for p in phases.values()
    )
    assert any(path.endswith(run.path(GENE_TABLE, embedding="go_text")) for path in record["input_sha256"])


def test_leaderboard_reports_the_paired_difference(finished_run):
    workdir, _ = finished_run
    text = (workdir / "results/default/leaderboard.md").read_text()
    assert "## pbmc68k_batched (representation)" in text
    assert "| scilama/text − scilama/random | total |" in text
    assert "not_applicable" in text  # scvi's row says why it has no numbers


def test_annotation_runs_every_classifier_on_every_representation_run(finished_run):
    workdir, listed = finished_run
    assert (listed["annotation_task"], listed["run_annotation"], listed["evaluate_annotation"]) == (1, len(METHODS), 1)
    scores = pd.read_parquet(workdir / "results/default/scores.parquet")
    accuracy = scores[(scores["track"] == "annotation") & (scores["metric"] == "accuracy")]
    upstream = {f"{m}/default" if "/" not in m else m for m in METHODS}
    assert set(zip(accuracy["method"], accuracy["variant"], accuracy["seed"])) == {
        (classifier, run, seed) for classifier in CLASSIFIERS for run in upstream for seed in (0, 1)
    }
    scvi = accuracy[accuracy["variant"] == "scvi/batch"]
    assert set(scvi["status"]) == {"not_applicable"}  # chains on a run that is not_applicable
    ok = accuracy[accuracy["status"] == "ok"]
    assert len(ok) == 2 * 2 * (len(METHODS) - 1) and ok["value"].between(0.3, 1).all()
    coverage = scores[
        (scores["track"] == "annotation") & (scores["metric"] == "split_lac_coverage") & (scores["status"] == "ok")
    ]
    assert coverage["value"].between(0.75, 1).all()  # 1 − α = 0.9 on ~175 query cells


def test_annotation_section_figures_and_records(finished_run):
    from celldag.plan import CHAINED_INPUT, CHAINED_RECORD

    workdir, _ = finished_run
    text = (workdir / "results/default/leaderboard.md").read_text()
    section = text[text.index("## pbmc68k_batched (annotation)") :]
    # the headline's set columns without its prefix (celldag.report.leaderboard.group_layout)
    assert "| classifier | embedding | accuracy ↑ | macro_f1 ↑ | coverage ↑ | worst_batch ↑" in section
    # pbmc68k's rarest types have 3 and 6 calibration cells (< 1/α − 1 = 9): named under the section, counted
    assert "too few to calibrate at α = 0.1" in section and "type CD34+" in section
    # the headline fit drops the design groups its calibration set cannot size and counts its unverified programs
    # (named above the main table, in index.html's folded full table)
    assert "`kandinsky_augmented_dropped_groups`, `kandinsky_augmented_unverified`." in section
    controls = section[section.index("Controls") : section.index("###")]
    assert (
        "| knn | scilama/random |" in controls and "| knn | pca/default |" not in controls
    )  # the control carries through
    for figure in ("coverage", "set_size"):
        assert (workdir / f"results/default/figures/pbmc68k_batched/{figure}.png").stat().st_size > 10_000
    html = (workdir / "results/default/index.html").read_text()
    assert "<th>kandinsky_augmented_dropped_groups ↓</th><th>kandinsky_augmented_unverified ↓</th>" in html
    # the annotation figures under the annotation section, the representation ones under theirs
    assert (
        html.index('<h2 id="pbmc68k_batched">pbmc68k_batched (representation)')
        < html.index("figures/pbmc68k_batched/umap.png")
        < html.index('<h2 id="pbmc68k_batched-annotation">pbmc68k_batched (annotation)')
        < html.index("figures/pbmc68k_batched/coverage.png")
        < html.index('id="not-ok"')
    )
    assert html.count("figures/pbmc68k_batched/coverage.png") == 1
    config, registries = load_config(yaml.safe_load(yaml.safe_dump(CONFIG)), "config.yaml", root=workdir)
    run = next(
        r for r in make_plan(config, registries).chained if r.chained_method == "knn" and r.label == "pca/default"
    )
    record = json.loads((workdir / run.path(CHAINED_RECORD)).read_text())
    assert record["variant"] == "pca/default" and record["dataset_facts"]["upstream"] == "pca/default"
    assert record["dataset_facts"]["transductive"] is True  # PCA is fitted on every cell, query cells included
    assert workdir.joinpath(run.path(CHAINED_INPUT)).as_posix() in {str(workdir / p) for p in record["input_sha256"]}


def test_audit_checks_annotation_records_and_scores(finished_run, monkeypatch, capsys):
    from celldag.cli import main

    workdir, _ = finished_run
    monkeypatch.chdir(workdir)
    status = main(["audit", "--sample", "0"])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0, "\n".join(lines)
    n_runs = 2 * len(METHODS) * (1 + len(CLASSIFIERS))
    assert (
        lines[-1].startswith(f"summary: {n_runs} run records, ") and ", 2 scores tables, 5 aggregate files" in lines[-1]
    )
