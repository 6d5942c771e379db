"""Cells → leaf profiles of the lineage track: seeded cell-half replicates, per-leaf means, z-scores.

Shared by the loaders that pseudo-bulk cells onto lineage leaves (``packer2019``, ``lineage_h5ad``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse


def split_halves(leaf_of_cell, leaves: list[str], seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per leaf (in ``leaves`` order, one generator), shuffle its cells: first ⌊n/2⌋ train, rest test."""
    rng = np.random.default_rng(seed)
    codes = pd.Categorical(leaf_of_cell, categories=leaves).codes  # integer codes: fast to compare
    train, test = [], []
    for code in range(len(leaves)):
        shuffled = rng.permutation(np.flatnonzero(codes == code))
        train.append(shuffled[: shuffled.size // 2])
        test.append(shuffled[shuffled.size // 2 :])
    return train, test


def pseudo_bulk(counts: sparse.sparray, groups: list[np.ndarray]) -> np.ndarray:
    """(groups × genes) mean raw counts of the genes × cells ``counts`` over each group of cell indices.

    One sparse product with a cells × groups matrix of 1/group-size weights: no dense cells × genes copy.
    """
    sizes = np.array([g.size for g in groups])
    weights = sparse.csr_array(
        (np.repeat(1.0 / sizes, sizes), (np.concatenate(groups), np.repeat(np.arange(len(groups)), sizes))),
        shape=(counts.shape[1], len(groups)),
    )
    return (counts @ weights).toarray().T


def standardise(train: np.ndarray, *others: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-feature z-scores (ddof=1) with the statistics of ``train`` only, applied to it and ``others``.

    Features constant over ``train`` have no z-score and are dropped; returns the scaled arrays and the
    mask of kept features.
    """
    mean, std = train.mean(axis=0), train.std(axis=0, ddof=1)
    varies = std > 0
    return [(values[:, varies] - mean[varies]) / std[varies] for values in (train, *others)], varies
