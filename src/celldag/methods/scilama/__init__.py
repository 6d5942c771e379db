"""sciLaMA (Hu et al., ICML 2025): a cell VAE and a gene VAE on static LLM gene embeddings, coupled by
inner-product reconstructions and trained in three phases (spec ``shared/specs/scilama.md``).

``run`` is the pipeline entry point (``method.py``); ``fit_scilama`` takes plain arrays.
"""

from celldag.methods.scilama.method import run
from celldag.methods.scilama.train import SciLaMAResult, fit_scilama

__all__ = ["SciLaMAResult", "fit_scilama", "run"]
