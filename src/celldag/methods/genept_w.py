"""GenePT-w (Chen & Zou 2024): a cell is the expression-weighted average of static gene embeddings.

cell_i = Σ_j x_ij g_j / Σ_j x_ij over the genes j that have a vector in the table, with x the
log-normalised expression — the form sciLaMA's Table 1 uses as its zero-shot baseline. GenePT's own
code sums x_ij g_j over all genes (a gene without a vector counts as 0) and divides by the gene
count, a per-cell rescaling of the same direction. A cell that expresses none of the embedded genes
has no evidence at all and is put at the origin (counted in ``uns``).

Registry params: ``embedding`` (the provider), ``normalize`` (L2-normalise each gene vector first;
default false as in GenePT — ada-002 and MiniLM vectors are unit-length anyway). No training, no seed.
"""

from __future__ import annotations

import numpy as np

from celldag.embeddings import match_genes
from celldag.methods import MethodResult, NotApplicable
from celldag.representation.track import RepresentationInput


def weighted_average(expression, vectors: np.ndarray) -> tuple[np.ndarray, int]:
    """(cells × d expression-weighted averages of ``vectors``, number of cells with zero total weight).

    ``expression`` (cells × genes, non-negative, dense or scipy sparse) has one column per row of ``vectors``.
    """
    totals = np.asarray(expression.sum(axis=1), dtype=np.float64).ravel()
    weighted = np.asarray(expression @ np.asarray(vectors, dtype=np.float64))
    empty = totals == 0
    weighted[~empty] /= totals[~empty, None]
    weighted[empty] = 0.0
    return weighted, int(empty.sum())


def run(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    del seed  # deterministic: a fixed weighted average

    table = inputs.gene_embedding
    if table.not_applicable:  # e.g. mouse genes against a human table: never a run on the few names that match
        raise NotApplicable(table.not_applicable)
    columns, vectors, n_missing = match_genes(list(inputs.gene_names), table)
    if len(columns) == 0:
        raise NotApplicable(f"no gene of the dataset has a vector in {table.provider!r}")
    vectors = np.asarray(vectors, dtype=np.float64)
    if params["normalize"]:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0)  # an all-zero vector stays zero
    embedding, n_empty = weighted_average(inputs.lognorm[:, columns], vectors)
    return MethodResult(
        embedding=embedding.astype(np.float32),
        uns={
            "genes": {"n_modelled": len(columns), "n_without_embedding": n_missing},
            "n_cells_without_expression": n_empty,
            **table.mapping_facts(),
        },
    )


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = ("embedding", "normalize")
