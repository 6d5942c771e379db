"""Planning: registry × config → runs, counted per rule (what `snakemake -n` must list)."""

from __future__ import annotations

import pytest

from celldag.plan import Run, make_plan, method_params
from celldag.registry import apply_schema


def plan_for(registries, **config):
    return make_plan(apply_schema(config, "config", "config.yaml"), registries)


def test_default_config_counts(registries):
    plan = plan_for(registries, datasets=["bm_default"], methods=["nj_raw", "nj_pca", "upgma_raw"], seeds=[0, 1, 2])
    assert plan.jobs_per_rule() == {"prepare_dataset": 3, "run_method": 9, "evaluate": 1, "aggregate": 1, "all": 1}


def test_seeds_default_to_three(registries):
    plan = plan_for(registries, datasets=["bm_default"], methods=["nj_raw"])
    assert sorted(run.seed for run in plan.runs) == [0, 1, 2]


def test_two_datasets_share_nothing_but_the_aggregate(registries):
    plan = plan_for(registries, datasets=["bm_default", "bm_small"], methods=["nj_raw", "upgma_raw"], seeds=[4, 7])
    counts = plan.jobs_per_rule()
    assert counts["prepare_dataset"] == 2 * 2
    assert counts["run_method"] == 2 * 2 * 2
    assert counts["evaluate"] == 2  # one per dataset
    assert counts["aggregate"] == 1


def test_bare_method_id_runs_every_variant_and_selector_runs_one(registries):
    every = plan_for(registries, datasets=["bm_default"], methods=["nj_multi"], seeds=[0])
    assert sorted(run.variant for run in every.runs) == ["pca", "raw"]
    one = plan_for(registries, datasets=["bm_default"], methods=["nj_multi/pca"], seeds=[0])
    assert one.runs == (Run("bm_default", "nj_multi", "pca", 0),)


def test_duplicate_selection_is_planned_once(registries):
    plan = plan_for(registries, datasets=["bm_default"], methods=["nj_multi", "nj_multi/raw"], seeds=[0])
    assert plan.jobs_per_rule()["run_method"] == 2


def test_methods_only_run_on_datasets_of_their_track(registries):
    registries.methods["rep_method"] = registries.methods["nj_raw"] | {"track": "representation"}
    plan = plan_for(registries, datasets=["bm_default"], methods=["nj_raw", "rep_method"], seeds=[0])
    assert {run.method for run in plan.runs} == {"nj_raw"}
    with pytest.raises(ValueError, match="nothing to run"):
        plan_for(registries, datasets=["bm_default"], methods=["rep_method"], seeds=[0])


def test_run_paths_and_variant_params(registries):
    run = Run("bm_default", "nj_multi", "pca", 3)
    assert run.path("results/runs/{dataset}/{method}/{variant}/seed{seed}") == "results/runs/bm_default/nj_multi/pca/seed3"
    assert method_params(registries.methods["nj_multi"], "pca") == {"features": "pca", "reconstruction": "nj", "n_components": 3}


def test_url_datasets_add_one_download_job_per_file(registries):
    plan = plan_for(registries, datasets=["bm_default", "celegans_packer2019"], methods=["nj_raw"], seeds=[0, 1])
    counts = plan.jobs_per_rule()
    assert counts["download_file"] == 3  # shared by both seeds
    assert counts["prepare_dataset"] == 4 and counts["run_method"] == 4
    assert "download_file" not in plan_for(registries, datasets=["bm_default"], methods=["nj_raw"]).jobs_per_rule()
