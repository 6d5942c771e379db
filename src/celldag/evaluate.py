"""Score one run: method output + prepared dataset (the truth) → tidy score rows."""

from __future__ import annotations

import numpy as np

from celldag import contracts, io

# metric id → higher_is_better, per track
LINEAGE_METRICS = {"rf": False, "quartet_dist": False, "qdist_sampled": False}
TRACK_METRICS = {"lineage": LINEAGE_METRICS}


def lineage_scores(truth_newick: str, output, seed: int, n_quartets: int) -> dict[str, float]:
    from celldag.lineage.metrics import qdist_sampled, quartet_distance, robinson_foulds
    from celldag.lineage.reconstruct import euclidean_distances
    from celldag.lineage.tree import parse_newick, path_distances

    truth = parse_newick(truth_newick)
    estimate = parse_newick(output.uns["tree_newick"])
    names = list(output.obs_names)
    if "X_emb" in output.obsm:  # the paper's QDist reads the method's own distances
        estimated_distances = euclidean_distances(np.asarray(output.obsm["X_emb"]))
    else:
        estimated_distances = path_distances(estimate, names, topology_only=True)
    reference_distances = path_distances(truth, names, topology_only=True)
    return {
        "rf": robinson_foulds(estimate, truth).normalized,
        "quartet_dist": quartet_distance(estimate, truth),
        "qdist_sampled": qdist_sampled(estimated_distances, reference_distances, n_quartets, np.random.default_rng(seed)),
    }


def score_run(*, prepared_path: str, output_path: str, scores_path: str, track: str, n_quartets: int) -> None:
    import pandas as pd

    prepared = io.read_h5ad(prepared_path, contracts.check_prepared_dataset)
    output = io.read_h5ad(output_path, contracts.check_method_output, track=track)
    uns = output.uns
    if prepared.uns["dataset_id"] != uns["dataset_id"]:
        raise contracts.ContractError(output_path, "uns['dataset_id']", f"{uns['dataset_id']!r} does not match {prepared_path}")
    metrics = TRACK_METRICS[track]
    status = uns["status"]
    if status == "ok":
        values = lineage_scores(prepared.uns["tree_newick"], output, int(uns["seed"]), n_quartets)
    else:
        values = dict.fromkeys(metrics, float("nan"))
    table = pd.DataFrame(
        {
            "dataset": uns["dataset_id"], "track": track, "method": uns["method_id"], "variant": uns["variant"],
            "seed": int(uns["seed"]), "metric": list(metrics), "value": [float(values[m]) for m in metrics],
            "higher_is_better": [metrics[m] for m in metrics], "status": status,
        }  # fmt: skip
    )
    contracts.check_scores(table, scores_path)
    io.write_parquet(table, scores_path)
