"""What each CellTreeQM supervision setting reveals about the true tree, and quartets drawn from it.

Shared by the method (which may learn only from what its setting reveals) and by evaluation (which
scores known and unknown quartets separately). Quartet pairings are indexed as everywhere in
``celldag.lineage.metrics``: for a quartet (i, j, k, l), 0 = ij|kl, 1 = ik|jl, 2 = il|jk.

High-level partition (HLP): only the clades at depth ``level`` of the rooted tree and the tree
between the clade roots are known. A quartet's topology follows from that alone when no clade holds
three or more of its leaves: 2+2 and 2+1+1 quartets pair the same-clade leaves, and a 1+1+1+1
quartet has the topology of its four clade roots.

Samplers draw uniform 4-subsets and reject those that do not qualify, so every call returns fresh,
exactly uniform draws from the qualifying quartets without enumerating them (the official code's
capped, cached list went stale and stored wrong topology codes). The leaves of a quartet come in
random positions; with ``rank`` (one number per leaf) they come sorted by it instead — the official
HLP sampler's ascending leaf index, which makes its loss depend on the leaf order (docs/celltreeqm.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from celldag.lineage.metrics import four_point_topology
from celldag.lineage.tree import Tree, path_distances, prune

# pairing p joins quartet position 0 with position p + 1, and the remaining two positions
_PAIRS = ((0, 1, 2, 3), (0, 2, 1, 3), (0, 3, 1, 2))
_MIN_DRAWS, _MAX_DRAWS = 1 << 10, 1 << 20  # candidates per rejection round
_MAX_EMPTY_ROUNDS = 100


def _clades(tree: Tree, names: Sequence[str], level: int) -> tuple[Tree, np.ndarray, np.ndarray]:
    """(tree over ``names`` with unary nodes suppressed, clade id per name, clade root nodes)."""
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    # like ete3's standardize() in the official code: depths count only branching nodes
    tree = prune(tree, names)
    roots = tree.preorder[tree.depth[tree.preorder] == level]  # Newick order fixes the clade ids
    clade_of_node = np.full(tree.n_nodes, -1, dtype=np.int64)
    clade_of_node[roots] = np.arange(roots.size)
    for node in tree.preorder.tolist():  # parents first: each node inherits its parent's clade
        if clade_of_node[node] < 0 and node != 0:
            clade_of_node[node] = clade_of_node[tree.parent[node]]
    return tree, clade_of_node[tree.leaf_indices(names)], roots


def clade_labels(tree: Tree, names: Sequence[str], level: int) -> np.ndarray:
    """Per name, the id of its ancestor at depth ``level`` (root depth 0); -1 for leaves shallower than that."""
    return _clades(tree, names, level)[1]


def clade_distances(tree: Tree, names: Sequence[str], level: int) -> np.ndarray:
    """(k, k) edge counts between the clade roots at depth ``level``: the clade tree HLP assumes known."""
    tree, labels, roots = _clades(tree, names, level)
    names = list(names)
    representative = [names[int(np.flatnonzero(labels == clade)[0])] for clade in range(roots.size)]
    # two clade roots are not ancestors of each other, so the path between two of their leaves runs
    # through both roots: drop the stretch below each root
    below_root = tree.depth[tree.leaf_indices(representative)] - level
    distances = path_distances(tree, representative, topology_only=True)
    distances = distances - below_root[:, None] - below_root[None, :]
    np.fill_diagonal(distances, 0.0)
    return distances


def known_quartets(quartets: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Whether each quartet's topology follows from the partition: all leaves in clades, none with 3+."""
    clades = np.sort(labels[quartets], axis=1)
    three_in_one = (clades[:, 0] == clades[:, 2]) | (clades[:, 1] == clades[:, 3])
    return (clades[:, 0] >= 0) & ~three_in_one


def known_topology(quartets: np.ndarray, labels: np.ndarray, clade_dist: np.ndarray) -> np.ndarray:
    """Pairing index of each quartet derived from the partition alone; -1 where it does not follow.

    A 1+1+1+1 quartet whose clade roots form a star (a polytomy above the clades) is also -1.
    """
    clades = labels[quartets]
    same_clade = np.stack(
        [(clades[:, a] == clades[:, b]) | (clades[:, c] == clades[:, d]) for a, b, c, d in _PAIRS], axis=1
    )
    root_topology, root_resolved = four_point_topology(clade_dist, np.maximum(clades, 0))
    topology = np.where(same_clade.any(axis=1), same_clade.argmax(axis=1), root_topology)
    resolved = same_clade.any(axis=1) | root_resolved
    return np.where(known_quartets(quartets, labels) & resolved, topology, -1)


def _known_count(labels: np.ndarray) -> int:
    """How many quartets are known (2+2, 2+1+1, 1+1+1+1), from the clade sizes alone."""
    sizes = np.bincount(labels[labels >= 0]).astype(object)  # python ints: C(n, 4) overflows nothing
    pairs = sizes * (sizes - 1) // 2
    # elementary symmetric polynomials e_1..e_4 of the clade sizes
    e = [1, 0, 0, 0, 0]
    for size in sizes:
        for order in range(4, 0, -1):
            e[order] += e[order - 1] * size
    two_two = (sum(pairs) ** 2 - sum(pairs**2)) // 2
    # e_2 of the other clades' sizes, for each clade holding the pair
    two_one_one = sum(p * (e[2] - size * (e[1] - size)) for p, size in zip(pairs, sizes))
    return int(two_two + two_one_one + e[4])


def _rejection_sample(
    eligible: np.ndarray,
    count: int,
    rng: np.random.Generator,
    topology_of: Callable[[np.ndarray], np.ndarray],
    acceptance: float,
    rank: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uniform 4-subsets of the ``eligible`` leaves whose ``topology_of`` is not -1.

    Leaves come in random positions within the quartet, so that "the first leaf" of a pair means
    nothing; with ``rank``, in ascending rank (see the module docstring). ``acceptance`` (a guess of
    the fraction that qualifies) only sizes the rounds.
    """
    pool = np.flatnonzero(eligible)
    if pool.size < 4:
        raise ValueError(f"quartets need at least 4 eligible leaves, got {pool.size}")
    quartets, topologies, have, empty_rounds = [], [], 0, 0
    while have < count:
        wanted = (count - have) / acceptance * 1.2
        draws = np.sort(rng.integers(0, pool.size, size=(int(np.clip(wanted, _MIN_DRAWS, _MAX_DRAWS)), 4)), axis=1)
        draws = rng.permuted(pool[draws[(np.diff(draws, axis=1) != 0).all(axis=1)]], axis=1)
        if rank is not None:
            draws = np.take_along_axis(draws, np.argsort(rank[draws], axis=1, kind="stable"), axis=1)
        topology = topology_of(draws)
        kept = topology >= 0
        quartets.append(draws[kept])
        topologies.append(topology[kept])
        have += int(kept.sum())
        # e.g. clades whose every 1+1+1+1 quartet is a star of a polytomy: nothing qualifies at all
        empty_rounds = 0 if kept.any() else empty_rounds + 1
        if empty_rounds == _MAX_EMPTY_ROUNDS:
            raise ValueError(f"no qualifying quartet in {_MAX_EMPTY_ROUNDS} rounds of draws")
    return np.concatenate(quartets)[:count], np.concatenate(topologies)[:count]


def sample_known_quartets(
    labels: np.ndarray,
    clade_dist: np.ndarray,
    count: int,
    rng: np.random.Generator,
    exclude_leaves: np.ndarray | None = None,
    rank: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` quartets drawn uniformly from the known ones, none with a leaf in ``exclude_leaves``."""
    eligible = labels >= 0
    if exclude_leaves is not None:
        eligible &= ~np.asarray(exclude_leaves, dtype=bool)
    known = _known_count(labels[eligible])
    if known == 0:
        raise ValueError("the partition leaves no known quartet among the eligible leaves")
    n = int(eligible.sum())
    acceptance = known / (n * (n - 1) * (n - 2) * (n - 3) / 24)
    return _rejection_sample(eligible, count, rng, lambda q: known_topology(q, labels, clade_dist), acceptance, rank)


def random_quartets(
    allowed_leaves: np.ndarray, count: int, rng: np.random.Generator, rank: np.ndarray | None = None
) -> np.ndarray:
    """``count`` uniform quartets of allowed leaves, with no topology (the label-free setting)."""

    def no_topology(quartets: np.ndarray) -> np.ndarray:
        return np.zeros(len(quartets), dtype=np.int64)

    return _rejection_sample(np.asarray(allowed_leaves, dtype=bool), count, rng, no_topology, 1.0, rank)[0]


def partially_labelled_split(n_leaves: int, fraction: float, seed: int) -> np.ndarray:
    """Mask of the ⌊n·fraction⌋ leaves (at least 4) whose place in the tree is known, drawn with ``seed``."""
    known = max(4, int(np.floor(n_leaves * fraction)))
    if known > n_leaves:
        raise ValueError(f"{known} known leaves requested of {n_leaves}")
    mask = np.zeros(n_leaves, dtype=bool)
    mask[np.random.default_rng(seed).choice(n_leaves, size=known, replace=False)] = True
    return mask


def supervised_quartets(
    tree_distances: np.ndarray,
    count: int,
    rng: np.random.Generator,
    allowed_leaves: np.ndarray,
    rank: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uniform quartets of allowed leaves with their reference topology (unresolved ones redrawn)."""

    def topology_of(quartets: np.ndarray) -> np.ndarray:
        topology, resolved = four_point_topology(tree_distances, quartets)
        return np.where(resolved, topology, -1)

    return _rejection_sample(np.asarray(allowed_leaves, dtype=bool), count, rng, topology_of, 1.0, rank)
