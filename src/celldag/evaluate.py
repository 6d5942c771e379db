"""Score the runs of one (dataset, seed): method outputs + prepared dataset (the truth) → tidy score rows.

Every lineage run gets the core metrics; runs trained under a weak supervision setting also get the
metrics that split quartets by what the setting revealed (the method records its setting in
``uns["supervision"]``). Δ values against the baseline method are added later, by the aggregation.
Representation runs are scored together (``celldag.representation.scoring``).
"""

from __future__ import annotations

import math

import numpy as np

from celldag import contracts, io

# metric id → higher_is_better; the order is the leaderboard's column order
LINEAGE_METRIC_GROUPS = {
    "all runs": {"rf": False, "quartet_dist": False, "qdist_sampled": False,
                 "delta_rf": True, "delta_quartet_dist": True, "delta_qdist_sampled": True},
    "high-level partition": {"k_qdist": False, "u_qdist": False, "delta_k_qdist": True, "delta_u_qdist": True},
    "partially labelled": {"qdist_known4": False, "qdist_known1to3": False, "qdist_known0": False,
                           "rf_unknown": False},
}  # fmt: skip
LINEAGE_CORE_METRICS = ("rf", "quartet_dist", "qdist_sampled")  # reported (NaN) even for failed runs


def _representation_groups() -> dict[str, dict[str, bool]]:
    from celldag.representation.scoring import METRIC_GROUPS

    return METRIC_GROUPS


def metric_groups(track: str) -> dict[str, dict[str, bool]]:
    """Per track: group name → {metric: higher_is_better}; the first group is the track's main table."""
    return LINEAGE_METRIC_GROUPS if track == "lineage" else _representation_groups()


def core_metrics(track: str) -> tuple[str, ...]:
    if track == "lineage":
        return LINEAGE_CORE_METRICS
    from celldag.representation.scoring import CORE_METRICS

    return CORE_METRICS


def evaluation_features(prepared) -> np.ndarray:
    """What methods are scored on: the test replicate when there is one (see runner.method_input)."""
    return np.asarray(prepared.layers["test"] if "test" in prepared.layers else prepared.X, dtype=np.float64)


def relative_reduction(baseline: float, value: float) -> float:
    """Δ = (baseline − value) / baseline: 1 is perfect, 0 no better than the baseline; nan if baseline is 0."""
    return (baseline - value) / baseline if baseline > 0 else math.nan


def lineage_scores(prepared, output, seed: int, n_quartets: int) -> dict[str, float]:
    from celldag.lineage.metrics import quartet_distance, robinson_foulds
    from celldag.lineage.reconstruct import euclidean_distances
    from celldag.lineage.tree import parse_newick, path_distances

    truth = parse_newick(prepared.uns["tree_newick"])
    estimate = parse_newick(output.uns["tree_newick"])
    names = list(output.obs_names)
    if "X_emb" in output.obsm:  # the paper's QDist reads the method's own distances
        estimated = euclidean_distances(np.asarray(output.obsm["X_emb"]))
    else:
        estimated = path_distances(estimate, names, topology_only=True)
    reference = path_distances(truth, names, topology_only=True)
    quartets = QuartetSample(len(names), n_quartets, np.random.default_rng(seed))
    scores = {
        "rf": robinson_foulds(estimate, truth).normalized,
        "quartet_dist": quartet_distance(estimate, truth),
        "qdist_sampled": quartets.qdist(estimated, reference),
    }
    supervision = dict(output.uns.get("supervision", {}))
    if supervision.get("setting") == "high_level_partition":
        raw = euclidean_distances(evaluation_features(prepared))
        scores |= partition_scores(truth, names, int(supervision["level"]), estimated, reference, raw, quartets)
    elif supervision.get("setting") == "partially_labelled":
        known = np.isin(names, list(supervision["known_leaves"]))
        scores |= partial_label_scores(truth, estimate, names, known, estimated, reference, quartets)
    return {metric: value for metric, value in scores.items() if math.isfinite(value)}


class QuartetSample:
    """One seeded sample of quartets (all of them when there are few), shared by every QDist of a run."""

    def __init__(self, n_leaves: int, n_quartets: int, rng: np.random.Generator):
        from celldag.lineage.metrics import sample_quartets

        self.quartets = sample_quartets(n_leaves, n_quartets, rng)

    def qdist(self, estimated: np.ndarray, reference: np.ndarray, subset: np.ndarray | None = None) -> float:
        from celldag.lineage.metrics import qdist_on_quartets

        quartets = self.quartets if subset is None else self.quartets[subset]
        return qdist_on_quartets(estimated, reference, quartets) if len(quartets) else math.nan


def partition_scores(truth, names, level, estimated, reference, raw, quartets: QuartetSample) -> dict[str, float]:
    """K-/U-QDist: QDist on quartets whose topology the level-L partition reveals / does not reveal.

    The Δ values compare with the raw-feature distances on the same quartets — nj_raw's QDist there,
    since QDist reads only the distance matrix.
    """
    from celldag.lineage.supervision import clade_labels, known_quartets

    known = known_quartets(quartets.quartets, clade_labels(truth, names, level))
    scores = {}
    for name, subset in (("k_qdist", known), ("u_qdist", ~known)):
        scores[name] = quartets.qdist(estimated, reference, subset)
        scores[f"delta_{name}"] = relative_reduction(quartets.qdist(raw, reference, subset), scores[name])
    return scores


def partial_label_scores(truth, estimate, names, known, estimated, reference, quartets: QuartetSample) -> dict[str, float]:
    """QDist by the number of known leaves in a quartet, and RF on the subtree of the unknown leaves."""
    from celldag.lineage.metrics import robinson_foulds
    from celldag.lineage.tree import prune

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


def score_dataset(*, prepared_paths: list[str], output_paths: list[str], table_paths: list[str], scores_path: str,
                  track: str, n_quartets: int, markers: dict) -> None:  # fmt: skip
    """Score every run output on one dataset into one tidy table (runs that are not ok get NaN core rows).

    Each output is scored against the prepared file of its own seed; one process scores all of them,
    so the metric libraries' start-up is paid once per dataset.
    """
    import pandas as pd

    prepared_of = {}
    for path in prepared_paths:
        prepared = io.read_h5ad(path, contracts.check_prepared_dataset)
        prepared_of[int(prepared.uns["seed"])] = (path, prepared)
    outputs = [io.read_h5ad(path, contracts.check_method_output, track=track) for path in output_paths]
    for path, output in zip(output_paths, outputs):
        seed = int(output.uns["seed"])
        if seed not in prepared_of:
            raise contracts.ContractError(path, "uns['seed']", f"no prepared dataset of seed {seed} among {prepared_paths}")
        prepared_path, prepared = prepared_of[seed]
        if prepared.uns["dataset_id"] != output.uns["dataset_id"]:
            raise contracts.ContractError(path, "uns['dataset_id']", f"{output.uns['dataset_id']!r} does not match {prepared_path}")

    values: list[dict[str, float]] = [{} for _ in outputs]
    for seed, (_, prepared) in sorted(prepared_of.items()):
        of_seed = [i for i, output in enumerate(outputs) if int(output.uns["seed"]) == seed]
        if track == "lineage":
            for i in of_seed:
                if outputs[i].uns["status"] == "ok":
                    values[i] = lineage_scores(prepared, outputs[i], seed, n_quartets)
        else:
            from celldag.representation.scoring import representation_scores

            scored = representation_scores(prepared, [outputs[i] for i in of_seed], table_paths, markers)
            for i, scores in zip(of_seed, scored):
                values[i] = scores

    higher = {metric: h for group in metric_groups(track).values() for metric, h in group.items()}
    frames = []
    for output, scores in zip(outputs, values):
        uns = output.uns
        scores = scores or dict.fromkeys(core_metrics(track), math.nan)
        frames.append(pd.DataFrame({
            "dataset": uns["dataset_id"], "track": track, "method": uns["method_id"], "variant": uns["variant"],
            "seed": int(uns["seed"]), "metric": list(scores), "value": [float(v) for v in scores.values()],
            "higher_is_better": [higher[m] for m in scores], "status": uns["status"],
        }))  # fmt: skip
    table = pd.concat(frames, ignore_index=True)
    contracts.check_scores(table, scores_path)
    io.write_parquet(table, scores_path)
