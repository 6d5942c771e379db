"""Kandinsky's design sized to the calibration set (celldag.annotation.design) and the randomised fit's draws."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.annotation.design import default_min_weight, sized_columns, visiting_order
from celldag.annotation.scoring import cell_uniforms


def one_hot(codes, width):
    return np.eye(width)[codes]


def test_a_group_of_its_own_weighs_its_calibration_cells_and_a_light_one_is_dropped():
    """Two batches (always kept), types of 60, 30 and 4 calibration cells: after the batches (whose sum is the
    constant) the lightest visited type's direction weighs what separates it from the last: the rare type."""
    batch = np.arange(94) % 2  # batches independent of types
    label = np.r_[np.zeros(60, int), np.ones(30, int), np.full(4, 2)]
    cal = np.hstack([one_hot(batch, 2), one_hot(label, 3)])
    candidates = np.vstack([np.hstack([np.tile([1.0, 0.0], (3, 1)), np.eye(3)])])  # one query cell, every label
    kept, dropped = sized_columns(cal, candidates, 20, order=[0, 1, 2, 3, 4], always=2)
    # type 0: its direction beyond the constant is 2 n0 n_rest / n = 2·60·34/94 ≈ 43 (±1 for the batch split)
    assert kept.tolist() == [0, 1, 2] and sorted(dropped) == [3, 4]
    assert dropped[4] == pytest.approx(dropped[3]) and 6 < dropped[3] < 9  # 2·30·4/34 ≈ 7: as light as the rare type
    # a weight of 0 keeps every column that is not in the span of those before it: the last type is (the constant)
    kept, dropped = sized_columns(cal, candidates, 0, always=2)
    assert kept.tolist() == [0, 1, 2, 3] and dropped == {}


def test_a_column_that_only_differs_on_the_query_rows_has_no_calibration_weight():
    """A type with no calibration cell: zero on every calibration row, one on its candidates: weight 0."""
    cal = np.hstack([np.ones((50, 1)), one_hot(np.zeros(50, int), 2)])
    candidates = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    kept, dropped = sized_columns(cal, candidates, 1)
    assert kept.tolist() == [0] and dropped == {1: 0.0, 2: 0.0}


def test_heavier_columns_are_visited_first_within_each_block():
    cal = np.column_stack(
        [
            np.ones(10),
            np.zeros(10),
            np.r_[np.ones(3), np.zeros(7)],
            np.r_[np.zeros(3), np.ones(7)],
            np.full(10, 0.5),
            np.full(10, 0.2),
        ]
    )
    # design order: batch (2), soft (2), type (2); visited: batch, type, soft — heaviest first in each
    assert visiting_order(cal, 2, 2, 2, ("batch", "type", "soft")) == [0, 1, 4, 5, 3, 2]
    assert default_min_weight(0.1) == pytest.approx(50)


def test_cell_uniforms_are_a_function_of_the_seed_and_the_key_alone():
    keys = [f"toy\x1frandom split\x1fb0\x1fc{i}" for i in range(1000)]
    draws = cell_uniforms(0, keys)
    assert ((draws > 0) & (draws < 1)).all() and abs(draws.mean() - 0.5) < 0.03
    assert np.array_equal(cell_uniforms(0, keys[::-1]), draws[::-1])  # independent of the cells' order
    assert np.array_equal(cell_uniforms(0, keys[:10]), draws[:10])  # and of the other cells
    assert not np.array_equal(cell_uniforms(1, keys), draws)
    # pinned: the same bits on every machine (sha256, not a platform's generator)
    assert cell_uniforms(0, ["toy\x1frandom split\x1fb0\x1fc0"])[0] == pytest.approx(draws[0], abs=0)
    with pytest.raises(ValueError, match="duplicate cell key"):
        cell_uniforms(0, keys[:3] + keys[1:2])
