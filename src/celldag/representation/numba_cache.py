"""On-disk caching of the numba kernels of umap-learn that celldag's representation code compiles in every process.

Both scanpy's neighbour graph (the report's UMAPs) and scib-metrics (its Leiden NMI/ARI graph, through
``NeighborsResults.knn_graph_connectivities`` → umap-learn's ``fuzzy_simplicial_set``) call umap-learn's
``smooth_knn_dist`` and ``compute_membership_strengths``, which umap-learn compiles without
``cache=True``: seconds of each new process's time before its first graph.
"""

from __future__ import annotations

from functools import cache


@cache  # once a process
def cache_umap_graph_kernels() -> None:
    """Let numba cache umap-learn's two graph kernels on disk, as it already does the layout's.

    umap-learn compiles ``smooth_knn_dist`` and ``compute_membership_strengths`` (what scanpy's
    neighbours and scib-metrics' connectivities call) without ``cache=True``: about 8 s in every new
    process, more than drawing ten UMAPs of 700 cells. Caching changes where the compiled code comes
    from, not what it computes. numba keeps the cache beside umap-learn's sources (or under
    ``NUMBA_CACHE_DIR``), keyed by the kernel's source, signature and the CPU it was compiled for.
    """
    import umap.umap_ as umap_module

    for kernel in (umap_module.smooth_knn_dist, umap_module.compute_membership_strengths):
        if hasattr(kernel, "enable_caching"):  # a numba dispatcher (umap-learn ≥ 0.5)
            kernel.enable_caching()
