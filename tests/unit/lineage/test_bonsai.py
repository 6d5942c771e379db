"""Bonsai (bonsai-rs) as a lineage baseline: the raw-count input of the lineage track (simulated, a lab's
h5ad), the tree it recovers, and not_applicable where a dataset has no counts."""

from __future__ import annotations

import json

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import REPO, TRACKS
from scipy import sparse

from celldag.data.bm import prepare_bm_simulator
from celldag.data.h5ad import prepare_lineage_h5ad
from celldag.jobs.prepare import write_prepared_dataset
from celldag.jobs.runner import run_method
from celldag.lineage.metrics import robinson_foulds
from celldag.lineage.track import check_prepared, method_input
from celldag.lineage.tree import parse_newick
from celldag.methods.bonsai import run
from celldag.registry import apply_schema, read_yaml

BONSAI = apply_schema({"bonsai": read_yaml(REPO / "config/methods.yaml")["bonsai"]}, "methods", "methods.yaml")[
    "bonsai"
]
EASY = {
    "depth": 4,
    "n_signal": 60,
    "n_noise": 0,
    "n_spurious": 0,
    "max_walk": 3.0,
    "noise_std": 1.0,
    "measurement_std": 0.3,
    "count_depth": 50000,
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bonsai_recovers_a_small_simulated_count_tree(seed):
    """16 leaves, strong signal, 50,000 counts per leaf: measured RF 0.0, 0.0, 0.077 for seeds 1-3."""
    prepared = prepare_bm_simulator("bm", EASY, seed, {})
    result = run(method_input(prepared, None), BONSAI["params"], seed)
    rf = robinson_foulds(parse_newick(prepared.uns["tree_newick"]), parse_newick(result.tree_newick))
    assert rf.normalized <= 0.16  # at most 2 of the 13 splits of a 16-leaf binary tree wrong
    assert result.embedding.shape[0] == 16 and result.uns["bonsai"]["genes_kept"] > 0
    assert (
        run(method_input(prepared, None), BONSAI["params"], seed + 10).tree_newick == result.tree_newick
    )  # seed unused


def test_simulated_counts_leave_the_features_as_they_were():
    without = prepare_bm_simulator("bm", {k: v for k, v in EASY.items() if k != "count_depth"}, 0, {})
    with_counts = prepare_bm_simulator("bm", EASY, 0, {})
    for layer in ("train", "test"):
        np.testing.assert_array_equal(without.layers[layer], with_counts.layers[layer])
    counts = with_counts.layers["counts"]
    assert "counts" not in without.layers and counts.shape == without.shape
    assert (counts == np.round(counts)).all() and abs(counts.sum(axis=1).mean() / 50000 - 1) < 0.01
    np.testing.assert_array_equal(with_counts.obs["count_total"], counts.sum(axis=1))
    check_prepared(with_counts, "bm.h5ad")


def test_a_labs_count_h5ad_gives_each_leafs_scored_cells_summed(tmp_path):
    rng = np.random.default_rng(0)
    leaves = [f"L{i}" for i in range(6)]
    counts = rng.poisson(3.0, size=(36, 8)).astype(np.float64)
    obs = pd.DataFrame({"leaf": np.repeat(leaves, 6)}, index=[f"c{i}" for i in range(36)])
    anndata.AnnData(sparse.csr_matrix(counts), obs=obs).write_h5ad(tmp_path / "cells.h5ad")
    (tmp_path / "tree.nwk").write_text("(((L0,L1),(L2,L3)),(L4,L5));")
    files = {"cells.h5ad": str(tmp_path / "cells.h5ad"), "tree.nwk": str(tmp_path / "tree.nwk")}
    params = {"file": "cells.h5ad", "leaf_key": "leaf", "newick": "tree.nwk", "replicates": True}
    prepared = prepare_lineage_h5ad("lab", params, 0, files)
    # the test half of each leaf (the replicate methods are scored on), summed over its cells
    from celldag.data.leaf_profiles import split_halves

    _, test_cells = split_halves(obs["leaf"].to_numpy(), leaves, 0)
    expected = np.array([counts[cells].sum(axis=0) for cells in test_cells])
    kept = [int(name) for name in prepared.var_names]  # features that vary across the training leaves
    np.testing.assert_array_equal(prepared.layers["counts"], expected[:, kept])
    np.testing.assert_array_equal(prepared.obs["count_total"], expected.sum(axis=1))
    transformed = prepare_lineage_h5ad("lab", params | {"values": "transformed"}, 0, files)
    assert "counts" not in transformed.layers  # transformed values are no counts


def test_bonsai_is_not_applicable_without_counts(tmp_path):
    dataset = {
        "track": "lineage",
        "loader": "celldag.data.bm:prepare_bm_simulator",
        "source": "builtin",
        "params": {k: v for k, v in EASY.items() if k != "count_depth"},
    }
    write_prepared_dataset("bm_t", dataset, TRACKS["lineage"], 0, str(tmp_path / "prepared.h5ad"))
    status = run_method(
        prepared_path=str(tmp_path / "prepared.h5ad"),
        output_path=str(tmp_path / "run/output.h5ad"),
        record_path=str(tmp_path / "run/run.json"),
        dataset_id="bm_t",
        dataset_entry=dataset,
        method_id="bonsai",
        method_entry=BONSAI,
        variant="default",
        seed=0,
        track=TRACKS["lineage"],
    )
    assert status == "not_applicable"
    reason = json.loads((tmp_path / "run/run.json").read_text())["status_reason"]
    assert reason == "bonsai/default needs raw counts per leaf; this dataset has transformed values only"
