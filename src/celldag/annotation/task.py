"""The annotation task: which cells train, calibrate and are queried, and on which cells each fit trains.

Every function is a pure function of its arguments and seed — the splits draw from one
``np.random.default_rng([stream, seed])`` per call, strata visited in sorted order; PCA and the mixture
take ``random_state=seed`` — so the same inputs give the same outputs in any process.

- ``split_cells``: train / calibration / query, stratified by batch × label.
- ``labelled_in_new_batch``: the cells a lab would label in a new sample (per batch, stratified by label).
- ``principal_components``: the covariates (the expression's first 20 principal components).
- ``soft_groups``: fractional group memberships on covariates (a Gaussian mixture on principal components),
  the groups of group-conditional coverage that need no labels.
- ``fit_masks``: the training cells of each fit: a random split of all batches, and one fit per held-out batch;
- ``held_out_types``: the types held out in turn by the unknown-type scenario (each one fit more).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

SPLITS = ("train", "calibration", "query")
# random streams of this module; the representation track uses 1-3 (split, synthetic batches, scoring subsamples)
STREAM, LABELLED_STREAM = 4, 5
MAX_COMPONENTS = 20  # principal components the mixture of ``soft_groups`` is fitted on


def split_cells(labels, batch, fractions: tuple[float, float, float], seed: int) -> np.ndarray:
    """(n,) str: each cell's part, one of ``SPLITS``, stratified by batch × label, favouring no part.

    ``fractions`` are those of train, calibration and query (positive, summing to 1). Within each
    (batch, label) stratum of n cells — strata in sorted order, one generator seeded with ``[STREAM, seed]`` —
    the counts are ``fractions · n`` rounded at random (``part_counts``): each part gets the floor of its quota
    and the remainders go to parts drawn with probability equal to their fractional parts, so every part's
    expected count is exactly its quota, in every stratum however small. A stratum of >= 3 cells then has any
    empty part filled with one cell from the largest part (ties drawn at random), so that every part holds
    >= 1 cell of it: group-conditional coverage needs calibration cells of every group. The cells of each part
    are then drawn at random from the stratum.

    Why at random: calibration and query must be exchangeable for coverage measured on the query to be what a
    lab's cells get. A rule by position (remainders to the earlier part, a 1-cell stratum to calibration) gives
    calibration the rare types' cells systematically, and every random-split coverage is then overstated
    (issue 51: +0.0125 for split conformal on the default run). With calibration and query of equal fractions,
    their counts have the same law in every stratum.
    """
    labels, batch = _cell_vectors(labels, batch)
    shares = _fractions(fractions)
    rng = np.random.default_rng([STREAM, seed])
    split = np.empty(labels.size, dtype=object)
    for members in _strata(labels, batch):
        counts = part_counts(members.size, shares, rng)
        shuffled = rng.permutation(members)
        split[shuffled] = np.repeat(np.array(SPLITS, dtype=object), counts)
    return split.astype(str)


def part_counts(n: int, shares: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Cells per part of a stratum of ``n`` cells (see ``split_cells``): randomised rounding of ``shares · n``."""
    quotas = np.round(shares * n, 9)  # 0.7 · 10 must count as 7, not 7.000000000000001
    counts = np.floor(quotas).astype(int)
    counts += _randomly_rounded(quotas - counts, n - int(counts.sum()), rng)
    if n >= 3:  # the largest part holds >= 2 cells while one is empty
        for part in np.flatnonzero(counts == 0):
            largest = np.flatnonzero(counts == counts.max())
            counts[largest[rng.integers(largest.size)] if largest.size > 1 else largest[0]] -= 1
            counts[part] += 1
    return counts


def _randomly_rounded(remainders: np.ndarray, extra: int, rng: np.random.Generator) -> np.ndarray:
    """(parts,) 0/1: which parts get one of the ``extra`` cells left after flooring, part p with probability
    ``remainders[p]`` exactly (they lie in [0, 1) and sum to ``extra``): systematic sampling, one uniform."""
    added = np.zeros(remainders.size, dtype=int)
    if extra <= 0:
        return added
    edges = np.concatenate([[0.0], np.cumsum(remainders)])
    edges[-1] = extra  # the remainders sum to ``extra`` up to rounding: the last edge is exact
    points = rng.uniform() + np.arange(extra)
    np.add.at(added, np.searchsorted(edges, points, side="right") - 1, 1)
    return added


def labelled_in_new_batch(labels, batch, fraction: float, seed: int) -> np.ndarray:
    """(n,) bool: the cells a lab would label in a new sample, drawn in every batch.

    Per (batch, label) stratum of m cells (sorted order, one generator seeded with ``[LABELLED_STREAM, seed]``):
    ``fraction · m`` cells rounded at random (the floor, plus one with probability its fractional part), so the
    labelled share's expected type mix is exactly the batch's — no per-stratum minimum, which over-represented rare
    types in it (issue 51). Used for the batch that a fit holds out; the draw does not depend on ``split_cells``, so
    a caller intersects it with the split it needs. A fraction of 0 labels no cell: the label-free new batch,
    calibrated on the other batches alone.
    """
    labels, batch = _cell_vectors(labels, batch)
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction must be in [0, 1), got {fraction!r}")
    rng = np.random.default_rng([LABELLED_STREAM, seed])
    labelled = np.zeros(labels.size, dtype=bool)
    for members in _strata(labels, batch):
        quota = np.round(fraction * members.size, 9)
        n_labelled = int(np.floor(quota)) + int(rng.uniform() < quota - np.floor(quota))
        labelled[rng.permutation(members)[:n_labelled]] = True
    return labelled


def principal_components(expression, seed: int) -> np.ndarray:
    """(n, k) float64: the scores of ``expression`` (cells × features, dense or sparse) on its first
    k = min(20, n − 1, features) principal components (sklearn PCA, randomized SVD with
    ``random_state=seed``: deterministic for a seed; signs fixed by sklearn's ``svd_flip``)."""
    from sklearn.decomposition import PCA

    matrix = expression.toarray() if sparse.issparse(expression) else np.asarray(expression)
    if matrix.ndim != 2 or min(MAX_COMPONENTS, matrix.shape[0] - 1, matrix.shape[1]) < 1:
        raise ValueError(f"principal components need a matrix of 2+ cells and 1+ features, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError("expression has non-finite values")
    n_components = min(MAX_COMPONENTS, matrix.shape[0] - 1, matrix.shape[1])
    scores = PCA(n_components=n_components, svd_solver="randomized", random_state=seed).fit_transform(matrix)
    return scores.astype(np.float64, copy=False)


def soft_groups(expression, n_groups: int, seed: int) -> np.ndarray:
    """(n, n_groups) float64: each cell's membership of ``n_groups`` groups defined on covariates alone.

    A Gaussian mixture (diagonal covariances, ``random_state=seed``, one initialisation) on
    ``principal_components(expression, seed)`` — given those components themselves, it fits on the same
    space again (their principal components are themselves, up to sign) — whose posterior probabilities
    are the memberships (rows sum to 1). The columns are ordered by the components' means on the first
    principal component, so that group j is comparable across seeds. Deterministic for a seed.
    """
    from sklearn.mixture import GaussianMixture

    if not 1 <= n_groups <= np.shape(expression)[0]:
        raise ValueError(f"soft_groups needs 1 <= n_groups <= cells ({np.shape(expression)[0]}), got {n_groups}")
    scores = principal_components(expression, seed)
    mixture = GaussianMixture(n_components=n_groups, covariance_type="diag", random_state=seed, n_init=1).fit(scores)
    memberships = mixture.predict_proba(scores)[:, np.argsort(mixture.means_[:, 0], kind="stable")]
    return memberships / memberships.sum(axis=1, keepdims=True)


def fit_masks(split, batch) -> dict[str, np.ndarray]:
    """Training cells of each fit: ``random`` (every train cell) and ``without_i`` (the train cells outside batch i,
    i indexing the sorted unique batches): a fit that has never seen that batch."""
    split, batch = _cell_vectors(split, batch)
    train = split == "train"
    masks = {"random": train}
    for i, held_out in enumerate(np.unique(batch)):
        masks[f"without_{i}"] = train & (batch != held_out)
    return masks


def held_out_types(labels, split, min_query_cells: int) -> dict[int, str]:
    """{j: type} of the held-out-type scenario: each type (j its index among the sorted unique labels) with at
    least ``min_query_cells`` query cells, so that its detection rate rests on that many cells."""
    labels, split = _cell_vectors(labels, split)
    query = split == "query"
    return {
        j: name
        for j, name in enumerate(np.unique(labels))
        if np.count_nonzero(query & (labels == name)) >= min_query_cells
    }


def _cell_vectors(first, second) -> tuple[np.ndarray, np.ndarray]:
    """Two per-cell vectors as 1-D str arrays of one length."""
    first, second = np.asarray(first).astype(str), np.asarray(second).astype(str)
    if first.ndim != 1 or first.shape != second.shape:
        raise ValueError(f"per-cell vectors must be 1-D of one length, got shapes {first.shape} and {second.shape}")
    return first, second


def _fractions(fractions) -> np.ndarray:
    shares = np.asarray(fractions, dtype=np.float64)
    if (
        shares.shape != (len(SPLITS),)
        or not np.isfinite(shares).all()
        or (shares <= 0).any()
        or abs(shares.sum() - 1.0) > 1e-6
    ):
        raise ValueError(
            f"fractions must be {len(SPLITS)} positive numbers ({', '.join(SPLITS)}) summing to 1, got {fractions!r}"
        )
    return shares / shares.sum()


def _strata(labels: np.ndarray, batch: np.ndarray):
    """Cell indices (ascending) of each (batch, label) stratum, strata in sorted (batch, label) order."""
    _, batch_codes = np.unique(batch, return_inverse=True)
    label_values, label_codes = np.unique(labels, return_inverse=True)
    codes = batch_codes.ravel() * label_values.size + label_codes.ravel()
    order = np.argsort(codes, kind="stable")
    boundaries = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, boundaries) if order.size else []
