"""scVI (Lopez et al. 2018, scvi-tools) on raw counts; the cell embedding is the posterior mean of z.

Registry params: ``use_batch`` (batch as the model's categorical covariate: "scVI-batch" vs
"scVI-raw" in sciLaMA's Table 1), ``n_latent``, ``n_layers``, ``n_hidden``, ``max_epochs`` (null:
scvi-tools' own rule, min(round(20,000 / cells · 400), 400)), ``early_stopping``, ``batch_size``,
``accelerator`` (auto | cpu | gpu). The registry's values are scvi-tools' defaults, what a user who
calls ``SCVI(adata).train()`` gets: 400 epochs up to 20,000 cells, no early stopping. celldag's earlier
200 epochs with early stopping on the validation ELBO stopped a 700-cell model at epoch 157 with batch
correction 0.77 (iLISI 0.77), against 0.87 (0.85) after scvi-tools' 400 (docs/representation.md).

Cells: fitted on the training cells, as every method of the track (docs/representation.md); the
validation cells are scVI's validation set (only read with ``early_stopping: true``), then every cell
is embedded. Seeded through ``scvi.settings.seed``; on CPU two runs of a seed give the same embedding
bit for bit (tests/unit/representation/test_representation_baselines.py).
"""

from __future__ import annotations

import numpy as np

from celldag.methods import MethodResult
from celldag.representation.track import RepresentationInput


def run(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    import anndata
    import pandas as pd
    import scvi
    from scipy import sparse

    scvi.settings.seed = seed
    n_cells = inputs.counts.shape[0]
    columns = {"batch": np.asarray(inputs.batch).astype(str)} if params["use_batch"] else {}
    adata = anndata.AnnData(
        X=sparse.csr_matrix(inputs.counts, dtype=np.float32),
        obs=pd.DataFrame(columns, index=[str(i) for i in range(n_cells)]),
    )
    scvi.model.SCVI.setup_anndata(adata, batch_key="batch" if params["use_batch"] else None)
    model = scvi.model.SCVI(
        adata, n_latent=params["n_latent"], n_layers=params["n_layers"], n_hidden=params["n_hidden"]
    )
    train_mask = np.asarray(inputs.train_mask, bool)
    train_idx, val_idx = np.flatnonzero(train_mask), np.flatnonzero(~train_mask)
    model.train(
        max_epochs=params["max_epochs"],
        accelerator=params["accelerator"],
        devices=1,
        batch_size=params["batch_size"],
        early_stopping=params["early_stopping"] and len(val_idx) > 0,
        datasplitter_kwargs={
            "external_indexing": [train_idx, val_idx],
            # a last minibatch of 1–2 cells breaks BatchNorm's training statistics
            "drop_last": 0 < len(train_idx) % params["batch_size"] < 3,
        },
        enable_progress_bar=False,
    )
    embedding = model.get_latent_representation()  # posterior means of every cell
    return MethodResult(
        embedding=np.asarray(embedding, dtype=np.float32),
        uns={"training": {"epochs": len(model.history["elbo_train"]), "device": str(model.device)}},
    )


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = (
    "n_latent",
    "n_layers",
    "n_hidden",
    "max_epochs",
    "batch_size",
    "early_stopping",
    "accelerator",
    "use_batch",
)
