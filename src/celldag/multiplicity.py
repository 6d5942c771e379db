"""Holm's step-down (Holm 1979), the one implementation celldag's families of tests use: the leaderboard's pairs of
rows (``celldag.results.leaderboard.rank``), ``celldag check``'s methods (``celldag.results.method_verdicts``) and the
annotation track's query batches (``celldag.annotation.shift``).

Sort the m p-values ascending (ties in the order given); the k-th smallest (k = 0, 1, …) is compared with
level / (m − k) and rejected while every smaller one was: the family error stays ≤ level under any dependence between
the tests. Its adjusted p-value is the running maximum of (m − k) · p over the sorted ones, capped at 1: rejected
exactly where it is ≤ level, up to the rounding of the two products. Pure Python on floats, so every caller (lists,
numpy, pandas) gets the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def step_order(p_values: Sequence[float]) -> list[int]:
    """The indices of ``p_values`` from the smallest p to the largest, ties in the order given."""
    values = [float(p) for p in p_values]
    if any(math.isnan(p) for p in values):
        raise ValueError("Holm's step-down needs a p-value for every test, got NaN")
    return sorted(range(len(values)), key=lambda index: values[index])  # sorted() is stable


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given: monotone in p, capped at 1."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = -math.inf
    for step, index in enumerate(step_order(p_values)):
        running = max(running, (m - step) * float(p_values[index]))
        adjusted[index] = min(running, 1.0)
    return adjusted


def holm_steps(p_values: Sequence[float], level: float) -> tuple[list[float], list[bool]]:
    """Per p-value, in the order given: the level its step compares it with, level / (m − k) for the k-th smallest,
    and whether it is rejected (it and every smaller p under their step's level)."""
    m = len(p_values)
    thresholds, rejected = [0.0] * m, [False] * m
    passing = True
    for step, index in enumerate(step_order(p_values)):
        thresholds[index] = level / (m - step)
        passing = passing and float(p_values[index]) <= thresholds[index]
        rejected[index] = passing
    return thresholds, rejected


def holm_rejections(p_values: Sequence[float], level: float) -> list[bool]:
    """Whether Holm's step-down at family error ``level`` rejects each hypothesis, in the order given."""
    return holm_steps(p_values, level)[1]
