"""Simulated UMI counts with cell types and batches for the representation track (builtin, any size).

The model, all of it drawn from the run seed (a new dataset per seed, as the lineage simulator draws a
new tree):

* genes: a baseline expression share per gene, log-normal (``baseline_sd`` on the log scale, clipped at
  ±2.5 sd so that no gene is so rare that QC drops it at these sizes), the shares summing to 1;
* cell types: unequal proportions drawn from a Dirichlet (``type_alpha``; smaller = more unequal) and
  floored at ``min_type_fraction``, so rare types exist; every type gets cells (largest remainder, at
  least one each). Each type has a gene program: a ``de_fraction`` of the genes, drawn per type, with
  log-fold changes N(0, ``de_lfc_sd``) on the baseline;
* batches: each type's cells are spread over the batches with proportions drawn from a Dirichlet
  (``batch_mixing``; smaller = more uneven), so some types are nearly absent from some batches; each
  batch has gene-wise log-fold changes N(0, ``batch_lfc_sd``) on every gene and a sequencing-depth
  factor exp(N(0, ``batch_depth_sd``));
* cells: a library size (expected UMIs over the simulated genes), log-normal with median
  ``library_size`` and log-scale sd ``library_sd``, times its batch's depth factor;
* counts: negative binomial with mean library × the (type, batch) expression shares (baseline ×
  exp(type program + batch effect), renormalised to sum 1) and variance mean + ``dispersion`` · mean².

The counts are drawn in chunks of cells into a CSR matrix of int32 (``simulate_counts``): one chunk of
``chunk_cells`` × genes float64 at a time, never the whole dense matrix; numpy draws each element in
turn from one generator, so any chunk size gives the same matrix. The dataset then goes through the
track's shared preprocessing (QC, normalisation, optional HVGs, scaling, seeded split) like any raw-count
source, and keeps its counts, so scVI applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

from celldag.representation.preprocess import DEFAULTS as PREPROCESS_DEFAULTS
from celldag.representation.preprocess import preprocess, split_params

SYNTHETIC_DEFAULTS = {
    "n_cells": 10000,
    "n_genes": 2000,
    "n_types": 12,
    "n_batches": 4,
    "type_alpha": 1.0,  # Dirichlet concentration of the type proportions: smaller = more unequal
    "min_type_fraction": 0.002,  # every type's share is at least this (before rounding to cells)
    "batch_mixing": 2.0,  # Dirichlet concentration of each type's spread over batches: smaller = more uneven
    "de_fraction": 0.1,  # share of the genes in each type's program
    "de_lfc_sd": 1.0,  # sd of a program gene's log-fold change (natural log)
    "batch_lfc_sd": 0.3,  # sd of each batch's gene-wise log-fold change
    "batch_depth_sd": 0.2,  # sd of each batch's log sequencing-depth factor
    "library_size": 1500,  # median expected UMIs of a cell over the simulated genes
    "library_sd": 0.4,  # log-scale sd of the library sizes
    "baseline_sd": 1.5,  # log-scale sd of the genes' baseline expression
    "dispersion": 0.2,  # negative-binomial dispersion: variance = mean + dispersion · mean²
}
CHUNK_CELLS = 2000  # cells drawn at once: 2,000 × 2,000 genes of float64 means ≈ 32 MB per array
BASELINE_CLIP = 2.5  # baseline log-shares are clipped at ± this many sd
# random streams of one seed: the design (types, batches, programs, libraries) and the counts
DESIGN_STREAM, COUNTS_STREAM = 11, 12


@dataclass(frozen=True)
class Simulation:
    counts: sparse.csr_matrix  # cells × genes, int32
    cell_type: np.ndarray  # (cells,) type index
    batch: np.ndarray  # (cells,) batch index
    library: np.ndarray  # (cells,) expected UMIs of each cell
    type_fractions: np.ndarray  # (types,) the drawn type proportions
    shares: np.ndarray  # (types, batches, genes) expected expression shares, each row summing to 1


def check_design(design: Mapping) -> dict:
    """``SYNTHETIC_DEFAULTS`` overridden by ``design``; unknown keys and invalid values are errors."""
    unknown = sorted(set(design) - set(SYNTHETIC_DEFAULTS))
    if unknown:
        raise ValueError(f"synthetic params: unknown {unknown}; expected some of {list(SYNTHETIC_DEFAULTS)}")
    settings = {**SYNTHETIC_DEFAULTS, **design}
    minimum = {"n_cells": 1, "n_genes": 1, "n_types": 1, "n_batches": 1}
    for key, least in minimum.items():
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"synthetic params: {key} must be an integer >= {least}, got {value!r}")
    for key in ("type_alpha", "batch_mixing", "library_size", "dispersion"):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"synthetic params: {key} must be a number > 0, got {value!r}")
    for key in ("de_lfc_sd", "batch_lfc_sd", "batch_depth_sd", "library_sd", "baseline_sd"):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"synthetic params: {key} must be a number >= 0, got {value!r}")
    for key, high in (("de_fraction", 1.0), ("min_type_fraction", 1.0 / settings["n_types"])):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high:
            raise ValueError(f"synthetic params: {key} must be a number in [0, {high:g}], got {value!r}")
    return settings


def largest_remainder(total: int, weights: np.ndarray, minimum: int = 0) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total``, each at least ``minimum`` (if total allows).

    Hamilton's method: floors, then one more to the largest remainders (ties: the first).
    """
    weights = np.asarray(weights, dtype=np.float64)
    base = minimum if minimum * weights.size <= total else 0
    quota = (total - base * weights.size) * weights / weights.sum()
    counts = np.floor(quota).astype(np.int64)
    short = total - base * weights.size - int(counts.sum())
    counts[np.argsort(-(quota - counts), kind="stable")[:short]] += 1
    return counts + base


def simulate_counts(
    n_cells: int, n_genes: int, n_types: int, n_batches: int, seed: int, *, chunk_cells: int = CHUNK_CELLS, **params
) -> Simulation:
    """The simulated dataset of ``seed`` (the module docstring has the model; ``params`` as ``SYNTHETIC_DEFAULTS``)."""
    p = check_design({"n_cells": n_cells, "n_genes": n_genes, "n_types": n_types, "n_batches": n_batches, **params})
    if isinstance(chunk_cells, bool) or not isinstance(chunk_cells, int) or chunk_cells < 1:
        raise ValueError(f"chunk_cells must be an integer >= 1, got {chunk_cells!r}")
    rng = np.random.default_rng([DESIGN_STREAM, seed])

    # genes: baseline log-shares; type programs; batch effects
    log_base = np.clip(rng.normal(0.0, 1.0, n_genes), -BASELINE_CLIP, BASELINE_CLIP) * p["baseline_sd"]
    in_program = rng.random((n_types, n_genes)) < p["de_fraction"]
    type_lfc = np.where(in_program, rng.normal(0.0, p["de_lfc_sd"], (n_types, n_genes)), 0.0)
    batch_lfc = rng.normal(0.0, p["batch_lfc_sd"], (n_batches, n_genes))
    batch_depth = np.exp(rng.normal(0.0, p["batch_depth_sd"], n_batches))
    log_share = log_base[None, None, :] + type_lfc[:, None, :] + batch_lfc[None, :, :]
    shares = np.exp(log_share - log_share.max(axis=2, keepdims=True))
    shares /= shares.sum(axis=2, keepdims=True)

    # cells: types (unequal, every one present), batches given the type (uneven), library sizes
    fractions = rng.dirichlet(np.full(n_types, float(p["type_alpha"])))
    fractions = p["min_type_fraction"] + (1.0 - n_types * p["min_type_fraction"]) * fractions
    per_type = largest_remainder(n_cells, fractions, minimum=1)
    cell_type = rng.permutation(np.repeat(np.arange(n_types), per_type))
    batch = np.empty(n_cells, dtype=np.int64)
    for t in range(n_types):
        members = np.flatnonzero(cell_type == t)
        spread = rng.dirichlet(np.full(n_batches, float(p["batch_mixing"])))
        batch[members] = rng.choice(n_batches, size=members.size, p=spread)
    library = p["library_size"] * np.exp(rng.normal(0.0, p["library_sd"], n_cells)) * batch_depth[batch]

    # counts: negative binomial, n = 1 / dispersion, p = n / (n + mean); chunk by chunk from one generator
    counts_rng = np.random.default_rng([COUNTS_STREAM, seed])
    size = 1.0 / p["dispersion"]
    chunks = []
    for start in range(0, n_cells, chunk_cells):
        rows = slice(start, min(start + chunk_cells, n_cells))
        mean = library[rows, None] * shares[cell_type[rows], batch[rows]]
        drawn = counts_rng.negative_binomial(size, size / (size + mean))
        del mean
        chunks.append(sparse.csr_matrix(drawn.astype(np.int32, copy=False)))
        del drawn
    counts = sparse.vstack(chunks, format="csr", dtype=np.int32) if len(chunks) > 1 else chunks[0]
    return Simulation(counts, cell_type, batch, library, fractions, shares)


def prepare_synthetic_counts(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Simulated counts (``simulate_counts`` with the entry's params and the run seed) → the track's
    shared preprocessing (its params: QC, ``n_top_genes``, ``val_fraction``, …). ``uns["simulation"]``
    holds the design and the drawn type proportions."""
    import anndata

    design, preprocess_params = split_params(params, SYNTHETIC_DEFAULTS, "synthetic_counts")
    design = check_design(design)
    shape = {key: design.pop(key) for key in ("n_cells", "n_genes", "n_types", "n_batches")}
    simulation = simulate_counts(**shape, seed=seed, **design)
    types = [f"type{t:02d}" for t in range(shape["n_types"])]
    batches = [f"batch{b}" for b in range(shape["n_batches"])]
    width = len(str(shape["n_cells"] - 1))
    adata = anndata.AnnData(
        X=simulation.counts,
        obs=pd.DataFrame(
            {
                "cell_type": pd.Categorical.from_codes(simulation.cell_type, types),
                "batch": pd.Categorical.from_codes(simulation.batch, batches),
            },
            index=[f"cell{c:0{width}d}" for c in range(shape["n_cells"])],
        ),
        var=pd.DataFrame(index=[f"gene{g:04d}" for g in range(shape["n_genes"])]),
    )
    prepared = preprocess(adata, label_key="cell_type", batch_key="batch", seed=seed, params=preprocess_params)
    prepared.uns["simulation"] = {
        **shape,
        **design,
        "type_fractions": {name: float(f) for name, f in zip(types, simulation.type_fractions)},
    }
    return prepared


# the entry params this loader reads: any other key is refused when the workflow is parsed
prepare_synthetic_counts.accepted_params = (*SYNTHETIC_DEFAULTS, *PREPROCESS_DEFAULTS)
