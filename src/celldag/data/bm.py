"""Seeded Brownian-motion lineage simulator (the synthetic benchmark of CellTreeQM).

Trees are stored as integer node ids: leaves are ``0 .. n-1``, internal nodes
``n .. 2n-2`` in the order they were created, so every parent has a larger id
than its children and the root is ``2n-2``. ``children[k]`` holds the two
children of internal node ``n + k``.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

MIN_DEPTH, MAX_DEPTH = 2, 14


@dataclass(frozen=True)
class BMSimulation:
    train: np.ndarray  # (n_leaves, n_features) float64, replicate 1
    test: np.ndarray  # (n_leaves, n_features) float64, replicate 2
    profile: np.ndarray  # (n_leaves, n_features) float64, the noise-free profile both replicates measure
    leaf_names: tuple[str, ...]  # "L000", "L001", ... zero-padded to the width of n_leaves-1
    tree_newick: str  # the true tree, with branch lengths
    spurious_tree_newick: str  # tree the spurious block evolved on ("" if n_spurious == 0)
    feature_kind: tuple[str, ...]  # per column: "signal" | "noise" | "spurious", in block order


def simulate_bm(
    *,
    depth: int,
    n_signal: int,
    n_noise: int,
    n_spurious: int,
    max_walk: float,
    noise_std: float,
    measurement_std: float,
    seed: int,
) -> BMSimulation:
    """Simulate two noisy replicates of leaf profiles evolved along a lineage tree.

    The true tree is a perfectly balanced binary tree with ``2**depth`` leaves whose
    non-root edges have i.i.d. Uniform(1, max_walk) lengths. Columns come in three
    blocks: ``n_signal`` Brownian-motion features along the true tree (root ~ N(0, I),
    each edge adds N(0, length * I)); ``n_noise`` features drawn i.i.d.
    N(0, noise_std**2) per leaf; ``n_spurious`` Brownian-motion features along an
    independent random tree over the same leaves. The spurious tree is celldag's own
    construction, because the paper's generator is unpublished: its topology comes
    from repeatedly joining two uniformly chosen subtrees (a random coalescent
    topology), and it gets its own Uniform(1, max_walk) edge lengths. ``train`` and
    ``test`` are the same true profile plus independent N(0, measurement_std**2) noise.
    Every draw comes from one ``np.random.default_rng(seed)``.
    """
    _validate(
        depth=depth,
        n_signal=n_signal,
        n_noise=n_noise,
        n_spurious=n_spurious,
        max_walk=max_walk,
        noise_std=noise_std,
        measurement_std=measurement_std,
    )
    rng = np.random.default_rng(seed)
    n_leaves = 2**depth
    width = len(str(n_leaves - 1))
    leaf_names = tuple(f"L{i:0{width}d}" for i in range(n_leaves))

    tree_children = _balanced_children(n_leaves)
    tree_lengths = _edge_lengths(n_leaves, max_walk, rng)
    signal = _brownian_leaves(tree_children, tree_lengths, n_signal, rng)
    noise = rng.normal(0.0, noise_std, size=(n_leaves, n_noise))
    if n_spurious:
        spurious_children = _random_join_children(n_leaves, rng)
        spurious_lengths = _edge_lengths(n_leaves, max_walk, rng)
        spurious = _brownian_leaves(spurious_children, spurious_lengths, n_spurious, rng)
        spurious_newick = _newick(spurious_children, spurious_lengths, leaf_names)
    else:
        spurious = np.empty((n_leaves, 0))
        spurious_newick = ""

    profile = np.hstack([signal, noise, spurious])
    train = profile + rng.normal(0.0, measurement_std, size=profile.shape)
    test = profile + rng.normal(0.0, measurement_std, size=profile.shape)
    return BMSimulation(
        train=train,
        test=test,
        profile=profile,
        leaf_names=leaf_names,
        tree_newick=_newick(tree_children, tree_lengths, leaf_names),
        spurious_tree_newick=spurious_newick,
        feature_kind=("signal",) * n_signal + ("noise",) * n_noise + ("spurious",) * n_spurious,
    )


def _validate(*, depth, n_signal, n_noise, n_spurious, max_walk, noise_std, measurement_std):
    integers = {"depth": depth, "n_signal": n_signal, "n_noise": n_noise, "n_spurious": n_spurious}
    for name, value in integers.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if not MIN_DEPTH <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be in [{MIN_DEPTH}, {MAX_DEPTH}], got {depth}")
    if n_signal < 1:
        raise ValueError(f"n_signal must be >= 1, got {n_signal}")
    for name in ("n_noise", "n_spurious"):
        if integers[name] < 0:
            raise ValueError(f"{name} must be >= 0, got {integers[name]}")
    # np.isfinite rejects NaN and inf, which would otherwise slip past the bound check.
    for name, value in {"noise_std": noise_std, "measurement_std": measurement_std}.items():
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not (np.isfinite(max_walk) and max_walk >= 1):
        raise ValueError(f"max_walk must be a finite number >= 1, got {max_walk!r}")


def _balanced_children(n_leaves: int) -> np.ndarray:
    """Join neighbouring subtrees level by level into a perfectly balanced tree."""
    level = np.arange(n_leaves)
    blocks = []
    next_id = n_leaves
    while len(level) > 1:
        pairs = level.reshape(-1, 2)
        blocks.append(pairs)
        level = np.arange(next_id, next_id + len(pairs))
        next_id += len(pairs)
    return np.vstack(blocks)


def _random_join_children(n_leaves: int, rng: np.random.Generator) -> np.ndarray:
    """Random coalescent topology: repeatedly join two uniformly chosen subtrees."""
    pool_sizes = np.arange(n_leaves, 1, -1)
    first = rng.integers(0, pool_sizes)
    # Drawn from one fewer slot and shifted past `first`, so the two picks always differ.
    second = rng.integers(0, pool_sizes - 1)
    pool = list(range(n_leaves))
    children = np.empty((n_leaves - 1, 2), dtype=np.int64)
    for k, (i, j) in enumerate(zip(first.tolist(), second.tolist())):
        j += j >= i
        children[k] = pool[i], pool[j]
        # Swap-remove the higher slot first so the lower slot index stays valid.
        for slot in sorted((i, j), reverse=True):
            pool[slot] = pool[-1]
            pool.pop()
        pool.append(n_leaves + k)
    return children


def _edge_lengths(n_leaves: int, max_walk: float, rng: np.random.Generator) -> np.ndarray:
    """Lengths indexed by node id; the root (last node) has no edge, kept as 0."""
    lengths = np.zeros(2 * n_leaves - 1)
    lengths[:-1] = rng.uniform(1.0, max_walk, size=2 * n_leaves - 2)
    return lengths


def _brownian_leaves(
    children: np.ndarray, lengths: np.ndarray, n_features: int, rng: np.random.Generator
) -> np.ndarray:
    """Brownian motion (sigma = 1) from a N(0, I) root down the tree; returns leaf values."""
    n_leaves = len(children) + 1
    parent = np.empty(2 * n_leaves - 1, dtype=np.int64)
    parent[children.ravel()] = np.repeat(np.arange(n_leaves, 2 * n_leaves - 1), 2)
    # One draw for all nodes: the root row stays N(0, I), every other row becomes its
    # edge increment. Variance is proportional to edge length, so the scale is
    # sqrt(length); the official CellTreeQM code used the length itself as the
    # standard deviation, which is not Brownian motion.
    values = rng.standard_normal((2 * n_leaves - 1, n_features))
    values[:-1] *= np.sqrt(lengths[:-1])[:, None]
    # Parents have larger ids, so descending order visits each parent before its children.
    for node in range(2 * n_leaves - 3, -1, -1):
        values[node] += values[parent[node]]
    return values[:n_leaves]


def _newick(children: np.ndarray, lengths: np.ndarray, leaf_names: tuple[str, ...]) -> str:
    """Newick with unnamed internal nodes and shortest round-trip-exact branch lengths."""
    n_leaves = len(leaf_names)
    child_pairs = children.tolist()
    length_of = lengths.tolist()  # Python floats, whose repr is the shortest exact form

    def subtree(node: int) -> str:
        if node < n_leaves:
            return leaf_names[node]
        left, right = child_pairs[node - n_leaves]
        return f"({subtree(left)}:{length_of[left]!r},{subtree(right)}:{length_of[right]!r})"

    return subtree(2 * n_leaves - 2) + ";"


COUNT_STREAM = 0xC0C0  # its own random stream: emitting counts changes no feature of the simulation
VALIDATION_STREAM = 0x7A11  # likewise for the validation replicate


def validation_replicate(simulation: BMSimulation, measurement_std: float, seed: int) -> np.ndarray:
    """A third replicate of the same leaves (the profile plus fresh measurement noise), from its own
    stream: supervised model selection scores on it, and train and test are the same with or without it."""
    noise = np.random.default_rng([seed, VALIDATION_STREAM]).normal(0.0, measurement_std, size=simulation.profile.shape)
    return simulation.profile + noise


def emit_counts(profiles: np.ndarray, depth: float, scale: float, seed: int) -> np.ndarray:
    """UMI-like counts of each leaf: Poisson with rates ``depth`` · softmax(``scale`` · profile) over the
    features, i.e. a library of ``depth`` counts on average whose log-expression follows the profile."""
    if not (np.isfinite(depth) and depth > 0 and np.isfinite(scale) and scale > 0):
        raise ValueError(f"count_depth and count_scale must be positive numbers, got {depth!r} and {scale!r}")
    logits = scale * profiles
    rates = np.exp(logits - logits.max(axis=1, keepdims=True))
    rates *= depth / rates.sum(axis=1, keepdims=True)
    return np.random.default_rng([seed, COUNT_STREAM]).poisson(rates).astype(np.float64)


def prepare_bm_simulator(dataset_id: str, params: dict, seed: int, files: Mapping[str, str]):
    """Loader: simulated lineage: leaves × features, the two replicates as layers, the true tree in ``uns``.

    ``standardize`` (default false, as for every lineage loader): z-score each feature with the
    training replicate's statistics; ``validation_replicate`` (default true): a third replicate, layer
    ``validation``, for supervised model selection; the other params are ``simulate_bm``'s.
    """
    del dataset_id, files  # generated: no files
    from celldag.data.leaf_profiles import standardise

    params = dict(params)
    standardize = params.pop("standardize", False)
    count_depth, count_scale = params.pop("count_depth", None), params.pop("count_scale", 0.25)
    with_validation = params.pop("validation_replicate", True)
    import anndata
    import pandas as pd

    simulation = simulate_bm(seed=seed, **params)
    replicates = {"train": simulation.train, "test": simulation.test}
    if with_validation:
        replicates["validation"] = validation_replicate(simulation, params["measurement_std"], seed)
    kind = np.asarray(simulation.feature_kind)
    varies = np.ones(len(kind), dtype=bool)
    counts = None if count_depth is None else emit_counts(simulation.test, count_depth, count_scale, seed)
    if standardize:
        scaled, varies = standardise(*replicates.values())
        replicates, kind = dict(zip(replicates, scaled)), kind[varies]
    adata = anndata.AnnData(
        X=(replicates["train"] + replicates["test"]) / 2,
        obs=pd.DataFrame(index=pd.Index(simulation.leaf_names, name="leaf")),
        var=pd.DataFrame(
            {"feature_kind": pd.Categorical(kind)},
            index=pd.Index([f"f{i:04d}" for i in range(len(kind))], name="feature"),
        ),
        layers=replicates,
    )
    if counts is not None:  # the test replicate as counts: the input of count models (Bonsai)
        adata.layers["counts"], adata.obs["count_total"] = counts[:, varies], counts.sum(axis=1)
        adata.uns["counts"] = {"depth": count_depth, "scale": count_scale}
    adata.uns["standardized"] = bool(standardize)
    adata.uns["tree_newick"] = simulation.tree_newick
    adata.uns["spurious_tree_newick"] = simulation.spurious_tree_newick
    return adata


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_bm_simulator.accepted_params = (
    "depth",
    "n_signal",
    "n_noise",
    "n_spurious",
    "max_walk",
    "noise_std",
    "measurement_std",
    "standardize",
    "count_depth",
    "count_scale",  # count_depth (null: none) emits the test replicate as counts, layers['counts']
    "validation_replicate",
)
