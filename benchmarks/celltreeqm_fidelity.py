"""celldag's CellTreeQM beside the official code's learning curves on ../shared/fidelity/bm_reference.npz.

The reference (``../shared/fidelity/README.md``) ran the authors' model and losses at fixed sizes and
step counts; this runs celldag's ``run`` and scores the test replicate the same way (NJ on embedding
distances, RF, QDist on the file's 20,000 evaluation quartets, K-/U-QDist by the level-2 partition):

- HLP level 2, 4,399 steps, at the authors' protocol (``AUTHORS_PROTOCOL``: model 256/256/4 layers/2
  heads/128, AdamW 1e-4, 2,048 quartets, 0.1·L_D + 20·L_P, the code's margin sign and "mismatched"
  selection), the last step's model (the official reports no selection): with the official quartet
  ordering (``quartet_order: sorted``) and celldag's default (``shuffled``), each on the leaves as given
  (numbered in tree order) and relabelled by a seeded random permutation;
- supervised, a budget of 3,296 steps, at the authors' sizes ("paper") and at the registry's defaults
  ("default": config/methods.yaml, only the step budget raised), each with the three model selections:
  ``validation_replicate`` (a third replicate: the file's noise-free profile plus fresh N(0, 1)
  measurement noise, as its two replicates were made), ``holdout_refit`` and ``none``; 3 seeds each.

  .venv/bin/python benchmarks/celltreeqm_fidelity.py [--reference PATH] [--scale 1.0] [--jobs 2] [--only supervised]

``--scale 0.05`` runs 5 % of the steps (a smoke test of the script). Each run uses one thread;
``--jobs`` runs that many side by side. Prints one table per part; times are per run, on this machine.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from celldag.methods.celltreeqm.train import AUTHORS_PROTOCOL, AUTHORS_STEPS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "fidelity" / "bm_reference.npz"
OFFICIAL = {  # ../shared/fidelity/README.md, last step of each curve (seed 42) and the z-scored input
    "hlp": {"K-QDist": 0.0162, "U-QDist": 0.390, "RF": 0.944},
    "supervised": {"QDist": 0.0262, "RF": 0.448},
    "input": {"RF": 0.976, "QDist": 0.5520, "K-QDist": 0.5524, "U-QDist": 0.5499},
}
SIZES = {"paper": AUTHORS_PROTOCOL, "default": {}}  # default: the registry's own sizes, lr and loss settings
COMMON = {"standardize_input": True, "device": "cpu", "reconstruction": "nj", "checkpoint_every": 10**6}
HLP = {
    "setting": "high_level_partition",
    "level": 2,
    "selection": "none",
    "steps": AUTHORS_STEPS,
    "validate_every": 100,
}
SUPERVISED_STEPS, SEEDS = 3296, (42, 43, 44)
SELECTIONS = ("validation_replicate", "holdout_refit", "none")
VALIDATION_NOISE_SEED = 0x7A11


def runs(scale: float) -> list[tuple[str, dict, int]]:
    """(name, params, seed) of every run, the longest first (holdout_refit trains twice)."""
    hlp = AUTHORS_PROTOCOL | HLP | {"steps": max(1, round(AUTHORS_STEPS * scale))}
    table = [
        (f"HLP {order}, leaves {leaves}", hlp | {"quartet_order": order, "leaf_order": leaves}, 42)
        for order in ("sorted", "shuffled")
        for leaves in ("given", "relabelled")
    ]
    steps = max(2, round(SUPERVISED_STEPS * scale))
    for sizes in SIZES:
        for selection in SELECTIONS:
            params = SIZES[sizes] | {
                "setting": "supervised",
                "selection": selection,
                "steps": steps,
                "leaf_order": "given",
                "quartet_order": "shuffled",
            }
            table += [(f"supervised, {sizes} sizes, {selection}, seed {seed}", params, seed) for seed in SEEDS]
    cost = {"HLP": 3, "paper sizes, holdout": 4, "paper": 2, "default sizes, holdout": 1}
    return sorted(
        table, key=lambda job: -next((c for key, c in cost.items() if all(k in job[0] for k in key.split(", "))), 0)
    )


def one_run(job: tuple[str, dict, int], reference: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from celldag.lineage.track import LineageInput
    from celldag.methods.celltreeqm import run
    from celldag.registry import read_yaml

    data = np.load(reference)
    name, overrides, seed = job
    params = read_yaml(ROOT / "config/methods.yaml")["celltreeqm"]["params"] | COMMON | overrides
    clean = data["features_clean"].astype(np.float64)
    validation = clean + np.random.default_rng(VALIDATION_NOISE_SEED).normal(0.0, 1.0, size=clean.shape)
    inputs = LineageInput(
        names=tuple(str(n) for n in data["leaf_names"]),
        features=data["features_test"].astype(np.float64),
        train_features=data["features_train"].astype(np.float64),
        tree_newick=str(data["newick"]),
        validation_features=validation,
        validation_leaves=np.ones(len(clean), dtype=bool),
    )
    started = time.perf_counter()
    result = run(inputs, params, seed)
    seconds = time.perf_counter() - started
    return {"name": name, "seconds": seconds, "training": result.uns["training"], **scores(data, result)}


def scores(data, result) -> dict[str, float]:
    from celldag.lineage.metrics import qdist_on_quartets, robinson_foulds
    from celldag.lineage.reconstruct import euclidean_distances
    from celldag.lineage.supervision import clade_labels, known_quartets
    from celldag.lineage.tree import parse_newick

    truth = parse_newick(str(data["newick"]))
    names = [str(n) for n in data["leaf_names"]]
    estimated, reference, quartets = (
        euclidean_distances(result.embedding),
        data["ref_dm_topology"],
        data["eval_quartets"],
    )
    known = known_quartets(quartets, clade_labels(truth, names, 2))
    return {
        "RF": robinson_foulds(parse_newick(result.tree_newick), truth).normalized,
        "QDist": qdist_on_quartets(estimated, reference, quartets),
        "K-QDist": qdist_on_quartets(estimated, reference, quartets[known]),
        "U-QDist": qdist_on_quartets(estimated, reference, quartets[~known]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=str(REFERENCE))
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the reference step counts")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run only the runs whose name contains this, e.g. supervised")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    jobs = [job for job in runs(args.scale) if args.only in job[0]]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_run, jobs, [args.reference] * len(jobs)))
    print(f"reference {args.reference}; steps × {args.scale}; one thread per run, {args.jobs} side by side\n")
    print("| run | steps | RF | QDist | K-QDist | U-QDist | s |")
    print("|---|---|---|---|---|---|---|")
    for row in (r for r in results if r["name"].startswith("HLP")):
        print(
            f"| {row['name']} | {row['training']['steps']} | {row['RF']:.3f} | {row['QDist']:.4f} | "
            f"{row['K-QDist']:.4f} | {row['U-QDist']:.4f} | {row['seconds']:.0f} |"
        )
    print(
        f"| official HLP sorted, leaves given (seed 42) | {AUTHORS_STEPS} | {OFFICIAL['hlp']['RF']:.3f} | – | "
        f"{OFFICIAL['hlp']['K-QDist']:.4f} | {OFFICIAL['hlp']['U-QDist']:.4f} | – |\n"
    )
    print("| supervised | selection | steps (per seed) | RF mean ± sd | QDist mean ± sd | s per run |")
    print("|---|---|---|---|---|---|")
    groups: dict[str, list[dict]] = {}
    for row in (r for r in results if r["name"].startswith("supervised")):
        groups.setdefault(row["name"].rsplit(", seed", 1)[0], []).append(row)
    for name, rows in groups.items():
        rf, qdist = [r["RF"] for r in rows], [r["QDist"] for r in rows]
        spread = lambda values: np.std(values, ddof=1) if len(values) > 1 else float("nan")
        print(
            f"| {name.split(', ')[1]} | {name.split(', ')[2]} | "
            f"{' / '.join(str(r['training']['steps']) for r in rows)} | "
            f"{np.mean(rf):.3f} ± {spread(rf):.3f} | {np.mean(qdist):.4f} ± {spread(qdist):.4f} | "
            f"{np.mean([r['seconds'] for r in rows]):.0f} |"
        )
    print(
        f"| official (seed 42, last step) | – | {SUPERVISED_STEPS} | {OFFICIAL['supervised']['RF']:.3f} | "
        f"{OFFICIAL['supervised']['QDist']:.4f} | – |"
    )
    print(f"| z-scored input, NJ | – | – | {OFFICIAL['input']['RF']:.3f} | {OFFICIAL['input']['QDist']:.4f} | – |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
