"""Controls of the representation track: a null and an oracle embedding, run like any method (``kind: control``).

They place each metric's floor and ceiling on the leaderboard. ``null_embedding`` carries no information about the
cells while keeping the shape and spread of the PCA baseline's embedding (``celldag.methods.pca``), so a metric that
rewards it rewards scale or dimension rather than biology; ``oracle_embedding`` is the cell types themselves (one-hot,
plus noise), the best a bio-conservation metric can see. The oracle reads the labels the scores are computed on: its
registry entry lists ``needs: [truth]`` (``RepresentationInput.labels``, None for every other run).
"""

from __future__ import annotations

import numpy as np

from celldag.methods import MethodResult
from celldag.methods.pca import pca_embedding
from celldag.representation.track import RepresentationInput

NULL_KINDS = ("random", "shuffled_pca")
# second entries of the seed sequences: each control draws from its own stream of a run's seed
RANDOM_STREAM, SHUFFLE_STREAM, ORACLE_STREAM = 101, 102, 103


def null_embedding(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    """An embedding without information about the cells, of the PCA baseline's dimension and spread.

    Params: ``kind`` and ``n_components`` (the PCA baseline's, capped by the data's shape alike). The PCA embedding
    is computed as the baseline does (axes fitted on the training cells, every cell projected), then

    - ``"random"``: i.i.d. Gaussian values, mean 0 and each column's standard deviation (over all cells) that of
      the PCA column: the same dimension and per-dimension variance, independent of the expression;
    - ``"shuffled_pca"``: the PCA embedding with its rows permuted across cells: the same values in every column
      (the same marginal distribution), each cell's identity destroyed.

    Deterministic for a seed (``np.random.default_rng([seed, <stream>])``, one stream per kind).
    """
    kind = params.get("kind")
    if kind not in NULL_KINDS:
        raise ValueError(f"null_embedding: kind must be one of {', '.join(NULL_KINDS)}, got {kind!r}")
    pca = pca_embedding(inputs.features, inputs.train_mask, params["n_components"], seed)
    if kind == "random":
        rng = np.random.default_rng([seed, RANDOM_STREAM])
        embedding = rng.normal(size=pca.shape) * pca.std(axis=0)
    else:
        rng = np.random.default_rng([seed, SHUFFLE_STREAM])
        embedding = pca[rng.permutation(pca.shape[0])]
    return MethodResult(embedding=embedding.astype(np.float32), uns={"kind": kind, "n_components": pca.shape[1]})


# the registry params this function reads: any other key is refused when the workflow is parsed
null_embedding.accepted_params = ("kind", "n_components")


def oracle_embedding(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    """The cell types as an embedding: one column per type (the sorted unique labels), 1 in a cell's own type's
    column and 0 elsewhere, plus i.i.d. Gaussian noise of standard deviation ``noise_sd`` (>= 0; 0 gives the bare
    one-hot). Needs the labels (``needs: [truth]`` in the registry entry). Deterministic for a seed."""
    if inputs.labels is None:
        raise ValueError(
            "oracle_embedding reads the cell-type labels: its registry entry must list `needs: [truth]` "
            "(RepresentationInput.labels is None)"
        )
    noise_sd = float(params["noise_sd"])
    if not noise_sd >= 0 or not np.isfinite(noise_sd):
        raise ValueError(f"oracle_embedding: noise_sd must be a finite number >= 0, got {params['noise_sd']!r}")
    classes, index = np.unique(np.asarray(inputs.labels).astype(str), return_inverse=True)
    embedding = np.zeros((index.size, classes.size), dtype=np.float64)
    embedding[np.arange(index.size), index] = 1.0
    rng = np.random.default_rng([seed, ORACLE_STREAM])
    embedding += rng.normal(scale=noise_sd, size=embedding.shape)
    return MethodResult(
        embedding=embedding.astype(np.float32),
        uns={"n_components": int(classes.size), "noise_sd": noise_sd, "classes": classes.tolist()},
    )


oracle_embedding.accepted_params = ("noise_sd",)
