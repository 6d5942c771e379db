"""Method interface: every method module exposes ``run(inputs: MethodInput, params: dict, seed: int)``.

Methods see arrays, never AnnData: the runner (``celldag.runner``) reads the prepared dataset, builds
a ``MethodInput``, and writes the ``MethodResult`` as a contract-checked output file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class NotApplicable(Exception):
    """The method cannot run on this dataset (recorded as status ``not_applicable``, not as a failure)."""


@dataclass(frozen=True)
class MethodInput:
    names: tuple[str, ...]              # leaf (lineage track) or cell names, one per row
    features: np.ndarray                # (n, p) the features the result is evaluated on
    train_features: np.ndarray | None   # (n, p) an independent training replicate, when the dataset has one


@dataclass(frozen=True)
class MethodResult:
    embedding: np.ndarray | None = None  # (n, d) the representation whose distances the method uses
    tree_newick: str | None = None       # lineage methods: the reconstructed tree over `names`
