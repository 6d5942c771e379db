"""Exact quartet counts of two trees: binary trees in O(n²) time and memory (n leaves), then any trees.

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

Trees with polytomies (``quartet_counts``) get every category of Estabrook, McMorris & Meacham (1985)
exactly from the same overlaps, in O(n²) time and memory when polytomies are small. A vertex of any
degree has one branch per child plus, but at the root, the leaves outside its subtree. A resolved
quartet ab|cd still has exactly two claims (the ends of its inner path: a, b in two branches, c, d
together in a third) and a star none, so matching claims count the quartets resolved alike as above,
with M now deg(u) × deg(w). Quartets resolved in both trees (alike or not) come from an identity per
quartet: resolved = E − V, with E the edges that split it 2|2 (its inner path, L ≥ 1 edges, or none)
and V the vertices holding it as 2 + 2 in two branches (the L − 1 inside that path). Summing
(E_a − V_a)(E_b − V_b) needs, per pair of an edge or vertex of a and one of b, the quartets with both
patterns, each a closed form in the overlaps; only the term in which four cells of M hold one leaf each
(Σ over branch pairs i, i' of u and j, j' of w of M_ij M_ij' M_i'j M_i'j') loops over the branch pairs
of one tree's vertices: Σ deg(u)² · (branches of the other), the tree with fewer such pairs taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from celldag.errors import InputError
from celldag.lineage.tree import Tree

_TILE = 1 << 15  # vertex pairs scored per batch: small enough for the int64 temporaries to stay in cache
_INT16_LEAVES = 2**15  # overlap counts fit int16 below this many leaves: 800 MB at 10,000 leaves
_CELLS = 1 << 21  # overlap cells per batch in quartet_counts: its int64 temporaries stay near 16 MB each
# quartet_counts sums each vertex's or edge's counts in int64: a count of (quartet, vertex or edge of the
# other tree) pairs, at most C(n, 4) · 2n ≈ n⁵ / 12, which fits int64 up to this many leaves
_GENERAL_LEAVES = 10_000


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
    n = _leaf_count(a, b)
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
    overlap = clade_overlaps(a, b, np.concatenate([first_b, second_b]))  # columns: [first children | second]
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
        for p, q, s in (
            (m11, m22, m33),
            (m12, m21, m33),
            (m11, m23, m32),
            (m13, m22, m31),
            (m12, m23, m31),
            (m13, m21, m32),
        ):
            # int64 is exact: every term is ≥ 0 and ≤ the total, 4·(shared quartets) ≤ 4·C(n, 4), which
            # fits below ~80,000 leaves (an overlap matrix of 100 GB)
            four_times += int((p * q * s * (p + q + s - 3)).sum())
    assert four_times % 4 == 0
    return four_times // 4


def _leaf_count(a: Tree, b: Tree) -> int:
    if set(a.leaf_names) != set(b.leaf_names) or len(a.leaf_names) != len(b.leaf_names):
        raise ValueError("the trees have different leaves")
    n = len(a.leaf_names)
    if n < 4:
        raise InputError(f"the quartet distance needs at least 4 leaves, got {n}")
    return n


@dataclass(frozen=True)
class QuartetCounts:
    """The C(n, 4) quartets of trees a and b in the categories of Estabrook, McMorris & Meacham (1985).

    Read a as the reference: the quartets it resolves are ``agree + differ + resolved_a_only``.
    """

    total: int  # C(n, 4)
    resolved_a: int  # resolved in a (not a star)
    resolved_b: int
    resolved_both: int  # resolved in both trees, alike or not
    agree: int  # resolved alike in both trees

    @property
    def differ(self) -> int:
        """Resolved in both trees, differently."""
        return self.resolved_both - self.agree

    @property
    def resolved_a_only(self) -> int:
        """Resolved in a, a star in b."""
        return self.resolved_a - self.resolved_both

    @property
    def star_both(self) -> int:
        return self.total - self.resolved_a - self.resolved_b + self.resolved_both

    @property
    def distance(self) -> float:
        """``metrics.quartet_distance``: the share of all quartets whose topologies differ, a star
        differing from a resolved quartet."""
        return (self.total - self.agree - self.star_both) / self.total

    @property
    def resolved_distance(self) -> float:
        """The share of a's resolved quartets that b does not resolve alike: resolved differently, or
        left a star, which counts as wrong (a quartet the reference resolves and b does not recover).

        nan when a resolves no quartet (a star tree): there is nothing to score, which is not a score of 0.
        """
        return (self.resolved_a - self.agree) / self.resolved_a if self.resolved_a else math.nan

    @property
    def contradicted(self) -> float:
        """The share of a's resolved quartets that b resolves differently; b's stars contradict nothing.

        ``resolved_distance − contradicted`` is the share b leaves unresolved; nan when a resolves none.
        """
        return self.differ / self.resolved_a if self.resolved_a else math.nan


def quartet_counts(a: Tree, b: Tree) -> QuartetCounts:
    """Every category of the quartets of two trees over the same leaves, polytomies allowed, exactly.

    O(n²) time and memory with small polytomies (module docstring); ``shared_quartets`` counts
    ``agree`` of two binary trees faster.
    """
    n = _leaf_count(a, b)
    if n > _GENERAL_LEAVES:
        raise InputError(f"quartet counts of trees with polytomies are exact up to {_GENERAL_LEAVES} leaves, got {n}")
    resolved_a, resolved_b = resolved_quartets(a), resolved_quartets(b)
    first, second = _Branches(a), _Branches(b)
    if second.pairs_first.size < first.pairs_first.size:  # the four-cell term loops over the pairs of `first`
        a, b, first, second = b, a, second, first
    overlap = clade_overlaps(a, b, np.arange(b.n_nodes))
    agree = _agree(first, second, overlap, n)
    if is_binary(a) or is_binary(b):  # a binary tree resolves every quartet
        resolved_both = min(resolved_a, resolved_b)
    else:
        resolved_both = _resolved_in_both(first, second, overlap, n)
    return QuartetCounts(math.comb(n, 4), resolved_a, resolved_b, resolved_both, agree)


def resolved_quartets(tree: Tree) -> int:
    """The number of quartets the tree resolves: half its claims (module docstring), in O(n)."""
    branches = _Branches(tree)
    n, size = tree.leaves.size, branches.size
    squares = np.add.reduceat(size * size, branches.start[:-1])[branches.vertex]
    # a claim joins two leaves of one branch and separates two of two other branches
    separated = ((n - size) ** 2 - (squares - size * size)) // 2
    return _exact_sum(size * (size - 1) // 2 * separated) // 2


class _Branches:
    """A tree's vertices (its internal nodes) and their branches, which partition the leaves: the subtree
    of each child and, but at the root, the leaves outside the vertex's subtree."""

    def __init__(self, tree: Tree) -> None:
        n = tree.leaves.size
        start, stop = tree.leaf_span
        self.clade = stop - start  # leaves below each node
        node: list[int] = []  # a child, or the vertex itself for the leaves outside its subtree
        outside: list[bool] = []
        first: list[int] = []
        for vertex, kids in enumerate(tree.children):
            if kids:
                first.append(len(node))
                node += [*kids, vertex] if vertex else kids
                outside += [False] * len(kids) + [True] * (vertex > 0)
        self.start = np.array([*first, len(node)], dtype=np.int64)  # vertex k's branches: start[k] : start[k + 1]
        self.vertex = np.repeat(np.arange(len(first)), np.diff(self.start))
        self.node = np.array(node, dtype=np.int64)
        self.outside = np.array(outside, dtype=bool)
        self.size = np.where(self.outside, n - self.clade[self.node], self.clade[self.node])
        # the lower nodes of the edges that can split a quartet 2|2 (the root has no edge)
        self.edges = np.flatnonzero((self.clade >= 2) & (self.clade <= n - 2))
        # every pair of branches of one vertex, by vertex: pairs_start[k] : pairs_start[k + 1]
        degree = np.diff(self.start)
        pairs = [np.triu_indices(d, 1) for d in degree.tolist()]
        self.pairs_first = np.concatenate([i + s for (i, _), s in zip(pairs, first)]).astype(np.int64)
        self.pairs_second = np.concatenate([j + s for (_, j), s in zip(pairs, first)]).astype(np.int64)
        self.pairs_start = np.concatenate([[0], np.cumsum(degree * (degree - 1) // 2)])


def _vertex_batches(branches: _Branches, width: int):
    """(first, stop) vertex ranges whose branches × width stay near _CELLS (one vertex at least)."""
    rows, start, vertex = max(1, _CELLS // width), branches.start, 0
    while vertex < start.size - 1:
        stop = max(vertex + 1, int(np.searchsorted(start, start[vertex] + rows, side="right")) - 1)
        yield vertex, stop
        vertex = stop


def _branch_overlaps(x: _Branches, y: _Branches, overlap: np.ndarray, r0: int, r1: int):
    """For x's branches r0:r1, the leaves they share with the subtree of every node of y and with every
    branch of y."""
    clades = overlap[x.node[r0:r1]].astype(np.int64)
    outside = x.outside[r0:r1]
    clades[outside] = y.clade - clades[outside]
    cells = clades[:, y.node]
    cells[:, y.outside] = x.size[r0:r1, None] - cells[:, y.outside]
    return clades, cells


def _agree(x: _Branches, y: _Branches, overlap: np.ndarray, n: int) -> int:
    """Quartets resolved alike: half the matching claims of all vertex pairs (u of x, w of y).

    A match joins c, d in cell (i, j) of M = M(u, w) and separates a, b in two other rows and two other
    columns: C(M_ij, 2) times the pairs of leaves outside row i and column j in different rows and columns.
    """
    groups, column_vertex, column_size = y.start[:-1], y.vertex, y.size
    eight_times = 0
    for v0, v1 in _vertex_batches(x, y.node.size):
        r0, r1 = x.start[v0], x.start[v1]
        _, cells = _branch_overlaps(x, y, overlap, r0, r1)
        local, row_vertex, row_size = x.start[v0:v1] - r0, x.vertex[r0:r1] - v0, x.size[r0:r1, None]
        squares = cells * cells
        row_rests = (row_size - cells) ** 2  # (row sum without column j)² for row i, column j
        column_rests = (column_size - cells) ** 2
        row_squares = np.add.reduceat(squares, groups, axis=1)  # per row and vertex w
        # the cells outside row i and column j: their total, squared row sums, squared column sums, squares
        outside = n - row_size - column_size + cells
        rows_out = np.add.reduceat(row_rests, local, axis=0)[row_vertex] - row_rests
        columns_out = np.add.reduceat(column_rests, groups, axis=1)[:, column_vertex] - column_rests
        all_squares = np.add.reduceat(row_squares, local, axis=0)  # per vertex pair (u, w)
        cells_out = (
            all_squares[row_vertex][:, column_vertex]
            - row_squares[:, column_vertex]
            - np.add.reduceat(squares, local, axis=0)[row_vertex]
            + squares
        )
        # ordered pairs in different rows and columns: all, less same row, less same column, plus same cell
        separated_twice = outside * outside - rows_out - columns_out + cells_out
        eight_times += _exact_sum(cells * (cells - 1) * separated_twice)
    assert eight_times % 8 == 0
    return eight_times // 8


def _resolved_in_both(x: _Branches, y: _Branches, overlap: np.ndarray, n: int) -> int:
    """Quartets resolved in both trees: the sum over quartets of (E_x − V_x)(E_y − V_y) (module docstring)."""
    groups, total, rows = y.start[:-1], 0, max(1, _CELLS // y.node.size)
    for e0 in range(0, x.edges.size, rows):
        edges = x.edges[e0 : e0 + rows]
        clades = overlap[edges].astype(np.int64)
        size = x.clade[edges, None]
        # EE: quartets split 2|2 by an edge of each tree, from the 2 × 2 overlaps of their sides
        both = clades[:, y.edges]
        only_x, only_y = size - both, y.clade[y.edges] - both
        neither = n - size - y.clade[y.edges] + both
        total += _exact_sum(
            _pairs(both) * _pairs(neither) + _pairs(only_x) * _pairs(only_y) + both * only_x * only_y * neither
        )
        # EV: split 2|2 by the edge of x and held 2 + 2 by two branches of a vertex of y
        cells = clades[:, y.node]
        cells[:, y.outside] = size - cells[:, y.outside]
        total -= _exact_sum(_two_and_two(cells, y.size - cells, groups, axis=1))
    for v0, v1 in _vertex_batches(x, y.node.size):
        r0, r1 = x.start[v0], x.start[v1]
        clades, cells = _branch_overlaps(x, y, overlap, r0, r1)
        local = x.start[v0:v1] - r0
        # VE: held 2 + 2 by two branches of a vertex of x and split 2|2 by an edge of y
        inside = clades[:, y.edges]
        total -= _exact_sum(_two_and_two(inside, x.size[r0:r1, None] - inside, local, axis=0))
        # VV: two leaves in each of rows i, i' and of columns j, j' of M(u, w); first with two leaves in
        # each of two cells, ½ Σ over i ≠ i', j ≠ j' of C(M_ij, 2) · C(M_i'j', 2) ...
        two = _pairs(cells)
        per_row = np.add.reduceat(two, groups, axis=1)
        per_column = np.add.reduceat(two, local, axis=0)
        squares = np.add.reduceat(np.add.reduceat(two * two, local, axis=0), groups, axis=1)
        total += _exact_sum(
            (
                np.add.reduceat(per_row, local, axis=0) ** 2
                - np.add.reduceat(per_row**2, local, axis=0)
                - np.add.reduceat(per_column**2, groups, axis=1)
                + squares
            )
            // 2
        )
        # ... then one leaf in each of four cells: Σ over i < i' and j < j' of M_ij M_ij' M_i'j M_i'j'
        for p0 in range(x.pairs_start[v0], x.pairs_start[v1], rows):
            p1 = min(p0 + rows, x.pairs_start[v1])
            both = cells[x.pairs_first[p0:p1] - r0] * cells[x.pairs_second[p0:p1] - r0]
            per_vertex = np.add.reduceat(both, groups, axis=1)
            total += _exact_sum((per_vertex * per_vertex - np.add.reduceat(both * both, groups, axis=1)) // 2)
    return total


def _two_and_two(inside: np.ndarray, outside: np.ndarray, groups: np.ndarray, axis: int) -> np.ndarray:
    """Per vertex (branches grouped along ``axis``) and split: the quartets with two leaves in each of two
    branches and two on each side of the split, from each branch's leaves inside and outside the split.

    Σ over branch pairs {k, l}: C(in_k, 2) C(out_l, 2) + C(out_k, 2) C(in_l, 2) + in_k out_k in_l out_l.
    """

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, groups, axis=axis)

    two_in, two_out, one_each = _pairs(inside), _pairs(outside), inside * outside
    return (
        total(two_in) * total(two_out)
        - total(two_in * two_out)
        + (total(one_each) ** 2 - total(one_each * one_each)) // 2
    )


def _pairs(count: np.ndarray) -> np.ndarray:
    return count * (count - 1) // 2


def _exact_sum(values: np.ndarray) -> int:
    """Sum in Python integers over the int64 sums of rows: a row is one vertex or edge (_GENERAL_LEAVES)."""
    return sum(values.reshape(values.shape[0], -1).sum(axis=1).tolist())


def _vertex_children(tree: Tree) -> tuple[np.ndarray, np.ndarray]:
    """First and second child of every degree-3 vertex (a non-root node with two children, or a root
    with three); the third branch is every other leaf."""
    kids = tree.children
    vertices = [node for node in range(tree.n_nodes) if len(kids[node]) == (3 if node == 0 else 2)]
    return (np.array([kids[v][k] for v in vertices], dtype=np.int64) for k in (0, 1))


def clade_overlaps(a: Tree, b: Tree, columns: np.ndarray) -> np.ndarray:
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
