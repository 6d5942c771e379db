from collections import Counter
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import chisquare

from celldag.lineage.metrics import four_point_topology
from celldag.lineage.supervision import (
    clade_distances,
    clade_labels,
    known_quartets,
    known_topology,
    partially_labelled_split,
    sample_known_quartets,
    supervised_quartets,
)
from celldag.lineage.tree import Tree, parse_newick, path_distances


def random_tree(n: int, rng: np.random.Generator, polytomies: bool) -> Tree:
    """Random rooted tree by joining random subtrees; with ``polytomies`` some joins take three."""
    parts = [f"t{i}" for i in range(n)]
    while len(parts) > 1:
        size = 3 if polytomies and len(parts) >= 3 and rng.random() < 0.3 else 2
        picked = sorted(rng.choice(len(parts), size=size, replace=False), reverse=True)
        joined = [parts.pop(i) for i in picked]
        parts.append("(" + ",".join(joined) + ")")
    return parse_newick(parts[0] + ";")


def all_quartets(n: int) -> np.ndarray:
    return np.array(list(combinations(range(n), 4)))


@pytest.mark.parametrize("polytomies", [False, True])
@pytest.mark.parametrize("level", [1, 2, 3])
def test_known_topology_agrees_with_the_full_tree(level, polytomies):
    rng = np.random.default_rng(level + 10 * polytomies)
    checked = 0
    for _ in range(6):
        tree = random_tree(14, rng, polytomies)
        names = list(rng.permutation(tree.leaf_names))
        labels = clade_labels(tree, names, level)
        quartets = all_quartets(len(names))
        topology = known_topology(quartets, labels, clade_distances(tree, names, level))
        truth, resolved = four_point_topology(path_distances(tree, names, topology_only=True), quartets)
        known = known_quartets(quartets, labels)
        checked += known.sum()
        assert (topology[~known] == -1).all()
        derived = topology >= 0
        np.testing.assert_array_equal(topology[derived], truth[derived])
        assert resolved[derived].all()
        # the only known quartets without a derived topology are stars of clade roots, stars in the tree too
        assert not resolved[known & ~derived].any()
        if not polytomies:
            assert (derived == known).all()
    assert checked > 100


def test_clades_of_a_hand_made_tree():
    tree = parse_newick("(((a,b),(c,(d,e))),(f,g),h);")
    names = ["h", "a", "b", "c", "d", "e", "f", "g"]
    # h sits at depth 1: a clade of its own at level 1, in no clade below
    np.testing.assert_array_equal(clade_labels(tree, names, 1), [2, 0, 0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(clade_labels(tree, names, 2), [-1, 0, 0, 1, 1, 1, 2, 3])
    np.testing.assert_array_equal(clade_labels(tree, names, 0), [0] * 8)
    # clade roots at depth 2: (a,b), (c,(d,e)), f, g
    np.testing.assert_array_equal(
        clade_distances(tree, names, 2), [[0, 2, 4, 4], [2, 0, 4, 4], [4, 4, 0, 2], [4, 4, 2, 0]]
    )


def test_unary_nodes_do_not_count_as_depth():
    chain = parse_newick("((((a,b)),(c,d)),(e,f));")
    binary = parse_newick("(((a,b),(c,d)),(e,f));")
    names = list("abcdef")
    np.testing.assert_array_equal(clade_labels(chain, names, 2), clade_labels(binary, names, 2))


def test_three_in_one_clade_and_shallow_leaves_are_unknown():
    tree = parse_newick("(((a,b),(c,d)),((e,f),g),h);")
    names = list("abcdefgh")
    labels = clade_labels(tree, names, 1)  # {a, b, c, d}, {e, f, g}, {h}
    index = {name: i for i, name in enumerate(names)}
    quartets = np.array([[index[x] for x in q] for q in ["abce", "abcd", "abeh", "abef", "aefg", "ehab"]])
    np.testing.assert_array_equal(known_quartets(quartets, labels), [False, False, True, True, False, True])
    topology = known_topology(quartets, labels, clade_distances(tree, names, 1))
    np.testing.assert_array_equal(topology, [-1, -1, 0, 0, -1, 0])
    shallow = clade_labels(tree, names, 2)  # h lies above depth 2
    assert shallow[index["h"]] == -1
    abeh = quartets[2:3]
    assert not known_quartets(abeh, shallow)[0] and known_quartets(quartets[3:4], shallow)[0]


def hand_partition():
    tree = parse_newick("(((a,b,c),(d,e)),((f,g),(h,(i,j))));")
    names = tree.leaf_names
    return names, clade_labels(tree, names, 2), clade_distances(tree, names, 2)


def test_known_sampler_rows_are_distinct_fresh_known_and_avoid_excluded_leaves():
    names, labels, clade_dist = hand_partition()
    excluded = np.zeros(len(names), dtype=bool)
    excluded[[1, 7]] = True
    rng = np.random.default_rng(0)
    first, topology = sample_known_quartets(labels, clade_dist, 500, rng, exclude_leaves=excluded)
    second, _ = sample_known_quartets(labels, clade_dist, 500, rng, exclude_leaves=excluded)
    assert first.shape == (500, 4) and topology.shape == (500,)
    assert (np.diff(np.sort(first, axis=1), axis=1) > 0).all()
    assert not np.isin(first, np.flatnonzero(excluded)).any()
    np.testing.assert_array_equal(topology, known_topology(first, labels, clade_dist))
    assert (topology >= 0).all()
    assert not np.array_equal(first, second)


def test_known_sampler_is_uniform_over_known_quartets():
    names, labels, clade_dist = hand_partition()
    quartets = all_quartets(len(names))
    known = {tuple(q) for q in quartets[known_quartets(quartets, labels)]}
    draws, _ = sample_known_quartets(labels, clade_dist, 40 * len(known), np.random.default_rng(1))
    counts = Counter(tuple(q) for q in np.sort(draws, axis=1).tolist())
    assert set(counts) == known
    assert chisquare([counts[q] for q in sorted(known)]).pvalue > 1e-3


def test_known_sampler_refuses_a_partition_without_known_quartets():
    labels = np.array([0, 0, 0, 0, 0, 1])
    with pytest.raises(ValueError, match="no known quartet"):
        sample_known_quartets(labels, np.zeros((2, 2)), 10, np.random.default_rng(0))


def test_known_sampler_gives_up_when_every_known_quartet_is_a_star():
    tree = parse_newick("(a,b,c,d,e);")  # five one-leaf clades under a polytomy
    names = tree.leaf_names
    labels, clade_dist = clade_labels(tree, names, 1), clade_distances(tree, names, 1)
    with pytest.raises(ValueError, match="no qualifying quartet"):
        sample_known_quartets(labels, clade_dist, 10, np.random.default_rng(0))


def test_partially_labelled_split_is_seeded_and_sized():
    mask = partially_labelled_split(20, 0.5, seed=3)
    assert mask.sum() == 10
    np.testing.assert_array_equal(mask, partially_labelled_split(20, 0.5, seed=3))
    assert not np.array_equal(mask, partially_labelled_split(20, 0.5, seed=4))
    assert partially_labelled_split(20, 0.05, seed=3).sum() == 4


def test_supervised_sampler_uses_allowed_leaves_and_the_reference_topology():
    tree = random_tree(12, np.random.default_rng(5), polytomies=False)
    distances = path_distances(tree, tree.leaf_names, topology_only=True)
    allowed = np.arange(12) % 3 != 0
    rng = np.random.default_rng(2)
    quartets, topology = supervised_quartets(distances, 300, rng, allowed)
    again, _ = supervised_quartets(distances, 300, rng, allowed)
    assert (np.diff(np.sort(quartets, axis=1), axis=1) > 0).all()
    assert allowed[quartets].all()
    np.testing.assert_array_equal(topology, four_point_topology(distances, quartets)[0])
    assert not np.array_equal(quartets, again)
