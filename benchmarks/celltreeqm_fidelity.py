"""celldag's CellTreeQM beside the official code's learning curves on ../shared/fidelity/bm_reference.npz.

The reference (``../shared/fidelity/README.md``) ran the authors' model and losses at fixed sizes and
step counts; this runs celldag's ``run`` at the same settings (model 256/256/4 layers/2 heads/128,
AdamW 1e-4, 2,048 quartets, 0.1·L_D + 20·L_P with the code's margin sign and "mismatched" selection
(`select: ordered_mismatch`), input z-scored with the
training replicate) and scores the test replicate the same way (NJ on embedding distances, RF,
QDist on the file's 20,000 evaluation quartets, K-/U-QDist by the level-2 partition):

- HLP level 2, 4,399 steps, the last step's model (the official reports no selection): with the
  official quartet ordering (``quartet_order: sorted``) and celldag's default (``shuffled``), each on
  the leaves as given (numbered in tree order) and relabelled by a seeded random permutation;
- supervised, 3,296 steps budget, celldag's own model selection (step count chosen on held-out
  leaves, then trained on all leaves), mean over 3 seeds.

  .venv/bin/python benchmarks/celltreeqm_fidelity.py [--reference PATH] [--scale 1.0] [--jobs 2] [--only supervised]

``--scale 0.05`` runs 5 % of the steps (a smoke test of the script). Each run uses one thread;
``--jobs`` runs that many side by side. Prints one table; times are per run, on this machine.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "fidelity" / "bm_reference.npz"
OFFICIAL = {  # ../shared/fidelity/README.md, last step of each curve (seed 42) and the z-scored input
    "hlp": {"K-QDist": 0.0162, "U-QDist": 0.390, "RF": 0.944},
    "supervised": {"QDist": 0.0262, "RF": 0.448},
    "input": {"RF": 0.976, "QDist": 0.5520, "K-QDist": 0.5524, "U-QDist": 0.5499},
}
OFFICIAL_SIZES = {"proj_dim": 256, "hidden_dim": 256, "n_layers": 4, "n_heads": 2, "output_dim": 128,
                  "dropout_data": 0.1, "dropout_metric": 0.1, "norm": "batch_norm", "gate": "none", "lr": 1e-4,
                  "weight_decay": 0.01, "quartets_per_step": 2048, "w_distance": 0.1, "w_additivity": 20.0,
                  "margin": 0.1, "margin_sign": "code", "select": "ordered_mismatch", "loss": "additivity",
                  "standardize_input": True, "device": "cpu", "reconstruction": "nj", "checkpoint_every": 10**6,
                  "level": 2, "validate_every": 100}  # fmt: skip
HLP_STEPS, SUPERVISED_STEPS, SEEDS = 4399, 3296, (42, 43, 44)


def runs(scale: float) -> list[tuple[str, dict, int]]:
    hlp = {"setting": "high_level_partition", "selection": "none", "steps": max(1, round(HLP_STEPS * scale))}
    supervised = {"setting": "supervised", "selection": "holdout_refit", "steps": max(2, round(SUPERVISED_STEPS * scale))}
    table = [(f"HLP {order}, leaves {leaves}", hlp | {"quartet_order": order, "leaf_order": leaves}, 42)
             for order in ("sorted", "shuffled") for leaves in ("given", "relabelled")]  # fmt: skip
    return table + [(f"supervised, seed {seed}", supervised | {"quartet_order": "shuffled", "leaf_order": "given"}, seed)
                    for seed in SEEDS]  # fmt: skip


def one_run(job: tuple[str, dict, int], reference: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from celldag.lineage.track import LineageInput
    from celldag.methods.celltreeqm import run
    from celldag.registry import read_yaml

    data = np.load(reference)
    name, overrides, seed = job
    params = read_yaml(ROOT / "config/methods.yaml")["celltreeqm"]["params"] | OFFICIAL_SIZES | overrides
    inputs = LineageInput(names=tuple(str(n) for n in data["leaf_names"]), features=data["features_test"].astype(np.float64),
                          train_features=data["features_train"].astype(np.float64), tree_newick=str(data["newick"]))  # fmt: skip
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
    estimated, reference, quartets = euclidean_distances(result.embedding), data["ref_dm_topology"], data["eval_quartets"]
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
    for row in results:
        steps = row["training"]["steps"]
        print(f"| {row['name']} | {steps} | {row['RF']:.3f} | {row['QDist']:.4f} | {row['K-QDist']:.4f} | "
              f"{row['U-QDist']:.4f} | {row['seconds']:.0f} |")  # fmt: skip
    supervised = [row for row in results if row["name"].startswith("supervised")]
    print(f"| supervised, mean of {len(supervised)} seeds | – | {np.mean([r['RF'] for r in supervised]):.3f} | "
          f"{np.mean([r['QDist'] for r in supervised]):.4f} | – | – | – |")  # fmt: skip
    official = OFFICIAL
    print(f"| official HLP sorted, leaves given (seed 42) | {HLP_STEPS} | {official['hlp']['RF']:.3f} | – | "
          f"{official['hlp']['K-QDist']:.4f} | {official['hlp']['U-QDist']:.4f} | – |")  # fmt: skip
    print(f"| official supervised (seed 42, last step) | {SUPERVISED_STEPS} | {official['supervised']['RF']:.3f} | "
          f"{official['supervised']['QDist']:.4f} | – | – | – |")  # fmt: skip
    print(f"| z-scored input, NJ | – | {official['input']['RF']:.3f} | {official['input']['QDist']:.4f} | "
          f"{official['input']['K-QDist']:.4f} | {official['input']['U-QDist']:.4f} | – |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
