import math
from itertools import combinations

import numpy as np
import pytest

from celldag.errors import InputError
from celldag.lineage import metrics, quartets
from celldag.lineage.metrics import four_point_topology, quartet_distance
from celldag.lineage.quartets import binary_quartet_distance, is_binary, shared_quartets
from celldag.lineage.tree import Tree, parse_newick, path_distances


def random_newick(n: int, rng: np.random.Generator, unrooted: bool = False, unary: float = 0.0) -> str:
    """Random binary tree: join two random subtrees until 2 (rooted) or 3 (unrooted-style root) are left;
    with probability ``unary`` a leaf or a joined subtree gets an extra unary node above it."""

    def wrap(text: str) -> str:
        return f"({text})" if rng.random() < unary else text

    parts = [wrap(f"x{i}") for i in rng.permutation(n)]
    while len(parts) > (3 if unrooted else 2):
        i, j = rng.choice(len(parts), size=2, replace=False)
        joined = wrap(f"({parts[i]},{parts[j]})")
        parts = [part for k, part in enumerate(parts) if k not in (i, j)] + [joined]
    return "(" + ",".join(parts) + ");"


def shuffled(tree: Tree, rng: np.random.Generator) -> Tree:
    """The same tree with every node's children in a random order: other leaf order, other node numbers."""

    def text(node: int) -> str:
        kids = list(tree.children[node])
        rng.shuffle(kids)
        return "(" + ",".join(text(kid) for kid in kids) + ")" if kids else tree.names[node]

    return parse_newick(text(0) + ";")


def brute_force(a: Tree, b: Tree) -> float:
    """Every quartet's topology from the four-point condition on edge-count path distances."""
    order = a.leaf_names
    every = np.array(list(combinations(range(len(order)), 4)))
    topology_a, resolved_a = four_point_topology(path_distances(a, order, topology_only=True), every)
    topology_b, resolved_b = four_point_topology(path_distances(b, order, topology_only=True), every)
    assert resolved_a.all() and resolved_b.all()  # binary trees resolve every quartet
    return int((topology_a != topology_b).sum()) / len(every)


@pytest.fixture
def general(monkeypatch):
    """metrics.quartet_distance with the dispatch to the binary algorithm switched off."""
    monkeypatch.setattr(metrics, "is_binary", lambda tree: False)
    return metrics.quartet_distance


def test_by_hand():
    # only ACDE and BCDE change: AC|DE → AD|CE and BC|DE → BD|CE
    for first, second in [("((A,B),C,(D,E));", "((A,B),D,(C,E));"), ("(((A,B),C),(D,E));", "((A,B),(D,(C,E)));")]:
        assert binary_quartet_distance(parse_newick(first), parse_newick(second)) == 2 / 5
    # of the 15 quartets, the 6 holding E and F agree (EF|xy); ABCD and the 8 with one of E, F differ
    a, b = parse_newick("((A,B),(C,D),(E,F));"), parse_newick("((A,C),((B,D),(E,F)));")
    assert shared_quartets(a, b) == 6
    assert quartet_distance(a, b) == 9 / 15
    assert binary_quartet_distance(parse_newick("((A,B),(C,D));"), parse_newick("((A,C),(B,D));")) == 1.0


def test_matches_brute_force_on_small_trees():
    rng = np.random.default_rng(0)
    values = set()
    for n in range(4, 13):
        for trial in range(16):
            a = parse_newick(random_newick(n, rng, unrooted=trial % 2 == 1, unary=0.2 * (trial % 4 == 3)))
            b = parse_newick(random_newick(n, rng, unrooted=trial % 3 == 1))
            expected = brute_force(a, b)
            assert binary_quartet_distance(a, b) == expected
            assert binary_quartet_distance(b, a) == expected
            assert quartet_distance(a, b) == expected  # dispatched
            values.add(expected)
    assert len(values) > 40


def test_matches_the_general_algorithm_bit_for_bit(general):
    rng = np.random.default_rng(1)
    for n, unrooted in [(13, False), (40, True), (90, False), (200, True), (200, False)]:
        a = parse_newick(random_newick(n, rng, unrooted=unrooted, unary=0.05))
        b = parse_newick(random_newick(n, rng))
        expected = general(a, b)
        assert 0.0 < expected < 1.0
        assert binary_quartet_distance(a, b) == expected
        assert binary_quartet_distance(b, a) == expected


def test_identical_trees_and_leaf_orders():
    rng = np.random.default_rng(2)
    for n in (4, 9, 150):
        a = parse_newick(random_newick(n, rng))
        assert quartet_distance(a, a) == 0.0
        assert shared_quartets(a, a) == math.comb(n, 4)
        same = shuffled(a, rng)
        assert same.leaf_names != a.leaf_names or n == 4
        assert binary_quartet_distance(a, same) == 0.0
        # another tree: the value does not depend on either tree's leaf order
        b = parse_newick(random_newick(n, rng, unrooted=True))
        value = binary_quartet_distance(a, b)
        assert binary_quartet_distance(shuffled(a, rng), shuffled(b, rng)) == value
        assert binary_quartet_distance(shuffled(b, rng), a) == value
    # rooting is ignored: a rooted tree, its unrooted-style form and one with unary nodes agree
    rooted = parse_newick("((A,B),(C,(D,(E,F))));")
    for same in ("((A,B),C,(D,(E,F)));", "(C,(D,(E,F)),(B,A));", "(((A,(B))),((C),(D,((E,F)))));"):
        assert binary_quartet_distance(rooted, parse_newick(same)) == 0.0


def test_caterpillars():
    # the caterpillar x0..x(n-1) against itself read backwards: the same unrooted tree
    n = 300
    forward = "x0"
    for i in range(1, n):
        forward = f"({forward},x{i})"
    backward = "x299"
    for i in range(n - 2, -1, -1):
        backward = f"({backward},x{i})"
    a, b = parse_newick(forward + ";"), parse_newick(backward + ";")
    assert binary_quartet_distance(a, b) == 0.0
    rng = np.random.default_rng(3)
    other = parse_newick(random_newick(n, rng))
    assert binary_quartet_distance(a, other) == binary_quartet_distance(b, other)


def test_wide_overlap_counts(monkeypatch, general):
    # trees of 2**15 leaves or more keep their overlap counts in int32; force that path on a small pair
    rng = np.random.default_rng(4)
    a, b = (parse_newick(random_newick(60, rng)) for _ in range(2))
    narrow = binary_quartet_distance(a, b)
    monkeypatch.setattr(quartets, "_INT16_LEAVES", 0)
    assert binary_quartet_distance(a, b) == narrow == general(a, b)


def test_is_binary_and_dispatch():
    assert is_binary(parse_newick("((A,B),(C,D));"))
    assert is_binary(parse_newick("((A,B),C,(D,E));"))
    assert is_binary(parse_newick("((((A,B))),(C),((D,E)));"))
    assert not is_binary(parse_newick("((A,B),C,(D,E),F);"))  # a root of degree 4
    assert not is_binary(parse_newick("((A,B,C),(D,E));"))  # an inner node of degree 4
    # a multifurcating tree still goes to the general algorithm: a star differs from a resolved quartet
    assert quartet_distance(parse_newick("((A,B),(C,D));"), parse_newick("(A,B,C,D);")) == 1.0
    with pytest.raises(ValueError, match="binary trees"):
        binary_quartet_distance(parse_newick("((A,B),(C,D));"), parse_newick("(A,B,C,D);"))


def test_bad_input():
    with pytest.raises(InputError, match="at least 4 leaves"):
        binary_quartet_distance(parse_newick("(A,(B,C));"), parse_newick("((A,B),C);"))
    with pytest.raises(ValueError, match="different leaves"):
        binary_quartet_distance(parse_newick("((A,B),(C,D));"), parse_newick("((A,B),(C,E));"))
    with pytest.raises(ValueError, match="different leaves"):
        quartet_distance(parse_newick("((A,B),(C,D));"), parse_newick("((A,B),(C,(D,E)));"))
