"""scIB benchmark files (Luecken et al. 2022, figshare): human pancreas, immune human, lung atlas.

Each file holds normalised values in ``X`` and the raw counts in ``layers["counts"]``; only the
counts are used, and preprocessing starts from them like for any counts source.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from celldag.representation.preprocess import integer_counts, preprocess, split_params

# no defaults: which file and which obs columns differ per scIB dataset, so the registry entry names them
SCIB_PARAMS = {"file": None, "label_key": None, "batch_key": None}


def prepare_scib_h5ad(dataset_id: str, params: Mapping, seed: int, files: Mapping[str, str]):
    """Prepared dataset from the scIB h5ad ``params["file"]`` (labels ``label_key``, batches ``batch_key``)."""
    import anndata
    import pandas as pd

    source, preprocess_params = split_params(params, SCIB_PARAMS, "scib_h5ad")
    missing = [key for key, value in source.items() if not value]
    if missing:
        raise ValueError(f"scib_h5ad params: {missing} must be given")
    name = source["file"]
    if name not in files:
        raise ValueError(f"scib_h5ad needs the file {name!r} (got {sorted(files)})")
    # backed: the normalised X (as large as the counts) stays on disk; obs, var and layers are read
    h5ad = anndata.read_h5ad(os.fspath(files[name]), backed="r")
    try:
        if "counts" not in h5ad.layers:
            raise ValueError(f"{name} has no layers['counts'] (layers: {list(h5ad.layers)})")
        counts = integer_counts(h5ad.layers["counts"], f"{name}: layers['counts']")
        adata = anndata.AnnData(X=counts, obs=pd.DataFrame(h5ad.obs), var=pd.DataFrame(index=h5ad.var_names))
    finally:
        h5ad.file.close()
    return preprocess(adata, label_key=source["label_key"], batch_key=source["batch_key"], seed=seed,
                      params=preprocess_params)
