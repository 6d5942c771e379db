"""The annotation track: calibrated cell-type annotation on cell embeddings."""
