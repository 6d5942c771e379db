"""Source AnnData → prepared dataset of the representation track (cells × genes, labels, batches, split).

Steps, in scanpy's standard order: QC (cells with few detected genes, genes detected in few cells),
normalize_total(1e4) + log1p into ``layers["lognorm"]`` (or the source's own log-normalised values),
optional batch-aware HVG selection, removal of constant genes, ``X`` = per-gene z-score clipped at
±10, and a seeded label-stratified train/val split. ``uns["preprocess"]`` records each step's sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.errors import InputError

if TYPE_CHECKING:
    import anndata

DEFAULTS = {
    "min_genes": 10,  # a cell needs this many detected genes: drops empty or broken barcodes only
    "min_cells": 3,  # a gene must be detected in this many cells (Seurat's usual 3)
    "n_top_genes": None,  # None: keep every QC-passed gene
    "val_fraction": 0.2,
    "duplicate_genes": "error",  # or make_unique: suffix repeated gene names (-1, -2, …) and count them
}
DUPLICATE_GENES = ("error", "make_unique")
VALUES = ("counts", "lognorm")  # what the source matrix handed to preprocess() holds
TARGET_SUM = 1e4
MAX_VALUE = 10.0
# random streams: the split and a loader's synthetic design must not share draws even when both seeds are equal
SPLIT_STREAM, SYNTHETIC_BATCH_STREAM = 1, 2


def preprocess(
    adata: anndata.AnnData, *, label_key: str, batch_key: str, seed: int, params: Mapping, values: str = "counts"
) -> anndata.AnnData:
    """Prepared representation dataset from ``adata``, whose ``X`` holds ``values`` ("counts" or "lognorm").

    Counts must be non-negative integers (any dtype); log-normalised values finite and >= 0. Every
    cell needs a label and a batch in ``obs[label_key]`` / ``obs[batch_key]``: a missing one is an
    input error, never silently dropped. Only label, batch and split are kept in ``obs``.
    """
    import anndata
    import scanpy as sc

    settings = check_params(params)
    if values not in VALUES:
        raise ValueError(f"values must be one of {VALUES}, got {values!r}")
    obs = pd.DataFrame(
        {
            "label": complete_column(adata.obs, label_key, "label"),
            "batch": complete_column(adata.obs, batch_key, "batch"),
        },
        index=pd.Index(adata.obs_names.astype(str), name="cell"),
    )
    matrix = integer_counts(adata.X, "counts") if values == "counts" else _lognorm_input(adata.X)
    genes = pd.Index(adata.var_names.astype(str), name="gene")
    if settings["duplicate_genes"] == "error" and genes.has_duplicates:
        duplicated = genes[genes.duplicated()].unique()[:3].tolist()
        raise InputError(
            f"var_names: {int(genes.duplicated().sum())} duplicated gene names (first: {duplicated}); "
            "set duplicate_genes: make_unique to suffix them"
        )
    data = anndata.AnnData(X=matrix, obs=obs, var=pd.DataFrame(index=anndata.utils.make_index_unique(genes)))
    record = {
        "values": values,
        "cells_in": data.n_obs,
        "genes_in": data.n_vars,
        "duplicate_gene_names_renamed": int(genes.duplicated().sum()),
    }

    cells_ok, _ = sc.pp.filter_cells(data, min_genes=settings["min_genes"], inplace=False)
    data = data[cells_ok].copy()
    genes_ok, _ = sc.pp.filter_genes(data, min_cells=settings["min_cells"], inplace=False)
    data = data[:, genes_ok].copy()
    if data.n_obs == 0 or data.n_vars == 0:
        raise ValueError(
            f"QC left {data.n_obs} cells × {data.n_vars} genes (min_genes {settings['min_genes']}, "
            f"min_cells {settings['min_cells']})"
        )
    record |= {
        "min_genes": settings["min_genes"],
        "min_cells": settings["min_cells"],
        "cells_after_qc": data.n_obs,
        "genes_after_qc": data.n_vars,
    }

    if values == "counts":
        data.layers["counts"] = data.X
        # totals over the QC-passed genes, before HVG selection (scanpy's order): lognorm = log1p(count / total · 1e4)
        data.X = log_normalised(data.X)
        record["target_sum"] = TARGET_SUM
    data.layers["lognorm"] = data.X

    record |= _select_hvg(data, settings["n_top_genes"], has_counts=values == "counts")
    data = data[:, data.var["highly_variable"]].copy() if "highly_variable" in data.var else data
    data.var = data.var.iloc[:, :0]  # the HVG statistics are not part of the prepared dataset

    constant = ~varying_genes(data.layers["lognorm"])
    data = data[:, ~constant].copy()
    if data.n_vars == 0:
        raise ValueError("no gene varies across the kept cells")
    record |= {"zero_variance_genes_dropped": int(constant.sum()), "cells": data.n_obs, "genes": data.n_vars}
    data.X = z_scored(data.layers["lognorm"])

    data.obs["label"] = data.obs["label"].cat.remove_unused_categories()
    data.obs["batch"] = data.obs["batch"].cat.remove_unused_categories()
    data.obs["split"] = pd.Categorical(
        stratified_split(data.obs["label"], settings["val_fraction"], seed), categories=["train", "val"]
    )
    record |= {
        "max_value": MAX_VALUE,
        "val_fraction": settings["val_fraction"],
        "train_cells": int((data.obs["split"] == "train").sum()),
        "val_cells": int((data.obs["split"] == "val").sum()),
    }
    data.uns["preprocess"] = record
    data.uns["label_key"], data.uns["batch_key"] = label_key, batch_key
    return data


def stratified_split(labels, val_fraction: float, seed: int) -> np.ndarray:
    """ "train"/"val" per cell: per label of n cells, a seeded round(val_fraction · n), at most n − 1, go to val.

    Every label keeps at least one train cell, so singletons always train. The same labels and seed
    give the same split; labels are visited in sorted order, all from one generator.
    """
    rng = np.random.default_rng([SPLIT_STREAM, seed])
    codes = pd.Categorical(labels).codes
    is_val = np.zeros(codes.size, dtype=bool)
    for code in np.unique(codes):
        members = rng.permutation(np.flatnonzero(codes == code))
        n_val = min(int(val_fraction * members.size + 0.5), members.size - 1)
        is_val[members[:n_val]] = True
    if is_val.all() or not is_val.any():
        raise ValueError(
            f"val_fraction {val_fraction} leaves the {'train' if is_val.all() else 'val'} split empty "
            f"({codes.size} cells)"
        )
    return np.where(is_val, "val", "train")


def integer_counts(matrix, where: str) -> sparse.csr_matrix:
    """``matrix`` as CSR int32 after checking that it holds non-negative integers (``where`` names it in errors)."""
    counts = sparse.csr_matrix(matrix)
    stored = counts.data
    if not np.issubdtype(stored.dtype, np.integer):
        non_integer = ~np.isfinite(stored) | (stored != np.round(stored))
        if non_integer.any():
            raise ValueError(
                f"{where} must hold raw integer counts, but {int(non_integer.sum())} values are not "
                f"integers (e.g. {stored[non_integer][0]!r}): normalised data cannot be used as counts"
            )
    if stored.size and stored.min() < 0:
        raise ValueError(f"{where} must hold raw integer counts, but has negative values (min {stored.min()!r})")
    if stored.size and stored.max() > np.iinfo(np.int32).max:
        raise ValueError(f"{where}: count {stored.max()!r} does not fit int32")
    return counts.astype(np.int32)


def complete_column(obs: pd.DataFrame, key: str, role: str) -> pd.Categorical:
    """``obs[key]`` as a categorical of strings; a missing column or value is an input error."""
    if key not in obs.columns:
        raise ValueError(f"obs has no {role} column '{key}' (columns: {list(obs.columns)})")
    column = obs[key]
    missing = column.isna().to_numpy()
    if missing.any():
        raise ValueError(
            f"obs['{key}'] ({role}) is missing for {int(missing.sum())} of {missing.size} cells "
            f"(first: '{obs.index[missing][0]}'); every cell needs a {role}"
        )
    return pd.Categorical(column.astype(str).to_numpy())


def check_params(params: Mapping) -> dict:
    """``DEFAULTS`` overridden by ``params``; unknown keys and invalid values are errors."""
    unknown = sorted(set(params) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown preprocessing params {unknown}; expected some of {list(DEFAULTS)}")
    settings = {**DEFAULTS, **params}
    for key in ("min_genes", "min_cells"):
        if isinstance(settings[key], bool) or not isinstance(settings[key], int) or settings[key] < 0:
            raise ValueError(f"{key} must be an integer >= 0, got {settings[key]!r}")
    n_top = settings["n_top_genes"]
    if n_top is not None and (isinstance(n_top, bool) or not isinstance(n_top, int) or n_top < 1):
        raise ValueError(f"n_top_genes must be null or an integer >= 1, got {n_top!r}")
    if settings["duplicate_genes"] not in DUPLICATE_GENES:
        raise InputError(f"duplicate_genes must be one of {DUPLICATE_GENES}, got {settings['duplicate_genes']!r}")
    fraction = settings["val_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise ValueError(f"val_fraction must be a number in (0, 1), got {fraction!r}")
    return settings


def split_params(params: Mapping, loader_defaults: Mapping, loader: str) -> tuple[dict, dict]:
    """A loader's own params (defaults filled) and the rest, which must be preprocessing params."""
    unknown = sorted(set(params) - set(loader_defaults) - set(DEFAULTS))
    if unknown:
        raise ValueError(
            f"{loader} params: unknown {unknown}; expected some of {list(loader_defaults) + list(DEFAULTS)}"
        )
    own = {key: params.get(key, default) for key, default in loader_defaults.items()}
    return own, {key: value for key, value in params.items() if key not in loader_defaults}


def _select_hvg(data: anndata.AnnData, n_top_genes: int | None, *, has_counts: bool) -> dict:
    """Mark ``var["highly_variable"]`` (batch-aware, so genes that only mark a batch are not preferred)."""
    import scanpy as sc

    if n_top_genes is None or n_top_genes >= data.n_vars:
        return {"hvg_flavor": "none", "n_top_genes": n_top_genes, "genes_after_hvg": data.n_vars}
    # seurat_v3 models the counts' mean-variance trend; without counts, seurat's dispersion on log values
    flavor = "seurat_v3" if has_counts else "seurat"
    sc.pp.highly_variable_genes(
        data, n_top_genes=n_top_genes, flavor=flavor, batch_key="batch", layer="counts" if has_counts else "lognorm"
    )
    del data.uns["hvg"]  # scanpy's note of the flavour: the returned record holds it
    return {"hvg_flavor": flavor, "n_top_genes": n_top_genes, "genes_after_hvg": int(data.var["highly_variable"].sum())}


def _lognorm_input(matrix):
    values = sparse.csr_matrix(matrix, dtype=np.float32)
    if not np.isfinite(values.data).all() or (values.data < 0).any():
        raise ValueError("log-normalised input must be finite and >= 0")
    return values


def lognorm_of(matrix, values: str, where: str) -> sparse.csr_matrix:
    """A lab's cells × genes as log-normalised expression (CSR float32), as ``preprocess`` makes it
    (``log_normalised``: log1p(count / the cell's total over all its genes · 1e4)); log-normalised values are checked
    and kept. A cell with no counts has no expression to compare: an input error naming how many (``where`` names
    the file)."""
    if values == "counts":
        counts = integer_counts(matrix, where)
        totals = np.asarray(counts.sum(axis=1)).ravel()
        if (totals == 0).any():
            raise InputError(
                f"{where}: {int((totals == 0).sum())} cells have no counts (first: row "
                f"{int(np.flatnonzero(totals == 0)[0])}); remove empty barcodes first"
            )
        return sparse.csr_matrix(log_normalised(counts))
    if values == "lognorm":
        try:
            return _lognorm_input(matrix)
        except ValueError as err:
            raise InputError(f"{where}: {err}") from None
    raise ValueError(f"values must be one of {VALUES}, got {values!r}")


def log_normalised(counts):
    """log1p(count / the cell's total · ``TARGET_SUM``) of a cells × genes count matrix, in float32 (sparse stays
    sparse): scanpy's normalize_total and log1p — the step of ``preprocess`` and of ``celldag annotate``'s query."""
    import anndata
    import scanpy as sc

    data = anndata.AnnData(X=counts.astype(np.float32))
    sc.pp.normalize_total(data, target_sum=TARGET_SUM)
    sc.pp.log1p(data)
    return data.X


def varying_genes(lognorm) -> np.ndarray:
    """(genes,) bool: the columns whose values are not all equal. A constant gene has no z-score (its std is 0); the
    comparison is exact, as a mean-of-squares variance is not."""
    spread = lognorm.max(axis=0) - lognorm.min(axis=0)
    return np.asarray(spread.todense() if sparse.issparse(spread) else spread).ravel() != 0


def z_scored(lognorm, overwrite: bool = False) -> np.ndarray:
    """Each column z-scored over the cells (ddof=1) and clipped at ±``MAX_VALUE``, in float32: scanpy's scale — the
    prepared X of ``preprocess`` and the joint scaling of ``celldag annotate``. Constant columns must be dropped
    first (``varying_genes``). ``overwrite``: a dense float32 ``lognorm`` the caller no longer needs is scaled in place
    (scanpy scales an array in place; otherwise it gets a copy) — the same numbers, one copy fewer."""
    import scanpy as sc

    if sparse.issparse(lognorm):
        dense = lognorm.toarray()
    else:
        dense = np.asarray(lognorm) if overwrite else np.array(lognorm)
    return sc.pp.scale(dense.astype(np.float32, copy=False), max_value=MAX_VALUE)


LOGNORM_MAX = 20.0  # log1p of 5 × 10⁸: no log-normalised value of a cell comes near it; normalised counts do


class AmbiguousValues(ValueError):
    """A matrix that is neither clearly counts nor clearly log-normalised (``values_of``)."""


def values_of(matrix) -> str:
    """'counts' when every stored value is a non-negative integer; 'lognorm' when every value is non-negative, none
    exceeds ``LOGNORM_MAX`` and every cell with a stored value holds a fraction. Anything else raises
    ``AmbiguousValues`` saying what it is: negative values (scaled or z-scored data), fractions beyond a log scale
    (normalised but not log-transformed), or cells of whole numbers beside cells of fractions (counts and
    log-normalised cells mixed). Integers are read as counts: rounded log values cannot be told from low counts by
    their values, so such data must be named (``--values lognorm``)."""
    csr = sparse.csr_matrix(matrix)
    stored = csr.data
    if not stored.size:
        raise AmbiguousValues("it holds no non-zero value")
    negative = int(np.count_nonzero(stored < 0))
    if negative:
        raise AmbiguousValues(f"{negative} values are negative (scaled or z-scored data, not counts or log-normalised)")
    fraction = stored != np.round(stored)
    if not fraction.any():
        return "counts"
    largest = stored[fraction].max()
    if largest > LOGNORM_MAX:
        raise AmbiguousValues(
            f"it holds fractions up to {largest:.4g}, beyond a log scale (normalised but not log-transformed?)"
        )
    per_cell = np.diff(csr.indptr)
    fractions = np.add.reduceat(fraction, csr.indptr[:-1][per_cell > 0]) if (per_cell > 0).any() else np.zeros(0)
    whole = int(np.count_nonzero(fractions == 0))
    if whole:
        raise AmbiguousValues(
            f"{whole} of its {fractions.size} cells hold whole numbers only beside cells of fractions "
            "(counts and log-normalised cells mixed?)"
        )
    return "lognorm"


def jointly_scaled(lognorm) -> tuple[np.ndarray, np.ndarray]:
    """(scaled, varying): the columns of ``lognorm`` (cells × genes, dense or sparse) that vary, scaled over every
    cell as ``preprocess`` scales a dataset (``z_scored``; dense float32); ``varying`` marks which columns were
    kept."""
    varying = varying_genes(lognorm)
    if varying.all():  # the usual case: no column to drop, so no fancy-indexed copy of a cells × genes matrix
        return z_scored(lognorm), varying
    kept = lognorm[:, np.flatnonzero(varying)] if sparse.issparse(lognorm) else np.asarray(lognorm)[:, varying]
    return z_scored(kept, overwrite=True), varying  # the copy is z_scored's own
