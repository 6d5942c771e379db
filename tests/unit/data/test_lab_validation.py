"""A lab's lineage h5ad with cells per leaf gets a validation replicate by default (validation_cells: auto):
where it has a replicate pair and every leaf can spare a training cell, a share of them; the test replicate
and the counts as without one; supervised CellTreeQM then selects on it. Where it cannot, the prepared
dataset and the run's note say why, and selection falls back to held-out leaves."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from conftest import REPO, TRACKS, check_prepared
from lab_data import LAB_LINEAGE, cells_by_leaf, lineage_entry, overlay

from celldag.data.leaf_profiles import AUTO_FRACTION, given_halves, replicate_cells, split_halves
from celldag.errors import InputError
from celldag.jobs.prepare import prepare_dataset, write_prepared_dataset
from celldag.jobs.runner import run_method
from celldag.lineage.track import method_input, validation_fact
from celldag.lineage.tree import parse_newick
from celldag.plan import data_key
from celldag.registry import apply_schema, read_yaml

NEWICK = "(((A,B),C),(D,E));"
LEAVES = list("ABCDE")  # the rows of the prepared datasets below
TREE_ORDER = list(parse_newick(NEWICK).leaf_names)  # the order the loader draws leaves in
PAIRS = {"replicates": {"replicates": True}, "replicate_key": {"replicate_key": "rep"}}


def lab_cells(pair: str, cells_per_leaf: int = 8):
    """Cells of 5 leaves with a replicate pair (seeded halves, or the file's own column 'rep'), and a last
    feature counted in a single cell: one that the default validation share takes out of its leaf's training
    cells (with seed 0), so the features kept over the training profiles would change without care."""
    adata = cells_by_leaf(LEAVES, cells_per_leaf=cells_per_leaf, n_features=7)
    adata.obs["rep"] = np.tile(["rep1", "rep2"], adata.n_obs // 2)
    (cell,) = validation_cells(adata, pair)[TREE_ORDER.index("B")]
    adata.X[:, -1] = 0
    adata.X[cell, -1] = 7
    return adata


def training_half(adata, pair: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(train, test): per leaf (TREE_ORDER), its cells in each half, as the loader draws (seed 0) or reads them."""
    leaf_of_cell = adata.obs["clone"].to_numpy()
    if pair == "replicates":
        return split_halves(leaf_of_cell, TREE_ORDER, 0)
    return given_halves(leaf_of_cell, adata.obs["rep"].to_numpy(), TREE_ORDER)


def validation_cells(adata, pair: str) -> list[np.ndarray]:
    """Per leaf (TREE_ORDER), the cells the default share draws from its training cells (seed 0)."""
    return replicate_cells(*training_half(adata, pair), AUTO_FRACTION, seed=0)["validation"]


def prepared_pair(tmp_path, adata, **params):
    """(prepared with the default validation_cells, prepared with validation_cells: 0), rows in leaf order."""
    default, files = lineage_entry(tmp_path, adata, NEWICK, leaf_key="clone", **params)
    zero = default | {"params": default["params"] | {"validation_cells": 0}}
    assert "validation_cells" not in default["params"]
    return tuple(prepare_dataset("lab", entry, TRACKS["lineage"], 0, files)[LEAVES] for entry in (default, zero))


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("pair", list(PAIRS))
def test_a_lab_lineage_gets_a_validation_replicate_by_default(tmp_path, pair, standardize):
    adata = lab_cells(pair)
    prepared, without = prepared_pair(tmp_path, adata.copy(), standardize=standardize, **PAIRS[pair])
    check_prepared(prepared, "prepared")
    assert "validation" in prepared.layers and "validation" not in without.layers
    assert prepared.uns["validation_cells"] == AUTO_FRACTION and "no_validation_replicate" not in prepared.uns
    assert list(prepared.obs["n_cells_validation"]) == [1] * 5  # 4 training cells per leaf: 1 to validation, 3 kept
    # the test replicate and the counts bit for bit as without a validation share, and the same features: the
    # one counted only in B's validation cell varies over the training half, so it stays
    assert list(prepared.var_names) == list(without.var_names) and prepared.n_vars == 7
    for layer in ("test", "counts"):
        assert prepared.layers[layer].dtype == without.layers[layer].dtype
        assert prepared.layers[layer].tobytes() == without.layers[layer].tobytes()
    assert list(prepared.obs_names) == list(without.obs_names)
    np.testing.assert_array_equal(prepared.obs["count_total"], without.obs["count_total"])
    assert not np.array_equal(prepared.layers["train"], without.layers["train"])
    assert validation_fact(prepared) == "yes, 5 of 5 leaves (layer validation)"


@pytest.mark.parametrize("pair", list(PAIRS))
def test_the_training_replicate_loses_only_its_validation_cells(tmp_path, pair):
    adata = lab_cells(pair)
    prepared, without = prepared_pair(tmp_path, adata.copy(), **PAIRS[pair])
    train, validation = training_half(adata, pair)[0], validation_cells(adata, pair)
    x = np.asarray(adata.X, dtype=np.float64)
    for leaf in LEAVES:
        half, held = set(train[TREE_ORDER.index(leaf)]), set(validation[TREE_ORDER.index(leaf)])
        kept = sorted(half - held)
        assert held < half and len(held) == 1 and len(kept) == 3
        row = LEAVES.index(leaf)
        np.testing.assert_allclose(prepared.layers["train"][row], np.log1p(x[kept].mean(axis=0)), rtol=1e-12)
        np.testing.assert_allclose(
            prepared.layers["validation"][row], np.log1p(x[sorted(held)].mean(axis=0)), rtol=1e-12
        )
        np.testing.assert_allclose(without.layers["train"][row], np.log1p(x[sorted(half)].mean(axis=0)), rtol=1e-12)


@pytest.mark.parametrize(
    ("params", "why"),
    [
        (
            {"replicates": True},
            "validation_cells: auto needs 2+ training cells in every leaf; 1 of 5 have fewer "
            "(first: ['A']); a fraction such as 0.25 draws from the others",
        ),
        ({}, "no replicate pair to draw validation cells from (replicates: true or replicate_key)"),
    ],
)
def test_a_lab_lineage_without_cells_to_spare_has_no_validation_replicate_and_says_why(tmp_path, params, why):
    adata = cells_by_leaf(LEAVES, cells_per_leaf=8)
    adata = adata[~adata.obs_names.isin([f"c{i}" for i in range(2, 8)])].copy()  # leaf A: 2 cells, 1 training cell
    prepared, without = prepared_pair(tmp_path, adata, **params)
    check_prepared(prepared, "prepared")
    assert "validation" not in prepared.layers and "n_cells_validation" not in prepared.obs
    assert prepared.uns["validation_cells"] == 0 and prepared.uns["no_validation_replicate"] == why
    assert without.uns["no_validation_replicate"] == "validation_cells: 0 in the dataset's entry"
    for layer in without.layers:
        assert prepared.layers[layer].tobytes() == without.layers[layer].tobytes()
    assert prepared.X.tobytes() == without.X.tobytes()
    assert method_input(prepared, None).no_validation == why
    assert validation_fact(prepared) == f"no ({why}; supervised selection falls back to held-out leaves)"


@pytest.mark.parametrize("value", [None, 1.0, "half", True])
def test_validation_cells_is_auto_or_a_fraction(tmp_path, value):
    entry, files = lineage_entry(
        tmp_path, cells_by_leaf(LEAVES), NEWICK, leaf_key="clone", replicates=True, validation_cells=value
    )
    with pytest.raises(InputError) as raised:
        prepare_dataset("lab", entry, TRACKS["lineage"], 0, files)
    assert (
        str(raised.value)
        == f"lineage_h5ad params: validation_cells must be 'auto' or a fraction in [0, 1), got {value!r}"
    )


CELLTREEQM = apply_schema(
    {"celltreeqm": read_yaml(REPO / "config/methods.yaml")["celltreeqm"]}, "methods", "methods.yaml"
)["celltreeqm"]
TINY = {
    "proj_dim": 8,
    "hidden_dim": 16,
    "n_layers": 1,
    "n_heads": 2,
    "output_dim": 4,
    "steps": 4,
    "quartets_per_step": 32,
    "validation_quartets": 32,
    "validate_every": 2,
    "checkpoint_every": 2,
    "device": "cpu",
}


@pytest.mark.parametrize("cells_to_spare", [True, False])
def test_supervised_celltreeqm_on_a_lab_lineage_selects_on_its_validation_replicate_where_it_has_one(
    tmp_path, cells_to_spare
):
    adata = cells_by_leaf(LEAVES, cells_per_leaf=8)
    if not cells_to_spare:  # leaf A: 2 cells, a single training cell
        adata = adata[~adata.obs_names.isin([f"c{i}" for i in range(2, 8)])].copy()
    entry, files = lineage_entry(tmp_path, adata, NEWICK, leaf_key="clone", replicates=True)
    prepared = str(tmp_path / "prepared.h5ad")
    write_prepared_dataset("lab", entry, TRACKS["lineage"], 0, prepared, files)
    method = CELLTREEQM | {"params": CELLTREEQM["params"] | TINY}
    status = run_method(
        prepared_path=prepared,
        output_path=str(tmp_path / "run/output.h5ad"),
        record_path=str(tmp_path / "run/run.json"),
        dataset_id="lab",
        dataset_entry=entry,
        method_id="celltreeqm",
        method_entry=method,
        variant="supervised",
        seed=0,
        track=TRACKS["lineage"],
    )
    assert status == "ok"
    record = json.loads((tmp_path / "run/run.json").read_text())
    training, facts = record["method_facts"]["training"], record["dataset_facts"]
    if cells_to_spare:
        assert training["selection"] == "validation_replicate" and training["validation_leaves"] == 5
        assert facts["validation_cells"] == AUTO_FRACTION and "note" not in record["method_facts"]
    else:
        why = facts["no_validation_replicate"]
        assert training["selection"] == "holdout_refit" and why.startswith("validation_cells: auto needs 2+")
        assert record["method_facts"]["note"] == (
            f"no validation replicate in this dataset ({why}): steps chosen on held-out leaves of the training "
            "replicate, then retrained on all leaves (selection holdout_refit)"
        )


def test_the_new_default_moves_the_keys_of_entries_that_rely_on_it_only(tmp_path, monkeypatch):
    def with_validation(value):
        return LAB_LINEAGE | {"params": LAB_LINEAGE["params"] | {"validation_cells": value}}

    written = {
        "lab_default": LAB_LINEAGE,
        "lab_zero": with_validation(0),
        "lab_auto": with_validation("auto"),
        "lab_share": with_validation(0.2),
    }
    _, registries = overlay(tmp_path, monkeypatch, lab_datasets=written)
    loaded = registries.datasets
    assert loaded["lab_default"]["params"]["validation_cells"] == "auto"  # the run record names the value
    # the key an entry had before this default (its entry as written, the schema's defaults filled)
    before = {
        dataset: data_key(apply_schema({dataset: copy.deepcopy(entry)}, "datasets", "lab")[dataset])
        for dataset, entry in written.items()
    }
    assert data_key(loaded["lab_zero"]) == before["lab_zero"] and data_key(loaded["lab_share"]) == before["lab_share"]
    assert data_key(loaded["lab_default"]) != before["lab_default"]  # its prepared data change: a new key
    assert data_key(loaded["lab_default"]) == data_key(loaded["lab_auto"]) == before["lab_auto"]
