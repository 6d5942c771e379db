"""Distances between a reconstructed lineage tree and the true tree; lower is better for all."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, combinations, islice

import numpy as np

from celldag.errors import InputError
from celldag.lineage.quartets import binary_quartet_distance, is_binary
from celldag.lineage.tree import Tree

QUARTET_SAMPLE_DEFAULT = 100_000
_QUARTET_CHUNK = 1 << 18  # quartets scored per batch in qdist_sampled, bounds its memory


@dataclass(frozen=True)
class RobinsonFoulds:
    distance: int  # splits in exactly one of the two trees
    max_distance: int  # splits in the two trees together; 2(n - 3) for two binary trees
    normalized: float  # distance / max_distance, 0.0 when neither tree has a split


def robinson_foulds(a: Tree, b: Tree) -> RobinsonFoulds:
    """Unrooted Robinson–Foulds distance over the non-trivial splits of both trees.

    Exact in O(n log n) (Day 1985, unrooted): with the leaves numbered in ``a``'s Newick order, each
    split of ``a`` has a side that is a range of numbers without 0, so a split of ``b`` is one of ``a``'s
    iff its side without leaf 0 has max − min + 1 members and that range is one of ``a``'s.
    """
    order = _shared_leaf_order(a, b)  # a's leaves in a's Newick order: numbers 0..n-1
    n = len(order)
    numbers_in_b = np.empty(n, dtype=np.int64)  # b's leaves in b's Newick order, by their number in a
    numbers_in_b[b.leaf_position[b.leaf_indices(order)]] = np.arange(n)
    splits_a = _ranges_without_zero(a, np.arange(n))
    splits_b = _ranges_without_zero(b, np.arange(n))  # b's own numbering: only counts its distinct splits
    shared = _ranges_without_zero(b, numbers_in_b) & splits_a
    distance = len(splits_a) + len(splits_b) - 2 * len(shared)
    max_distance = len(splits_a) + len(splits_b)
    return RobinsonFoulds(distance, max_distance, distance / max_distance if max_distance else 0.0)


def _ranges_without_zero(tree: Tree, numbers: np.ndarray) -> set[tuple[int, int]]:
    """The non-trivial splits of ``tree`` whose side without number 0 is a range of ``numbers`` (the
    leaves' numbers in the tree's Newick order), as (first, last) of that range.

    A subtree's leaves are a slice [start, stop) of Newick order; the other side of its edge is the rest,
    whose min and max come from prefix and suffix extremes. Unary nodes and a degree-2 root repeat a
    split: the set keeps it once.
    """
    n = numbers.size
    start, stop = tree.leaf_span
    size = stop - start
    edges = np.flatnonzero((size >= 2) & (size <= n - 2))
    edges = edges[edges != 0]  # the root has no edge above it
    start, stop = start[edges], stop[edges]
    low, high = _range_extremes(numbers, start, stop)
    # the subtree holds number 0: take the other side, numbers[:start] and numbers[stop:]
    flip = low == 0
    prefix_min, prefix_max = _running_extremes(numbers)
    suffix_min, suffix_max = (extreme[::-1] for extreme in _running_extremes(numbers[::-1]))
    outside = stop[flip] < n  # suffix extremes at stop; none past the end
    low[flip] = np.minimum(np.where(start[flip] > 0, prefix_min[start[flip] - 1], n),
                           np.where(outside, suffix_min[np.minimum(stop[flip], n - 1)], n))  # fmt: skip
    high[flip] = np.maximum(np.where(start[flip] > 0, prefix_max[start[flip] - 1], -1),
                            np.where(outside, suffix_max[np.minimum(stop[flip], n - 1)], -1))  # fmt: skip
    side = np.where(flip, n - size[edges], size[edges])
    is_range = high - low + 1 == side
    return set(zip(low[is_range].tolist(), high[is_range].tolist()))


def _running_extremes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.minimum.accumulate(values), np.maximum.accumulate(values)


def _range_extremes(values: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min and max of values[start:stop] for each (start, stop), stop > start, from a sparse table."""
    lows, highs = [values], [values]
    while 2 ** len(lows) <= values.size:
        half = 2 ** (len(lows) - 1)
        lows.append(np.minimum(lows[-1][:-half], lows[-1][half:]))
        highs.append(np.maximum(highs[-1][:-half], highs[-1][half:]))
    level = np.frexp(stop - start)[1].astype(np.int64) - 1  # floor(log2), exact for integers
    width = 2**level
    low, high = np.empty(start.size, dtype=np.int64), np.empty(start.size, dtype=np.int64)
    for k in np.unique(level).tolist():  # two overlapping windows of 2**k cover each range
        at = level == k
        low[at] = np.minimum(lows[k][start[at]], lows[k][stop[at] - width[at]])
        high[at] = np.maximum(highs[k][start[at]], highs[k][stop[at] - width[at]])
    return low, high


def quartet_distance(a: Tree, b: Tree) -> float:
    """Exact fraction of the C(n, 4) quartets whose unrooted topologies differ (a star differs from a resolved one).

    For a leaf pair (p, q), every other leaf x hangs off the path p–q at an attachment vertex
    (the median of p, q, x) through one of its branches, x's "component". Quartet pq|xy is
    resolved that way iff x and y share a component, and is a star iff they share the vertex
    but not the component. Counting such pairs {x, y} for every pair {p, q} sees each resolved
    quartet twice (once from each side), so per-quartet counts follow in O(n³ log n).
    Two binary trees go to ``quartets.binary_quartet_distance`` instead: O(n²), the same value.
    """
    order = _shared_leaf_order(a, b)
    n = len(order)
    if n < 4:
        raise InputError(f"the quartet distance needs at least 4 leaves, got {n}")
    if is_binary(a) and is_binary(b):
        return binary_quartet_distance(a, b)
    view_a, view_b = _PathComponents(a, order), _PathComponents(b, order)
    # labels and vertices lie in [0, 2N); x = p and x = q get the unique values 2N and 2N + 1
    sentinel = 2 * max(a.n_nodes, b.n_nodes)
    base = sentinel + 2  # base**3 must fit in int64: fine for trees far beyond O(n³) reach
    # summed over pairs p < q: pairs {x, y} in one component of A, of B, of both, and in one
    # component of A while only sharing the attachment vertex in B
    same_a = same_b = same_both = same_a_vertex_b = 0
    for p in range(n - 1):
        label_a, _ = view_a.components(p)
        label_b, vertex_b = view_b.components(p)
        q = (np.arange(n - 1 - p), np.arange(p + 1, n))
        for array in (label_a, label_b, vertex_b):
            array[:, p] = sentinel
            array[q] = sentinel + 1
        # one sort by (label A, vertex B, label B) serves all three prefixes; label B fixes vertex B
        by_a = np.sort((label_a * base + vertex_b) * base + label_b, axis=1)
        same_both += _equal_pairs(by_a)
        same_a_vertex_b += _equal_pairs(by_a // base)
        same_a += _equal_pairs(by_a // base**2)
        same_b += _equal_pairs(np.sort(label_b, axis=1))
    resolved_a, resolved_b, shared = same_a // 2, same_b // 2, same_both // 2
    resolved_a_star_b = (same_a_vertex_b - same_both) // 2
    total = math.comb(n, 4)
    resolved_in_both = resolved_a - resolved_a_star_b
    star_in_both = total - resolved_a - resolved_b + resolved_in_both
    return (total - shared - star_in_both) / total


class _PathComponents:
    """One tree's leaf LCAs and ancestors, to place every leaf relative to the path between two leaves."""

    def __init__(self, tree: Tree, order: tuple[str, ...]) -> None:
        nodes = tree.leaf_indices(order)
        position = tree.leaf_position[nodes]
        self.n_nodes = tree.n_nodes
        self.lca = tree.leaf_lca()[np.ix_(position, position)]
        self.lca_depth = tree.depth[self.lca]
        # ancestor[i, k]: leaf i's ancestor at depth k, -1 past the leaf; the spare last
        # column lets the child lookup below run unchecked for x = p and x = q
        leaf_depth = tree.depth[nodes]
        width = int(leaf_depth.max()) + 2
        ancestor = np.full((nodes.size, width), -1, dtype=np.int64)
        rows, at, depth = np.arange(nodes.size), nodes.copy(), leaf_depth.copy()
        while rows.size:
            ancestor[rows, depth] = at
            climbing = depth > 0
            rows, at, depth = rows[climbing], tree.parent[at[climbing]], depth[climbing] - 1
        self.ancestor = ancestor.ravel()
        self.child_offset = np.arange(nodes.size) * width + 1  # + depth d: flat index of ancestor[x, d + 1]

    def components(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(n - 1 - p, n) component labels and attachment vertices of every leaf x on the paths p–q, q > p.

        A label is the child of the vertex on the way to x, or n_nodes + vertex when x hangs
        off the edge above the vertex. Columns x = p and x = q hold no meaning.
        """
        pq, d_pq = self.lca[p, p + 1 :, None], self.lca_depth[p, p + 1 :, None]
        px, d_px = self.lca[p], self.lca_depth[p]
        qx, d_qx = self.lca[p + 1 :], self.lca_depth[p + 1 :]
        # the three LCAs are, two by two, ancestors of one leaf, so they nest: x lies below the
        # attachment vertex iff LCA(p, x) or LCA(q, x) reaches LCA(p, q), and the deeper one is the vertex
        deeper = np.maximum(d_px, d_qx)
        below = deeper >= d_pq
        label = np.where(below, self.ancestor[self.child_offset + deeper], self.n_nodes + pq)
        vertex = np.where(below, np.where(d_px >= d_qx, px, qx), pq)
        return label, vertex


def _equal_pairs(ordered: np.ndarray) -> int:
    """Number of pairs of equal entries within each row of a row-sorted array, summed over rows."""
    rows, columns = ordered.shape
    # run starts per row, plus one closing mark per row; between a row's closing mark and the
    # next row's start lies a "run" of length 1, which adds no pair
    boundary = np.ones((rows, columns + 1), dtype=bool)
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=boundary[:, 1:columns])
    run_length = np.diff(np.flatnonzero(boundary))
    return int((run_length * (run_length - 1)).sum() // 2)


def qdist_sampled(d_est: np.ndarray, d_ref: np.ndarray, n_quartets: int, rng: np.random.Generator) -> float:
    """The paper's QDist on distance matrices: the fraction of quartets whose four-point topology differs.

    A quartet's topology is the pairing with the smallest sum of within-pair distances.
    Quartets are drawn uniformly (independently per draw), or all enumerated when
    ``n_quartets >= C(n, 4)``. Quartets that are unresolved in the reference (tied minimum)
    are left out; an estimate tied at its minimum counts as wrong. nan if no quartet counts.
    """
    est = _distance_matrix(d_est, "d_est")
    ref = _distance_matrix(d_ref, "d_ref")
    if est.shape != ref.shape:
        raise ValueError(f"d_est and d_ref must have one shape, got {est.shape} and {ref.shape}")
    n = ref.shape[0]
    if n < 4:
        raise InputError(f"quartets need at least 4 leaves, got {n}")
    if n_quartets < 1:
        raise ValueError(f"n_quartets must be positive, got {n_quartets}")
    if n_quartets >= math.comb(n, 4):
        batches = _all_quartets(n)
    else:
        batches = _random_quartets(n, n_quartets, rng)
    return _wrong_fraction(est, ref, batches)


def sample_quartets(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """(Q, 4) quartets: ``count`` uniform draws, or every quartet when ``count >= C(n, 4)``."""
    batches = _all_quartets(n) if count >= math.comb(n, 4) else _random_quartets(n, count, rng)
    return np.concatenate(list(batches)) if n >= 4 else np.empty((0, 4), dtype=np.int64)


def qdist_on_quartets(d_est: np.ndarray, d_ref: np.ndarray, quartets: np.ndarray) -> float:
    """QDist (as in ``qdist_sampled``) on a given set of quartets, e.g. those a supervision setting revealed."""
    est = _distance_matrix(d_est, "d_est")
    ref = _distance_matrix(d_ref, "d_ref")
    if est.shape != ref.shape:
        raise ValueError(f"d_est and d_ref must have one shape, got {est.shape} and {ref.shape}")
    quartets = np.asarray(quartets, dtype=np.int64).reshape(-1, 4)
    return _wrong_fraction(est, ref, (quartets[i : i + _QUARTET_CHUNK] for i in range(0, len(quartets), _QUARTET_CHUNK)))


def _wrong_fraction(est: np.ndarray, ref: np.ndarray, batches) -> float:
    """Fraction of reference-resolved quartets whose estimated topology is wrong or tied; nan if none."""
    counted = differ = 0
    for quartets in batches:
        ref_topology, ref_resolved = four_point_topology(ref, quartets)
        est_topology, est_resolved = four_point_topology(est, quartets)
        counted += int(ref_resolved.sum())
        differ += int((ref_resolved & ~(est_resolved & (est_topology == ref_topology))).sum())
    return differ / counted if counted else float("nan")


def four_point_topology(distances: np.ndarray, quartets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per quartet (i, j, k, l): index of the smallest pairing sum (ij|kl, ik|jl, il|jk) and whether it is unique."""
    i, j, k, l = quartets.T
    sums = np.stack(
        [distances[i, j] + distances[k, l], distances[i, k] + distances[j, l], distances[i, l] + distances[j, k]],
        axis=1,
    )
    smallest = sums.min(axis=1, keepdims=True)
    return sums.argmin(axis=1), (sums == smallest).sum(axis=1) == 1


def _all_quartets(n: int) -> Iterator[np.ndarray]:
    every = combinations(range(n), 4)
    while batch := list(islice(every, _QUARTET_CHUNK)):
        yield np.fromiter(chain.from_iterable(batch), dtype=np.int64, count=4 * len(batch)).reshape(-1, 4)


def _random_quartets(n: int, count: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``count`` uniform 4-subsets: independent draws, rejecting those that repeat a leaf."""
    while count:
        draws = np.sort(rng.integers(0, n, size=(min(count, _QUARTET_CHUNK), 4)), axis=1)
        distinct = draws[(np.diff(draws, axis=1) != 0).all(axis=1)]
        count -= distinct.shape[0]
        yield distinct


def _distance_matrix(values: np.ndarray, name: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name} has {int((~np.isfinite(matrix)).sum())} non-finite entries")
    if not np.allclose(matrix, matrix.T, rtol=1e-9, atol=1e-12):
        raise ValueError(f"{name} is not symmetric (largest |d - d.T| = {np.abs(matrix - matrix.T).max():.3g})")
    return matrix


def _shared_leaf_order(a: Tree, b: Tree) -> tuple[str, ...]:
    only_a = sorted(set(a.leaf_names) - set(b.leaf_names))
    only_b = sorted(set(b.leaf_names) - set(a.leaf_names))
    if only_a or only_b:
        raise ValueError(
            f"the trees have different leaves: {len(only_a)} only in the first {only_a[:5]}, "
            f"{len(only_b)} only in the second {only_b[:5]}"
        )
    return a.leaf_names
