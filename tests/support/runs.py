"""One lineage dataset prepared, run and scored in-process, without Snakemake (test_runner_and_report,
test_imported)."""

from __future__ import annotations

from conftest import TRACKS

from celldag.jobs.evaluate import score_dataset
from celldag.jobs.prepare import write_prepared_dataset
from celldag.jobs.runner import run_method

DATASET = {
    "track": "lineage",
    "loader": "celldag.data.bm:prepare_bm_simulator",
    "params": {
        "depth": 4,
        "n_signal": 30,
        "n_noise": 10,
        "n_spurious": 5,
        "max_walk": 3.0,
        "noise_std": 1.0,
        "measurement_std": 1.0,
    },
}


NJ_RAW = {
    "track": "lineage",
    "run": "celldag.methods.distance_tree:run",
    "params": {"features": "raw", "reconstruction": "nj"},
    "variants": {"default": {}},
}


def run_and_score(tmp_path, method_entry, seed=0, tag="a"):
    prepared = tmp_path / f"data{seed}.h5ad"
    if not prepared.exists():
        write_prepared_dataset("bm_t", DATASET, TRACKS[DATASET["track"]], seed, str(prepared))
    run_dir = tmp_path / tag / f"seed{seed}"
    status = run_method(
        prepared_path=str(prepared),
        output_path=str(run_dir / "output.h5ad"),
        record_path=str(run_dir / "run.json"),
        dataset_id="bm_t",
        dataset_entry=DATASET,
        method_id=tag,
        method_entry=method_entry,
        variant="default",
        seed=seed,
        track=TRACKS["lineage"],
    )
    score_dataset(
        prepared_paths=[str(prepared)],
        output_paths=[str(run_dir / "output.h5ad")],
        table_paths=[],
        scores_path=str(run_dir / "scores.parquet"),
        track_id="lineage",
        track=TRACKS["lineage"],
        dataset=DATASET,
        evaluation={"qdist_quartets": 2000},
    )
    return status, run_dir
