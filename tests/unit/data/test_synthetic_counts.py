"""The builtin simulator of UMI counts (celldag.data.synthetic): seeded, integer counts of the requested shape,
every cell type present and some rare, types spread unevenly over batches, batch effects in the counts, the
same matrix whatever the chunk size; its prepared dataset meets the representation contract with counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, TRACKS, check_prepared

from celldag.data.synthetic import SYNTHETIC_DEFAULTS, largest_remainder, prepare_synthetic_counts, simulate_counts
from celldag.jobs.prepare import prepare_dataset
from celldag.registry import declared_params, read_yaml

SHAPE = {"n_cells": 600, "n_genes": 200, "n_types": 12, "n_batches": 4}


@pytest.fixture(scope="module")
def simulation():
    return simulate_counts(**SHAPE, seed=0)


def same_matrix(a, b) -> bool:
    return a.shape == b.shape and (a != b).nnz == 0


def test_the_same_seed_gives_the_same_matrix_and_another_seed_another(simulation):
    again = simulate_counts(**SHAPE, seed=0)
    assert same_matrix(simulation.counts, again.counts)
    assert np.array_equal(simulation.cell_type, again.cell_type) and np.array_equal(simulation.batch, again.batch)
    other = simulate_counts(**SHAPE, seed=1)
    assert not same_matrix(simulation.counts, other.counts)
    assert not np.array_equal(simulation.cell_type, other.cell_type)


def test_counts_are_non_negative_integers_of_the_requested_shape(simulation):
    counts = simulation.counts
    assert counts.shape == (600, 200) and counts.format == "csr" and counts.dtype == np.int32
    assert counts.data.min() >= 0 and counts.nnz > 0
    totals = np.asarray(counts.sum(axis=1)).ravel()
    # library sizes: log-normal around library_size (1,500) times a batch depth factor
    assert 800 < np.median(totals) < 2800
    assert (np.asarray((counts > 0).sum(axis=0)).ravel() >= 3).all()  # no gene so rare that QC would drop it


def test_every_type_is_present_and_some_are_rare(simulation):
    per_type = np.bincount(simulation.cell_type, minlength=12)
    assert (per_type >= 1).all() and per_type.sum() == 600
    assert per_type.min() < 0.5 * 600 / 12 < 2 * 600 / 12 < per_type.max()  # unequal: rare and common types
    for seed in (1, 2, 3):
        fractions = simulate_counts(**SHAPE, seed=seed).type_fractions
        assert fractions.min() < 0.5 / 12 and np.isclose(fractions.sum(), 1.0)
    # a tiny dataset still gets every type
    assert set(simulate_counts(12, 50, 12, 4, seed=0).cell_type) == set(range(12))


def test_types_are_spread_unevenly_over_the_batches(simulation):
    table = pd.crosstab(simulation.cell_type, simulation.batch)
    assert table.shape == (12, 4)
    shares = table.div(table.sum(axis=1), axis=0)
    common = table.sum(axis=1) >= 40
    # every common type has a batch holding more than twice the even share (1/4), or one holding under half of it
    spread = shares[common].max(axis=1) - shares[common].min(axis=1)
    assert (spread > 0.2).all(), shares[common]


def mean_log_profiles(simulation, cell_type: int) -> np.ndarray:
    """(batches, genes): mean log1p of library-normalised counts of one type's cells, per batch."""
    counts = simulation.counts.toarray().astype(np.float64)
    normalised = np.log1p(counts / counts.sum(axis=1, keepdims=True) * 1e4)
    rows = simulation.cell_type == cell_type
    return np.stack([normalised[rows & (simulation.batch == b)].mean(axis=0) for b in range(SHAPE["n_batches"])])


def test_batches_shift_the_expression_of_the_same_type():
    with_effect = simulate_counts(**SHAPE, seed=0)
    without = simulate_counts(**SHAPE, seed=0, batch_lfc_sd=0.0, batch_depth_sd=0.0)
    assert np.array_equal(with_effect.cell_type, without.cell_type)  # the same design, batch effects aside
    largest = int(np.bincount(with_effect.cell_type).argmax())
    batches = np.bincount(with_effect.batch[with_effect.cell_type == largest], minlength=4).argsort()[-2:]

    def batch_difference(simulation) -> float:
        profiles = mean_log_profiles(simulation, largest)
        return float(np.abs(profiles[batches[0]] - profiles[batches[1]]).mean())

    assert batch_difference(with_effect) > 1.5 * batch_difference(without)
    # in the model: each batch its own gene-wise shares for every type
    assert not np.allclose(with_effect.shares[:, 0], with_effect.shares[:, 1])
    assert np.allclose(without.shares[:, 0], without.shares[:, 1])


@pytest.mark.parametrize("chunk_cells", [1, 7, 256, 600])
def test_any_chunk_size_gives_the_same_matrix(simulation, chunk_cells):
    chunked = simulate_counts(**SHAPE, seed=0, chunk_cells=chunk_cells)
    assert same_matrix(simulation.counts, chunked.counts)


def test_largest_remainder_sums_to_the_total_with_the_minimum():
    assert largest_remainder(10, np.array([0.7, 0.2, 0.1])).tolist() == [7, 2, 1]
    assert largest_remainder(10, np.array([0.98, 0.01, 0.01]), minimum=1).tolist() == [8, 1, 1]
    assert largest_remainder(2, np.array([0.5, 0.3, 0.2]), minimum=1).tolist() == [1, 1, 0]  # too few for the minimum


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_cells": 0}, "n_cells must be an integer >= 1"),
        ({"dispersion": 0}, "dispersion must be a number > 0"),
        ({"min_type_fraction": 0.5}, "min_type_fraction must be a number in"),
        ({"n_celsl": 10}, "unknown"),
    ],
)
def test_invalid_params_are_refused(params, message):
    with pytest.raises(ValueError, match=message):
        prepare_synthetic_counts("synthetic", {**SHAPE, **params}, 0, {})


def test_the_prepared_dataset_meets_the_representation_contract_with_counts():
    entry = {
        "track": "representation",
        "loader": "celldag.data.synthetic:prepare_synthetic_counts",
        "params": {**SHAPE, "val_fraction": 0.2},
    }
    track = TRACKS["representation"]
    prepared = prepare_dataset("synthetic_test", entry, track, seed=0)
    check_prepared(prepared, "synthetic_test/seed0.h5ad")
    assert prepared.shape == (600, 200) and prepared.X.dtype == np.float32
    counts = prepared.layers["counts"]
    assert same_matrix(counts, simulate_counts(**SHAPE, seed=0).counts)  # the simulated counts, QC dropped none
    assert prepared.obs["label"].nunique() == 12 and prepared.obs["batch"].nunique() == 4
    assert set(prepared.obs["split"]) == {"train", "val"}
    assert prepared.uns["preprocess"]["values"] == "counts" and prepared.uns["simulation"]["n_cells"] == 600
    inputs = track.call("method_input", prepared, None, None)
    assert inputs.unmet("counts") is None and inputs.unmet("batches") is None  # scVI applies


def test_preprocessing_params_reach_the_shared_preprocessing():
    prepared = prepare_synthetic_counts("synthetic", {**SHAPE, "n_top_genes": 50, "val_fraction": 0.5}, 0, {})
    assert prepared.n_vars == 50 and prepared.uns["preprocess"]["hvg_flavor"] == "seurat_v3"
    assert (prepared.obs["split"] == "val").mean() == pytest.approx(0.5, abs=0.05)


def test_the_registry_entries_are_the_scale_datasets():
    datasets = read_yaml(REPO / "config/datasets.yaml")
    accepted, _ = declared_params("celldag.data.synthetic:prepare_synthetic_counts", "test")
    assert set(SYNTHETIC_DEFAULTS) <= accepted
    for dataset_id, n_cells in (("synthetic_20k", 20_000), ("synthetic_100k", 100_000)):
        entry = datasets[dataset_id]
        assert entry["track"] == "representation" and entry["source"] == "builtin"
        assert entry["loader"] == "celldag.data.synthetic:prepare_synthetic_counts"
        assert entry["license"].startswith("CC0-1.0")
        assert {key: entry["params"][key] for key in SHAPE} == {**SHAPE, "n_cells": n_cells, "n_genes": 2000}
        assert set(entry["params"]) <= accepted
