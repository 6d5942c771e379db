"""Contracts: a violation gives one ContractError naming the file and the field."""

from __future__ import annotations

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS, check_prepared

from celldag import artifacts, contracts
from celldag.jobs.prepare import prepare_dataset, write_prepared_dataset

ENTRY = {
    "track": "lineage",
    "loader": "celldag.data.bm:prepare_bm_simulator",
    "params": {
        "depth": 3,
        "n_signal": 5,
        "n_noise": 2,
        "n_spurious": 2,
        "max_walk": 2.0,
        "noise_std": 1.0,
        "measurement_std": 0.1,
    },
}


@pytest.fixture
def prepared():
    return prepare_dataset("bm_tiny", ENTRY, TRACKS[ENTRY["track"]], seed=0)


def test_prepared_dataset_passes_its_contract(prepared):
    check_prepared(prepared, "p.h5ad")
    assert prepared.shape == (8, 9)
    assert set(prepared.layers) == {"train", "test", "validation"}
    assert prepared.uns["dataset_id"] == "bm_tiny"
    assert list(prepared.var["feature_kind"].value_counts().sort_index()) == [2, 5, 2]  # noise, signal, spurious


@pytest.mark.parametrize(
    ("break_it", "field"),
    [
        (lambda a: a.uns.pop("tree_newick"), "uns['tree_newick']"),
        (lambda a: a.uns.__setitem__("tree_newick", "((L000,L001),L002);"), "uns['tree_newick']"),
        (lambda a: a.uns.__setitem__("tree_newick", "((L000,L001"), "uns['tree_newick']"),
        (lambda a: a.uns.pop("dataset_id"), "uns['dataset_id']"),
        (lambda a: a.uns.__setitem__("track", "lineages"), "uns['track']"),
        (lambda a: a.layers["test"].__setitem__((2, 3), np.nan), "layers['test']"),
        (lambda a: a.X.__setitem__((0, 0), np.inf), "X"),
        (lambda a: a.layers.pop("train"), "layers"),
        (lambda a: [a.layers.pop("train"), a.layers.pop("test")], "layers['validation']"),
    ],
)
def test_violations_name_file_and_field(prepared, break_it, field):
    break_it(prepared)
    with pytest.raises(contracts.ContractError) as caught:
        check_prepared(prepared, "results/data/bm_tiny/0123456789/seed0.h5ad")
    assert caught.value.path == "results/data/bm_tiny/0123456789/seed0.h5ad"
    assert caught.value.field == field
    assert str(caught.value).startswith(f"results/data/bm_tiny/0123456789/seed0.h5ad: {field}: ")


def test_duplicate_leaf_names(prepared):
    prepared.obs_names = ["L000"] * prepared.n_obs
    with pytest.raises(contracts.ContractError, match=r"obs_names: must be unique; duplicated: \['L000'"):
        check_prepared(prepared, "p.h5ad")


def broken_loader(dataset_id, params, seed, files):
    """A loader whose tree does not match its leaves (named by reference below, as a registry would)."""
    from celldag.data.bm import prepare_bm_simulator

    adata = prepare_bm_simulator(dataset_id, params, seed, files)
    adata.uns["tree_newick"] = "(A,B);"
    return adata


def test_invalid_dataset_leaves_no_file_behind(tmp_path):
    target = tmp_path / "data" / "seed0.h5ad"
    entry = ENTRY | {"loader": "test_contracts:broken_loader"}
    with pytest.raises(contracts.ContractError, match="leaves differ from obs_names"):
        write_prepared_dataset("bm_tiny", entry, TRACKS[entry["track"]], 0, str(target))
    assert not target.parent.exists() or list(target.parent.iterdir()) == []


def test_failed_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError), artifacts.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    artifacts.write_json({"a": 1}, target)
    assert target.read_text() == '{\n  "a": 1\n}\n'
    # the permissions of any new file (umask applied), not mkstemp's private 0600: labs share results
    assert target.stat().st_mode & 0o777 == 0o666 & ~artifacts._UMASK


def test_consumer_side_check_on_read(tmp_path, prepared):
    path = tmp_path / "p.h5ad"
    del prepared.uns["tree_newick"]
    prepared.write_h5ad(path)
    with pytest.raises(contracts.ContractError, match=r"p\.h5ad: uns\['tree_newick'\]: missing"):
        artifacts.read_h5ad(path, check_prepared)
    (tmp_path / "junk.h5ad").write_text("not hdf5")
    with pytest.raises(contracts.ContractError, match=r"junk\.h5ad: file: not a readable h5ad"):
        artifacts.read_h5ad(tmp_path / "junk.h5ad", check_prepared)


def method_output(status="ok", **uns):
    adata = anndata.AnnData(obs=pd.DataFrame(index=["a", "b", "c", "d"]))
    adata.uns.update({"dataset_id": "d", "method_id": "m", "variant": "default", "seed": 0, "status": status, **uns})
    return adata


def test_method_output_contract():
    good = method_output(tree_newick="((a,b),(c,d));")
    contracts.check_method_output(good, "o.h5ad", TRACKS["lineage"])
    with pytest.raises(contracts.ContractError, match=r"uns\['tree_newick'\]: missing"):
        contracts.check_method_output(method_output(), "o.h5ad", TRACKS["lineage"])
    with pytest.raises(contracts.ContractError, match=r"uns\['status_reason'\]: missing"):
        contracts.check_method_output(method_output("failed"), "o.h5ad", TRACKS["lineage"])
    contracts.check_method_output(method_output("failed", status_reason="boom"), "o.h5ad", TRACKS["lineage"])
    good.obsm["X_emb"] = np.ones((4, 2))
    good.obsm["X_emb"][1, 1] = np.nan
    with pytest.raises(
        contracts.ContractError, match=r"obsm\['X_emb'\]: 1 non-finite values \(first at row 1, column 1\)"
    ):
        contracts.check_method_output(good, "o.h5ad", TRACKS["lineage"])
    with pytest.raises(contracts.ContractError, match=r"obsm\['X_emb'\]: missing"):
        contracts.check_method_output(method_output(), "o.h5ad", TRACKS["representation"])


def score_table(**changes):
    table = pd.DataFrame(
        {
            "dataset": "d",
            "track": "lineage",
            "method": "m",
            "variant": "default",
            "seed": [0, 0],
            "metric": ["rf", "quartet_dist"],
            "value": [0.5, 0.25],
            "higher_is_better": False,
            "status": "ok",
        }
    )
    return table.assign(**changes)


def test_score_contract():
    contracts.check_scores(score_table(), "s.parquet")
    with pytest.raises(contracts.ContractError, match=r"s\.parquet: column 'seed': must be integer"):
        contracts.check_scores(score_table(seed=["0", "0"]), "s.parquet")
    with pytest.raises(contracts.ContractError, match=r"column 'value': non-finite value"):
        contracts.check_scores(score_table(value=[np.nan, 1.0]), "s.parquet")
    contracts.check_scores(score_table(value=[np.nan, np.nan], status="failed"), "s.parquet")
    with pytest.raises(contracts.ContractError, match="duplicate score row"):
        contracts.check_scores(score_table(metric=["rf", "rf"]), "s.parquet")
    with pytest.raises(contracts.ContractError, match=r"column 'track': missing"):
        contracts.check_scores(score_table().drop(columns="track"), "s.parquet")
