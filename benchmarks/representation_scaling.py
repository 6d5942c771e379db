"""Representation-track speed against named peers, written to results/bench/representation_scaling.json.

  epochs   one training epoch of sciLaMA (celldag's ``fit_scilama``, joint phase: cell VAE + gene VAE over
           all genes every step) vs one of scVI (scvi-tools, through celldag's ``scvi_baseline.run``),
           same cells, genes, latent size (20), batch size (128) and 80 % training split; synthetic
           negative-binomial counts in three batches (scVI reads them, sciLaMA their scaled log1p).
           Seconds per epoch after a warm-up epoch, peak RSS of the child process.
  scoring  celldag's scoring job (``celldag.representation.scoring.score_seed``: scib-metrics'
           Benchmarker + Leiden NMI/ARI + batch ASW) on one embedding: the first call of a process
           with an empty JAX compilation cache (cold), a second embedding in the same process (warm),
           and the first call of a new process once that cache is filled (warm cache). On scanpy's
           pbmc68k_batched (700 cells: the evaluate job of the default config) and synthetic cells.
  prepare  ``celldag.representation.preprocess.preprocess`` (what every representation loader calls)
           on a sparse counts matrix, in a child process: time, peak RSS, the matrix types step by step.
  subsample  scores on a stratified subsample (``evaluation.score_cells``)  vs  scores of every cell, on
           the builtin synthetic_20k (PCA and Harmony through celldag's runner): every aggregate's
           difference, against the target of 0.01.

Run: .venv/bin/python benchmarks/representation_scaling.py [--quick] [--only epochs scoring prepare subsample]
(about 6 min on 2 idle cores; --quick shrinks every size to check that the script works; --only reruns
some sections and keeps the others' last results).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import ROOT, Section, Table, run_child, run_params, run_sections, series, target

SECTIONS = ("epochs", "scoring", "prepare", "subsample")
N_BATCHES, N_TYPES, LATENT, BATCH_SIZE = 3, 10, 20, 128
GENE_TABLE_DIM = 384  # go_text's width (all-MiniLM-L6-v2)


def child(kind: str, spec: dict) -> dict:
    """Run ``kind`` with ``spec`` in a fresh process (this script with --child); its result plus seconds and
    peak RSS MB of the whole child process."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as result:
        command = [str(Path(__file__).resolve()), "--child", kind, json.dumps(spec), result.name]
        seconds, peak_mb, code, output = run_child([sys.executable, *command], cwd=ROOT)
        if code != 0:
            raise RuntimeError(f"{kind} {spec} failed (exit {code}):\n{output}")
        facts = json.loads(result.read() or "{}")
    return facts | {"process_seconds": seconds, "peak_mb": peak_mb}


# ---------------------------------------------------------------- synthetic cells


def synthetic_counts(n_cells: int, n_genes: int, seed: int = 0):
    """(CSR int32 counts, cell-type codes, batch codes): negative binomial (dispersion 2) around per-type gene
    profiles, lognormal library sizes and a per-(batch, gene) multiplicative effect; generated in blocks."""
    from scipy import sparse

    rng = np.random.default_rng(seed)
    types = rng.integers(N_TYPES, size=n_cells)
    batch = rng.integers(N_BATCHES, size=n_cells)
    base = rng.gamma(0.6, 1.0, size=n_genes)
    profiles = base * rng.lognormal(0.0, 0.8, size=(N_TYPES, n_genes))
    profiles /= profiles.sum(axis=1, keepdims=True)
    batch_effect = rng.lognormal(0.0, 0.3, size=(N_BATCHES, n_genes))
    library = rng.lognormal(np.log(2500), 0.4, size=n_cells)
    blocks = []
    for start in range(0, n_cells, 5000):
        rows = slice(start, min(start + 5000, n_cells))
        mean = library[rows, None] * profiles[types[rows]] * batch_effect[batch[rows]]
        counts = rng.poisson(rng.gamma(2.0, mean / 2.0)).astype(np.int32)
        blocks.append(sparse.csr_matrix(counts))
    return sparse.vstack(blocks, format="csr"), types, batch


def scaled_lognorm(counts) -> np.ndarray:
    """celldag's sciLaMA input: normalize_total(1e4), log1p, per-gene z-score clipped at ±10 (float32)."""
    totals = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
    x = np.log1p(counts.multiply(1e4 / totals[:, None]).toarray().astype(np.float32))
    x -= x.mean(axis=0)
    x /= np.maximum(x.std(axis=0, ddof=1), 1e-12)
    return np.clip(x, -10, 10, out=x)


def split_mask(n_cells: int) -> np.ndarray:
    return np.random.default_rng(1).random(n_cells) >= 0.2  # 80 % training cells


# ---------------------------------------------------------------- epochs: sciLaMA vs scVI


class StopTiming(Exception):
    """Raised from inside a training loop once enough steps are timed."""


def per_epoch(
    starts: list[float],
    ends: dict[int, float],
    steps_per_epoch: int,
    epochs: int,
    max_steps: int,
    validation_seconds: float,
) -> tuple[float, str]:
    """Seconds per epoch from step start times: whole epochs 1..epochs (epoch 0 is the warm-up), or, when
    the steps were capped, the mean step time after the first tenth × steps per epoch + one validation."""
    if len(starts) > steps_per_epoch * (epochs + 1) - 1 and epochs in ends:
        first = ends[0] if 0 in ends else starts[steps_per_epoch]  # the warm-up epoch's end, or the next step
        return (ends[epochs] - first) / epochs, f"{epochs} epochs timed"
    skip = max(len(starts) // 10, 1)
    step = (starts[-1] - starts[skip]) / (len(starts) - 1 - skip)
    return step * steps_per_epoch + validation_seconds, (
        f"extrapolated from {len(starts) - 1 - skip} steps after {skip} warm-up steps"
    )


def scilama_epoch(spec: dict) -> dict:
    import torch

    from celldag.methods.scilama import train as scilama_train

    counts, _, batch = synthetic_counts(spec["cells"], spec["genes"])
    expression = scaled_lognorm(counts)
    del counts
    train_mask = split_mask(spec["cells"])
    gene_table = np.random.default_rng(2).normal(size=(spec["genes"], GENE_TABLE_DIM)).astype(np.float32)
    epochs, max_steps = spec["epochs"], spec["max_steps"]
    params = run_params("scilama") | {
        "mode": "direct",
        "kl_warmup_epochs": 0,
        "kl_ramp_epochs": 1,
        "max_epochs": 1 + epochs,
        "patience": 1000,
        "checkpoint_every": 1000,
        "device": "cpu",
        "latent_dim": LATENT,
        "batch_size": BATCH_SIZE,
    }
    starts: list[float] = []
    ends: dict[int, float] = {}
    held = {}
    original = scilama_train._phase_loss

    def timed_phase_loss(phase, model, x, covariates, gamma):
        loss_fn = original(phase, model, x, covariates, gamma)
        held.update(model=model, loss_fn=loss_fn)

        def loss(idx, beta):
            if not model.training:  # the epoch's validation pass ends it
                value = loss_fn(idx, beta)
                ends[len(starts) // steps_per_epoch - 1] = time.perf_counter()
                return value
            if len(starts) >= max_steps:
                raise StopTiming
            starts.append(time.perf_counter())
            return loss_fn(idx, beta)

        return loss

    steps_per_epoch = math.ceil(int(train_mask.sum()) / BATCH_SIZE)
    scilama_train._phase_loss = timed_phase_loss
    try:
        scilama_train.fit_scilama(expression, train_mask, batch, gene_table, params, seed=0, work_dir=None)
    except StopTiming:
        pass
    finally:
        scilama_train._phase_loss = original
    validation = 0.0
    if len(starts) < steps_per_epoch * (epochs + 1):  # capped: time one validation pass on its own
        held["model"].eval()
        with torch.no_grad():
            begin = time.perf_counter()
            held["loss_fn"](torch.as_tensor(np.flatnonzero(~train_mask)), 1.0)
            validation = time.perf_counter() - begin
    seconds, how = per_epoch(starts, ends, steps_per_epoch, epochs, max_steps, validation)
    return {"seconds": seconds, "how": how, "steps_per_epoch": steps_per_epoch, "threads": torch.get_num_threads()}


def scvi_epoch(spec: dict) -> dict:
    import scvi
    import torch
    from lightning.pytorch.callbacks import Callback

    from celldag.methods import scvi_baseline
    from celldag.representation.track import RepresentationInput

    counts, _, batch = synthetic_counts(spec["cells"], spec["genes"])
    train_mask = split_mask(spec["cells"])
    epochs, max_steps = spec["epochs"], spec["max_steps"]
    starts: list[float] = []
    ends: dict[int, float] = {}

    class Timer(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if len(starts) >= max_steps:
                raise StopTiming
            starts.append(time.perf_counter())

        def on_train_epoch_end(self, trainer, pl_module):
            ends[trainer.current_epoch] = time.perf_counter()

    original = scvi.model.SCVI.train

    def train_with_timer(self, *args, **kwargs):
        return original(self, *args, callbacks=[Timer()], **kwargs)

    params = run_params("scvi") | {
        "use_batch": True,
        "n_latent": LATENT,
        "batch_size": BATCH_SIZE,
        "max_epochs": 1 + epochs,
        "accelerator": "cpu",
    }
    inputs = RepresentationInput(
        names=tuple(str(i) for i in range(spec["cells"])),
        features=np.empty((0, 0)),
        gene_names=tuple(f"g{i}" for i in range(spec["genes"])),
        batch=np.array([f"batch{b}" for b in batch]),
        train_mask=train_mask,
        lognorm=np.empty((0, 0)),
        counts=counts,
    )
    scvi.model.SCVI.train = train_with_timer
    try:
        scvi_baseline.run(inputs, params, seed=0)
    except StopTiming:
        pass
    finally:
        scvi.model.SCVI.train = original
    n_train = int(train_mask.sum())
    drop_last = 0 < n_train % BATCH_SIZE < 3  # as scvi_baseline.run
    steps_per_epoch = n_train // BATCH_SIZE if drop_last else math.ceil(n_train / BATCH_SIZE)
    seconds, how = per_epoch(starts, ends, steps_per_epoch, epochs, max_steps, 0.0)
    return {"seconds": seconds, "how": how, "steps_per_epoch": steps_per_epoch, "threads": torch.get_num_threads()}


def epochs_section(quick: bool, out: Section) -> None:
    sizes, genes = ([1000, 3000], 500) if quick else ([5000, 20000, 50000], 2000)
    epochs, max_steps = (1, 40) if quick else (2, 400)  # 50,000 cells: 313 steps an epoch, extrapolated
    table = Table(
        f"Training epoch: sciLaMA (joint phase) vs scVI (scvi-tools), {genes:,} genes, latent {LATENT}, "
        f"batch {BATCH_SIZE}",
        [
            "cells",
            "sciLaMA s/epoch",
            "sciLaMA peak MB",
            "scVI s/epoch",
            "scVI peak MB",
            "ratio",
            "steps/epoch",
            "timed",
        ],
    )
    results = {"sciLaMA epoch": [], "scVI epoch": []}
    for n in sizes:
        spec = {"cells": n, "genes": genes, "epochs": epochs, "max_steps": max_steps}
        ours, peer = child("scilama_epoch", spec), child("scvi_epoch", spec)
        results["sciLaMA epoch"].append(ours), results["scVI epoch"].append(peer)
        how = ours["how"] if ours["how"] == peer["how"] else f"sciLaMA {ours['how']}; scVI {peer['how']}"
        table.add(
            n,
            ours["seconds"],
            ours["peak_mb"],
            peer["seconds"],
            peer["peak_mb"],
            ours["seconds"] / peer["seconds"],
            ours["steps_per_epoch"],
            how,
        )
    out.tables.append(table.show())
    for label, rows in results.items():
        out.series[label] = series(
            "cells",
            sizes,
            [row["seconds"] for row in rows],
            [row["peak_mb"] for row in rows],
            peer=label.startswith("scVI"),
        )
    threads = results["sciLaMA epoch"][0]["threads"]
    scilama = run_params("scilama")
    out.notes.append(
        f"Epochs: CPU, {threads} torch threads, synthetic NB counts ({N_TYPES} types, {N_BATCHES} batches), 80 % "
        f"training cells. sciLaMA: celldag's default (CPU) sizes, hidden {scilama['hidden_dims']}, gene VAE "
        f"{scilama['gene_hidden_dims']} on a {GENE_TABLE_DIM}-d table of all genes every step, latent {LATENT}, "
        "joint phase (the stepwise schedule's cell phase is cheaper, its gene phase about as costly); its epoch "
        f"includes the validation pass. scVI: scvi-tools defaults (1 layer of 128) at n_latent {LATENT}, batch as "
        "covariate, no validation (no early stopping). Context, not a race: sciLaMA also fits a gene embedding. "
        f"Each size runs in its own process (peak MB: that process, data included). Steps capped at {max_steps}: "
        "above that (50,000 cells) an epoch is the mean step time after a warm-up tenth × steps per epoch, plus, "
        "for sciLaMA, one validation pass timed on its own."
    )


# ---------------------------------------------------------------- scoring


def scoring_data(cells: int):
    """(prepared AnnData, two embeddings of one width): scanpy's pbmc68k_batched at ``cells`` = 0, else
    synthetic cells (10 types, 3 batches) with a 100-column "expression" for the PCR reference."""
    import anndata
    import pandas as pd

    if cells == 0:
        from celldag.data.pbmc import prepare_pbmc68k_batched

        prepared = prepare_pbmc68k_batched("pbmc68k_batched", {}, 0, {})
        x = np.asarray(prepared.X, dtype=np.float32)
        components = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)[2][: 2 * LATENT]
        scores = (x - x.mean(axis=0)) @ components.T
        return prepared, scores[:, :LATENT], scores[:, LATENT:]
    rng = np.random.default_rng(3)
    types, batch = rng.integers(N_TYPES, size=cells), rng.integers(N_BATCHES, size=cells)
    centres = 4 * rng.normal(size=(N_TYPES, 100))
    x = centres[types] + rng.normal(size=(cells, 100)) + 1.5 * rng.normal(size=(N_BATCHES, 100))[batch]
    obs = pd.DataFrame(
        {"label": pd.Categorical([f"type{t}" for t in types]), "batch": pd.Categorical([f"batch{b}" for b in batch])},
        index=[str(i) for i in range(cells)],
    )
    prepared = anndata.AnnData(X=x.astype(np.float32), obs=obs)
    projection = rng.normal(size=(100, 2 * LATENT)) / 10
    embedding = x @ projection
    return prepared, embedding[:, :LATENT], embedding[:, LATENT:]


def scoring_run(spec: dict) -> dict:
    """First (and second) scoring of one embedding in this process; JAX and numba compile time of each."""
    os.environ["CELLDAG_JAX_CACHE"] = spec["jax_cache"]
    import anndata
    import jax
    from numba.core import event

    from celldag.representation.scoring import score_seed
    from celldag.tracks import ScoringContext

    prepared, first, second = scoring_data(spec["cells"])
    counters = {"jax_compile_s": 0.0, "jax_cache_hits": 0, "jax_cache_misses": 0}

    def on_duration(name, duration, **_):
        if name == "/jax/core/compile/backend_compile_duration":
            counters["jax_compile_s"] += duration

    def on_event(name, **_):
        if name == "/jax/compilation_cache/cache_hits":
            counters["jax_cache_hits"] += 1
        elif name == "/jax/compilation_cache/cache_misses":
            counters["jax_cache_misses"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    calls = []
    for embedding in [first, second][: spec["embeddings"]]:
        output = anndata.AnnData(obs=prepared.obs[[]].copy(), obsm={"X_emb": np.asarray(embedding, np.float32)})
        output.uns["status"] = "ok"
        before, numba = dict(counters), []
        start = time.perf_counter()
        with event.install_timer("numba:compile", numba.append):
            scores = score_seed(prepared, [output], ScoringContext(seed=0, dataset={}, evaluation=spec["evaluation"]))[
                0
            ]
        calls.append(
            {
                "seconds": time.perf_counter() - start,
                "numba_compile_s": sum(numba),
                **{key: counters[key] - before[key] for key in counters},
                "scores": {metric: float(value).hex() for metric, value in scores.items()},
            }
        )
    return {"cells": prepared.n_obs, "calls": calls}


SCORE_CELLS = 20000  # evaluation.score_cells' max_cells of the rows scored on a subsample (the scale preset's)


def scoring_section(quick: bool, out: Section, scoring_cells: list[int] | None) -> None:
    """One fresh process per size (cold, then warm); for the first size a second process on the filled cache;
    sizes above SCORE_CELLS also with ``evaluation.score_cells`` (graph metrics on every cell, the rest on a
    stratified subsample of SCORE_CELLS)."""
    sizes = scoring_cells or ([0, 2000] if quick else [0, 5000, 20000])
    table = Table(
        "Scoring one embedding (celldag's score_seed: scib-metrics Benchmarker + Leiden + batch ASW)",
        [
            "cells",
            "cold s",
            "JAX compile s",
            "numba compile s",
            "warm s (2nd embedding)",
            "peak MB",
            "warm-cache new process s",
            "JAX load s",
            "JAX cache hits / misses",
            "numba compile s",
            "warm cache / cold",
            "scores identical",
        ],
    )
    cold_series, warm_series = [], []
    runs = [(cells, None) for cells in sizes] + [(cells, SCORE_CELLS) for cells in sizes if cells > SCORE_CELLS]
    for position, (cells, max_cells) in enumerate(runs):
        evaluation = {"score_cells": {"max_cells": max_cells, "seed": 0}} if max_cells else {}
        spec = {"cells": cells, "embeddings": 2, "evaluation": evaluation}
        with tempfile.TemporaryDirectory(prefix="celldag-jax-") as cache:
            cold = child("scoring_run", spec | {"jax_cache": cache})
            again = None if position else child("scoring_run", spec | {"jax_cache": cache, "embeddings": 1})
        first, second, n = cold["calls"][0], cold["calls"][1], cold["cells"]
        label = f"{n:,} (pbmc68k_batched)" if cells == 0 else f"{n:,}"
        if max_cells:
            label += f", score_cells {max_cells:,}"
        row = [
            label,
            first["seconds"],
            first["jax_compile_s"],
            first["numba_compile_s"],
            second["seconds"],
            cold["peak_mb"],
        ]
        if max_cells:
            table.add(*row, *["–"] * 6)
            continue
        if again is None:
            table.add(*row, *["–"] * 6)
        else:
            fresh = again["calls"][0]
            identical = first["scores"] == fresh["scores"]
            table.add(
                *row,
                fresh["seconds"],
                fresh["jax_compile_s"],
                f"{fresh['jax_cache_hits']} / {fresh['jax_cache_misses']}",
                fresh["numba_compile_s"],
                fresh["seconds"] / first["seconds"],
                "yes" if identical else "NO",
            )
            out.targets.append(
                target(
                    f"scoring fixed cost: first call of a new process with a warm JAX cache <= 10 % of the cold first "
                    f"call ({n:,} cells)",
                    f"{fresh['seconds']:.1f} s vs {first['seconds']:.1f} s "
                    f"({fresh['seconds'] / first['seconds']:.0%}; "
                    f"{fresh['numba_compile_s']:.1f} s of it compiling numba)",
                    fresh["seconds"] <= 0.1 * first["seconds"],
                )
            )
            out.targets.append(
                target(
                    f"warm call: a second embedding in the same process <= 10 % of the cold first call ({n:,} cells)",
                    f"{second['seconds']:.1f} s vs {first['seconds']:.1f} s "
                    f"({second['seconds'] / first['seconds']:.0%})",
                    second["seconds"] <= 0.1 * first["seconds"],
                )
            )
            out.targets.append(
                target(
                    f"JAX's part of it: loading from the warm cache <= 10 % of compiling ({n:,} cells)",
                    f"{fresh['jax_compile_s']:.1f} s vs {first['jax_compile_s']:.1f} s",
                    fresh["jax_compile_s"] <= 0.1 * first["jax_compile_s"],
                )
            )
            out.targets.append(
                target(
                    "scores with a warm JAX cache bit-identical to a cold one (every metric)",
                    "identical" if identical else "DIFFERENT",
                    identical,
                )
            )
        cold_series.append((n, first["seconds"], cold["peak_mb"]))
        warm_series.append((n, second["seconds"]))
    out.tables.append(table.show())
    out.series["scoring (cold)"] = series(
        "cells", [n for n, *_ in cold_series], [s for _, s, _ in cold_series], [m for *_, m in cold_series]
    )
    out.series["scoring (warm)"] = series("cells", [n for n, _ in warm_series], [s for _, s in warm_series])
    skipped = [n for n in (5000, 20000, 50000, 100000) if n not in sizes] if not quick else []
    out.notes.append(
        "Scoring: each size in a fresh process with a new, empty JAX cache directory (CELLDAG_JAX_CACHE) scoring two "
        "embeddings of the same width, 20 (cold, then warm); for the first size a second process reads the cache "
        "the first filled (warm cache). numba's own caches as they were on the machine above. 'JAX compile s': XLA "
        "backend compilation (with a warm cache: loading the executables, 'JAX load s'); 'numba compile s': numba "
        "JIT compilation during the call (kBET's diffusion neighbours are exact since pynndescent's nn_descent, "
        "which numba refuses to cache on disk, cost ~30 s in every process). 700 cells: scanpy's "
        "pbmc68k_batched (real); other sizes synthetic (10 types, 3 batches)."
        + f" Rows 'score_cells {SCORE_CELLS:,}': evaluation.score_cells — the neighbour-graph and k-means metrics "
        f"on every cell, silhouettes, isolated labels, PCR, Leiden and batch ASW on a stratified {SCORE_CELLS:,}-cell "
        "subsample."
        + (
            f" Not run by default, to keep `make bench` within ~8 min: {', '.join(f'{n:,}' for n in skipped)} cells "
            "(--only scoring --scoring-cells 0 5000 20000 50000 100000 runs them)."
            if skipped
            else ""
        )
    )


# ---------------------------------------------------------------- preparation


def sparse_counts(n_cells: int, n_genes: int, density: float, seed: int = 0):
    """CSR int32 counts with per-gene detection rates (mean ``density``) and small positive values."""
    from scipy import sparse

    rng = np.random.default_rng(seed)
    rates = rng.gamma(0.5, 2 * density, size=n_genes).clip(max=0.9).astype(np.float32)
    blocks = []
    for start in range(0, n_cells, 2000):
        rows = min(2000, n_cells - start)
        detected = sparse.csr_matrix(rng.random((rows, n_genes), dtype=np.float32) < rates)
        block = sparse.csr_matrix(
            (1 + rng.geometric(0.5, size=detected.nnz).astype(np.int32) - 1, detected.indices, detected.indptr),
            shape=detected.shape,
        )
        blocks.append(block)
    return sparse.vstack(blocks, format="csr")


def describe(matrix) -> str:
    from scipy import sparse

    if sparse.issparse(matrix):
        return f"{type(matrix).__name__} {matrix.dtype} ({matrix.nnz / np.prod(matrix.shape):.1%} stored)"
    return f"dense {type(matrix).__name__} {matrix.dtype}"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def prepare_run(spec: dict) -> dict:
    """preprocess() on synthetic sparse counts; scanpy's steps wrapped to log the matrix they leave behind."""
    import anndata
    import pandas as pd
    import scanpy as sc

    from celldag.representation import preprocess as module

    begin = time.perf_counter()
    counts = sparse_counts(spec["cells"], spec["genes"], spec["density"])
    rng = np.random.default_rng(4)
    obs = pd.DataFrame(
        {
            "label": rng.integers(N_TYPES, size=spec["cells"]).astype(str),
            "batch": rng.integers(N_BATCHES, size=spec["cells"]).astype(str),
        },
        index=[f"c{i}" for i in range(spec["cells"])],
    )
    source = anndata.AnnData(X=counts, obs=obs, var=pd.DataFrame(index=[f"g{i}" for i in range(spec["genes"])]))
    generated = time.perf_counter() - begin
    steps = [
        {
            "step": "source counts",
            "matrix": describe(source.X),
            "shape": list(source.shape),
            "seconds": 0.0,
            "rss_mb": rss_mb(),
        }
    ]
    started = time.perf_counter()

    def log(step: str, matrix, shape) -> None:
        steps.append(
            {
                "step": step,
                "matrix": describe(matrix),
                "shape": list(shape),
                "seconds": time.perf_counter() - started,
                "rss_mb": rss_mb(),
            }
        )

    def wrap(name: str, what):
        original = getattr(sc.pp, name)

        def wrapped(data, *args, **kwargs):
            result = original(data, *args, **kwargs)
            if isinstance(data, anndata.AnnData):
                log(f"after sc.pp.{name}", what(data, kwargs), data.shape)
            else:
                log(f"after sc.pp.{name}", result, np.shape(result))
            return result

        return original, wrapped

    originals = {}
    for name, what in {
        "filter_cells": lambda d, k: d.X,
        "filter_genes": lambda d, k: d.X,
        "normalize_total": lambda d, k: d.X,
        "log1p": lambda d, k: d.X,
        "highly_variable_genes": lambda d, k: d.layers[k["layer"]] if k.get("layer") else d.X,
        "scale": None,
    }.items():
        originals[name], wrapper = wrap(name, what)
        setattr(sc.pp, name, wrapper)
    try:
        prepared = module.preprocess(
            source, label_key="label", batch_key="batch", seed=0, params={"n_top_genes": spec["n_top_genes"]}
        )
    finally:
        for name, original in originals.items():
            setattr(sc.pp, name, original)
    seconds = time.perf_counter() - started
    log("prepared X", prepared.X, prepared.shape)
    steps.append(
        {
            "step": "prepared layers['lognorm']",
            "matrix": describe(prepared.layers["lognorm"]),
            "shape": list(prepared.shape),
            "seconds": seconds,
            "rss_mb": rss_mb(),
        }
    )
    steps.append(
        {
            "step": "prepared layers['counts']",
            "matrix": describe(prepared.layers["counts"]),
            "shape": list(prepared.shape),
            "seconds": seconds,
            "rss_mb": rss_mb(),
        }
    )
    return {"seconds": seconds, "generate_seconds": generated, "nnz": int(counts.nnz), "steps": steps}


def prepare_section(quick: bool, out: Section) -> None:
    spec = (
        {"cells": 5000, "genes": 2000, "density": 0.02, "n_top_genes": 500}
        if quick
        else {"cells": 100_000, "genes": 20_000, "density": 0.02, "n_top_genes": 2000}
    )
    result = child("prepare_run", spec)
    table = Table(
        f"Preparation: celldag's preprocess() on {spec['cells']:,} cells × {spec['genes']:,} genes, "
        f"{result['nnz'] / spec['cells'] / spec['genes']:.1%} non-zero (CSR), {spec['n_top_genes']:,} HVGs",
        ["step", "matrix after it", "shape", "s since start", "RSS MB"],
    )
    for step in result["steps"]:
        table.add(
            step["step"], step["matrix"], " × ".join(f"{n:,}" for n in step["shape"]), step["seconds"], step["rss_mb"]
        )
    out.tables.append(table.show())
    peak_gb = result["peak_mb"] / 1024
    out.targets.append(
        target(
            f"preprocess() of {spec['cells']:,} × {spec['genes']:,} sparse counts: peak RSS <= 8 GB",
            f"{peak_gb:.1f} GB in {result['seconds']:.0f} s",
            peak_gb <= 8,
        )
    )
    out.notes.append(
        f"Preparation: one child process (peak RSS includes generating the counts, {result['generate_seconds']:.0f} s, "
        "not in 's since start'). Sparse through QC, normalisation, log1p and HVG selection; the first dense matrix "
        "is the z-scoring input of the selected genes (src/celldag/representation/preprocess.py, `dense = "
        "lognorm.toarray()` before `sc.pp.scale`), by design: z-scores are not sparse and the prepared X is dense. "
        "Without HVG selection (n_top_genes null, the default) that matrix is cells × all QC-passed genes: "
        f"{spec['cells']:,} × {spec['genes']:,} float32 = {spec['cells'] * spec['genes'] * 4 / 2**30:.1f} GiB, twice "
        "while scaling."
    )


# ---------------------------------------------------------------- main


CHILDREN = {
    "scilama_epoch": scilama_epoch,
    "scvi_epoch": scvi_epoch,
    "scoring_run": scoring_run,
    "prepare_run": prepare_run,
}


# ---------------------------------------------------------------- scoring on a subsample


AGGREGATES = ("total", "bio_conservation", "batch_correction")


def subsample_section(quick: bool, out: Section) -> None:
    """PCA and Harmony on synthetic data scored with every cell and on stratified subsamples of it."""
    from celldag import artifacts
    from celldag.jobs.evaluate import score_dataset
    from celldag.jobs.prepare import prepare_dataset
    from celldag.jobs.runner import run_method
    from celldag.registry import read_yaml
    from celldag.tracks import tracks_of

    cells, sizes, seeds = (2000, [1000], [0]) if quick else (20000, [10000], [0, 1, 2])
    track = tracks_of(read_yaml(ROOT / "config/tracks.yaml"))["representation"]
    entry = read_yaml(ROOT / "config/datasets.yaml")["synthetic_20k"]
    entry = entry | {"params": entry["params"] | {"n_cells": cells}}
    methods = read_yaml(ROOT / "config/methods.yaml")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        prepared = work / "prepared.h5ad"
        artifacts.write_h5ad(prepare_dataset("synthetic", entry, track, 0), prepared)
        outputs = []
        for method in ("pca", "harmony"):
            run_dir = work / method
            run_method(
                prepared_path=str(prepared),
                output_path=str(run_dir / "output.h5ad"),
                record_path=str(run_dir / "run.json"),
                dataset_id="synthetic",
                dataset_entry=entry,
                method_id=method,
                method_entry={"variants": {"default": {}}} | methods[method],
                variant="default",
                seed=0,
                track=track,
            )
            outputs.append(str(run_dir / "output.h5ad"))

        def aggregates(evaluation: dict) -> tuple[dict[tuple[str, str], float], float]:
            path = work / f"scores-{time.monotonic_ns()}.parquet"
            start = time.perf_counter()
            score_dataset(
                prepared_paths=[str(prepared)],
                output_paths=outputs,
                table_paths=[],
                scores_path=str(path),
                track_id="representation",
                track=track,
                dataset=entry,
                evaluation=evaluation,
            )
            table = artifacts.read_scores(path)
            table = table[table["metric"].isin(AGGREGATES)]
            return {
                (row.method, row.metric): float(row.value) for row in table.itertuples()
            }, time.perf_counter() - start

        full, full_seconds = aggregates({})
        runs = []
        for size in sizes:
            for seed in seeds:
                scores, seconds = aggregates({"score_cells": {"max_cells": size, "seed": seed}})
                runs.append((size, seed, seconds, {key: scores[key] - full[key] for key in full}))
    table = Table(
        f"Scores on a stratified subsample vs every cell: synthetic, {cells:,} cells (Δ = subsample − every cell)",
        ["method", "aggregate", "every cell", *(f"{size:,}, seed {seed}: Δ" for size, seed, *_ in runs)],
    )
    for (method, metric), value in sorted(full.items()):
        table.add(method, metric, value, *(f"{differences[(method, metric)]:+.4f}" for *_, differences in runs))
    table.add("scoring s", "", full_seconds, *(seconds for _, _, seconds, _ in runs))
    out.tables.append(table.show())
    worst = max(abs(d) for *_, differences in runs for d in differences.values())
    out.targets.append(
        target(
            f"scores on a {sizes[0]:,}-cell stratified subsample of {cells:,} within 0.01 of every "
            f"cell's, every aggregate",
            f"largest difference {worst:.3f}",
            worst <= 0.01,
        )
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, spec, path = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
        Path(path).write_text(json.dumps(CHILDREN[kind](spec)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script works")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument(
        "--scoring-cells",
        nargs="+",
        type=int,
        metavar="N",
        help="scoring sizes (0: pbmc68k_batched, 700 cells); default 0 5000 20000",
    )
    args = parser.parse_args()
    run = {
        "epochs": epochs_section,  # in SECTIONS' order: the order of the tables
        "scoring": lambda quick, section: scoring_section(quick, section, args.scoring_cells),
        "prepare": prepare_section,
        "subsample": subsample_section,
    }
    run_sections("representation_scaling", run, args.only, args.quick)


if __name__ == "__main__":
    main()
