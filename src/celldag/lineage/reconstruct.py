"""Distance matrix → tree: neighbour joining (scikit-bio; celldag.lineage.fast_nj on large matrices) and
UPGMA (scipy average linkage)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable, Sequence

import numpy as np

from celldag.lineage import fast_nj
from celldag.lineage.tree import Tree

RECONSTRUCTIONS = ("nj", "upgma")
# Array libraries scikit-bio probes for when it is imported (skbio.util._testing._get_array_backends)
SKBIO_PROBED = ("jax", "torch", "cupy")
# Leaves from which neighbor_joining uses fast_nj instead of scikit-bio's O(n³) nj (≈ 18 s at 5,000 leaves).
# fast_nj gives scikit-bio's tree (same joins, same arithmetic; see its docstring for ties), but the trees
# of runs below this size — the default datasets have at most 128 leaves — stay scikit-bio's own, bit for
# bit, whatever may change in either; and below ~1,000 leaves scikit-bio takes under a second anyway.
FAST_NJ_FROM = 2000


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
    """Unrooted NJ tree (scikit-bio's; its root is a trifurcation): scikit-bio's ``nj`` below
    FAST_NJ_FROM leaves, celldag.lineage.fast_nj's exact pruned search (the same tree) from there."""
    if len(names) >= FAST_NJ_FROM:
        return fast_nj.neighbor_joining(distances, names)
    return skbio_neighbor_joining(distances, names)


def skbio_neighbor_joining(distances: np.ndarray, names: Sequence[str]) -> Tree:
    """scikit-bio's NJ tree, converted to a Tree (preorder, children in scikit-bio's order)."""
    distance_matrix, nj = skbio_nj()
    root = nj(distance_matrix(distances, ids=list(names)))
    return _preorder_tree(
        root,
        children_of=lambda node: node.children,
        name_of=lambda node: node.name if node.is_tip() else "",
        length_of=lambda node: np.nan if node.length is None else float(node.length),
    )


def skbio_nj():
    """scikit-bio's ``DistanceMatrix`` and ``nj``, imported without its array-library probe.

    scikit-bio 0.7 imports its test helpers with the package, and they import JAX, torch and CuPy to
    list the array backends installed: ≈ 2.5 s of a 3 s NJ job, and the probe switches JAX to 64-bit
    floats for the whole process (``jax_enable_x64``), which would change any JAX computation that
    follows in it (scib-metrics). NJ takes numpy arrays only: while scikit-bio is imported, those of
    the libraries not imported yet are reported missing, and JAX's flag is put back.
    """
    if "skbio" not in sys.modules:
        jax = sys.modules.get("jax")
        x64 = None if jax is None else jax.config.jax_enable_x64
        finder = _Missing({name for name in SKBIO_PROBED if name not in sys.modules})
        sys.meta_path.insert(0, finder)
        try:
            import skbio  # noqa: F401
        finally:
            sys.meta_path.remove(finder)
            if jax is not None:
                jax.config.update("jax_enable_x64", x64)
    from skbio import DistanceMatrix
    from skbio.tree import nj

    return DistanceMatrix, nj


class _Missing(importlib.abc.MetaPathFinder):
    """An import finder that reports the top-level packages ``names`` (and their modules) missing."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


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
    return Tree(
        parent=np.array(parents, dtype=np.int64), length=np.array(lengths, dtype=np.float64), names=tuple(labels)
    )
