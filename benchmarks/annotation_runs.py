"""What the annotation benchmarks (shift_test.py, unknown_types.py) share: their arguments — results/runs folders and
a dataset — the annotation folders under them, and a rate with its Wilson 95 % interval."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path


def parser(doc: str) -> argparse.ArgumentParser:
    """RUNS (results/runs folders) and --dataset; the caller adds its own options."""
    made = argparse.ArgumentParser(description=doc.splitlines()[0])
    made.add_argument("runs", nargs="+", type=Path)
    made.add_argument("--dataset", default="*", help="one dataset's runs (default: every dataset's)")
    return made


def annotation_folders(runs: Path, dataset: str) -> Iterator[Path]:
    """Every chained annotation folder (`…/seed<s>/annotation-<key>/`: input.h5ad, <classifier>/output.h5ad)."""
    yield from sorted(runs.glob(f"{dataset}/*/*/*/seed*/annotation-*"))


def rate(k: int, n: int) -> str:
    """k/n with its Wilson 95 % interval."""
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return f"{k / n:.3f} [{low:.3f}, {high:.3f}] ({k}/{n})"
