"""Exact quartet distance between two binary trees in O(n²) time and memory (n leaves).

In an unrooted binary tree a quartet ab|cd has two inner vertices of its own: at one, a and b lie in
two different branches and c, d together in the third; at the other, c, d and a, b swap roles. Call
each a *claim* (vertex, separated pair, joined pair). Two trees resolve a quartet alike iff their claims
on it agree on which pair is separated, and then exactly two pairs of claims (u of a, w of b) match;
otherwise none do (the counting idea of Bryant, Tsang, Kearney & Li 2000). For vertices u and w, with
M the 3 × 3 overlaps |branch k of u ∩ branch k' of w|, the matching claims number

    Σ_{k,k'} C(M[k,k'], 2) · perm(M without row k and column k')
    = ½ Σ_π P_π (S_π − 3),   π over the 6 bijections, P_π = Π_k M[k, π(k)], S_π = Σ_k M[k, π(k)],

so the sum of Σ_π P_π (S_π − 3) over all vertex pairs is 4 × the shared quartets. A vertex's branches
are the subtrees of two of its children and all other leaves, so M follows from the four overlaps of
those children's subtrees and the subtree sizes; the overlaps of every node of a with the needed
nodes of b come from one pass up a (a node's row is the sum of its children's rows).
"""

from __future__ import annotations

import math

import numpy as np

from celldag.errors import InputError
from celldag.lineage.tree import Tree

_TILE = 1 << 15  # vertex pairs scored per batch: small enough for the int64 temporaries to stay in cache
_INT16_LEAVES = 2**15  # overlap counts fit int16 below this many leaves: 800 MB at 10,000 leaves


def is_binary(tree: Tree) -> bool:
    """Every vertex has degree ≤ 3 in the unrooted tree: at most 2 children, 3 at the root.

    Unary nodes and a root with 2 children only lie on an edge: they resolve nothing and split nothing.
    """
    children = np.bincount(tree.parent[1:], minlength=tree.n_nodes)
    return bool(children[1:].max(initial=0) <= 2 and children[0] <= 3)


def binary_quartet_distance(a: Tree, b: Tree) -> float:
    """Fraction of the C(n, 4) quartets whose topologies differ, for two binary trees (``is_binary``).

    Equals ``metrics.quartet_distance`` bit for bit: the same integer count divided by C(n, 4).
    """
    if set(a.leaf_names) != set(b.leaf_names) or len(a.leaf_names) != len(b.leaf_names):
        raise ValueError("the trees have different leaves")
    n = len(a.leaf_names)
    if n < 4:
        raise InputError(f"the quartet distance needs at least 4 leaves, got {n}")
    if not (is_binary(a) and is_binary(b)):
        raise ValueError("binary_quartet_distance needs two binary trees; use metrics.quartet_distance")
    total = math.comb(n, 4)
    return (total - shared_quartets(a, b)) / total  # every quartet is resolved in both trees


def shared_quartets(a: Tree, b: Tree) -> int:
    """Number of quartets that the binary trees ``a`` and ``b`` (same leaves) resolve alike."""
    n = len(a.leaf_names)
    first_a, second_a = _vertex_children(a)
    first_b, second_b = _vertex_children(b)
    m = first_b.size
    overlap = _overlaps(a, b, np.concatenate([first_b, second_b]))  # columns: [first children | second]
    size_a, size_b = (stop - start for start, stop in (a.leaf_span, b.leaf_span))
    b1, b2 = size_b[first_b], size_b[second_b]
    rows = max(1, _TILE // max(m, 1))
    four_times = 0
    for r in range(0, first_a.size, rows):
        x1 = overlap[first_a[r : r + rows]].astype(np.int64)
        x2 = overlap[second_a[r : r + rows]].astype(np.int64)
        a1, a2 = size_a[first_a[r : r + rows], None], size_a[second_a[r : r + rows], None]
        # M for every u in this batch and every w: rows and columns are (first child, second child, rest)
        m11, m12, m21, m22 = x1[:, :m], x1[:, m:], x2[:, :m], x2[:, m:]
        m13, m23 = a1 - m11 - m12, a2 - m21 - m22
        m31, m32 = b1 - m11 - m21, b2 - m12 - m22
        m33 = (n - a1 - a2) - m31 - m32
        for p, q, s in ((m11, m22, m33), (m12, m21, m33), (m11, m23, m32),
                        (m13, m22, m31), (m12, m23, m31), (m13, m21, m32)):  # fmt: skip
            # int64 is exact: every term is ≥ 0 and ≤ the total, 4·(shared quartets) ≤ 4·C(n, 4), which
            # fits below ~80,000 leaves (an overlap matrix of 100 GB)
            four_times += int((p * q * s * (p + q + s - 3)).sum())
    assert four_times % 4 == 0
    return four_times // 4


def _vertex_children(tree: Tree) -> tuple[np.ndarray, np.ndarray]:
    """First and second child of every degree-3 vertex (a non-root node with two children, or a root
    with three); the third branch is every other leaf."""
    kids = tree.children
    vertices = [node for node in range(tree.n_nodes) if len(kids[node]) == (3 if node == 0 else 2)]
    return (np.array([kids[v][k] for v in vertices], dtype=np.int64) for k in (0, 1))


def _overlaps(a: Tree, b: Tree, columns: np.ndarray) -> np.ndarray:
    """(a.n_nodes, columns.size) matrix of |leaves below node x of a ∩ leaves below node columns[j] of b|."""
    n = a.leaves.size
    overlap = np.empty((a.n_nodes, columns.size), dtype=np.int16 if n < _INT16_LEAVES else np.int32)
    # a leaf's row marks the nodes of b above it: its position in b's Newick order lies in their span
    position = b.leaf_position[b.leaf_indices(a.leaf_names)]
    start, stop = (span[columns] for span in b.leaf_span)
    # the marks go through an int buffer: a fancy assignment that casts bool to int is slow
    block = np.empty((min(n, 256), columns.size), dtype=overlap.dtype)
    for chunk in range(0, n, block.shape[0]):
        at = position[chunk : chunk + block.shape[0], None]
        marks = block[: at.shape[0]]
        np.less_equal(start, at, out=marks)
        marks &= at < stop
        overlap[a.leaves[chunk : chunk + block.shape[0]]] = marks
    kids = a.children
    for node in range(a.n_nodes - 1, -1, -1):  # parents precede their children: children are done first
        if kids[node]:
            row = overlap[node]
            row[:] = overlap[kids[node][0]]
            for kid in kids[node][1:]:
                row += overlap[kid]
    return overlap
