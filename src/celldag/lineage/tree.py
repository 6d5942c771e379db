"""A minimal immutable tree over named leaves, with Newick I/O, distances, splits and pruning.

Nodes are integers: node 0 is the root and every parent precedes its children
(``parent[i] < i``), so one forward pass over the nodes visits parents first.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)  # eq=False: element-wise array comparison has no single truth value
class Tree:
    parent: np.ndarray  # int64 parent index of each node, -1 for the root (node 0)
    length: np.ndarray  # float64 branch length to the parent; nan where unknown
    names: tuple[str, ...]  # node labels, "" for unnamed internal nodes

    def __post_init__(self) -> None:
        # private read-only copies keep the tree immutable whatever the caller does with its arrays
        parent = np.array(self.parent, dtype=np.int64)
        length = np.array(self.length, dtype=np.float64)
        names = tuple(str(name) for name in self.names)
        if parent.ndim != 1 or parent.size == 0 or length.shape != parent.shape or len(names) != parent.size:
            raise ValueError(
                f"parent, length and names must be 1-D and of one non-zero size, got "
                f"{parent.shape}, {length.shape} and {len(names)}"
            )
        if parent[0] != -1:
            raise ValueError(f"node 0 must be the root (parent -1), got parent {parent[0]}")
        bad = np.flatnonzero((parent[1:] < 0) | (parent[1:] >= np.arange(1, parent.size))) + 1
        if bad.size:
            raise ValueError(f"every node's parent must precede it; nodes {bad[:5].tolist()} break this")
        for array in (parent, length):
            array.setflags(write=False)
        object.__setattr__(self, "parent", parent)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "names", names)
        leaf_names = self.leaf_names
        if "" in leaf_names:
            raise ValueError(f"{leaf_names.count('')} leaves have an empty name")
        duplicated = sorted(name for name, count in Counter(leaf_names).items() if count > 1)
        if duplicated:
            raise ValueError(f"duplicate leaf names: {duplicated[:5]}")

    @property
    def n_nodes(self) -> int:
        return self.parent.size

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for node, parent in enumerate(self.parent.tolist()[1:], start=1):
            kids[parent].append(node)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def is_leaf(self) -> np.ndarray:
        return _frozen(np.bincount(self.parent[1:], minlength=self.n_nodes) == 0)

    @cached_property
    def preorder(self) -> np.ndarray:
        """Depth-first order following each node's children in index order (the Newick order)."""
        order, stack = [], [0]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(reversed(self.children[node]))
        return _frozen(np.array(order, dtype=np.int64))

    @cached_property
    def leaves(self) -> np.ndarray:
        """Leaf node indices in Newick order."""
        return _frozen(self.preorder[self.is_leaf[self.preorder]])

    @cached_property
    def leaf_position(self) -> np.ndarray:
        """Per node, its position among the leaves in Newick order (-1 for internal nodes)."""
        position = np.full(self.n_nodes, -1, dtype=np.int64)
        position[self.leaves] = np.arange(self.leaves.size)
        return _frozen(position)

    @cached_property
    def leaf_names(self) -> tuple[str, ...]:
        return tuple(self.names[leaf] for leaf in self.leaves.tolist())

    @cached_property
    def depth(self) -> np.ndarray:
        """Edges from the root to each node."""
        return _frozen(_sum_from_root(self.parent, np.ones(self.n_nodes)).astype(np.int64))

    @cached_property
    def leaf_span(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node, the half-open range of Newick leaf positions of the leaves in its subtree."""
        in_preorder = self.is_leaf[self.preorder].astype(np.int64)
        start = np.empty(self.n_nodes, dtype=np.int64)
        start[self.preorder] = np.cumsum(in_preorder) - in_preorder
        size = self.is_leaf.astype(np.int64)
        for node in range(self.n_nodes - 1, 0, -1):  # children come after parents: sum leaf counts upwards
            size[self.parent[node]] += size[node]
        return _frozen(start), _frozen(start + size)

    def leaf_indices(self, leaf_order: Sequence[str]) -> np.ndarray:
        """Node indices of the named leaves; ValueError on unknown or repeated names."""
        index = {name: node for name, node in zip(self.leaf_names, self.leaves.tolist())}
        unknown = [name for name in leaf_order if name not in index]
        if unknown:
            raise ValueError(f"{len(unknown)} names are not leaves of the tree: {unknown[:5]}")
        if len(set(leaf_order)) != len(leaf_order):
            raise ValueError("leaf names must not repeat")
        return np.array([index[name] for name in leaf_order], dtype=np.int64)

    def leaf_lca(self) -> np.ndarray:
        """(n_leaves, n_leaves) lowest common ancestor node of each leaf pair, leaves in Newick order."""
        start, stop = self.leaf_span
        lca = np.empty((self.leaves.size, self.leaves.size), dtype=np.int64)
        # a pair's LCA is the node where the pair's leaves fall in different children: each child's rows
        # get that node in the columns of its siblings, so every entry is written exactly once
        for node in self.preorder[~self.is_leaf[self.preorder]].tolist():
            for child in self.children[node]:
                lca[start[child] : stop[child], start[node] : start[child]] = node
                lca[start[child] : stop[child], stop[child] : stop[node]] = node
        np.fill_diagonal(lca, self.leaves)
        return lca


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _sum_from_root(parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per node, the sum of ``values`` over the path root → node, root excluded."""
    summed, addend = [0.0] * parent.size, values.tolist()
    for node, up in enumerate(parent.tolist()[1:], start=1):
        summed[node] = summed[up] + addend[node]
    return np.array(summed)


# ---------------------------------------------------------------- Newick

_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<comment>\[[^\]]*\])
      | (?P<quoted>'(?:[^']|'')*')
      | (?P<punct>[(),:;])
      | (?P<word>[^\s()\[\]',:;]+)
      | (?P<bad>.)""",
    re.VERBOSE | re.DOTALL,
)
_NEEDS_QUOTES = re.compile(r"[\s()\[\]',:;]")


def _tokens(text: str):
    """Yield (kind, value, position); kind is a punctuation character, 'label' or 'word'."""
    for match in _TOKEN.finditer(text):
        kind, value, position = match.lastgroup, match.group(), match.start()
        if kind == "bad":
            unclosed = {"'": "unterminated quoted label", "[": "unterminated comment"}
            raise _malformed(position, unclosed.get(value, f"unexpected {value!r}"))
        if kind == "quoted":
            yield "label", value[1:-1].replace("''", "'"), position
        elif kind == "word":
            yield "word", value, position
        elif kind == "punct":
            yield value, value, position


def _malformed(position: int, problem: str) -> ValueError:
    return ValueError(f"malformed Newick at character {position}: {problem}")


def parse_newick(text: str) -> Tree:
    """Parse one Newick tree (labels, quoted labels, internal labels, lengths, [comments])."""
    if not text.strip():
        raise ValueError("malformed Newick: empty string")
    parent, length, names = [-1], [np.nan], [""]
    open_nodes: list[int] = []  # internal nodes whose ')' is still to come
    current = 0  # the node the next label or length belongs to
    internal = labelled = has_length = False  # what has been read of `current`
    finished = False
    tokens = _tokens(text)

    def new_child(of: int) -> int:
        parent.append(of)
        length.append(np.nan)
        names.append("")
        return len(parent) - 1

    def close(position: int) -> None:
        if not internal and not names[current]:
            raise _malformed(position, "empty leaf name")

    for kind, value, position in tokens:
        if finished:
            raise _malformed(position, "text after the terminating ';'")
        if kind == "(":
            if internal or labelled or has_length:
                raise _malformed(position, "unexpected '('")
            open_nodes.append(current)
            current = new_child(current)
        elif kind in ("label", "word"):
            if labelled or has_length:
                raise _malformed(position, f"unexpected label {value!r} (missing ',' or ')'?)")
            names[current] = value
            labelled = True
        elif kind == ":":
            if has_length:
                raise _malformed(position, "second branch length")
            length[current] = _branch_length(next(tokens, ("end", "end of text", len(text))))
            has_length = True
        elif kind == ",":
            if not open_nodes:
                raise _malformed(position, "',' outside parentheses")
            close(position)
            current = new_child(open_nodes[-1])
            internal = labelled = has_length = False
        elif kind == ")":
            if not open_nodes:
                raise _malformed(position, "unbalanced parentheses: ')' without '('")
            close(position)
            current = open_nodes.pop()
            internal, labelled, has_length = True, False, False
        else:  # ';'
            if open_nodes:
                raise _malformed(position, f"unbalanced parentheses: {len(open_nodes)} '(' not closed")
            close(position)
            finished = True
    if not finished:
        if open_nodes:
            raise _malformed(len(text), f"unbalanced parentheses: {len(open_nodes)} '(' not closed")
        raise _malformed(len(text), "missing terminating ';'")
    return Tree(np.array(parent, dtype=np.int64), np.array(length, dtype=np.float64), tuple(names))


def _branch_length(token: tuple[str, str, int]) -> float:
    kind, value, position = token
    try:
        if kind == "word":
            return float(value)
    except ValueError:
        pass
    raise _malformed(position, f"branch length must be a number, got {value!r}")


def to_newick(tree: Tree, lengths: bool = True) -> str:
    """Newick text that ``parse_newick`` reads back into the same tree."""

    def label(node: int) -> str:
        name = tree.names[node]
        if _NEEDS_QUOTES.search(name):
            name = "'" + name.replace("'", "''") + "'"
        branch = tree.length[node]
        return f"{name}:{float(branch)!r}" if lengths and not np.isnan(branch) else name

    out: list[str] = []
    stack: list[int | str] = [0]  # a node to write, or literal text
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        kids = tree.children[item]
        if not kids:
            out.append(label(item))
            continue
        out.append("(")
        stack.append(")" + label(item))
        for position, kid in enumerate(reversed(kids)):
            if position:
                stack.append(",")
            stack.append(kid)
    return "".join(out) + ";"


# ---------------------------------------------------------------- distances, splits, pruning


def path_distances(tree: Tree, leaf_order: Sequence[str], topology_only: bool) -> np.ndarray:
    """(n, n) path distances between the named leaves: edge counts, or summed branch lengths."""
    nodes = tree.leaf_indices(leaf_order)
    if nodes.size == 0:
        return np.zeros((0, 0))
    position = tree.leaf_position[nodes]
    lca = tree.leaf_lca()[np.ix_(position, position)]
    if topology_only:
        height = tree.depth.astype(np.float64)
    else:
        # edges above the LCA of all requested leaves lie on no path, so their lengths may be unknown
        top = lca[0][np.argmin(tree.depth[lca[0]])]
        needed = tree.length.copy()
        while top >= 0:
            needed[top] = 0.0
            top = tree.parent[top]
        height = _sum_from_root(tree.parent, needed)
        missing = [name for name, h in zip(leaf_order, height[nodes]) if np.isnan(h)]
        if missing:
            raise ValueError(f"branch lengths missing (nan) on the paths to {len(missing)} leaves: {missing[:5]}")
    leaf_height = height[nodes]
    return leaf_height[:, None] + leaf_height[None, :] - 2 * height[lca]


def splits(tree: Tree, leaf_order: Sequence[str]) -> np.ndarray:
    """Non-trivial bipartitions of the unrooted tree, as bool rows over ``leaf_order``.

    One row per distinct split (both sides ≥ 2 leaves); the side without ``leaf_order[0]``
    is True; rows are sorted. Unary nodes and a degree-2 root add no split.
    """
    nodes = tree.leaf_indices(leaf_order)
    n_leaves = tree.leaves.size
    if nodes.size != n_leaves:
        raise ValueError(f"leaf_order must name all {n_leaves} leaves of the tree, got {nodes.size}")
    column_position = tree.leaf_position[nodes]
    start, stop = tree.leaf_span
    size = stop - start
    edges = np.flatnonzero((size >= 2) & (size <= n_leaves - 2))
    edges = edges[edges != 0]  # the root has no edge above it
    below = (column_position >= start[edges, None]) & (column_position < stop[edges, None])
    below ^= below[:, :1]  # orient every split away from the first leaf
    return np.unique(below.reshape(-1, n_leaves), axis=0)


def prune(tree: Tree, keep: Sequence[str]) -> Tree:
    """The subtree induced by ``keep``: unary nodes suppressed (lengths summed), rooted at their LCA."""
    kept_leaves = tree.leaf_indices(keep)
    if kept_leaves.size == 0:
        raise ValueError("prune needs at least one leaf to keep")
    count = np.zeros(tree.n_nodes, dtype=np.int64)  # kept leaves below each node
    count[kept_leaves] = 1
    branches = np.zeros(tree.n_nodes, dtype=np.int64)  # children with kept leaves below
    for node in range(tree.n_nodes - 1, 0, -1):
        up = tree.parent[node]
        count[up] += count[node]
        branches[up] += count[node] > 0
    on_path = count == kept_leaves.size
    new_root = np.flatnonzero(on_path)[np.argmax(tree.depth[on_path])]
    new_index = np.full(tree.n_nodes, -1, dtype=np.int64)  # the nearest kept node at or above each node
    run = np.zeros(tree.n_nodes)  # length from a suppressed node up to that kept node
    parent, length, names = [-1], [np.nan], [tree.names[new_root]]
    new_index[new_root] = 0
    # after new_root in preorder, the nodes with kept leaves below are all inside its subtree
    after_root = tree.preorder[np.flatnonzero(tree.preorder == new_root)[0] + 1 :]
    for node in after_root.tolist():
        if count[node] == 0:
            continue
        up = tree.parent[node]
        up_length = run[up] + tree.length[node]
        if branches[node] == 1:  # a pass-through node: fold its edge into the one below
            new_index[node], run[node] = new_index[up], up_length
            continue
        new_index[node] = len(parent)
        parent.append(new_index[up])
        length.append(up_length)
        names.append(tree.names[node])
    return Tree(np.array(parent, dtype=np.int64), np.array(length, dtype=np.float64), tuple(names))
