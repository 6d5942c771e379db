"""Linear quantile regression solved as a linear program and verified; the augmented fits of conditional calibration.

The program, for calibration features X (n, r) of full column rank, scores S (n,), level tau and a linear term c (r,):

    min_gamma  F(gamma) = sum_i rho_tau(S_i - X_i gamma) - c . gamma,     rho_tau(r) = max(tau r, (tau - 1) r)

c = 0 is the plain quantile regression. c = tau phi is the fit augmented with the point (phi, S) for any S above
the fit (its loss is then tau (S - phi gamma)): conditional calibration's threshold at phi is phi . gamma of that
fit — the smallest over its minimisers where they are many (``augmented_thresholds``) — and the program is
unbounded (threshold +inf) when phi weighs a direction the calibration points do not pin down, e.g. a group of
fewer than tau / (1 - tau) calibration cells.

As a linear program: min tau sum(u) + (1 - tau) sum(v) - c . gamma subject to X gamma + u - v = S, u, v >= 0;
its dual: max S . a subject to X^T a = -c, tau - 1 <= a <= tau. A solver's status is never trusted: a solution
is accepted when the dual point is feasible and the duality gap F(gamma) - S . a is zero (to ``TOLERANCE``),
which proves gamma optimal whatever the solver did on the way (``Program._check``); an unbounded program when a
ray d of negative slope sum_i [(1 - tau)(X_i d)_+ + tau (X_i d)_-] - c . d is found (``Ray``). Otherwise the
next solver setting is tried (``ATTEMPTS``: HiGHS' presolve is what fails on rank-deficient programs on some
machines, and its interior-point method can return an infeasible point as "optimal").

Every program is solved in orthonormal coordinates of the calibration columns (``Coordinates``: X = Q R on a basis
of the columns, gamma' = R gamma), where its conditioning is that of Q, i.e. 1. Soft-group memberships from 1e-102
to 1 - 1e-6 make X itself ill-conditioned (condition number 1.5e6 on a lab's data): the optimal gamma then has
entries near 1e5, and a dual point within HiGHS' feasibility tolerance is off by residual x gamma ~ 1e-4 in
objective, so no certificate closes (``tests/data/regressions/``). In Q's coordinates the same programs verify from
every attempt, at the same thresholds phi . gamma to ~1e-10. Where the optimum is not unique (a flat face) the
smallest thresholds are taken, by a downward tilt of the linear term (``TILT``): the plain fit by the calibration
rows' mean, the augmented fit by phi itself, so every attempt returns the same optimum.

An optimum at a vertex — r calibration points fitted exactly, X_I gamma = S_I — is re-solved from those r points
(exact to rounding, the same on every machine) and kept as a ``Vertex``: its dual on I is linear in c, so one
matrix product tells every other candidate c whose optimum it also is. That is why conditional calibration
costs a few linear programs per fit rather than one per (cell, candidate label).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy import linalg, sparse
from scipy.optimize import linprog

LOG = logging.getLogger(__name__)
# Relative tolerance of every check: HiGHS' own feasibility tolerances are 1e-7; its verified optima here reach
# dual residuals ~1e-9 and duality gaps ~1e-13 (tests/unit/annotation/test_annotation_conformal.py's regression
# programs).
TOLERANCE = 1e-7
# A residual this small (relative to the scores' scale) counts as a point fitted exactly: HiGHS leaves up to ~1e-8.
ZERO_RESIDUAL = 1e-7
# a feature column (a candidate row) within this (relative) of the span of the others (of the calibration rows)
# counts as in it: ``independent_columns``
SPAN_TOLERANCE = 1e-6
# downward tilt of the augmented fit's linear term, relative to tau: picks the smallest threshold of a flat optimum
TILT = 1e-4
# (method, presolve) tried in turn until one gives a verified optimum or a verified ray
ATTEMPTS = (("highs", True), ("highs", False), ("highs-ipm", True), ("highs-ipm", False))


class QuantileRegressionError(RuntimeError):
    """No solver setting gave a verified solution: what each attempt returned, in one line."""


class UnverifiedPrograms(QuantileRegressionError):
    """Candidates of an augmented fit whose program no attempt verified: never a threshold kept quietly."""

    def __init__(self, count: int, total: int, first: str) -> None:
        self.count = count
        super().__init__(f"{count} of {total} candidate programs not verified; the first: {first}")


def pinball_loss(residuals: np.ndarray, level: float) -> np.ndarray:
    """rho_level of each residual (or the sum over the last axis by the caller)."""
    return np.maximum(level * residuals, (level - 1) * residuals)


def independent_columns(features: np.ndarray) -> np.ndarray:
    """Sorted indices of a basis of the columns of ``features``: pivoted QR, a column kept while it stands more than
    ``SPAN_TOLERANCE`` (relative) outside the span of those before it.

    One-hot blocks (batch, candidate class) and soft-group memberships each sum to one, so Kandinsky's columns are
    linearly dependent; the fitted thresholds on the span do not depend on which basis parametrises it, and the
    program on a basis is well posed (HiGHS' presolve broke on the dependent one). Nearly dependent columns count
    as dependent: a soft group whose memberships on the calibration cells are a cell type's one-hot up to 1e-7 of
    rounding leaves a direction the calibration pins down only to that rounding, along which every solver returns
    "optimal" points 1e5 out that no certificate verifies (found on the default run).
    """
    features = np.asarray(features, dtype=float)
    if features.shape[1] == 0 or not np.any(features):
        return np.array([], dtype=int)
    _, triangle, pivots = linalg.qr(features, mode="economic", pivoting=True)
    diagonal = np.abs(np.diag(triangle))
    rank = int((diagonal > diagonal[0] * SPAN_TOLERANCE).sum())
    return np.sort(pivots[:rank])


@dataclass(frozen=True)
class Coordinates:
    """Orthonormal coordinates of the calibration columns: ``features[:, basis] = orthonormal @ triangle`` (QR).

    A program in gamma' = triangle @ gamma has the constraint matrix Q, of condition number 1, whatever the
    conditioning of the group columns; thresholds phi . gamma = (phi_basis triangle^-1) . gamma' are the same.
    """

    basis: np.ndarray  # (r,) column indices (``independent_columns``)
    orthonormal: np.ndarray  # (n, r) Q
    triangle: np.ndarray  # (r, r) R
    loadings: np.ndarray  # (r, G) Q^T features: every column, basis or not, in Q's coordinates

    @classmethod
    def of(cls, features: np.ndarray) -> Coordinates:
        basis = independent_columns(features)
        orthonormal, triangle = linalg.qr(features[:, basis], mode="economic")
        return cls(basis, orthonormal, triangle, orthonormal.T @ features)

    def rows(self, candidates: np.ndarray) -> np.ndarray:
        """(m, r) the candidate rows phi (m, G) in Q's coordinates: phi_basis R^-1."""
        return linalg.solve_triangular(self.triangle, candidates[:, self.basis].T, trans="T").T

    def in_span(self, candidates: np.ndarray) -> np.ndarray:
        """(m,) bool: the rows that satisfy the calibration rows' linear relations among the columns (to
        ``SPAN_TOLERANCE``). One that does not weighs a direction no calibration point constrains."""
        gap = np.abs(self.rows(candidates) @ self.loadings - candidates).max(axis=1, initial=0.0)
        return gap <= SPAN_TOLERANCE * (1 + np.abs(candidates).max(axis=1, initial=0.0))

    def coefficients(self, gamma: np.ndarray, n_columns: int) -> np.ndarray:
        """beta (G,) on the original columns of a solution gamma' (r,): R^-1 gamma' on the basis, 0 elsewhere."""
        beta = np.zeros(n_columns)
        beta[self.basis] = linalg.solve_triangular(self.triangle, gamma)
        return beta


@dataclass(frozen=True)
class Vertex:
    """An optimum fitting the points I exactly, with what certifies it for other linear terms c.

    The dual on I is a_I(c) = -(c + g) X_I^{-1} (row form), g = sum_{i not in I} a_i X_i over the other points'
    duals (fixed by their residuals' signs): gamma is optimal for c exactly when a_I(c) lies in [tau - 1, tau].
    """

    gamma: np.ndarray  # (r,)
    inverse: np.ndarray  # (r, r) X_I^{-1}
    rest: np.ndarray  # (r,) g
    level: float

    def certifies(self, linear: np.ndarray) -> np.ndarray:
        """(m,) bool: for which rows of ``linear`` (m, r) gamma is optimal too."""
        duals = -(linear + self.rest) @ self.inverse
        return ((duals >= self.level - 1 - TOLERANCE) & (duals <= self.level + TOLERANCE)).all(axis=1)


@dataclass(frozen=True)
class Ray:
    """A direction d along which F decreases without bound: sum_i pinball slope of X_i d below c . d."""

    direction: np.ndarray  # (r,)
    slope_without_c: float  # sum_i [(1 - tau)(X_i d)_+ + tau (X_i d)_-]

    def certifies(self, linear: np.ndarray) -> np.ndarray:
        """(m,) bool: for which rows c of ``linear`` the program is unbounded along d (F's slope along it below
        -TOLERANCE (1 + |c|_1))."""
        return self.slope_without_c - linear @ self.direction < -TOLERANCE * (1 + np.abs(linear).sum(axis=1))


class Program:
    """The quantile-regression programs of one calibration set, for any linear term c.

    The first attempt of every solve is one HiGHS model kept across solves (highspy), started from the previous
    solve's basis: only the costs of gamma change between candidates, so the old basis stays feasible and a solve
    takes ~20 simplex iterations instead of ~200. Every answer is verified alike, whichever attempt gave it.
    """

    def __init__(self, features: np.ndarray, targets: np.ndarray, level: float) -> None:
        self.features = np.asarray(features, dtype=float)
        self.targets = np.asarray(targets, dtype=float)
        self.level = float(level)
        n_cells, n_features = self.features.shape
        identity = sparse.identity(n_cells, format="csc")
        self._constraints = sparse.hstack([sparse.csc_matrix(self.features), identity, -identity], format="csc")
        self._residual_costs = np.concatenate([np.full(n_cells, level), np.full(n_cells, 1 - level)])
        self._bounds = [(None, None)] * n_features + [(0, None)] * (2 * n_cells)
        self._scale = 1.0 + np.abs(self.targets).max(initial=0.0)
        self._warm = None  # the highspy model, made at the first solve

    def objective(self, gamma: np.ndarray, linear: np.ndarray) -> float:
        return float(pinball_loss(self.targets - self.features @ gamma, self.level).sum() - linear @ gamma)

    def solve(self, linear: np.ndarray | None = None) -> Vertex | Ray | np.ndarray:
        """The verified optimum of F for the linear term c (default 0): a ``Vertex`` where it is one, else the
        optimal gamma itself (a degenerate optimum no r points pin down); a ``Ray`` where F is unbounded.
        Raises ``QuantileRegressionError`` naming each attempt when none verifies."""
        outcomes = []
        for attempt, outcome in self.attempts(linear):
            if not isinstance(outcome, str):
                return outcome
            outcomes.append(f"{attempt}: {outcome}")
        raise QuantileRegressionError(
            f"no verified optimum of the quantile regression ({self.features.shape[0]} points, "
            f"{self.features.shape[1]} features, level {self.level}): " + "; ".join(outcomes)
        )

    def attempts(self, linear: np.ndarray | None = None):
        """(attempt, its verified ``Vertex`` / gamma / ``Ray``, or what failed as a str) of every attempt in turn,
        lazily: ``solve`` stops at the first verified one; a test can ask that they all agree."""
        linear = np.zeros(self.features.shape[1]) if linear is None else np.asarray(linear, dtype=float)
        ray_tried = False
        for attempt, (status, gamma, duals, message) in self._attempts(linear):
            if status == 0:
                # a vertex's duals are recomputed from its exactly fitted points (X^T a = -c to rounding), so its
                # certificate does not inherit the solver's dual residual, which large coefficients amplify
                vertex = self._vertex(gamma, duals, linear)
                problem = None if vertex else self._check(gamma, duals, linear)
                yield attempt, (vertex or gamma) if problem is None else f"'optimal' but {problem}"
                continue
            if (
                not ray_tried and linear.any()
            ):  # unbounded? HiGHS says so with status 3, or 4 ("Not Set"), or not at all
                ray_tried, ray = True, self._ray(linear)
                if ray is not None:
                    yield attempt, ray
                    continue
            yield attempt, f"status {status} ({message})"

    def _attempts(self, linear: np.ndarray):
        """(name, (status as linprog's: 0 optimal, gamma, duals, message)) of each attempt in turn, lazily."""
        yield "highs (warm start)", self._warm_solve(linear)
        for method, presolve in ATTEMPTS:
            result = linprog(
                np.concatenate([-linear, self._residual_costs]),
                A_eq=self._constraints,
                b_eq=self.targets,
                bounds=self._bounds,
                method=method,
                options={"presolve": presolve},
            )
            optimal = result.status == 0
            yield (
                f"{method} (presolve {'on' if presolve else 'off'})",
                (
                    result.status,
                    result.x[: self.features.shape[1]] if optimal else None,
                    result.eqlin.marginals if optimal else None,
                    result.message,
                ),
            )

    def _warm_solve(self, linear: np.ndarray):
        import highspy

        n_features = self.features.shape[1]
        if self._warm is None:
            model = highspy.HighsLp()
            model.num_col_, model.num_row_ = self._constraints.shape[1], self._constraints.shape[0]
            model.col_cost_ = np.concatenate([-linear, self._residual_costs])
            model.col_lower_ = np.concatenate(
                [np.full(n_features, -highspy.kHighsInf), np.zeros(2 * len(self.targets))]
            )
            model.col_upper_ = np.full(model.num_col_, highspy.kHighsInf)
            model.row_lower_ = model.row_upper_ = self.targets
            model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
            model.a_matrix_.start_, model.a_matrix_.index_ = self._constraints.indptr, self._constraints.indices
            model.a_matrix_.value_ = self._constraints.data
            self._warm = highspy.Highs()
            self._warm.setOptionValue("output_flag", False)
            self._warm.passModel(model)
        else:
            self._warm.changeColsCost(n_features, np.arange(n_features), -linear)
        self._warm.run()
        status = self._warm.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            return 4, None, None, self._warm.modelStatusToString(status)
        solution = self._warm.getSolution()
        return 0, np.array(solution.col_value[:n_features]), np.array(solution.row_dual), "optimal"

    def _check(self, gamma: np.ndarray, duals: np.ndarray, linear: np.ndarray) -> str | None:
        """None when (gamma, duals) is a primal-dual optimal pair to TOLERANCE, else what fails."""
        if (duals < self.level - 1 - TOLERANCE).any() or (duals > self.level + TOLERANCE).any():
            outside = max(self.level - 1 - duals.min(), duals.max() - self.level)
            return f"duals outside [{self.level - 1:g}, {self.level:g}] by {outside:.2g}"
        dual_residual = np.abs(self.features.T @ duals + linear).max(initial=0.0)
        if dual_residual > TOLERANCE * self._scale * max(1, len(duals)) ** 0.5:
            return f"dual residual |X^T a + c| = {dual_residual:.2g}"
        primal, dual = self.objective(gamma, linear), float(self.targets @ duals)
        if abs(primal - dual) > TOLERANCE * (self._scale + abs(primal)) * max(1, len(duals)) ** 0.5:
            return f"pinball loss of its beta {primal:.9g} differs from the dual bound {dual:.9g}"
        return None

    def _vertex(self, gamma: np.ndarray, duals: np.ndarray, linear: np.ndarray) -> Vertex | None:
        """The optimum re-solved from r exactly fitted points and certified, or None where it is not a vertex."""
        residuals = self.targets - self.features @ gamma
        fitted = np.flatnonzero(np.abs(residuals) <= ZERO_RESIDUAL * self._scale)
        # points whose dual lies inside (tau - 1, tau) must be fitted exactly: they come first
        interior = np.minimum(duals[fitted] - (self.level - 1), self.level - duals[fitted])
        chosen = _independent_rows(self.features, fitted[np.argsort(-interior, kind="stable")])
        if len(chosen) < self.features.shape[1]:
            return None
        rows = self.features[chosen]
        try:
            exact, inverse = np.linalg.solve(rows, self.targets[chosen]), np.linalg.inv(rows)
        except np.linalg.LinAlgError:  # rounding made the chosen rows singular after all: no vertex to keep
            return None
        residuals = self.targets - self.features @ exact
        others = np.ones(len(residuals), dtype=bool)
        others[chosen] = False
        other_duals = np.where(
            residuals > ZERO_RESIDUAL * self._scale,
            self.level,
            np.where(
                residuals < -ZERO_RESIDUAL * self._scale, self.level - 1, np.clip(duals, self.level - 1, self.level)
            ),
        )
        vertex = Vertex(exact, inverse, other_duals[others] @ self.features[others], self.level)
        all_duals = other_duals.copy()
        all_duals[chosen] = -(linear + vertex.rest) @ vertex.inverse
        if not vertex.certifies(linear[None, :])[0] or self._check(exact, all_duals, linear) is not None:
            return None
        return vertex

    def _ray(self, linear: np.ndarray) -> Ray | None:
        """A verified direction of unbounded decrease of F for c, from the bounded program
        min sum_i [(1 - tau) p_i + tau q_i] - c . d, X d = p - q, |d| <= 1; None if it finds none."""
        n_cells, n_features = self.features.shape
        costs = np.concatenate([-linear, np.full(n_cells, 1 - self.level), np.full(n_cells, self.level)])
        identity = sparse.identity(n_cells, format="csr")
        constraints = sparse.hstack([sparse.csr_matrix(self.features), -identity, identity], format="csr")
        bounds = [(-1, 1)] * n_features + [(0, None)] * (2 * n_cells)
        result = linprog(costs, A_eq=constraints, b_eq=np.zeros(n_cells), bounds=bounds, method="highs")
        if result.status != 0:
            return None
        direction = result.x[:n_features]
        ray = Ray(direction, float(pinball_slope(self.features @ direction, self.level)))
        return ray if ray.certifies(linear[None, :])[0] else None


def pinball_slope(steps: np.ndarray, level: float) -> float:
    """d/ds sum_i rho_level(S_i - s step_i) for s large: the loss's growth along a direction."""
    return float(((1 - level) * np.maximum(steps, 0) + level * np.maximum(-steps, 0)).sum())


def _independent_rows(features: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The first rows of ``candidates`` (in order) that are linearly independent, up to the rank of ``features``:
    Gram-Schmidt, orthogonalised twice (once loses orthogonality on near-dependent rows), and a row kept only
    when 1e-6 of its norm stays outside the span of those before it, so that the kept rows are well conditioned."""
    chosen: list[int] = []
    basis = np.empty((0, features.shape[1]))
    for row in candidates:
        vector = features[row].copy()
        for _ in range(2):
            vector -= basis.T @ (basis @ vector)
        norm = np.linalg.norm(vector)
        if norm > 1e-6 * max(1.0, np.linalg.norm(features[row])):
            chosen.append(int(row))
            basis = np.vstack([basis, vector / norm])
            if len(chosen) == features.shape[1]:
                break
    return np.array(chosen, dtype=int)


def quantile_regression(features: np.ndarray, targets: np.ndarray, level: float) -> np.ndarray:
    """beta (G,) minimising sum_i rho_level(targets_i - beta . features_i), no intercept (add one as a feature).

    Solved in orthonormal coordinates of a basis of the columns (``Coordinates``; the other coefficients are 0) and
    verified (``Program.solve``). Of a flat optimum, the minimiser with the smallest mean fit on the calibration
    rows (a downward tilt of ``TILT``: the lower empirical quantile where the groups are disjoint), so that every
    solver attempt returns the same thresholds features @ beta, to rounding.
    """
    features, targets = _checked(features, targets, level)
    coordinates = Coordinates.of(features)
    if not len(coordinates.basis):
        return np.zeros(features.shape[1])
    tilt = -TILT * coordinates.orthonormal.mean(axis=0)
    solution = Program(coordinates.orthonormal, targets, level).solve(tilt)
    if isinstance(solution, Ray):  # cannot happen for a tilt below every slope; a bug if it does
        raise QuantileRegressionError(f"the tilted plain fit is unbounded along {solution.direction}")
    return coordinates.coefficients(solution.gamma if isinstance(solution, Vertex) else solution, features.shape[1])


def augmented_thresholds(
    features: np.ndarray, targets: np.ndarray, level: float, candidates: np.ndarray, uniforms: np.ndarray | None = None
) -> np.ndarray:
    """(m,) conditional calibration's threshold at each candidate feature row phi (m, G): phi . gamma of the fit
    with the linear term u phi, for the level u = ``level`` (the unrandomised fit: the fit augmented with (phi, S)
    for an S above it, module docstring) or, randomised, u = ``uniforms`` (m,) drawn in (level - 1, level).

    Why u: the augmented point's dual eta(S) is the slope in S of the augmented program's optimal value, and
    min over S of [that value - u S] puts the point on the fit (its pinball term minus u times its residual is
    smallest at 0 for u in (level - 1, level)), leaving min F(gamma) - u phi . gamma. So phi . gamma(u) is where
    eta crosses u, and {S <= phi . gamma(U)} is Gibbs, Cherian & Candes' randomised set {eta(S) < U}.

    +inf (-inf) where that program is unbounded along a direction that raises (lowers) the threshold; +inf for a
    candidate whose phi lies outside the span of the calibration rows (it weighs a direction no calibration point
    constrains). Vertices and rays found for one candidate are tried on every other first, so the number of
    linear programs is the number of distinct optima, not of candidates. Raises ``UnverifiedPrograms`` (after
    trying every candidate, so that its count is complete) when any candidate's program verifies from no attempt.
    """
    features, targets = _checked(features, targets, level)
    candidates = np.asarray(candidates, dtype=float)
    if candidates.ndim != 2 or candidates.shape[1] != features.shape[1]:
        raise ValueError(f"candidates must be (m, {features.shape[1]}), got {candidates.shape}")
    if uniforms is None:
        # Of a flat optimum (a group of exactly 1/alpha - 1 cells makes one) the smallest threshold, the one of
        # the dual definition (y left out once its dual reaches level: same guarantee, smaller sets): the program
        # tilted down by TILT has its optimum there, or at a vertex within TILT |phi . (gamma - gamma')| of it
        levels = np.full(len(candidates), level - TILT)
    else:
        levels = np.asarray(uniforms, dtype=float)
        if levels.shape != (len(candidates),) or not ((levels > level - 1) & (levels < level)).all():
            raise ValueError(f"uniforms must be ({len(candidates)},) in ({level - 1:g}, {level:g})")
    thresholds = np.full(len(candidates), np.inf)
    coordinates = Coordinates.of(features)
    if not len(coordinates.basis):
        return thresholds
    program = Program(coordinates.orthonormal, targets, level)
    reduced = coordinates.rows(candidates)
    linear = levels[:, None] * reduced
    failures: list[str] = []
    pending = np.flatnonzero(coordinates.in_span(candidates))
    while len(pending):
        first = pending[0]
        try:
            solution = program.solve(linear[first])
        except QuantileRegressionError as err:
            LOG.warning("augmented fit: candidate %s not verified: %s", first, err)
            failures.append(str(err))
            thresholds[first] = np.nan
            pending = pending[1:]
            continue
        if isinstance(solution, np.ndarray):  # a degenerate optimum no r points pin down: its own candidate only
            covered = np.arange(len(pending)) == 0
            thresholds[first] = reduced[first] @ solution
        else:
            covered = solution.certifies(linear[pending])
            done = pending[covered]
            if isinstance(solution, Vertex):
                thresholds[done] = reduced[done] @ solution.gamma
            else:  # unbounded: the threshold runs off to the side the direction moves it
                thresholds[done] = np.where(reduced[done] @ solution.direction > 0, np.inf, -np.inf)
        pending = pending[~covered]
    if failures:
        raise UnverifiedPrograms(len(failures), len(candidates), failures[0])
    return thresholds


def _checked(features: np.ndarray, targets: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    features = np.asarray(features, dtype=float)
    targets = np.asarray(targets, dtype=float)
    if features.ndim != 2 or targets.shape != (features.shape[0],):
        raise ValueError(f"features must be (n, G) and targets (n,), got {features.shape} and {targets.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not (np.isfinite(features).all() and np.isfinite(targets).all()):
        raise ValueError("features and targets must be finite")
    return features, targets
