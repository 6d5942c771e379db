"""GPU timings (issue 14): CellTreeQM at the paper's sizes and sciLaMA stepwise at 15,000 cells × 13,000 genes.

One prepared script for a machine with a GPU (the test suite never needs one):

  PYTHONPATH=src python benchmarks/gpu.py [--device cuda] [--quick]

- CellTreeQM: N = 295 leaves, C = 15,000 features, the paper's model (config/presets/paper.yaml),
  2,000 training steps of the supervised loss (celldag's step: input distances computed once).
- sciLaMA: the paper's sizes and stepwise schedule (cell, gene, joint phases with early stopping) on a
  synthetic 15,000-cell × 13,000-gene set (rank-20 signal plus noise, three batches) with a random
  384-d gene table, bf16 autocast on CUDA (celldag.training.autocast).

Writes results/bench/gpu.json (device name, s/step, s/epoch per phase, peak GPU memory, revision),
which `benchmarks/run_all.py` puts into docs/performance.md. ``--quick``: tiny sizes, to check on a
CPU that the script runs (its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import datetime
import time

import numpy as np
from common import Section, Table, run_params, target, write_results
from lineage_scaling import celltreeqm_params, step_runner
from run_all import git_revision
from tree_metrics import random_newick

SCILAMA_TARGET_S = 60  # issue 14: stepwise on 15k cells within a minute on one H200 (the paper: 759 s on an A100)


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_gpu_mb(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else float("nan")


def celltreeqm(device: str, quick: bool, table: Table, out: Section) -> None:
    import torch

    from celldag.lineage.tree import parse_newick, path_distances

    n_leaves, n_features, steps = (16, 200, 5) if quick else (295, 15000, 2000)
    params = celltreeqm_params(paper=not quick)  # the step runs where x is
    tree = parse_newick(random_newick(n_leaves, np.random.default_rng(n_leaves)))
    tree_distances = path_distances(tree, list(tree.leaf_names), topology_only=True)
    x = torch.randn(n_leaves, n_features, generator=torch.Generator().manual_seed(0)).to(device)
    step = step_runner(x, params, tree_distances, naive=False, seed=0)
    for _ in range(3):  # warm-up: kernels chosen, memory pools filled
        step()
    synchronize(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    seconds = time.perf_counter() - start
    table.add("CellTreeQM (supervised)", f"{n_leaves} leaves × {n_features:,} features", f"{steps} steps",
              seconds, f"{seconds / steps:.4f} s/step", peak_gpu_mb(device))  # fmt: skip


def synthetic_expression(n_cells: int, n_genes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scaled expression with a rank-20 signal and a per-batch shift, and the batch codes (3 batches)."""
    batch = rng.integers(0, 3, n_cells)
    signal = rng.normal(size=(n_cells, 20)).astype(np.float32) @ rng.normal(size=(20, n_genes)).astype(np.float32)
    shift = rng.normal(scale=0.5, size=(3, n_genes)).astype(np.float32)[batch]
    x = signal + shift + rng.normal(size=(n_cells, n_genes)).astype(np.float32)
    return (x - x.mean(axis=0)) / x.std(axis=0), batch


def scilama(device: str, quick: bool, table: Table, out: Section) -> None:
    import torch

    from celldag.methods.scilama.train import fit_scilama

    n_cells, n_genes = (300, 200) if quick else (15000, 13000)
    params = run_params("scilama", "text", "paper.yaml") | {"device": device}
    if quick:
        params |= {"max_epochs": 4, "kl_warmup_epochs": 1, "kl_ramp_epochs": 1}
    rng = np.random.default_rng(0)
    x, batch = synthetic_expression(n_cells, n_genes, rng)
    train_mask = rng.random(n_cells) < 0.8
    genes = rng.normal(size=(n_genes, 384)).astype(np.float32)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = fit_scilama(x, train_mask, batch, genes, params, seed=0, work_dir=None)
    seconds = time.perf_counter() - start
    phases = result.phase_facts
    per_epoch = ", ".join(f"{name} {facts['seconds'] / facts['epochs']:.3f} s/epoch ({facts['epochs']} epochs)"
                          for name, facts in phases.items())  # fmt: skip
    table.add("sciLaMA stepwise (text, paper sizes)", f"{n_cells:,} cells × {n_genes:,} genes",
              f"{sum(f['epochs'] for f in phases.values())} epochs", seconds, per_epoch, peak_gpu_mb(device))  # fmt: skip
    out.targets.append(target(f"GPU: sciLaMA stepwise on {n_cells:,} cells <= {SCILAMA_TARGET_S} s ({result.device})",
                              f"{seconds:.0f} s", None if quick else seconds <= SCILAMA_TARGET_S))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs")
    args = parser.parse_args()
    import torch

    from celldag.training import select_device

    device = str(select_device(args.device))
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    out = Section()
    table = Table(f"On {name} ({device}), {datetime.datetime.now(datetime.UTC):%Y-%m-%d}, revision {git_revision()}",
                  ["model", "size", "work", "seconds", "per step / epoch", "peak GPU MB"])  # fmt: skip
    celltreeqm(device, args.quick, table, out)
    scilama(device, args.quick, table, out)
    out.tables.append(table.show())
    out.notes.append(
        "benchmarks/gpu.py on a GPU machine (never run by `make bench`): CellTreeQM steps after 3 "
        "warm-up steps, synchronised; sciLaMA one whole stepwise fit with early stopping, bf16 autocast."
    )
    write_results("gpu", args.quick, out.series, out.tables, out.targets, out.notes)


if __name__ == "__main__":
    main()
