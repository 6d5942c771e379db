"""What a job asks of the cluster, from the size of the data it reads.

A job of a 100,000-cell dataset needs gigabytes and an hour where a 700-cell one needs a few hundred MB
and a minute; one fixed request either starves the first or holds a large allocation for the second.
``config/resources.yaml`` gives, per track and rule, memory and runtime as base + slope × size, size in
the track's unit (leaves² for lineage jobs, whose distance matrices and attention grow so; cells for
representation jobs, whose genes preprocessing caps), fitted to measured peak RSS and wall time
(docs/performance.md). The size is read from the prepared file's header when the job is scheduled:
no data are loaded.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Mapping, Sequence

from celldag.jobs.joblog import ENDED_PATTERN
from celldag.records import read_record

UNITS = {
    "leaves_squared": lambda n_obs: n_obs**2,
    "cells": lambda n_obs: n_obs,
}


def prepared_rows(path: str) -> int:
    """Rows (leaves or cells) of a prepared h5ad, from its X header (dense dataset or sparse group).

    A file not made yet raises FileNotFoundError naming it: Snakemake then shows the resource as <TBD>
    and evaluates it again once the job's inputs exist (before it is submitted).
    """
    import h5py

    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "not made yet", path)
    with h5py.File(path, "r") as handle:
        matrix = handle["X"]
        shape = matrix.attrs["shape"] if isinstance(matrix, h5py.Group) else matrix.shape
    return int(shape[0])


def request(model: Mapping, rule: str, rows: int, attempt: int, repeats: int = 1) -> dict[str, int]:
    """{"mem_mb", "runtime"} (minutes) for ``rule`` on data of ``rows`` rows: memory for one pass, runtime
    for ``repeats`` of them (the seeds of a job, the outputs an evaluation scores), × ``attempt``."""
    size = UNITS[model["unit"]](rows)
    memory, runtime = model[rule]["mem_mb"], model[rule]["runtime"]
    return {
        "mem_mb": math.ceil((memory[0] + memory[1] * size) * attempt),
        "runtime": math.ceil((runtime[0] + runtime[1] * size * repeats) * attempt),
    }


def training_steps(params: Mapping, rows: int) -> int | None:
    """A bound on the optimiser steps one seed of a trained method takes, from its resolved params and rows.

    ``steps`` where the method trains by steps (CellTreeQM and its baselines), twice where ``selection`` may
    refit after choosing the step count on held-out leaves (``auto``, ``holdout_refit``); else ``max_epochs`` ×
    the minibatches of an epoch (``batch_size``, 128 where unset) × its phases (sciLaMA's ``stepwise`` mode with
    the gene VAE: cell, gene and joint, each up to the cap), ``max_epochs: null`` being scvi-tools' own rule,
    min(round(20,000 / cells · 400), 400). Early stopping usually ends far sooner: this is the cap.
    None: the params name neither (a lab's method that trains otherwise).
    """
    if isinstance(params.get("steps"), int):
        refits = 2 if params.get("selection") in ("auto", "holdout_refit") else 1
        return params["steps"] * refits
    if "max_epochs" not in params:
        return None
    epochs = params["max_epochs"]
    if epochs is None:
        epochs = min(round(20_000 / rows * 400), 400)
    phases = 3 if params.get("mode") == "stepwise" and params.get("use_gene_vae", False) else 1
    return int(epochs) * phases * math.ceil(rows / params.get("batch_size", 128))


def model_width(params: Mapping, width_params: Sequence[str]) -> int:
    """The widest layer a run's params name among ``width_params`` (an integer or a list of them); 0: none."""
    widths = []
    for name in width_params:
        value = params.get(name)
        widths += value if isinstance(value, list) else [value] if isinstance(value, int) else []
    return max(widths, default=0)


def gpu_request(model: Mapping, params: Mapping, rows: int, attempt: int, repeats: int = 1) -> dict[str, int]:
    """{"mem_mb", "runtime"} of a run_method job that trains on a GPU (celldag.plan.requests_gpu).

    Host memory: the track's run_method request (the data, the outputs) plus ``gpu_run_method.host_mb``, the
    CUDA libraries and context a process holds in host memory once it touches the GPU. Runtime: the track's
    base plus, per seed, ``training_steps`` × ``step_ms``, a bound on one step at the width ``width`` (measured
    on one H200, validation and checkpoints counted; docs/performance.md), scaled up for wider models
    (``model_width`` / ``width``) — a GPU step of these models costs per-step overhead and arithmetic in the
    width, not the rows a CPU request grows with. Both × ``attempt``."""
    on_gpu = model["gpu_run_method"]
    cpu = request(model, "run_method", rows, 1, repeats)
    steps = training_steps(params, rows)
    if steps is None:
        runtime = cpu["runtime"]
    else:
        widening = max(1.0, model_width(params, on_gpu["width_params"]) / on_gpu["width"])
        runtime = model["run_method"]["runtime"][0] + steps * on_gpu["step_ms"] * widening / 60_000 * repeats
    return {"mem_mb": math.ceil((cpu["mem_mb"] + on_gpu["host_mb"]) * attempt), "runtime": math.ceil(runtime * attempt)}


def largest(paths: Sequence[str]) -> int:
    """The most rows among prepared files (one per seed: a job is sized for its largest)."""
    return max(prepared_rows(path) for path in paths)


def measured(results: str, models: Mapping) -> list[dict]:
    """Every benchmarked job under ``results`` (Snakemake's benchmark TSVs of prepare_dataset, run_method and
    evaluate): its rule, dataset, rows, wall seconds and peak RSS, beside what ``models`` would request.

    The peak is exact where celldag measured it: the highest ``peak_rss_mb`` of a run_method job's run
    records, the ``job ended`` line of a prepare or evaluate job's log (``celldag.jobs.joblog``); else the
    benchmark's, which Snakemake samples (every 0.5 s for 15 s, then every 30 s) and so may miss a peak.
    """
    import csv
    import glob

    import h5py

    rows_of: dict[str, tuple[int, str]] = {}  # dataset → (rows, track), from any of its prepared files
    for path in sorted(glob.glob(os.path.join(results, "data", "*", "*", "seed*.h5ad"))):
        dataset = path.split(os.sep)[-3]
        if dataset not in rows_of:
            with h5py.File(path, "r") as handle:
                track = handle["uns"]["track"][()]
            rows_of[dataset] = (prepared_rows(path), track.decode() if isinstance(track, bytes) else str(track))

    def exact_peak(rule: str, benchmark: str, job: list[str]) -> float | None:
        if rule == "run_method":  # logs/run_method/{dataset}/{method}/{variant}/{key}[/seed{seed}].benchmark.tsv
            records = glob.glob(os.path.join(results, "runs", *job[:4], "seed*", "run.json"))
            peaks = [read_record(path).get("peak_rss_mb") for path in records]
            return max((p for p in peaks if p is not None), default=None)
        with open(benchmark.replace(".benchmark.tsv", ".log")) as handle:
            ended = ENDED_PATTERN.findall(handle.read())
        return float(ended[-1][1]) if ended else None

    found = []
    for rule in ("prepare_dataset", "run_method", "evaluate"):
        for path in sorted(glob.glob(os.path.join(results, "logs", rule, "**", "*benchmark.tsv"), recursive=True)):
            parts = os.path.relpath(path, os.path.join(results, "logs", rule)).split(os.sep)
            if rule == "evaluate":  # evaluate/{name}/{dataset}.benchmark.tsv
                parts = [parts[0], parts[1].removesuffix(".benchmark.tsv"), ""]
            dataset = parts[1] if rule == "evaluate" else parts[0]
            with open(path) as handle:
                row = next(csv.DictReader(handle, delimiter="\t"))
            rows, track = rows_of.get(dataset, (None, None))
            model = models.get(track, models["default"]) if track else None
            asked = request(model, rule, rows, 1)["mem_mb"] if model and rule in model and rows else None
            try:
                peak = exact_peak(rule, path, parts[:-1])
            except OSError:
                peak = None
            seed = parts[-1].removesuffix(".benchmark.tsv") if rule == "prepare_dataset" else None  # one job per seed
            found.append(
                {
                    "rule": rule,
                    "dataset": dataset,
                    "job": "/".join(parts[:-1]),
                    "seed": seed,
                    "rows": rows,
                    "wall_s": float(row["s"]),
                    "max_rss_mb": float(row["max_rss"]) if peak is None else peak,
                    "exact_peak": peak is not None,
                    "requested_mb": asked,
                }
            )
    return found
