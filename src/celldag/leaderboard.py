"""Ranks with their uncertainty: which methods of a leaderboard table the seeds can tell apart.

A table ranked by its mean alone puts methods in a row that nothing in the data separates. Here every pair of ranked
rows is compared on the seeds ``ok`` for both, by a paired Student t test on the per-seed differences (seeds are
paired: the same seed draws the same data split, subsample and initialisation for every method), with Holm's
step-down over all pairs of the table, so that the chance of separating any pair whose means are equal stays ≤ 5 %
at once for the whole table. A row's rank interval is then every rank compatible with those decisions (Mogstad,
Romano, Shaikh & Wilhelm 2024, "Inference for ranks"): from 1 + the rows separably better than it to the number of
rows − those it is separably better than. The tie group is the rows not separable from the best.

A pair whose per-seed differences have no spread (a deterministic method on fixed data beside another) cannot be
separated by seeds whatever its mean difference: the test has no error to scale it by, so it stays tied. A row with
fewer than two ``ok`` seeds is not ranked. Nothing is resampled: the same scores give the same ranks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from scipy import stats

LEVEL = 0.05  # the family error rate of a table's pairwise decisions


@dataclass(frozen=True)
class PairTest:
    """One pair's paired comparison: ``better`` is the row the seeds put ahead, or None where not separable."""

    rows: tuple[Hashable, Hashable]
    seeds: int  # seeds ok for both
    mean_difference: float  # first minus second, on the table's scale
    p_value: float  # two-sided; 1.0 where the seeds cannot say (fewer than two, no spread)
    better: Hashable | None = None


@dataclass(frozen=True)
class Ranking:
    """A table's ranks: ``intervals`` (lowest, highest rank) per ranked row, ``tied_with_best`` the rows not
    separable from the best by mean, ``pairs`` every pair's test, ``unranked`` the rows with < 2 ok seeds."""

    intervals: Mapping[Hashable, tuple[int, int]]
    tied_with_best: frozenset
    pairs: tuple[PairTest, ...]
    unranked: tuple[Hashable, ...]

    @property
    def separable(self) -> int:
        return sum(test.better is not None for test in self.pairs)

    def separated(self, a: Hashable, b: Hashable) -> bool:
        """Whether the seeds separate rows ``a`` and ``b`` (False where either is unranked)."""
        return any(set(test.rows) == {a, b} and test.better is not None for test in self.pairs)


def paired_test(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[int, float, float]:
    """(seeds, mean difference a − b, two-sided p) of the paired t test on the seeds both have a finite score for."""
    seeds = sorted(seed for seed in set(a) & set(b) if math.isfinite(a[seed]) and math.isfinite(b[seed]))
    differences = [a[seed] - b[seed] for seed in seeds]
    if len(differences) < 2:
        return len(differences), (differences[0] if differences else math.nan), 1.0
    mean = math.fsum(differences) / len(differences)
    spread = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (len(differences) - 1))
    if spread == 0.0:  # not separable by seeds: no error to scale the difference by
        return len(differences), mean, 1.0
    t = mean / (spread / math.sqrt(len(differences)))
    return len(differences), mean, float(2 * stats.t.sf(abs(t), df=len(differences) - 1))


def holm_rejections(p_values: list[float], level: float = LEVEL) -> list[bool]:
    """Holm's step-down: reject the k-th smallest p while it is ≤ level / (m − k + 1), stopping at the first that is
    not; family error ≤ ``level`` under any dependence between the tests."""
    order = sorted(range(len(p_values)), key=lambda index: (p_values[index], index))
    rejected = [False] * len(p_values)
    for position, index in enumerate(order):
        if p_values[index] > level / (len(p_values) - position):
            break
        rejected[index] = True
    return rejected


def rank(per_seed: Mapping[Hashable, Mapping[int, float]], higher_is_better: bool, level: float = LEVEL) -> Ranking:
    """The rank intervals of a table's rows from their per-seed scores (seed → value; NaN or absent where not ok)."""
    finite = {row: {s: v for s, v in seeds.items() if math.isfinite(v)} for row, seeds in per_seed.items()}
    ranked = [row for row, seeds in finite.items() if len(seeds) >= 2]
    unranked = tuple(row for row in finite if len(finite[row]) < 2)
    sign = 1.0 if higher_is_better else -1.0
    raw = [(a, b, *paired_test(finite[a], finite[b])) for a, b in itertools.combinations(ranked, 2)]
    rejected = holm_rejections([p for *_, p in raw], level)
    pairs = tuple(
        PairTest((a, b), seeds, mean, p, (a if sign * mean > 0 else b) if reject else None)
        for (a, b, seeds, mean, p), reject in zip(raw, rejected, strict=True)
    )
    beaten_by = {row: 0 for row in ranked}  # rows separably better than it
    beats = {row: 0 for row in ranked}
    for test in pairs:
        if test.better is not None:
            worse = test.rows[1] if test.better == test.rows[0] else test.rows[0]
            beats[test.better] += 1
            beaten_by[worse] += 1
    intervals = {row: (1 + beaten_by[row], len(ranked) - beats[row]) for row in ranked}
    means = {row: math.fsum(finite[row].values()) / len(finite[row]) for row in ranked}
    best = max(ranked, key=lambda row: (sign * means[row], str(row)), default=None)
    tied = frozenset(row for row in ranked if row == best or not any(
        set(test.rows) == {row, best} and test.better is not None for test in pairs))  # fmt: skip
    return Ranking(intervals, tied, pairs, unranked)


def interval_text(interval: tuple[int, int]) -> str:
    """ "3" for a rank the seeds fix, "2–5" for the ranks compatible with them."""
    low, high = interval
    return str(low) if low == high else f"{low}–{high}"
