"""Chained tracks: a track whose methods run on the outputs of another track's runs (``Track.upstream``).

Annotation chains on representation: every cell embedding a representation run wrote is the input of
every selected classifier, with no retraining. Per dataset and seed the chained track's ``chain_task``
builds its task once from the upstream prepared dataset (labels, splits, groups: the same for every
upstream run, so all are scored on the same cells and groups); per upstream run its ``chain_input``
joins that task with the run's output into the prepared input its methods get, which the runner then
treats like any prepared dataset (contract, checksums, record, audit).

The input records which run it came from (``uns['upstream']``, ``upstream_status``); a run that is not
``ok`` gives its chained runs status ``not_applicable`` with its reason (``runner.unmet_upstream``).
"""

from __future__ import annotations

from celldag import artifacts, contracts
from celldag.records import read_record
from celldag.tracks import Track


def write_tasks(
    *, prepared_paths: list[str], task_paths: list[str], track_id: str, track: Track, upstream: Track, task: dict
) -> None:
    """The chained track's task of each seed, from the upstream prepared dataset of that seed."""
    for prepared_path, task_path in zip(prepared_paths, task_paths, strict=True):
        prepared = artifacts.read_h5ad(
            prepared_path, contracts.check_prepared_dataset, track_id=track.upstream, track=upstream
        )
        built = track.call("chain_task", prepared, task, int(prepared.uns["seed"]))
        contracts.check_prepared_dataset(built, task_path, track_id=track_id, track=track)
        artifacts.write_h5ad(built, task_path)


def run_chained(
    *,
    track_id: str,
    track: Track,
    upstream: Track,
    dataset_id: str,
    dataset_entry: dict,
    methods: dict[str, dict],
    seeds: list[int],
    task_paths: list[str],
    upstream_outputs: list[str],
    upstream_records: list[str],
    input_paths: list[str],
    output_paths: list[str],
    record_paths: list[str],
    threads: int = 1,
) -> None:
    """Every method of ``methods`` on the output of one upstream run, each seed in turn.

    ``output_paths`` / ``record_paths`` hold one path per (seed, method), seeds outer, methods in the order
    of ``methods``. A method's rows are named by the run it chains on: its variant is that run's
    ``method/variant`` (``plan.ChainedRun.label``).
    """
    from celldag.jobs.runner import run_method

    per_seed = len(methods)
    for index, seed in enumerate(seeds):
        task = artifacts.read_h5ad(task_paths[index], contracts.check_prepared_dataset, track_id=track_id, track=track)
        output = artifacts.read_h5ad(upstream_outputs[index], contracts.check_method_output, track=upstream)
        record = read_record(upstream_records[index])
        chained_input = track.call("chain_input", task, output, record)
        label = f"{output.uns['method_id']}/{output.uns['variant']}"
        chained_input.uns.update(
            upstream=label,
            upstream_status=str(output.uns["status"]),
            upstream_reason=str(output.uns.get("status_reason", "")),
        )
        contracts.check_prepared_dataset(chained_input, input_paths[index], track_id=track_id, track=track)
        artifacts.write_h5ad(chained_input, input_paths[index])
        for offset, (method_id, entry) in enumerate(methods.items()):
            path = index * per_seed + offset
            run_method(
                prepared_path=input_paths[index],
                output_path=output_paths[path],
                record_path=record_paths[path],
                dataset_id=dataset_id,
                dataset_entry=dataset_entry,
                method_id=method_id,
                method_entry=entry | {"variants": {label: {}}},
                variant=label,
                seed=seed,
                track=track,
                threads=threads,
            )
