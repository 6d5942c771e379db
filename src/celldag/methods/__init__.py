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
    embedding: np.ndarray | None = None  # (n, d) the representation whose distances the method uses
    tree_newick: str | None = None  # lineage methods: the reconstructed tree over `names`
    gene_embedding: np.ndarray | None = None  # (genes, k) contextual gene embedding, rows = `gene_ids`
    gene_ids: tuple[str, ...] | None = None  # the genes the method modelled (e.g. those with a static embedding)
    obsm: dict = field(default_factory=dict)  # per-cell matrices a track's contract names (annotation: class
    # probabilities), written to the output's obsm
    uns: dict = field(default_factory=dict)  # extra JSON-able facts stored in the output's uns, e.g.
    # {"supervision": {...}} that evaluation needs
