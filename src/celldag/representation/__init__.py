"""Representation track (cell embeddings, batch integration): source data → prepared datasets."""
