"""Conformal prediction sets for cell-type annotation: split, Mondrian, class-conditional and Kandinsky.

Conventions. ``proba`` is an (n, K) array of class probabilities (rows sum to 1); labels are integer class
indices 0..K-1. A conformity score S(x, y) is larger for a label that conforms less to the model. A
prediction set is a bool array (m, K): entry (i, y) says whether label y is in the set of query cell i.

Guarantees, for calibration and query cells that are exchangeable (drawn alike, in any order):

- split (Vovk et al. 2005; Lei et al. 2018): P(Y in C(X)) >= 1 - alpha, marginally over all cells;
  with continuous scores it is also below 1 - alpha + 1 / (n + 1).
- Mondrian (Vovk et al. 2003): the same guarantee conditionally on each group of (x, y); the group may
  depend on the candidate label (class, batch x class), which is why query groups are given per (cell, label).
- class-conditional: Mondrian with the class as the group, P(Y in C(X) | Y = k) >= 1 - alpha for every k; a type
  with fewer than ceil((1 - alpha) / alpha) calibration cells enters every set.
- class-conditional with rare types pooled: the same for every type with enough calibration cells, and for the
  rare types as one group (``pooled_class_sets``).
- Kandinsky (Bairaktari, Wu & Wu, ICML 2025, arXiv 2502.17264; the quantile-regression approach of Gibbs,
  Cherian & Candes 2023): weighted coverage E[w(X, Y) (1{Y in C(X)} - (1 - alpha))] >= 0 for every
  non-negative weight w in the span of the features Phi(x, y) (overlapping, fractional groups: batch,
  soft cluster memberships, their products with the class), up to a slack that shrinks like G / n
  (G features, n calibration cells), because the threshold is a linear quantile regression fitted on the
  calibration cells only. Marginal coverage is one such weight when the constant is in the span (it is
  when the features include a full one-hot, e.g. the class groups).

Everything here is deterministic given its arguments: the randomised augmented fit takes its uniforms as an
argument (``celldag.annotation.scoring.cell_uniforms`` derives them from the seed and each cell's key), and the
quantile regression is an exact linear program.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np
import pandas as pd

from celldag.annotation.quantile_lp import ZERO_RESIDUAL, augmented_thresholds, quantile_regression

# scores within this of a fitted threshold count as at it: the solver's rounding (``quantile_lp.ZERO_RESIDUAL``)
SOLVER_TOLERANCE = ZERO_RESIDUAL

# (n + 1)(1 - alpha) is an integer for many common (n, alpha) pairs, and floating-point error can put the
# product just above that integer (then ceil would pick a rank one too high): forgive this much.
_RANK_TOLERANCE = 1e-9


def lac_scores(proba: np.ndarray) -> np.ndarray:
    """(n, K) least-ambiguous-set-valued-classifier scores 1 - p(y | x) (Sadinle, Lei & Wasserman 2019).

    Thresholding them gives the smallest sets on average among sets with the coverage guarantee, if the
    probabilities are right; the price is that hard cells get sets no larger than easy ones.
    """
    proba = _as_proba(proba)
    return 1.0 - proba


def aps_scores(proba: np.ndarray) -> np.ndarray:
    """(n, K) non-randomised adaptive-prediction-set scores (Romano, Sesia & Candes 2020).

    S(x, y) = the total probability of the classes ranked at or above y, i.e. of every j with
    p_j >= p_y (classes tied with y count as at or above), so S(x, argmax) = p_max. Sets grow on
    uncertain cells, where the probability mass is spread. Non-randomised: the paper's version subtracts
    a uniform fraction of p_y to reach exact coverage; this one keeps sets deterministic and slightly
    conservative.
    """
    proba = _as_proba(proba)
    n_cells, n_classes = proba.shape
    # stable sort of -p: descending probabilities, ties kept in class order
    order = np.argsort(-proba, axis=1, kind="stable")
    descending = np.take_along_axis(proba, order, axis=1)
    # cumulative sum from the top: S(x, argmax) is p_max exactly, with no rounding from subtraction
    mass_down_to = np.cumsum(descending, axis=1)
    # a class tied with those below it counts them as at or above: read the cumulative sum at the last
    # position of its tie run
    positions = np.broadcast_to(np.arange(n_classes), (n_cells, n_classes))
    ends_run = np.ones((n_cells, n_classes), dtype=bool)
    ends_run[:, :-1] = descending[:, :-1] != descending[:, 1:]
    run_end = np.where(ends_run, positions, n_classes)
    run_end = np.minimum.accumulate(run_end[:, ::-1], axis=1)[:, ::-1]
    scores = np.empty_like(proba)
    np.put_along_axis(scores, order, np.take_along_axis(mass_down_to, run_end, axis=1), axis=1)
    return scores


def true_scores(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(n,) the score of each cell's own label, scores[i, labels[i]]: what calibration is done on."""
    scores = np.asarray(scores, dtype=float)
    labels = np.asarray(labels)
    if scores.ndim != 2 or labels.shape != (scores.shape[0],):
        raise ValueError(f"scores must be (n, K) and labels (n,), got {scores.shape} and {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= scores.shape[1]):
        raise ValueError(f"labels must be class indices in 0..{scores.shape[1] - 1}")
    return scores[np.arange(len(labels)), labels]


def conformal_quantile(scores: np.ndarray, alpha: float) -> float:
    """The ceil((n + 1)(1 - alpha))-th smallest of n calibration scores; +inf when that rank exceeds n.

    Why that rank: a new exchangeable score is equally likely to fall in each of the n + 1 gaps between
    the calibration scores, so it is at most the k-th smallest with probability >= k / (n + 1) >= 1 - alpha.
    With fewer than (1 - alpha) / alpha calibration scores no finite threshold guarantees that, and the
    +inf threshold gives the full label set.
    """
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {scores.shape}")
    _check_alpha(alpha)
    rank = math.ceil((len(scores) + 1) * (1 - alpha) - _RANK_TOLERANCE)
    if rank > len(scores):
        return math.inf
    return float(np.partition(scores, rank - 1)[rank - 1])


def split_sets(cal_scores: np.ndarray, query_scores: np.ndarray, alpha: float) -> np.ndarray:
    """(m, K) marginal split-conformal sets {y : S(x, y) <= q}, q the conformal quantile of cal_scores.

    cal_scores (n,) are the calibration cells' true-label scores. Guarantee: P(Y in C(X)) >= 1 - alpha
    over exchangeable calibration and query cells (not per class, batch or any other group).
    """
    query_scores = _as_query_scores(query_scores)
    return query_scores <= conformal_quantile(cal_scores, alpha)


def mondrian_sets(
    cal_scores: np.ndarray,
    cal_groups: np.ndarray,
    query_scores: np.ndarray,
    query_groups: np.ndarray,
    alpha: float,
) -> tuple[np.ndarray, dict[Hashable, float]]:
    """Mondrian (group-conditional) conformal sets and the threshold of each group.

    cal_groups (n,) holds the group of each calibration pair (x_i, y_i); query_groups (m, K) the group of
    (x, y) for every candidate y, so groups may depend on the label (class, batch x class). Label y is in
    C(x) iff S(x, y) <= the conformal quantile of the calibration scores of group(x, y). Guarantee:
    P(Y in C(X) | group(X, Y) = g) >= 1 - alpha for every group g, because within a group the calibration
    and query pairs are still exchangeable. A group without calibration cells has threshold +inf.

    Returns (sets (m, K), {group: threshold}) over the groups seen in calibration or query.
    """
    cal_scores = np.asarray(cal_scores, dtype=float)
    query_scores = _as_query_scores(query_scores)
    cal_groups = np.asarray(cal_groups)
    query_groups = np.asarray(query_groups)
    if cal_scores.ndim != 1 or cal_groups.shape != cal_scores.shape:
        raise ValueError(f"cal_scores and cal_groups must be (n,), got {cal_scores.shape} and {cal_groups.shape}")
    if query_groups.shape != query_scores.shape:
        raise ValueError(f"query_groups must be (m, K) like query_scores, got {query_groups.shape}")
    _check_alpha(alpha)
    # one code per group over calibration and query together, so a query-only group gets a code too
    codes, groups = pd.factorize(np.concatenate([cal_groups, query_groups.ravel()]), use_na_sentinel=False)
    cal_codes, query_codes = codes[: len(cal_scores)], codes[len(cal_scores) :]
    thresholds = np.array([conformal_quantile(cal_scores[cal_codes == code], alpha) for code in range(len(groups))])
    sets = query_scores <= thresholds[query_codes].reshape(query_scores.shape)
    return sets, dict(zip(groups.tolist(), thresholds.tolist(), strict=True))


def class_conditional_sets(
    cal_scores: np.ndarray, cal_labels: np.ndarray, query_scores: np.ndarray, alpha: float
) -> np.ndarray:
    """(m, K) class-conditional sets: Mondrian with the candidate class as the group.

    Guarantee: P(Y in C(X) | Y = k) >= 1 - alpha for every class k, so rare cell types are covered as
    often as common ones. A class with fewer than (1 - alpha) / alpha calibration cells is in every set.
    """
    query_scores = _as_query_scores(query_scores)
    candidate_classes = np.broadcast_to(np.arange(query_scores.shape[1]), query_scores.shape)
    sets, _ = mondrian_sets(cal_scores, cal_labels, query_scores, candidate_classes, alpha)
    return sets


def min_calibration_cells(alpha: float) -> int:
    """⌈(1 − α)/α⌉: the fewest calibration scores whose conformal quantile is finite (9 at α = 0.1)."""
    _check_alpha(alpha)
    return math.ceil((1 - alpha) / alpha - _RANK_TOLERANCE)


def rare_pooled_groups(cal_labels: np.ndarray, n_classes: int, alpha: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """(group of each class (K,), the rare classes (K,) bool, whether the pooled group itself is calibrated).

    A class with at least ``min_calibration_cells(alpha)`` calibration cells is a group of its own; the others (the
    rare types) share one pooled group, code K. When that pool still holds too few cells, its types are calibrated
    with every calibration cell (code K + 1: the marginal threshold), and only marginal coverage is promised them."""
    counts = np.bincount(np.asarray(cal_labels, dtype=int), minlength=n_classes)
    rare = counts < min_calibration_cells(alpha)
    pooled_enough = bool(counts[rare].sum() >= min_calibration_cells(alpha)) if rare.any() else True
    groups = np.where(rare, n_classes if pooled_enough else n_classes + 1, np.arange(n_classes))
    return groups, rare, pooled_enough


def pooled_class_sets(
    cal_scores: np.ndarray, cal_labels: np.ndarray, query_scores: np.ndarray, alpha: float
) -> np.ndarray:
    """(m, K) class-conditional sets with the rare types calibrated as one pooled group (``rare_pooled_groups``).

    Mondrian over {each type with enough calibration cells, the pooled rest}: P(Y ∈ C(X) | Y = k) ≥ 1 − α for every
    type with ⌈(1 − α)/α⌉ or more calibration cells, and P(Y ∈ C(X) | Y rare) ≥ 1 − α for the rare types together
    (not each). Where ``class_conditional`` gives a rare type an infinite threshold — it enters every set — this
    gives it the pool's; where the pool is still too small, the marginal threshold of all calibration cells (split
    conformal's promise for them)."""
    query_scores = _as_query_scores(query_scores)
    cal_labels = np.asarray(cal_labels, dtype=int)
    n_classes = query_scores.shape[1]
    groups, _, pooled_enough = rare_pooled_groups(cal_labels, n_classes, alpha)
    thresholds = np.array(
        [conformal_quantile(cal_scores[groups[cal_labels] == group], alpha) for group in range(n_classes + 1)]
        + [conformal_quantile(cal_scores, alpha)]
    )
    if not pooled_enough:
        thresholds[n_classes] = thresholds[n_classes + 1]
    return query_scores <= thresholds[groups][None, :]


TRAINING_CONDITIONAL_SLACK = 0.02  # ε of the training-conditional statement: coverage below 1 − α − ε


def training_conditional_risk(n: int, alpha: float, epsilon: float = TRAINING_CONDITIONAL_SLACK) -> float:
    """P(coverage < 1 − α − ε) over calibration sets of ``n`` cells, for split conformal with continuous scores.

    Coverage *given* one calibration set is random: it is Beta(k, n + 1 − k) with k = ⌈(n + 1)(1 − α)⌉ (Vovk 2012;
    Angelopoulos & Bates 2021, §3.2), whose mean is the ≥ 1 − α promised on average. This is the chance that the
    calibration set a lab drew sits more than ε below it. 0 when the threshold is infinite (coverage 1)."""
    from scipy.stats import beta

    _check_alpha(alpha)
    rank = math.ceil((n + 1) * (1 - alpha) - _RANK_TOLERANCE)
    if n < 1 or rank > n:
        return 0.0
    return float(beta.cdf(1 - alpha - epsilon, rank, n + 1 - rank))


def kandinsky_features(
    covariate_weights: np.ndarray,
    n_classes: int,
    *,
    class_groups: bool = True,
    covariate_class_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Phi(x, y) for every cell and candidate class: (n, K, G) group weights in [0, 1].

    Columns, in order: the C covariate weights (n, C) of each cell (batch one-hot, soft cluster
    memberships), the same for every y; then, if class_groups, the one-hot of y (K columns); then, if
    covariate_class_weights (n, D) is given, w_d(x) * 1{y = k} for every d, k (D * K columns, index
    d * K + k: e.g. batch x class). Kandinsky covers every non-negative combination of these columns,
    so each column is a group whose coverage is controlled. Memory: n * K * G floats, and G grows like
    D * K with covariate_class_weights: for many query cells, build and threshold them in chunks of cells.
    """
    covariate_weights = _as_weights(covariate_weights, "covariate_weights")
    n_cells = covariate_weights.shape[0]
    class_one_hot = np.eye(n_classes)
    blocks = [np.broadcast_to(covariate_weights[:, None, :], (n_cells, n_classes, covariate_weights.shape[1]))]
    if class_groups:
        blocks.append(np.broadcast_to(class_one_hot, (n_cells, n_classes, n_classes)))
    if covariate_class_weights is not None:
        covariate_class_weights = _as_weights(covariate_class_weights, "covariate_class_weights")
        if covariate_class_weights.shape[0] != n_cells:
            raise ValueError("covariate_weights and covariate_class_weights must have the same number of cells")
        # [cell, y, d, k] = w_d(cell) * 1{y = k}
        products = covariate_class_weights[:, None, :, None] * class_one_hot[None, :, None, :]
        blocks.append(products.reshape(n_cells, n_classes, -1))
    features = np.concatenate(blocks, axis=2)
    if features.shape[2] == 0:
        raise ValueError("no features: give covariate weights, class_groups=True or covariate_class_weights")
    return features


def kandinsky_feature_names(
    covariate_names: list[str],
    class_names: list[str],
    *,
    class_groups: bool = True,
    covariate_class_names: list[str] | None = None,
) -> list[str]:
    """The name of each column of ``kandinsky_features`` called with the same options, in its order."""
    names = list(covariate_names) + ([f"type {name}" for name in class_names] if class_groups else [])
    return names + [f"{covariate} × {name}" for covariate in covariate_class_names or [] for name in class_names]


def too_small(cal_weights: np.ndarray, alpha: float) -> np.ndarray:
    """(G,) bool: the groups (columns of the calibration pairs' weights, (n, G)) with less calibration weight
    than 1/alpha - 1 — fewer than ceil(1/alpha) - 1 cells of a hard group. No procedure can calibrate them:
    Mondrian gives them the full label set, the augmented fit a threshold of +inf in their direction, and the
    plain Kandinsky fit a threshold from too few scores to hold its target."""
    _check_alpha(alpha)
    return np.asarray(cal_weights, dtype=float).sum(axis=0) < 1 / alpha - 1 - _RANK_TOLERANCE


def kandinsky_sets(
    cal_scores: np.ndarray,
    cal_features: np.ndarray,
    query_scores: np.ndarray,
    query_features: np.ndarray,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Kandinsky conformal sets and the fitted coefficients beta (G,).

    cal_features (n, G) = Phi(x_i, y_i) of the calibration pairs; query_features (m, K, G) = Phi(x, y)
    for every candidate y. beta is the linear (1 - alpha)-quantile regression of the calibration scores
    on the features (``quantile_regression``); y is in C(x) iff S(x, y) <= beta . Phi(x, y).
    Guarantee: weighted coverage >= 1 - alpha for every non-negative weight in the span of Phi, up to a
    slack shrinking like G / n (module docstring). The fit's optimality conditions give it exactly on
    the calibration cells: sum_i Phi_ig 1{S_i <= beta . Phi_i} >= (1 - alpha) sum_i Phi_ig for each g.

    Relation to Mondrian: with Phi the one-hot of disjoint groups (e.g. class_groups=True and no covariate
    columns: the class-conditional case), beta_g is an empirical (1 - alpha) quantile of group g's n_g scores — the
    ceil(n_g (1 - alpha))-th smallest when n_g (1 - alpha) is not an integer (else any value between that
    order statistic and the next minimises the loss). Mondrian takes the ceil((n_g + 1)(1 - alpha))-th:
    Kandinsky lacks the +1 finite-sample correction, so it equals Mondrian run at the level alpha_g' with
    ceil((n_g + 1)(1 - alpha_g')) = ceil(n_g (1 - alpha)), and its group coverage is >= (1 - alpha)
    n_g / (n_g + 1) rather than >= 1 - alpha.
    """
    query_scores = _as_query_scores(query_scores)
    query_features = np.asarray(query_features, dtype=float)
    if query_features.shape[:2] != query_scores.shape:
        raise ValueError(f"query_features must be (m, K, G) with (m, K) = {query_scores.shape}")
    _check_alpha(alpha)
    beta = quantile_regression(cal_features, cal_scores, 1 - alpha)
    # beta is exact only to the solver's tolerance: a score equal to its threshold — most kNN scores are exactly
    # 0 when the classes separate — fell out of the set by 1e-11 of rounding (coverage 0.51 on synthetic_100k)
    sets = query_scores <= query_features @ beta + SOLVER_TOLERANCE
    return sets, beta


def augmented_sets(
    cal_scores: np.ndarray,
    cal_features: np.ndarray,
    query_scores: np.ndarray,
    query_features: np.ndarray,
    alpha: float,
    uniforms: np.ndarray | None = None,
) -> np.ndarray:
    """(m, K) conditional-calibration sets over Kandinsky's features (Gibbs, Cherian & Candes 2023, arXiv 2305.12616).

    For a candidate (x, y) the quantile regression is refitted on the n calibration pairs plus (Phi(x, y),
    S(x, y)); with eta(S) the augmented point's dual (nondecreasing in S):

    - **randomised** (``uniforms`` (m,) in (0, 1), one per query cell, U = uniform - alpha): y is in C(x) iff
      eta(S(x, y)) < U, i.e. S(x, y) <= phi . gamma(U) (``quantile_lp.augmented_thresholds``). Guarantee, for
      exchangeable calibration and query cells and every f in the span of Phi:
      E[f(X, Y) (1{Y in C(X)} - (1 - alpha))] = 0 — coverage exactly 1 - alpha in every group, since the dual
      solution here does not depend on the order of the calibration cells (a unique optimum, a.s. in U).
    - **unrandomised** (None): U = 1 - alpha, y is in C(x) iff S(x, y) <= the fit augmented with (Phi(x, y),
      +inf) at Phi(x, y). The same guarantee with >= 0, and up to about G / (n + 1) over-coverage (G the rank
      of the features); sets are a function of the data alone.

    With Phi the one-hot of disjoint groups the unrandomised sets are exactly Mondrian's. The plain fit
    (``kandinsky_sets``) has no finite-sample bound and under-covers by about G / n at small n.

    The threshold phi . gamma(U) is nondecreasing in U and equals the plain fit's at U = 0, so the candidates the
    plain fit already holds need no program where U >= 0: only the others are solved.
    """
    query_scores = _as_query_scores(query_scores)
    query_features = np.asarray(query_features, dtype=float)
    if query_features.shape[:2] != query_scores.shape:
        raise ValueError(f"query_features must be (m, K, G) with (m, K) = {query_scores.shape}")
    _check_alpha(alpha)
    plain = kandinsky_sets(cal_scores, cal_features, query_scores, query_features, alpha)[0]
    if uniforms is None:
        levels = None
        undecided = np.argwhere(~plain)
    else:
        uniforms = np.asarray(uniforms, dtype=float)
        if uniforms.shape != (query_scores.shape[0],) or not ((uniforms > 0) & (uniforms < 1)).all():
            raise ValueError(f"uniforms must be ({query_scores.shape[0]},) in (0, 1)")
        cell_levels = uniforms - alpha
        undecided = np.argwhere(~plain | (cell_levels < 0)[:, None])
        levels = cell_levels[undecided[:, 0]]
    thresholds = augmented_thresholds(
        cal_features, cal_scores, 1 - alpha, query_features[undecided[:, 0], undecided[:, 1]], levels
    )
    sets = plain.copy()
    sets[undecided[:, 0], undecided[:, 1]] = (
        query_scores[undecided[:, 0], undecided[:, 1]] <= thresholds + SOLVER_TOLERANCE
    )
    return sets


def _as_proba(proba: np.ndarray) -> np.ndarray:
    proba = np.asarray(proba, dtype=float)
    if proba.ndim != 2:
        raise ValueError(f"proba must be (n, K), got shape {proba.shape}")
    return proba


def _as_query_scores(query_scores: np.ndarray) -> np.ndarray:
    query_scores = np.asarray(query_scores, dtype=float)
    if query_scores.ndim != 2:
        raise ValueError(f"query_scores must be (m, K), got shape {query_scores.shape}")
    return query_scores


def _as_weights(weights: np.ndarray, name: str) -> np.ndarray:
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"{name} must be (n, C), got shape {weights.shape}")
    # group weights are memberships: outside [0, 1] (or NaN) the coverage statement has no meaning
    if not ((weights >= 0) & (weights <= 1)).all():
        raise ValueError(f"{name} must lie in [0, 1]")
    return weights


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
