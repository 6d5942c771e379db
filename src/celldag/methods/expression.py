"""The prepared expression as the cell embedding: the reference of no representation learning at all.

scIB's "unintegrated" baseline, and the input CellTypist's logistic regression reads when the annotation
track chains on it. Nothing is fitted here (the z-scoring and HVG choice were made once, in preparation).
"""

from __future__ import annotations

from celldag.methods import MethodResult


def run(inputs, params: dict, seed: int) -> MethodResult:
    return MethodResult(embedding=inputs.features, uns={"embedding_dim": int(inputs.features.shape[1])})


run.accepted_params = ()  # nothing to set
