"""Static gene embeddings for the representation track.

``embed_genes`` builds a provider's table for a dataset's genes (``providers``); ``write_table`` /
``read_table`` store it as contract-checked Parquet and ``match_genes`` lines it up with a dataset
(``table``). Annotation text and GO incidence come from ``annotation``; file formats from ``sources``.
"""

from celldag.embeddings.providers import embed_genes
from celldag.embeddings.table import match_genes, read_table, write_table

__all__ = ["embed_genes", "match_genes", "read_table", "write_table"]
