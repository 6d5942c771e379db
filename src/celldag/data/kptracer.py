"""Datasets ``kptracer_*``: KP-Tracer lineage-traced mouse lung tumours (Yang et al. 2022) as PORCELAN published them.

Four files per tumour in uhlerlab/porcelan's ``data/preprocessed``: ``<tumour>_cells.txt`` (one cell id per
line), ``<tumour>_cell_types.txt`` (each cell's transcriptional state, same order),
``<tumour>_normalized_log_counts.txt`` (comma-separated; a header of gene symbols, the tumour's highly
variable genes, then one row of log-normalised expression per cell, in ``cells.txt`` order; no raw counts)
and ``<tumour>_pruned.nwk`` (the Cas9-barcode tree reconstructed by Cassiopeia: leaves are the cells, quoted
names, many multifurcations).

Every cell is a leaf, so there is one profile per leaf: no replicate pair, no validation replicate, no counts
(settings and methods that need them are not_applicable). The tree is the reference of the lineage scores;
being a reconstruction, it is unresolved where the barcodes are, which the polytomy scores account for. The
transcriptional state is kept as ``obs["cell_type"]``; the high-level partition needs nothing of it: that
setting reads its clades off the reference tree itself (``celldag.lineage.supervision``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from celldag.contracts import ContractError
from celldag.errors import InputError
from celldag.lineage.tree import parse_newick, to_newick

KPTRACER_DEFAULTS = {
    "tumour": None,  # the file prefix, e.g. 3513_NT_T4
    "standardize": False,  # z-score each gene over the cells; false: the published values, as every lineage loader
}
SUFFIXES = ("cells.txt", "cell_types.txt", "normalized_log_counts.txt", "pruned.nwk")


def prepare_kptracer(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Prepared lineage dataset: cells × genes as published, the barcode tree over the cells in ``uns``.

    ``seed`` is unused: nothing is drawn (the track orders the leaves by seed afterwards).
    """
    import anndata

    from celldag.data.leaf_profiles import standardise

    del dataset_id, seed
    tumour, standardize = _check_params(params)
    cells_path, types_path, expression_path, tree_path = (_path(files, f"{tumour}_{suffix}") for suffix in SUFFIXES)
    cells = _lines(cells_path)
    cell_types = _lines(types_path)
    if len(cell_types) != len(cells):
        raise ContractError(
            types_path,
            "lines",
            f"{len(cell_types)} states for the {len(cells)} cells of {os.path.basename(cells_path)}",
        )
    if len(set(cells)) != len(cells):
        raise ContractError(cells_path, "cell ids", f"{len(cells) - len(set(cells))} repeated")
    expression = pd.read_csv(expression_path)
    values = expression.to_numpy(dtype=np.float64)
    if values.shape[0] != len(cells):
        raise ContractError(
            expression_path,
            "rows",
            f"{values.shape[0]} rows for the {len(cells)} cells of {os.path.basename(cells_path)}",
        )
    if not np.isfinite(values).all():
        raise ContractError(expression_path, "values", "NaN or infinite values")
    try:
        tree = parse_newick(Path(tree_path).read_text())
    except ValueError as err:
        raise ContractError(tree_path, "tree", f"not a valid Newick tree ({err})") from None
    if set(tree.leaf_names) != set(cells):
        only_tree, only_cells = sorted(set(tree.leaf_names) - set(cells)), sorted(set(cells) - set(tree.leaf_names))
        raise ContractError(
            tree_path,
            "tree leaves",
            (
                f"differ from the cells of {os.path.basename(cells_path)}: {len(only_tree)} only in the tree (first: "
                f"{only_tree[:3]}), {len(only_cells)} only in the cells (first: {only_cells[:3]})"
            ),
        )

    # genes constant over the cells carry nothing and have no z-score: dropped either way, as lineage_h5ad does
    scaled, varies = standardise(values)
    prepared = anndata.AnnData(
        X=scaled[0] if standardize else values[:, varies],
        obs=pd.DataFrame({"cell_type": pd.Categorical(cell_types)}, index=pd.Index(cells, name="leaf")),
        var=pd.DataFrame(index=pd.Index(expression.columns[varies].astype(str), name="gene")),
    )
    prepared.uns["tree_newick"] = to_newick(tree)
    prepared.uns["feature_filter"] = {"features": int(values.shape[1]), "kept": int(varies.sum())}
    prepared.uns["standardized"] = standardize
    prepared.uns["no_validation_replicate"] = "one cell per leaf: no replicate to draw validation cells from"
    prepared.uns["kptracer"] = {"tumour": tumour, "cell_types": int(prepared.obs["cell_type"].nunique())}
    return prepared


def _check_params(params: Mapping) -> tuple[str, bool]:
    unknown = sorted(set(params) - set(KPTRACER_DEFAULTS))
    if unknown:
        raise InputError(f"kptracer params: unknown {unknown}; expected some of {list(KPTRACER_DEFAULTS)}")
    settings = {**KPTRACER_DEFAULTS, **params}
    if not isinstance(settings["tumour"], str) or not settings["tumour"]:
        raise InputError(f"kptracer params: tumour must name the tumour's file prefix, got {settings['tumour']!r}")
    if not isinstance(settings["standardize"], bool):
        raise InputError(f"kptracer params: standardize must be true or false, got {settings['standardize']!r}")
    return settings["tumour"], settings["standardize"]


def _path(files: Mapping[str, str], name: str) -> str:
    if name not in files:
        raise InputError(f"kptracer needs the file {name} among the entry's files (got {sorted(files)})")
    return os.fspath(files[name])


def _lines(path: str) -> list[str]:
    """The lines of a text file, stripped, without the newline that ends it."""
    return [line.strip() for line in Path(path).read_text().strip().splitlines()]


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_kptracer.accepted_params = tuple(KPTRACER_DEFAULTS)
