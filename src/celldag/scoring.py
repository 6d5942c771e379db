"""Score every run on one dataset (the ``evaluate`` rule): method outputs + prepared datasets → one tidy table.

Each output is scored against the prepared file of its own seed by its track's scorer; one process
scores all of them, so the metric libraries' start-up (scib-metrics compiles for a minute) is paid
once per dataset. Runs that are not ``ok`` get NaN rows for the track's core metrics.
"""

from __future__ import annotations

import math

from celldag import contracts, artifacts
from celldag.tracks import ScoringContext, Track


def relative_reduction(baseline: float, value: float) -> float:
    """(baseline − value) / baseline: 1 is perfect, 0 no better than the baseline; nan if baseline is 0."""
    return (baseline - value) / baseline if baseline > 0 else math.nan


def score_dataset(*, prepared_paths: list[str], output_paths: list[str], table_paths: list[str], scores_path: str,
                  track_id: str, track: Track, dataset: dict, evaluation: dict) -> None:  # fmt: skip
    import pandas as pd

    prepared_of = {}
    for path in prepared_paths:
        prepared = artifacts.read_h5ad(path, contracts.check_prepared_dataset, track_id=track_id, track=track)
        prepared_of[int(prepared.uns["seed"])] = (path, prepared)
    outputs = [artifacts.read_h5ad(path, contracts.check_method_output, track=track) for path in output_paths]
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
        context = ScoringContext(seed, dataset, evaluation, tuple(table_paths))
        scored = track.call("scorer", prepared, [outputs[i] for i in of_seed], context)
        for i, scores in zip(of_seed, scored):
            undeclared = sorted(set(scores) - set(track.metrics))
            if undeclared:  # a bug of the track, caught by tests/test_tracks.py before it reaches a job
                raise RuntimeError(f"{track.scorer} returned metrics its track does not declare: {undeclared}")
            values[i] = {metric: value for metric, value in scores.items() if math.isfinite(value)}

    frames = []
    for output, scores in zip(outputs, values):
        uns = output.uns
        scores = scores or dict.fromkeys(track.core_metrics, math.nan)
        frames.append(pd.DataFrame({
            "dataset": uns["dataset_id"], "track": track_id, "method": uns["method_id"], "variant": uns["variant"],
            "seed": int(uns["seed"]), "metric": list(scores), "value": [float(v) for v in scores.values()],
            "higher_is_better": [track.higher_is_better(m) for m in scores], "status": uns["status"],
        }))  # fmt: skip
    table = pd.concat(frames, ignore_index=True)
    contracts.check_scores(table, scores_path)
    artifacts.write_parquet(table, scores_path)
