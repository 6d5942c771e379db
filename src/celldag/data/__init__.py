"""Datasets for celldag: synthetic lineage simulators and loaders."""
