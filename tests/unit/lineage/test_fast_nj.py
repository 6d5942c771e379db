"""fast_nj: scikit-bio's NJ tree from a pruned search, and reconstruct's dispatch to it on large inputs."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.lineage import fast_nj, reconstruct
from celldag.lineage.metrics import robinson_foulds
from celldag.lineage.reconstruct import euclidean_distances, skbio_neighbor_joining
from celldag.lineage.tree import parse_newick, path_distances

# Saitou & Nei's / Wikipedia's worked example: additive, so NJ returns the tree that made it
WIKIPEDIA = np.array(
    [[0, 5, 9, 9, 8], [5, 0, 10, 10, 9], [9, 10, 0, 8, 7], [9, 10, 8, 0, 3], [8, 9, 7, 3, 0]], dtype=float
)
WIKIPEDIA_TREE = "((a:2,b:3):3,c:4,(d:2,e:1):2);"
# (list size, remake cost): the defaults; short lists never remade (full-row scans); a remake every join
SETTINGS = [(fast_nj.LIST_SIZE, fast_nj.REMAKE_COST), (2, 1e9), (4, 0.0)]


@pytest.fixture
def pruned(monkeypatch):
    """The pruned search down to 8 clusters left (by default it starts above 256)."""
    monkeypatch.setattr(fast_nj, "DENSE_AT_MOST", 8)
    return monkeypatch


def random_matrix(n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """Euclidean distances of Gaussian points: no two Q values tie."""
    return euclidean_distances(np.random.default_rng(seed).normal(size=(n, 10))), [f"c{i:03d}" for i in range(n)]


def assert_same_tree(ours, theirs, exact: bool = False) -> None:
    assert robinson_foulds(ours, theirs).distance == 0
    assert ours.names == theirs.names  # the same nodes in the same (preorder) order …
    np.testing.assert_array_equal(ours.parent, theirs.parent)
    if exact:
        np.testing.assert_array_equal(ours.length, theirs.length)
    else:  # … with the same branch lengths (the root's NaN in both)
        np.testing.assert_allclose(ours.length, theirs.length, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize(("list_size", "remake_cost"), SETTINGS)
@pytest.mark.parametrize("n", [10, 37, 120, 300])
def test_pruned_search_gives_scikit_bios_tree(pruned, n, list_size, remake_cost):
    pruned.setattr(fast_nj, "LIST_SIZE", list_size)
    pruned.setattr(fast_nj, "REMAKE_COST", remake_cost)
    distances, names = random_matrix(n, seed=n)
    assert_same_tree(fast_nj.neighbor_joining(distances, names), skbio_neighbor_joining(distances, names))


def test_dense_search_gives_scikit_bios_tree():
    distances, names = random_matrix(200, seed=1)  # under DENSE_AT_MOST: the whole Q matrix each join
    assert_same_tree(fast_nj.neighbor_joining(distances, names), skbio_neighbor_joining(distances, names))


@pytest.mark.parametrize("dense", [False, True])
def test_wikipedia_example_gives_its_tree(monkeypatch, dense):
    monkeypatch.setattr(fast_nj, "DENSE_AT_MOST", 100 if dense else 3)
    names = list("abcde")
    tree = fast_nj.neighbor_joining(WIKIPEDIA, names)
    truth = parse_newick(WIKIPEDIA_TREE)
    assert robinson_foulds(tree, truth).distance == 0
    leaf_lengths = {name: length for name, length in zip(tree.names, tree.length) if name}
    assert leaf_lengths == pytest.approx({"a": 2, "b": 3, "c": 4, "d": 2, "e": 1}, abs=1e-12)
    internal = sorted(length for name, length in zip(tree.names, tree.length) if not name and np.isfinite(length))
    assert internal == pytest.approx([2, 3], abs=1e-12)  # the root (length NaN) is the trifurcation
    np.testing.assert_allclose(path_distances(tree, names, topology_only=False), WIKIPEDIA, atol=1e-12)
    assert_same_tree(tree, skbio_neighbor_joining(WIKIPEDIA, names))


@pytest.mark.parametrize("n", [6, 15, 40, 90])
def test_ties_go_as_in_scikit_bio(pruned, n):
    """Distances in {1, 2, 3} tie Q values everywhere: the lowest slot pair is joined, as scikit-bio's
    row-major scan does, so the trees match node for node, lengths bit for bit."""
    rng = np.random.default_rng(n)
    names = [f"c{i:03d}" for i in range(n)]
    for _ in range(3):
        upper = np.triu(rng.integers(1, 4, size=(n, n)).astype(float), 1)
        distances = upper + upper.T
        assert_same_tree(
            fast_nj.neighbor_joining(distances, names), skbio_neighbor_joining(distances, names), exact=True
        )
    # duplicate cells: zero distances, rows equal
    distances = euclidean_distances(rng.integers(0, 3, size=(n, 3)).astype(float))
    assert_same_tree(fast_nj.neighbor_joining(distances, names), skbio_neighbor_joining(distances, names), exact=True)


def test_search_prunes(pruned):
    """The bounds leave few rows to score per join (not all n, as scikit-bio's scan does)."""
    searches = []

    class Recorded(fast_nj._PrunedSearch):
        def __init__(self, *args):
            super().__init__(*args)
            searches.append(self)

    pruned.setattr(fast_nj, "_PrunedSearch", Recorded)
    n = 600
    distances, names = random_matrix(n, seed=3)
    assert_same_tree(fast_nj.neighbor_joining(distances, names), skbio_neighbor_joining(distances, names))
    joins = n - 8
    (stats,) = (search.stats for search in searches)
    assert stats["rows scored"] / joins < n / 8  # measured: ≈ n / 40
    assert stats["rows scanned"] / joins < 1
    assert stats["remakes"] < 30


def test_dispatch_by_size(monkeypatch):
    calls = []
    real = fast_nj.neighbor_joining
    monkeypatch.setattr(fast_nj, "neighbor_joining", lambda d, names: calls.append(len(names)) or real(d, names))
    assert reconstruct.FAST_NJ_FROM > 128  # the default datasets' trees stay scikit-bio's own
    distances, names = random_matrix(60, seed=7)
    below = reconstruct.reconstruct(distances, names, "nj")
    assert calls == []  # scikit-bio below the threshold
    assert_same_tree(below, skbio_neighbor_joining(distances, names), exact=True)
    monkeypatch.setattr(reconstruct, "FAST_NJ_FROM", 60)
    above = reconstruct.reconstruct(distances, names, "nj")
    assert calls == [60]  # fast_nj from it
    assert_same_tree(above, below)


def test_rejects_what_scikit_bio_rejects():
    distances, names = random_matrix(5, seed=0)
    asymmetric = distances.copy()
    asymmetric[0, 1] += 1e-9
    with_nan = distances.copy()
    with_nan[0, 1] = with_nan[1, 0] = np.nan
    for bad in (asymmetric, with_nan):
        with pytest.raises(ValueError, match="symmetric"):
            fast_nj.neighbor_joining(bad, names)
    with pytest.raises(ValueError, match="hollow"):
        fast_nj.neighbor_joining(distances + np.eye(5), names)
    with pytest.raises(ValueError, match="at least 3x3"):
        fast_nj.neighbor_joining(distances[:2, :2], names[:2])
    with pytest.raises(ValueError, match="unique"):
        fast_nj.neighbor_joining(distances, ["a"] * 5)
    assert fast_nj.neighbor_joining(distances[:3, :3], names[:3]).names.count("") == 1  # 3 leaves: the root only
