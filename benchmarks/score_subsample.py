"""Scoring on a stratified subsample against scoring every cell (evaluation.score_cells), on synthetic_20k.

Prepares synthetic_20k (20,000 cells; seed 0), runs PCA and Harmony on it (celldag's runners, as the
workflow does), scores both with every cell and with ``score_cells: {max_cells: M, seed: s}`` for a few
subsample sizes and seeds, and prints every aggregate (total, bio_conservation, batch_correction) beside
the full value, the largest difference, and the target: within 0.01 of the full scores for every
aggregate. Writes results/bench/score_subsample.json.

  .venv/bin/python benchmarks/score_subsample.py [--sizes 10000 5000] [--seeds 0 1 2] [--cells 20000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import RESULTS, ROOT

AGGREGATES = ("total", "bio_conservation", "batch_correction")
METHODS = ("pca", "harmony")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 5000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cells", type=int, default=20000, help="cells of the synthetic dataset")
    args = parser.parse_args()

    from celldag import artifacts
    from celldag.prepare import prepare_dataset
    from celldag.registry import read_yaml
    from celldag.runner import run_method
    from celldag.scoring import score_dataset
    from celldag.tracks import tracks_of

    track = tracks_of(read_yaml(ROOT / "config/tracks.yaml"))["representation"]
    entry = read_yaml(ROOT / "config/datasets.yaml")["synthetic_20k"]
    entry = entry | {"params": entry["params"] | {"n_cells": args.cells}}
    methods = read_yaml(ROOT / "config/methods.yaml")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        prepared = work / "prepared.h5ad"
        artifacts.write_h5ad(prepare_dataset("synthetic", entry, track, 0), prepared)
        outputs = []
        for method in METHODS:
            run_dir = work / method
            run_method(prepared_path=str(prepared), output_path=str(run_dir / "output.h5ad"),
                       record_path=str(run_dir / "run.json"), dataset_id="synthetic", dataset_entry=entry,
                       method_id=method, method_entry={"variants": {"default": {}}} | methods[method], variant="default", seed=0, track=track)  # fmt: skip
            outputs.append(str(run_dir / "output.h5ad"))

        def scores(evaluation: dict) -> tuple[dict[tuple[str, str], float], float]:
            path = work / f"scores-{time.monotonic_ns()}.parquet"
            start = time.perf_counter()
            score_dataset(prepared_paths=[str(prepared)], output_paths=outputs, table_paths=[], scores_path=str(path),
                          track_id="representation", track=track, dataset=entry, evaluation=evaluation)  # fmt: skip
            table = artifacts.read_scores(path)
            table = table[table["metric"].isin(AGGREGATES)]
            return {(r.method, r.metric): float(r.value) for r in table.itertuples()}, time.perf_counter() - start

        full, full_seconds = scores({})
        rows, worst = [], 0.0
        for size in args.sizes:
            for seed in args.seeds:
                sub, seconds = scores({"score_cells": {"max_cells": size, "seed": seed}})
                differences = {key: sub[key] - full[key] for key in full}
                worst = max(worst, max(abs(d) for d in differences.values()))
                rows.append({"cells": size, "seed": seed, "seconds": seconds, "differences": differences})
    print(f"synthetic, {args.cells:,} cells; full scoring {full_seconds:.0f} s (PCA and Harmony)\n")
    print("| method | aggregate | every cell | " + " | ".join(f"{r['cells']:,}, seed {r['seed']} (Δ)" for r in rows) + " |")
    print("|---|---|---|" + "---|" * len(rows))
    for (method, metric), value in sorted(full.items()):
        print(f"| {method} | {metric} | {value:.4f} | " + " | ".join(f"{r['differences'][(method, metric)]:+.4f}"
                                                             for r in rows) + " |")  # fmt: skip
    print("| scoring s | | {:.0f} | ".format(full_seconds) + " | ".join(f"{r['seconds']:.0f}" for r in rows) + " |")
    print(f"\ntarget: every aggregate within 0.01 of every cell's: largest |Δ| {worst:.4f} → {'met' if worst <= 0.01 else 'NOT met'}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "score_subsample.json").write_text(json.dumps(
        {"cells": args.cells, "full": {f"{m}/{a}": v for (m, a), v in full.items()}, "full_seconds": full_seconds,
         "runs": [r | {"differences": {f"{m}/{a}": v for (m, a), v in r["differences"].items()}} for r in rows],
         "largest_difference": worst}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
