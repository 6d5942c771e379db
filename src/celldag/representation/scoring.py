"""Score every run of one (dataset, seed) on the representation track.

scIB metrics (scib-metrics' Benchmarker) on each cell embedding, all embeddings in one call so the
neighbour graphs and the JAX start-up are paid once; marker-gene clustering in gene-embedding space
for runs that return a contextual gene embedding, beside the static vectors they started from (the
same marker genes on both sides, so the two numbers are paired).

JAX's compiled kernels are kept on disk between jobs (``enable_jax_cache``, ``CELLDAG_JAX_CACHE``), and
umap-learn's graph kernels by numba (``celldag.representation.numba_cache``).

Large datasets: with ``evaluation.score_cells: {max_cells, seed}`` a dataset of more than ``max_cells``
cells has its quadratic metrics (silhouettes, isolated labels, PCR comparison, Leiden, batch ASW) scored
on a stratified subsample of ``max_cells`` of them (``stratified_subsample``: by label × batch, seeded by
``seed`` and the dataset seed), the same cells for every method of a seed, and its neighbour-graph and
k-means metrics on every cell (``metrics.scib_scores``' ``subsample``); each run's scores then carry
``scored_cells`` and ``subsample_seed`` (``contracts.SCORE_FACTS``), which the scores table keeps as
columns and the leaderboard notes under the dataset.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
from functools import cache
from pathlib import Path

import numpy as np

from celldag.representation.metrics import marker_clustering, scib_scores
from celldag.representation.numba_cache import cache_umap_graph_kernels
from celldag.tracks import ScoringContext

CONTROLS = ("random", "shuffled")  # sciLaMA's gene inputs drawn from a static table with the run's seed
SUBSAMPLE_STREAM = 3  # random stream of scoring subsamples (preprocess: 1 the split, 2 synthetic batches)
JAX_CACHE_ENV = "CELLDAG_JAX_CACHE"  # a directory for JAX's compiled kernels, or "off"


def static_vectors(table_vectors: np.ndarray, gene_input: str, seed: int) -> np.ndarray:
    """The static vectors a sciLaMA run with ``gene_input`` and ``seed`` gives its gene VAE, one row per gene:
    the table's own, or a control drawn from them — ``random``: i.i.d. normals with the table's mean and
    sd; ``shuffled``: each gene another gene's vector (the paper's Table S6 ablations).

    The method draws its control here and the scorer redraws it here, so a control's static marker
    clustering is that of the vectors the run used, not the table's.
    """
    vectors = np.asarray(table_vectors, dtype=np.float32)
    rng = np.random.default_rng(seed)
    if gene_input == "random":
        return rng.normal(vectors.mean(), vectors.std(), size=vectors.shape).astype(np.float32)
    if gene_input == "shuffled":
        return vectors[rng.permutation(len(vectors))]
    return vectors


def table_of(embedding: str, table_paths: list[str]) -> str | None:
    """The gene table of ``embedding`` among results/embeddings/<embedding>/<dataset>.parquet paths."""
    return next((path for path in table_paths if Path(path).parent.name == embedding), None)


def marker_scores(output, markers: dict[str, list[str]], table_paths: list[str]) -> dict[str, float]:
    """Davies–Bouldin / Calinski–Harabasz of the marker genes, contextual (the output's) and static.

    Static: the vectors the run started from — the table's, or for a random / shuffled control
    (``uns["gene_input"]``) the ones it drew from the table with its seed, redrawn here the same way.
    """
    genes = list(output.var_names)
    contextual = marker_clustering(np.asarray(output.varm["X_gene_emb"]), genes, markers)
    scores = {
        "marker_db": contextual["davies_bouldin"],
        "marker_ch": contextual["calinski_harabasz"],
        "n_marker_genes": float(contextual["n_genes"]),
    }
    static_space = static_gene_space(output, table_paths)
    if static_space is not None:
        static = marker_clustering(static_space[1], static_space[0], markers)
        scores |= {"marker_db_static": static["davies_bouldin"], "marker_ch_static": static["calinski_harabasz"]}
    return scores


def static_gene_space(output, table_paths: list[str], read_table=None) -> tuple[list[str], np.ndarray] | None:
    """(gene ids, vectors) a run started from: its table's vectors of the output's genes, or for a random /
    shuffled control (``uns["gene_input"]``) the ones it drew from the table with its seed, redrawn the
    same way; None when the run read no table."""
    from celldag.embeddings import match_genes

    path = table_of(output.uns.get("embedding", ""), table_paths)
    if path is None:
        return None
    if read_table is None:
        from celldag.embeddings import read_table
    table = read_table(path)
    if table.not_applicable:  # e.g. a mouse dataset: the run read it and stopped, nothing to compare with
        return None
    genes = list(output.var_names)
    columns, vectors, _ = match_genes(genes, table)
    if output.uns.get("gene_input") in CONTROLS:  # sciLaMA's control: the vectors it drew from the table
        vectors = static_vectors(vectors, str(output.uns["gene_input"]), int(output.uns["seed"]))
    return [genes[i] for i in columns], vectors


def unintegrated_reference(x: np.ndarray) -> np.ndarray:
    """The reference of scIB's PCR comparison: the unintegrated expression's 50 leading principal components.

    scanpy's default PCA (ARPACK, seeded; fewer components only when the data have ≤ 50 cells or genes),
    as scib's ``pcr_comparison`` (``n_comps=50``) and scib-metrics' Benchmarker (``sc.tl.pca``) compute it
    when given no reference: the same reference for every embedding, whatever its dimension.
    """
    import scanpy as sc

    return sc.pp.pca(x, svd_solver="arpack")


def jax_cache_dir() -> Path | None:
    """Where the scoring process keeps JAX's compiled kernels: ``$CELLDAG_JAX_CACHE`` ("off": nowhere), else
    ``$XDG_CACHE_HOME/celldag/jax/<cpu>`` (``~/.cache`` without XDG_CACHE_HOME).

    ``<cpu>`` is a short hash of the CPU's model and instruction-set flags, so nodes of a cluster that share
    a home directory but not a CPU never load each other's machine code.
    """
    value = os.environ.get(JAX_CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "none", "false") else Path(value).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "celldag" / "jax" / cpu_tag()


def cpu_tag() -> str:
    """12 hex digits naming this machine's CPU: its architecture, model name and flags (/proc/cpuinfo)."""
    described = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    described.append(line.strip())
                if line.strip() == "":  # the first processor describes them all
                    break
    except OSError:
        pass
    return hashlib.sha256("\n".join(described).encode()).hexdigest()[:12]


@cache  # once a process, before scib-metrics' first jit
def enable_jax_cache() -> Path | None:
    """Keep JAX's compiled kernels on disk (``jax_cache_dir()``), every kernel however small or quick.

    scib-metrics jit-compiles its k-means, silhouettes, LISI and PCR kernels for each new shape: ≈ 16–24 s
    in the evaluate job of a 700-cell dataset (docs/performance.md), paid again by every process, since JAX
    caches on disk only when told where. A warm cache loads the same executables XLA built the first time, so the scores
    are the same to the bit (tests/unit/representation/test_representation_determinism.py). A directory JAX was already
    given (``JAX_COMPILATION_CACHE_DIR``) is kept unless ``CELLDAG_JAX_CACHE`` names one; a directory
    that cannot be created only costs the compile time (a warning, no error).
    """
    import jax

    if os.environ.get(JAX_CACHE_ENV) is None and jax.config.jax_compilation_cache_dir:
        path = Path(jax.config.jax_compilation_cache_dir)
    else:
        path = jax_cache_dir()
        if path is None:
            return None
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            logging.getLogger(__name__).warning("JAX compilation cache disabled: %s", error)
            return None
        jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # default 1 s: most kernels take less
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # every entry, whatever its size
    return path


def allocate(size: int, counts: np.ndarray) -> np.ndarray:
    """Cells per stratum: ``size`` in all, proportional to the strata's ``counts`` (Hamilton's largest
    remainder), and at least one per stratum when there are no more strata than ``size``.

    A stratum whose share is under one cell gets one, and the rest of ``size`` is shared proportionally
    among the others, again until no share is under one; so each of those keeps its proportion of the
    cells left to share within rounding. No stratum gets more cells than it has.
    """
    counts = np.asarray(counts, dtype=np.int64)
    fixed = np.zeros(counts.size, dtype=bool)  # strata held at one cell
    while counts.size <= size:
        free = np.flatnonzero(~fixed)
        under = (size - fixed.sum()) * counts[free] < counts[free].sum()  # share of the rest under one cell
        if not under.any():
            break
        fixed[free[under]] = True
    free = ~fixed
    budget = size - int(fixed.sum())
    quota = budget * counts[free] / counts[free].sum()
    alloc = np.ones(counts.size, dtype=np.int64)
    shares = np.floor(quota).astype(np.int64)
    shares[np.argsort(-(quota - shares), kind="stable")[: budget - int(shares.sum())]] += 1
    alloc[free] = shares
    return alloc


def stratified_subsample(labels, batch, size: int, seed: int, dataset_seed: int) -> np.ndarray:
    """Sorted row indices of a seeded subsample of ``size`` cells, stratified by label × batch.

    Every non-empty (label, batch) stratum is represented while there are no more of them than ``size``,
    and each keeps its share of the cells within rounding (``allocate``). Strata are visited in sorted
    order and their cells drawn without replacement from one generator seeded by ``seed`` and
    ``dataset_seed``: the same labels, batches and seeds give the same cells. ``size`` at or above the
    number of cells: every row.
    """
    import pandas as pd

    labels, batch = np.asarray(labels).astype(str), np.asarray(batch).astype(str)
    n_cells = labels.size
    if size >= n_cells:
        return np.arange(n_cells)
    if size < 1:
        raise ValueError(f"a subsample needs at least one cell, got size {size}")
    strata = pd.DataFrame({"label": labels, "batch": batch}).groupby(["label", "batch"], sort=True).ngroup()
    codes = strata.to_numpy()
    counts = np.bincount(codes)
    alloc = allocate(size, counts)
    members = np.split(np.argsort(codes, kind="stable"), np.cumsum(counts)[:-1])
    rng = np.random.default_rng([SUBSAMPLE_STREAM, seed, dataset_seed])
    chosen = [rng.choice(rows, size=k, replace=False) for rows, k in zip(members, alloc)]
    return np.sort(np.concatenate(chosen))


def score_subsample(prepared, context: ScoringContext) -> np.ndarray | None:
    """The rows the metrics score (the cells they use are all cells of the prepared dataset): None for
    every cell — no ``evaluation.score_cells``, or no more cells than its ``max_cells`` — else the
    stratified subsample of ``max_cells`` cells drawn with its ``seed`` and the dataset seed."""
    option = context.evaluation.get("score_cells")
    if not option or prepared.n_obs <= int(option["max_cells"]):
        return None
    return stratified_subsample(
        prepared.obs["label"], prepared.obs["batch"], int(option["max_cells"]), int(option.get("seed", 0)), context.seed
    )


def score_seed(prepared, outputs: list, context: ScoringContext) -> list[dict[str, float]]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``).

    On a subsample (``score_subsample``) every output's dict also holds the score facts ``scored_cells``
    and ``subsample_seed`` (``contracts.SCORE_FACTS``), which become columns of its rows.
    """
    markers, table_paths = context.dataset.get("markers", {}), list(context.table_paths)
    ok = [i for i, output in enumerate(outputs) if output.uns["status"] == "ok"]
    rows = score_subsample(prepared, context)
    facts = (
        {}
        if rows is None
        else {"scored_cells": int(rows.size), "subsample_seed": int(context.evaluation["score_cells"].get("seed", 0))}
    )
    scores: list[dict[str, float]] = [dict(facts) for _ in outputs]
    if not ok:
        return scores
    scored = slice(None) if rows is None else rows
    matrix, obs = prepared.X[scored], prepared.obs
    x = np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix, dtype=np.float32)
    batch = obs["batch"].astype(str).to_numpy()
    batch_metrics = len(np.unique(batch)) > 1  # one batch (pbmc3k): bio conservation only
    pre_integration = unintegrated_reference(x) if batch_metrics else None  # of the scored cells
    embeddings = {str(i): np.asarray(outputs[i].obsm["X_emb"], dtype=np.float32) for i in ok}
    enable_jax_cache()
    cache_umap_graph_kernels()  # scib-metrics' connectivities run umap-learn's graph kernels
    scib = scib_scores(
        embeddings,
        obs["label"].astype(str).to_numpy(),
        batch,
        pre_integration,
        batch_metrics=batch_metrics,
        subsample=rows,
    )
    for i in ok:
        scores[i] |= {metric: value for metric, value in scib[str(i)].items() if np.isfinite(value)}
        if markers and "X_gene_emb" in outputs[i].varm:
            scores[i] |= marker_scores(outputs[i], markers, table_paths)
    return scores
