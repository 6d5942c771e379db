import math
from itertools import combinations

import numpy as np
import pytest

from celldag.lineage.metrics import (
    QUARTET_SAMPLE_DEFAULT,
    RobinsonFoulds,
    qdist_sampled,
    quartet_distance,
    robinson_foulds,
)
from celldag.lineage.tree import Tree, parse_newick, path_distances, splits, to_newick


def random_binary(n: int, rng: np.random.Generator) -> Tree:
    """Rooted binary tree from joining two random subtrees until one is left."""
    parts = [f"t{i}" for i in rng.permutation(n)]
    while len(parts) > 1:
        i, j = sorted(rng.choice(len(parts), size=2, replace=False))
        right, left = parts.pop(j), parts.pop(i)
        parts.append(f"({left},{right})")
    return parse_newick(parts[0] + ";")


def collapse(tree: Tree, rng: np.random.Generator, probability: float) -> Tree:
    """Multifurcating tree: remove random internal non-root nodes, their children move up."""
    removed = {node for node in range(1, tree.n_nodes) if not tree.is_leaf[node] and rng.random() < probability}
    new_index: dict[int, int] = {}
    parent: list[int] = []
    for node in range(tree.n_nodes):
        if node in removed:
            continue
        up = int(tree.parent[node])
        while up in removed:
            up = int(tree.parent[up])
        new_index[node] = len(parent)
        parent.append(new_index.get(up, -1))
    kept = sorted(new_index, key=new_index.get)
    return Tree(np.array(parent), np.full(len(parent), np.nan), tuple(tree.names[node] for node in kept))


def random_pair(n: int, rng: np.random.Generator, multifurcating: bool) -> tuple[Tree, Tree]:
    a, b = random_binary(n, rng), random_binary(n, rng)
    if multifurcating:
        a, b = collapse(a, rng, 0.4), collapse(b, rng, 0.3)
    return a, b


def four_point_topology(distances: np.ndarray, quartet: tuple[int, ...]) -> int:
    """0, 1, 2 for ij|kl, ik|jl, il|jk (the unique smallest sum), -1 for a star (all sums equal)."""
    i, j, k, l = quartet
    sums = [distances[i, j] + distances[k, l], distances[i, k] + distances[j, l], distances[i, l] + distances[j, k]]
    smallest = min(sums)
    if sums.count(smallest) == 3:
        return -1
    assert sums.count(smallest) == 1, "a tree metric has a unique smallest sum or none"
    return sums.index(smallest)


def brute_quartet_distance(a: Tree, b: Tree) -> float:
    order = a.leaf_names
    dist_a = path_distances(a, order, topology_only=True)
    dist_b = path_distances(b, order, topology_only=True)
    quartets = list(combinations(range(len(order)), 4))
    differ = sum(four_point_topology(dist_a, q) != four_point_topology(dist_b, q) for q in quartets)
    return differ / len(quartets)


def brute_qdist(d_est: np.ndarray, d_ref: np.ndarray) -> float:
    counted = differ = 0
    for i, j, k, l in combinations(range(d_ref.shape[0]), 4):
        tops = []
        for d in (d_est, d_ref):
            sums = [d[i, j] + d[k, l], d[i, k] + d[j, l], d[i, l] + d[j, k]]
            tops.append(sums.index(min(sums)) if sums.count(min(sums)) == 1 else -1)
        if tops[1] >= 0:
            counted += 1
            differ += tops[0] != tops[1]
    return differ / counted


# ---------------------------------------------------------------- Robinson–Foulds


def test_rf_by_hand():
    a = parse_newick("((A,B),(C,D),E);")
    assert robinson_foulds(a, parse_newick("((A,C),(B,D),E);")) == RobinsonFoulds(4, 4, 1.0)
    assert robinson_foulds(a, parse_newick("((B,A),E,(D,C));")) == RobinsonFoulds(0, 4, 0.0)
    assert robinson_foulds(a, parse_newick("((A,B),D,(C,E));")) == RobinsonFoulds(2, 4, 0.5)
    assert robinson_foulds(a, parse_newick("(A,B,C,D,E);")) == RobinsonFoulds(2, 2, 1.0)
    assert robinson_foulds(parse_newick("(A,B,C,D);"), parse_newick("(D,C,B,A);")) == RobinsonFoulds(0, 0, 0.0)


def test_rf_ignores_rooting_and_unary_nodes():
    unrooted = parse_newick("((A,B),C,(D,E));")
    rooted = parse_newick("((((A,B)),C),((D,E)));")
    assert robinson_foulds(unrooted, rooted).distance == 0


def test_rf_binary_normaliser():
    rng = np.random.default_rng(3)
    for n in (4, 9, 30):
        result = robinson_foulds(*random_pair(n, rng, multifurcating=False))
        assert result.max_distance == 2 * (n - 3)
        assert result.normalized == result.distance / (2 * (n - 3))


def test_rf_matches_dendropy():
    dendropy = pytest.importorskip("dendropy")
    from dendropy.calculate import treecompare

    rng = np.random.default_rng(4)
    distances = []
    for trial in range(20):
        a, b = random_pair(int(rng.integers(5, 31)), rng, multifurcating=trial % 2 == 1)
        taxa = dendropy.TaxonNamespace()
        a_dp, b_dp = (
            dendropy.Tree.get(data=to_newick(t), schema="newick", taxon_namespace=taxa, rooting="force-unrooted")
            for t in (a, b)
        )
        expected = treecompare.symmetric_difference(a_dp, b_dp)
        assert robinson_foulds(a, b).distance == expected
        distances.append(expected)
    assert len(set(distances)) > 5  # the trials are not degenerate


def test_rf_equals_the_symmetric_difference_of_the_split_sets():
    """The interval algorithm against the definition (both trees' split matrices), with multifurcations,
    unary nodes and degree-2 roots, up to 300 leaves."""
    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(4, 300 if trial % 10 == 0 else 40))
        a, b = random_pair(n, rng, multifurcating=trial % 2 == 1)
        if trial % 3 == 0:  # a degree-2 root and a unary node above one clade
            b = parse_newick(f"(({to_newick(b)[:-1]}));")
        order = a.leaf_names
        split_sets = [{row.tobytes() for row in splits(tree, order)} for tree in (a, b)]
        result = robinson_foulds(a, b)
        assert result.distance == len(split_sets[0] ^ split_sets[1])
        assert result.max_distance == len(split_sets[0]) + len(split_sets[1])
        assert robinson_foulds(b, a) == result and robinson_foulds(a, a).distance == 0


def test_leaf_sets_must_match():
    with pytest.raises(ValueError, match=r"1 only in the first \['D'\], 1 only in the second \['E'\]"):
        robinson_foulds(parse_newick("((A,B),(C,D));"), parse_newick("((A,B),(C,E));"))
    with pytest.raises(ValueError, match="different leaves"):
        quartet_distance(parse_newick("((A,B),(C,D));"), parse_newick("((A,B),(C,D),E);"))


# ---------------------------------------------------------------- quartet distance


def test_quartet_distance_by_hand():
    resolved = parse_newick("((A,B),(C,D));")
    assert quartet_distance(resolved, parse_newick("((D,C),(B,A));")) == 0.0
    assert quartet_distance(resolved, parse_newick("((A,C),(B,D));")) == 1.0
    assert quartet_distance(resolved, parse_newick("(A,B,C,D);")) == 1.0
    assert quartet_distance(parse_newick("(A,B,C,D);"), parse_newick("(D,(C,B,A));")) == 0.0
    # only ACDE and BCDE change: AC|DE → AD|CE and BC|DE → BD|CE
    assert quartet_distance(parse_newick("((A,B),C,(D,E));"), parse_newick("((A,B),D,(C,E));")) == 2 / 5
    with pytest.raises(ValueError, match="at least 4 leaves"):
        quartet_distance(parse_newick("(A,B,C);"), parse_newick("(A,B,C);"))


def test_quartet_distance_unary_nodes():
    plain = parse_newick("((A,B),C,(D,E),F);")
    assert quartet_distance(plain, parse_newick("((((A,B))),(C),((D,E)),F);")) == 0.0
    # ABC|DEF is extra: it resolves the 4 quartets {A or B, C, D or E, F} that are stars in `plain`
    assert quartet_distance(plain, parse_newick("(((((A,B))),(C)),((D,E),F));")) == pytest.approx(4 / 15)
    assert quartet_distance(plain, parse_newick("((((A,C))),B,(D,E),F);")) == quartet_distance(
        plain, parse_newick("((A,C),B,(D,E),F);")
    )


@pytest.mark.parametrize("multifurcating", [False, True])
def test_quartet_distance_matches_brute_force(multifurcating):
    rng = np.random.default_rng(5 + multifurcating)
    values = []
    for _ in range(10):
        a, b = random_pair(int(rng.integers(5, 15)), rng, multifurcating)
        expected = brute_quartet_distance(a, b)
        assert quartet_distance(a, b) == pytest.approx(expected, abs=1e-12)
        assert quartet_distance(b, a) == pytest.approx(expected, abs=1e-12)
        values.append(expected)
    assert len(set(values)) > 5


def test_quartet_distance_large_trees():
    rng = np.random.default_rng(6)
    a, b = random_pair(256, rng, multifurcating=False)
    exact = quartet_distance(a, b)
    assert 0.0 < exact < 1.0
    # for binary trees, sampling the four-point topologies estimates the same fraction;
    # its standard error here is about 0.0015
    order = a.leaf_names
    sampled = qdist_sampled(
        path_distances(a, order, topology_only=True), path_distances(b, order, topology_only=True), 100_000, rng
    )
    assert sampled == pytest.approx(exact, abs=0.01)
    assert quartet_distance(a, a) == 0.0


# ---------------------------------------------------------------- sampled QDist


def test_qdist_default_sample_size():
    assert QUARTET_SAMPLE_DEFAULT == 100_000


def test_qdist_identical_matrices():
    rng = np.random.default_rng(7)
    points = rng.normal(size=(30, 3))
    distances = np.linalg.norm(points[:, None] - points[None, :], axis=-1)
    assert qdist_sampled(distances, distances.copy(), 5000, rng) == 0.0


def test_qdist_exact_enumeration_matches_brute_force():
    rng = np.random.default_rng(8)
    for multifurcating in (False, True):
        a, b = random_pair(9, rng, multifurcating)
        order = a.leaf_names
        d_ref = path_distances(a, order, topology_only=True)  # stars in the reference are skipped
        noise = rng.normal(scale=0.3, size=d_ref.shape)
        d_est = path_distances(b, order, topology_only=True) + noise + noise.T
        expected = brute_qdist(d_est, d_ref)
        # with every quartet enumerated, the generator does not matter
        for seed in (0, 1):
            assert qdist_sampled(d_est, d_ref, math.comb(9, 4), np.random.default_rng(seed)) == pytest.approx(expected)
        if not multifurcating:  # no star anywhere: the exact quartet distance again
            tree_est = path_distances(b, order, topology_only=True)
            assert qdist_sampled(tree_est, d_ref, 10**6, rng) == pytest.approx(quartet_distance(a, b))


def test_qdist_estimate_ties_count_as_wrong():
    d_ref = path_distances(parse_newick("((A,B),(C,D));"), list("ABCD"), topology_only=True)
    d_star = path_distances(parse_newick("(A,B,C,D);"), list("ABCD"), topology_only=True)
    rng = np.random.default_rng(0)
    assert qdist_sampled(d_star, d_ref, 10, rng) == 1.0
    assert np.isnan(qdist_sampled(d_ref, d_star, 10, rng))


def test_qdist_sampling_is_close_to_exact():
    rng = np.random.default_rng(9)
    a, b = random_pair(30, rng, multifurcating=True)
    order = a.leaf_names
    d_ref, d_est = (path_distances(t, order, topology_only=True) for t in (a, b))
    exact = qdist_sampled(d_est, d_ref, math.comb(30, 4), rng)
    sampled = qdist_sampled(d_est, d_ref, 20_000, rng)
    assert sampled != exact  # it did sample
    assert sampled == pytest.approx(exact, abs=0.03)


def test_qdist_rejects_bad_input():
    rng = np.random.default_rng(0)
    good = path_distances(parse_newick("((A,B),(C,D),E);"), list("ABCDE"), topology_only=True)
    asymmetric = good.copy()
    asymmetric[0, 1] += 1
    with_nan = good.copy()
    with_nan[2, 3] = with_nan[3, 2] = np.nan
    cases = [
        (good[:, :4], good, "d_est must be a square matrix"),
        (good, good[:4, :4], "one shape"),
        (good, asymmetric, "d_ref is not symmetric"),
        (with_nan, good, "d_est has 2 non-finite"),
        (good[:3, :3], good[:3, :3], "at least 4 leaves"),
    ]
    for d_est, d_ref, message in cases:
        with pytest.raises(ValueError, match=message):
            qdist_sampled(d_est, d_ref, 100, rng)
    with pytest.raises(ValueError, match="n_quartets must be positive"):
        qdist_sampled(good, good, 0, rng)


def test_sample_quartets_and_qdist_on_quartets():
    from math import comb

    from celldag.lineage.metrics import qdist_on_quartets, sample_quartets

    rng = np.random.default_rng(3)
    every = sample_quartets(7, 10_000, rng)
    assert every.shape == (comb(7, 4), 4) and len({tuple(q) for q in every}) == comb(7, 4)
    drawn = sample_quartets(30, 500, rng)
    assert drawn.shape == (500, 4) and (np.diff(np.sort(drawn, axis=1), axis=1) > 0).all()
    points = rng.normal(size=(7, 3))
    d_est = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    d_ref = np.abs(np.arange(7)[:, None] - np.arange(7)[None, :]).astype(float)  # a line: every quartet resolved
    assert qdist_on_quartets(d_est, d_ref, every) == qdist_sampled(d_est, d_ref, 10_000, rng)
    assert qdist_on_quartets(d_ref, d_ref, every[:5]) == 0.0
    assert np.isnan(qdist_on_quartets(d_est, d_ref, np.empty((0, 4), dtype=int)))
