"""Null and oracle controls of the lineage track: the null trees' shapes, the oracle's resolution and moves."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from celldag.lineage.metrics import robinson_foulds, split_recovery
from celldag.lineage.quartets import is_binary
from celldag.lineage.track import LineageInput
from celldag.lineage.tree import Tree, parse_newick, splits
from celldag.methods.control_trees import nearest_neighbour_interchange, null_tree, oracle_tree

BINARY = "(((a,b),(c,d)),((e,f),(g,(h,(i,(j,(k,l)))))));"  # 12 leaves, rooted: 9 internal edges unrooted
BINARY_TRIFURCATING = "((a,b),(c,d),((e,f),(g,(h,(i,(j,(k,l)))))));"  # the same unrooted tree


def names(count: int) -> tuple[str, ...]:
    return tuple(f"leaf{i:02d}" for i in range(count))


def lineage_input(leaves, tree_newick: str | None = None) -> LineageInput:
    leaves = tuple(leaves)
    return LineageInput(names=leaves, features=np.zeros((len(leaves), 3)), train_features=None, tree_newick=tree_newick)


def null(shape: str, leaves, seed: int = 0) -> Tree:
    return parse_newick(null_tree(lineage_input(leaves), {"shape": shape}, seed).tree_newick)


def ladder(order) -> Tree:
    """((((order[0],order[1]),order[2]),order[3]),…) written by hand."""
    text = order[0]
    for name in order[1:]:
        text = f"({text},{name})"
    return parse_newick(text + ";")


def oracle(newick: str, rate: float, seed: int = 0):
    leaves = parse_newick(newick).leaf_names
    result = oracle_tree(lineage_input(leaves, newick), {"nni_rate": rate}, seed)
    return parse_newick(result.tree_newick), result.uns


# ---------------------------------------------------------------- null trees


def test_star_has_no_split_and_rf_1_against_a_binary_tree():
    star = null("star", names(10))
    assert sorted(star.leaf_names) == sorted(names(10))
    assert star.children[0] == tuple(range(1, 11))  # every leaf a child of the root
    assert splits(star, names(10)).shape == (0, 10)
    rf = robinson_foulds(star, ladder(names(10)))
    assert (rf.distance, rf.max_distance, rf.normalized) == (7, 7, 1.0)  # the ladder's n - 3 = 7 splits, none shared


@pytest.mark.parametrize("shape", ["random", "caterpillar"])
def test_random_and_caterpillar_are_binary_over_exactly_the_leaves_and_seeded(shape):
    leaves = names(12)
    tree = null(shape, leaves, seed=3)
    assert sorted(tree.leaf_names) == sorted(leaves) and len(tree.leaf_names) == 12
    assert is_binary(tree)
    assert len(tree.children[0]) == 2 and all(len(kids) in (0, 2) for kids in tree.children)  # rooted binary
    assert splits(tree, leaves).shape[0] == 12 - 3  # unrooted binary: n - 3 non-trivial splits
    again = null(shape, leaves, seed=3)
    assert robinson_foulds(tree, again).distance == 0 and again.leaf_names == tree.leaf_names
    other = null(shape, leaves, seed=4)
    assert robinson_foulds(tree, other).distance > 0


def test_caterpillar_is_a_ladder_in_a_seeded_random_order():
    leaves = names(9)
    orders = set()
    for seed in range(5):
        tree = null("caterpillar", leaves, seed)
        # the ladder over its own Newick leaf order, written by hand: the same tree, rooting included
        assert robinson_foulds(tree, ladder(tree.leaf_names)).distance == 0
        assert all(any(not tree.children[kid] for kid in kids) for kids in tree.children if kids)  # a leaf at each
        orders.add(tree.leaf_names)
    assert len(orders) == 5 and leaves not in orders  # shuffled, differently for each seed


def test_random_tree_over_50_leaves_shares_almost_no_split_with_a_caterpillar():
    leaves = names(50)
    fixed = ladder(leaves)
    for seed in range(3):
        assert robinson_foulds(null("random", leaves, seed), fixed).normalized > 0.8


def test_random_tree_on_4_leaves_draws_the_3_topologies_alike():
    """The first pair joined is the split: 6 pairs, 2 per topology, so 1/3 each
    (300 draws: 100 ± 8 each, 70 to 130 allowed)."""
    leaves = ("a", "b", "c", "d")
    drawn = Counter(tuple(splits(null("random", leaves, seed), leaves)[0].tolist()) for seed in range(300))
    assert set(drawn) == {(False, False, True, True), (False, True, False, True), (False, True, True, False)}
    assert all(70 <= count <= 130 for count in drawn.values())


def test_null_tree_refuses_an_unknown_shape():
    with pytest.raises(ValueError, match="params.shape must be one of 'random', 'star', 'caterpillar', got 'balanced'"):
        null("balanced", names(5))
    assert null_tree.accepted_params == ("shape",)


# ---------------------------------------------------------------- oracle


@pytest.mark.parametrize("newick", [BINARY, BINARY_TRIFURCATING])
def test_oracle_without_moves_returns_a_binary_truth(newick):
    tree, facts = oracle(newick, 0.0)
    assert robinson_foulds(tree, parse_newick(newick)).distance == 0
    assert sorted(tree.leaf_names) == sorted(parse_newick(newick).leaf_names)
    assert facts == {"nni_moves": 0, "internal_edges": 9, "polytomies_resolved": 0}


def test_oracle_moves_a_share_of_the_internal_edges():
    truth = parse_newick(BINARY)
    for seed in range(10):
        tree, facts = oracle(BINARY, 1 / 3, seed)  # round(9 / 3) = 3 moves
        assert facts == {"nni_moves": 3, "internal_edges": 9, "polytomies_resolved": 0}
        assert is_binary(tree) and sorted(tree.leaf_names) == sorted(truth.leaf_names)
        rf = robinson_foulds(tree, truth)
        assert rf.max_distance == 18 and rf.distance in (2, 4, 6)  # each move replaces at most one split
        assert 0 < rf.normalized <= 6 / 18
    assert oracle(BINARY, 0.1)[1]["nni_moves"] == 1  # round(0.9)
    assert oracle(BINARY, 1.0)[1]["nni_moves"] == 9  # every internal edge


def test_one_nni_move_changes_exactly_one_split():
    truth = parse_newick(BINARY)
    for seed in range(20):
        tree, facts = oracle(BINARY, 0.1, seed)
        assert facts["nni_moves"] == 1
        assert robinson_foulds(tree, truth).distance == 2


def test_nni_on_a_quartet_reaches_both_other_topologies():
    leaves = ("a", "b", "c", "d")
    truth_split = (False, False, True, True)  # ab|cd, oriented away from a
    drawn = set()
    for seed in range(20):
        tree, facts = oracle("((a,b),(c,d));", 1.0, seed)
        assert facts == {"nni_moves": 1, "internal_edges": 1, "polytomies_resolved": 0}
        drawn.add(tuple(splits(tree, leaves)[0].tolist()))
    assert drawn == {(False, True, False, True), (False, True, True, False)}  # ac|bd and ad|bc
    assert truth_split not in drawn


def test_nearest_neighbour_interchange_moves_the_split_of_its_edge_only():
    from celldag.methods.control_trees import _unrooted

    truth = parse_newick(BINARY_TRIFURCATING)
    nodes, root = _unrooted(truth)
    assert truth.leaf_names[:2] == ("a", "b") and truth.children[1] == (2, 3)  # node 1: the clade (a,b)
    nearest_neighbour_interchange(nodes, 1, np.random.default_rng(0))
    moved = nodes.tree(root)
    assert robinson_foulds(moved, truth).distance == 2
    lost = {tuple(row) for row in splits(truth, truth.leaf_names).tolist()} - {
        tuple(row) for row in splits(moved, truth.leaf_names).tolist()
    }
    ab = tuple(name in ("a", "b") for name in truth.leaf_names)
    assert lost == {tuple(not side for side in ab)}  # ab|rest, oriented away from a


def test_oracle_resolves_a_star_truth_into_a_binary_tree():
    leaves = names(20)
    star = "(" + ",".join(leaves) + ");"
    tree, facts = oracle(star, 0.0, seed=1)
    assert facts == {"nni_moves": 0, "internal_edges": 17, "polytomies_resolved": 1}
    assert is_binary(tree) and sorted(tree.leaf_names) == list(leaves)
    assert splits(tree, leaves).shape[0] == 17
    rf = robinson_foulds(tree, parse_newick(star))
    assert (rf.distance, rf.normalized) == (17, 1.0)  # the truth has no split: every one of the oracle's is extra
    assert robinson_foulds(tree, oracle(star, 0.0, seed=2)[0]).distance > 0  # resolved at random, by seed


def test_oracle_keeps_every_split_of_a_partly_resolved_truth():
    truth = "((a,b,c,d),(e,f,g),h);"  # two polytomies; the root of degree 3 is none
    tree, facts = oracle(truth, 0.0)
    assert facts == {"nni_moves": 0, "internal_edges": 5, "polytomies_resolved": 2}
    assert is_binary(tree)
    assert split_recovery(parse_newick(truth), tree) == 1.0
    rf = robinson_foulds(tree, parse_newick(truth))
    assert (rf.distance, rf.max_distance) == (3, 7)  # 5 splits against the truth's 2: 3 added, none lost


def test_oracle_suppresses_unary_nodes_and_a_rooting_polytomy():
    tree, facts = oracle("(((a,b,c,d)),e);", 0.0)  # the (a,b,c,d) node, a unary node above it, rooted at e
    assert facts == {"nni_moves": 0, "internal_edges": 2, "polytomies_resolved": 1}  # one vertex of degree 5
    assert is_binary(tree) and splits(tree, ("a", "b", "c", "d", "e")).shape[0] == 2


def test_oracle_needs_the_truth_and_a_rate_in_0_1():
    no_truth = lineage_input(("a", "b", "c", "d"))
    with pytest.raises(ValueError, match=r"must list `needs: \[truth\]`"):
        oracle_tree(no_truth, {"nni_rate": 0.0}, 0)
    for rate in (-0.1, 1.5, "0.5", True):
        with pytest.raises(ValueError, match="params.nni_rate must be a number in \\[0, 1\\]"):
            oracle(BINARY, rate)
    with pytest.raises(ValueError, match="leaves differ"):
        oracle_tree(lineage_input(("a", "b", "c", "x"), "((a,b),(c,d));"), {"nni_rate": 0.0}, 0)
    assert oracle_tree.accepted_params == ("nni_rate",)
