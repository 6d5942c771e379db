"""PCA baseline of the representation track: principal components of the scaled expression.

Registry params: ``n_components`` (capped by the data's shape). The axes are fitted on the training
cells only and every cell is projected on them, the protocol of the learned methods (the validation
cells are never seen while fitting). ARPACK with a seeded start vector: deterministic for a seed.
"""

from __future__ import annotations

import numpy as np

from celldag.methods import MethodResult
from celldag.representation.track import RepresentationInput


def pca_embedding(features: np.ndarray, train_mask: np.ndarray | None, n_components: int, seed: int) -> np.ndarray:
    """Scores of every row on the leading principal axes of the ``train_mask`` rows (all rows if None)."""
    from sklearn.decomposition import PCA

    fit_rows = features if train_mask is None else features[np.asarray(train_mask, dtype=bool)]
    # ARPACK needs k < min(n, p); it beats a full SVD by far on 10⁴ × 10⁴ matrices
    n_components = min(n_components, min(fit_rows.shape) - 1)
    if n_components < 1:
        raise ValueError(f"PCA needs at least 2 training cells and 2 features; got {fit_rows.shape}")
    model = PCA(n_components=n_components, svd_solver="arpack", random_state=seed).fit(fit_rows)
    return model.transform(features)


def run(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    embedding = pca_embedding(inputs.features, inputs.train_mask, params["n_components"], seed)
    return MethodResult(embedding=embedding.astype(np.float32), uns={"n_components": embedding.shape[1]})


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = ("n_components",)
