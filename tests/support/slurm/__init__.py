"""Test helpers for SLURM: a throwaway single-node cluster on loopback (``cluster.py``)."""
