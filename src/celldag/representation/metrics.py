"""Metrics of the representation track: scIB scores of cell embeddings, marker clustering of gene embeddings.

``scib_scores`` runs scib-metrics' ``Benchmarker`` (its full bio-conservation and batch-correction sets
and its 0.6 / 0.4 aggregate) plus three scores the Benchmarker of scib-metrics 0.5.10 leaves out but
the sciLaMA paper reports: Leiden NMI / ARI (cluster resolution chosen by NMI, as scIB does) and the
classic batch ASW (``silhouette_batch``, which this Benchmarker replaced by BRAS). Those three are
reported beside the aggregate, not inside it, so ``total`` means what scib-metrics means by it.

Reproducible to the bit: the same embeddings give the same scores in any process on a machine. Every
random step is seeded — k-means (JAX key 0), Leiden (igraph seeded with 42 per resolution), kBET's
ARPACK start (``seeded_eigsh``, the one scib-metrics leaves to OS entropy) — and neighbours, kBET's
diffusion neighbours included, are exact (``exact_neighbors``), not pynndescent's approximate ones
(tests/unit/representation/test_representation_determinism.py scores one embedding in two processes).

Cost: JAX compiles on first use (kept on disk between processes: ``scoring.enable_jax_cache``), then
seconds per embedding for ~1k cells. Score all embeddings of a dataset in one call.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np

# snake_case name → higher_is_better (every scIB score is higher-better); order = bio, batch, aggregate
SCIB_METRICS = {
    "nmi_kmeans": True,  # NMI of k-means (k = number of labels) clusters vs labels
    "ari_kmeans": True,  # ARI of the same clustering
    "nmi_leiden": True,  # NMI of Leiden clusters on the 15-NN graph, resolution maximising NMI
    "ari_leiden": True,  # ARI at that resolution
    "silhouette_label": True,  # cell-type ASW, rescaled (s + 1) / 2
    "clisi": True,  # cell-type LISI on the 90-NN graph, scaled so 1 = neighbourhoods pure
    "isolated_labels": True,  # ASW of the labels present in the fewest batches
    "bras": True,  # batch-removal-adapted silhouette (cosine, mean over other batches) per label
    "silhouette_batch": True,  # classic batch ASW: 1 − |s| per label (the paper's "batchASW")
    "ilisi": True,  # batch LISI on the 90-NN graph, scaled to [0, 1]
    "kbet": True,  # kBET acceptance rate per label on diffusion neighbours
    "graph_connectivity": True,  # per label: largest connected component of its 15-NN subgraph
    "pcr_comparison": True,  # drop in batch variance explained (PC regression) vs pre_integration
    "bio_conservation": True,  # Benchmarker aggregate: mean of its bio metrics (kmeans NMI/ARI,
    # silhouette_label, clisi, isolated_labels)
    "batch_correction": True,  # mean of bras, ilisi, kbet, graph_connectivity, pcr_comparison
    "total": True,  # 0.6 · bio_conservation + 0.4 · batch_correction
}

# Benchmarker result rows (clean_names=False) → our names
_BENCHMARKER_NAMES = {
    "nmi_ari_cluster_labels_kmeans_nmi": "nmi_kmeans",
    "nmi_ari_cluster_labels_kmeans_ari": "ari_kmeans",
    "silhouette_label": "silhouette_label",
    "clisi_knn": "clisi",
    "isolated_labels": "isolated_labels",
    "bras": "bras",
    "ilisi_knn": "ilisi",
    "kbet_per_label": "kbet",
    "graph_connectivity": "graph_connectivity",
    "pcr_comparison": "pcr_comparison",
    "Bio conservation": "bio_conservation",
    "Batch correction": "batch_correction",
    "Total": "total",
}
_MAX_NEIGHBOURS = 90  # the Benchmarker's largest neighbourhood (cLISI, iLISI)


def scib_scores(
    embeddings: Mapping[str, np.ndarray],
    labels: np.ndarray,
    batch: np.ndarray,
    pre_integration: np.ndarray | None,
    *,
    batch_metrics: bool = True,
    n_jobs: int = 1,
    subsample: np.ndarray | None = None,
) -> dict[str, dict[str, float]]:
    """Per embedding key: {metric: value} over the names of ``SCIB_METRICS`` (NaN where undefined).

    ``pre_integration`` is the unintegrated reference of the PCR comparison (e.g. PCA of the scaled
    expression); it may be None only with ``batch_metrics=False``, which scores bio conservation
    alone (no batch metrics, no ``total``), as needed for a dataset with one batch.

    ``subsample`` (row indices): the metrics of the neighbour graph and k-means — ``GRAPH_METRICS`` —
    are computed on every cell, the quadratic silhouettes, isolated labels, PCR comparison, Leiden and
    batch ASW only on those rows (``pre_integration`` then has one row per subsample cell), and the
    aggregates are the Benchmarker's means of the two parts (``aggregates``). Scoring the graph metrics
    on a sparser sample moves them (kBET +0.05, graph connectivity up to +0.08, k-means NMI by 0.14 on
    20,000 cells; docs/representation.md), the per-cell means stay within 0.008.
    """
    labels, batch = np.asarray(labels).astype(str), np.asarray(batch).astype(str)
    rows = np.arange(len(labels)) if subsample is None else np.asarray(subsample)
    _check_inputs(embeddings, len(labels), batch, pre_integration, batch_metrics, len(rows))
    # its INFO lines ("<label> consists of a single batch … Skip.") are rich-formatted terminal noise in job logs
    import scib_metrics

    scib_metrics.settings.verbosity = logging.WARNING
    if subsample is None:
        scores = benchmarker_scores(
            embeddings,
            labels,
            batch,
            pre_integration,
            BIO_METRICS,
            BATCH_METRICS,
            batch_metrics,
            n_jobs,
            with_aggregates=True,
        )
    else:
        graph = benchmarker_scores(
            embeddings,
            labels,
            batch,
            None,
            GRAPH_METRICS & BIO_METRICS,
            GRAPH_METRICS & BATCH_METRICS,
            batch_metrics,
            n_jobs,
        )
        sampled = {key: np.asarray(x)[rows] for key, x in embeddings.items()}
        scores = benchmarker_scores(
            sampled,
            labels[rows],
            batch[rows],
            pre_integration,
            BIO_METRICS - GRAPH_METRICS,
            BATCH_METRICS - GRAPH_METRICS,
            batch_metrics,
            n_jobs,
        )
        scores = {key: aggregates(graph[key] | scores[key], batch_metrics) for key in embeddings}
    for key, x in embeddings.items():
        x = np.asarray(x, dtype=np.float32)[rows]
        leiden = scib_metrics.nmi_ari_cluster_labels_leiden(exact_neighbors(x, 15, n_jobs), labels[rows], n_jobs=n_jobs)
        scores[key] |= {"nmi_leiden": float(leiden["nmi"]), "ari_leiden": float(leiden["ari"])}
        if batch_metrics:
            scores[key]["silhouette_batch"] = float(scib_metrics.silhouette_batch(x, labels[rows], batch[rows]))
        scores[key] = {name: scores[key][name] for name in SCIB_METRICS if name in scores[key]}
    return scores


# the Benchmarker's metrics (its BioConservation / BatchCorrection flags) → our names; the aggregates are
# the means of each set, total = 0.6 bio + 0.4 batch
BIO_METRICS = frozenset({"nmi_ari_cluster_labels_kmeans", "silhouette_label", "clisi_knn", "isolated_labels"})
BATCH_METRICS = frozenset({"bras", "ilisi_knn", "kbet_per_label", "graph_connectivity", "pcr_comparison"})
# computed on every cell when scoring a subsample: their values depend on the density of the cells
GRAPH_METRICS = frozenset(
    {"nmi_ari_cluster_labels_kmeans", "clisi_knn", "ilisi_knn", "kbet_per_label", "graph_connectivity"}
)
BIO_NAMES = ("nmi_kmeans", "ari_kmeans", "silhouette_label", "clisi", "isolated_labels")
BATCH_NAMES = ("bras", "ilisi", "kbet", "graph_connectivity", "pcr_comparison")


def aggregates(scores: dict[str, float], batch_metrics: bool) -> dict[str, float]:
    """``scores`` with the Benchmarker's aggregates (``get_results``): the mean of each set's metrics,
    NaN left out as pandas' mean leaves it out, and total = 0.4 batch + 0.6 bio."""
    scores = dict(scores)
    scores["bio_conservation"] = float(np.nanmean([scores[name] for name in BIO_NAMES]))
    if batch_metrics:
        scores["batch_correction"] = float(np.nanmean([scores[name] for name in BATCH_NAMES]))
        scores["total"] = 0.4 * scores["batch_correction"] + 0.6 * scores["bio_conservation"]
    return scores


def benchmarker_scores(
    embeddings: Mapping[str, np.ndarray],
    labels: np.ndarray,
    batch: np.ndarray,
    pre_integration: np.ndarray | None,
    bio: frozenset,
    batch_set: frozenset,
    batch_metrics: bool,
    n_jobs: int,
    with_aggregates: bool = False,
) -> dict[str, dict[str, float]]:
    """scib-metrics' Benchmarker on the metrics named in ``bio`` and ``batch_set``: {key: {our name: value}},
    with its aggregates when asked (only meaningful when every metric of both sets ran)."""
    import anndata
    import jax
    import pandas as pd
    from scib_metrics.benchmark import BatchCorrection, Benchmarker, BioConservation

    n_cells = len(labels)
    # copies: scib-metrics' k-means centres its input in place (X -= mean; X += mean), which leaves
    # float32 rounding in the caller's arrays and made a second call on them differ from the first
    obsm = {key: np.array(x, dtype=np.float32) for key, x in embeddings.items()}
    # only the PCR comparison reads the reference; without it any embedding stands in, so the
    # Benchmarker does not run its own PCA (of an X we do not give it)
    uses_reference = batch_metrics and "pcr_comparison" in batch_set
    reference = pre_integration if uses_reference else next(iter(obsm.values()))
    obsm["_pre_integration"] = np.asarray(reference, dtype=np.float32)
    data = anndata.AnnData(
        obs=pd.DataFrame({"label": labels, "batch": batch}, index=[str(i) for i in range(n_cells)]), obsm=obsm
    )
    bio_spec = BioConservation(**{name: name in bio for name in BIO_METRICS})
    batch_spec = BatchCorrection(**{name: name in batch_set for name in BATCH_METRICS}) if batch_metrics else None
    # scib-metrics' k-means fails with jax_enable_x64 on (its loop mixes float32 and float64), and other
    # libraries in the same process (scvi-tools' dependencies) may turn it on globally
    with jax.enable_x64(False):
        benchmarker = Benchmarker(
            data,
            batch_key="batch",
            label_key="label",
            embedding_obsm_keys=list(embeddings),
            bio_conservation_metrics=bio_spec,
            batch_correction_metrics=batch_spec,
            pre_integrated_embedding_obsm_key="_pre_integration",
            n_jobs=n_jobs,
            progress_bar=False,
        )
        benchmarker.prepare(neighbor_computer=lambda x, k: exact_neighbors(x, k, n_jobs))
        # The Benchmarker calls gc.collect() after every metric; each full collection walks every object of
        # JAX, anndata & co. (60 % of the scoring time of one 700-cell embedding). Freezing the objects that
        # exist now takes them out of those walks without changing any result.
        gc.freeze()
        try:
            with seeded_eigsh(), exact_diffusion_neighbors(n_jobs):
                benchmarker.benchmark()
        finally:
            gc.unfreeze()
        # min_max_scale=False: scaling each metric to [0, 1] across the embeddings of this call would make a
        # method's score depend on which other methods were compared with it
        table = benchmarker.get_results(min_max_scale=False, clean_names=False).drop(index="Metric Type")
    kept = {
        column: name
        for column, name in _BENCHMARKER_NAMES.items()
        if with_aggregates or name not in ("bio_conservation", "batch_correction", "total")
    }
    return {
        key: {kept[column]: float(value) for column, value in table.loc[key].items() if column in kept}
        for key in embeddings
    }


def seeded_eigsh():
    """Context in which scipy's ``eigsh`` starts ARPACK from a fixed random vector instead of fresh OS entropy.

    scib-metrics' kBET embeds each label's neighbour graph with a diffusion map computed by ``eigsh`` with
    no start vector (``scib_metrics.utils._diffusion_nn._compute_eigen``). Its leading eigenvalue is 1 up
    to ARPACK's rounding, and scib-metrics scales that component by 1 when the float32 value is exactly 1
    and by e / (1 − e) ≈ 1.7·10⁷ when it is 0.99999994: the start vector decides which, and with it the
    label's diffusion neighbours (one embedding scored twenty times: kBET 0.170 eighteen times, 0.240
    twice). A generator seeded afresh for every call makes each decomposition a function of its graph
    alone. The patch is scipy's own function, so it holds only while the Benchmarker runs in this context.
    """
    from unittest import mock

    import scipy.sparse.linalg

    return mock.patch.object(scipy.sparse.linalg, "eigsh", partial(scipy.sparse.linalg.eigsh, rng=0))


def exact_diffusion_neighbors(n_jobs: int = 1):
    """Context in which kBET's diffusion neighbours are exact (``exact_neighbors``), not pynndescent's.

    scib-metrics' kBET finds each label's neighbours in a diffusion-map embedding with pynndescent
    (``scib_metrics.utils._diffusion_nn``), whose numba kernels cannot be cached on disk ("uses dynamic
    globals"): every scoring process compiled them again, ≈ 30 s before the first embedding of a
    700-cell dataset. Exact search costs milliseconds at the sizes kBET searches (one label's cells, in
    2–100 diffusion components), needs no compiling, and is what pynndescent approximates.
    """
    from unittest import mock

    from scib_metrics import nearest_neighbors

    return mock.patch.object(nearest_neighbors, "pynndescent", partial(exact_neighbors, n_jobs=n_jobs))


def exact_neighbors(x: np.ndarray, n_neighbors: int, n_jobs: int = 1):
    """Exact k nearest neighbours (self first) as scib-metrics' ``NeighborsResults``.

    Replaces the Benchmarker's default pynndescent: exact and deterministic at any thread count.
    """
    from scib_metrics.nearest_neighbors import NeighborsResults
    from sklearn.neighbors import NearestNeighbors

    distances, indices = NearestNeighbors(n_neighbors=n_neighbors, n_jobs=n_jobs).fit(x).kneighbors(x)
    return NeighborsResults(indices=indices, distances=distances)


def _check_inputs(embeddings, n_cells, batch, pre_integration, batch_metrics: bool, n_scored: int) -> None:
    if not embeddings:
        raise ValueError("no embeddings to score")
    for key, x in embeddings.items():
        if np.shape(x)[0] != n_cells or np.ndim(x) != 2:
            raise ValueError(f"embedding {key!r} has shape {np.shape(x)}; expected ({n_cells}, d)")
        if not np.isfinite(x).all():
            raise ValueError(f"embedding {key!r} has non-finite values")
    if len(batch) != n_cells:
        raise ValueError(f"{len(batch)} batch values for {n_cells} labels")
    if n_scored <= _MAX_NEIGHBOURS:
        raise ValueError(
            f"scIB metrics need more than {_MAX_NEIGHBOURS} cells (their largest neighbourhood); got {n_scored}"
        )
    if not batch_metrics:
        return
    n_batches = len(np.unique(batch))
    if n_batches < 2:
        raise ValueError(
            f"batch-correction metrics need ≥ 2 batches; {n_batches} found "
            "(pass batch_metrics=False to score bio conservation only)"
        )
    if pre_integration is None or np.shape(pre_integration)[0] != n_scored:
        raise ValueError(f"batch metrics need pre_integration with {n_scored} rows (the PCR comparison's reference)")


def marker_types(markers: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """Marker gene → the cell types that list it, in listing order (one type: a usable marker)."""
    types_of: dict[str, set[str]] = {}
    for cell_type, genes in markers.items():
        for gene in dict.fromkeys(genes):
            types_of.setdefault(gene, set()).add(cell_type)
    return types_of


def marker_clustering(
    gene_vectors: np.ndarray, gene_names: Sequence[str], markers: Mapping[str, Sequence[str]]
) -> dict:
    """How well marker genes cluster by cell type in a gene-embedding space (sciLaMA Table S7).

    Each marker gene found in ``gene_names`` is a point labelled by its cell type (a gene listed under
    several types is ambiguous and skipped). Returns ``davies_bouldin`` (lower is better),
    ``calinski_harabasz`` (higher is better), ``n_genes`` and ``n_types`` scored, ``n_missing``
    (listed markers absent from ``gene_names``) and ``n_ambiguous`` (found under several types).
    """
    from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score

    row_of = {gene: i for i, gene in enumerate(gene_names)}
    types_of = marker_types(markers)
    found = [(gene, next(iter(types))) for gene, types in types_of.items() if gene in row_of and len(types) == 1]
    n_missing = sum(gene not in row_of for gene in types_of)
    n_ambiguous = sum(gene in row_of and len(types) > 1 for gene, types in types_of.items())
    n_types = len({cell_type for _, cell_type in found})
    if n_types < 2 or len(found) <= n_types:
        raise ValueError(
            f"marker clustering needs ≥ 2 cell types and more marker genes than types; found "
            f"{len(found)} genes of {n_types} types ({n_missing} listed markers not in the gene "
            f"table, {n_ambiguous} under several types)"
        )
    vectors = np.asarray(gene_vectors, dtype=np.float64)[[row_of[gene] for gene, _ in found]]
    types = [cell_type for _, cell_type in found]
    return {
        "davies_bouldin": float(davies_bouldin_score(vectors, types)),
        "calinski_harabasz": float(calinski_harabasz_score(vectors, types)),
        "n_genes": len(found),
        "n_types": n_types,
        "n_missing": n_missing,
        "n_ambiguous": n_ambiguous,
    }
