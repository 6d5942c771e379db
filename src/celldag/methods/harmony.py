"""Harmony (Korsunsky et al. 2019, harmonypy) on the PCA of the scaled expression, per batch.

Registry params: ``n_components`` (PCA, fitted on the training cells as in ``celldag.methods.pca``),
``theta`` (diversity penalty), ``max_iter`` (Harmony rounds). Harmony corrects the cells it is given
and has no model to apply to new ones, so it runs on all cells; it sees batches, never labels.
"""

from __future__ import annotations

import numpy as np

from celldag.methods import MethodResult
from celldag.methods.pca import pca_embedding
from celldag.representation.track import RepresentationInput


def run(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    import harmonypy

    pcs = pca_embedding(inputs.features, inputs.train_mask, params["n_components"], seed)
    harmony = harmonypy.run_harmony(
        pcs,
        {"batch": np.asarray(inputs.batch).astype(str)},
        "batch",
        theta=params["theta"],
        max_iter_harmony=params["max_iter"],
        random_state=seed,
        verbose=False,
    )
    return MethodResult(
        embedding=np.asarray(harmony.Z_corr, dtype=np.float32),
        uns={"n_components": pcs.shape[1], "harmony_rounds": len(harmony.kmeans_rounds)},
    )


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = ("n_components", "theta", "max_iter")
