"""Source → prepared dataset (AnnData) by the dataset's ``loader``, held to its track's contract.

A loader is a function ``(dataset_id, params, seed, files: {file name: local path}) -> AnnData``,
named in config/datasets.yaml by its entry point (``package.module:function``); the shipped ones live in
``celldag.data``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from celldag import artifacts, contracts, extensions
from celldag.artifacts import sha256_file
from celldag.contracts import ContractError
from celldag.tracks import Track


def local_file_problems(entry: dict, digests: Mapping[str, str] | None = None) -> list:
    """A local source's files must exist and, where the entry gives a sha256, still have that digest.

    ``digests``: sha256 by path already computed (a lab's file may be gigabytes: hash it once).
    """
    digests = digests or {}

    problems = []
    for file in entry.get("files", []):
        if "path" not in file:
            continue
        path = Path(file["path"])
        if not path.is_file():
            problems.append(ContractError(str(path), "file", "not found"))
            continue
        digest = (digests.get(str(path)) or sha256_file(path)) if file.get("sha256") else None
        if digest != file.get("sha256"):
            problems.append(
                ContractError(str(path), "sha256", f"the registry gives {file['sha256']}, the file has {digest}")
            )
    return problems


def check_local_files(entry: dict, digests: Mapping[str, str] | None = None) -> None:
    problems = local_file_problems(entry, digests)
    if problems:
        raise problems[0]


def prepare_dataset(dataset_id: str, entry: dict, track: Track, seed: int, files: Mapping[str, str] | None = None):
    """Build the prepared dataset of one registry entry for one seed (ids and track in ``uns``)."""
    files = files or {}
    digests = {str(path): sha256_file(path) for path in files.values() if Path(path).is_file()}
    check_local_files(entry, digests)
    adata = extensions.load(entry["loader"])(dataset_id, entry["params"], seed, files)
    if track.arrange is not None:
        adata = track.call("arrange", adata, seed)
    adata.X = np.asarray(adata.X, dtype=track.x_dtype)
    adata.uns["dataset_id"] = dataset_id
    adata.uns["track"] = entry["track"]
    adata.uns["seed"] = seed
    adata.uns[SOURCE_FILES] = source_files(files, digests)
    return adata


# uns key: the files the loader was given, each with its path and sha256. Not the loaders' own
# "source_files" ({name: sha256}, e.g. CeNGEN's package files), which this must not overwrite.
SOURCE_FILES = "loader_inputs"


def source_files(files: Mapping[str, str], digests: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """{file name: {path, sha256}} of a dataset's source files (downloads, a lab's h5ad).

    Runs copy these digests into their records, so ``celldag audit`` can name a download or lab file
    that changed after the dataset was prepared. Keyed by file name: h5ad keys cannot hold a path's '/'.
    """
    return {name: {"path": str(path), "sha256": digests[str(path)]} for name, path in sorted(files.items())}


def write_prepared_dataset(
    dataset_id: str, entry: dict, track: Track, seed: int, path: str, files: Mapping[str, str] | None = None
) -> None:
    """Prepare, hold to the dataset contract, and write atomically (no partial file on failure)."""
    adata = prepare_dataset(dataset_id, entry, track, seed, files)
    contracts.check_prepared_dataset(adata, path, entry["track"], track)
    artifacts.write_h5ad(adata, path)


def write_dataset_genes(prepared_path: str, path: str) -> None:
    """The dataset's genes (var_names after preprocessing), one per line: what gene tables are built for.

    Preprocessing keeps the same genes for every seed (only the train/val split depends on it), so
    the prepared seed-0 file stands for all.
    """
    import anndata

    genes = anndata.read_h5ad(prepared_path, backed="r").var_names
    with artifacts.atomic_path(path) as tmp:
        tmp.write_text("".join(f"{gene}\n" for gene in genes))
