"""Is a query batch drawn like the calibration cells? A test per batch of what conformal sets are built from.

A conformal set's promise (coverage ≥ 1 − α) needs the query cells to be exchangeable with the calibration cells.
Every batch differs from every other in some way; what matters is whether it differs in the direction that costs
coverage: query cells that conform less to the classifier than calibration cells did. So both tests are one-sided,
on the conformity scores S(x, y) = 1 − p(y | x) the sets threshold:

- **label-free** (the batch has no labels): the score of each cell's best label, 1 − max_y p(y | x). Exchangeable
  cells give it one distribution; a batch whose cells the classifier is less sure of gives larger values.
- **labelled** (some cells of the batch carry labels): the score of each labelled cell's own label against the
  calibration cells' own-label scores — the very scores the threshold is a quantile of, so it tests the promise.

Both are Mann–Whitney U tests (query scores stochastically larger): for a batch of fewer than ``SMALL_BATCH`` tested
cells the p is a permutation p (9,999 relabellings, a fixed generator: the same p on every run), where the normal
approximation is least trustworthy; for larger batches the normal approximation with its tie correction (kNN's
probabilities take few values). A batch with fewer than ``MIN_CELLS`` cells is reported as too small to test, not
tested. Holm's step-down over the tested batches keeps the chance of calling any exchangeable batch shifted at most
``level``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celldag.multiplicity import holm_adjusted

LEVEL = 0.05  # family-wise: the chance of calling any batch of an exchangeable query shifted
LABEL_FREE, LABELLED = "label-free", "labelled"
MIN_CELLS = 2  # a side of a test needs this many cells
SMALL_BATCH = 30  # fewer tested query cells than this: a permutation p instead of the normal approximation
PERMUTATIONS = 9999
TOO_SMALL = "too small to test"


@dataclass(frozen=True)
class ShiftTest:
    """One batch's test: which, on how many cells, its one-sided p, Holm's adjusted p and the verdict."""

    batch: str
    test: str  # LABEL_FREE or LABELLED
    query_cells: int
    calibration_cells: int
    statistic: float  # the common-language effect size: P(query score > calibration score) + ½ P(tie)
    p_value: float
    adjusted_p: float
    verdict: str


def top_scores(proba: np.ndarray) -> np.ndarray:
    """(n,) the conformity score of each cell's best label, 1 − max_y p(y | x): what a label-free test compares."""
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim != 2 or proba.shape[1] == 0:
        raise ValueError(f"probabilities must be (cells, classes), got shape {proba.shape}")
    return 1.0 - proba.max(axis=1)


def larger_p(calibration: np.ndarray, query: np.ndarray) -> tuple[float, float]:
    """(effect, p): the one-sided Mann–Whitney p that ``query`` scores are stochastically larger than
    ``calibration`` scores, and P(query > calibration) + ½ P(tie) (0.5 under exchangeability)."""
    from scipy.stats import mannwhitneyu

    calibration, query = np.asarray(calibration, dtype=np.float64), np.asarray(query, dtype=np.float64)
    if calibration.size < MIN_CELLS or query.size < MIN_CELLS:
        raise ValueError(
            f"a shift test needs {MIN_CELLS}+ cells on each side, got {calibration.size} calibration "
            f"and {query.size} query cells"
        )
    if not (np.isfinite(calibration).all() and np.isfinite(query).all()):
        raise ValueError("conformity scores must be finite")
    if np.ptp(np.concatenate([calibration, query])) == 0:  # every score tied: nothing tells the sides apart
        return 0.5, 1.0
    if query.size < SMALL_BATCH:
        from scipy.stats import PermutationMethod

        method = PermutationMethod(n_resamples=PERMUTATIONS, rng=np.random.default_rng(0))
        found = mannwhitneyu(query, calibration, alternative="greater", method=method)
    else:
        found = mannwhitneyu(query, calibration, alternative="greater", method="asymptotic", use_continuity=True)
    return float(found.statistic / (query.size * calibration.size)), float(min(1.0, found.pvalue))


def holm_tested(p_values: list[float]) -> np.ndarray:
    """Holm over the finite p-values (the tested batches); NaN stays NaN (a batch too small to test)."""
    p = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    tested = np.isfinite(p)
    if tested.any():
        adjusted[tested] = holm(list(p[tested]))
    return adjusted


def holm(p_values: list[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the order given
    (``celldag.multiplicity.holm_adjusted``)."""
    return np.asarray(holm_adjusted(p_values), dtype=np.float64)


def verdict(adjusted_p: float, level: float, cells: int | None = None) -> str:
    if not np.isfinite(adjusted_p):
        return f"{TOO_SMALL} ({cells} cell{'s' if cells != 1 else ''})" if cells is not None else TOO_SMALL
    return f"shifted (p = {adjusted_p:.2g})" if adjusted_p <= level else f"no shift detected (p = {adjusted_p:.2g})"


def batch_tests(
    cal_top: np.ndarray,
    cal_true: np.ndarray,
    query_top: np.ndarray,
    query_true: np.ndarray,
    query_batch: np.ndarray,
    level: float = LEVEL,
) -> list[ShiftTest]:
    """One ``ShiftTest`` per query batch (sorted), Holm-adjusted over the tested ones; a batch of fewer than
    ``MIN_CELLS`` cells gets NaN p-values and the verdict ``TOO_SMALL``.

    ``cal_top``/``cal_true``: the calibration cells' best-label and own-label scores; ``query_top`` the query cells'
    best-label scores; ``query_true`` their own-label scores, NaN where a cell has no label. A batch with
    ``MIN_CELLS``+ labelled cells is tested on them (labelled), any other on every cell's best label (label-free).
    """
    query_batch = np.asarray(query_batch).astype(str)
    query_true = np.asarray(query_true, dtype=np.float64)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    raw = []
    for batch in np.unique(query_batch):
        members = query_batch == batch
        labelled = members & np.isfinite(query_true)
        if np.count_nonzero(labelled) >= MIN_CELLS:
            effect, p = larger_p(cal_true, query_true[labelled])
            raw.append((batch, LABELLED, int(labelled.sum()), cal_true.size, effect, p))
        elif np.count_nonzero(members) >= MIN_CELLS:
            effect, p = larger_p(cal_top, query_top[members])
            raw.append((batch, LABEL_FREE, int(members.sum()), cal_top.size, effect, p))
        else:  # one cell: no test can say anything of it
            raw.append((batch, LABEL_FREE, int(members.sum()), cal_top.size, np.nan, np.nan))
    adjusted = holm_tested([p for *_, p in raw])
    return [
        ShiftTest(*fields, float(a), verdict(float(a), level, fields[2]))
        for fields, a in zip(raw, adjusted, strict=True)
    ]
