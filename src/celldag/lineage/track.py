"""The lineage track: leaves × features with the true tree; methods return a tree over the leaves.

Prepared dataset: one row per leaf, ``uns['tree_newick']`` the true tree over ``obs_names``, and
optionally an independent replicate pair (layers ``train`` / ``test``): methods train on ``train``
and are scored on ``test``; with a pair, optionally a third replicate (layer ``validation``) on which
supervised methods select their model, never on the test replicate. Scores: RF and quartet distances against the truth,
plus the metrics that split quartets by what a weak supervision setting revealed and, for a true tree with polytomies,
those over what it resolves (``celldag.lineage.scoring``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from celldag.contracts import MIN_LEAVES, ContractError, require_finite_matrix
from celldag.lineage.quartets import is_binary, resolved_quartets
from celldag.lineage.tree import parse_newick
from celldag.tracks import COMMON_FIGURES, Figure, Metric, MetricGroup, Track

# every lineage metric is ranked against a random binary tree over the leaves (the null: no information) and the true
# tree, its polytomies resolved at random, moved by NNI at a named rate (the oracle: what a binary tree close to the
# truth scores); celldag.methods.control_trees
CONTROLS = {"null": "null_tree/random", "oracle": "oracle_tree/default"}


def ranked(name: str, higher_is_better: bool, **flags) -> Metric:
    return Metric(name, higher_is_better=higher_is_better, role="ranking", **CONTROLS, **flags)


TRACK = Track(
    x_dtype="float64",  # leaves × features is small
    check_prepared="celldag.lineage.track:check_prepared",
    check_output="celldag.lineage.track:check_output",
    method_input="celldag.lineage.track:method_input",
    inputs={
        "replicates": "an independent train/test replicate pair (layers 'train' and 'test')",
        "validation": "a third replicate for model selection "
        "(layers['validation']; obs['n_cells_validation'] = 0 marks "
        "leaves without one)",
        "counts": "raw counts per leaf: the scored cells' UMI counts summed (layers['counts'], obs['count_total'])",
        "supervision": "the true tree, for a method whose variants learn from what their supervision setting reveals "
        "(celldag.lineage.supervision); every other method gets none (LineageInput.PRIVILEGED)",
        "truth": "the true tree whole, for an oracle control (kind: control only; the methods schema refuses it "
        "elsewhere): where a metric's best reachable score lies",
    },
    scorer="celldag.lineage.scoring:score_seed",
    metric_groups=(
        MetricGroup(
            "all runs",
            (
                ranked("rf", higher_is_better=False, core=True, delta=True),
                ranked("quartet_dist", higher_is_better=False, core=True, delta=True),
                ranked("qdist_sampled", higher_is_better=False, core=True, delta=True),
                # only against a reference with polytomies (scoring.polytomy_scores), where RF and quartet_dist
                # count what the reference leaves unresolved: in the main table, where such a dataset is read
                ranked("resolved_quartet_dist", higher_is_better=False, delta=True),
                ranked("resolved_quartet_contradicted", higher_is_better=False),
                ranked("split_recovery", higher_is_better=True),
                ranked("split_compatibility", higher_is_better=True),
            ),
        ),
        # K-/U-QDist and their relative reduction against raw-feature distances on the same quartets
        MetricGroup(
            "high-level partition",
            (
                ranked("k_qdist", higher_is_better=False),
                ranked("u_qdist", higher_is_better=False),
                ranked("k_qdist_reduction_vs_raw", higher_is_better=True, derived=True),
                ranked("u_qdist_reduction_vs_raw", higher_is_better=True, derived=True),
            ),
        ),
        MetricGroup(
            "partially labelled",
            (
                ranked("qdist_known4", higher_is_better=False),
                ranked("qdist_known1to3", higher_is_better=False),
                ranked("qdist_known0", higher_is_better=False),
                ranked("rf_unknown", higher_is_better=False),
            ),
        ),
    ),
    dataset_facts="celldag.lineage.track:dataset_facts",
    figures=(
        *COMMON_FIGURES,
        Figure("trees", "celldag.lineage.figures:trees", "captions/trees.rst", needs=("scores", "outputs")),
        Figure("distances", "celldag.lineage.figures:distances", "captions/distances.rst", needs=("scores",)),
        Figure("partition", "celldag.lineage.figures:partition", "captions/partition.rst", needs=("scores",)),
    ),
    arrange="celldag.lineage.track:seeded_leaf_order",
)


@dataclass(frozen=True)
class LineageInput:
    """What a lineage method's ``run`` receives: arrays only, one row per leaf.

    Attributes:
        names: Leaf names, one per row.
        features: ``(n, p)`` the replicate the result is scored on (the test replicate when there is a pair).
        train_features: ``(n, p)`` the independent training replicate, or None without a pair; methods listing
            ``needs: [replicates]`` always get it.
        tree_newick: The true tree, given only to a method that ``needs: [supervision]`` (or ``[truth]``, an
            oracle control); None for the rest. A supervised method may use only what its setting reveals
            (``celldag.lineage.supervision``).
        work_dir: The run's directory: checkpoints live here, so a killed job resumes.
        counts: ``(n, p)`` integer counts of the scored replicate's cells summed per leaf; None if the dataset
            has transformed values only.
        count_total: ``(n,)`` each leaf's total count over all genes, kept or not.
        validation_features: ``(n, p)`` a third replicate for model selection, never scored.
        validation_leaves: ``(n,)`` bool: leaves whose validation row is measured (a leaf without validation
            cells repeats its training row there).
        no_validation: Why the dataset has no validation replicate, where its loader says
            (``uns['no_validation_replicate']``): for a method's note on its model selection.
    """

    # fields of the truth, each given only to a method whose needs list the optional input that names it (the runner
    # sets the rest to None before `run`: a method that does not declare it cannot read the tree it is scored on)
    PRIVILEGED: ClassVar[dict[str, tuple[str, ...]]] = {"tree_newick": ("supervision", "truth")}

    names: tuple[str, ...]
    features: np.ndarray
    train_features: np.ndarray | None
    tree_newick: str | None
    work_dir: str | None = None
    counts: np.ndarray | None = None
    count_total: np.ndarray | None = None
    validation_features: np.ndarray | None = None
    validation_leaves: np.ndarray | None = None
    no_validation: str | None = None

    def unmet(self, need: str) -> str | None:
        if need == "replicates" and self.train_features is None:
            return "needs a train/test replicate pair; this dataset has one profile per leaf"
        if need == "counts" and self.counts is None:
            return "needs raw counts per leaf; this dataset has transformed values only"
        if need == "validation" and self.validation_features is None:
            return "needs a validation replicate; this dataset has none"
        if need in ("supervision", "truth") and self.tree_newick is None:
            return "needs the true tree; this dataset has none"
        return None


def seeded_leaf_order(adata, seed: int):
    """The leaves in a seeded random order: loaders build them in tree order (preorder, or left to right),
    and a method that reads the row order (e.g. the official HLP sampler) would learn the tree from it.
    The tree keeps its names, so the truth is unchanged."""
    return adata[np.random.default_rng([seed, 0x0DE5]).permutation(adata.n_obs)].copy()


def scored_features(prepared) -> np.ndarray:
    """What methods are scored on: the test replicate when there is a pair, else X."""
    return np.asarray(prepared.layers["test"] if "test" in prepared.layers else prepared.X, dtype=np.float64)


def method_input(prepared, work_dir: str | None, gene_table=None) -> LineageInput:
    del gene_table  # lineage methods read no gene embedding
    has_replicates, has_counts = "train" in prepared.layers, "counts" in prepared.layers
    has_validation = "validation" in prepared.layers
    validation_cells = prepared.obs.get("n_cells_validation")
    return LineageInput(
        names=tuple(prepared.obs_names),
        features=scored_features(prepared),
        train_features=np.asarray(prepared.layers["train"], dtype=np.float64) if has_replicates else None,
        tree_newick=prepared.uns["tree_newick"],
        work_dir=work_dir,
        counts=np.asarray(prepared.layers["counts"], dtype=np.float64) if has_counts else None,
        count_total=prepared.obs["count_total"].to_numpy(dtype=np.float64) if has_counts else None,
        validation_features=np.asarray(prepared.layers["validation"], dtype=np.float64) if has_validation else None,
        validation_leaves=None
        if not has_validation
        else (np.ones(prepared.n_obs, dtype=bool) if validation_cells is None else validation_cells.to_numpy() > 0),
        no_validation=None if has_validation else prepared.uns.get("no_validation_replicate"),
    )


def tree_leaf_names(newick: str, path: str) -> set[str]:
    try:
        return set(parse_newick(newick).leaf_names)
    except ValueError as err:
        raise ContractError(path, "uns['tree_newick']", f"not a valid Newick tree ({err})") from err


def check_prepared(adata, path: str) -> None:
    """Leaves × features, every layer finite, replicates in pairs, a tree over exactly the leaves."""
    for name, layer in adata.layers.items():
        require_finite_matrix(layer, path, f"layers['{name}']", adata.n_obs)
    if ("train" in adata.layers) != ("test" in adata.layers):
        raise ContractError(path, "layers", "replicates come in pairs: both 'train' and 'test' or neither")
    if "validation" in adata.layers and "train" not in adata.layers:
        raise ContractError(path, "layers['validation']", "a validation replicate needs the train/test pair beside it")
    if "counts" in adata.layers:
        counts = np.asarray(adata.layers["counts"])
        if (counts < 0).any() or (counts != np.round(counts)).any():
            raise ContractError(path, "layers['counts']", "raw counts per leaf must be non-negative integers")
        total = adata.obs.get("count_total")
        if total is None or not (np.asarray(total) >= counts.sum(axis=1) - 1e-6).all():
            raise ContractError(
                path, "obs['count_total']", "each leaf's total count, at least its layers['counts'] row sum, is needed"
            )
    if "tree_newick" not in adata.uns:
        raise ContractError(path, "uns['tree_newick']", "missing (the true lineage tree over the leaves)")
    tree_leaves = tree_leaf_names(adata.uns["tree_newick"], path)
    leaves = set(adata.obs_names)
    if len(leaves) < MIN_LEAVES:
        raise ContractError(
            path, "obs_names", f"{len(leaves)} leaves; lineage metrics compare quartets: {MIN_LEAVES} or more needed"
        )
    if tree_leaves != leaves:
        only_tree = sorted(tree_leaves - leaves)[:3]
        only_data = sorted(leaves - tree_leaves)[:3]
        raise ContractError(
            path,
            "uns['tree_newick']",
            f"leaves differ from obs_names (only in tree: {only_tree}; only in data: {only_data})",
        )


def check_output(adata, path: str) -> None:
    """An ``ok`` lineage output holds a tree over exactly its leaves."""
    if "tree_newick" not in adata.uns:
        raise ContractError(path, "uns['tree_newick']", "missing (a lineage method must return a tree)")
    if tree_leaf_names(adata.uns["tree_newick"], path) != set(adata.obs_names):
        raise ContractError(path, "uns['tree_newick']", "leaves differ from obs_names")


def validation_fact(prepared) -> str:
    if "validation" not in prepared.layers:
        why = prepared.uns.get("no_validation_replicate")
        return f"no ({why + '; ' if why else ''}supervised selection falls back to held-out leaves)"
    measured = prepared.obs.get("n_cells_validation")
    leaves = prepared.n_obs if measured is None else int((measured > 0).sum())
    return f"yes, {leaves} of {prepared.n_obs} leaves (layer validation)"


def dataset_facts(prepared, entry: dict) -> list[tuple[str, str]]:
    del entry  # nothing of a lineage entry beyond the prepared data is worth reporting
    return [
        ("leaves", f"{prepared.n_obs} (tree over the same leaves)"),
        ("features", str(prepared.n_vars)),
        ("replicate pair", "yes (train/test layers)" if "train" in prepared.layers else "no (one profile per leaf)"),
        ("validation replicate", validation_fact(prepared)),
        ("true tree", tree_fact(parse_newick(prepared.uns["tree_newick"]))),
    ]


def tree_fact(tree) -> str:
    """Whether the true tree is binary, else how much of it is resolved: what its scores can say."""
    if is_binary(tree):
        return "binary"
    resolved = resolved_quartets(tree) / math.comb(len(tree.leaf_names), 4)
    return (
        f"with polytomies (up to {max(len(kids) for kids in tree.children)} children), resolving {resolved:.1%} "
        "of the quartets"
    )
