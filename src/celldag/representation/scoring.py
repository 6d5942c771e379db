"""Score every run of one (dataset, seed) on the representation track.

scIB metrics (scib-metrics' Benchmarker) on each cell embedding, all embeddings in one call so the
neighbour graphs and the JAX start-up are paid once; marker-gene clustering in gene-embedding space
for runs that return a contextual gene embedding, beside the static vectors they started from (the
same marker genes on both sides, so the two numbers are paired).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from celldag.tracks import ScoringContext

CONTROLS = ("random", "shuffled")  # sciLaMA's gene inputs drawn from a static table with the run's seed


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
    from celldag.representation.metrics import marker_clustering

    genes = list(output.var_names)
    contextual = marker_clustering(np.asarray(output.varm["X_gene_emb"]), genes, markers)
    scores = {"marker_db": contextual["davies_bouldin"], "marker_ch": contextual["calinski_harabasz"],
              "n_marker_genes": float(contextual["n_genes"])}  # fmt: skip
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
    genes = list(output.var_names)
    columns, vectors, _ = match_genes(genes, read_table(path))
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


def score_seed(prepared, outputs: list, context: ScoringContext) -> list[dict[str, float]]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``)."""
    from celldag.representation.metrics import scib_scores

    markers, table_paths = context.dataset.get("markers", {}), list(context.table_paths)
    ok = [i for i, output in enumerate(outputs) if output.uns["status"] == "ok"]
    scores: list[dict[str, float]] = [{} for _ in outputs]
    if not ok:
        return scores
    x = np.asarray(prepared.X.toarray() if hasattr(prepared.X, "toarray") else prepared.X, dtype=np.float32)
    batch = prepared.obs["batch"].astype(str).to_numpy()
    batch_metrics = len(np.unique(batch)) > 1  # one batch (pbmc3k): bio conservation only
    pre_integration = unintegrated_reference(x) if batch_metrics else None
    embeddings = {str(i): np.asarray(outputs[i].obsm["X_emb"], dtype=np.float32) for i in ok}
    scib = scib_scores(embeddings, prepared.obs["label"].astype(str).to_numpy(), batch, pre_integration,
                       batch_metrics=batch_metrics)  # fmt: skip
    for i in ok:
        scores[i] = {metric: value for metric, value in scib[str(i)].items() if np.isfinite(value)}
        if markers and "X_gene_emb" in outputs[i].varm:
            scores[i] |= marker_scores(outputs[i], markers, table_paths)
    return scores
