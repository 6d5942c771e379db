"""The commands a user runs: annotate, audit, check, cite, validate, reference (``celldag.cli`` is the door)."""
