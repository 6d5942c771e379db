"""Dataset ``cengen_neurons``: CeNGEN neuron-class expression on the embryonic C. elegans lineage.

CeNGEN (Taylor et al. 2021) gives one L4 expression profile per neuron class; WormAtlas's cell table
gives each cell's Sulston lineage name. Both ship inside the ``wormneuroatlas`` package (GPL-3.0),
which is used only at run time: its files are read from the installed package, never copied here.
Each class becomes one leaf, placed at the lineage path of one representative cell.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from celldag.artifacts import sha256_file
from celldag.lineage.celegans import lineage_path, tree_from_paths
from celldag.lineage.tree import to_newick

PACKAGE = "wormneuroatlas"
EXPRESSION_FILE, LINEAGE_FILE = "cengen.h5", "cell_lineage.txt"
# founders that never name a post-embryonic blast cell, so "AB.arppaappa" can only be a mistyped
# "AB arppaappa" (the table spells ALML and D that way); "P1.apa" is the larval P1, not the embryo's
_TYPO_DOT = re.compile(r"^(P0|AB|EMS|MS|E|C|D)\.(?=[aplrdv])")
# "DB1/3", "AVFL/R": alternative identities of one cell (Sulston's numbering or side of it varies
# between animals); the row describes the first-named one, so each "/alternative" is dropped
_ALTERNATIVE = re.compile(r"/(?:\d+|[LR]$)")
# sub-type classes: "RMD_DV" holds RMDDL/R and RMDVL/R (stem "RMDD", so RMDDL stands for it), while
# "RMD_LR" holds the lateral pair RMDL/R (stem "RMDL")
_SUBTYPE = re.compile(r"^(?P<stem>.+)_(?P<axis>DV|LR)$")


def prepare_cengen_neurons(dataset_id: str, params: dict, seed: int, files: Mapping[str, str] | None = None):
    """One log1p(TPM) profile per embryonically derived neuron class, with its lineage tree.

    params: ``threshold`` (1–4, CeNGEN's expression confidence threshold, 1 most liberal),
    ``n_top_genes`` (the most variable genes across the kept classes; None, the default, keeps all)
    and ``standardize`` (default false, as for every lineage loader: z-score each gene).
    ``seed`` and ``files`` are unused: the data are fixed, nothing is drawn, and the files come with the
    installed wormneuroatlas package. ``obs`` holds each leaf's cell and
    lineage name; ``uns`` the mapping of every class, the dropped classes with reasons, and the sha256
    of both source files.
    """
    import anndata
    import h5py
    import pandas as pd

    unknown = set(params) - {"threshold", "n_top_genes", "standardize"}
    if unknown:
        raise ValueError(
            f"{dataset_id}: unknown params {sorted(unknown)} (expected threshold, n_top_genes, standardize)"
        )
    standardize = bool(params.get("standardize", False))
    threshold, n_top_genes = params.get("threshold", 1), params.get("n_top_genes")
    if threshold not in (1, 2, 3, 4):
        raise ValueError(f"{dataset_id}: params['threshold'] must be 1, 2, 3 or 4, got {threshold!r}")
    if n_top_genes is not None and (not isinstance(n_top_genes, int) or n_top_genes < 1):
        raise ValueError(f"{dataset_id}: params['n_top_genes'] must be a positive integer or None, got {n_top_genes!r}")
    expression_file, lineage_table = data_file(EXPRESSION_FILE), data_file(LINEAGE_FILE)
    with h5py.File(expression_file, "r") as h5:
        classes = [name.decode() for name in h5["neuron_ids"][:]]
        genes = np.array([name.decode() for name in h5[f"gene_names_th{threshold}"][:]])
        wormbase_ids = np.array([name.decode() for name in h5[f"gene_wbids_th{threshold}"][:]])
        tpm = h5[f"tpm_th{threshold}"][:].astype(np.float64)

    paths, mapping, dropped = map_classes(classes, read_cell_lineage(lineage_table))
    leaves = list(paths)
    rows = [classes.index(leaf) for leaf in leaves]
    values, columns = variable_profiles(np.log1p(tpm[rows]), genes, n_top_genes, standardize)
    obs = pd.DataFrame.from_dict({leaf: mapping[leaf] for leaf in leaves}, orient="index")
    adata = anndata.AnnData(
        X=values,
        obs=obs.rename_axis("neuron_class"),
        var=pd.DataFrame({"wormbase_id": wormbase_ids[columns]}, index=pd.Index(genes[columns], name="gene")),
    )
    adata.var_names_make_unique()
    adata.uns["standardized"] = standardize
    adata.uns["tree_newick"] = to_newick(tree_from_paths(paths))
    adata.uns["leaf_mapping"] = mapping
    adata.uns["dropped_classes"] = dropped
    adata.uns["source_files"] = {path.name: sha256_file(path) for path in (expression_file, lineage_table)}
    return adata


def data_file(name: str) -> Path:
    """A file of the installed ``wormneuroatlas`` data folder, located without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)  # importing it would cost about a second
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{name}: the {PACKAGE} package is not installed (pip install {PACKAGE})")
    path = Path(spec.submodule_search_locations[0]) / "data" / name
    if not path.is_file():
        raise FileNotFoundError(f"{name} not found in the installed {PACKAGE} package (looked for {path})")
    return path


def read_cell_lineage(path: Path) -> dict[str, str]:
    """Cell name → lineage name from WormAtlas's cell table, first row of each cell kept.

    The table repeats some rows (ADFL twice) and has a few mistyped ones, repaired here:
    "AB.arppaappa" (ALML) and "P0.pppa" (D) use a dot for the space; "/"-joined names keep
    their first identity ("DB1/3" → DB1).
    """
    lineage: dict[str, str] = {}
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 2:
            continue
        cell = _ALTERNATIVE.sub("", fields[0].strip())
        lineage.setdefault(cell, _TYPO_DOT.sub(r"\1 ", fields[1].strip()))
    return lineage


def map_classes(classes: list[str], lineage: dict[str, str]) -> tuple[dict[str, str], dict[str, dict], dict[str, str]]:
    """Place each neuron class at one cell's lineage path.

    Returns (kept class → lineage path, class → {"cell", "lineage"} for every class given a cell,
    dropped class → reason). The cell standing for a class is its left cell (ADA → ADAL; for
    dorsal/ventral pairs the dorsal-left or ventral-left one, CEP → CEPDL), else the cell named
    like the class (AVG, ASEL), else its dorsal cell (RME_DV → RMED), else its lowest-numbered cell
    that is not a class of its own (DB → DB2, because DB01 is a class; DB01 → DB1). Dropped:
    sub-type classes tied to no single cell (VD_DD, VC_4_5, AWC_ON/OFF), classes of post-embryonic
    cells (P-, Q-, V-, T-, G-, K-derived), classes sharing a path, and classes whose path is an
    ancestor of another's (the descendant is kept).
    """
    claimed = {_numbered(name) for name in classes}
    free_numbers: dict[str, list[int]] = {}  # stem → numbers of its cells that are not a class of their own
    for stem, number in sorted({_numbered(cell) for cell in lineage} - claimed - {None}):
        free_numbers.setdefault(stem, []).append(number)
    mapping, dropped, paths = {}, {}, {}
    for name in classes:
        if "_" in name and not _SUBTYPE.match(name):
            dropped[name] = "sub-type class tied to no single cell (pooled cells, or a side chosen anew in each animal)"
            continue
        cell = _representative_cell(name, lineage, free_numbers)
        if cell is None:
            dropped[name] = "no cell of this class in the lineage table"
            continue
        mapping[name] = {"cell": cell, "lineage": lineage[cell]}
        try:
            paths[name] = lineage_path(lineage[cell])
        except ValueError:
            dropped[name] = f"{cell} ({lineage[cell]}) is not an embryonic lineage name"
    for name, reason in _path_conflicts(paths).items():
        dropped[name] = reason
        del paths[name]
    return paths, mapping, dropped


def _numbered(name: str) -> tuple[str, int] | None:
    """("DB", 1) for class "DB01": the numbered cell a class is named after."""
    match = re.fullmatch(r"(?P<stem>.*\D)(?P<number>\d+)", name)
    return (match["stem"], int(match["number"])) if match else None


def _representative_cell(name: str, lineage: dict[str, str], free_numbers: dict[str, list[int]]) -> str | None:
    subtype = _SUBTYPE.match(name)
    stem = subtype["stem"] + subtype["axis"][0] if subtype else name
    candidates = [stem + "L", stem + "DL", stem + "VL", stem, stem + "D"]
    if own := _numbered(name):
        candidates.append(f"{own[0]}{own[1]}")  # class "DB01" is cell DB1
    candidates += [f"{stem}{number}" for number in free_numbers.get(stem, [])[:1]]
    return next((cell for cell in candidates if cell in lineage), None)


def _path_conflicts(paths: dict[str, str]) -> dict[str, str]:
    """Classes to drop: those sharing a path, and those whose path is an ancestor of another's."""
    conflicts = {}
    for name, path in paths.items():
        for other, other_path in paths.items():
            if other == name or not other_path.startswith(path):
                continue
            relation = "shares its lineage path with" if other_path == path else "is a lineage ancestor of"
            conflicts[name] = f"{relation} class {other}"
    return conflicts


def variable_profiles(log_expression: np.ndarray, genes: np.ndarray, n_top_genes: int | None, standardize: bool):
    """The most variable genes, z-scored (ddof=1) when ``standardize``; returns (values, kept gene columns).

    Ties in variance are broken by gene name, so the selection does not depend on the file's gene order.
    """
    variance = log_expression.var(axis=0, ddof=1)
    columns = np.flatnonzero(variance > 0)  # a constant gene has no z-score
    if n_top_genes is not None:
        order = np.lexsort((genes[columns], -variance[columns]))
        columns = np.sort(columns[order[:n_top_genes]])
    kept = log_expression[:, columns]
    return ((kept - kept.mean(axis=0)) / kept.std(axis=0, ddof=1) if standardize else kept), columns


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_cengen_neurons.accepted_params = ("threshold", "n_top_genes", "standardize")
