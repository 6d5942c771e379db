"""PBMC datasets of the representation track: pbmc68k_reduced with synthetic batches (offline), PBMC3k (download)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.representation.preprocess import DEFAULTS as PREPROCESS_DEFAULTS
from celldag.representation.preprocess import SYNTHETIC_BATCH_STREAM, integer_counts, preprocess, split_params

PBMC68K_DEFAULTS = {
    "n_batches": 3,
    "batch_seed": 0,
    # measured on the prepared data, 50 PCs of X, without → with the effect: batch explains 2 % → 91 % of
    # the variance of the most batch-driven PC; same-batch share of the 15 nearest neighbours 0.33 → 0.91
    # (chance 1/3); leave-one-out 15-NN label accuracy 0.81 → 0.79 (asserted in
    # tests/unit/representation/test_representation_data.py)
    "shift_sd": 0.5,
    "scale_sd": 0.2,
}
PBMC3K_RAW = "pbmc3k_raw.h5ad"  # 2,700 cells × 32,738 genes, raw counts (scanpy.datasets.pbmc3k)
PBMC3K_PROCESSED = "pbmc3k_processed.h5ad"  # 2,638 cells, tutorial `louvain` labels (scanpy.datasets.pbmc3k_processed)
PBMC3K_LABEL_KEY = "louvain"


def prepare_pbmc68k_batched(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """scanpy's bundled pbmc68k_reduced (700 cells × 765 genes, log-normalised ``.raw``) with synthetic batches.

    The batch design (which cell is in which batch, and each batch's per-gene effect) is part of the
    dataset, like the batches of a real dataset: it comes from the fixed ``batch_seed``, never from
    the run seed, so every run seed sees the same data and seeds differ only in the split and in
    the methods' own randomness. There are no counts: count-based methods are not applicable.
    """
    import anndata
    import scanpy as sc

    design, preprocess_params = split_params(params, PBMC68K_DEFAULTS, "pbmc68k_batched")
    source = sc.datasets.pbmc68k_reduced()
    labels = source.obs["bulk_labels"]
    rng = np.random.default_rng([SYNTHETIC_BATCH_STREAM, design["batch_seed"]])
    batch = assign_batches(labels, design["n_batches"], rng)
    lognorm = add_batch_effect(source.raw.X, batch, design["n_batches"], design["shift_sd"], design["scale_sd"], rng)
    adata = anndata.AnnData(
        X=lognorm,
        obs=pd.DataFrame(
            {"bulk_labels": labels.to_numpy(), "batch": [f"batch{b}" for b in batch]}, index=source.obs_names
        ),
        var=pd.DataFrame(index=source.raw.var_names),
    )
    prepared = preprocess(
        adata, label_key="bulk_labels", batch_key="batch", seed=seed, params=preprocess_params, values="lognorm"
    )
    prepared.uns["synthetic_batches"] = design
    return prepared


def assign_batches(labels, n_batches: int, rng: np.random.Generator) -> np.ndarray:
    """Batch index per cell, stratified by label: each label's cells, in random order, are dealt round-robin.

    The deal continues from one label to the next, so batch sizes differ by at most one per label and
    by at most one overall.
    """
    if isinstance(n_batches, bool) or not isinstance(n_batches, int) or n_batches < 2:
        raise ValueError(f"n_batches must be an integer >= 2, got {n_batches!r}")
    codes = pd.Categorical(labels).codes
    batch = np.empty(codes.size, dtype=np.int64)
    dealt = 0
    for code in np.unique(codes):
        members = rng.permutation(np.flatnonzero(codes == code))
        batch[members] = (dealt + np.arange(members.size)) % n_batches
        dealt += members.size
    return batch


def add_batch_effect(
    lognorm, batch: np.ndarray, n_batches: int, shift_sd: float, scale_sd: float, rng: np.random.Generator
) -> sparse.csr_matrix:
    """Detected log values x of batch b, gene g → max(0, x · exp(N(0, scale_sd))[b, g] + N(0, shift_sd)[b, g]).

    Zeros stay zero: a zero is a gene not detected, and a batch changes how much of a detected gene is
    measured, not whether undetected genes appear (a shifted zero would be a level no real cell has).
    A value pushed below zero becomes a lost detection.
    """
    for name, sd in (("shift_sd", shift_sd), ("scale_sd", scale_sd)):
        if isinstance(sd, bool) or not isinstance(sd, int | float) or sd < 0:
            raise ValueError(f"{name} must be a number >= 0, got {sd!r}")
    values = sparse.csr_matrix(lognorm, dtype=np.float32, copy=True)
    scale = np.exp(rng.normal(0.0, scale_sd, size=(n_batches, values.shape[1])))
    shift = rng.normal(0.0, shift_sd, size=(n_batches, values.shape[1]))
    row_batch = np.repeat(batch, np.diff(values.indptr))  # the batch of each stored value's cell
    values.data = np.maximum(values.data * scale[row_batch, values.indices] + shift[row_batch, values.indices], 0)
    values.eliminate_zeros()
    return values


def prepare_pbmc3k(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """10x PBMC3k raw counts labelled with the scanpy tutorial's ``louvain`` clusters, joined by barcode.

    Only the processed file holds labels (2,638 of the 2,700 cells, the others failed its QC): cells
    without a label are dropped and counted in ``uns["label_join"]``. One 10x run, so one batch.
    """
    import anndata

    missing = [name for name in (PBMC3K_RAW, PBMC3K_PROCESSED) if name not in files]
    if missing:
        raise ValueError(f"pbmc3k needs the files {missing} (got {sorted(files)})")
    raw = anndata.read_h5ad(os.fspath(files[PBMC3K_RAW]))
    labels = anndata.read_h5ad(os.fspath(files[PBMC3K_PROCESSED])).obs[PBMC3K_LABEL_KEY]
    labelled = raw.obs_names.isin(labels.index)
    if not labelled.any():
        raise ValueError(
            f"no barcode of {PBMC3K_RAW} is labelled in {PBMC3K_PROCESSED} "
            f"(e.g. {list(raw.obs_names[:2])} vs {list(labels.index[:2])})"
        )
    join = {
        "cells_raw": int(labelled.size),
        "labelled_cells": int(labels.size),
        "unlabelled_dropped": int((~labelled).sum()),
        "labels_without_raw_cell": int((~labels.index.isin(raw.obs_names)).sum()),
    }
    raw = raw[labelled]
    adata = anndata.AnnData(
        X=integer_counts(raw.X, f"{PBMC3K_RAW}: X"),
        obs=pd.DataFrame(
            {PBMC3K_LABEL_KEY: labels.loc[raw.obs_names].to_numpy(), "batch": "pbmc3k"}, index=raw.obs_names
        ),
        var=pd.DataFrame(index=raw.var_names),
    )
    prepared = preprocess(adata, label_key=PBMC3K_LABEL_KEY, batch_key="batch", seed=seed, params=params)
    prepared.uns["label_join"] = join
    return prepared


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_pbmc68k_batched.accepted_params = (*PBMC68K_DEFAULTS, *PREPROCESS_DEFAULTS)
prepare_pbmc3k.accepted_params = tuple(PREPROCESS_DEFAULTS)
