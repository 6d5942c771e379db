"""Method interface: every method is a function ``run(inputs, params, seed) -> MethodResult``.

Methods see arrays, never AnnData: the runner (``celldag.jobs.runner``) reads the prepared dataset, builds
its track's input (``LineageInput``, ``RepresentationInput``, …: the track's ``method_input``), and
writes the ``MethodResult`` as a contract-checked output file. A method lists the optional inputs it
cannot do without under ``needs`` in config/methods.yaml; the runner records ``not_applicable`` when a
dataset lacks one, so ``run`` never sees such a dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class NotApplicable(Exception):
    """The method cannot run on this dataset (recorded as status ``not_applicable``, not as a failure)."""


@dataclass(frozen=True)
class MethodResult:
    """What a method's ``run`` returns; the runner writes it as a contract-checked output file.

    Attributes:
        embedding: ``(n, d)`` the representation whose distances the method uses.
        tree_newick: Lineage methods: the reconstructed tree over the input's ``names``.
        gene_embedding: ``(genes, k)`` contextual gene embedding, its rows ``gene_ids``.
        gene_ids: The genes the method modelled (e.g. those with a static embedding).
        obsm: Per-cell matrices a track's contract names (annotation: class probabilities), written to the
            output's obsm.
        uns: Extra JSON-able facts stored in the output's uns that evaluation needs, e.g.
            ``{"supervision": {...}}``.
    """

    embedding: np.ndarray | None = None
    tree_newick: str | None = None
    gene_embedding: np.ndarray | None = None
    gene_ids: tuple[str, ...] | None = None
    obsm: dict = field(default_factory=dict)
    uns: dict = field(default_factory=dict)
