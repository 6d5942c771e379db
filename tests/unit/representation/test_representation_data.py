"""Representation datasets: preprocessing values, pbmc68k with synthetic batches, the scIB and PBMC3k loaders."""

from __future__ import annotations

import re

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS, check_prepared
from scipy import sparse

from celldag.representation.preprocess import preprocess, stratified_split

LABEL_SIZES = {"A": 60, "B": 40, "C": 17, "D": 2, "E": 1}  # 120 cells; D: two cells, E: a singleton


def counts_adata(seed: int = 0, n_genes: int = 30) -> anndata.AnnData:
    """Poisson counts with label-specific means, two batches, and two genes never detected (the last two)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(list(LABEL_SIZES), list(LABEL_SIZES.values()))
    means = rng.gamma(2.0, 2.0, size=(len(LABEL_SIZES), n_genes))
    codes = pd.Categorical(labels).codes
    counts = rng.poisson(means[codes]).astype(np.float32)  # float storage of integer counts, as in h5ad files
    counts[:, -2:] = 0
    obs = pd.DataFrame(
        {"celltype": labels, "tech": np.where(np.arange(labels.size) % 2, "smartseq", "10x")},
        index=[f"cell{i}" for i in range(labels.size)],
    )
    var = pd.DataFrame(index=[f"G{j}" for j in range(n_genes)])
    return anndata.AnnData(X=sparse.csr_matrix(counts), obs=obs, var=var)


def run(adata, seed=0, values="counts", **params):
    return preprocess(adata, label_key="celltype", batch_key="tech", seed=seed, params=params, values=values)


def test_lognorm_is_log1p_of_counts_per_10k_and_counts_stay_integer():
    source = counts_adata()
    prepared = run(source, min_genes=0, min_cells=0)
    raw = source.X.toarray().astype(np.float64)
    expected = np.log1p(raw / raw.sum(axis=1, keepdims=True) * 1e4)
    kept = source.var_names.get_indexer(prepared.var_names)
    np.testing.assert_allclose(prepared.layers["lognorm"].toarray(), expected[:, kept], rtol=1e-6)
    counts = prepared.layers["counts"]
    assert sparse.isspmatrix_csr(counts) and counts.dtype == np.int32
    np.testing.assert_array_equal(counts.toarray(), raw[:, kept])


def test_x_is_the_per_gene_z_score_clipped_at_10():
    source = counts_adata()
    counts = source.X.toarray()
    counts[:, 0] = 0
    counts[5, 0] = 7  # one detection in 120 cells: z ≈ √120 ≈ 10.9 before clipping
    source.X = sparse.csr_matrix(counts)
    prepared = run(source, min_genes=0, min_cells=1)
    lognorm = prepared.layers["lognorm"].toarray().astype(np.float64)
    z = (lognorm - lognorm.mean(axis=0)) / lognorm.std(axis=0, ddof=1)
    assert z[5, 0] > 10.5
    X = prepared.X
    assert isinstance(X, np.ndarray) and X.dtype == np.float32
    assert X[5, 0] == 10.0 and X.max() == 10.0 and X.min() >= -10.0
    np.testing.assert_allclose(X, np.clip(z, -10, 10), rtol=1e-4, atol=1e-5)
    unclipped = np.abs(z).max(axis=0) < 10
    np.testing.assert_allclose(X[:, unclipped].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(X[:, unclipped].std(axis=0, ddof=1), 1, rtol=1e-4)


def test_zero_variance_genes_are_dropped_and_counted():
    prepared = run(counts_adata(), min_genes=0, min_cells=0)  # the two undetected genes pass QC, then are constant
    assert prepared.uns["preprocess"]["zero_variance_genes_dropped"] == 2
    assert prepared.n_vars == 28 and {"G28", "G29"}.isdisjoint(prepared.var_names)

    source = counts_adata()
    lognorm = np.log1p(source.X.toarray())
    lognorm[:, 3] = 1.5  # detected everywhere at one level: passes QC, has no z-score
    source.X = sparse.csr_matrix(lognorm)
    prepared = run(source, values="lognorm")
    assert prepared.uns["preprocess"]["zero_variance_genes_dropped"] == 1
    assert "G3" not in prepared.var_names and "counts" not in prepared.layers
    kept = source.var_names.get_indexer(prepared.var_names)
    np.testing.assert_array_equal(prepared.layers["lognorm"].toarray(), lognorm[:, kept])


def test_qc_drops_sparse_cells_and_rare_genes_and_records_each_step():
    source = counts_adata()
    counts = source.X.toarray()
    counts[7, 1:] = 0
    counts[7, 0] = 3  # a cell with one detected gene
    source.X = sparse.csr_matrix(counts)
    prepared = run(source)  # defaults: min_genes 10, min_cells 3
    record = prepared.uns["preprocess"]
    assert "cell7" not in prepared.obs_names
    steps = ("cells_in", "genes_in", "cells_after_qc", "genes_after_qc")
    assert tuple(record[step] for step in steps) == (120, 30, 119, 28)
    assert (record["cells"], record["genes"]) == (119, 28)
    assert record["train_cells"] + record["val_cells"] == 119


def test_duplicate_gene_symbols_are_made_unique_and_counted_when_asked():
    source = counts_adata()
    source.var_names = ["G0", "G0", *source.var_names[2:]]
    prepared = run(source, duplicate_genes="make_unique")
    assert prepared.var_names.is_unique and {"G0", "G0-1"} <= set(prepared.var_names)
    assert prepared.uns["preprocess"]["duplicate_gene_names_renamed"] == 1


def test_hvg_selection_keeps_the_requested_number_of_genes():
    import scanpy as sc

    prepared = run(counts_adata(n_genes=60), n_top_genes=20)
    assert prepared.n_vars == 20 and prepared.uns["preprocess"]["hvg_flavor"] == "seurat_v3"
    # the same choice as scanpy's batch-aware seurat_v3 on the QC-passed counts
    qc = run(counts_adata(n_genes=60))
    reference = anndata.AnnData(X=qc.layers["counts"].astype(np.float32), obs=qc.obs)
    reference.var_names = qc.var_names
    sc.pp.highly_variable_genes(reference, n_top_genes=20, flavor="seurat_v3", batch_key="batch")
    assert set(prepared.var_names) == set(reference.var_names[reference.var["highly_variable"]])


def test_split_is_stratified_seeded_and_near_the_fraction():
    source = counts_adata()
    prepared = run(source, val_fraction=0.2)
    split, labels = prepared.obs["split"], prepared.obs["label"]
    assert list(split.cat.categories) == ["train", "val"]
    val_per_label = pd.crosstab(labels, split)["val"].to_dict()
    # round(0.2 · n), keeping one train cell: 60 → 12, 40 → 8, 17 → 3, 2 → 0, the singleton → 0
    assert val_per_label == {"A": 12, "B": 8, "C": 3, "D": 0, "E": 0}
    assert (split == "val").mean() == pytest.approx(0.2, abs=0.02)
    again = run(counts_adata(), val_fraction=0.2)
    other = run(counts_adata(), seed=1, val_fraction=0.2)
    assert (again.obs["split"] == split).all()
    assert (other.obs["split"] != split).any()
    assert pd.crosstab(other.obs["label"], other.obs["split"])["val"].to_dict() == val_per_label


def test_split_always_trains_on_every_label():
    labels = np.array(["a", "a", "b", "c", "c", "c"])
    for seed in range(20):
        split = stratified_split(labels, 0.5, seed)
        assert all((split[labels == label] == "train").any() for label in "abc")
        assert split[2] == "train"  # the singleton
    with pytest.raises(ValueError, match="leaves the val split empty"):
        stratified_split(labels, 0.01, 0)


def test_missing_label_or_batch_is_an_input_error():
    source = counts_adata()
    source.obs.loc["cell3", "celltype"] = None
    with pytest.raises(
        ValueError,
        match=re.escape(
            "obs['celltype'] (label) is missing for 1 of 120 cells (first: 'cell3'); every cell needs a label"
        ),
    ):
        run(source)
    with pytest.raises(ValueError, match=re.escape("obs has no batch column 'donor'")):
        preprocess(counts_adata(), label_key="celltype", batch_key="donor", seed=0, params={})


def test_bad_inputs_fail_with_the_reason():
    source = counts_adata()
    source.X = source.X.multiply(0.5).tocsr()
    with pytest.raises(ValueError, match=r"counts must hold raw integer counts, but \d+ values are not integers"):
        run(source)
    with pytest.raises(ValueError, match=re.escape("unknown preprocessing params ['n_hvg']")):
        run(counts_adata(), n_hvg=10)


# ---- pbmc68k_reduced with synthetic batches -----------------------------------------------------------


def knn_stats(adata, k: int = 15) -> tuple[float, float]:
    """On 50 PCs of X: the share of the k nearest neighbours in the cell's batch; leave-one-out kNN label accuracy."""
    from sklearn.decomposition import PCA
    from sklearn.neighbors import NearestNeighbors

    pcs = PCA(50, random_state=0).fit_transform(adata.X)
    neighbours = NearestNeighbors(n_neighbors=k + 1).fit(pcs).kneighbors(pcs, return_distance=False)[:, 1:]
    batch, label = adata.obs["batch"].cat.codes.to_numpy(), adata.obs["label"].cat.codes.to_numpy()
    votes = np.array([np.bincount(label[row], minlength=label.max() + 1).argmax() for row in neighbours])
    return float((batch[neighbours] == batch[:, None]).mean()), float((votes == label).mean())


@pytest.fixture(scope="module")
def pbmc68k():
    from celldag.jobs.prepare import prepare_dataset

    entry = {"track": "representation", "loader": "celldag.data.pbmc:prepare_pbmc68k_batched", "params": {}}
    return {seed: prepare_dataset("pbmc68k_batched", entry, TRACKS[entry["track"]], seed) for seed in (0, 1)}


def test_pbmc68k_batched_holds_the_contract(pbmc68k, tmp_path):
    from celldag import artifacts

    adata = pbmc68k[0]
    assert adata.shape == (700, 765) and "counts" not in adata.layers
    assert adata.X.dtype == np.float32
    assert list(adata.obs["batch"].cat.categories) == ["batch0", "batch1", "batch2"]
    assert adata.obs["label"].nunique() == 10 and adata.uns["label_key"] == "bulk_labels"
    lognorm = adata.layers["lognorm"].toarray()
    assert np.isfinite(lognorm).all() and lognorm.min() >= 0
    artifacts.write_h5ad(adata, tmp_path / "seed0.h5ad")
    artifacts.read_h5ad(tmp_path / "seed0.h5ad", check=check_prepared)


def test_pbmc68k_batches_are_stratified_and_fixed_across_run_seeds(pbmc68k):
    first, second = pbmc68k[0], pbmc68k[1]
    sizes = pd.crosstab(first.obs["label"], first.obs["batch"]).to_numpy()
    assert (sizes.max(axis=1) - sizes.min(axis=1) <= 1).all()
    assert np.ptp(sizes.sum(axis=0)) <= 1
    assert (first.obs["batch"] == second.obs["batch"]).all()
    assert (first.layers["lognorm"] != second.layers["lognorm"]).nnz == 0
    assert (first.obs["split"] != second.obs["split"]).any()


def test_pbmc68k_batch_seed_changes_the_design():
    from celldag.data.pbmc import prepare_pbmc68k_batched

    other = prepare_pbmc68k_batched("pbmc68k_batched", {"batch_seed": 1}, 0, {})
    default = prepare_pbmc68k_batched("pbmc68k_batched", {}, 0, {})
    assert (other.obs["batch"] != default.obs["batch"]).any()


def test_pbmc68k_batch_effect_is_visible_and_cell_types_stay_recoverable(pbmc68k):
    from celldag.data.pbmc import prepare_pbmc68k_batched

    no_effect = prepare_pbmc68k_batched("pbmc68k_batched", {"shift_sd": 0.0, "scale_sd": 0.0}, 0, {})
    same_batch_before, accuracy_before = knn_stats(no_effect)
    same_batch, accuracy = knn_stats(pbmc68k[0])
    # measured: same-batch neighbours 0.33 → 0.91 (chance 1/3); label accuracy 0.81 → 0.79
    assert same_batch_before < 0.4
    assert same_batch > 0.85
    assert accuracy_before > 0.78 and accuracy > 0.75


# ---- downloaded sources, as tiny files written here ----------------------------------------------------


def test_h5ad_loader_reads_the_counts_layer(tmp_path):
    from celldag.data.h5ad import prepare_h5ad

    source = counts_adata()
    counts = source.X.copy()
    source.layers["counts"] = counts
    source.X = sparse.csr_matrix(np.log1p(counts.toarray()) / 3)  # the files' normalised X is not used
    source.write_h5ad(tmp_path / "pancreas.h5ad")
    params = {
        "file": "pancreas.h5ad",
        "label_key": "celltype",
        "batch_key": "tech",
        "counts_layer": "counts",
        "min_genes": 0,
    }
    prepared = prepare_h5ad("scib_pancreas", params, 0, {"pancreas.h5ad": str(tmp_path / "pancreas.h5ad")})
    kept = source.var_names.get_indexer(prepared.var_names)
    np.testing.assert_array_equal(prepared.layers["counts"].toarray(), counts.toarray()[:, kept])
    assert (prepared.obs["label"].astype(str) == source.obs["celltype"]).all()
    assert (prepared.obs["batch"].astype(str) == source.obs["tech"]).all()
    assert (prepared.uns["label_key"], prepared.uns["batch_key"]) == ("celltype", "tech")

    source.layers["counts"] = source.X  # normalised values where counts should be
    source.write_h5ad(tmp_path / "pancreas.h5ad")
    with pytest.raises(ValueError, match=re.escape("pancreas.h5ad: layers['counts']: ") + "[0-9]+ non-integer values"):
        prepare_h5ad("scib_pancreas", params, 0, {"pancreas.h5ad": str(tmp_path / "pancreas.h5ad")})


def test_pbmc3k_joins_labels_by_barcode(tmp_path):
    from celldag.data.pbmc import PBMC3K_PROCESSED, PBMC3K_RAW, prepare_pbmc3k

    raw = counts_adata()
    raw.obs = pd.DataFrame(index=[f"AAAC{i:04d}-1" for i in range(raw.n_obs)])
    raw.write_h5ad(tmp_path / PBMC3K_RAW)
    rng = np.random.default_rng(0)
    labelled = rng.permutation(raw.n_obs)[:100]  # in shuffled order: the join must go by barcode
    louvain = pd.Series(np.where(labelled % 3, "CD4 T cells", "B cells"), index=raw.obs_names[labelled])
    louvain["TTTT0000-1"] = "NK cells"  # a label whose cell the raw file lacks
    processed = anndata.AnnData(
        X=np.zeros((louvain.size, 1), dtype=np.float32),
        obs=pd.DataFrame({"louvain": pd.Categorical(louvain)}, index=louvain.index),
    )
    processed.write_h5ad(tmp_path / PBMC3K_PROCESSED)
    files = {name: str(tmp_path / name) for name in (PBMC3K_RAW, PBMC3K_PROCESSED)}

    prepared = prepare_pbmc3k("pbmc3k", {"min_genes": 0}, 0, files)
    assert prepared.n_obs == 100
    assert (prepared.obs["label"].astype(str) == louvain.loc[prepared.obs_names]).all()
    assert prepared.uns["label_join"] == {
        "cells_raw": 120,
        "labelled_cells": 101,
        "unlabelled_dropped": 20,
        "labels_without_raw_cell": 1,
    }
    assert set(prepared.obs["batch"]) == {"pbmc3k"}


def test_values_are_read_as_counts_or_log_normalised_and_anything_else_is_named():
    """preprocess.values_of (issue 53): counts and log1p-normalised values are told apart; scaled data (negative
    values), normalised but unlogged values (fractions beyond a log scale) and cells of both kinds are refused,
    each with what it is."""
    from scipy import sparse

    from celldag.representation.preprocess import AmbiguousValues, values_of

    counts = np.array([[0, 3, 1, 0], [2, 0, 0, 7], [0, 0, 0, 0]], dtype=np.float32)  # an empty cell is neither
    lognorm = np.log1p(counts / np.maximum(counts.sum(axis=1, keepdims=True), 1) * 1e4)
    assert values_of(counts) == "counts" and values_of(sparse.csr_matrix(counts)) == "counts"
    assert values_of(lognorm) == "lognorm" and values_of(sparse.csr_matrix(lognorm)) == "lognorm"
    scaled = lognorm.copy()
    scaled[0, 1], scaled[1, 0], scaled[1, 3] = -0.5, -1.0, -2.0
    with pytest.raises(AmbiguousValues, match="^3 values are negative"):
        values_of(scaled)
    with pytest.raises(AmbiguousValues, match="fractions up to 7778, beyond a log scale"):
        values_of(counts / np.maximum(counts.sum(axis=1, keepdims=True), 1) * 1e4)
    with pytest.raises(AmbiguousValues, match="^1 of its 2 cells hold whole numbers only"):
        values_of(np.vstack([counts[:1], lognorm[1:]]))
    with pytest.raises(AmbiguousValues, match="no non-zero value"):
        values_of(np.zeros((2, 3)))
