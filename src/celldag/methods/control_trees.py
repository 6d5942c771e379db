"""Null and oracle controls of the lineage track: where each metric's floor and ceiling lie.

The benchmark runs them like any method (registry ``kind: control``), so that a table shows beside the
methods what a tree that knows nothing scores (``null_tree``) and what a tree that knows nearly all of
the truth scores (``oracle_tree``). A metric whose null and oracle scores lie close has no range on that
dataset, whatever the methods score.

``null_tree`` reads only the leaf names; registry param ``shape``: ``random`` (a random binary tree),
``star`` (no split at all) or ``caterpillar`` (a ladder in a random leaf order). ``oracle_tree`` reads the
true tree (its entry lists ``needs: [truth]``), resolves its polytomies at random and moves a share
``nni_rate`` of its internal edges by nearest-neighbour interchanges. Every edge of either has length 1:
the lineage scores read topology only.
"""

from __future__ import annotations

import numpy as np

from celldag.lineage.track import LineageInput
from celldag.lineage.tree import Tree, parse_newick, prune, to_newick
from celldag.methods import MethodResult

NULL_SHAPES = ("random", "star", "caterpillar")
_NULL_STREAM = 0x4E11  # the draws of each control under one seed: independent of the other seeded streams
_ORACLE_STREAM = 0x0AC1


class _Nodes:
    """A tree under construction: nodes appended in any order, each with its parent and children lists."""

    def __init__(self) -> None:
        self.parent: list[int] = []  # -1: none (the root, or a node not yet joined or taken out)
        self.children: list[list[int]] = []
        self.names: list[str] = []

    def add(self, name: str = "") -> int:
        self.parent.append(-1)
        self.children.append([])
        self.names.append(name)
        return len(self.parent) - 1

    def attach(self, node: int, parent: int) -> None:
        """Make ``node`` (without a parent) a child of ``parent``."""
        self.parent[node] = parent
        self.children[parent].append(node)

    def detach(self, node: int) -> None:
        self.children[self.parent[node]].remove(node)
        self.parent[node] = -1

    def join(self, kids) -> int:
        """A new node with ``kids`` (parentless nodes) as its children."""
        node = self.add()
        for kid in kids:
            self.attach(kid, node)
        return node

    def tree(self, root: int) -> Tree:
        """The subtree below ``root`` as a ``Tree`` (nodes renumbered in preorder), every edge of length 1."""
        order, stack = [], [root]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(reversed(self.children[node]))
        index = {node: position for position, node in enumerate(order)}
        parent = [-1] + [index[self.parent[node]] for node in order[1:]]
        length = [np.nan] + [1.0] * (len(order) - 1)
        return Tree(np.array(parent, dtype=np.int64), np.array(length), tuple(self.names[node] for node in order))


def join_at_random(nodes: _Nodes, clusters: list[int], until: int, rng: np.random.Generator) -> list[int]:
    """Join two of the parentless ``clusters``, chosen uniformly at random, under a new node until ``until``
    clusters are left; returns them. Over leaves down to one cluster: a random binary tree (on 4 leaves each
    of the 3 unrooted topologies has probability 1/3: its split is the first pair joined)."""
    clusters = list(clusters)
    while len(clusters) > until:
        first, second = sorted(rng.choice(len(clusters), size=2, replace=False).tolist())
        pair = [clusters[first], clusters[second]]
        del clusters[second], clusters[first]
        clusters.append(nodes.join(pair))
    return clusters


def null_tree(inputs: LineageInput, params: dict, seed: int) -> MethodResult:
    """A tree over ``inputs.names`` that reads nothing else of the data: the floor of every lineage metric."""
    shape = params["shape"]
    if shape not in NULL_SHAPES:
        raise ValueError(f"params.shape must be one of {', '.join(map(repr, NULL_SHAPES))}, got {shape!r}")
    rng = np.random.default_rng([seed, _NULL_STREAM])
    nodes = _Nodes()
    leaves = [nodes.add(name) for name in inputs.names]
    if shape == "star":  # every leaf a child of the root: no non-trivial split
        root = nodes.join(leaves)
    elif shape == "random":
        (root,) = join_at_random(nodes, leaves, 1, rng)
    else:  # caterpillar: ((((a,b),c),d),…) with the leaves in a random order
        order = rng.permutation(len(leaves)).tolist()
        root = leaves[order[0]]
        for leaf in order[1:]:
            root = nodes.join([root, leaves[leaf]])
    return MethodResult(tree_newick=to_newick(nodes.tree(root)))


def oracle_tree(inputs: LineageInput, params: dict, seed: int) -> MethodResult:
    """The true tree, made binary and moved by ``nni_rate``: the ceiling of every lineage metric.

    Unary nodes are suppressed and the tree is read unrooted (a root with 2 children merged into one
    with 3). Each polytomy, a node of degree over 3 in the unrooted tree, is resolved into a random binary
    subtree over its children (``join_at_random``): a binary tree as methods give, so RF of even the oracle
    stays near 1 on a mostly unresolved truth. Then ``round(nni_rate × internal edges)`` distinct internal
    edges, chosen at random, each get a nearest-neighbour interchange, one of its two chosen at random:
    each moves one split, so with ``nni_rate`` 0 a binary truth comes back unchanged (RF 0).
    uns: ``nni_moves``, ``internal_edges`` (n − 3) and ``polytomies_resolved``.
    """
    rate = params["nni_rate"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError(f"params.nni_rate must be a number in [0, 1], got {rate!r}")
    if inputs.tree_newick is None:
        raise ValueError("oracle_tree reads the true tree: its registry entry must list `needs: [truth]`")
    truth = parse_newick(inputs.tree_newick)
    if set(truth.leaf_names) != set(inputs.names) or len(truth.leaf_names) != len(inputs.names):
        raise ValueError("the true tree's leaves differ from the input's leaf names")
    rng = np.random.default_rng([seed, _ORACLE_STREAM])
    nodes, root = _unrooted(prune(truth, truth.leaf_names))  # prune to every leaf: unary nodes suppressed
    resolved = _resolve_polytomies(nodes, root, rng)
    edges = [node for node in _below(nodes, root) if nodes.children[node]]  # internal edges: above internal nodes
    moves = round(rate * len(edges))
    for pick in rng.choice(len(edges), size=moves, replace=False).tolist():
        nearest_neighbour_interchange(nodes, edges[pick], rng)
    facts = {"nni_moves": int(moves), "internal_edges": len(edges), "polytomies_resolved": resolved}
    return MethodResult(tree_newick=to_newick(nodes.tree(root)), uns=facts)


def _unrooted(tree: Tree) -> tuple[_Nodes, int]:
    """``tree`` (no unary nodes) as ``_Nodes``, internal labels dropped; a root with 2 children is merged
    with an internal child, so that the root is a vertex of the unrooted tree and every edge one split."""
    nodes = _Nodes()
    for node in range(tree.n_nodes):
        nodes.add(tree.names[node] if tree.is_leaf[node] else "")
        if node:
            nodes.attach(node, int(tree.parent[node]))
    internal = [kid for kid in nodes.children[0] if nodes.children[kid]]
    if len(nodes.children[0]) == 2 and internal:
        merged = internal[0]
        nodes.detach(merged)
        for kid in list(nodes.children[merged]):
            nodes.detach(kid)
            nodes.attach(kid, 0)
    return nodes, 0


def _below(nodes: _Nodes, root: int) -> list[int]:
    """The nodes below ``root``, in preorder."""
    order, stack = [], list(reversed(nodes.children[root]))
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(nodes.children[node]))
    return order


def _resolve_polytomies(nodes: _Nodes, root: int, rng: np.random.Generator) -> int:
    """Resolve, at random, every node of unrooted degree over 3 (a root with over 3 children, any other
    node with over 2) into a binary subtree over its children; returns how many there were."""
    resolved = 0
    for node in [root, *_below(nodes, root)]:
        keep = 3 if node == root else 2
        kids = list(nodes.children[node])
        if len(kids) <= keep:
            continue
        for kid in kids:
            nodes.detach(kid)
        for cluster in join_at_random(nodes, kids, keep, rng):
            nodes.attach(cluster, node)
        resolved += 1
    return resolved


def nearest_neighbour_interchange(nodes: _Nodes, node: int, rng: np.random.Generator) -> None:
    """One NNI across the edge above internal ``node`` of a binary tree: with B a sibling of ``node`` and
    C, D its children (the edge splits A B | C D), swap B with C or with D, at random: A C | B D or A D | B C.
    Every other split keeps its leaves, so the tree loses exactly one split and gains one (RF distance 2)."""
    above = nodes.parent[node]
    sibling = next(kid for kid in nodes.children[above] if kid != node)
    kids = nodes.children[node]
    if len(kids) != 2:
        raise ValueError(f"nearest_neighbour_interchange needs a binary node, node {node} has {len(kids)} children")
    swapped = kids[int(rng.integers(2))]
    nodes.detach(sibling)
    nodes.detach(swapped)
    nodes.attach(sibling, node)
    nodes.attach(swapped, above)


# the registry params each function reads: any other key is refused when the workflow is parsed
null_tree.accepted_params = ("shape",)
oracle_tree.accepted_params = ("nni_rate",)
