"""Supervision-aware evaluation: K-/U-QDist against raw distances, known-leaf buckets, RF on unknown leaves."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.data.bm import simulate_bm
from celldag.lineage.reconstruct import euclidean_distances
from celldag.lineage.scoring import QuartetSample, partial_label_scores, partition_scores
from celldag.lineage.supervision import clade_labels, known_quartets
from celldag.lineage.tree import parse_newick, path_distances
from celldag.tracks import relative_reduction


@pytest.fixture(scope="module")
def lineage():
    sim = simulate_bm(
        depth=4, n_signal=20, n_noise=20, n_spurious=10, max_walk=3.0, noise_std=1.0, measurement_std=1.0, seed=5
    )
    truth = parse_newick(sim.tree_newick)
    names = list(sim.leaf_names)
    return truth, names, path_distances(truth, names, topology_only=True), euclidean_distances(sim.test)


def test_partition_scores_split_quartets_by_what_the_partition_reveals(lineage):
    truth, names, reference, raw = lineage
    sample = QuartetSample(len(names), 10**9, np.random.default_rng(0))  # every quartet of 16 leaves
    perfect = partition_scores(truth, names, 2, reference, reference, raw, sample)
    assert perfect["k_qdist"] == perfect["u_qdist"] == 0.0
    assert perfect["k_qdist_reduction_vs_raw"] == perfect["u_qdist_reduction_vs_raw"] == 1.0
    as_raw = partition_scores(truth, names, 2, raw, reference, raw, sample)
    assert as_raw["k_qdist_reduction_vs_raw"] == as_raw["u_qdist_reduction_vs_raw"] == 0.0
    known = known_quartets(sample.quartets, clade_labels(truth, names, 2))
    assert 0 < known.sum() < len(known)
    assert as_raw["u_qdist"] == sample.qdist(raw, reference, ~known)


def test_partial_label_scores_bucket_by_known_leaves(lineage):
    truth, names, reference, raw = lineage
    known = np.zeros(len(names), dtype=bool)
    known[:8] = True
    sample = QuartetSample(len(names), 10**9, np.random.default_rng(0))
    exact = partial_label_scores(truth, truth, names, known, reference, reference, sample)
    assert exact == {"qdist_known4": 0.0, "qdist_known1to3": 0.0, "qdist_known0": 0.0, "rf_unknown": 0.0}
    noisy = partial_label_scores(truth, truth, names, known, raw, reference, sample)
    counts = known[sample.quartets].sum(axis=1)
    assert noisy["qdist_known0"] == sample.qdist(raw, reference, counts == 0)
    assert noisy["qdist_known4"] == sample.qdist(raw, reference, counts == 4)


def test_relative_reduction():
    assert relative_reduction(0.5, 0.2) == pytest.approx(0.6)
    assert relative_reduction(0.5, 0.75) == pytest.approx(-0.5)
    assert np.isnan(relative_reduction(0.0, 0.1))
