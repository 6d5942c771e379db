"""Method interface: every method module exposes ``run(inputs: MethodInput, params: dict, seed: int)``.

Methods see arrays, never AnnData: the runner (``celldag.runner``) reads the prepared dataset, builds
a ``MethodInput``, and writes the ``MethodResult`` as a contract-checked output file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class NotApplicable(Exception):
    """The method cannot run on this dataset (recorded as status ``not_applicable``, not as a failure)."""


@dataclass(frozen=True)
class GeneTable:
    """Static gene embeddings of one provider: one row of ``vectors`` per gene id."""

    gene_ids: tuple[str, ...]
    vectors: np.ndarray                 # (genes, d) float32
    provider: str = ""


@dataclass(frozen=True)
class MethodInput:
    names: tuple[str, ...]              # leaf (lineage track) or cell names, one per row
    features: np.ndarray                # (n, p) the features the result is evaluated on; representation
                                        # track: scaled log-normalised expression (z-scored, clipped at 10)
    train_features: np.ndarray | None   # (n, p) an independent training replicate, when the dataset has one
    tree_newick: str | None = None      # lineage track: the dataset's true tree. A method may use only what
                                        # its supervision setting allows (see celldag.lineage.supervision)
    work_dir: str | None = None         # the run's directory: checkpoints live here, so a killed job resumes
    # representation track (None on the lineage track). Cell-type labels are never given to methods.
    gene_names: tuple[str, ...] | None = None  # (p,) column names of `features`
    batch: np.ndarray | None = None     # (n,) batch label per cell (strings)
    train_mask: np.ndarray | None = None  # (n,) bool: cells a method may fit on; the rest is validation
    lognorm: np.ndarray | None = None   # (n, p) log-normalised expression before scaling (non-negative)
    counts: object | None = None        # (n, p) raw integer counts (scipy sparse or ndarray) when the dataset has them
    gene_embedding: GeneTable | None = None  # the static gene embeddings the method's params name


@dataclass(frozen=True)
class MethodResult:
    embedding: np.ndarray | None = None  # (n, d) the representation whose distances the method uses
    tree_newick: str | None = None       # lineage methods: the reconstructed tree over `names`
    gene_embedding: np.ndarray | None = None  # (genes, k) contextual gene embedding, rows = `gene_ids`
    gene_ids: tuple[str, ...] | None = None   # the genes the method modelled (e.g. those with a static embedding)
    uns: dict = field(default_factory=dict)  # extra JSON-able facts stored in the output's uns, e.g.
                                             # {"supervision": {...}} that evaluation needs
