"""Tests for the seeded Brownian-motion lineage simulator."""

import re
import time

import numpy as np
import pytest

from celldag.data.bm import BMSimulation, prepare_bm_simulator, simulate_bm

LEAF_NAME = re.compile(r"[(,]([^:(),;]+):")
BRANCH_LENGTH = re.compile(r":([^:(),;]+)")

BASE = dict(depth=6, n_signal=20, n_noise=10, n_spurious=10, max_walk=3.0, noise_std=1.0, measurement_std=0.5, seed=7)


def simulate(**overrides) -> BMSimulation:
    return simulate_bm(**{**BASE, **overrides})


def patristic_distances(newick: str, leaf_names) -> np.ndarray:
    """Leaf-by-leaf branch-length distances, rows and columns in `leaf_names` order."""
    parent, length, name = [-1], [0.0], [None]
    current = 0
    for token in re.findall(r"[(),;]|:[^:(),;]+|[^:(),;]+", newick):
        if token in "(,":
            if token == ",":
                current = parent[current]
            parent.append(current)
            length.append(0.0)
            name.append(None)
            current = len(parent) - 1
        elif token == ")":
            current = parent[current]
        elif token.startswith(":"):
            length[current] = float(token[1:])
        elif token != ";":
            name[current] = token
    # on_path[i, v]: the edge above node v lies on the root-to-leaf-i path.
    node_of_leaf = {label: node for node, label in enumerate(name) if label is not None}
    on_path = np.zeros((len(leaf_names), len(parent)))
    for row, label in enumerate(leaf_names):
        node = node_of_leaf[label]
        while node != -1:
            on_path[row, node] = 1.0
            node = parent[node]
    weighted = on_path * np.asarray(length)
    # An edge separates two leaves when it is on exactly one of their root paths.
    return weighted @ (1 - on_path).T + (1 - on_path) @ weighted.T


def squared_distances(block: np.ndarray) -> np.ndarray:
    return ((block[:, None, :] - block[None, :, :]) ** 2).sum(axis=-1)


def pair_correlation(first: np.ndarray, second: np.ndarray) -> float:
    upper = np.triu_indices(len(first), k=1)
    return float(np.corrcoef(first[upper], second[upper])[0, 1])


def columns(sim: BMSimulation, kind: str) -> np.ndarray:
    return sim.train[:, np.asarray(sim.feature_kind) == kind]


@pytest.mark.parametrize("depth, first, last", [(2, "L0", "L3"), (4, "L00", "L15"), (10, "L0000", "L1023")])
def test_shapes_names_and_feature_kinds(depth, first, last):
    sim = simulate(depth=depth, n_signal=3, n_noise=2, n_spurious=4)
    n_leaves = 2**depth
    assert sim.train.shape == sim.test.shape == (n_leaves, 9)
    assert sim.train.dtype == sim.test.dtype == np.float64
    assert len(set(sim.leaf_names)) == n_leaves
    assert (sim.leaf_names[0], sim.leaf_names[-1]) == (first, last)
    assert sim.feature_kind == ("signal",) * 3 + ("noise",) * 2 + ("spurious",) * 4


@pytest.mark.parametrize("depth, max_walk", [(2, 1.5), (5, 4.0), (9, 10.0)])
def test_newick_has_all_leaves_and_bounded_branch_lengths(depth, max_walk):
    sim = simulate(depth=depth, max_walk=max_walk)
    for newick in (sim.tree_newick, sim.spurious_tree_newick):
        assert newick.startswith("(") and newick.endswith(");")
        assert sorted(LEAF_NAME.findall(newick)) == sorted(sim.leaf_names)
        lengths = np.array([float(text) for text in BRANCH_LENGTH.findall(newick)])
        assert len(lengths) == 2 ** (depth + 1) - 2
        assert lengths.min() >= 1.0 and lengths.max() <= max_walk
        assert lengths.std() > 0


def test_true_tree_is_balanced_with_leaves_in_order():
    sim = simulate(depth=2)
    assert re.sub(r":[^:(),;]+", "", sim.tree_newick) == "((L0,L1),(L2,L3));"


def test_max_walk_one_gives_unit_branch_lengths():
    sim = simulate(max_walk=1.0)
    for newick in (sim.tree_newick, sim.spurious_tree_newick):
        assert set(BRANCH_LENGTH.findall(newick)) == {"1.0"}


def test_same_seed_is_identical_and_other_seed_differs():
    first, again, other = simulate(seed=3), simulate(seed=3), simulate(seed=4)
    assert np.array_equal(first.train, again.train) and np.array_equal(first.test, again.test)
    assert first.tree_newick == again.tree_newick
    assert first.spurious_tree_newick == again.spurious_tree_newick
    assert not np.array_equal(first.train, other.train)
    assert not np.array_equal(first.test, other.test)
    assert first.tree_newick != other.tree_newick
    assert first.spurious_tree_newick != other.spurious_tree_newick


def test_signal_follows_brownian_motion_on_the_true_tree():
    sim = simulate(n_signal=2000, n_noise=0, n_spurious=0, measurement_std=0.0)
    patristic = patristic_distances(sim.tree_newick, sim.leaf_names)
    per_feature = squared_distances(columns(sim, "signal")) / 2000
    assert pair_correlation(per_feature, patristic) > 0.9
    # Under Brownian motion a leaf difference is N(0, patristic distance) per feature,
    # so the expected squared difference equals the distance. Using the edge length as
    # a standard deviation (the official code's bug) would give a sum of squared
    # lengths instead, about twice as large for lengths in [1, 3].
    upper = np.triu_indices(len(patristic), k=1)
    assert per_feature[upper].sum() / patristic[upper].sum() == pytest.approx(1.0, abs=0.03)
    assert np.median(per_feature[upper] / patristic[upper]) == pytest.approx(1.0, abs=0.03)


def test_noise_block_is_unrelated_to_the_tree():
    sim = simulate(n_signal=1, n_noise=2000, n_spurious=0, noise_std=2.0, measurement_std=0.0)
    noise = columns(sim, "noise")
    patristic = patristic_distances(sim.tree_newick, sim.leaf_names)
    assert abs(pair_correlation(squared_distances(noise), patristic)) < 0.2
    assert noise.std() == pytest.approx(2.0, rel=0.02)


def test_spurious_block_follows_its_own_tree():
    sim = simulate(n_signal=1, n_noise=0, n_spurious=2000, measurement_std=0.0)
    spurious = squared_distances(columns(sim, "spurious"))
    own_tree = patristic_distances(sim.spurious_tree_newick, sim.leaf_names)
    true_tree = patristic_distances(sim.tree_newick, sim.leaf_names)
    assert pair_correlation(spurious, own_tree) > 0.8
    assert abs(pair_correlation(spurious, true_tree)) < 0.3


def test_no_spurious_block_means_no_spurious_tree():
    sim = simulate(n_spurious=0)
    assert sim.spurious_tree_newick == ""
    assert "spurious" not in sim.feature_kind
    assert sim.train.shape[1] == BASE["n_signal"] + BASE["n_noise"]


def test_replicates_differ_only_by_measurement_noise():
    clean = simulate(n_signal=50, n_noise=50, n_spurious=50, measurement_std=0.0)
    assert np.array_equal(clean.train, clean.test)
    noisy = simulate(n_signal=50, n_noise=50, n_spurious=50, measurement_std=0.7)
    assert np.std(noisy.train - noisy.test) == pytest.approx(0.7 * np.sqrt(2), rel=0.03)
    # The noise is added on top of the same profile the clean run produced.
    assert np.std(noisy.train - clean.train) == pytest.approx(0.7, rel=0.03)
    assert np.std(noisy.test - clean.test) == pytest.approx(0.7, rel=0.03)


@pytest.mark.parametrize(
    "name, value",
    [
        ("depth", 1),
        ("depth", 15),
        ("depth", 4.0),
        ("n_signal", 0),
        ("n_noise", -1),
        ("n_spurious", -1),
        ("n_signal", 2.5),
        ("max_walk", 0.5),
        ("max_walk", float("nan")),
        ("max_walk", float("inf")),
        ("noise_std", -0.1),
        ("noise_std", float("nan")),
        ("measurement_std", -1.0),
    ],
)
def test_invalid_parameters_raise_naming_the_parameter(name, value):
    with pytest.raises(ValueError, match=name):
        simulate(**{name: value})


def test_largest_tree_is_fast():
    start = time.perf_counter()
    sim = simulate(depth=12, n_signal=50, n_noise=25, n_spurious=25)
    assert time.perf_counter() - start < 2.0
    assert sim.train.shape == (4096, 100)


def test_the_simulators_validation_replicate_is_a_third_measurement_and_changes_no_other():
    params = {
        "depth": 3,
        "n_signal": 4,
        "n_noise": 2,
        "n_spurious": 0,
        "max_walk": 3.0,
        "noise_std": 1.0,
        "measurement_std": 0.5,
    }
    with_validation = prepare_bm_simulator("bm", params, 5, {})
    without = prepare_bm_simulator("bm", params | {"validation_replicate": False}, 5, {})
    assert "validation" not in without.layers
    for layer in ("train", "test"):
        np.testing.assert_array_equal(with_validation.layers[layer], without.layers[layer])
    validation, train = with_validation.layers["validation"], with_validation.layers["train"]
    # the same profile under fresh noise: validation − train is the difference of two N(0, 0.5²) draws
    difference = validation - train
    assert not np.allclose(validation, with_validation.layers["test"])
    assert abs(difference.std() - 0.5 * 2**0.5) < 0.15 and abs(difference.mean()) < 0.2
