"""How two values of a score compare: bit for bit, or within a tolerance (``celldag audit``, ``celldag compare``)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """|now − recorded| ≤ abs + rel·|recorded|, for scores and for every value of an embedding."""

    rel: float
    abs: float

    def __str__(self) -> str:
        return f"|Δ| ≤ {self.abs:g} + {self.rel:g}·|recorded|"


# Runs recorded on CUDA train with deterministic kernels (celldag.training.seed_everything) and
# reproduce bit for bit on the same GPU model and driver; another model or driver may sum in another
# order, a float32 rounding difference that training can grow by a few orders of magnitude.
CUDA_TOLERANCE = Tolerance(rel=1e-4, abs=1e-6)


def values_match(recorded: float | None, now: float | None, tolerance: Tolerance | None) -> bool:
    """Exact (the same bits; NaN matches NaN) without a tolerance; else within it."""
    if recorded is None or now is None:
        return recorded is now
    if math.isnan(recorded) or math.isnan(now):
        return math.isnan(recorded) and math.isnan(now)
    if tolerance is None:
        return float(recorded).hex() == float(now).hex()
    return abs(now - recorded) <= tolerance.abs + tolerance.rel * abs(recorded)


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'s' * (count != 1)}"
