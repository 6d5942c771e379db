"""Distances between a reconstructed lineage tree and the true tree; lower is better for all but the
split shares (``split_recovery``, ``split_compatibility``), read for a reference with polytomies."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, combinations, islice

import numpy as np

from celldag.errors import InputError
from celldag.lineage.quartets import binary_quartet_distance, clade_overlaps, is_binary, quartet_counts
from celldag.lineage.tree import Tree, prune

QUARTET_SAMPLE_DEFAULT = 100_000
_QUARTET_CHUNK = 1 << 18  # quartets scored per batch in qdist_sampled, bounds its memory


@dataclass(frozen=True)
class RobinsonFoulds:
    distance: int  # splits in exactly one of the two trees
    max_distance: int  # splits in the two trees together; 2(n - 3) for two binary trees
    normalized: float  # distance / max_distance, 0.0 when neither tree has a split


def robinson_foulds(a: Tree, b: Tree) -> RobinsonFoulds:
    """Unrooted Robinson–Foulds distance over the non-trivial splits of both trees (``_split_counts``)."""
    splits_a, splits_b, shared = _split_counts(a, b)
    distance = splits_a + splits_b - 2 * shared
    max_distance = splits_a + splits_b
    return RobinsonFoulds(distance, max_distance, distance / max_distance if max_distance else 0.0)


def split_recovery(reference: Tree, estimate: Tree) -> float:
    """The share of the reference's distinct non-trivial splits that the estimate also has; higher is better.

    In place of RF for a reference with polytomies: a split the estimate adds inside a polytomy
    contradicts nothing the reference says, so it costs nothing here (RF counts it as a difference).
    nan when the reference has no non-trivial split (a star): nothing to recover, not a score of 0.
    """
    in_reference, _, shared = _split_counts(reference, estimate)
    return shared / in_reference if in_reference else math.nan


def split_compatibility(reference: Tree, estimate: Tree) -> float:
    """The share of the estimate's distinct non-trivial splits compatible with every split of the
    reference; higher is better.

    Splits X|X' and Y|Y' are compatible iff one of X∩Y, X∩Y', X'∩Y, X'∩Y' is empty (one tree can hold
    both): a split inside a polytomy of the reference is compatible with all of it. The complement of
    ``split_recovery``'s view: it reads what the estimate asserts, not what it recovers. nan when either
    tree has no non-trivial split: with a star reference every split would score as compatible.
    """
    n = len(_shared_leaf_order(reference, estimate))
    # pruning to every leaf suppresses unary nodes, so each edge below is one split (but at the root)
    reference, estimate = prune(reference, reference.leaf_names), prune(estimate, estimate.leaf_names)
    edges_r, edges_e = _split_edges(reference), _split_edges(estimate)
    if not (edges_r.size and edges_e.size):
        return math.nan
    overlap = clade_overlaps(estimate, reference, edges_r)[edges_e].astype(np.int64)
    size_e, size_r = (_clade_sizes(tree)[edges] for tree, edges in ((estimate, edges_e), (reference, edges_r)))
    size_e = size_e[:, None]
    incompatible = (overlap > 0) & (overlap < size_e) & (overlap < size_r) & (size_e + size_r - overlap < n)
    return float(1.0 - incompatible.any(axis=1).mean())


def _split_edges(tree: Tree) -> np.ndarray:
    """The nodes whose edges to their parents are the tree's non-trivial splits, once each, for a tree
    without unary nodes: the two edges below a root of degree 2 are one split."""
    size = _clade_sizes(tree)
    edges = np.flatnonzero((size >= 2) & (size <= size[0] - 2))
    kids = tree.children[0]
    return edges[edges != kids[1]] if len(kids) == 2 else edges


def _clade_sizes(tree: Tree) -> np.ndarray:
    start, stop = tree.leaf_span
    return stop - start


def _split_counts(a: Tree, b: Tree) -> tuple[int, int, int]:
    """The distinct non-trivial splits of ``a``, of ``b`` and of both.

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
    return len(splits_a), len(splits_b), len(shared)


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
    low[flip] = np.minimum(
        np.where(start[flip] > 0, prefix_min[start[flip] - 1], n),
        np.where(outside, suffix_min[np.minimum(stop[flip], n - 1)], n),
    )
    high[flip] = np.maximum(
        np.where(start[flip] > 0, prefix_max[start[flip] - 1], -1),
        np.where(outside, suffix_max[np.minimum(stop[flip], n - 1)], -1),
    )
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

    Two binary trees go to ``quartets.binary_quartet_distance``, others to ``quartets.quartet_counts``:
    both O(n²) (see their module), the same integer count divided by C(n, 4).
    """
    n = len(_shared_leaf_order(a, b))
    if n < 4:
        raise InputError(f"the quartet distance needs at least 4 leaves, got {n}")
    if is_binary(a) and is_binary(b):
        return binary_quartet_distance(a, b)
    return quartet_counts(a, b).distance


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
    return _wrong_fraction(
        est, ref, (quartets[i : i + _QUARTET_CHUNK] for i in range(0, len(quartets), _QUARTET_CHUNK))
    )


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
