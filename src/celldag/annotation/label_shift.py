"""Conformal sets under label shift: the query's type proportions differ from the calibration's, each type's cells
do not (P(X | Y) unchanged).

Two steps, both on arrays:

- ``query_proportions``: the query's type proportions from its unlabelled cells alone, by moment matching on the
  classifier's probabilities (soft black-box shift estimation, Lipton, Wang & Smola 2018): the mean probability
  vector of the query, E_q[p(x)] = Σ_y π_q(y) E[p(x) | y], with E[p(x) | y] measured on the calibration cells of
  type y — invariant under label shift, and no calibration of the probabilities assumed, unlike EM. Solved as
  non-negative least squares and normalised.
- ``label_shift_sets``: weighted split conformal (Tibshirani, Barber, Candès & Ramdas 2019; under label shift,
  Podkopaev & Ramdas 2021): calibration cell i weighs w(Y_i) = π_q(Y_i) / π_cal(Y_i), the candidate label y of a
  query cell w(y) at +∞, and y is in the set when its score is at most the (1 − α) quantile of that weighted
  distribution. With the true proportions, P(Y ∈ C(X)) ≥ 1 − α over the query's distribution; with estimated
  ones, up to the estimate's error.

Against ``class_conditional`` (which covers every type, so also under any label shift, at larger sets) this buys
marginal coverage of the shifted query at smaller sets; per-type coverage it does not promise.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from celldag.annotation import conformal


def query_proportions(cal_proba: np.ndarray, cal_labels: np.ndarray, query_proba: np.ndarray) -> np.ndarray:
    """(K,) the query's estimated type proportions (sum 1), from calibration cells with labels and query cells
    without; a type without calibration cells gets 0 (its conditional mean is unknown)."""
    cal_proba, query_proba = np.asarray(cal_proba, dtype=np.float64), np.asarray(query_proba, dtype=np.float64)
    cal_labels = np.asarray(cal_labels)
    n_classes = cal_proba.shape[1]
    if query_proba.ndim != 2 or query_proba.shape[1] != n_classes or query_proba.shape[0] == 0:
        raise ValueError(f"query probabilities of shape {query_proba.shape} for {n_classes} classes")
    present = np.array([np.any(cal_labels == k) for k in range(n_classes)])
    # column y: the mean probability vector of the calibration cells of type y
    conditional = np.stack([cal_proba[cal_labels == k].mean(axis=0) for k in np.flatnonzero(present)], axis=1)
    solved, _ = nnls(conditional, query_proba.mean(axis=0))
    proportions = np.zeros(n_classes)
    proportions[present] = solved
    if proportions.sum() <= 0:
        raise ValueError("the query's type proportions could not be estimated (every estimate is 0)")
    return proportions / proportions.sum()


def weighted_thresholds(
    cal_scores: np.ndarray, cal_weights: np.ndarray, candidate_weights: np.ndarray, alpha: float
) -> np.ndarray:
    """(K,) per candidate label y: the (1 − α) quantile of Σ_i w_i δ(S_i) + w(y) δ(+∞), normalised; +∞ when the
    calibration weight below every finite score is short of 1 − α (the full label set)."""
    order = np.argsort(cal_scores, kind="stable")
    scores, weights = np.asarray(cal_scores, dtype=np.float64)[order], np.asarray(cal_weights, dtype=np.float64)[order]
    cumulative = np.cumsum(weights)
    thresholds = np.full(len(candidate_weights), np.inf)
    for y, weight in enumerate(candidate_weights):
        total = cumulative[-1] + weight
        reached = np.flatnonzero(cumulative >= (1 - alpha) * total - 1e-12 * total)
        if reached.size:
            thresholds[y] = scores[reached[0]]
    return thresholds


def label_shift_sets(
    cal_scores: np.ndarray, cal_labels: np.ndarray, query_scores: np.ndarray, proportions: np.ndarray, alpha: float
) -> np.ndarray:
    """(m, K) sets {y : S(x, y) ≤ q(y)}, the calibration weighted by the query's type ``proportions`` over the
    calibration's own (``query_proportions`` estimates them; a type absent from calibration keeps weight 0)."""
    cal_labels = np.asarray(cal_labels)
    query_scores = np.asarray(query_scores, dtype=np.float64)
    n_classes = query_scores.shape[1]
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    cal_share = np.bincount(cal_labels, minlength=n_classes) / cal_labels.size
    ratio = np.divide(proportions, cal_share, out=np.zeros(n_classes), where=cal_share > 0)
    thresholds = weighted_thresholds(cal_scores, ratio[cal_labels], ratio, alpha)
    return query_scores <= thresholds[None, :]


class ZeroedTypeWarning(UserWarning):
    """A type present in calibration whose estimated query proportion is 0: its calibration cells weigh nothing."""


def cross_fitted_halves(cal_labels: np.ndarray) -> np.ndarray:
    """(n,) 0/1: the half of each calibration cell, alternating within each type in the cells' order (deterministic,
    each type split as evenly as it can be)."""
    cal_labels = np.asarray(cal_labels)
    halves = np.zeros(cal_labels.size, dtype=int)
    for label in np.unique(cal_labels):
        members = np.flatnonzero(cal_labels == label)
        halves[members] = np.arange(members.size) % 2
    return halves


def cross_fitted_weights(
    cal_proba: np.ndarray, cal_labels: np.ndarray, query_proba: np.ndarray, n_classes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each calibration cell's weight, each candidate label's weight, the query's proportions averaged over halves).

    The weights are cross-fitted: a calibration cell's ratio π_q(y_i) / π_cal(y_i) comes from the proportions
    estimated with the other half's conditional means, so no cell's own probabilities enter its own weight (issue 51:
    the weights were estimated on the very cells they weighted). A candidate label's weight uses the mean of the two
    estimates. A type present in calibration whose estimate is 0 is warned of (``ZeroedTypeWarning``): NNLS with
    renormalising can zero a type the query does hold."""
    import warnings

    cal_labels = np.asarray(cal_labels)
    halves = cross_fitted_halves(cal_labels)
    estimates = [
        query_proportions(cal_proba[halves == half], cal_labels[halves == half], query_proba) for half in (0, 1)
    ]
    cal_share = np.bincount(cal_labels, minlength=n_classes) / cal_labels.size
    ratios = [np.divide(estimate, cal_share, out=np.zeros(n_classes), where=cal_share > 0) for estimate in estimates]
    cal_weights = np.where(halves == 0, ratios[1][cal_labels], ratios[0][cal_labels])
    mean = (estimates[0] + estimates[1]) / 2
    zeroed = np.flatnonzero((cal_share > 0) & (mean == 0))
    if zeroed.size:
        warnings.warn(
            f"label_shift: the query's estimated proportion of type(s) {zeroed.tolist()} is 0: their "
            "calibration cells weigh nothing",
            ZeroedTypeWarning,
            stacklevel=2,
        )
    return cal_weights, np.divide(mean, cal_share, out=np.zeros(n_classes), where=cal_share > 0), mean


def weighted_sets(
    proba: np.ndarray, lac: np.ndarray, truth: np.ndarray, calibration: np.ndarray, rows: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """(sets of ``rows``, their estimated type proportions): label-shift-weighted sets of one query, the weights
    cross-fitted (``cross_fitted_weights``)."""
    n_classes = proba.shape[1]
    if not rows.any():
        return np.zeros((0, n_classes), dtype=bool), np.full(n_classes, np.nan)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    cal_weights, candidate_weights, estimate = cross_fitted_weights(
        proba[calibration], truth[calibration], proba[rows], n_classes
    )
    cal_true = conformal.true_scores(lac[calibration], truth[calibration])
    thresholds = weighted_thresholds(cal_true, cal_weights, candidate_weights, alpha)
    return lac[rows] <= thresholds[None, :], estimate
