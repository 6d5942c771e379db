import numpy as np
import pytest

from celldag.lineage.tree import Tree, parse_newick, path_distances, prune, splits, to_newick

HAND = "((A:1,B:2):3,(C:4,D:5):6,E:7);"


def random_binary(n: int, rng: np.random.Generator, unrooted: bool = False) -> Tree:
    """Join two random subtrees until two (rooted) or three (unrooted) remain."""
    parts = [f"t{i}:{rng.random():.3f}" for i in rng.permutation(n)]
    while len(parts) > (3 if unrooted else 2):
        i, j = sorted(rng.choice(len(parts), size=2, replace=False))
        right, left = parts.pop(j), parts.pop(i)
        parts.append(f"({left},{right}):{rng.random():.3f}")
    return parse_newick("(" + ",".join(parts) + ");")


def same_tree(a: Tree, b: Tree) -> bool:
    return (
        np.array_equal(a.parent, b.parent) and np.array_equal(a.length, b.length, equal_nan=True) and a.names == b.names
    )


def test_parse_structure_and_helpers():
    tree = parse_newick("((A:1,B:2.5)x:0.5,'C d':3,'it''s':1e-05)root;")
    assert tree.parent.tolist() == [-1, 0, 1, 1, 0, 0]
    assert tree.names == ("root", "x", "A", "B", "C d", "it's")
    np.testing.assert_array_equal(tree.length, [np.nan, 0.5, 1.0, 2.5, 3.0, 1e-5])
    assert tree.children == ((1, 4, 5), (2, 3), (), (), (), ())
    assert tree.leaves.tolist() == [2, 3, 4, 5]
    assert tree.leaf_names == ("A", "B", "C d", "it's")
    assert tree.depth.tolist() == [0, 1, 2, 2, 1, 1]


def test_parse_whitespace_comments_and_missing_lengths():
    tree = parse_newick("[&R] (\n  A ,\t(B:2, C)[note] :1.5\n) ;\n")
    assert tree.leaf_names == ("A", "B", "C")
    np.testing.assert_array_equal(tree.length, [np.nan, np.nan, 1.5, 2.0, np.nan])


def test_tree_is_immutable():
    tree = parse_newick(HAND)
    with pytest.raises(ValueError):
        tree.parent[1] = 0
    with pytest.raises(AttributeError):
        tree.names = ()


@pytest.mark.parametrize(
    "text",
    [
        "((A:1,B:2.5)x:0.5,'C d':3,'it''s':1e-05)root;",
        "((A,B),(C,D));",
        "(A:0.1,(B:1e-07,'(odd);name':2)'inner, label':3):4;",
        "(((A)),B,C);",
        "A;",
    ],
)
def test_round_trip(text):
    tree = parse_newick(text)
    written = to_newick(tree)
    assert same_tree(parse_newick(written), tree)
    assert to_newick(parse_newick(written)) == written


def test_to_newick_text_and_no_lengths():
    tree = parse_newick("((A:1,'B b':2)x:0.5,C:3);")
    assert to_newick(tree) == "((A:1.0,'B b':2.0)x:0.5,C:3.0);"
    assert to_newick(tree, lengths=False) == "((A,'B b')x,C);"


def test_round_trip_random_trees():
    rng = np.random.default_rng(0)
    for n in (2, 5, 40):
        tree = random_binary(n, rng)
        assert same_tree(parse_newick(to_newick(tree)), tree)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(A,B;", "1 '\\(' not closed"),
        ("((A,B);", "1 '\\(' not closed"),
        ("(A,B));", "'\\)' without '\\('"),
        ("(A,B)", "missing terminating ';'"),
        ("(A,A,B);", "duplicate leaf names: \\['A'\\]"),
        ("(A,,B);", "empty leaf name"),
        ("();", "empty leaf name"),
        ("   ", "empty string"),
        ("(A,B);(C,D);", "after the terminating ';'"),
        ("(A:,B);", "branch length must be a number"),
        ("(A:x1,B);", "branch length must be a number, got 'x1'"),
        ("(A:1:2,B);", "second branch length"),
        ("('A,B);", "unterminated quoted label"),
        ("(A B,C);", "unexpected label 'B'"),
        ("(A,B)(C);", "unexpected '\\('"),
    ],
)
def test_malformed_newick(text, message):
    with pytest.raises(ValueError, match=message):
        parse_newick(text)


def test_tree_constructor_validates():
    with pytest.raises(ValueError, match="node 0 must be the root"):
        Tree(np.array([0, 0]), np.zeros(2), ("", "A"))
    with pytest.raises(ValueError, match="parent must precede"):
        Tree(np.array([-1, 2, 0]), np.zeros(3), ("", "A", ""))
    with pytest.raises(ValueError, match="empty name"):
        Tree(np.array([-1, 0, 0]), np.zeros(3), ("", "A", ""))


def test_path_distances_by_hand():
    tree = parse_newick(HAND)
    order = ["E", "A", "C", "D", "B"]
    expected_lengths = [
        [0, 11, 17, 18, 12],
        [11, 0, 14, 15, 3],
        [17, 14, 0, 9, 15],
        [18, 15, 9, 0, 16],
        [12, 3, 15, 16, 0],
    ]
    expected_edges = [
        [0, 3, 3, 3, 3],
        [3, 0, 4, 4, 2],
        [3, 4, 0, 2, 4],
        [3, 4, 2, 0, 4],
        [3, 2, 4, 4, 0],
    ]
    np.testing.assert_array_equal(path_distances(tree, order, topology_only=False), expected_lengths)
    np.testing.assert_array_equal(path_distances(tree, order, topology_only=True), expected_edges)
    np.testing.assert_array_equal(path_distances(tree, ["C", "A"], topology_only=False), [[0, 14], [14, 0]])


def test_path_distances_missing_lengths():
    tree = parse_newick("((A:1,B:2),(C,D:1):1);")
    # the unknown edge above (A, B) is not on the A–B path
    np.testing.assert_array_equal(path_distances(tree, ["A", "B"], topology_only=False), [[0, 3], [3, 0]])
    with pytest.raises(ValueError, match="nan.* 3 leaves: \\['A', 'C', 'B'\\]"):
        path_distances(tree, ["A", "C", "B"], topology_only=False)
    with pytest.raises(ValueError, match="nan.* 1 leaves: \\['C'\\]"):
        path_distances(tree, ["C", "D"], topology_only=False)
    np.testing.assert_array_equal(path_distances(tree, ["A", "C"], topology_only=True), [[0, 4], [4, 0]])
    with pytest.raises(ValueError, match="not leaves of the tree: \\['Z'\\]"):
        path_distances(tree, ["A", "Z"], topology_only=True)


def test_splits_by_hand():
    tree = parse_newick("((A,B),(C,D));")
    np.testing.assert_array_equal(splits(tree, ["A", "B", "C", "D"]), [[False, False, True, True]])
    np.testing.assert_array_equal(splits(tree, ["C", "A", "B", "D"]), [[False, True, True, False]])
    five = splits(parse_newick("((A,B),C,(D,E));"), list("ABCDE"))
    np.testing.assert_array_equal(five, [[False, False, False, True, True], [False, False, True, True, True]])
    assert splits(parse_newick("(A,B,C);"), list("ABC")).shape == (0, 3)
    with pytest.raises(ValueError, match="all 4 leaves"):
        splits(tree, ["A", "B", "C"])


def test_unary_nodes_and_degree_two_root_add_no_split():
    plain = splits(parse_newick("((A,B),C,(D,E));"), list("ABCDE"))
    unary = splits(parse_newick("((((A,B))),(C),((D,E)));"), list("ABCDE"))
    rooted = splits(parse_newick("(((A,B),C),(D,E));"), list("ABCDE"))
    np.testing.assert_array_equal(unary, plain)
    np.testing.assert_array_equal(rooted, plain)


@pytest.mark.parametrize("unrooted", [False, True])
def test_splits_of_random_binary_trees(unrooted):
    rng = np.random.default_rng(1)
    for n in range(4, 40, 3):
        tree = random_binary(n, rng, unrooted)
        order = [f"t{i}" for i in rng.permutation(n)]
        rows = splits(tree, order)
        assert rows.shape == (n - 3, n)
        assert not rows[:, 0].any()  # canonical side
        assert (rows.sum(axis=1) >= 2).all() and (rows.sum(axis=1) <= n - 2).all()
        assert len({row.tobytes() for row in rows}) == n - 3


def test_prune_by_hand():
    tree = parse_newick(HAND)
    assert to_newick(prune(tree, ["A", "C", "E"])) == "(A:4.0,C:10.0,E:7.0);"
    assert to_newick(prune(tree, ["B", "A"])) == "(A:1.0,B:2.0);"
    assert to_newick(prune(tree, ["D"])) == "D;"
    assert to_newick(prune(parse_newick("((A,B)x:1,(C:2,D)y);"), ["A", "C", "D"])) == "(A,(C:2.0,D)y);"
    assert to_newick(prune(parse_newick("(((A:1,B:1):1):1);"), ["A", "B"])) == "(A:1.0,B:1.0);"
    with pytest.raises(ValueError, match="not leaves"):
        prune(tree, ["A", "Q"])
    with pytest.raises(ValueError, match="at least one"):
        prune(tree, [])


def test_prune_keeps_distances_and_leaf_order():
    rng = np.random.default_rng(2)
    for _ in range(10):
        tree = random_binary(30, rng)
        keep = [f"t{i}" for i in rng.choice(30, size=12, replace=False)]
        pruned = prune(tree, keep)
        assert pruned.leaf_names == tuple(name for name in tree.leaf_names if name in keep)
        assert not any(len(kids) == 1 for kids in pruned.children)
        np.testing.assert_allclose(
            path_distances(pruned, keep, topology_only=False), path_distances(tree, keep, topology_only=False)
        )
