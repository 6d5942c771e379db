"""sciLaMA (Hu et al., ICML 2025): a cell VAE and a gene VAE on static LLM gene embeddings, coupled by
inner-product reconstructions and trained in three phases (spec ``shared/specs/scilama.md``).

``fit_scilama`` takes plain arrays (expression, split, batch, gene embeddings): the pipeline's
``MethodInput`` does not carry gene embeddings, batches or splits yet.
"""

from celldag.methods.scilama.train import SciLaMAResult, fit_scilama

__all__ = ["SciLaMAResult", "fit_scilama"]
