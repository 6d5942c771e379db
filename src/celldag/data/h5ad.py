"""Any lab's ``.h5ad``: loader ``h5ad`` (representation track) and ``lineage_h5ad`` (lineage track).

Each source is checked before anything is computed from it, and every problem is collected at once
(``celldag validate`` prints them all; a job stops at the first, naming the file and the field).
Representation sources go on to the shared preprocessing (QC, normalisation, HVG, scaling, split),
from raw counts, from log-normalised values, or from both in one file (counts for scVI, the file's
own normalisation for everything else), with the file's own train/val split if it has one. Lineage
sources are pseudo-bulked per leaf and log-transformed if they hold counts; z-scored per feature only
with ``standardize: true``; with an optional replicate pair (seeded cell halves, or the file's own).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.contracts import MIN_LEAVES, ContractError
from celldag.data.leaf_profiles import (
    AUTO,
    given_halves,
    leaf_counts,
    replicate_cells,
    replicate_profiles,
    rows_by_leaf,
    split_halves,
    standardise,
    validation_fraction,
    validation_share,
)
from celldag.errors import InputError
from celldag.lineage.celegans import lineage_path, tree_from_paths
from celldag.lineage.tree import parse_newick, to_newick
from celldag.representation.preprocess import DEFAULTS as PREPROCESS_DEFAULTS
from celldag.representation.preprocess import integer_counts, preprocess, split_params

H5AD_PARAMS = {
    "file": None,  # the name of the .h5ad among the entry's files
    "label_key": None,  # obs column of cell types (required)
    "batch_key": None,  # obs column of batches; null: one batch (batch-correction metrics do not apply)
    "counts_layer": "X",  # where the raw counts are: X, a layer name, or null (none: scVI is not_applicable)
    "lognorm_layer": None,  # where log-normalised values are: X, a layer name, or null (computed from the counts)
    "split_key": None,  # obs column of the file's own split ("train" / "val"); null: a seeded stratified split
}
LINEAGE_PARAMS = {
    "file": None,
    "leaf_key": None,  # obs column naming each cell's leaf; null: every row is a leaf (obs_names)
    "newick": None,  # the name of a Newick file among the entry's files: the true tree over the leaves
    "newick_key": None,  # or: the key of uns holding that tree as a Newick string
    "lineage_key": None,  # or: obs column of C. elegans Sulston names, the tree built from them
    "layer": None,
    "values": "counts",  # counts (or TPM, >= 0): leaf means get log1p; transformed: used as they are
    "replicates": False,  # split each leaf's cells in two seeded halves (train/test layers); needs 2+ cells per leaf
    "replicate_key": None,  # or: obs column of each row's replicate, two values: train = the first in sorted order
    "validation_cells": AUTO,  # share of each leaf's train cells moved to a third replicate (layer validation) on
    #                            which supervised model selection scores; needs replicates or replicate_key. auto:
    #                            0.25 where every leaf has 2+ train cells, else none (uns['no_validation_replicate'])
    "standardize": False,  # z-score each feature with the training half's statistics; false: values as measured
}


class Values(NamedTuple):
    """What a ``values`` setting asks of the source matrix."""

    kind: str  # what messages call the values
    nonnegative: bool
    integer: bool
    meant_for: str  # the input the setting is for, as hints name it


VALUES = {  # h5ad: the role of each matrix it reads; lineage_h5ad: its `values` setting
    "h5ad": {
        "counts": Values("counts", True, True, "raw count"),
        "lognorm": Values("log-normalised values", True, False, "log-normalised"),
    },
    "lineage_h5ad": {
        "counts": Values("counts", True, False, "count or TPM"),
        "transformed": Values("transformed values", False, False, "log-transformed or z-scored"),
    },
}
HINT = {
    "h5ad": "; name it in {name}_layer instead for {meant_for} input",  # how a hint names another setting
    "lineage_h5ad": "; set values: {name} for {meant_for} input",
}


def read_source(path: str | os.PathLike, backed: bool = False):
    """The AnnData in ``path``; one InputError naming the file if it is not a readable h5ad."""
    import anndata

    if not Path(path).is_file():
        raise ContractError(str(path), "file", "not found")
    try:
        return anndata.read_h5ad(os.fspath(path), backed="r" if backed else None)
    except Exception as err:  # noqa: BLE001 - h5py and anndata raise many types for a corrupt file
        raise ContractError(str(path), "file", f"not a readable h5ad file ({type(err).__name__}: {err})") from None


def source_params(loader: str, params: Mapping, files: Mapping[str, str]) -> tuple[dict, dict, str]:
    """(the loader's own params, the preprocessing params, the local path of the h5ad)."""
    defaults = H5AD_PARAMS if loader == "h5ad" else LINEAGE_PARAMS
    own, rest = split_params(params, defaults, loader)
    if loader == "lineage_h5ad" and rest:
        raise InputError(f"lineage_h5ad params: unknown {sorted(rest)}; expected some of {list(LINEAGE_PARAMS)}")
    if not own["file"]:
        raise InputError(f"{loader} params: 'file' must name the .h5ad among the entry's files")
    if own["file"] not in files:
        raise InputError(f"{loader} params: file {own['file']!r} is not among the entry's files {sorted(files)}")
    if loader == "h5ad":
        _check_matrix_params(own)
    else:
        _check_lineage_params(own)
    return own, rest, os.fspath(files[own["file"]])


def _check_matrix_params(own: Mapping) -> None:
    names = [own[f"{role}_layer"] for role in VALUES["h5ad"] if own[f"{role}_layer"] is not None]
    if not names:
        raise InputError(
            "h5ad params: counts_layer and lognorm_layer are both null; name the matrix of either or both "
            "(X or a layer name)"
        )
    if len(set(names)) < len(names):
        raise InputError(
            f"h5ad params: counts_layer and lognorm_layer both name {names[0]!r}, but one matrix cannot "
            "hold both (counts_layer: null if the file has no counts)"
        )


def _check_lineage_params(own: Mapping) -> None:
    if own["values"] not in VALUES["lineage_h5ad"]:
        raise InputError(
            f"lineage_h5ad params: values must be one of {tuple(VALUES['lineage_h5ad'])}, got {own['values']!r}"
        )
    for key in ("replicates", "standardize"):
        if not isinstance(own[key], bool):
            raise InputError(f"lineage_h5ad params: {key} must be true or false, got {own[key]!r}")
    if own["replicates"] and own["replicate_key"] is not None:
        raise InputError(
            "lineage_h5ad params: replicates: true (seeded cell halves) and replicate_key (the file's own "
            "pairs) exclude each other; give one"
        )
    has_pair = own["replicates"] or own["replicate_key"] is not None
    if validation_fraction(own["validation_cells"], "lineage_h5ad", auto=True) not in (AUTO, 0.0) and not has_pair:
        raise InputError(
            "lineage_h5ad params: validation_cells takes a share of each leaf's train cells, so it needs "
            "a replicate pair: replicates: true or replicate_key"
        )


def read_matrices(own: Mapping) -> dict[str, str | None]:
    """{role: layer (None: X)} of the matrices a representation entry reads, for its roles counts / lognorm."""
    return {
        role: None if own[f"{role}_layer"] == "X" else own[f"{role}_layer"]
        for role in VALUES["h5ad"]
        if own[f"{role}_layer"] is not None
    }


def raise_first(problems: list[ContractError]) -> None:
    if problems:
        more = (
            f" (and {len(problems) - 1} more problems: `celldag validate` lists them all)" if len(problems) > 1 else ""
        )
        raise InputError(f"{problems[0]}{more}")


# ---------------------------------------------------------------- representation


def prepare_h5ad(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Prepared representation dataset from a lab's cells × genes h5ad.

    With both matrices, preprocessing runs on the log-normalised one (so HVGs are selected on it, scanpy's
    ``seurat`` flavour) and the counts of the cells and genes it keeps become ``layers["counts"]``.

    Args:
        dataset_id: The dataset's id: the one batch of every cell when ``batch_key`` is null.
        params: The entry's params (``prepare_h5ad.accepted_params``); any other key is refused. The loader's own
            (``H5AD_PARAMS``):

            - ``file``: the name of the .h5ad among the entry's files (required).
            - ``label_key``: obs column of cell types (required).
            - ``batch_key``: obs column of batches; null: one batch (batch-correction metrics do not apply).
            - ``counts_layer``: where the raw counts are: X (the default), a layer name, or null (none: scVI is
              not_applicable).
            - ``lognorm_layer``: where log-normalised values are: X, a layer name, or null (the default: computed
              from the counts). At least one of the two is given, and not the same matrix.
            - ``split_key``: obs column of the file's own split ("train" / "val"); null: a seeded stratified split.

            and the preprocessing params (``celldag.representation.preprocess.DEFAULTS``): ``min_genes``,
            ``min_cells``, ``n_top_genes``, ``val_fraction`` (not with ``split_key``) and ``duplicate_genes``.
        seed: The seed of the train/val split (when the file has none of its own).
        files: The entry's file names → their local paths.

    Returns:
        The prepared representation dataset (AnnData), preprocessed as ``celldag.representation.preprocess``
        describes.
    """
    own, preprocess_params, path = source_params("h5ad", params, files)
    import anndata

    matrices = read_matrices(own)
    values = "lognorm" if "lognorm" in matrices else "counts"
    # backed: when the entry reads layers only, X (often as large, e.g. scIB's normalised copy) stays on disk
    adata = read_source(path, backed=None not in matrices.values())
    try:
        raise_first(representation_problems(adata, path, own, preprocess_params))
        obs = adata.obs if own["batch_key"] else adata.obs.assign(batch=dataset_id)
        data = anndata.AnnData(
            X=_source_matrix(adata, matrices[values]), obs=pd.DataFrame(obs), var=pd.DataFrame(index=adata.var_names)
        )
        if values == "lognorm" and "counts" in matrices:
            data.layers["counts"] = _source_matrix(adata, matrices["counts"])
    finally:
        if adata.isbacked:
            adata.file.close()
    batch_key = own["batch_key"] or "batch"
    prepared = preprocess(
        data, label_key=own["label_key"], batch_key=batch_key, seed=seed, params=preprocess_params, values=values
    )
    rows = data.obs_names.astype(str).get_indexer(prepared.obs_names)
    if "counts" in data.layers:
        _keep_counts(prepared, data, rows, matrix_field(matrices["counts"]))
    if own["split_key"] is not None:
        _keep_split(prepared, data.obs[own["split_key"]].astype(str).to_numpy()[rows], own["split_key"])
    return prepared


def _keep_counts(prepared, source, rows: np.ndarray, field: str) -> None:
    """The source's counts of the cells and genes that preprocessing kept, as ``layers["counts"]``."""
    import anndata

    genes = pd.Index(anndata.utils.make_index_unique(pd.Index(source.var_names.astype(str))))  # preprocess's names
    counts = sparse.csr_matrix(source.layers["counts"])[rows][:, genes.get_indexer(prepared.var_names)]
    prepared.layers["counts"] = integer_counts(counts, field)
    prepared.uns["preprocess"]["counts"] = field


def _keep_split(prepared, split: np.ndarray, key: str) -> None:
    """The file's own train/val split in place of the seeded one (its cells as kept by preprocessing)."""
    from celldag.representation.track import SPLITS

    prepared.obs["split"] = pd.Categorical(split, categories=list(SPLITS))
    record = prepared.uns["preprocess"]
    del record["val_fraction"]
    record |= {"split_key": key, "train_cells": int((split == "train").sum()), "val_cells": int((split == "val").sum())}


def representation_problems(adata, path: str, own: Mapping, preprocess_params: Mapping) -> list[ContractError]:
    """Every problem of a representation source, in reading order."""
    problems: list[ContractError] = []
    if adata.n_obs == 0 or adata.n_vars == 0:
        return [ContractError(path, "X", f"empty matrix ({adata.n_obs} cells × {adata.n_vars} genes)")]
    problems += duplicate_names(adata.obs_names, path, "obs_names", "cell ids")
    if preprocess_params.get("duplicate_genes", "error") == "error":
        problems += duplicate_names(
            adata.var_names, path, "var_names", "gene names", hint="; set duplicate_genes: make_unique to suffix them"
        )
    problems += _column_problems(adata.obs, path, own["label_key"], "label")
    if own["batch_key"] is not None:
        problems += _column_problems(adata.obs, path, own["batch_key"], "batch")
        if own["batch_key"] in adata.obs and adata.obs[own["batch_key"]].nunique() == 1:
            only = adata.obs[own["batch_key"]].iloc[0]
            problems.append(
                ContractError(
                    path,
                    f"obs['{own['batch_key']}']",
                    (
                        f"a single batch ({only!r}): batch-correction metrics need 2 or more; "
                        "set batch_key: null to score bio-conservation only"
                    ),
                )
            )
    if own["split_key"] is not None:
        problems += _split_problems(adata.obs, path, own["split_key"], preprocess_params)
    matrices = read_matrices(own)
    for role, layer in matrices.items():
        problems += _matrix_problems(adata, path, layer, "h5ad", role)
    main = matrices.get("lognorm", matrices.get("counts"))  # the matrix preprocessing reads
    if not problems and _all_constant(_source_matrix(adata, main)):
        problems.append(ContractError(path, matrix_field(main), "no gene varies across cells (every gene is constant)"))
    return problems


def _split_problems(obs: pd.DataFrame, path: str, key: str, preprocess_params: Mapping) -> list[ContractError]:
    problems = _column_problems(obs, path, key, "split")
    if not problems:
        found = sorted(set(obs[key].astype(str)))
        if not set(found) <= {"train", "val"} or "train" not in found:
            problems.append(
                ContractError(
                    path, f"obs['{key}']", f"split values must be 'train' or 'val', some 'train'; found {found[:5]}"
                )
            )
    if "val_fraction" in preprocess_params:
        problems.append(
            ContractError(
                path,
                "params",
                f"split_key ({key!r}) and val_fraction both given: the file's "
                "split is used as it is; drop val_fraction",
            )
        )
    return problems


def _matrix_problems(adata, path: str, layer: str | None, loader: str, setting: str) -> list[ContractError]:
    """A missing layer, or the problems of its values for the loader's ``setting`` (VALUES)."""
    field = matrix_field(layer)
    if layer is not None and layer not in adata.layers:
        return [ContractError(path, field, f"missing (layers: {sorted(adata.layers)})")]
    return _value_problems(_stored_values(_source_matrix(adata, layer)), path, field, loader, setting)


# ---------------------------------------------------------------- lineage


def prepare_lineage_h5ad(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Prepared lineage dataset (leaves × features, the true tree) from a lab's cells- or leaves-by-features h5ad.

    Args:
        dataset_id: The dataset's id (not read).
        params: The entry's params, some of ``LINEAGE_PARAMS`` (any other key is refused):

            - ``file``: the name of the .h5ad among the entry's files (required).
            - ``leaf_key``: obs column naming each cell's leaf; null: every row is a leaf (obs_names).
            - exactly one of ``newick``: the name of a Newick file among the entry's files: the true tree over
              the leaves; ``newick_key``: the key of uns holding that tree as a Newick string; ``lineage_key``:
              obs column of C. elegans Sulston names, the tree built from them.
            - ``layer``: the layer holding the features; null: X.
            - ``values``: ``counts`` (or TPM, >= 0; the default): leaf means get log1p; ``transformed``: used
              as they are.
            - ``replicates``: split each leaf's cells in two seeded halves (train/test layers); needs 2+ cells
              per leaf. Or ``replicate_key``: obs column of each row's replicate, two values (train = the first
              in sorted order).
            - ``validation_cells``: share of each leaf's train cells moved to a third replicate (layer
              validation) for supervised model selection; needs a replicate pair. auto (the default): 0.25
              where every leaf has 2+ train cells, else none (``uns['no_validation_replicate']`` says why).
            - ``standardize``: z-score each feature with the training half's statistics; false (the default):
              values as measured.
        seed: The seed of the replicate halves and the validation share.
        files: The entry's file names → their local paths.

    Returns:
        The prepared lineage dataset (AnnData): one row per leaf, the true tree in ``uns['tree_newick']``,
        with ``train`` / ``test`` (and ``validation``) layers when there is a replicate pair and
        ``layers['counts']`` when the values are integer counts.
    """
    import anndata

    own, _, path = source_params("lineage_h5ad", params, files)
    adata = read_source(path)
    problems, leaf_of_row, tree = lineage_problems(adata, path, own, files)
    raise_first(problems)
    leaves = list(tree.leaf_names)
    features_by_cell = sparse.csc_array(_source_matrix(adata, own["layer"]), dtype=np.float64).T
    pair = None
    if own["replicates"] or own["replicate_key"] is not None:
        pair = (
            split_halves(leaf_of_row, leaves, seed)
            if own["replicates"]
            else given_halves(leaf_of_row, adata.obs[own["replicate_key"]].astype(str).to_numpy(), leaves)
        )
    share, no_validation = validation_share(own["validation_cells"], None if pair is None else pair[0], leaves)
    replicates = {"X": rows_by_leaf(leaf_of_row, leaves)} if pair is None else replicate_cells(*pair, share, seed)
    # the feature filter and z-scores take the statistics of the training half as drawn, its validation cells
    # included: the test replicate and the counts are the same with or without a validation share
    half = {"half": pair[0]} if "validation" in replicates else {}
    profiles = replicate_profiles(features_by_cell, half | replicates)
    if own["values"] == "counts":
        profiles = {name: np.log1p(means) for name, means in profiles.items()}
    # features constant over the training profiles are dropped either way: they have no z-score and carry nothing
    scaled, varies = standardise(*profiles.values())  # the first profiles' statistics: the training half (or X)
    if not varies.any():
        raise InputError(f"{path}: {matrix_field(own['layer'])}: no feature varies across the {len(leaves)} leaves")
    matrices = dict(
        zip(profiles, scaled if own["standardize"] else [values[:, varies] for values in profiles.values()])
    )
    matrices.pop("half", None)
    obs = pd.DataFrame(
        {"n_cells": pd.Series(leaf_of_row).value_counts().reindex(leaves).to_numpy()},
        index=pd.Index(leaves, name="leaf"),
    )
    if "validation" in replicates:
        obs["n_cells_validation"] = [members.size for members in replicates["validation"]]
    layers = {name: values for name, values in matrices.items() if name != "X"}
    if own["values"] == "counts" and _integer_valued(features_by_cell):  # raw counts: count models can read them
        scored = replicates["test" if "test" in replicates else "X"]
        layers["counts"], obs["count_total"] = leaf_counts(features_by_cell, scored, np.flatnonzero(varies))
    prepared = anndata.AnnData(
        X=matrices["X"] if "X" in matrices else (matrices["train"] + matrices["test"]) / 2,
        obs=obs,
        var=pd.DataFrame(index=pd.Index(adata.var_names[varies].astype(str), name="feature")),
        layers=layers,
    )
    prepared.uns["tree_newick"] = to_newick(tree)
    prepared.uns["feature_filter"] = {"features": int(adata.n_vars), "kept": int(varies.sum())}
    prepared.uns["standardized"] = own["standardize"]
    prepared.uns["validation_cells"] = share  # the share drawn (0: no validation replicate) …
    if no_validation is not None:  # … and why there is none: CellTreeQM's selection fallback note names it
        prepared.uns["no_validation_replicate"] = no_validation
    return prepared


def lineage_problems(adata, path: str, own: Mapping, files: Mapping[str, str]):
    """(every problem, each row's leaf name, the true tree) of a lineage source; the last two are None on problems."""
    if adata.n_obs == 0 or adata.n_vars == 0:
        return [ContractError(path, "X", f"empty matrix ({adata.n_obs} rows × {adata.n_vars} features)")], None, None
    problems = duplicate_names(adata.var_names, path, "var_names", "feature names")
    problems += _matrix_problems(adata, path, own["layer"], "lineage_h5ad", own["values"])

    leaf_of_row = None
    if own["leaf_key"] is None and own["lineage_key"] is None:
        problems += duplicate_names(adata.obs_names, path, "obs_names", "leaf names")
        leaf_of_row = np.asarray(adata.obs_names.astype(str))
    elif own["leaf_key"] is not None:
        found = _column_problems(adata.obs, path, own["leaf_key"], "leaf")
        problems += found
        if not found:
            leaf_of_row = adata.obs[own["leaf_key"]].astype(str).to_numpy()

    if sum(own[key] is not None for key in ("newick", "newick_key", "lineage_key")) != 1:
        problems.append(
            ContractError(
                path,
                "params",
                "give exactly one of newick (a tree file), newick_key (a Newick string in uns) and lineage_key",
            )
        )
        return problems, None, None
    if own["newick"] is not None:
        tree, tree_problems = _newick_tree(own["newick"], files)
    elif own["newick_key"] is not None:
        tree, tree_problems = _uns_tree(adata.uns, path, own["newick_key"])
    else:
        tree, tree_problems, names = _sulston_tree(adata.obs, path, own["lineage_key"])
        leaf_of_row = names if own["leaf_key"] is None else leaf_of_row
    problems += tree_problems
    if tree is None or leaf_of_row is None:
        return problems, None, None

    where = files.get(own["newick"], path) if own["newick"] else path
    leaf_field = f"obs['{own['leaf_key']}']" if own["leaf_key"] else "obs_names"
    tree_leaves, data_leaves = set(tree.leaf_names), set(leaf_of_row)
    if tree_leaves != data_leaves:
        only_tree, only_data = sorted(tree_leaves - data_leaves), sorted(data_leaves - tree_leaves)
        problems.append(
            ContractError(
                where,
                "tree leaves",
                (
                    f"differ from {leaf_field} of {path}: {len(only_tree)} tree leaves have no data "
                    f"(first: {only_tree[:3]}), "
                    f"{len(only_data)} data leaves are not in the tree (first: {only_data[:3]})"
                ),
            )
        )
    elif len(tree_leaves) < MIN_LEAVES:
        problems.append(
            ContractError(
                where,
                "tree leaves",
                (f"{len(tree_leaves)} leaves; lineage metrics compare quartets of leaves: {MIN_LEAVES} or more needed"),
            )
        )
    if own["replicates"] and not problems:
        sizes = pd.Series(leaf_of_row).value_counts()
        small = sorted(sizes.index[sizes < 2])
        if small:
            problems.append(
                ContractError(
                    path,
                    leaf_field,
                    (f"{len(small)} leaves have a single cell (first: {small[:3]}); replicates need 2 per leaf"),
                )
            )
    if own["replicate_key"] is not None and not problems:
        problems += _replicate_problems(adata.obs, path, own["replicate_key"], leaf_of_row)
    return problems, (leaf_of_row if not problems else None), (tree if not problems else None)


def _replicate_problems(obs: pd.DataFrame, path: str, key: str, leaf_of_row: np.ndarray) -> list[ContractError]:
    """A replicate column needs two values, and every leaf rows of both."""
    problems = _column_problems(obs, path, key, "replicate")
    if problems:
        return problems
    replicate = obs[key].astype(str).to_numpy()
    values = np.unique(replicate)
    if values.size != 2:
        return [
            ContractError(
                path,
                f"obs['{key}']",
                f"{values.size} replicate values (first: {values[:3].tolist()}); a replicate pair needs exactly 2",
            )
        ]
    pairs = pd.crosstab(leaf_of_row, replicate)
    unpaired = sorted(pairs.index[(pairs == 0).any(axis=1)])
    if unpaired:
        return [
            ContractError(
                path,
                f"obs['{key}']",
                f"{len(unpaired)} leaves lack rows of one replicate "
                f"(first: {unpaired[:3]}); each needs both {values.tolist()}",
            )
        ]
    return []


def _newick_tree(name: str, files: Mapping[str, str]):
    if name not in files:
        return None, [ContractError(name, "file", f"not among the entry's files {sorted(files)}")]
    path = os.fspath(files[name])
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        return None, [ContractError(path, "tree", f"not a valid Newick tree ({err})")]
    return _parsed_tree(text, path, "tree")


def _uns_tree(uns: Mapping, path: str, key: str):
    field = f"uns['{key}']"
    if key not in uns:
        return None, [ContractError(path, field, f"missing tree (uns keys: {sorted(uns)})")]
    if not isinstance(uns[key], str):
        return None, [ContractError(path, field, f"must be a Newick string, got {type(uns[key]).__name__}")]
    return _parsed_tree(uns[key], path, field)


def _parsed_tree(text: str, path: str, field: str):
    """(tree, problems) of a Newick text that must parse and hold more than one leaf."""
    try:
        tree = parse_newick(text)
    except ValueError as err:
        return None, [ContractError(path, field, f"not a valid Newick tree ({err})")]
    if len(tree.leaf_names) == 1:
        return None, [
            ContractError(path, field, f"a single leaf ({tree.leaf_names[0]!r}); a lineage needs {MIN_LEAVES} or more")
        ]
    return tree, []


def _sulston_tree(obs: pd.DataFrame, path: str, key: str):
    """(tree, problems, each row's lineage name) from the Sulston names in ``obs[key]``."""
    problems = _column_problems(obs, path, key, "lineage name")
    if problems:
        return None, problems, None
    names = obs[key].astype(str).str.strip().to_numpy()
    paths, unmatched = {}, []
    for name in dict.fromkeys(names):
        try:
            paths[name] = lineage_path(name)
        except ValueError:
            unmatched.append(name)
    if unmatched:
        return (
            None,
            [
                ContractError(
                    path,
                    f"obs['{key}']",
                    (
                        f"{len(unmatched)} of {len(paths) + len(unmatched)} lineage names match no leaf of the "
                        "C. elegans "
                        f"embryonic lineage (not Sulston names; first: {unmatched[:3]})"
                    ),
                )
            ],
            None,
        )
    try:
        return tree_from_paths(paths), [], names
    except ValueError as err:  # two names for one cell, or an ancestor observed with its descendant
        return None, [ContractError(path, f"obs['{key}']", str(err))], None


# ---------------------------------------------------------------- shared checks


def matrix_field(layer: str | None) -> str:
    """How messages name the matrix of ``layer``: X, or layers['name']."""
    return "X" if layer is None else f"layers['{layer}']"


def unread_matrices(adata, path: str, read: list[str | None]) -> tuple[list[str], list[ContractError]]:
    """(the matrices of the file that the entry does not read, the NaN or infinite values found in them)."""
    fields, problems = [], []
    for other in (None, *adata.layers):
        if other in read or (other is None and adata.X is None):
            continue
        field = matrix_field(other)
        fields.append(field)
        values = _stored_values(_source_matrix(adata, other))
        if np.issubdtype(values.dtype, np.number):
            problems += _nonfinite(values, path, field)
    return fields, problems


def _source_matrix(adata, layer: str | None):
    return adata.X if layer is None else adata.layers[layer]


def _stored_values(matrix) -> np.ndarray:
    return matrix.data if sparse.issparse(matrix) else np.asarray(matrix).ravel()


def _integer_valued(matrix) -> bool:
    values = _stored_values(matrix)
    return bool(np.all(values == np.round(values)))


def _all_constant(matrix) -> bool:
    """Every column constant; sparse stays sparse (an atlas densified would need tens of GB)."""

    def column_wise(values):
        return np.asarray(values.todense() if sparse.issparse(values) else values).ravel()

    return bool((column_wise(matrix.max(axis=0)) == column_wise(matrix.min(axis=0))).all())


def duplicate_names(names: pd.Index, path: str, field: str, what: str, hint: str = "") -> list[ContractError]:
    duplicated = names[names.duplicated()].unique()
    if duplicated.size == 0:
        return []
    return [ContractError(path, field, f"{duplicated.size} duplicated {what} (first: {duplicated[:3].tolist()}){hint}")]


def _column_problems(obs: pd.DataFrame, path: str, key: str | None, role: str) -> list[ContractError]:
    if key is None:
        return [ContractError(path, "params", f"{role} key missing: name the obs column")]
    if key not in obs.columns:
        return [ContractError(path, f"obs['{key}']", f"missing {role} column (obs columns: {list(obs.columns)})")]
    missing = obs[key].isna().to_numpy()
    if missing.any():
        return [
            ContractError(
                path,
                f"obs['{key}']",
                (f"{role} missing for {int(missing.sum())} of {missing.size} rows (first: {obs.index[missing][0]!r})"),
            )
        ]
    return []


def _value_problems(values: np.ndarray, path: str, field: str, loader: str, setting: str) -> list[ContractError]:
    """Problems of a source matrix for the loader's ``setting`` (VALUES), each with a hint where one helps."""
    if not np.issubdtype(values.dtype, np.number):
        return [ContractError(path, field, f"must be numeric, got dtype {values.dtype}")]
    nonfinite = _nonfinite(values, path, field)
    if nonfinite:
        return nonfinite
    expected, problems = VALUES[loader][setting], []
    if expected.nonnegative and values.size and values.min() < 0:
        hint = _values_hint(loader, setting, "nonnegative")
        problems.append(ContractError(path, field, f"negative {expected.kind} (min {values.min():g}){hint}"))
    if expected.integer and not np.issubdtype(values.dtype, np.integer):
        fractional = values != np.round(values)
        if fractional.any():
            problems.append(
                ContractError(
                    path,
                    field,
                    (
                        f"{int(fractional.sum())} non-integer values (e.g. {values[fractional][0]:g}): "
                        "raw counts expected" + _values_hint(loader, setting, "integer")
                    ),
                )
            )
    return problems


def _values_hint(loader: str, setting: str, check: str) -> str:
    """A hint (HINT) at each other setting of the loader without this check: likely the right one."""
    others = [name for name, other in VALUES[loader].items() if name != setting and not getattr(other, check)]
    return "".join(HINT[loader].format(name=name, meant_for=VALUES[loader][name].meant_for) for name in others)


def _nonfinite(values: np.ndarray, path: str, field: str) -> list[ContractError]:
    finite = np.isfinite(values)
    return [] if finite.all() else [ContractError(path, field, f"{int((~finite).sum())} NaN or infinite values")]


# ---------------------------------------------------------------- celldag validate


class SourceReport(NamedTuple):
    problems: list[str]
    warnings: list[str]
    facts: list[tuple[str, str]]


def check_source(loader: str, params: Mapping, files: Mapping[str, str]) -> SourceReport:
    """Every problem of the source file; which matrix the entry reads; NaN or inf in the file's other matrices."""
    own, rest, path = source_params(loader, params, files)
    try:
        adata = read_source(path)
    except InputError as err:  # truncated, or not HDF5: a problem of this dataset, not of the config
        return SourceReport([str(err)], [], [])
    if loader == "h5ad":
        problems, read = representation_problems(adata, path, own, rest), list(read_matrices(own).values())
    else:
        problems, read = lineage_problems(adata, path, own, files)[0], [own["layer"]]
    unread, nonfinite = unread_matrices(adata, path, read)
    not_read = f" (not read: {', '.join(unread)})" if unread else ""
    # A warning, not a problem: the loader never reads these matrices, so the dataset runs as it is. Yet
    # NaN there often means the entry points at the wrong matrix (layer) or the file was written badly.
    return SourceReport(
        [str(problem) for problem in problems],
        [f"{problem} (not read by this entry)" for problem in nonfinite],
        [("matrix checked", ", ".join(map(matrix_field, read)) + not_read)],
    )


# `celldag validate` calls a loader's check_source(params, files), when it has one, before preparing
prepare_h5ad.check_source = partial(check_source, "h5ad")
prepare_lineage_h5ad.check_source = partial(check_source, "lineage_h5ad")
# the entry params each loader reads: any other key is refused when the workflow is parsed, and the
# names earlier versions of the representation loader took say what they became
prepare_h5ad.accepted_params = (*H5AD_PARAMS, *PREPROCESS_DEFAULTS)
prepare_h5ad.renamed_params = {
    "layer": "counts_layer (layer: counts is counts_layer: counts)",
    "values": "lognorm_layer (values: lognorm is counts_layer: null, lognorm_layer: X)",
}
prepare_lineage_h5ad.accepted_params = tuple(LINEAGE_PARAMS)
# defaults that changed after results were keyed by their entries: an entry that leaves one out is read with it
# spelled out (registry.fill_keyed_defaults), so its data and run keys move with its data, while an entry that
# gives a value (validation_cells: 0, as before) keeps its keys
prepare_lineage_h5ad.keyed_defaults = {"validation_cells": AUTO}
