"""Dataset ``celegans_packer2019``: Packer et al. 2019 C. elegans embryo cells (GEO GSE126954) as lineage leaves.

Follows CellTreeBench's supervised loader (celltreeqm.md §A7.3) with celldag's own leaf definition,
because the published 295-leaf tree and cell → leaf table are not public (§A7.2): a leaf is a
specific lineage name seen in the ``lineage`` column, and each leaf becomes two pseudo-bulk
replicates from a seeded split of its cells.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
from scipy import io as sio
from scipy import sparse

from celldag.artifacts import sha256_file
from celldag.data.leaf_profiles import (
    leaf_counts,
    replicate_cells,
    replicate_profiles,
    split_halves,
    standardise,
    validation_fraction,
)
from celldag.lineage.celegans import expand_pattern, lineage_path, tree_from_paths
from celldag.lineage.tree import to_newick

MATRIX = "GSE126954_gene_by_cell_count_matrix.txt.gz"  # MatrixMarket, genes × cells, integer counts
CELL_ANNOTATION = "GSE126954_cell_annotation.csv.gz"  # one row per matrix column
GENE_ANNOTATION = "GSE126954_gene_annotation.csv.gz"  # one row per matrix row: id, gene_short_name
QC_COLUMN = "passed_initial_QC_or_later_whitelisted"
PARAMS = ("min_cells_per_leaf", "min_gene_counts", "standardize", "validation_cells")


def prepare_packer2019(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    """Leaves × genes pseudo-bulk dataset: log1p train/test replicates, the lineage tree in ``uns``.

    ``files`` maps the three GEO file names to local copies, gzip-compressed or not. Genes need
    ``min_gene_counts`` counts over the cells of the kept leaves, and a non-zero train std after
    log1p (one filter for "zero variance across train leaves" and "no division by zero"); with
    ``standardize`` (default false, as for every lineage loader) they are z-scored with the train
    half's statistics. ``X`` is the mean of the two replicates, as for the simulated datasets; ``seed``
    changes only the split of each leaf's cells (and so, rarely, which genes vary across the train half).
    ``validation_cells`` (a fraction, default 0: none) moves that share of each leaf's train-half cells
    into a third replicate, layer ``validation``, on which supervised model selection scores
    (``leaf_profiles.replicate_cells``); the test half is the same with or without it.
    """
    min_cells, min_gene_counts, standardize, validation_cells = _check_params(params)
    paths = _check_files(files)
    source_files = {Path(path).name: sha256_file(path) for path in paths.values()}
    with _open(paths[MATRIX]) as handle:
        counts = sparse.csc_array(sio.mmread(handle))
    with _open(paths[CELL_ANNOTATION]) as handle:
        cells = pd.read_csv(handle, usecols=["lineage", QC_COLUMN], dtype={"lineage": "string"})
    with _open(paths[GENE_ANNOTATION]) as handle:
        genes = pd.read_csv(handle, usecols=["id", "gene_short_name"], dtype="string")
    if counts.shape != (len(genes), len(cells)):
        raise ValueError(
            f"{MATRIX} is {counts.shape[0]} genes × {counts.shape[1]} cells, but {GENE_ANNOTATION} has "
            f"{len(genes)} rows and {CELL_ANNOTATION} {len(cells)}"
        )

    leaf_of_cell, leaf_paths, assignment = assign_cells(cells, min_cells)
    if not leaf_paths:
        raise ValueError(f"no lineage leaf has {min_cells} or more cells in {CELL_ANNOTATION}: {assignment}")
    leaves = sorted(leaf_paths)
    replicates = replicate_cells(*split_halves(leaf_of_cell, leaves, seed), validation_cells, seed)
    profiles = replicate_profiles(counts, replicates)

    used = np.concatenate([members for replicate in replicates.values() for members in replicate])
    totals = counts[:, used].sum(axis=1)
    passed_counts = totals >= min_gene_counts
    logged = [np.log1p(profile[:, passed_counts]) for profile in profiles.values()]
    scaled, varies = standardise(*logged)  # the train half's statistics
    layers = dict(zip(profiles, scaled if standardize else [values[:, varies] for values in logged]))
    train, test = layers["train"], layers["test"]
    kept_genes = genes[passed_counts][varies]
    scored_counts, count_total = leaf_counts(counts, replicates["test"], np.flatnonzero(passed_counts)[varies])

    adata = anndata.AnnData(
        X=(train + test) / 2,
        obs=pd.DataFrame(
            {f"n_cells_{name}": [len(c) for c in members] for name, members in replicates.items()}
            | {"count_total": count_total},
            index=pd.Index(leaves, name="leaf"),
        ),
        var=pd.DataFrame(
            {"gene_id": kept_genes["id"].to_numpy(dtype=str)},
            index=_unique_gene_names(kept_genes),
        ),
        layers=layers | {"counts": scored_counts},
    )
    adata.uns["tree_newick"] = to_newick(tree_from_paths({leaf: leaf_paths[leaf] for leaf in leaves}))
    adata.uns["cell_assignment"] = assignment
    adata.uns["standardized"] = standardize
    adata.uns["gene_filter"] = {
        "genes": len(genes),
        "passed_min_gene_counts": int(passed_counts.sum()),
        "kept": int(varies.sum()),
    }
    adata.uns["source_files"] = source_files
    return adata


def assign_cells(cells: pd.DataFrame, min_cells: int) -> tuple[pd.Series, dict[str, str], dict[str, int]]:
    """Map QC-passed, lineage-annotated cells onto leaves.

    Candidate leaves are the distinct specific annotations (no "x" wildcard, no "/" alternatives,
    a valid Sulston name) that are not ancestors of another candidate. Every annotation is expanded
    over the candidates (an ancestor covers its candidate descendants); a cell is assigned only
    when exactly one leaf matches, so ambiguous cells are dropped, not spread. Leaves with fewer
    than ``min_cells`` cells are then dropped. Returns each cell's leaf (NA if none), the kept
    leaves' division paths, and the cell counts of each step.
    """
    qc_passed = cells[QC_COLUMN].astype("string").str.lower().eq("true").fillna(False).to_numpy(dtype=bool)
    lineage = cells["lineage"].str.strip()
    annotated = qc_passed & lineage.fillna("").ne("").to_numpy(dtype=bool)
    names = sorted(set(lineage[annotated]))

    by_path: dict[str, str] = {}
    for name in names:
        try:  # lineage_path rejects "x" wildcards and "/" alternatives: valid names are the specific ones
            by_path.setdefault(lineage_path(name), name)  # of names spelling one cell, the first sorted wins
        except ValueError:
            continue
    # in sorted order the paths extending p come right after p, so checking the next one suffices
    ordered = sorted(by_path)
    candidates = {
        by_path[path]: path
        for path, after in zip(ordered, ordered[1:] + [None])
        if after is None or not after.startswith(path)
    }

    leaf_of_name: dict[str, str] = {}
    ambiguous_names: set[str] = set()
    for name in names:
        try:
            matches = expand_pattern(name, candidates, include_descendants=True)
        except ValueError:  # not a Sulston name at all: unmatched
            continue
        if len(matches) == 1:
            leaf_of_name[name] = matches[0]
        elif matches:
            ambiguous_names.add(name)

    leaf_of_cell = lineage.where(annotated).map(leaf_of_name).astype("string")
    sizes = leaf_of_cell.value_counts()
    small = set(sizes.index[sizes < min_cells])
    n_annotated = int(annotated.sum())
    n_assigned = int(leaf_of_cell.notna().sum())
    n_ambiguous = int(lineage[annotated].isin(ambiguous_names).sum())
    n_in_small = int(leaf_of_cell.isin(small).sum())
    assignment = {
        "cells": len(cells),
        "qc_passed": int(qc_passed.sum()),
        "annotated": n_annotated,
        "assigned": n_assigned,
        "ambiguous_dropped": n_ambiguous,
        "unmatched": n_annotated - n_assigned - n_ambiguous,
        "in_leaves_below_min_cells": n_in_small,
        "used": n_assigned - n_in_small,
        "candidate_leaves": len(candidates),
    }
    leaf_of_cell = leaf_of_cell.mask(leaf_of_cell.isin(small))
    kept = {leaf: path for leaf, path in candidates.items() if sizes.get(leaf, 0) >= min_cells}
    return leaf_of_cell, kept, assignment


def _unique_gene_names(genes: pd.DataFrame) -> pd.Index:
    names = genes["gene_short_name"].fillna(genes["id"]).to_numpy(dtype=str)
    return anndata.utils.make_index_unique(pd.Index(names, name="gene"))


def _check_params(params: dict) -> tuple[int, int, bool, float]:
    params = {"standardize": False, "validation_cells": 0.0} | params
    missing, unknown = sorted(set(PARAMS) - set(params)), sorted(set(params) - set(PARAMS))
    if missing or unknown:
        raise ValueError(f"celegans_packer2019 params: missing {missing}, unknown {unknown}; expected {list(PARAMS)}")
    min_cells, min_gene_counts = params["min_cells_per_leaf"], params["min_gene_counts"]
    # two cells at least, so that both replicate halves of every leaf are non-empty
    if isinstance(min_cells, bool) or not isinstance(min_cells, int) or min_cells < 2:
        raise ValueError(f"min_cells_per_leaf must be an integer >= 2, got {min_cells!r}")
    if isinstance(min_gene_counts, bool) or not isinstance(min_gene_counts, int) or min_gene_counts < 0:
        raise ValueError(f"min_gene_counts must be an integer >= 0, got {min_gene_counts!r}")
    validation_cells = validation_fraction(params["validation_cells"], "celegans_packer2019")
    return min_cells, min_gene_counts, bool(params["standardize"]), validation_cells


def _check_files(files: Mapping[str, str]) -> dict[str, str]:
    missing = [name for name in (MATRIX, CELL_ANNOTATION, GENE_ANNOTATION) if name not in files]
    if missing:
        raise ValueError(f"celegans_packer2019 needs the GEO files {missing} (got {sorted(files)})")
    return {name: os.fspath(files[name]) for name in (MATRIX, CELL_ANNOTATION, GENE_ANNOTATION)}


@contextmanager
def _open(path: str):
    """Binary handle on a local copy, decompressing when it is gzip (detected by its magic bytes)."""
    with open(path, "rb") as raw:
        is_gzip = raw.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if is_gzip else open(path, "rb") as handle:
        yield handle


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_packer2019.accepted_params = PARAMS
