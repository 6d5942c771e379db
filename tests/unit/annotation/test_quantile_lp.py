"""Verified quantile regression and conditional calibration's augmented fit (celldag.annotation.quantile_lp).

Checked against what a solution must satisfy (a primal-dual certificate), against brute force (one refit
per candidate, as the definition reads), against Mondrian (the disjoint-group case, exact) and, statistically,
against the finite-sample guarantee on simulated exchangeable data at the default run's size.
"""

from __future__ import annotations

import numpy as np
import pytest

from celldag.annotation import conformal, quantile_lp
from celldag.annotation.quantile_lp import (
    TILT,
    Coordinates,
    Program,
    QuantileRegressionError,
    Ray,
    Vertex,
    augmented_thresholds,
    independent_columns,
    pinball_loss,
    quantile_regression,
)

REGRESSIONS = {"kandinsky_lp_ipm_infeasible": 5.840826, "kandinsky_lp_both_fail": 3.420711}  # verified optima


def regression_program(repo, name: str):
    data = np.load(repo / "tests/data/regressions" / f"{name}.npz")
    return data["features"], data["targets"], float(data["level"])


def loss(features, targets, level, beta) -> float:
    return float(pinball_loss(targets - features @ beta, level).sum())


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_the_programs_that_broke_highs_elsewhere_are_solved_and_verified(repo, name):
    features, targets, level = regression_program(repo, name)
    assert np.linalg.matrix_rank(features) == 15 < features.shape[1]
    beta = quantile_regression(features, targets, level)
    assert loss(features, targets, level, beta) == pytest.approx(REGRESSIONS[name], abs=1e-6)
    # the optimality condition of a (0.9)-quantile fit: at least 90 % of the points on or below it
    assert (targets <= features @ beta + conformal.SOLVER_TOLERANCE).mean() >= level
    # a vertex: 15 points fitted exactly (re-solved from them), not to the solver's 1e-8
    assert (np.abs(targets - features @ beta) < 1e-12).sum() >= 15
    # the same optimum from the rank-deficient program itself: whichever attempt verifies first
    solution = Program(features, targets, level).solve()
    gamma = solution.gamma if isinstance(solution, Vertex) else solution
    assert loss(features, targets, level, gamma) == pytest.approx(REGRESSIONS[name], abs=1e-6)


# every program that failed verification elsewhere (tests/data/regressions/README.md): the verified optimum's
# objective, min sum pinball(targets - features gamma) - linear . gamma
SHARED_REGRESSIONS = {
    "kandinsky_lp_ipm_infeasible": 5.840826,
    "kandinsky_lp_both_fail": 3.420711,
    "kandinsky_plain_gap_not_closed": 7.4994212516,
    "kandinsky_augmented_a": 3.2157626694,
    "kandinsky_augmented_b": 5.9990734173,
    "kandinsky_augmented_c": 4.1063831473,
}
# thresholds of two attempts that both verify agree to the tolerance scores are compared with them at (measured:
# up to 1.8e-8 where two vertices lie within the tilt of each other); docs/annotation.md says why it is safe
AGREEMENT = conformal.SOLVER_TOLERANCE


@pytest.mark.parametrize("name", sorted(SHARED_REGRESSIONS))
def test_every_attempt_certifies_the_same_thresholds_on_real_soft_groups(repo, name):
    """Memberships from 1e-102 to 1 - 1e-6 (condition number 1.5e6): in the raw columns the optimal gamma reaches
    1e5 and no certificate closes; in orthonormal coordinates every attempt gives a verified vertex, and all of
    them the same thresholds: at the calibration rows (plain fit, tilted as ``quantile_regression`` tilts it) or
    at the candidate (augmented fit, whose linear term is the candidate's)."""
    data = np.load(repo / "tests/data/regressions" / f"{name}.npz")
    features, targets, level = data["features"], data["targets"], float(data["level"])
    linear = data["linear"] if "linear" in data else np.zeros(features.shape[1])
    coordinates = Coordinates.of(features)
    if linear.any():
        reduced = coordinates.rows(linear[None, :])[0]
        where = reduced[None, :]
    else:
        reduced = -TILT * coordinates.orthonormal.mean(axis=0)
        where = coordinates.orthonormal
    program = Program(coordinates.orthonormal, targets, level)
    outcomes = dict(program.attempts(reduced))
    # an attempt may stop without an answer (HiGHS without presolve: status 4 on one of them), never answer wrongly
    verified = [outcome for outcome in outcomes.values() if isinstance(outcome, Vertex)]
    assert len(outcomes) == 5 and len(verified) >= 4, outcomes
    assert not any("'optimal' but" in outcome for outcome in outcomes.values() if isinstance(outcome, str)), outcomes
    thresholds = np.array([where @ vertex.gamma for vertex in verified])
    assert np.abs(thresholds - thresholds[0]).max() <= AGREEMENT
    gamma = coordinates.coefficients(verified[0].gamma, features.shape[1])
    objective = loss(features, targets, level, gamma) - (linear @ gamma if linear.any() else 0.0)
    assert objective == pytest.approx(SHARED_REGRESSIONS[name], abs=1e-6)
    # the raw columns are what failed: a certificate there does not close (kept as the reason for the coordinates)
    if name.startswith(("kandinsky_augmented", "kandinsky_plain")):
        with pytest.raises(QuantileRegressionError, match="dual bound"):
            Program(features, targets, level).solve(linear)


def test_an_infeasible_optimal_point_is_refused_and_the_next_attempt_taken(repo, monkeypatch):
    """What highs-ipm returned on the first program elsewhere: 'optimal' with |A x - b| = 0.067. Simulated:
    every attempt but the last says 'optimal' at a point off the optimum; only the last one's is accepted."""
    features, targets, level = regression_program(repo, "kandinsky_lp_ipm_infeasible")
    basis = independent_columns(features)
    program = Program(features[:, basis], targets, level)
    solve_lp = quantile_lp.linprog
    attempts = []

    def off_the_optimum(status, gamma, duals, message):
        return status, gamma + 0.01, duals, message

    monkeypatch.setattr(program, "_warm_solve", lambda linear: off_the_optimum(*Program._warm_solve(program, linear)))

    def linprog(*args, method, options, **kwargs):
        attempts.append((method, options["presolve"]))
        result = solve_lp(*args, method=method, options=options, **kwargs)
        if (method, options["presolve"]) != quantile_lp.ATTEMPTS[-1]:
            result.x = result.x + 0.01
        return result

    monkeypatch.setattr(quantile_lp, "linprog", linprog)
    solution = program.solve()
    assert attempts == list(quantile_lp.ATTEMPTS)
    assert loss(features[:, basis], targets, level, solution.gamma) == pytest.approx(
        REGRESSIONS["kandinsky_lp_ipm_infeasible"], abs=1e-6
    )


def test_no_verified_attempt_raises_naming_each(repo, monkeypatch):
    features, targets, level = regression_program(repo, "kandinsky_lp_both_fail")
    program = Program(features, targets, level)
    monkeypatch.setattr(program, "_warm_solve", lambda linear: (4, None, None, "Not Set"))
    solve_lp = quantile_lp.linprog

    def not_set(*args, **kwargs):
        result = solve_lp(*args, **kwargs)
        result.status, result.message = 4, "(HiGHS Status 0: Not Set)"
        return result

    monkeypatch.setattr(quantile_lp, "linprog", not_set)
    with pytest.raises(
        QuantileRegressionError,
        match=r"183 points, 17 features.*highs \(warm start\): status 4.*"
        r"highs-ipm \(presolve off\): status 4",
    ):
        program.solve()


def test_the_check_names_what_a_wrong_solution_breaks(repo):
    features, targets, level = regression_program(repo, "kandinsky_lp_ipm_infeasible")
    basis = independent_columns(features)
    program = Program(features[:, basis], targets, level)
    vertex = program.solve()
    zero = np.zeros(len(basis))
    duals = np.linalg.lstsq(features[:, basis].T, -zero, rcond=None)[0]
    assert "pinball loss" in program._check(vertex.gamma + 0.01, np.zeros(len(targets)), zero)
    assert "outside" in program._check(vertex.gamma, np.full(len(targets), 2.0), zero)
    assert "dual residual" in program._check(vertex.gamma, np.full(len(targets), level), zero)
    assert duals.shape == (len(targets),)


def test_independent_columns_drop_the_one_hot_sums():
    rng = np.random.default_rng(0)
    batch, soft = np.eye(3)[rng.integers(3, size=50)], rng.dirichlet(np.ones(4), size=50)
    features = np.hstack([batch, soft])  # both blocks sum to 1: rank 6 of 7
    kept = independent_columns(features)
    assert len(kept) == 6 and np.linalg.matrix_rank(features[:, kept]) == 6
    assert len(independent_columns(np.zeros((5, 3)))) == 0


def brute_force_sets(cal_scores, cal_features, query_scores, query_features, alpha):
    """The definition, one refit per candidate with scipy alone: y is in the set unless some minimiser of the
    pinball loss over the calibration points plus (phi, S) fits below S at phi — the candidate's dual at tau
    (Gibbs, Cherian & Candès' unrandomised set): the smallest fit at phi over the refit's minimisers is >= S."""
    from scipy.optimize import linprog

    sets = np.zeros(query_scores.shape, dtype=bool)
    n, g = cal_features.shape
    level = 1 - alpha
    for i, k in np.ndindex(*query_scores.shape):
        features = np.vstack([cal_features, query_features[i, k]])
        targets = np.append(cal_scores, query_scores[i, k])
        equality = np.hstack([features, np.eye(n + 1), -np.eye(n + 1)])
        costs = np.concatenate([np.zeros(g), np.full(n + 1, level), np.full(n + 1, 1 - level)])
        bounds = [(None, None)] * g + [(0, None)] * (2 * (n + 1))
        best = linprog(
            costs, A_eq=equality, b_eq=targets, bounds=bounds, method="highs-ipm", options={"presolve": False}
        )
        lowest = linprog(
            np.concatenate([query_features[i, k], np.zeros(2 * (n + 1))]),
            A_ub=costs[None, :],
            b_ub=[best.fun + 1e-9],
            A_eq=equality,
            b_eq=targets,
            bounds=bounds,
            method="highs-ipm",
            options={"presolve": False},
        )
        sets[i, k] = lowest.status == 0 and lowest.fun >= query_scores[i, k] - 1e-6
    return sets


@pytest.mark.parametrize("seed", [0, 1])
def test_augmented_sets_are_the_refits_of_the_definition(seed):
    rng = np.random.default_rng(seed)
    n, m, k = 120, 15, 3
    covariates = np.column_stack([np.eye(2)[rng.integers(2, size=n + m)], rng.dirichlet([1, 1], size=n + m)])
    features = conformal.kandinsky_features(covariates, k)
    labels, scores = rng.integers(k, size=n + m), rng.random((n + m, k))
    cal_scores, cal_features = scores[np.arange(n), labels[:n]], features[np.arange(n), labels[:n]]
    sets = conformal.augmented_sets(cal_scores, cal_features, scores[n:], features[n:], 0.1)
    assert np.array_equal(sets, brute_force_sets(cal_scores, cal_features, scores[n:], features[n:], 0.1))
    assert 0 < (~sets).sum() < sets.size / 2
    # and they hold the plain fit's sets: adding a point above the fit only raises it
    plain = conformal.kandinsky_sets(cal_scores, cal_features, scores[n:], features[n:], 0.1)[0]
    assert (sets >= plain).all()


@pytest.mark.parametrize("n_cells", [300, 40])
def test_augmented_sets_on_disjoint_groups_are_mondrian(n_cells):
    """Exactly Mondrian's (n_g + 1) quantile, including a group of 8 < 1/alpha - 1 cells: the full set."""
    rng = np.random.default_rng(3)
    groups, scores = rng.integers(4, size=n_cells), rng.random(n_cells)
    query_groups, query_scores = np.repeat(rng.integers(4, size=(60, 1)), 2, axis=1), rng.random((60, 2))
    if n_cells == 40:
        assert np.bincount(groups).min() < 9
    mondrian = conformal.mondrian_sets(scores, groups, query_scores, query_groups, 0.1)[0]
    one_hot = np.eye(4)
    augmented = conformal.augmented_sets(scores, one_hot[groups], query_scores, one_hot[query_groups], 0.1)
    assert np.array_equal(augmented, mondrian)


def test_thresholds_are_infinite_where_no_calibration_point_constrains_them():
    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1, 2], [50, 5, 0][:2] + [0])[:55]
    features, targets = np.eye(3)[groups], rng.random(55)
    # group 1: 5 cells < 9 (a ray along it), group 2: no cell (outside the calibration rows' span)
    thresholds = augmented_thresholds(features, targets, 0.9, np.eye(3))
    assert np.isfinite(thresholds[0]) and np.isinf(thresholds[1:]).all()
    assert thresholds[0] == np.sort(targets[:50])[int(np.ceil(51 * 0.9)) - 1]
    program = Program(features[:, :2], targets, 0.9)
    assert isinstance(program.solve(0.9 * np.array([0.0, 1.0])), Ray)
    assert conformal.too_small(features, 0.1).tolist() == [False, True, True]


# ---- the finite-sample guarantee, simulated at the default run's size: n = 175, G = 17 (rank 15) columns
ALPHA, N_CAL, N_QUERY, TRIALS = 0.1, 175, 100, 120
N_BATCHES, N_TYPES, N_SOFT = 4, 6, 7


def draw(rng, n: int, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group weights Phi(x, y) (batch one-hot, type one-hot, soft memberships: overlapping, fractional) and a
    score whose spread grows with the batch, the type and a covariate: no group is like another."""
    batch, latent, label = rng.integers(N_BATCHES, size=n), rng.normal(size=(n, 2)) * 1.5, rng.integers(N_TYPES, size=n)
    logits = -((latent[:, None, :] - centres[None]) ** 2).sum(axis=2)
    soft = np.exp(logits - logits.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    spread = (1 + batch) * (1 + 0.5 * np.abs(latent[:, 0])) * (1 + label / N_TYPES)
    return np.column_stack([np.eye(N_BATCHES)[batch], np.eye(N_TYPES)[label], soft]), np.abs(
        rng.normal(size=n)
    ) * spread


@pytest.fixture(scope="module")
def simulated_coverage():  # ≈ 50 s: the tests that read it are marked slow
    """Per group, the weighted coverage E[w_g 1{covered}] / E[w_g] of the augmented and the plain fit over
    TRIALS exchangeable calibration/query draws, and its standard error over trials."""
    rng = np.random.default_rng(20230517)
    centres = rng.normal(size=(N_SOFT, 2)) * 1.5
    covered = {"augmented": [], "randomised": [], "plain": []}
    weights = []
    for _ in range(TRIALS):
        cal_features, cal_scores = draw(rng, N_CAL, centres)
        query_features, query_scores = draw(rng, N_QUERY, centres)
        levels = rng.uniform(size=N_QUERY) - ALPHA  # U per query cell, uniform on (level - 1, level)
        thresholds = {
            "augmented": augmented_thresholds(cal_features, cal_scores, 1 - ALPHA, query_features),
            "randomised": augmented_thresholds(cal_features, cal_scores, 1 - ALPHA, query_features, levels),
            "plain": query_features @ quantile_regression(cal_features, cal_scores, 1 - ALPHA),
        }
        for fit, threshold in thresholds.items():
            covered[fit].append(
                ((query_scores <= threshold + conformal.SOLVER_TOLERANCE)[:, None] * query_features).sum(0)
            )
        weights.append(query_features.sum(axis=0))
    weights = np.array(weights)
    result = {}
    for fit, per_trial in covered.items():
        per_trial = np.array(per_trial)
        rate = per_trial.sum(axis=0) / weights.sum(axis=0)
        # ratio estimator's standard error over trials (the trials are independent; cells within one are not)
        residual = per_trial - rate * weights
        result[fit] = (rate, residual.std(axis=0, ddof=1) * np.sqrt(TRIALS) / weights.sum(axis=0))
    return result


@pytest.mark.slow
def test_the_augmented_fit_covers_every_group_at_the_default_size(simulated_coverage):
    rate, error = simulated_coverage["augmented"]
    n_features = N_BATCHES + N_TYPES + N_SOFT
    assert n_features == 17
    assert (rate >= 1 - ALPHA - 4 * error).all(), rate
    # unrandomised: over-coverage at most G / (n + 1), here 0.097
    assert (rate <= 1 - ALPHA + n_features / (N_CAL + 1) + 4 * error).all(), rate


@pytest.mark.slow
def test_the_randomised_augmented_fit_covers_every_group_exactly(simulated_coverage):
    """Exact coverage 1 - alpha for every group function in Phi's span: every group within binomial noise of 0.9,
    not above it as the unrandomised fit is (docs/annotation.md gives the numbers)."""
    rate, error = simulated_coverage["randomised"]
    assert (np.abs(rate - (1 - ALPHA)) <= 4 * error).all(), (rate, error)
    assert abs(rate.mean() - (1 - ALPHA)) < 0.01
    unrandomised = simulated_coverage["augmented"][0]
    assert unrandomised.mean() > rate.mean() + 0.02  # the over-coverage the randomisation removes


@pytest.mark.slow
def test_the_plain_fit_under_covers_by_about_g_over_n(simulated_coverage):
    """The paper's fit, kept as `kandinsky`: ~0.86 for every group at target 0.9 (docs/annotation.md)."""
    rate, error = simulated_coverage["plain"]
    assert (rate < 1 - ALPHA).all(), rate
    assert 1 - ALPHA - 17 / N_CAL < rate.mean() < 1 - ALPHA - 0.02, rate


def test_a_flat_unbounded_optimum_gives_the_threshold_of_its_near_end(repo):
    """Found by the default run: every solver returned a point 2e5 out along a flat ray (its gap 6e-5 does not
    close); tilted down, the program is bounded and its vertex gives the threshold of the flat optimum's near end."""
    data = np.load(repo / "tests/data/regressions/augmented_flat_ray.npz")
    features, targets, level, candidate = data["features"], data["targets"], float(data["level"]), data["candidate"]
    with pytest.raises(QuantileRegressionError, match="differs from the dual bound"):
        Program(features, targets, level).solve(level * candidate)
    assert augmented_thresholds(features, targets, level, candidate[None, :])[0] == pytest.approx(26 / 15, abs=1e-6)
