"""Source → prepared dataset (AnnData). One preparation function per registry ``loader``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np


def prepare_bm_simulator(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    """Simulated lineage: leaves × features, the two replicates as layers, the true tree in ``uns``."""
    import anndata
    import pandas as pd

    from celldag.data.bm import simulate_bm

    simulation = simulate_bm(seed=seed, **params)
    adata = anndata.AnnData(
        X=(simulation.train + simulation.test) / 2,
        obs=pd.DataFrame(index=pd.Index(simulation.leaf_names, name="leaf")),
        var=pd.DataFrame(
            {"feature_kind": pd.Categorical(simulation.feature_kind)},
            index=pd.Index([f"f{i:04d}" for i in range(len(simulation.feature_kind))], name="feature"),
        ),
        layers={"train": simulation.train, "test": simulation.test},
    )
    adata.uns["tree_newick"] = simulation.tree_newick
    adata.uns["spurious_tree_newick"] = simulation.spurious_tree_newick
    return adata


def prepare_cengen_neurons(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    from celldag.data.cengen import prepare_cengen_neurons as prepare

    return prepare(dataset_id, params, seed)


def prepare_packer2019(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    from celldag.data.packer2019 import prepare_packer2019 as prepare

    return prepare(dataset_id, params, seed, files)


def prepare_pbmc68k_batched(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    from celldag.data.pbmc import prepare_pbmc68k_batched as prepare

    return prepare(dataset_id, params, seed, files)


def prepare_pbmc3k(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    from celldag.data.pbmc import prepare_pbmc3k as prepare

    return prepare(dataset_id, params, seed, files)


def prepare_h5ad(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    from celldag.data.h5ad import prepare_h5ad as prepare

    return prepare(dataset_id, params, seed, files)


def prepare_lineage_h5ad(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    from celldag.data.h5ad import prepare_lineage_h5ad as prepare

    return prepare(dataset_id, params, seed, files)


# registry `loader` → function(dataset_id, params, seed, files: {file name: local path}) -> AnnData
LOADERS = {
    "bm_simulator": prepare_bm_simulator,
    "cengen_neurons": prepare_cengen_neurons,
    "packer2019": prepare_packer2019,
    "pbmc68k_batched": prepare_pbmc68k_batched,
    "pbmc3k": prepare_pbmc3k,
    "h5ad": prepare_h5ad,
    "lineage_h5ad": prepare_lineage_h5ad,
}
# representation X is cells × genes (up to tens of thousands of each): float32, as the models train in,
# halves the file and memory; lineage X (leaves × features, small) keeps float64
X_DTYPE = {"lineage": np.float64, "representation": np.float32}


def local_file_problems(entry: dict) -> list:
    """A local source's files must exist and, where the entry gives a sha256, still have that digest."""
    from celldag.contracts import ContractError
    from celldag.io import sha256_file

    problems = []
    for file in entry.get("files", []):
        if "path" not in file:
            continue
        path = Path(file["path"])
        if not path.is_file():
            problems.append(ContractError(str(path), "file", "not found"))
            continue
        digest = sha256_file(path) if file.get("sha256") else None
        if digest != file.get("sha256"):
            problems.append(ContractError(str(path), "sha256", f"the registry gives {file['sha256']}, the file has {digest}"))
    return problems


def check_local_files(entry: dict) -> None:
    problems = local_file_problems(entry)
    if problems:
        raise problems[0]


def prepare_dataset(dataset_id: str, entry: dict, seed: int, files: Mapping[str, str] | None = None):
    """Build the prepared dataset of one registry entry for one seed (ids and track in ``uns``)."""
    check_local_files(entry)
    adata = LOADERS[entry["loader"]](dataset_id, entry["params"], seed, files or {})
    adata.X = np.asarray(adata.X, dtype=X_DTYPE[entry["track"]])
    adata.uns["dataset_id"] = dataset_id
    adata.uns["track"] = entry["track"]
    adata.uns["seed"] = seed
    return adata


def write_prepared_dataset(dataset_id: str, entry: dict, seed: int, path: str, files: Mapping[str, str] | None = None) -> None:
    """Prepare, hold to the dataset contract, and write atomically (no partial file on failure)."""
    from celldag import contracts, io

    adata = prepare_dataset(dataset_id, entry, seed, files)
    contracts.check_prepared_dataset(adata, path)
    io.write_h5ad(adata, path)


def write_dataset_genes(dataset_id: str, entry: dict, path: str, files: Mapping[str, str] | None = None) -> None:
    """The dataset's genes (var_names after preprocessing), one per line: what gene tables are built for.

    Preprocessing keeps the same genes for every seed (only the train/val split depends on it), so
    seed 0 stands for all.
    """
    from celldag import io

    genes = prepare_dataset(dataset_id, entry, 0, files).var_names
    with io.atomic_path(path) as tmp:
        tmp.write_text("".join(f"{gene}\n" for gene in genes))
