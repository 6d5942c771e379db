"""End to end on real published data, a seeded subset of config/presets/real.yaml: a KP-Tracer tumour (every cell
a leaf of a barcode tree with polytomies) and CellBench's protocol shift (Ensembl ids mapped to symbols, the
annotation track chained), every dataset file through the download rule from a strict mirror of ../shared/realdata.

The gene table comes from a `file` entry keyed by org.Hs.eg.db's symbols (seeded vectors), so that the mapping runs
on the real database without the text model; org.Hs.eg.db itself is placed where its download lands.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sqlite3
from contextlib import closing

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, planned_run, run_snakemake

from celldag.plan import RUN_RECORD

pytestmark = pytest.mark.e2e

TUMOUR, CELLBENCH = "kptracer_3513_nt_t4", "cellbench_protocols"
LINEAGE = ["nj_raw", "celltreeqm/label_free", "celltreeqm/supervised"]  # supervised: no replicate pair here
REPRESENTATION = ["pca", "genept_w"]
POLYTOMY_METRICS = ("resolved_quartet_dist", "resolved_quartet_contradicted", "split_recovery", "split_compatibility")
PROCEDURES = ("kandinsky_augmented", "kandinsky", "split_lac", "split_aps", "class_conditional", "mondrian_batch")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, realdata, org_db):
    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"))
    mirror = workdir / "mirror"  # only the published files: strict, so nothing else could come from anywhere
    shutil.copytree(realdata / "raw.githubusercontent.com", mirror / "raw.githubusercontent.com")
    with closing(sqlite3.connect(org_db)) as db:
        symbols = sorted({symbol for (symbol,) in db.execute("SELECT symbol FROM gene_info")})
    vectors = np.random.default_rng(0).normal(size=(len(symbols), 8)).astype(np.float32)
    pd.DataFrame({"gene_id": symbols, "embedding": list(vectors)}).to_parquet(workdir / "static.parquet")
    embeddings = yaml.safe_load((workdir / "config/embeddings.yaml").read_text())
    embeddings["go_text"] = {
        "provider": "celldag.embeddings.providers:from_file",
        "description": "test table",
        "license": "generated",
        "params": {"format": "parquet"},
        "files": [{"role": "table", "name": "static.parquet", "path": "static.parquet"}],
    }
    (workdir / "config/embeddings.yaml").write_text(yaml.safe_dump(embeddings))
    (workdir / "resources/embeddings").mkdir(parents=True)
    shutil.copy(org_db, workdir / "resources/embeddings/org.Hs.eg.sqlite")  # where go_svd's download lands
    config = {
        "name": "real",
        "datasets": [TUMOUR, CELLBENCH],
        "methods": [*LINEAGE, *REPRESENTATION, "knn"],
        "seeds": [0],
        "method_params": {"celltreeqm": {"steps": 30, "validate_every": 10}},
        "downloads": {"mirror": str(mirror), "strict": True},
    }
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workdir)
    return workdir, pd.read_parquet(workdir / "results/real/scores.parquet")


def test_every_dataset_file_is_the_published_bytes(finished_run, realdata):
    workdir, _ = finished_run
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    for dataset in (TUMOUR, CELLBENCH):
        for file in datasets[dataset]["files"]:
            data = (workdir / "resources" / dataset / file["name"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == file["sha256"], file["name"]


def test_every_run_is_ok_or_not_applicable_with_a_reason(finished_run):
    workdir, scores = finished_run
    runs = pd.read_parquet(workdir / "results/real/runs.parquet")
    assert set(runs["status"]) <= {"ok", "not_applicable"} and set(scores["status"]) <= {"ok", "not_applicable"}
    supervised = runs[(runs["method"] == "celltreeqm") & (runs["variant"] == "supervised")]
    assert list(supervised["status"]) == ["not_applicable"]
    assert "replicate" in supervised["status_reason"].iloc[0]


def test_the_tumour_is_scored_over_what_its_barcode_tree_resolves(finished_run):
    _, scores = finished_run
    lineage = scores[(scores["dataset"] == TUMOUR) & (scores["status"] == "ok")]
    for method, variant in (("nj_raw", "default"), ("celltreeqm", "label_free")):
        values = lineage[(lineage["method"] == method) & (lineage["variant"] == variant)].set_index("metric")["value"]
        assert all(math.isfinite(values[metric]) for metric in ("rf", "quartet_dist", *POLYTOMY_METRICS)), method
        # a binary estimate leaves no quartet unresolved: both resolved-quartet scores are the same count
        assert values["resolved_quartet_dist"] == pytest.approx(values["resolved_quartet_contradicted"], abs=1e-12)
        # the stars of the barcode tree count against quartet_dist only: the resolved share scores better
        assert values["resolved_quartet_dist"] < values["quartet_dist"]
        # single cells against barcodes: a method recovers few of the tree's splits (docs/real-data.md)
        assert 0 <= values["split_recovery"] < 0.2 and 0 <= values["split_compatibility"] <= 1
        assert values["rf"] > 0.95  # why RF says little here


def test_ensembl_ids_reach_the_gene_table_as_symbols_and_the_counts_reach_the_leaderboard(finished_run):
    workdir, scores = finished_run
    record = json.loads(
        (workdir / planned_run(workdir, CELLBENCH, "genept_w", "default", 0).path(RUN_RECORD)).read_text()
    )
    mapping = record["method_facts"]["gene_id_mapping"]
    assert (
        mapping["n_ids"] == 2000 and mapping["n_symbols"] + mapping["n_without_symbol"] + mapping["n_ambiguous"] == 2000
    )
    assert (
        mapping["n_symbols"] > 1700
    )  # the preset: 1,806 of CellBench protocols' 2,000 HVGs map one to one (docs/real-data.md)
    assert record["method_facts"]["genes"]["n_modelled"] == mapping["n_symbols"]
    text = (workdir / "results/real/leaderboard.md").read_text()
    assert f"genes: 2,000 Ensembl ids → {mapping['n_symbols']:,} symbols" in text
    totals = scores[(scores["dataset"] == CELLBENCH) & (scores["metric"] == "total")]
    assert set(totals["status"]) == {"ok"} and len(totals) == len(REPRESENTATION)


def test_the_protocol_shift_scores_every_conformal_procedure(finished_run):
    _, scores = finished_run
    annotation = scores[(scores["dataset"] == CELLBENCH) & (scores["track"] == "annotation")]
    assert set(annotation["status"]) == {"ok"}
    for procedure in PROCEDURES:
        for metric in (f"{procedure}_coverage", f"{procedure}_new_batch_coverage"):
            values = annotation.loc[annotation["metric"] == metric, "value"]
            assert len(values) == len(REPRESENTATION) and values.between(0.5, 1).all(), metric
