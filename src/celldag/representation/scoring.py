"""Score every run of one (dataset, seed) on the representation track.

scIB metrics (scib-metrics' Benchmarker) on each cell embedding, all embeddings in one call so the
neighbour graphs and the JAX start-up are paid once; marker-gene clustering in gene-embedding space
for runs that return a contextual gene embedding, beside the static table they started from (the same
marker genes on both sides, so the two numbers are paired).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from celldag.tracks import ScoringContext


def table_of(embedding: str, table_paths: list[str]) -> str | None:
    """The gene table of ``embedding`` among results/embeddings/<embedding>/<dataset>.parquet paths."""
    return next((path for path in table_paths if Path(path).parent.name == embedding), None)


def marker_scores(output, markers: dict[str, list[str]], table_paths: list[str]) -> dict[str, float]:
    """Davies–Bouldin / Calinski–Harabasz of the marker genes, contextual (the output's) and static."""
    from celldag.representation.metrics import marker_clustering

    genes = list(output.var_names)
    contextual = marker_clustering(np.asarray(output.varm["X_gene_emb"]), genes, markers)
    scores = {"marker_db": contextual["davies_bouldin"], "marker_ch": contextual["calinski_harabasz"],
              "n_marker_genes": float(contextual["n_genes"])}  # fmt: skip
    path = table_of(output.uns.get("embedding", ""), table_paths)
    if path is not None:
        from celldag.embeddings import match_genes, read_table

        columns, vectors, _ = match_genes(genes, read_table(path))
        static = marker_clustering(vectors, [genes[i] for i in columns], markers)
        scores |= {"marker_db_static": static["davies_bouldin"], "marker_ch_static": static["calinski_harabasz"]}
    return scores


def score_seed(prepared, outputs: list, context: ScoringContext) -> list[dict[str, float]]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``)."""
    from sklearn.decomposition import PCA

    from celldag.representation.metrics import scib_scores

    markers, table_paths = context.dataset.get("markers", {}), list(context.table_paths)
    ok = [i for i, output in enumerate(outputs) if output.uns["status"] == "ok"]
    scores: list[dict[str, float]] = [{} for _ in outputs]
    if not ok:
        return scores
    x = np.asarray(prepared.X.toarray() if hasattr(prepared.X, "toarray") else prepared.X, dtype=np.float32)
    batch = prepared.obs["batch"].astype(str).to_numpy()
    batch_metrics = len(np.unique(batch)) > 1  # one batch (pbmc3k): bio conservation only
    # the unintegrated reference of scIB's PCR comparison: PCA of the scaled expression
    pre_integration = PCA(n_components=min(50, *x.shape) - 1, random_state=0).fit_transform(x) if batch_metrics else None
    embeddings = {str(i): np.asarray(outputs[i].obsm["X_emb"], dtype=np.float32) for i in ok}
    scib = scib_scores(embeddings, prepared.obs["label"].astype(str).to_numpy(), batch, pre_integration,
                       batch_metrics=batch_metrics)  # fmt: skip
    for i in ok:
        scores[i] = {metric: value for metric, value in scib[str(i)].items() if np.isfinite(value)}
        if markers and "X_gene_emb" in outputs[i].varm:
            scores[i] |= marker_scores(outputs[i], markers, table_paths)
    return scores
