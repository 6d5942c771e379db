"""Scores of the lineage track: every run against the true tree of its seed's prepared dataset.

Every ``ok`` run gets RF, the exact quartet distance and QDist on a seeded quartet sample; against a
reference with polytomies (a reconstructed barcode tree) also the scores over what that reference
resolves (``polytomy_scores``); runs trained under a weak supervision setting (recorded by the method in
``uns["supervision"]``) also get the metrics that split quartets by what the setting revealed. The
leaderboard adds the Δ against the baseline method (``celldag.results.leaderboard``).
"""

from __future__ import annotations

import math

import numpy as np

from celldag.contracts import SCORE_NOTE
from celldag.lineage.metrics import (
    qdist_on_quartets,
    quartet_distance,
    robinson_foulds,
    sample_quartets,
    split_compatibility,
    split_recovery,
)
from celldag.lineage.quartets import is_binary, quartet_counts
from celldag.lineage.reconstruct import euclidean_distances
from celldag.lineage.supervision import clade_labels, known_quartets
from celldag.lineage.track import scored_features, tree_fact
from celldag.lineage.tree import parse_newick, path_distances, prune
from celldag.tracks import ScoringContext, relative_reduction


def score_seed(prepared, outputs: list, context: ScoringContext) -> list[dict[str, float]]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``)."""
    n_quartets = context.evaluation["qdist_quartets"]
    return [
        run_scores(prepared, output, context.seed, n_quartets) if output.uns["status"] == "ok" else {}
        for output in outputs
    ]


def run_scores(prepared, output, seed: int, n_quartets: int) -> dict[str, float | str]:
    truth = parse_newick(prepared.uns["tree_newick"])
    estimate = parse_newick(output.uns["tree_newick"])
    # leaves in name order: the sampled quartets, and so every score, do not depend on the row order
    order = np.argsort(np.asarray(output.obs_names), kind="stable")
    names = list(output.obs_names[order])
    if "X_emb" in output.obsm:  # the paper's QDist reads the method's own distances
        estimated = euclidean_distances(np.asarray(output.obsm["X_emb"])[order])
    else:
        estimated = path_distances(estimate, names, topology_only=True)
    reference = path_distances(truth, names, topology_only=True)
    quartets = QuartetSample(len(names), n_quartets, np.random.default_rng(seed))
    scores = {"rf": robinson_foulds(estimate, truth).normalized}
    if is_binary(truth):
        scores["quartet_dist"] = quartet_distance(estimate, truth)
    else:
        scores |= polytomy_scores(truth, estimate)
    scores["qdist_sampled"] = quartets.qdist(estimated, reference)
    supervision = dict(output.uns.get("supervision", {}))
    if supervision.get("setting") == "high_level_partition":
        raw = euclidean_distances(scored_features(prepared)[order])  # output rows are the prepared rows
        scores |= partition_scores(truth, names, int(supervision["level"]), estimated, reference, raw, quartets)
    elif supervision.get("setting") == "partially_labelled":
        known = np.isin(names, list(supervision["known_leaves"]))
        scores |= partial_label_scores(truth, estimate, names, known, estimated, reference, quartets)
    finite: dict[str, float | str] = {metric: value for metric, value in scores.items() if math.isfinite(value)}
    if not is_binary(truth):  # the leaderboard prints it under the dataset: what its numbers can mean
        finite[SCORE_NOTE] = reconstructed_reference_note(truth)
    return finite


def reconstructed_reference_note(truth) -> str:
    """What a reference with polytomies is, and which of its scores to read (docs/metrics.md)."""
    return (
        f"The reference tree is {tree_fact(truth)}: a reconstruction such as a barcode tree, not the true "
        "lineage. Its scores measure agreement with it; RF and quartet_dist count what it leaves unresolved "
        "as differences, resolved_quartet_dist and split_recovery read only what it resolves"
    )


def polytomy_scores(truth, estimate) -> dict[str, float]:
    """``quartet_dist`` and the scores over what a reference with polytomies resolves (docs/metrics.md).

    One exact count of the quartet categories serves every quartet score: ``quartet_dist`` is the value
    ``quartet_distance(estimate, truth)`` gives, from the same integers. A star reference resolves
    nothing: its resolved-quartet and split scores are nan, which ``run_scores`` leaves out.
    """
    counts = quartet_counts(truth, estimate)
    return {
        "quartet_dist": counts.distance,
        "resolved_quartet_dist": counts.resolved_distance,
        "resolved_quartet_contradicted": counts.contradicted,
        "split_recovery": split_recovery(truth, estimate),
        "split_compatibility": split_compatibility(truth, estimate),
    }


class QuartetSample:
    """One seeded sample of quartets (all of them when there are few), shared by every QDist of a run."""

    def __init__(self, n_leaves: int, n_quartets: int, rng: np.random.Generator):
        self.quartets = sample_quartets(n_leaves, n_quartets, rng)

    def qdist(self, estimated: np.ndarray, reference: np.ndarray, subset: np.ndarray | None = None) -> float:
        quartets = self.quartets if subset is None else self.quartets[subset]
        return qdist_on_quartets(estimated, reference, quartets) if len(quartets) else math.nan


def partition_scores(truth, names, level, estimated, reference, raw, quartets: QuartetSample) -> dict[str, float]:
    """K-/U-QDist: QDist on quartets whose topology the level-L partition reveals / does not reveal.

    The reductions compare with the raw-feature distances on the same quartets — nj_raw's QDist there,
    since QDist reads only the distance matrix.
    """
    known = known_quartets(quartets.quartets, clade_labels(truth, names, level))
    scores = {}
    for name, subset in (("k_qdist", known), ("u_qdist", ~known)):
        scores[name] = quartets.qdist(estimated, reference, subset)
        scores[f"{name}_reduction_vs_raw"] = relative_reduction(quartets.qdist(raw, reference, subset), scores[name])
    return scores


def partial_label_scores(
    truth, estimate, names, known, estimated, reference, quartets: QuartetSample
) -> dict[str, float]:
    """QDist by the number of known leaves in a quartet, and RF on the subtree of the unknown leaves."""
    known_count = known[quartets.quartets].sum(axis=1)
    scores = {
        "qdist_known4": quartets.qdist(estimated, reference, known_count == 4),
        "qdist_known1to3": quartets.qdist(estimated, reference, (known_count >= 1) & (known_count <= 3)),
        "qdist_known0": quartets.qdist(estimated, reference, known_count == 0),
    }
    unknown = [name for name, is_known in zip(names, known) if not is_known]
    if len(unknown) >= 4:
        scores["rf_unknown"] = robinson_foulds(prune(estimate, unknown), prune(truth, unknown)).normalized
    return scores
