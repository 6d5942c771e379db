"""celldag: a reproducible Snakemake benchmark of single-cell ML methods against their baselines."""

__version__ = "0.3.0"
