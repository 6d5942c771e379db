"""Score every run on one dataset (the ``evaluate`` rule): method outputs + prepared datasets → one tidy table.

Each output is scored against the prepared file of its own seed by its track's scorer; one process
scores all of them, so the metric libraries' start-up (scib-metrics compiles for a minute) is paid
once per dataset. Runs that are not ``ok`` get NaN rows for the track's core metrics. Besides its metrics a
scorer may return the facts ``contracts.SCORE_FACTS`` names (e.g. the cells of a scoring subsample) and a text
``contracts.SCORE_NOTE``: they become columns of the run's rows, and tables of scorers that return none have no
such columns. Metrics a scorer could not compute for an ok run (``contracts.SCORE_FAILED``: an annotation procedure
that failed) become rows of status ``failed``, value NaN and their reason in ``contracts.SCORE_REASON``.
"""

from __future__ import annotations

import hashlib
import json
import math

from celldag import artifacts, contracts
from celldag.plan import checksums_path
from celldag.tracks import ScoringContext, Track


def score_dataset(
    *,
    prepared_paths: list[str],
    output_paths: list[str],
    table_paths: list[str],
    scores_path: str,
    track_id: str,
    track: Track,
    dataset: dict,
    evaluation: dict,
    chained_input_paths: list[str] = (),
) -> None:
    """``chained_input_paths``: a chained track's inputs, every seed's (each scorer call gets those of its seed, by
    their ``uns['seed']``: ``ScoringContext.chained_inputs``)."""
    import pandas as pd

    prepared_of = {}
    for path in prepared_paths:
        prepared = artifacts.read_h5ad(path, contracts.check_prepared_dataset, track_id=track_id, track=track)
        prepared_of[int(prepared.uns["seed"])] = (path, prepared)
    outputs = [artifacts.read_h5ad(path, contracts.check_method_output, track=track) for path in output_paths]
    for path, output in zip(output_paths, outputs):
        seed = int(output.uns["seed"])
        if seed not in prepared_of:
            raise contracts.ContractError(
                path, "uns['seed']", f"no prepared dataset of seed {seed} among {prepared_paths}"
            )
        prepared_path, prepared = prepared_of[seed]
        if prepared.uns["dataset_id"] != output.uns["dataset_id"]:
            raise contracts.ContractError(
                path, "uns['dataset_id']", f"{output.uns['dataset_id']!r} does not match {prepared_path}"
            )

    inputs_of: dict[int, list] = {}
    for path in chained_input_paths:
        chained_input = artifacts.read_h5ad(path, contracts.check_prepared_dataset, track_id=track_id, track=track)
        inputs_of.setdefault(int(chained_input.uns["seed"]), []).append(chained_input)
    values: list[dict[str, float]] = [{} for _ in outputs]
    facts: list[dict[str, int | str]] = [{} for _ in outputs]  # contracts.SCORE_FACTS / SCORE_NOTE a scorer returned
    failed: list[dict[str, str]] = [{} for _ in outputs]  # contracts.SCORE_FAILED: metric → why it was not computed
    for seed, (_, prepared) in sorted(prepared_of.items()):
        of_seed = [i for i, output in enumerate(outputs) if int(output.uns["seed"]) == seed]
        context = ScoringContext(seed, dataset, evaluation, tuple(table_paths), tuple(inputs_of.get(seed, [])))
        scored = track.call("scorer", prepared, [outputs[i] for i in of_seed], context)
        for i, scores in zip(of_seed, scored):
            facts[i] = {name: int(value) for name, value in scores.items() if name in contracts.SCORE_FACTS}
            if contracts.SCORE_NOTE in scores:
                facts[i][contracts.SCORE_NOTE] = str(scores[contracts.SCORE_NOTE])
            failed[i] = dict(scores.get(contracts.SCORE_FAILED) or {})
            scores = {
                metric: value
                for metric, value in scores.items()
                if metric not in contracts.SCORE_FACTS and metric not in (contracts.SCORE_NOTE, contracts.SCORE_FAILED)
            }
            undeclared = sorted((set(scores) | set(failed[i])) - set(track.metrics))
            if undeclared:  # a bug of the track, caught by tests/unit/workflow/test_tracks.py before it reaches a job
                raise RuntimeError(f"{track.scorer} returned metrics its track does not declare: {undeclared}")
            values[i] = {metric: value for metric, value in scores.items() if math.isfinite(value)}

    frames = []
    for output, scores, run_facts, run_failed in zip(outputs, values, facts, failed):
        uns = output.uns
        scores = (scores or dict.fromkeys(track.core_metrics, math.nan)) if not run_failed else scores
        frame = pd.DataFrame(
            {
                "dataset": uns["dataset_id"],
                "track": track_id,
                "method": uns["method_id"],
                "variant": uns["variant"],
                "seed": int(uns["seed"]),
                "metric": list(scores) + list(run_failed),
                "value": [float(v) for v in scores.values()] + [math.nan] * len(run_failed),
                "higher_is_better": [track.higher_is_better(m) for m in [*scores, *run_failed]],
                "status": [uns["status"]] * len(scores) + ["failed"] * len(run_failed),
                **run_facts,
            }
        )
        if run_failed:
            frame[contracts.SCORE_REASON] = [None] * len(scores) + list(run_failed.values())
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    contracts.check_scores(table, scores_path)
    write_scores(table, scores_path)


def write_scores(table, scores_path: str) -> None:
    """The scores table and, beside it, its sha256 and one digest per row (``celldag audit`` names an edited
    score by its run and metric from them).

    The checksums are written before the table is moved into place: a job killed in between leaves no
    table, so Snakemake reruns it, and never a table whose checksums are stale.
    """
    with artifacts.atomic_path(scores_path) as tmp:
        table.to_parquet(tmp, index=False)
        artifacts.write_json(
            {"sha256": artifacts.sha256_file(tmp), "rows": score_digests(table)}, checksums_path(scores_path)
        )


def score_digests(table) -> dict[str, dict[str, str]]:
    """{run "dataset/method/variant/seed": {metric: sha256 of the row}}; floats by their exact hex form."""
    digests: dict[str, dict[str, str]] = {}
    for row in table.to_dict("records"):
        canonical = json.dumps({column: _exact(value) for column, value in row.items()}, sort_keys=True)
        run = f"{row['dataset']}/{row['method']}/{row['variant']}/{row['seed']}"
        digests.setdefault(run, {})[row["metric"]] = hashlib.sha256(canonical.encode()).hexdigest()
    return digests


def _exact(value):
    if isinstance(value, float):  # every bit: an edit in the 17th digit changes the digest too
        return value.hex()
    return value.item() if hasattr(value, "item") else value
