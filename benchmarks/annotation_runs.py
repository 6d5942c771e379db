"""What the annotation benchmarks (shift_test.py, unknown_types.py, label_shift.py, split_bias.py) share: their
arguments — results/runs folders and a dataset — the annotation folders under them, the classifier outputs in one,
and a rate with its Wilson 95 % interval."""

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


def annotation_tasks(runs: list[Path], dataset: str) -> Iterator[tuple]:
    """(folder, task, each cell's label, each cell's batch) of every annotation folder under the ``runs`` folders."""
    import anndata

    for folder in (folder for each in runs for folder in annotation_folders(each, dataset)):
        task = anndata.read_h5ad(folder / "input.h5ad")
        yield folder, task, task.obs["label"].astype(str).to_numpy(), task.obs["batch"].astype(str).to_numpy()


def ok_outputs(folder: Path, labels) -> Iterator[tuple]:
    """(output, each cell's class index in the output's order, the random-split fit's probabilities) of every
    classifier output of an annotation folder whose status is ok, in path order."""
    import anndata
    import numpy as np

    for path in sorted(folder.glob("*/output.h5ad")):
        output = anndata.read_h5ad(path)
        if output.uns.get("status") != "ok":
            continue
        classes = list(output.uns["classes"])
        truth = np.array([classes.index(label) for label in labels])
        yield output, truth, np.asarray(output.obsm["proba_random"], dtype=np.float64)


def rate(k: int, n: int) -> str:
    """k/n with its Wilson 95 % interval."""
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return f"{k / n:.3f} [{low:.3f}, {high:.3f}] ({k}/{n})"
