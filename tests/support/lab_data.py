"""A lab's lineage data as the tests build it: leaves with a Newick tree, cells per leaf, a local h5ad entry, a
registry overlay (test_bad_inputs, test_lab_h5ad, test_lab_path, test_lab_validation, test_registry_overlays and the
end-to-end lab path use them)."""

from __future__ import annotations

from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import yaml
from conftest import REPO

from celldag.registry import load_config

LEAVES = ["A", "B", "C", "D", "E", "F"]


NEWICK = "((A,B),(C,D),(E,F));"


def leaves(names=LEAVES, seed: int = 0) -> anndata.AnnData:
    rng = np.random.default_rng(seed)
    return anndata.AnnData(
        X=rng.normal(size=(len(names), 5)),
        obs=pd.DataFrame(index=list(names)),
        var=pd.DataFrame(index=[f"f{i}" for i in range(5)]),
    )


def lineage_entry(tmp_path, adata, newick=None, **params):
    adata.write_h5ad(tmp_path / "cells.h5ad")
    files = [{"name": "cells.h5ad", "path": str(tmp_path / "cells.h5ad")}]
    if newick is not None:
        (tmp_path / "tree.nwk").write_text(newick)
        files.append({"name": "tree.nwk", "path": str(tmp_path / "tree.nwk")})
        params = {"newick": "tree.nwk"} | params
    entry = {
        "track": "lineage",
        "loader": "celldag.data.h5ad:prepare_lineage_h5ad",
        "source": "local",
        "files": files,
        "params": {"file": "cells.h5ad"} | params,
    }
    return entry, {f["name"]: f["path"] for f in files}


def cells_by_leaf(leaves, cells_per_leaf=4, n_features=6, seed=0):
    """Counts whose mean per leaf is known: leaf i has mean i + 1 in feature 0, feature 1 counts the cell index."""
    rng = np.random.default_rng(seed)
    leaf_of_cell = np.repeat(leaves, cells_per_leaf)
    x = rng.poisson(2.0, size=(leaf_of_cell.size, n_features)).astype(np.float32)
    x[:, 0] = np.repeat(np.arange(len(leaves)) + 1, cells_per_leaf)
    obs = pd.DataFrame({"clone": leaf_of_cell}, index=[f"c{i}" for i in range(leaf_of_cell.size)])
    return anndata.AnnData(X=x, obs=obs, var=pd.DataFrame(index=[f"g{i}" for i in range(n_features)]))


LAB_LINEAGE = {
    "track": "lineage",
    "source": "local",
    "loader": "celldag.data.h5ad:prepare_lineage_h5ad",
    "description": "x",
    "license": "x",
    "files": [{"name": "cells.h5ad", "path": "cells.h5ad"}],
    "params": {"file": "cells.h5ad", "newick_key": "tree"},
}


def overlay(tmp_path, monkeypatch, *, lab_datasets=None, lab_methods=None, **config) -> tuple[dict, object]:
    """load_config with the lab's files lab/datasets.yaml and lab/methods.yaml, paths relative to tmp_path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lab").mkdir(exist_ok=True)
    registries = {}
    for kind, entries in (("datasets", lab_datasets), ("methods", lab_methods)):
        if entries is not None:
            (tmp_path / f"lab/{kind}.yaml").write_text(yaml.safe_dump(entries))
            registries[kind] = [f"lab/{kind}.yaml"]
    return load_config(BASE | {"registries": registries} | config, "lab.yaml", root=REPO)


def lab_dataset(workdir: Path, dataset_id: str, adata: anndata.AnnData, **params) -> None:
    """Register ``adata`` (leaves × features, the tree NEWICK over them) as a lineage_h5ad dataset of ``workdir``."""
    (workdir / dataset_id).mkdir()
    entry, _ = lineage_entry(workdir / dataset_id, adata, NEWICK, **({"values": "transformed"} | params))
    registry = workdir / "config/datasets.yaml"
    datasets = yaml.safe_load(registry.read_text())
    datasets[dataset_id] = entry | {"description": "a lab's lineage", "license": "test"}
    registry.write_text(yaml.safe_dump(datasets))


BASE = {"datasets": ["bm_default"], "methods": ["nj_raw"], "seeds": [0]}
