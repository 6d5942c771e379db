"""Conformal prediction sets and their metrics (celldag.annotation.conformal, celldag.annotation.metrics).

Hand-checked small cases; coverage on simulated exchangeable data compared with the exact expected
coverage k / (n + 1) (continuous scores, so no ties), which catches an off-by-one rank; Kandinsky's
weighted coverage, its optimality conditions and its reductions to Mondrian; and identical sets to the
maintained library crepes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import QuantileRegressor

from celldag.annotation.conformal import (
    aps_scores,
    class_conditional_sets,
    conformal_quantile,
    kandinsky_features,
    kandinsky_sets,
    lac_scores,
    mondrian_sets,
    quantile_regression,
    split_sets,
    true_scores,
)
from celldag.annotation.metrics import group_coverage, max_shortfall, point_metrics, set_metrics, worst_coverage

ALPHA = 0.1
N_CLASSES = 5
N_BATCHES = 3


@dataclass
class Cells:
    proba: np.ndarray  # (n, K) the model's probabilities
    labels: np.ndarray  # (n,) true classes, drawn from the true probabilities
    batch: np.ndarray  # (n,) 0..2; the model is overconfident in batch 2
    soft: np.ndarray  # (n,) a soft membership in [0, 1]; the model is more overconfident the larger it is


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def simulate(rng: np.random.Generator, n: int) -> Cells:
    """i.i.d. cells (so calibration and query are exchangeable) with a model miscalibrated by batch and soft weight.

    The model sharpens the true probabilities (temperature > 1) in batch 2 and for a large soft weight: its
    true-label scores are larger there, so marginal sets undercover those groups.
    """
    logits = rng.normal(scale=1.5, size=(n, N_CLASSES))
    true_proba = softmax(logits)
    labels = np.minimum((rng.uniform(size=(n, 1)) > true_proba.cumsum(axis=1)).sum(axis=1), N_CLASSES - 1)
    batch = rng.integers(0, N_BATCHES, n)
    soft = rng.uniform(size=n)
    temperature = 1 + 1.5 * ((batch == 2) + soft)
    return Cells(softmax(logits * temperature[:, None]), labels, batch, soft)


def expected_coverage(n_cal: int, alpha: float = ALPHA) -> float:
    """Exact P(Y in C) of a conformal quantile of n_cal continuous scores: k / (n + 1), or 1 when k > n."""
    rank = math.ceil((n_cal + 1) * (1 - alpha) - 1e-9)
    return 1.0 if rank > n_cal else rank / (n_cal + 1)


def covered(sets: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return sets[np.arange(len(labels)), labels]


# ---- hand-checked cases ----


@pytest.mark.parametrize(
    ("n", "alpha", "rank"),
    [
        (9, 0.1, 9),  # ceil(10 * 0.9) = 9: the largest
        (19, 0.1, 18),
        (25, 0.1, 24),  # ceil(23.4)
        (9, 0.7, 3),  # 10 * (1 - 0.7) is 3.0000000000000004 in floating point: still rank 3
        (19, 0.95, 1),  # 20 * (1 - 0.95) = 1 up to rounding
        (8, 0.1, None),  # ceil(9 * 0.9) = 9 > 8: +inf
        (0, 0.5, None),  # no calibration scores: +inf
    ],
)
def test_conformal_quantile_rank(n, alpha, rank):
    scores = np.random.default_rng(n).permutation(np.arange(1, n + 1)) / 10  # the k-th smallest is k / 10
    expected = math.inf if rank is None else rank / 10
    assert conformal_quantile(scores, alpha) == expected


def test_conformal_quantile_rejects_bad_alpha_and_shape():
    with pytest.raises(ValueError, match="alpha"):
        conformal_quantile(np.ones(5), 0.0)
    with pytest.raises(ValueError, match="1-D"):
        conformal_quantile(np.ones((5, 2)), 0.1)


def test_lac_and_aps_scores_by_hand():
    proba = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.25, 0.5, 0.25]])
    np.testing.assert_allclose(lac_scores(proba), [[0.5, 0.7, 0.8], [0.8, 0.8, 0.4], [0.75, 0.5, 0.75]])
    # APS: mass of the classes with p_j >= p_y; tied classes count each other (rows 2 and 3)
    np.testing.assert_allclose(aps_scores(proba), [[0.5, 0.8, 1.0], [1.0, 1.0, 0.6], [1.0, 0.5, 1.0]])


def test_aps_scores_match_their_definition_with_ties():
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(6), size=300).round(1)  # rounding makes ties common
    proba /= proba.sum(axis=1, keepdims=True)
    at_or_above = proba[:, None, :] >= proba[:, :, None]  # [i, y, j] = p_j >= p_y
    brute_force = (at_or_above * proba[:, None, :]).sum(axis=2)
    np.testing.assert_allclose(aps_scores(proba), brute_force, atol=1e-12)
    top = proba.argmax(axis=1)
    no_tie_at_top = (proba == proba.max(axis=1, keepdims=True)).sum(axis=1) == 1
    assert no_tie_at_top.sum() > 100
    # S(x, argmax) is p_max exactly, not 1 minus the rest
    rows = np.flatnonzero(no_tie_at_top)
    assert np.array_equal(aps_scores(proba)[rows, top[rows]], proba[rows, top[rows]])


def test_true_scores_pick_each_cells_label():
    scores = np.arange(12.0).reshape(4, 3)
    assert true_scores(scores, np.array([2, 0, 1, 2])).tolist() == [2.0, 3.0, 7.0, 11.0]
    with pytest.raises(ValueError, match="class indices"):
        true_scores(scores, np.array([0, 1, 3, 0]))


def test_split_sets_by_hand():
    cal = np.arange(1, 10) / 10  # n = 9, alpha = 0.2: rank ceil(10 * 0.8) = 8, q = 0.8
    query = np.array([[0.05, 0.8, 0.85], [0.9, 0.5, 0.81]])
    assert split_sets(cal, query, 0.2).tolist() == [[True, True, False], [False, True, False]]


def test_mondrian_sets_by_hand_with_label_dependent_groups():
    cal_scores = np.array([0.1, 0.2, 0.3, 0.9, 0.4, 0.5])
    cal_groups = np.array(["a", "a", "a", "a", "b", "b"])
    # alpha = 0.4: group a (n = 4) rank ceil(5 * 0.6) = 3 -> 0.3; group b (n = 2) rank ceil(1.8) = 2 -> 0.5
    query_scores = np.array([[0.3, 0.5, 0.31], [0.31, 0.51, 0.99]])
    query_groups = np.array([["a", "b", "c"], ["a", "b", "c"]])  # the group depends on the candidate label
    sets, thresholds = mondrian_sets(cal_scores, cal_groups, query_scores, query_groups, 0.4)
    assert thresholds == {"a": 0.3, "b": 0.5, "c": math.inf}  # c has no calibration cells: full
    assert sets.tolist() == [[True, True, True], [False, False, True]]


def test_class_conditional_sets_use_each_class_quantile():
    cal_scores = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.8, 0.9])
    cal_labels = np.array([0, 0, 0, 1, 1, 1, 1])
    # alpha = 0.3: class 0 (n = 3) rank ceil(2.8) = 3 -> 0.3; class 1 (n = 4) rank ceil(3.5) = 4 -> 0.9
    query = np.array([[0.3, 0.9], [0.35, 0.95]])
    assert class_conditional_sets(cal_scores, cal_labels, query, 0.3).tolist() == [[True, True], [False, False]]


# ---- coverage on exchangeable data ----


@pytest.mark.parametrize("score", [lac_scores, aps_scores])
@pytest.mark.parametrize("n_cal", [25, 200])
def test_split_coverage_is_exact_on_exchangeable_data(score, n_cal):
    """Mean coverage over 200 trials equals k / (n + 1) within 4 standard errors, and lies in [1 - a, 1 - a + 1/(n+1)].

    With n_cal = 25 a rank one off would move the expectation by 1/26 (about 10 standard errors).
    """
    coverages = []
    for trial in range(200):
        rng = np.random.default_rng(trial)
        cal, query = simulate(rng, n_cal), simulate(rng, 500)
        sets = split_sets(true_scores(score(cal.proba), cal.labels), score(query.proba), ALPHA)
        coverages.append(covered(sets, query.labels).mean())
    mean, standard_error = np.mean(coverages), np.std(coverages, ddof=1) / np.sqrt(len(coverages))
    assert abs(mean - expected_coverage(n_cal)) < 4 * standard_error
    assert 1 - ALPHA - 4 * standard_error <= mean <= 1 - ALPHA + 1 / (n_cal + 1) + 4 * standard_error


def group_coverage_gaps(method: str, n_cal: int = 200, n_query: int = 500, trials: int = 200) -> dict:
    """Per group: the trial coverages and the exact expectations k(n_g) / (n_g + 1) given each trial's group sizes.

    Within a group, calibration and query scores are i.i.d. given the group sizes, so a group's expected
    coverage is exactly that of split conformal on its n_g calibration scores.
    """
    observed: dict = {}
    for trial in range(trials):
        rng = np.random.default_rng(1000 + trial)
        cal, query = simulate(rng, n_cal), simulate(rng, n_query)
        cal_scores, query_scores = true_scores(lac_scores(cal.proba), cal.labels), lac_scores(query.proba)
        if method == "class":
            cal_groups, query_groups = cal.labels, query.labels
            sets = class_conditional_sets(cal_scores, cal.labels, query_scores, ALPHA)
        elif method == "random":  # a label-independent grouping unrelated to the data
            cal_groups, query_groups = rng.integers(0, 4, n_cal), rng.integers(0, 4, n_query)
            candidate_groups = np.repeat(query_groups[:, None], N_CLASSES, axis=1)
            sets, _ = mondrian_sets(cal_scores, cal_groups, query_scores, candidate_groups, ALPHA)
        else:  # batch x class: label-dependent, so the group of each candidate label differs
            cal_groups, query_groups = cal.batch * N_CLASSES + cal.labels, query.batch * N_CLASSES + query.labels
            candidate_groups = query.batch[:, None] * N_CLASSES + np.arange(N_CLASSES)
            sets, _ = mondrian_sets(cal_scores, cal_groups, query_scores, candidate_groups, ALPHA)
        hits = covered(sets, query.labels)
        for group in np.unique(query_groups):
            in_group = query_groups == group
            expected = expected_coverage(int((cal_groups == group).sum()))
            observed.setdefault(group, []).append((hits[in_group].mean(), expected))
    return {group: np.array(pairs) for group, pairs in observed.items()}


@pytest.mark.parametrize("method", ["class", "random", "batch_x_class"])
def test_group_conditional_coverage_on_exchangeable_data(method):
    gaps = group_coverage_gaps(method)
    assert len(gaps) == {"class": N_CLASSES, "random": 4, "batch_x_class": N_BATCHES * N_CLASSES}[method]
    for group, pairs in gaps.items():
        observed, expected = pairs[:, 0], pairs[:, 1]
        standard_error = np.std(observed - expected, ddof=1) / np.sqrt(len(observed))
        # exact per-group expectation, and the guarantee itself
        assert abs(np.mean(observed - expected)) < 4 * standard_error + 1e-12, group
        assert np.mean(observed) >= 1 - ALPHA - 4 * standard_error, group


def test_marginal_sets_undercover_the_miscalibrated_batch_and_mondrian_fixes_it():
    """The group tests above can fail: marginal sets miss batch 2, where the model is overconfident."""
    marginal, by_batch = [], []
    for trial in range(50):
        rng = np.random.default_rng(trial)
        cal, query = simulate(rng, 300), simulate(rng, 500)
        cal_scores, query_scores = true_scores(lac_scores(cal.proba), cal.labels), lac_scores(query.proba)
        in_batch_2 = query.batch == 2
        marginal.append(covered(split_sets(cal_scores, query_scores, ALPHA), query.labels)[in_batch_2].mean())
        candidate_groups = np.repeat(query.batch[:, None], N_CLASSES, axis=1)
        sets, _ = mondrian_sets(cal_scores, cal.batch, query_scores, candidate_groups, ALPHA)
        by_batch.append(covered(sets, query.labels)[in_batch_2].mean())
    assert np.mean(marginal) < 1 - ALPHA - 0.05
    assert np.mean(by_batch) >= 1 - ALPHA - 0.01


# ---- Kandinsky ----


def test_kandinsky_features_columns():
    covariates = np.array([[1.0, 0.0, 0.3], [0.0, 1.0, 0.8]])  # batch one-hot, a soft weight
    batch = covariates[:, :2]
    features = kandinsky_features(covariates, 3, covariate_class_weights=batch)
    assert features.shape == (2, 3, 3 + 3 + 2 * 3)
    # cell 1, candidate class 2: covariates, one-hot of class 2, then batch d x class k at column d * 3 + k
    assert features[1, 2].tolist() == [0.0, 1.0, 0.8, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert kandinsky_features(covariates, 3, class_groups=False).shape == (2, 3, 3)
    only_classes = kandinsky_features(np.empty((2, 0)), 3)
    assert np.array_equal(only_classes[0], np.eye(3)) and np.array_equal(only_classes[1], np.eye(3))


@pytest.mark.parametrize("bad", [np.array([[1.2], [0.0]]), np.array([[-0.1], [0.5]]), np.array([[np.nan], [0.5]])])
def test_kandinsky_features_reject_weights_outside_unit_interval(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        kandinsky_features(bad, 2)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        kandinsky_features(np.ones((2, 1)), 2, covariate_class_weights=bad)
    with pytest.raises(ValueError, match="no features"):
        kandinsky_features(np.empty((2, 0)), 2, class_groups=False)


def pinball_loss(features: np.ndarray, targets: np.ndarray, beta: np.ndarray, level: float) -> float:
    residuals = targets - features @ beta
    return float(np.sum(np.maximum(level * residuals, (level - 1) * residuals)))


@pytest.mark.parametrize("level", [0.9, 0.5, 0.23])
def test_quantile_regression_minimises_the_pinball_loss(level):
    rng = np.random.default_rng(7)
    features = np.column_stack([np.ones(40), rng.uniform(size=40), rng.normal(size=40)])
    targets = features @ [0.5, 1.0, -2.0] + rng.standard_t(3, size=40)
    beta = quantile_regression(features, targets, level)
    loss = pinball_loss(features, targets, beta, level)
    reference = QuantileRegressor(quantile=level, alpha=0, fit_intercept=False, solver="highs").fit(features, targets)
    assert loss == pytest.approx(pinball_loss(features, targets, reference.coef_, level), abs=1e-9)
    # and no random nearby beta does better (the loss is convex: a local minimum is the global one)
    for step in rng.normal(scale=1e-3, size=(200, 3)):
        assert pinball_loss(features, targets, beta + step, level) >= loss - 1e-12


def test_quantile_regression_covers_each_feature_in_sample():
    """The LP's optimality conditions: for every feature g >= 0, the weight of calibration points with
    S <= fit is >= level * total weight, and of those with S < fit <= level * total weight (exactly, up to
    the solver tolerance on the points the fit interpolates)."""
    rng = np.random.default_rng(3)
    cells = simulate(rng, 400)
    scores = true_scores(lac_scores(cells.proba), cells.labels)
    covariates = np.column_stack([np.eye(N_BATCHES)[cells.batch], cells.soft])
    features = kandinsky_features(covariates, N_CLASSES)[np.arange(400), cells.labels]
    beta = quantile_regression(features, scores, 1 - ALPHA)
    fitted = features @ beta
    total = features.sum(axis=0)
    at_or_below = features[scores <= fitted + 1e-7].sum(axis=0)
    strictly_below = features[scores < fitted - 1e-7].sum(axis=0)
    assert np.all(at_or_below >= (1 - ALPHA) * total - 1e-9)
    assert np.all(strictly_below <= (1 - ALPHA) * total + 1e-9)
    assert np.all(at_or_below - strictly_below <= features.shape[1] + 1e-9)  # few points interpolated


def test_kandinsky_weighted_coverage_on_overlapping_fractional_groups():
    """E[w(X, Y)(1{Y in C(X)} - (1 - alpha))] / E[w] is within G / n_cal + 4 standard errors of 0 for the
    batch one-hots, a soft weight and its complement (overlapping, fractional), and each class.

    G / n_cal is the slack of fitting the quantile regression on the calibration cells only. Marginal split
    sets fail the same check on batch 2 (the test can fail)."""
    n_cal, n_query, trials = 500, 1000, 40
    kandinsky_rates, marginal_rates = [], []
    for trial in range(trials):
        rng = np.random.default_rng(2000 + trial)
        cal, query = simulate(rng, n_cal), simulate(rng, n_query)
        cal_scores, query_scores = true_scores(lac_scores(cal.proba), cal.labels), lac_scores(query.proba)
        cal_features = kandinsky_features(np.column_stack([np.eye(N_BATCHES)[cal.batch], cal.soft]), N_CLASSES)
        query_features = kandinsky_features(np.column_stack([np.eye(N_BATCHES)[query.batch], query.soft]), N_CLASSES)
        sets, beta = kandinsky_sets(
            cal_scores, cal_features[np.arange(n_cal), cal.labels], query_scores, query_features, ALPHA
        )
        assert beta.shape == (N_BATCHES + 1 + N_CLASSES,)
        weights = np.column_stack(
            [np.eye(N_BATCHES)[query.batch], query.soft, 1 - query.soft, np.eye(N_CLASSES)[query.labels]]
        )
        marginal_sets = split_sets(cal_scores, query_scores, ALPHA)
        for rates, trial_sets in [(kandinsky_rates, sets), (marginal_rates, marginal_sets)]:
            hits = covered(trial_sets, query.labels)
            rates.append(weights.T @ hits / weights.sum(axis=0))
    n_features = N_BATCHES + 1 + N_CLASSES
    kandinsky_rates, marginal_rates = np.array(kandinsky_rates), np.array(marginal_rates)
    tolerance = n_features / n_cal + 4 * kandinsky_rates.std(axis=0, ddof=1) / np.sqrt(trials)
    assert np.all(np.abs(kandinsky_rates.mean(axis=0) - (1 - ALPHA)) < tolerance)
    batch_2 = 2
    assert marginal_rates[:, batch_2].mean() < 1 - ALPHA - tolerance[batch_2]


def empirical_quantile_thresholds(scores: np.ndarray, groups: np.ndarray, alpha: float) -> dict:
    """Per group the ceil(n_g (1 - alpha))-th smallest score: Mondrian without the +1 correction."""
    thresholds = {}
    for group in np.unique(groups):
        group_scores = np.sort(scores[groups == group])
        thresholds[group] = group_scores[math.ceil(len(group_scores) * (1 - alpha)) - 1]
    return thresholds


def test_kandinsky_on_disjoint_groups_is_mondrian_without_the_plus_one():
    rng = np.random.default_rng(11)
    sizes = [47, 23, 61]  # n_g * 0.9 = 42.3, 20.7, 54.9: not integers, so the LP optimum is unique
    cal_groups = np.repeat(np.arange(3), sizes)
    cal_scores = rng.uniform(size=len(cal_groups)) + 0.3 * cal_groups  # a different distribution per group
    query_groups = rng.integers(0, 3, 400)
    query_scores = rng.uniform(size=(400, 4)) + 0.3 * query_groups[:, None]
    one_hot = np.eye(3)
    query_features = kandinsky_features(one_hot[query_groups], 4, class_groups=False)
    sets, beta = kandinsky_sets(cal_scores, one_hot[cal_groups], query_scores, query_features, ALPHA)
    empirical = empirical_quantile_thresholds(cal_scores, cal_groups, ALPHA)
    np.testing.assert_allclose(beta, [empirical[g] for g in range(3)], rtol=0, atol=1e-9)
    assert np.array_equal(sets, query_scores <= beta[query_groups][:, None])
    candidate_groups = np.repeat(query_groups[:, None], 4, axis=1)
    # Mondrian at alpha uses rank ceil((n_g + 1) 0.9) = 44, 22, 56 instead of 43, 21, 55: other thresholds
    _, mondrian_thresholds = mondrian_sets(cal_scores, cal_groups, query_scores, candidate_groups, ALPHA)
    assert all(mondrian_thresholds[g] > empirical[g] for g in range(3))
    # ... and at the per-group level alpha_g' = 1 - k_g / (n_g + 1), whose rank is k_g = ceil(n_g (1 - alpha)),
    # it gives Kandinsky's sets exactly
    for group, size in enumerate(sizes):
        alpha_prime = 1 - math.ceil(size * (1 - ALPHA)) / (size + 1)
        mondrian_prime, _ = mondrian_sets(cal_scores, cal_groups, query_scores, candidate_groups, alpha_prime)
        rows = query_groups == group
        assert np.array_equal(mondrian_prime[rows], sets[rows])


def test_kandinsky_with_class_one_hot_is_class_conditional_without_the_plus_one():
    rng = np.random.default_rng(12)
    n_per_class = 37  # 37 * 0.9 = 33.3: Kandinsky takes the 34th smallest, Mondrian ceil(38 * 0.9) = 35th
    cal_labels = np.repeat(np.arange(N_CLASSES), n_per_class)
    cal_scores = rng.uniform(size=len(cal_labels)) ** (1 + cal_labels)  # class-dependent score distributions
    query_scores = rng.uniform(size=(300, N_CLASSES))
    class_features = kandinsky_features(np.empty((300, 0)), N_CLASSES)  # Phi(x, y) = one-hot of y
    sets, beta = kandinsky_sets(cal_scores, np.eye(N_CLASSES)[cal_labels], query_scores, class_features, ALPHA)
    empirical = empirical_quantile_thresholds(cal_scores, cal_labels, ALPHA)
    np.testing.assert_allclose(beta, [empirical[k] for k in range(N_CLASSES)], rtol=0, atol=1e-9)
    alpha_prime = 1 - math.ceil(n_per_class * (1 - ALPHA)) / (n_per_class + 1)  # rank 34 among 37
    assert np.array_equal(sets, class_conditional_sets(cal_scores, cal_labels, query_scores, alpha_prime))
    assert not np.array_equal(sets, class_conditional_sets(cal_scores, cal_labels, query_scores, ALPHA))


def test_kandinsky_is_deterministic():
    rng = np.random.default_rng(5)
    cells = simulate(rng, 300)
    scores = true_scores(lac_scores(cells.proba), cells.labels)
    features = kandinsky_features(np.column_stack([np.eye(N_BATCHES)[cells.batch], cells.soft]), N_CLASSES)
    first = kandinsky_sets(scores, features[np.arange(300), cells.labels], lac_scores(cells.proba), features, ALPHA)
    second = kandinsky_sets(scores, features[np.arange(300), cells.labels], lac_scores(cells.proba), features, ALPHA)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])


# ---- the same sets as crepes ----


def crepes_data(seed: int, n_cal: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    cal, query = simulate(rng, n_cal), simulate(rng, 200)
    return true_scores(lac_scores(cal.proba), cal.labels), cal.labels, lac_scores(query.proba), cal.batch, query.batch


def no_integer_boundary(group_sizes: np.ndarray, alpha: float) -> bool:
    """crepes' predict_set keeps p >= alpha, our sets p > alpha: they differ only when alpha (n_g + 1) is an integer."""
    products = alpha * (np.asarray(group_sizes) + 1)
    return bool(np.all(np.abs(products - np.round(products)) > 1e-9))


def test_same_sets_as_crepes_split_class_conditional_and_mondrian():
    crepes = pytest.importorskip("crepes")
    cal_scores, cal_labels, query_scores, cal_batch, query_batch = crepes_data(seed=21, n_cal=150)
    assert no_integer_boundary([150, *np.bincount(cal_labels), *np.bincount(cal_batch)], ALPHA)
    confidence = 1 - ALPHA

    marginal = crepes.ConformalClassifier().fit(cal_scores)
    ours = split_sets(cal_scores, query_scores, ALPHA)
    assert np.array_equal(marginal.predict_set(query_scores, confidence=confidence, smoothing=False) == 1, ours)

    # class-conditional as crepes' WrapClassifier(class_cond=True) does it: bins = the class, one column at a time
    by_class = crepes.ConformalClassifier().fit(cal_scores, bins=cal_labels)
    all_in_class = [np.full(len(query_scores), k) for k in range(N_CLASSES)]
    crepes_sets = np.column_stack(
        [
            by_class.predict_set(query_scores, bins=bins, confidence=confidence, smoothing=False)[:, k]
            for k, bins in enumerate(all_in_class)
        ]
    )
    ours = class_conditional_sets(cal_scores, cal_labels, query_scores, ALPHA)
    assert np.array_equal(crepes_sets == 1, ours)
    assert 0 < ours.sum() < ours.size

    # Mondrian by an arbitrary (label-independent) group: crepes' bins, one per query cell
    by_batch = crepes.ConformalClassifier().fit(cal_scores, bins=cal_batch)
    crepes_sets = by_batch.predict_set(query_scores, bins=query_batch, confidence=confidence, smoothing=False)
    candidate_groups = np.repeat(query_batch[:, None], N_CLASSES, axis=1)  # the cell's batch for every label
    ours, _ = mondrian_sets(cal_scores, cal_batch, query_scores, candidate_groups, ALPHA)
    assert np.array_equal(crepes_sets == 1, ours)


@pytest.mark.parametrize("n_cal", [99, 139, 200])  # alpha (n + 1) = 10 for n = 99: an integer boundary
def test_same_sets_as_crepes_p_values_at_any_size(n_cal):
    """Our set is {y : p_y > alpha} with crepes' non-smoothed p-value (1 + #{cal >= s}) / (n + 1), for any n."""
    crepes = pytest.importorskip("crepes")
    cal_scores, _, query_scores, cal_batch, query_batch = crepes_data(seed=n_cal, n_cal=n_cal)
    marginal = crepes.ConformalClassifier().fit(cal_scores).predict_p(query_scores, smoothing=False)
    assert np.array_equal(marginal > ALPHA, split_sets(cal_scores, query_scores, ALPHA))
    by_batch = crepes.ConformalClassifier().fit(cal_scores, bins=cal_batch)
    p_values = by_batch.predict_p(query_scores, bins=query_batch, smoothing=False)
    candidate_groups = np.repeat(query_batch[:, None], N_CLASSES, axis=1)  # the cell's batch for every label
    ours, _ = mondrian_sets(cal_scores, cal_batch, query_scores, candidate_groups, ALPHA)
    assert np.array_equal(p_values > ALPHA, ours)


# ---- metrics ----


def test_set_metrics_by_hand():
    sets = np.array([[True, False, False], [True, True, False], [False, False, False], [False, True, True]])
    truth = np.array([0, 2, 1, 2])
    assert set_metrics(sets, truth) == {
        "coverage": 0.5,
        "set_size": 1.25,
        "singletons": 0.25,
        "empty": 0.25,
        "singleton_errors": 0.0,
    }
    # a wrong singleton, a right one, an empty set: one cell in three answered with one wrong type
    wrong = set_metrics(np.array([[False, True], [True, False], [False, False]]), np.array([0, 0, 1]))
    assert wrong["singletons"] == pytest.approx(2 / 3) and wrong["singleton_errors"] == pytest.approx(1 / 3)


def test_group_coverage_with_clopper_pearson_intervals():
    sets = np.zeros((16, 2), dtype=bool)
    sets[:5, 0] = True  # group 10: 5 of 10 covered
    sets[10:11, 0] = True  # group 2: 1 of 1 covered
    sets[11:, 1] = True  # group 3: 0 of 5 covered (the true label is 0)
    truth = np.zeros(16, dtype=int)
    groups = np.array([10] * 10 + [2] + [3] * 5)
    table = group_coverage(sets, truth, groups)
    assert table.columns.tolist() == ["group", "n", "covered", "coverage", "lower", "upper"]
    assert table["group"].tolist() == ["10", "2", "3"]  # sorted as strings
    assert table["n"].tolist() == [10, 1, 5] and table["covered"].tolist() == [5, 1, 0]
    assert table["coverage"].tolist() == [0.5, 1.0, 0.0]
    # 5 / 10: the textbook exact interval (0.1871, 0.8129); 1 / 1: (0.025, 1]; 0 / 5: [0, 1 - 0.025 ** (1/5))
    np.testing.assert_allclose(table["lower"], [0.187086, 0.025, 0.0], atol=1e-6)
    np.testing.assert_allclose(table["upper"], [0.812914, 1.0, 1 - 0.025 ** (1 / 5)], atol=1e-6)
    assert table["lower"].iloc[2] == 0.0 and table["upper"].iloc[1] == 1.0
    # an exact interval: the binomial tail beyond each end is 2.5 %
    assert stats.binom.sf(4, 10, table["lower"].iloc[0]) == pytest.approx(0.025)


def test_worst_coverage_and_max_shortfall():
    sets = np.array([[True, False]] * 6 + [[False, True]] * 2)
    truth = np.zeros(8, dtype=int)  # covered for the first 6 cells only
    batch = np.array(["a"] * 4 + ["b"] * 4)  # a: 4 / 4, b: 2 / 4
    small = np.array([0] * 7 + [1])  # 0: 6 / 7, 1: 0 / 1
    assert worst_coverage(sets, truth, batch) == 0.5
    assert worst_coverage(sets, truth, small) == 0.0
    assert worst_coverage(sets, truth, small, min_cells=2) == pytest.approx(6 / 7)
    assert math.isnan(worst_coverage(sets, truth, small, min_cells=9))
    assert max_shortfall(sets, truth, [batch, small], alpha=0.1) == pytest.approx(0.9)
    assert max_shortfall(sets, truth, [batch, small], alpha=0.1, min_cells=2) == pytest.approx(0.4)
    assert max_shortfall(sets, truth, [batch], alpha=0.6) == 0.0  # 0.4 target: no shortfall, never negative


def test_point_metrics_macro_f1_over_present_classes():
    truth = np.array([0, 0, 1, 1])
    predicted = np.array([0, 1, 1, 2])  # class 2 is absent from truth but predicted once
    proba = np.eye(4)[predicted] * 0.7 + 0.075
    metrics = point_metrics(proba, truth, 4)
    # class 0: P = 1, R = 1/2, F1 = 2/3; class 1: P = 1/2, R = 1/2, F1 = 1/2; classes 2 and 3 not counted
    assert metrics == pytest.approx({"accuracy": 0.5, "macro_f1": (2 / 3 + 1 / 2) / 2})
    with pytest.raises(ValueError, match="proba"):
        point_metrics(proba, truth, 3)


def test_kandinsky_keeps_scores_equal_to_a_threshold_the_solver_rounds(monkeypatch):
    """Separable classes: almost every calibration score is exactly 0, and HiGHS returned beta = 0 up to
    ±1e-11 (synthetic_100k's kNN: coverage 0.51 before the tolerance). Simulated: beta 1e-11 below its value."""
    import celldag.annotation.conformal as module

    rng = np.random.default_rng(0)
    n, k = 4000, 4
    truth = rng.integers(k, size=n)
    proba = np.eye(k)[truth]
    proba[:10] = 0.25  # a few ambiguous cells
    weights = np.column_stack([np.eye(2)[rng.integers(2, size=n)], rng.dirichlet(np.ones(3), size=n)])
    features = module.kandinsky_features(weights, k, class_groups=True)
    scores = module.lac_scores(proba)
    calibration = np.arange(n) < n // 2
    solve = module.quantile_regression
    monkeypatch.setattr(module, "quantile_regression", lambda *args: solve(*args) - 1e-11)
    sets, beta = module.kandinsky_sets(
        module.true_scores(scores[calibration], truth[calibration]),
        features[calibration][np.arange(n // 2), truth[calibration]],
        scores[~calibration],
        features[~calibration],
        0.1,
    )
    assert np.abs(beta).max() < 1e-9
    assert sets[np.arange(n // 2), truth[~calibration]].mean() == 1.0
    assert sets.sum(axis=1).mean() == pytest.approx(1.0)


# ---------------------------------------------------------------- rare types pooled, training-conditional coverage


def test_pooled_class_sets_by_hand():
    """α = 0.25 needs ⌈0.75/0.25⌉ = 3 calibration cells: class 0 (4 cells) keeps its own threshold, classes 1 and 2
    (1 and 2 cells) share the pool's 3 scores, and a pool still too small falls back to every calibration cell."""
    from celldag.annotation.conformal import min_calibration_cells, pooled_class_sets, rare_pooled_groups

    assert min_calibration_cells(0.1) == 9 and min_calibration_cells(0.25) == 3
    cal_scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    cal_labels = np.array([0, 0, 0, 0, 1, 2, 2])
    query = np.array([[0.4, 0.7, 0.65], [0.45, 0.71, 0.2]])
    # class 0: rank ⌈5 · 0.75⌉ = 4 of (0.1, 0.2, 0.3, 0.4) → 0.4; the pool (0.5, 0.6, 0.7): rank ⌈4 · 0.75⌉ = 3 → 0.7
    assert pooled_class_sets(cal_scores, cal_labels, query, 0.25).tolist() == [[True, True, True], [False, False, True]]
    assert class_conditional_sets(cal_scores, cal_labels, query, 0.25)[:, 1].all()  # one cell: in every set
    groups, rare, pooled_enough = rare_pooled_groups(np.array([0, 0, 0, 0, 1]), 3, 0.25)
    assert rare.tolist() == [False, True, True] and not pooled_enough and groups.tolist() == [0, 4, 4]
    # the pool of one cell: its types take the marginal threshold of all five scores, rank ⌈6 · 0.75⌉ = 5 → 0.5
    sets = pooled_class_sets(cal_scores[:5], np.array([0, 0, 0, 0, 1]), np.array([[0.5, 0.5, 0.51]]), 0.25)
    assert sets.tolist() == [[False, True, False]]


def test_pooled_class_sets_cover_each_common_type_and_the_rare_ones_together():
    """Simulated: two common types and three rare ones (3 calibration cells each at α = 0.1): every common type and
    the rare types pooled are covered ≥ 1 − α over 2,000 draws; class-conditional puts the rare types in every set,
    the pooled sets far less often."""
    from celldag.annotation.conformal import pooled_class_sets

    rng = np.random.default_rng(3)
    counts = np.array([60, 60, 3, 3, 3])
    covered = {0: [], 1: [], "rare": []}
    rare_everywhere = []
    for _ in range(2000):
        labels = np.repeat(np.arange(5), counts)
        scale = 1 + np.arange(5) / 4  # each type its own scale of own-label scores
        scores = rng.uniform(size=labels.size) * scale[labels]
        query_labels = rng.integers(5, size=50)
        query = rng.uniform(0.5, 3, size=(50, 5))  # a wrong label conforms less
        query[np.arange(50), query_labels] = rng.uniform(size=50) * scale[query_labels]
        sets = pooled_class_sets(scores, labels, query, 0.1)
        hit = sets[np.arange(50), query_labels]
        covered[0].append(hit[query_labels == 0].mean())
        covered[1].append(hit[query_labels == 1].mean())
        covered["rare"].append(hit[query_labels >= 2].mean())
        rare_everywhere.append(sets[:, 2:].mean())
        assert class_conditional_sets(scores, labels, query, 0.1)[:, 2:].all()
    for group, values in covered.items():
        assert np.nanmean(values) >= 0.9 - 2 * np.nanstd(values) / np.sqrt(len(values)), group
    assert np.mean(rare_everywhere) < 0.75  # class-conditional: 1


@pytest.mark.parametrize("n", [50, 178, 1000])
def test_training_conditional_risk_is_the_beta_law_of_split_coverage(n):
    """The chance over calibration sets that split conformal's coverage falls below 1 − α − 0.02, against 4,000
    simulated calibration sets of continuous scores (coverage given the set = the uniform mass below its quantile)."""
    from celldag.annotation.conformal import training_conditional_risk

    rng = np.random.default_rng(n)
    thresholds = np.array([conformal_quantile(rng.uniform(size=n), ALPHA) for _ in range(4000)])
    simulated = np.mean(np.minimum(thresholds, 1.0) < 1 - ALPHA - 0.02)
    risk = training_conditional_risk(n, ALPHA)
    assert abs(risk - simulated) <= 3 * np.sqrt(risk * (1 - risk) / 4000) + 1e-3, (risk, simulated)
    assert training_conditional_risk(5, ALPHA) == 0.0  # an infinite threshold covers every cell
