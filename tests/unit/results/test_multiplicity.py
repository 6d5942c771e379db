"""Holm's step-down (celldag.multiplicity), the one implementation behind the leaderboard's rank intervals, celldag
check's method verdicts and the annotation track's shift test: by hand, against statsmodels, and through each caller."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from celldag.annotation import shift
from celldag.multiplicity import holm_adjusted, holm_rejections, holm_steps
from celldag.results import leaderboard, method_verdicts


def test_holm_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 → 4·0.005, 3·0.01, 2·0.03, 1·0.04 = 0.02, 0.03, 0.06, 0.04 → running max
    assert holm_adjusted(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    thresholds, rejected = holm_steps(p, 0.05)
    assert thresholds == pytest.approx([0.05 / 3, 0.05 / 1, 0.05 / 2, 0.05 / 4])
    # 0.005 ≤ 0.05/4, 0.01 ≤ 0.05/3, 0.03 > 0.05/2: stop, 0.04 kept though ≤ 0.05/1
    assert rejected == [True, False, False, True] == holm_rejections(p, 0.05)
    assert holm_adjusted([0.6, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm_adjusted([0.02, 0.02]) == [0.04, 0.04]  # ties: the same adjusted p
    assert holm_adjusted([]) == [] and holm_steps([], 0.05) == ([], [])
    with pytest.raises(ValueError, match="NaN"):
        holm_adjusted([0.1, float("nan")])


def test_adjusted_p_values_reject_where_the_steps_do():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = list(rng.uniform(0, 0.1, int(rng.integers(1, 10))))
        assert [a <= 0.05 for a in holm_adjusted(p)] == holm_rejections(p, 0.05)


def test_against_statsmodels():
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 20):
        for p in (rng.uniform(0, 1, m), rng.uniform(0, 0.05, m), np.round(rng.uniform(0, 0.1, m), 2)):
            rejected, adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
            assert holm_adjusted(p) == pytest.approx(adjusted.tolist(), abs=1e-15)
            assert holm_rejections(p, 0.05) == rejected.tolist()


def test_the_callers_use_it():
    p = [0.01, 0.04, 0.03, 0.005]
    assert shift.holm(p).tolist() == holm_adjusted(p) and shift.holm(p).dtype == np.float64
    levels, rejected = method_verdicts.holm(pd.Series(p, index=list("abcd")), 0.05)
    assert levels.tolist() == holm_steps(p, 0.05)[0] and rejected.tolist() == holm_rejections(p, 0.05)
    assert list(rejected.index) == list("abcd") and rejected.dtype == bool
    assert leaderboard.holm_rejections is holm_rejections
