"""Distance baselines of the lineage track: raw or PCA features → Euclidean distances → NJ / UPGMA.

Registry params: ``features`` (``raw`` | ``pca``), ``n_components`` (pca only), ``reconstruction``
(``nj`` | ``upgma``). No training: the tree is built from the replicate the result is scored on.
"""

from __future__ import annotations

import numpy as np

from celldag.lineage.reconstruct import euclidean_distances, reconstruct
from celldag.lineage.track import LineageInput
from celldag.lineage.tree import to_newick
from celldag.methods import MethodResult


def pca_scores(features: np.ndarray, n_components: int) -> np.ndarray:
    """Principal-component scores via SVD of the centred data (distances do not depend on the signs)."""
    centred = features - features.mean(axis=0)
    n_components = min(n_components, *centred.shape)
    left, singular, _ = np.linalg.svd(centred, full_matrices=False)
    return left[:, :n_components] * singular[:n_components]


def run(inputs: LineageInput, params: dict, seed: int) -> MethodResult:
    del seed  # deterministic: no randomness in SVD, NJ or UPGMA
    if params["features"] == "pca":
        # on the leaves in name order: the SVD's last bits, and so near-ties in the tree, follow the row order
        order = np.argsort(np.asarray(inputs.names), kind="stable")
        embedding = np.empty((len(order), min(params["n_components"], *inputs.features.shape)))
        embedding[order] = pca_scores(inputs.features[order], params["n_components"])
    elif params["features"] == "raw":
        embedding = np.asarray(inputs.features, dtype=np.float64)
    else:
        raise ValueError(f"params.features must be 'raw' or 'pca', got {params['features']!r}")
    tree = reconstruct(euclidean_distances(embedding), inputs.names, params["reconstruction"])
    return MethodResult(embedding=embedding, tree_newick=to_newick(tree))


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = ("features", "n_components", "reconstruction")
