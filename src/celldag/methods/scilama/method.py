"""sciLaMA as a pipeline method: ``run(inputs, params, seed)`` around ``fit_scilama``.

The variants are the paper's model and its ablations, all on the same code path:
``gene_input`` embeddings (a provider's static table), self_informed (Xᵀ of training cells), random
and shuffled (drawn from the provider's table per run seed, so the paired comparison over seeds sees
fresh controls), and ``use_gene_vae: false`` for the cell VAE alone. The output records ``gene_input``:
with the run's seed it names the static vectors the run used (``static_vectors``).
"""

from __future__ import annotations

import numpy as np

from celldag.embeddings import match_genes
from celldag.methods import MethodResult, NotApplicable
from celldag.methods.scilama.train import fit_scilama
from celldag.representation.scoring import CONTROLS, static_vectors
from celldag.representation.track import RepresentationInput

NEEDS_TABLE = ("embeddings", *CONTROLS)


def modelled_genes(inputs: RepresentationInput, params: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """(columns of ``inputs.features`` to model, their static vectors or None).

    Genes without a static embedding are dropped entirely, as in the paper (nothing is imputed).
    """
    all_columns = np.arange(inputs.features.shape[1])
    if not params["use_gene_vae"] or params["gene_input"] not in NEEDS_TABLE:
        return all_columns, None
    if inputs.gene_embedding is None:
        raise ValueError(f"gene_input {params['gene_input']!r} needs a gene-embedding table (params 'embedding')")
    if inputs.gene_embedding.not_applicable:  # e.g. mouse genes against a human table: never a run on a few matches
        raise NotApplicable(inputs.gene_embedding.not_applicable)
    columns, vectors, _missing = match_genes(list(inputs.gene_names), inputs.gene_embedding)
    if len(columns) < 2:
        raise ValueError(
            f"only {len(columns)} of {len(inputs.gene_names)} genes have an embedding "
            f"in {inputs.gene_embedding.provider!r}"
        )
    return np.asarray(columns), vectors


def run(inputs: RepresentationInput, params: dict, seed: int) -> MethodResult:
    columns, vectors = modelled_genes(inputs, params)
    fit_params = params
    if vectors is not None:  # a control is drawn by static_vectors, which the scorer calls too, not inside the fit
        vectors = static_vectors(vectors, params["gene_input"], seed)
        fit_params = {**params, "gene_input": "embeddings"}
    batch_codes = np.unique(np.asarray(inputs.batch), return_inverse=True)[1]
    result = fit_scilama(
        expression=np.asarray(inputs.features[:, columns], dtype=np.float32),
        train_mask=inputs.train_mask,
        batch=batch_codes,
        gene_embeddings=vectors,
        params=fit_params,
        seed=seed,
        work_dir=inputs.work_dir,
    )
    gene_ids = tuple(inputs.gene_names[i] for i in columns)
    return MethodResult(
        embedding=result.cell_embedding,
        gene_embedding=result.gene_embedding,
        gene_ids=gene_ids if result.gene_embedding is not None else None,
        uns={
            "gene_input": params["gene_input"],
            "genes": {"n_modelled": len(columns), "n_without_embedding": len(inputs.gene_names) - len(columns)},
            "training": {"phases": result.phase_facts, "device": result.device},
            # how the dataset's Ensembl ids met the table's symbols, when they did (its note reaches the leaderboard)
            **(inputs.gene_embedding.mapping_facts() if vectors is not None else {}),
        },
    )


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = (
    "embedding",
    "gene_input",
    "use_gene_vae",
    "use_batch",
    "mode",
    "hidden_dims",
    "gene_hidden_dims",
    "latent_dim",
    "dropout",
    "lr",
    "weight_decay",
    "lr_decay",
    "batch_size",
    "max_epochs",
    "kl_warmup_epochs",
    "kl_ramp_epochs",
    "patience",
    "min_delta",
    "gamma",
    "checkpoint_every",
    "checkpoint_seconds",
    "device",
)
