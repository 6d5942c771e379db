"""Leaf order: prepared lineage datasets come in a seeded random row order, and no lineage method's
scores depend on the row order at its default settings — only CellTreeQM's official quartet ordering
(``quartet_order: sorted``) does, which the leaf-order control exposes."""

from __future__ import annotations

import anndata
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, TRACKS

from celldag import artifacts
from celldag.jobs.evaluate import score_dataset
from celldag.jobs.prepare import prepare_dataset
from celldag.jobs.runner import run_method
from celldag.plan import method_params

BM = {
    "track": "lineage",
    "loader": "celldag.data.bm:prepare_bm_simulator",
    "params": {
        "depth": 4,
        "n_signal": 20,
        "n_noise": 10,
        "n_spurious": 5,
        "max_walk": 3.0,
        "noise_std": 1.0,
        "measurement_std": 0.5,
    },
}
METHODS = yaml.safe_load((REPO / "config/methods.yaml").read_text())
SMALL = {
    "proj_dim": 8,
    "hidden_dim": 16,
    "n_layers": 1,
    "output_dim": 8,
    "steps": 6,
    "quartets_per_step": 64,
    "validation_quartets": 64,
    "validate_every": 2,
    "device": "cpu",
}


def test_prepared_leaves_come_in_a_seeded_random_order_and_the_truth_keeps_its_names():
    first, again, other = (prepare_dataset("bm", BM, TRACKS["lineage"], seed) for seed in (0, 0, 1))
    names = list(first.obs_names)
    assert names != sorted(names)  # the simulator builds L00… in tree order; methods never see that order
    assert names == list(again.obs_names) and sorted(names) == sorted(first.obs_names)
    assert list(other.obs_names) != names
    assert first.uns["standardized"] is False
    simulated = prepare_dataset(
        "bm", BM, TRACKS["lineage"].__class__(**{**vars(TRACKS["lineage"]), "arrange": None}), 0
    )
    np.testing.assert_array_equal(first.layers["train"], simulated[first.obs_names].layers["train"])
    assert first.uns["tree_newick"] == simulated.uns["tree_newick"]


def scores_of(tmp_path, prepared: anndata.AnnData, method: str, variant: str) -> pd.DataFrame:
    path = tmp_path / "prepared.h5ad"
    artifacts.write_h5ad(prepared, path)
    params = METHODS[method]["params"]
    entry = (
        {"variants": {"default": {}}} | METHODS[method] | {"params": params | SMALL if "steps" in params else params}
    )
    run_dir = tmp_path / method / variant
    run_method(
        prepared_path=str(path),
        output_path=str(run_dir / "output.h5ad"),
        record_path=str(run_dir / "run.json"),
        dataset_id="bm",
        dataset_entry=BM,
        method_id=method,
        method_entry=entry,
        variant=variant,
        seed=0,
        track=TRACKS["lineage"],
    )
    score_dataset(
        prepared_paths=[str(path)],
        output_paths=[str(run_dir / "output.h5ad")],
        table_paths=[],
        scores_path=str(run_dir / "scores.parquet"),
        track_id="lineage",
        track=TRACKS["lineage"],
        dataset=BM,
        evaluation={"qdist_quartets": 3000},
    )
    return artifacts.read_scores(run_dir / "scores.parquet").set_index("metric")["value"]


RUNS = [
    ("nj_raw", "default"),
    ("nj_pca", "default"),
    ("upgma_raw", "default"),
    ("celltreeqm", "supervised"),
    ("celltreeqm", "high_level_partition"),
    ("celltreeqm", "partially_labelled"),
    ("celltreeqm", "label_free"),
    ("triplet", "supervised"),
    ("quadruplet", "high_level_partition"),
]


@pytest.mark.parametrize(("method", "variant"), RUNS)
def test_relabelling_the_leaves_leaves_every_score_unchanged(tmp_path, method, variant):
    prepared = prepare_dataset("bm", BM, TRACKS["lineage"], 0)
    relabelled = prepared[np.random.default_rng(11).permutation(prepared.n_obs)].copy()
    given = scores_of(tmp_path / "given", prepared, method, variant)
    pd.testing.assert_series_equal(given, scores_of(tmp_path / "relabelled", relabelled, method, variant))


def test_the_official_quartet_order_is_not_invariant(tmp_path):
    prepared = prepare_dataset("bm", BM, TRACKS["lineage"], 0)
    relabelled = prepared[np.random.default_rng(11).permutation(prepared.n_obs)].copy()
    variant = "high_level_partition_sorted"
    assert method_params(METHODS["celltreeqm"], variant)["quartet_order"] == "sorted"
    embeddings = []
    for name, data in (("given", prepared), ("relabelled", relabelled)):
        scores_of(tmp_path / name, data, "celltreeqm", variant)  # 6 steps: the scores may tie, the embedding not
        output = anndata.read_h5ad(tmp_path / name / "celltreeqm" / variant / "output.h5ad")
        embeddings.append(pd.DataFrame(output.obsm["X_emb"], index=output.obs_names).sort_index())
    assert not embeddings[0].equals(embeddings[1])
