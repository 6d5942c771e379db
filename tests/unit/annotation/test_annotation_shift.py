"""The shift test per query batch: hand-checked values, its false alarms under exchangeability (kNN-like tied
scores included) and that it sees a batch whose cells conform less."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from celldag.annotation import shift


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.01, 0.03, 0.04 → 3·0.01, 2·0.03, 1·0.04 → running max 0.03, 0.06, 0.06
    assert shift.holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert shift.holm([0.6, 0.9]).tolist() == [1.0, 1.0]


def test_the_one_sided_p_and_the_effect():
    effect, p = shift.larger_p(np.array([0.1, 0.2, 0.3]), np.array([0.4, 0.5]))
    assert effect == 1.0  # every query score above every calibration score
    # a small batch: the permutation p, here exact — 1 of the C(5, 2) = 10 ways to pick the query's two is the top two
    assert p == pytest.approx(0.1)
    rng = np.random.default_rng(0)
    calibration, query = rng.random(200), rng.random(shift.SMALL_BATCH) + 0.1
    effect, p = shift.larger_p(calibration, query)  # a batch of SMALL_BATCH cells or more: the normal approximation
    assert p == pytest.approx(mannwhitneyu(query, calibration, alternative="greater", method="asymptotic").pvalue)
    assert shift.larger_p(np.array([0.4, 0.5, 0.6]), np.array([0.1, 0.2]))[1] > 0.9  # more confident: no shift
    assert shift.larger_p(np.zeros(5), np.zeros(4)) == (0.5, 1.0)  # every score tied
    with pytest.raises(ValueError, match="2\\+ cells on each side"):
        shift.larger_p(np.zeros(5), np.zeros(1))


def tied_scores(rng, n, shift_by=0.0):
    """kNN-like best-label scores 1 - k/15, k mostly near 15: many ties."""
    votes = np.clip(np.round(rng.normal(13 - shift_by, 2, n)), 1, 15)
    return 1 - votes / 15


def test_false_alarms_under_exchangeability_stay_at_the_level():
    rng = np.random.default_rng(0)
    draws, alarms = 1000, 0
    for _ in range(draws):
        cal = tied_scores(rng, 150)
        query = tied_scores(rng, 3 * 60)
        tests = shift.batch_tests(cal, cal, query, np.full(query.size, np.nan), np.repeat(["a", "b", "c"], 60))
        alarms += any(test.verdict.startswith("shifted") for test in tests)
    # family-wise at 0.05 over three batches; 2 binomial SE above
    assert alarms / draws <= shift.LEVEL + 2 * np.sqrt(shift.LEVEL * (1 - shift.LEVEL) / draws)


def test_a_batch_the_classifier_is_less_sure_of_is_called_shifted_and_only_that_one():
    rng = np.random.default_rng(1)
    cal = tied_scores(rng, 150)
    query = np.concatenate([tied_scores(rng, 60), tied_scores(rng, 60, shift_by=2.0)])
    tests = shift.batch_tests(cal, cal, query, np.full(120, np.nan), np.repeat(["same", "noisy"], 60))
    by_batch = {test.batch: test for test in tests}
    assert by_batch["noisy"].verdict.startswith("shifted") and by_batch["noisy"].statistic > 0.7
    assert by_batch["same"].verdict.startswith("no shift detected")
    assert [test.batch for test in tests] == ["noisy", "same"]  # sorted
    assert all(test.test == shift.LABEL_FREE for test in tests)


def test_labelled_cells_are_tested_on_their_own_labels_scores_instead():
    rng = np.random.default_rng(2)
    cal_top, cal_true = tied_scores(rng, 100), rng.uniform(0, 0.5, 100)
    query_top = tied_scores(rng, 40)
    query_true = np.full(40, np.nan)
    query_true[:10] = rng.uniform(0.5, 1.0, 10)  # labelled cells whose own label the classifier doubts: coverage lost
    tests = shift.batch_tests(cal_top, cal_true, query_top, query_true, np.array(["x"] * 20 + ["y"] * 20))
    x, y = tests
    assert (x.test, x.query_cells, x.calibration_cells) == (shift.LABELLED, 10, 100)
    assert x.verdict.startswith("shifted")
    assert (y.test, y.query_cells) == (shift.LABEL_FREE, 20)
