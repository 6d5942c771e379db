"""The generic loaders for a lab's .h5ad (h5ad, lineage_h5ad) on good input: what they compute."""

from __future__ import annotations

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS, check_prepared
from lab_data import cells_by_leaf, lineage_entry

from celldag.errors import InputError
from celldag.jobs.prepare import prepare_dataset
from celldag.lineage.tree import parse_newick


@pytest.mark.parametrize("standardize", [False, True])
def test_lineage_h5ad_pseudo_bulks_per_leaf_and_standardizes_only_when_asked(tmp_path, standardize):
    adata = cells_by_leaf(["A", "B", "C", "D"])
    params = {"leaf_key": "clone"} | ({"standardize": True} if standardize else {})  # default: false
    entry, files = lineage_entry(tmp_path, adata, "((A,B),(C,D));", **params)
    prepared = prepare_dataset("lab", entry, TRACKS[entry["track"]], 0, files)
    check_prepared(prepared, "prepared")
    prepared = prepared[["A", "B", "C", "D"]]  # rows come in a seeded order
    assert list(prepared.obs["n_cells"]) == [4, 4, 4, 4]
    expected = np.log1p(np.array([1.0, 2.0, 3.0, 4.0]))  # leaf means of feature 0, then log1p (counts)
    if standardize:
        expected = (expected - expected.mean()) / expected.std(ddof=1)
    np.testing.assert_allclose(prepared.X[:, 0], expected, rtol=1e-6)
    assert prepared.uns["standardized"] == standardize
    assert "train" not in prepared.layers
    assert set(parse_newick(prepared.uns["tree_newick"]).leaf_names) == {"A", "B", "C", "D"}


def test_lineage_h5ad_replicates_are_seeded_cell_halves(tmp_path):
    adata = cells_by_leaf(["A", "B", "C", "D", "E"], cells_per_leaf=6)
    # validation_cells 0: the halves as drawn
    # (a validation share: test_a_lab_lineage_gets_a_validation_replicate_by_default)
    entry, files = lineage_entry(
        tmp_path, adata, "(((A,B),C),(D,E));", leaf_key="clone", replicates=True, standardize=True, validation_cells=0
    )
    first, again, other = (
        prepare_dataset("lab", entry, TRACKS[entry["track"]], seed, files)[list("ABCDE")] for seed in (0, 0, 1)
    )
    assert {"train", "test"} <= set(first.layers)
    np.testing.assert_array_equal(first.layers["train"], again.layers["train"])
    assert not np.array_equal(first.layers["train"], other.layers["train"])
    np.testing.assert_allclose(first.X, (first.layers["train"] + first.layers["test"]) / 2)
    np.testing.assert_allclose(first.layers["train"].mean(axis=0), 0, atol=1e-9)  # train statistics


def test_lineage_h5ad_keeps_the_files_replicate_pairs(tmp_path):
    adata = cells_by_leaf(["A", "B", "C", "D", "E"], cells_per_leaf=6)
    adata.obs["rep"] = np.tile(["rep2", "rep2", "rep1", "rep2", "rep1", "rep1"], 5)
    # validation_cells 0: the pairs as measured, no validation share
    entry, files = lineage_entry(
        tmp_path, adata, "(((A,B),C),(D,E));", leaf_key="clone", replicate_key="rep", validation_cells=0
    )
    first, other = (
        prepare_dataset("lab", entry, TRACKS[entry["track"]], seed, files)[list("ABCDE")] for seed in (0, 1)
    )
    x = np.asarray(adata.X, dtype=np.float64)
    for layer, replicate in (("train", "rep1"), ("test", "rep2")):  # train: the first value in sorted order
        rows = adata.obs["rep"] == replicate
        means = pd.DataFrame(x[rows]).groupby(adata.obs["clone"][rows].to_numpy()).mean().loc[list("ABCDE")]
        np.testing.assert_allclose(first.layers[layer], np.log1p(means.to_numpy()), rtol=1e-12)
        np.testing.assert_array_equal(first.layers[layer], other.layers[layer])  # the same pairs for every seed
    np.testing.assert_array_equal(first.X, (first.layers["train"] + first.layers["test"]) / 2)


def test_one_matrix_gives_identical_nj_raw_scores_through_the_bm_loader_and_lineage_h5ad(tmp_path):
    from celldag.jobs.runner import output_anndata
    from celldag.lineage.scoring import run_scores
    from celldag.lineage.track import method_input
    from celldag.methods import distance_tree

    def nj_raw_scores(prepared):
        result = distance_tree.run(method_input(prepared, None), {"features": "raw", "reconstruction": "nj"}, 0)
        return run_scores(prepared, output_anndata(prepared, result, {}, "ok", "", "output.h5ad"), 0, 2000)

    bm_params = {
        "depth": 4,
        "n_signal": 20,
        "n_noise": 10,
        "n_spurious": 5,
        "max_walk": 3.0,
        "noise_std": 1.0,
        "measurement_std": 0.5,
    }
    bm = {"track": "lineage", "loader": "celldag.data.bm:prepare_bm_simulator", "params": bm_params}
    measured = prepare_dataset("bm", bm, TRACKS["lineage"], 0)  # standardize: false, the matrices as simulated
    leaves = list(measured.obs_names)
    rows = anndata.AnnData(  # the lab's file: one row per leaf and replicate
        X=np.vstack([measured.layers["train"], measured.layers["test"]]),
        obs=pd.DataFrame(
            {"leaf": leaves * 2, "replicate": ["rep1"] * len(leaves) + ["rep2"] * len(leaves)},
            index=[f"row{i}" for i in range(2 * len(leaves))],
        ),
        var=pd.DataFrame(index=measured.var_names),
    )
    for standardize in (False, True):
        through_bm = prepare_dataset(
            "bm", bm | {"params": bm_params | {"standardize": standardize}}, TRACKS["lineage"], 0
        )
        entry, files = lineage_entry(
            tmp_path,
            rows.copy(),
            measured.uns["tree_newick"],
            leaf_key="leaf",
            replicate_key="replicate",
            values="transformed",
            standardize=standardize,
        )
        through_h5ad = prepare_dataset("lab", entry, TRACKS["lineage"], 0, files)
        assert through_h5ad.uns["standardized"] == through_bm.uns["standardized"] == standardize
        np.testing.assert_array_equal(through_h5ad[leaves].layers["test"], through_bm[leaves].layers["test"])
        scores = nj_raw_scores(through_bm)
        assert nj_raw_scores(through_h5ad) == scores
        assert 0 < scores["rf"] < 1


def test_lineage_h5ad_builds_the_tree_from_sulston_names(tmp_path):
    names = ["ABala", "ABalp", "ABara", "MSaa", "MSap", "Ea"]
    adata = anndata.AnnData(
        X=np.random.default_rng(0).normal(size=(len(names), 4)),
        obs=pd.DataFrame({"lineage": names}, index=[f"c{i}" for i in range(len(names))]),
    )
    entry, files = lineage_entry(tmp_path, adata, lineage_key="lineage", values="transformed")
    prepared = prepare_dataset("lab", entry, TRACKS[entry["track"]], 0, files)
    tree = parse_newick(prepared.uns["tree_newick"])
    assert set(tree.leaf_names) == set(names) == set(prepared.obs_names)
    from celldag.lineage.tree import path_distances

    distances = path_distances(tree, ["ABala", "ABalp", "MSaa"], topology_only=False)
    assert distances[0, 1] == 2  # sisters: one division each
    assert distances[0, 2] == 4 + 5  # ABala = "aala" (4 divisions), MSaa = "paa" + "aa" (5), nothing shared


def test_h5ad_without_batch_key_is_one_batch(tmp_path):
    rng = np.random.default_rng(0)
    adata = anndata.AnnData(
        X=rng.poisson(3.0, size=(30, 15)).astype(np.float32),
        obs=pd.DataFrame({"type": np.repeat(["x", "y", "z"], 10)}, index=[f"c{i}" for i in range(30)]),
        var=pd.DataFrame(index=[f"G{i}" for i in range(15)]),
    )
    adata.write_h5ad(tmp_path / "lab.h5ad")
    entry = {
        "track": "representation",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "source": "local",
        "files": [{"name": "lab.h5ad", "path": str(tmp_path / "lab.h5ad")}],
        "params": {"file": "lab.h5ad", "label_key": "type", "min_genes": 0, "min_cells": 0},
    }
    prepared = prepare_dataset("lab", entry, TRACKS[entry["track"]], 0, {"lab.h5ad": str(tmp_path / "lab.h5ad")})
    check_prepared(prepared, "prepared")
    assert set(prepared.obs["batch"]) == {"lab"}
    kept = adata.var_names.get_indexer(prepared.var_names)
    np.testing.assert_array_equal(prepared.layers["counts"].toarray(), adata.X[:, kept])


def test_h5ad_reads_counts_and_lognorm_of_one_file_and_keeps_its_split(tmp_path):
    from celldag.data.h5ad import prepare_h5ad

    rng = np.random.default_rng(0)
    counts = rng.poisson(3.0, size=(60, 20)).astype(np.float32)
    lognorm = np.log1p(counts / counts.sum(axis=1, keepdims=True) * 100)  # the lab's own normalisation
    fold = np.where(np.arange(60) % 4 == 0, "val", "train")
    obs = pd.DataFrame(
        {"type": np.repeat(["x", "y", "z"], 20), "tech": np.tile(["a", "b"], 30), "fold": fold},
        index=[f"c{i}" for i in range(60)],
    )
    adata = anndata.AnnData(
        X=lognorm, layers={"counts": counts}, obs=obs, var=pd.DataFrame(index=[f"G{i}" for i in range(20)])
    )
    adata.write_h5ad(tmp_path / "lab.h5ad")
    params = {
        "file": "lab.h5ad",
        "label_key": "type",
        "batch_key": "tech",
        "counts_layer": "counts",
        "lognorm_layer": "X",
        "split_key": "fold",
        "min_genes": 0,
        "min_cells": 0,
    }
    files = {"lab.h5ad": str(tmp_path / "lab.h5ad")}
    entry = {
        "track": "representation",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "source": "local",
        "files": [{"name": "lab.h5ad", "path": files["lab.h5ad"]}],
        "params": params,
    }
    prepared = prepare_dataset("lab", entry, TRACKS["representation"], 0, files)
    check_prepared(prepared, "prepared")
    rows, kept = adata.obs_names.get_indexer(prepared.obs_names), adata.var_names.get_indexer(prepared.var_names)
    np.testing.assert_allclose(prepared.layers["lognorm"].toarray(), lognorm[rows][:, kept], rtol=1e-6)
    np.testing.assert_array_equal(prepared.layers["counts"].toarray(), counts[rows][:, kept])
    assert (prepared.obs["split"].astype(str).to_numpy() == fold[rows]).all()
    record = prepared.uns["preprocess"]
    assert (record["values"], record["counts"], record["split_key"]) == ("lognorm", "layers['counts']", "fold")
    assert (record["train_cells"], record["val_cells"]) == (45, 15) and "val_fraction" not in record
    assert prepare_h5ad.check_source(params, files).facts == [("matrix checked", "layers['counts'], X")]


def test_a_local_file_with_a_changed_sha256_is_refused(tmp_path):
    adata = cells_by_leaf(["A", "B", "C", "D"])
    entry, files = lineage_entry(tmp_path, adata, "((A,B),(C,D));", leaf_key="clone")
    entry["files"][0]["sha256"] = "0" * 64
    with pytest.raises(
        InputError, match=rf"^{tmp_path}/cells\.h5ad: sha256: the registry gives 0{{64}}, the file has [0-9a-f]{{64}}$"
    ):
        prepare_dataset("lab", entry, TRACKS[entry["track"]], 0, files)


def test_constant_genes_are_found_in_sparse_sources_without_densifying():
    from scipy import sparse

    from celldag.data.h5ad import H5AD_PARAMS, representation_problems

    obs = pd.DataFrame({"type": ["a", "b"] * 3, "tech": ["x"] * 3 + ["y"] * 3}, index=[f"c{i}" for i in range(6)])
    own = H5AD_PARAMS | {"label_key": "type", "batch_key": "tech"}
    constant = anndata.AnnData(X=sparse.csr_matrix(np.full((6, 4), 2.0)), obs=obs)
    assert [str(p) for p in representation_problems(constant, "s.h5ad", own, {})] == [
        "s.h5ad: X: no gene varies across cells (every gene is constant)"
    ]
    varying = constant.copy()
    varying.X = sparse.csr_matrix(np.diag([1.0, 2.0, 0.0, 3.0, 0.0, 0.0])[:, :4])
    assert representation_problems(varying, "s.h5ad", own, {}) == []


def test_validate_reports_missing_and_changed_downloads(tmp_path, monkeypatch):
    import json

    from conftest import REPO

    from celldag.commands.validate import validate_dataset
    from celldag.registry import load_config, read_yaml

    _, registries = load_config(read_yaml(REPO / "config/config.yaml"), "config/config.yaml", root=REPO)
    monkeypatch.chdir(tmp_path)
    target = "resources/scib_pancreas/human_pancreas_norm_complexBatch.h5ad"
    assert validate_dataset("scib_pancreas", registries).problems == [
        f"{target}: file: not found (downloaded by `snakemake {target}`)"
    ]
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_bytes(b"changed upstream")
    pins = tmp_path / "resources/scib_pancreas/checksums.json"
    pins.write_text(json.dumps({"human_pancreas_norm_complexBatch.h5ad": "0" * 64}))
    (problem,) = validate_dataset("scib_pancreas", registries).problems
    assert problem.startswith(
        f"checksum mismatch for {target}: pinned sha256 {'0' * 64} in {pins.relative_to(tmp_path)}"
    )


def test_validation_cells_come_out_of_the_train_cells_and_leave_the_test_replicate_as_it_was(tmp_path):
    # leaf A has 2 cells (one train cell: no validation cells), the others 8 (4 train → 1 validation, 3 train)
    adata = cells_by_leaf(["A", "B", "C", "D", "E"], cells_per_leaf=8)
    adata = adata[~adata.obs_names.isin([f"c{i}" for i in range(2, 8)])].copy()
    plain, _ = lineage_entry(
        tmp_path, adata.copy(), "(((A,B),C),(D,E));", leaf_key="clone", replicates=True, validation_cells=0
    )
    entry, files = lineage_entry(
        tmp_path, adata, "(((A,B),C),(D,E));", leaf_key="clone", replicates=True, validation_cells=0.25
    )
    without = prepare_dataset("lab", plain, TRACKS["lineage"], 0, files)[list("ABCDE")]
    prepared = prepare_dataset("lab", entry, TRACKS["lineage"], 0, files)[list("ABCDE")]
    check_prepared(prepared, "prepared")
    np.testing.assert_array_equal(prepared.layers["test"], without.layers["test"])  # the test replicate untouched
    assert list(prepared.obs["n_cells_validation"]) == [0, 1, 1, 1, 1]
    # feature 1..: per-cell Poisson values; the validation cell of B is one of B's train cells of before: its
    # profile differs from the new train profile, and A (no validation cells) repeats its train row
    np.testing.assert_array_equal(prepared.layers["validation"][0], prepared.layers["train"][0])
    assert not np.array_equal(prepared.layers["train"][1:], without.layers["train"][1:])
    b_cells = np.log1p(np.asarray(adata[adata.obs["clone"] == "B"].X, dtype=np.float64))
    assert any(np.allclose(prepared.layers["validation"][1], row) for row in b_cells)  # one cell: its own profile
    from celldag.lineage.track import method_input

    inputs = method_input(prepared, None)
    np.testing.assert_array_equal(inputs.validation_leaves, [False, True, True, True, True])


def test_validation_cells_need_a_replicate_pair(tmp_path):
    adata = cells_by_leaf(["A", "B", "C", "D"])
    entry, files = lineage_entry(tmp_path, adata, "((A,B),(C,D));", leaf_key="clone", validation_cells=0.2)
    with pytest.raises(InputError, match="validation_cells takes a share of each leaf's train cells"):
        prepare_dataset("lab", entry, TRACKS["lineage"], 0, files)


def test_validation_cells_are_a_disjoint_share_of_each_leafs_train_cells():
    from celldag.data.leaf_profiles import replicate_cells

    train, test = (
        [np.arange(0, 10), np.array([10]), np.arange(11, 14)],
        [np.arange(20, 30), np.array([30]), np.arange(31, 34)],
    )
    split = replicate_cells(train, test, 0.2, seed=3)
    for leaf in range(3):
        kept, held = split["train"][leaf], split["validation"][leaf]
        assert not set(kept) & set(held) and sorted([*kept, *held]) == list(train[leaf]) and kept.size
    assert [cells.size for cells in split["validation"]] == [2, 0, 1]  # round(0.2·n), ≥ 1, never every train cell
    assert split["test"] is test
    plain = replicate_cells(train, test, 0.0, seed=3)
    assert plain["train"] is train and "validation" not in plain
