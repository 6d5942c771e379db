"""Lineage-track speed against named peers, written to results/bench/lineage_scaling.json.

  nj         tree from a distance matrix: celldag's reconstruct(…, "nj") (scikit-bio; fast_nj from 2,000
             leaves)  vs  Biopython's DistanceTreeConstructor().nj (the official CellTreeQM's), random
             Euclidean points; at 2,000–10,000 leaves celldag's fast_nj  vs  scikit-bio's nj
  quartet    exact quartet distance (celldag: O(n²) on binary trees, up to 10,000 leaves)  vs  its general
             algorithm and enumerating all quartets (tree_metrics.py's peer); Robinson–Foulds (celldag)  vs  DendroPy
  celltreeqm one CellTreeQM training step (input distances D_X/√C computed once)  vs  the same step
             recomputing D_X/√C every step, as the official trainer does
  plan       `snakemake -n` on a generated grid of ~2,000 run_method jobs, and celldag.plan.make_plan alone

Run: .venv/bin/python benchmarks/lineage_scaling.py [--quick] [--only nj quartet celltreeqm plan]
(about 4 min on 2 idle cores; --quick shrinks every size to check that the script works).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from common import ROOT, Section, Table, measure, run_child, run_params, run_sections, series, target, timed
from tree_metrics import random_newick

from celldag.lineage import fast_nj, metrics
from celldag.lineage.metrics import qdist_sampled, quartet_distance, robinson_foulds
from celldag.lineage.quartets import binary_quartet_distance
from celldag.lineage.reconstruct import FAST_NJ_FROM, euclidean_distances, reconstruct, skbio_neighbor_joining
from celldag.lineage.tree import parse_newick, path_distances

SECTIONS = ("nj", "quartet", "celltreeqm", "plan")


# ---------------------------------------------------------------- neighbour joining


def biopython_matrix(distances: np.ndarray, names: list[str]):
    from Bio.Phylo.TreeConstruction import DistanceMatrix

    return DistanceMatrix(names, [distances[i, : i + 1].tolist() for i in range(len(names))])


def biopython_nj(matrix):
    from Bio.Phylo.TreeConstruction import DistanceTreeConstructor

    return DistanceTreeConstructor().nj(matrix)


def same_topology(ours, peer_tree) -> bool:
    from Bio import Phylo

    text = io.StringIO()
    Phylo.write(peer_tree, text, "newick")
    return robinson_foulds(ours, parse_newick(text.getvalue())).distance == 0


def nj_section(quick: bool, out: Section) -> None:
    peer_sizes, own_sizes = ([30, 60], [100, 200]) if quick else ([100, 300], [1000, 2000])
    rng = np.random.default_rng(0)
    reconstruct(euclidean_distances(rng.normal(size=(8, 5))), [f"c{i}" for i in range(8)], "nj")  # imports
    table = Table(
        "Neighbour joining: distance matrix → tree (random Euclidean points, 10 dimensions)",
        ["leaves", "celldag s", "celldag peak MB", "Biopython s", "ratio", "same tree"],
    )
    sizes, seconds, peaks, peer_seconds = [], [], [], []

    def record(n: int, with_peer: bool, repeat: int) -> None:
        names = [f"c{i}" for i in range(n)]
        distances = euclidean_distances(rng.normal(size=(n, 10)))
        ours, peak = measure(lambda: reconstruct(distances, names, "nj"), repeat)
        sizes.append(n), seconds.append(ours), peaks.append(peak)
        peer, same = float("nan"), "–"
        if with_peer:
            matrix = biopython_matrix(distances, names)  # built outside the timed part
            start = time.perf_counter()
            peer_tree = biopython_nj(matrix)
            peer = time.perf_counter() - start
            peer_seconds.append(peer)
            same = "yes" if same_topology(reconstruct(distances, names, "nj"), peer_tree) else "NO"
        table.add(n, ours, peak, peer, peer / ours, same)

    for n in peer_sizes:
        record(n, with_peer=True, repeat=3)
    for n in own_sizes:
        record(n, with_peer=False, repeat=3 if n <= 1000 else 2)
    out.tables.append(table.show())
    out.notes.append(
        f"NJ: celldag's time is the best of 2–3 runs, Biopython's one run; celldag uses scikit-bio's nj "
        f"below {FAST_NJ_FROM:,} leaves and fast_nj from there; peak MB: the rise of the resident set "
        "during celldag's call."
    )
    out.series["NJ (celldag)"] = series("leaves", sizes, seconds, peaks)
    out.series["NJ (Biopython)"] = series("leaves", peer_sizes, peer_seconds, peer=True)
    ratio = peer_seconds[-1] / seconds[len(peer_sizes) - 1]
    at_2000 = dict(zip(sizes, seconds)).get(own_sizes[-1], float("nan"))
    out.targets.append(target(f"NJ vs Biopython at {peer_sizes[-1]} leaves >= 500x", f"{ratio:,.0f}x", ratio >= 500))
    out.targets.append(target(f"NJ at {own_sizes[-1]:,} leaves <= 1 s", f"{at_2000:.2f} s", at_2000 <= 1))
    nj_scale(quick, rng, out)


def same_tree(ours, theirs) -> str:
    """'identical' (node for node, lengths allclose), 'same topology' (RF 0) or 'NO'."""
    if robinson_foulds(ours, theirs).distance != 0:
        return "NO"
    identical = (
        ours.names == theirs.names
        and np.array_equal(ours.parent, theirs.parent)
        and np.allclose(ours.length, theirs.length, rtol=1e-12, atol=1e-12, equal_nan=True)
    )
    return "identical" if identical else "same topology"


def nj_scale(quick: bool, rng: np.random.Generator, out: Section) -> None:
    """fast_nj against scikit-bio's nj (celldag's wrapper) on the matrix as reconstruct passes it (rows in
    name order); scikit-bio only while its n³ estimate stays under 60 s."""
    sizes = [300, 600, 1200] if quick else [2000, 5000, 10000]
    table = Table(
        "Neighbour joining at scale: celldag's fast_nj vs scikit-bio's nj (random Euclidean points, 10 dimensions)",
        ["leaves", "fast_nj s", "fast_nj peak MB", "scikit-bio s", "scikit-bio peak MB", "ratio", "same tree"],
    )
    fast_seconds, fast_peaks, skbio_sizes, skbio_seconds, skbio_peaks = [], [], [], [], []
    for n in sizes:
        names = sorted(f"c{i}" for i in range(n))
        distances = euclidean_distances(rng.normal(size=(n, 10)))
        fast, fast_peak = measure(lambda: fast_nj.neighbor_joining(distances, names), repeat=2 if n <= 5000 else 1)
        fast_seconds.append(fast), fast_peaks.append(fast_peak)
        estimate = skbio_seconds[-1] * (n / skbio_sizes[-1]) ** 3 if skbio_seconds else 0.0
        peer, peer_peak, same = float("nan"), float("nan"), "–"
        if estimate <= 60:
            peer, peer_peak = measure(lambda: skbio_neighbor_joining(distances, names), repeat=1)
            skbio_sizes.append(n), skbio_seconds.append(peer), skbio_peaks.append(peer_peak)
            same = same_tree(fast_nj.neighbor_joining(distances, names), skbio_neighbor_joining(distances, names))
        else:
            out.notes.append(
                f"scikit-bio's nj at {n:,} leaves skipped: ~{estimate:.0f} s estimated (n³) from "
                f"{skbio_sizes[-1]:,} leaves, over the 60 s limit"
            )
        table.add(n, fast, fast_peak, peer, peer_peak, peer / fast, same)
        print(f"  NJ at {n:,} leaves: fast_nj {fast:.2f} s, scikit-bio {peer:.2f} s", flush=True)
    out.tables.append(table.show())
    out.notes.append(
        "NJ at scale: fast_nj's time is the best of 2 runs (one at 10,000 leaves), scikit-bio's one "
        "run; both take the matrix with its rows in name order, as reconstruct passes it (reconstruct "
        "adds that reordering, one copy of the matrix). Peak MB: the rise of the resident set during "
        "the call; the matrix itself (8·n² bytes) is made before it."
    )
    out.series["NJ (fast_nj)"] = series("leaves", sizes, fast_seconds, fast_peaks)
    out.series["NJ (scikit-bio)"] = series("leaves", skbio_sizes, skbio_seconds, skbio_peaks, peer=True)
    for n, limit in zip(sizes[1:], (3, 15)):
        at = dict(zip(sizes, fast_seconds))[n]
        out.targets.append(target(f"NJ at {n:,} leaves <= {limit} s", f"{at:.2f} s", at <= limit))


# ---------------------------------------------------------------- quartet distance and RF


def quartet_section(quick: bool, out: Section) -> None:
    import dendropy
    from dendropy.calculate import treecompare

    # binary trees: the O(n²) algorithm (celldag.lineage.quartets); general: metrics.quartet_distance's own
    sizes, enumerated = (
        ([16, 32, 64, 128], {16, 32}) if quick else ([64, 128, 256, 512, 1000, 2000, 5000, 10000], {64, 128})
    )
    general_up_to = 64 if quick else 512
    rng = np.random.default_rng(0)
    table = Table(
        "Exact quartet distance and Robinson–Foulds on two random binary trees",
        [
            "leaves",
            "quartet s",
            "quartet peak MB",
            "general algorithm s",
            "enumerate all s",
            "ratio",
            "RF s",
            "DendroPy RF s",
            "ratio",
        ],
    )
    quartet_seconds, peaks, general_sizes, general_seconds, peer_sizes, peer_seconds = [], [], [], [], [], []
    rf_seconds, dendropy_seconds = [], []
    for n in sizes:
        first, second = random_newick(n, rng), random_newick(n, rng)
        a, b = parse_newick(first), parse_newick(second)
        ours, peak = measure(lambda: quartet_distance(a, b), repeat=3 if n <= 2000 else 1)
        quartet_seconds.append(ours), peaks.append(peak)
        general = peer = float("nan")
        if n <= general_up_to:
            with binary_dispatch_off():
                general = timed(lambda: quartet_distance(a, b), repeat=1)
                assert quartet_distance(a, b) == binary_quartet_distance(a, b)  # the same float
            general_sizes.append(n), general_seconds.append(general)
        if n in enumerated:
            names = list(a.leaf_names)
            dist_a, dist_b = (path_distances(t, names, topology_only=True) for t in (a, b))
            peer = timed(lambda: qdist_sampled(dist_a, dist_b, 10**12, rng), repeat=1)
            assert abs(quartet_distance(a, b) - qdist_sampled(dist_a, dist_b, 10**12, rng)) < 1e-12
            peer_sizes.append(n), peer_seconds.append(peer)
        taxa = dendropy.TaxonNamespace()
        tree_a, tree_b = (
            dendropy.Tree.get(data=text, schema="newick", taxon_namespace=taxa, rooting="force-unrooted")
            for text in (first, second)
        )
        rf = timed(lambda: robinson_foulds(a, b))
        peer_rf = timed(lambda: treecompare.symmetric_difference(tree_a, tree_b))
        rf_seconds.append(rf), dendropy_seconds.append(peer_rf)
        table.add(n, ours, peak, general, peer, peer / ours, rf, peer_rf, peer_rf / rf)
    out.tables.append(table.show())
    out.series["quartet distance, binary (celldag)"] = series("leaves", sizes, quartet_seconds, peaks)
    out.series["quartet distance, general (celldag)"] = series("leaves", general_sizes, general_seconds)
    out.series["quartet distance (enumerate all)"] = series("leaves", peer_sizes, peer_seconds, peer=True)
    out.series["RF (celldag)"] = series("leaves", sizes, rf_seconds)
    out.series["RF (DendroPy)"] = series("leaves", sizes, dendropy_seconds, peer=True)
    at = dict(zip(sizes, zip(quartet_seconds, peaks)))
    for n, limit in ((128, 2), (256, 2)) if quick else ((2000, 1), (10000, 20)):
        if n in at:
            out.targets.append(
                target(f"exact quartet distance at {n:,} leaves <= {limit} s", f"{at[n][0]:.2f} s", at[n][0] <= limit)
            )
    if not quick:
        out.targets.append(
            target(
                "exact quartet distance at 10,000 leaves: peak memory <= 4 GB",
                f"{at[10000][1]:,.0f} MB",
                at[10000][1] <= 4096,
            )
        )


@contextlib.contextmanager
def binary_dispatch_off():
    """quartet_distance with its general algorithm for binary trees too (the peer of the O(n²) one)."""
    original = metrics.is_binary
    metrics.is_binary = lambda tree: False
    try:
        yield
    finally:
        metrics.is_binary = original


# ---------------------------------------------------------------- CellTreeQM training step


def celltreeqm_params(paper: bool) -> dict:
    """CellTreeQM/supervised at the CPU default sizes or the paper preset's, on the CPU."""
    return run_params("celltreeqm", "supervised", "paper.yaml" if paper else None) | {"device": "cpu"}


def step_runner(x, params: dict, tree_distances: np.ndarray, naive: bool, seed: int):
    """One training step as train_encoder's step_fn, with its phases timed; ``naive`` recomputes D_X/√C."""
    import torch

    from celldag.lineage.supervision import supervised_quartets
    from celldag.methods.celltreeqm.losses import distance_preservation_loss, embedding_distances
    from celldag.methods.celltreeqm.train import build_model, metric_loss, optimizer_for

    torch.manual_seed(seed)
    model = build_model(x.shape[1], params).to(x.device)
    model.train()
    optimizer = optimizer_for(model, params)
    quartet_loss = metric_loss(params)
    rng = np.random.default_rng(seed)
    allowed = np.ones(x.shape[0], dtype=bool)
    scale = x.shape[1] ** 0.5
    input_distances = None if naive else embedding_distances(x) / scale

    def step() -> dict[str, float]:
        clock = [time.perf_counter()]
        quartets, topology = supervised_quartets(tree_distances, params["quartets_per_step"], rng, allowed)
        quartets, topology = torch.as_tensor(quartets, device=x.device), torch.as_tensor(topology, device=x.device)
        optimizer.zero_grad(set_to_none=True)
        clock.append(time.perf_counter())
        target_distances = embedding_distances(x) / scale if naive else input_distances
        clock.append(time.perf_counter())
        distances = embedding_distances(model(x).float())
        preservation = distance_preservation_loss(distances, target_distances, embedding_dim=params["output_dim"])
        loss = params["w_additivity"] * quartet_loss(distances, quartets, topology)
        loss = loss + params["w_distance"] * preservation
        clock.append(time.perf_counter())
        loss.backward()
        clock.append(time.perf_counter())
        optimizer.step()
        clock.append(time.perf_counter())
        phases = ("quartets", "input distances", "forward + loss", "backward", "optimizer")
        return dict(zip(phases, np.diff(clock).tolist()))

    return step


def time_steps(steps: dict, warmup: int, most: int, budget: float) -> dict[str, list[dict]]:
    """Phase times per step of each runner, alternating runners step by step so that a change of load
    hits both alike: ``warmup`` steps each (fewer when one takes over 2 s), then up to ``most`` each
    while within ``budget`` seconds (at least 3)."""
    for run in steps.values():
        start = time.perf_counter()
        for _ in range(warmup):
            run()
            if time.perf_counter() - start > 2:
                break
    timings = {name: [] for name in steps}
    start = time.perf_counter()
    for done in range(1, most + 1):
        for name, run in steps.items():
            timings[name].append(run())
        if done >= 3 and time.perf_counter() - start > budget:
            break
    return timings


def median_total(rows: list[dict]) -> float:
    return statistics.median(sum(row.values()) for row in rows)


def celltreeqm_configs(quick: bool) -> list[tuple[bool, int, int]]:
    """(paper sizes?, leaves, features): every corner at the CPU default sizes; at the paper sizes (a 66M-parameter
    model at 15,000 features, seconds per step on a CPU) the target's pair only."""
    if quick:
        return [(paper, n, c) for paper in (False, True) for n, c in ((16, 200), (32, 1000))]
    default = [(False, n, c) for n in (128, 295) for c in (2000, 15000)]
    return default + [(True, 295, 15000)]


def celltreeqm_section(quick: bool, out: Section) -> None:
    import torch

    table = Table(
        "CellTreeQM: one training step (median of the timed steps after warm-up)",
        [
            "model",
            "leaves",
            "features",
            "steps timed",
            "celldag s/step",
            "recompute D_X s/step",
            "ratio",
            "ratio, celldag + D_X",
            "D_X/√C share of recompute step",
        ],
    )
    breakdown = Table(
        "CellTreeQM: where a step's time goes (median seconds per phase)",
        [
            "model",
            "leaves",
            "features",
            "step",
            "quartets",
            "input distances",
            "forward + loss",
            "backward",
            "optimizer",
        ],
    )
    ratios = {}
    for paper, n, c in celltreeqm_configs(quick):
        params = celltreeqm_params(paper)
        label = "paper (1024 wide, 8 layers)" if paper else "CPU default (64 wide, 2 layers)"
        if paper and quick:
            params, label = params | {"proj_dim": 128, "hidden_dim": 128, "n_layers": 1}, "paper, shrunk (--quick)"
        warmup, most, budget = (1, 3, 0.0) if paper or quick else (3, 10, 8.0)
        tree = parse_newick(random_newick(n, np.random.default_rng(n)))
        tree_distances = path_distances(tree, list(tree.leaf_names), topology_only=True)
        x = torch.randn(n, c, generator=torch.Generator().manual_seed(c))
        runners = {
            name: step_runner(x, params, tree_distances, naive, seed=0)
            for name, naive in (("celldag", False), ("recompute", True))
        }
        timings = time_steps(runners, warmup, most, budget)
        ours, naive = median_total(timings["celldag"]), median_total(timings["recompute"])
        recompute = statistics.median(row["input distances"] for row in timings["recompute"])
        table.add(
            label,
            n,
            c,
            len(timings["celldag"]),
            ours,
            naive,
            naive / ours,
            (ours + recompute) / ours,
            f"{100 * recompute / naive:.0f}%",
        )
        for name, rows in timings.items():
            breakdown.add(label, n, c, name, *(statistics.median(row[phase] for row in rows) for phase in rows[0]))
        ratios[(paper, n, c)] = naive / ours
        print(f"  {label}, N={n}, C={c}: {ours:.3f} vs {naive:.3f} s/step", flush=True)
    n, c = (32, 1000) if quick else (295, 15000)
    paper_ratio, default_ratio = ratios[(True, n, c)], ratios[(False, n, c)]
    measured = f"{paper_ratio:.2f}x (CPU default sizes: {default_ratio:.2f}x)"
    out.targets.append(
        target(
            f"CellTreeQM step vs recomputing D_X at N={n}, C={c:,} (paper sizes) >= 1.5x", measured, paper_ratio >= 1.5
        )
    )
    out.notes.append(
        "CellTreeQM at the paper sizes: the target's (leaves, features) pair only, 1 warm-up and 3 "
        "timed steps (seconds per step on a CPU). `celldag + D_X`: celldag's step time plus the "
        "recompute step's D_X/√C phase, an estimate of the ratio less exposed to load changes. Steps use "
        "torch's default thread count: on a loaded machine its threads contend, and step times jump."
    )
    out.tables += [table.show(), breakdown.show(), celltreeqm_at_scale(quick, out)]


def celltreeqm_at_scale(quick: bool, out: Section) -> str:
    """Steps per second and peak memory of supervised CellTreeQM (CPU default sizes) on simulated trees of
    2,048 and 8,192 leaves: the tree's path distances (quartet sampling), D_X, the attention over all
    leaves and the n × n embedding distances with their gradients."""
    import torch

    from celldag.data.bm import simulate_bm

    table = Table(
        "CellTreeQM at scale: CPU default sizes, bm_default's features (105), supervised",
        ["leaves", "s/step", "steps/s", "peak MB (setup + 3 steps)"],
    )
    params = celltreeqm_params(False)
    for depth in (8, 9) if quick else (11, 13):
        simulation = simulate_bm(
            depth=depth,
            n_signal=45,
            n_noise=40,
            n_spurious=20,
            max_walk=3.0,
            noise_std=1.0,
            measurement_std=1.0,
            seed=0,
        )
        step_seconds = []

        def setup_and_steps() -> None:
            tree = parse_newick(simulation.tree_newick)
            distances = path_distances(tree, list(simulation.leaf_names), topology_only=True)
            step = step_runner(torch.as_tensor(simulation.train, dtype=torch.float32), params, distances, False, 0)
            step_seconds.extend(sum(step().values()) for _ in range(3))

        _, peak = measure(setup_and_steps, repeat=1)
        per_step = statistics.median(step_seconds[1:])  # the first step warms up
        table.add(2**depth, per_step, 1 / per_step, peak)
    if not quick:
        out.targets.append(target("CellTreeQM at 8,192 leaves: peak memory <= 8 GB", f"{peak:,.0f} MB", peak <= 8192))
    return table.show()


# ---------------------------------------------------------------- planning


def workflow_copy(workdir: Path) -> Path:
    """What a checkout holds of the workflow (as tests/conftest.py's copy_workflow)."""
    for name in ("pyproject.toml", "workflow", "config", "envs", "profiles"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, workdir / name)
    return workdir


LINEAGE_METHODS = ["nj_raw", "nj_pca", "upgma_raw", "celltreeqm", "triplet", "quadruplet"]


def grid_config(workdir: Path, n_datasets: int, seeds: list[int]) -> dict:
    """Copies of bm_default with other depths and feature counts in the copy's registry; the config running
    every lineage method on them."""
    registry = workdir / "config/datasets.yaml"
    datasets = yaml.safe_load(registry.read_text())
    base = datasets["bm_default"]
    names = []
    for k in range(n_datasets):
        names.append(f"bm_grid{k}")
        datasets[names[-1]] = copy.deepcopy(base) | {
            "params": {**base["params"], "depth": 3 + k % 5, "n_signal": 40 + k}
        }
    registry.write_text(yaml.safe_dump(datasets, sort_keys=False))
    # a job per seed, as a cluster configuration plans it: the largest DAG of a grid (by default a job runs
    # all seeds of a variant, and the same grid is a fifth as many run_method jobs)
    config = {
        "name": "bench",
        "datasets": names,
        "methods": LINEAGE_METHODS,
        "seeds": seeds,
        "compute": {"job_per_seed": True},
    }
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def dry_run(n_datasets: int, seeds: list[int]) -> dict:
    """One grid in a fresh workflow copy: `snakemake -n` (a child process) and the pure-python planning."""
    from celldag.plan import make_plan
    from celldag.registry import load_config

    with tempfile.TemporaryDirectory() as tmp:
        workdir = workflow_copy(Path(tmp))
        config = grid_config(workdir, n_datasets, seeds)
        start = time.perf_counter()
        loaded, registries = load_config(copy.deepcopy(config), "config.yaml", root=workdir)
        load_seconds = time.perf_counter() - start
        plan_seconds = timed(lambda: make_plan(copy.deepcopy(loaded), registries))
        planned = make_plan(loaded, registries).jobs_per_rule()
        command = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1"]
        seconds, peak_mb, code, output = run_child(command, cwd=workdir)
    if code != 0:
        raise RuntimeError(f"snakemake -n failed:\n{output}")
    listed = {
        parts[0]: int(parts[1])
        for parts in map(str.split, output.splitlines())
        if len(parts) == 2 and parts[1].isdigit()
    }
    return {
        "listed": listed,
        "planned": planned,
        "seconds": seconds,
        "peak_mb": peak_mb,
        "load_seconds": load_seconds,
        "plan_seconds": plan_seconds,
    }


def plan_section(quick: bool, out: Section) -> None:
    grids = [(1, [0, 1]), (3, [0, 1])] if quick else [(3, [0, 1]), (21, [0, 1, 2, 3, 4])]
    table = Table(
        "Planning: dry runs of generated grids (lineage methods × bm_default copies × seeds)",
        [
            "datasets",
            "seeds",
            "run_method jobs",
            "jobs in all",
            "`snakemake -n` s",
            "snakemake peak MB",
            "load_config s",
            "make_plan s",
        ],
    )
    jobs, seconds, plan_seconds = [], [], []
    for n_datasets, seeds in grids:
        run = dry_run(n_datasets, seeds)
        listed, planned = run["listed"], run["planned"]
        table.add(
            n_datasets,
            len(seeds),
            listed.get("run_method", 0),
            listed.get("total", 0),
            run["seconds"],
            run["peak_mb"],
            run["load_seconds"],
            run["plan_seconds"],
        )
        if listed.get("run_method") != planned["run_method"]:
            out.notes.append(
                f"snakemake -n listed {listed.get('run_method')} run_method jobs, make_plan {planned['run_method']}"
            )
        jobs.append(listed.get("total", sum(planned.values())))
        seconds.append(run["seconds"]), plan_seconds.append(run["plan_seconds"])
    out.tables.append(table.show())
    out.series["snakemake -n"] = series("jobs", jobs, seconds)
    out.series["make_plan"] = series("jobs", jobs, plan_seconds)
    out.targets.append(
        target(
            f"`snakemake -n` on {planned['run_method']:,} run_method jobs <= 15 s",
            f"{seconds[-1]:.1f} s",
            seconds[-1] <= 15,
        )
    )


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script works")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    args = parser.parse_args()
    run = {"nj": nj_section, "quartet": quartet_section, "celltreeqm": celltreeqm_section, "plan": plan_section}
    run_sections("lineage_scaling", run, args.only, args.quick)


if __name__ == "__main__":
    main()
