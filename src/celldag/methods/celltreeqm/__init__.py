"""CellTreeQM (Kuang, Qiu, Kim, ICML 2025): metric learning of lineage-tree leaves, rebuilt by NJ.

One module serves three method ids that share the encoder and differ in the quartet loss
(``params["loss"]``: additivity = CellTreeQM, triplet, quadruplet), each under four supervision
settings (``params["setting"]``).
"""

from celldag.methods.celltreeqm.train import run

__all__ = ["run"]
