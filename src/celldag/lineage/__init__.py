"""Lineage trees: a minimal Newick tree type and metrics comparing reconstructed trees to the truth."""
