"""Cells → leaf profiles of the lineage track: seeded cell-half or given replicates, per-leaf means, z-scores.

Shared by the loaders that pseudo-bulk cells onto lineage leaves (``packer2019``, ``lineage_h5ad``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.errors import InputError


def rows_by_leaf(leaf_of_cell, leaves: list[str]) -> list[np.ndarray]:
    """Per leaf (in ``leaves`` order), the indices of its cells."""
    codes = pd.Categorical(leaf_of_cell, categories=leaves).codes  # integer codes: fast to compare
    return [np.flatnonzero(codes == code) for code in range(len(leaves))]


def split_halves(leaf_of_cell, leaves: list[str], seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per leaf (in ``leaves`` order, one generator), shuffle its cells: first ⌊n/2⌋ train, rest test."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for cells in rows_by_leaf(leaf_of_cell, leaves):
        shuffled = rng.permutation(cells)
        train.append(shuffled[: shuffled.size // 2])
        test.append(shuffled[shuffled.size // 2 :])
    return train, test


VALIDATION_STREAM = 0x7A11  # its own random stream: the train/test split is the same with or without validation cells
AUTO = "auto"  # validation_cells: auto, lineage_h5ad's default (validation_share)
AUTO_FRACTION = 0.25  # as Packer 2019's entry: 3 of 4 training cells stay in the training profile, 2-5 give one


def validation_fraction(value, loader: str, auto: bool = False) -> float | str:
    """A loader's ``validation_cells`` param, checked: a fraction in [0, 1) (0: no validation replicate);
    with ``auto``, also AUTO (the share is decided per dataset: ``validation_share``)."""
    if auto and value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        expected = f"{AUTO!r} or a fraction" if auto else "a fraction"
        raise InputError(f"{loader} params: validation_cells must be {expected} in [0, 1), got {value!r}")
    return float(value)


def validation_share(
    requested: float | str, train: list[np.ndarray] | None, leaves: list[str]
) -> tuple[float, str | None]:
    """(the share of each leaf's training cells that ``replicate_cells`` draws into the validation replicate,
    why the dataset has none: None where it has one) for a checked ``validation_cells`` and the training
    cells of each leaf (None: no replicate pair).

    AUTO draws AUTO_FRACTION where there is a pair and every leaf has 2 or more training cells (each then
    gives at least one and keeps at least one), else none: no error, the reason goes into the record.
    """
    if requested != AUTO:
        return float(requested), (None if requested else "validation_cells: 0 in the dataset's entry")
    if train is None:
        return 0.0, "no replicate pair to draw validation cells from (replicates: true or replicate_key)"
    short = [leaf for leaf, cells in zip(leaves, train) if cells.size < 2]
    if short:
        return 0.0, (
            f"validation_cells: auto needs 2+ training cells in every leaf; {len(short)} of {len(leaves)} "
            f"have fewer (first: {short[:3]}); a fraction such as {AUTO_FRACTION} draws from the others"
        )
    return AUTO_FRACTION, None


def replicate_cells(
    train: list[np.ndarray], test: list[np.ndarray], fraction: float, seed: int
) -> dict[str, list[np.ndarray]]:
    """{"train", "test"[, "validation"]}: per leaf, the indices of its cells in each replicate.

    With a validation ``fraction`` > 0 (checked by ``validation_fraction``), a seeded share of each leaf's
    training cells (at least one, never all) becomes the validation replicate, on which supervised model selection
    scores; the test replicate is left as it is, so scores stay comparable with and without one. A leaf with a single
    training cell keeps it and has no validation cells: see ``replicate_profiles``.
    """
    if not fraction:
        return {"train": train, "test": test}
    rng = np.random.default_rng([seed, VALIDATION_STREAM])
    kept, validation = [], []
    for cells in train:
        shuffled = rng.permutation(cells)
        size = 0 if cells.size < 2 else min(cells.size - 1, max(1, round(fraction * cells.size)))
        kept.append(np.sort(shuffled[size:]))
        validation.append(np.sort(shuffled[:size]))
    return {"train": kept, "test": test, "validation": validation}


def replicate_profiles(counts: sparse.sparray, cells: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each replicate's mean profiles (``pseudo_bulk``). A leaf without validation cells gets its training
    profile as its validation row (``obs['n_cells_validation']`` = 0 says so, and model selection skips it)."""
    profiles = {name: np.ascontiguousarray(pseudo_bulk(counts, members)) for name, members in cells.items()}
    if "validation" in profiles:
        has_cells = np.array([members.size > 0 for members in cells["validation"]])
        profiles["validation"] = np.where(has_cells[:, None], profiles["validation"], profiles["train"])
    return profiles


def given_halves(leaf_of_cell, replicate_of_cell, leaves: list[str]) -> tuple[list[np.ndarray], ...]:
    """Per replicate value in sorted order (train first, then test), per leaf, the indices of its cells there.

    A lab's own replicate pairs, kept as measured instead of re-drawn per seed (``split_halves``).
    """
    replicate_of_cell = np.asarray(replicate_of_cell)
    per_leaf = rows_by_leaf(leaf_of_cell, leaves)
    return tuple(
        [cells[replicate_of_cell[cells] == value] for cells in per_leaf] for value in np.unique(replicate_of_cell)
    )


def pseudo_bulk(counts: sparse.sparray, groups: list[np.ndarray], summed: bool = False) -> np.ndarray:
    """(groups × genes) mean (``summed``: total) raw counts of the genes × cells ``counts`` over each group
    of cell indices.

    One sparse product with a cells × groups matrix of 1/group-size weights (or ones): no dense cells ×
    genes copy.
    """
    sizes = np.array([g.size for g in groups])
    weights = sparse.csr_array(
        (
            np.repeat(np.ones(len(groups)) if summed else 1.0 / np.maximum(sizes, 1), sizes),
            (np.concatenate(groups), np.repeat(np.arange(len(groups)), sizes)),
        ),
        shape=(counts.shape[1], len(groups)),
    )
    return (counts @ weights).toarray().T


def leaf_counts(counts: sparse.sparray, scored: list[np.ndarray], kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The optional lineage input ``counts``: per leaf, the raw counts of the scored replicate's cells
    summed over the ``kept`` features (integers), and each leaf's total over all features (what count
    models such as Bonsai need besides the kept genes)."""
    sums = np.rint(pseudo_bulk(counts, scored, summed=True))
    return sums[:, kept], sums.sum(axis=1)


def standardise(train: np.ndarray, *others: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-feature z-scores (ddof=1) with the statistics of ``train`` only, applied to it and ``others``.

    Features constant over ``train`` have no z-score and are dropped; returns the scaled arrays and the
    mask of kept features.
    """
    mean, std = train.mean(axis=0), train.std(axis=0, ddof=1)
    varies = std > 0
    return [(values[:, varies] - mean[varies]) / std[varies] for values in (train, *others)], varies
