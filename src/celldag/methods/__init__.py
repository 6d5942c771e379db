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
class MethodInput:
    names: tuple[str, ...]              # leaf (lineage track) or cell names, one per row
    features: np.ndarray                # (n, p) the features the result is evaluated on
    train_features: np.ndarray | None   # (n, p) an independent training replicate, when the dataset has one
    tree_newick: str | None = None      # lineage track: the dataset's true tree. A method may use only what
                                        # its supervision setting allows (see celldag.lineage.supervision)
    work_dir: str | None = None         # the run's directory: checkpoints live here, so a killed job resumes


@dataclass(frozen=True)
class MethodResult:
    embedding: np.ndarray | None = None  # (n, d) the representation whose distances the method uses
    tree_newick: str | None = None       # lineage methods: the reconstructed tree over `names`
    uns: dict = field(default_factory=dict)  # extra JSON-able facts stored in the output's uns, e.g.
                                             # {"supervision": {...}} that evaluation needs
