"""Distance matrix → tree: neighbour joining (scikit-bio) and UPGMA (scipy average linkage)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from celldag.lineage.tree import Tree

RECONSTRUCTIONS = ("nj", "upgma")


def euclidean_distances(points: np.ndarray) -> np.ndarray:
    """Pairwise Euclidean distances, exactly symmetric with a zero diagonal."""
    points = np.asarray(points, dtype=np.float64)
    squared = np.sum(points**2, axis=1)
    gram = points @ points.T
    distances = np.sqrt(np.maximum(squared[:, None] + squared[None, :] - 2 * gram, 0.0))
    distances = (distances + distances.T) / 2
    np.fill_diagonal(distances, 0.0)
    return distances


def reconstruct(distances: np.ndarray, names: Sequence[str], method: str) -> Tree:
    """The tree of ``method`` over ``names``, built on the leaves in name order: NJ and UPGMA break ties
    and sum in row order, so this keeps the tree independent of the order the rows came in."""
    if method not in RECONSTRUCTIONS:
        raise ValueError(f"unknown reconstruction {method!r}; choose one of {RECONSTRUCTIONS}")
    order = np.argsort(np.asarray(names), kind="stable")
    build = neighbor_joining if method == "nj" else upgma
    return build(np.asarray(distances)[np.ix_(order, order)], [names[i] for i in order])


def neighbor_joining(distances: np.ndarray, names: Sequence[str]) -> Tree:
    """Unrooted NJ tree (scikit-bio's implementation; its root is a trifurcation)."""
    from skbio import DistanceMatrix
    from skbio.tree import nj

    root = nj(DistanceMatrix(distances, ids=list(names)))
    return _preorder_tree(
        root,
        children_of=lambda node: node.children,
        name_of=lambda node: node.name if node.is_tip() else "",
        length_of=lambda node: np.nan if node.length is None else float(node.length),
    )


def upgma(distances: np.ndarray, names: Sequence[str]) -> Tree:
    """Rooted ultrametric UPGMA tree; a node's height is half its merge distance."""
    from scipy.cluster.hierarchy import linkage, to_tree
    from scipy.spatial.distance import squareform

    root = to_tree(linkage(squareform(distances, checks=False), method="average"))

    def branch_length(node) -> float:
        parent_height = parents_height.get(node.id)
        return np.nan if parent_height is None else parent_height - node.dist / 2

    parents_height: dict[int, float] = {}
    stack = [root]
    while stack:  # record each child's parent height before the tree is flattened
        node = stack.pop()
        for child in (node.left, node.right) if not node.is_leaf() else ():
            parents_height[child.id] = node.dist / 2
            stack.append(child)
    return _preorder_tree(
        root,
        children_of=lambda node: () if node.is_leaf() else (node.left, node.right),
        name_of=lambda node: names[node.id] if node.is_leaf() else "",
        length_of=branch_length,
    )


def _preorder_tree(root, children_of: Callable, name_of: Callable, length_of: Callable) -> Tree:
    parents: list[int] = []
    lengths: list[float] = []
    labels: list[str] = []
    stack = [(root, -1)]
    while stack:
        node, parent_index = stack.pop()
        index = len(parents)
        parents.append(parent_index)
        lengths.append(length_of(node))
        labels.append(name_of(node))
        stack.extend((child, index) for child in reversed(list(children_of(node))))
    return Tree(parent=np.array(parents, dtype=np.int64), length=np.array(lengths, dtype=np.float64), names=tuple(labels))
