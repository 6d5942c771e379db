"""Unknown types: whether a cell is farther from the reference, or fits every known type worse, than nearly every
calibration cell.

Two scores per cell, each tested against the calibration cells' conformal quantile at half the level, flagged when
either exceeds it (``novelty_tests``): its distance to its ``NOVELTY_NEIGHBOURS``-th nearest train cell in the
embedding (``novelty_distances``), and the classifier's doubt 1 − max p(y | x). A cell drawn like the calibration
cells is flagged with probability ≤ the level. Used by ``celldag annotate`` (``celldag.annotation.query``) and by the
benchmark's held-out-type scenario (``celldag.annotation.scoring``); neither draws anything at random.
"""

from __future__ import annotations

import numpy as np

from celldag.annotation import conformal

NOVELTY_NEIGHBOURS = 10  # the novelty distance: to the 10th nearest reference train cell (one stray neighbour is noise)


def novelty_distances(embedding: np.ndarray, train: np.ndarray, k: int = NOVELTY_NEIGHBOURS) -> np.ndarray:
    """(n,) each cell's Euclidean distance to its k-th nearest train cell (a train cell's own row excluded), exact."""
    from sklearn.neighbors import NearestNeighbors

    embedding, train = np.asarray(embedding, dtype=np.float64), np.asarray(train, dtype=bool)
    k = min(k, int(train.sum()) - 1)
    if k < 1:
        raise ValueError(f"novelty distances need 2+ train cells, got {int(train.sum())}")
    found = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(embedding[train]).kneighbors(embedding)[0]
    # a train cell is its own nearest neighbour at distance 0: skip it; any other cell takes the k-th
    return np.where(train, found[:, k], found[:, k - 1])


def novelty_tests(distances: np.ndarray, doubts: np.ndarray, calibration: np.ndarray, level: float) -> np.ndarray:
    """(n,) str per cell: which of the two tests at ``level``/2 flags it ("distance", "doubt", "both") or "".
    A distance of +inf (none computed) never counts: its test is left out, the other keeps ``level``/2."""
    flags = []
    for values in (distances, doubts):
        finite = np.isfinite(values[calibration])
        threshold = conformal.conformal_quantile(values[calibration], level / 2) if finite.all() else np.inf
        flags.append(np.isfinite(values) & (values > threshold))
    by_distance, by_doubt = flags
    return np.where(by_distance & by_doubt, "both", np.where(by_distance, "distance", np.where(by_doubt, "doubt", "")))
