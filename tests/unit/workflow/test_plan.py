"""Planning: registry × config → runs, counted per rule (what `snakemake -n` must list)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from snakemake.utils import update_config

from celldag.plan import (
    PREPARED,
    RUN_DIR,
    RUN_RECORD,
    data_key,
    job_files,
    job_gpus,
    job_seeds,
    make_plan,
    make_run,
    method_params,
    requests_gpu,
)
from celldag.registry import apply_schema, load_config, read_yaml


def plan_for(registries, **config):
    return make_plan(apply_schema(config, "config", "config.yaml"), registries)


def test_default_config_counts(registries):
    plan = plan_for(registries, datasets=["bm_default"], methods=["nj_raw", "nj_pca", "upgma_raw"], seeds=[0, 1, 2])
    figures = {f"figure_lineage_{figure.name}": 1 for figure in registries.track("lineage").figures}
    # one run_method job per method runs its three seeds
    assert plan.jobs_per_rule() == {
        "prepare_dataset": 3,
        "run_method": 3,
        "evaluate": 1,
        "aggregate": 1,
        **figures,
        "report_html": 1,
        "all": 1,
    }


def test_job_per_seed_makes_a_run_method_job_of_every_seed_and_names_its_files(registries):
    config = {"datasets": ["bm_default"], "methods": ["nj_raw", "nj_pca"], "seeds": [0, 2]}
    grouped = plan_for(registries, **config)
    per_seed = plan_for(registries, **config, compute={"job_per_seed": True})
    assert grouped.runs == per_seed.runs
    assert grouped.jobs_per_rule()["run_method"] == 2 and per_seed.jobs_per_rule()["run_method"] == 4
    grouped_config = apply_schema(config, "config", "config.yaml")
    assert job_seeds(grouped_config, "2") == [0, 2]
    assert job_files(RUN_RECORD, grouped_config) == [
        "results/runs/{dataset}/{method}/{variant}/{key}/seed0/run.json",
        "results/runs/{dataset}/{method}/{variant}/{key}/seed2/run.json",
    ]
    per_seed_config = apply_schema(config | {"compute": {"job_per_seed": True}}, "config", "config.yaml")
    assert job_seeds(per_seed_config, "2") == [2]
    assert job_files(RUN_RECORD, per_seed_config) == [RUN_RECORD]


def test_seeds_default_to_three(registries):
    plan = plan_for(registries, datasets=["bm_default"], methods=["nj_raw"])
    assert sorted(run.seed for run in plan.runs) == [0, 1, 2]


def test_two_datasets_share_nothing_but_the_aggregate(registries):
    plan = plan_for(registries, datasets=["bm_default", "bm_small"], methods=["nj_raw", "upgma_raw"], seeds=[4, 7])
    counts = plan.jobs_per_rule()
    assert counts["prepare_dataset"] == 2 * 2
    assert counts["run_method"] == 2 * 2  # each runs both seeds
    assert counts["evaluate"] == 2  # one per dataset
    assert counts["aggregate"] == 1


def test_bare_method_id_runs_every_variant_and_selector_runs_one(registries):
    every = plan_for(registries, datasets=["bm_default"], methods=["nj_multi"], seeds=[0])
    assert sorted(run.variant for run in every.runs) == ["pca", "raw"]
    one = plan_for(registries, datasets=["bm_default"], methods=["nj_multi/pca"], seeds=[0])
    assert one.runs == (make_run("bm_default", "nj_multi", "pca", 0, registries),)


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
    run = make_run("bm_default", "nj_multi", "pca", 3, registries)
    assert run.path(RUN_DIR) == f"results/runs/bm_default/nj_multi/pca/{run.key}/seed3"
    assert run.path(PREPARED) == f"results/data/bm_default/{run.data_key}/seed3.h5ad"
    assert method_params(registries.methods["nj_multi"], "pca") == {
        "features": "pca",
        "reconstruction": "nj",
        "n_components": 3,
    }


def test_runs_and_prepared_data_are_keyed_by_their_settings(registries):
    raw, pca = (make_run("bm_default", "nj_multi", variant, 0, registries) for variant in ("raw", "pca"))
    assert raw.key != pca.key and raw.data_key == pca.data_key and len(raw.key) == 10
    assert make_run("bm_default", "nj_multi", "raw", 1, registries).key == raw.key  # seeds share the key
    small = make_run("bm_small", "nj_multi", "raw", 0, registries)  # bm_default but for one loader param
    assert small.data_key != raw.data_key and small.key != raw.key
    entry = registries.datasets["bm_default"]
    assert data_key(dict(reversed(entry.items()))) == raw.data_key  # the order keys are written in is no setting


def test_configs_differing_in_one_method_param_share_the_rest_and_keep_their_own_tables(repo):
    base = {"datasets": ["bm_default", "cengen_neurons"], "methods": ["nj_raw", "nj_pca"], "seeds": [0, 1]}
    one = make_plan(*load_config(base | {"name": "one"}, "one.yaml", root=repo))
    other = make_plan(
        *load_config(
            base | {"name": "other", "method_params": {"nj_pca": {"n_components": 5}}}, "other.yaml", root=repo
        )
    )

    def run_dirs(plan, method):
        return {run.path(RUN_DIR) for run in plan.runs if run.method == method}

    assert run_dirs(one, "nj_raw") == run_dirs(other, "nj_raw") and len(run_dirs(one, "nj_raw")) == 2 * 2  # made once
    assert not run_dirs(one, "nj_pca") & run_dirs(other, "nj_pca")  # n_components differs: both kept
    assert one.prepared == other.prepared
    assert not set(one.final_targets) & set(other.final_targets)
    assert not set(one.dataset_scores) & set(other.dataset_scores)
    assert one.final_targets == [
        "results/one/scores.parquet",
        "results/one/runs.parquet",
        "results/one/leaderboard.md",
        "results/one/index.html",
    ]
    assert not set(one.figure_paths) & set(other.figure_paths)


def test_every_dataset_gets_its_track_figures_drawn_from_the_smallest_seed(repo):
    from celldag.plan import figure_rule

    config, registries = load_config(
        {"datasets": ["bm_default", "pbmc68k_batched"], "methods": ["nj_raw", "pca"], "seeds": [2, 1]},
        "run.yaml",
        root=repo,
    )
    planned = make_plan(config, registries)
    assert planned.figure_seed == 1
    for dataset, track_id in (("bm_default", "lineage"), ("pbmc68k_batched", "representation")):
        names = [figure.name for figure in registries.track(track_id).figures]
        assert "scores" in names and "cost" in names
        assert [(rule, f) for rule, d, f, _ in planned.figures if d == dataset] == [
            (figure_rule(track_id, n), n) for n in names
        ]
        assert f"results/default/figures/{dataset}/scores.png" in planned.figure_paths


def test_paper_preset_and_default_config_plan_apart_and_share_identical_runs(repo):
    """As `snakemake -n` and `snakemake --configfile config/presets/paper.yaml -n` plan them."""
    default = read_yaml(repo / "config/config.yaml")
    paper = copy.deepcopy(default)
    update_config(paper, read_yaml(repo / "config/presets/paper.yaml"))  # how Snakemake merges a --configfile
    plans = [make_plan(*load_config(config, "config", root=repo)) for config in (default, paper)]
    assert [plan.name for plan in plans] == ["default", "paper"]
    assert not set(plans[0].final_targets) & set(plans[1].final_targets)
    assert not set(plans[0].dataset_scores) & set(plans[1].dataset_scores)
    dirs = [{run.path(RUN_DIR): run for run in plan.runs} for plan in plans]
    shared = {(run.dataset, run.method) for path, run in dirs[0].items() if path in dirs[1]}
    assert ("bm_default", "nj_raw") in shared and ("cengen_neurons", "upgma_raw") in shared
    assert not {method for _, method in shared} & {"celltreeqm", "triplet", "quadruplet"}  # paper-sized there
    assert {path for path in plans[0].prepared if "/bm_default/" in path} <= set(plans[1].prepared)


@pytest.mark.parametrize(
    ("params", "gpu_method", "gpus", "asks"),
    [
        ({"device": "cuda"}, False, False, True),  # params that name a GPU ask whatever compute.gpus says
        ({"device": "cuda:1"}, True, False, True),
        ({"accelerator": "gpu"}, True, False, True),
        ({"accelerator": "cuda"}, False, False, True),
        ({"device": "cpu"}, True, True, False),  # the CPU named: never
        ({"accelerator": "cpu"}, True, True, False),
        ({"device": "mps"}, True, True, False),  # another device named: no CUDA GPU to ask for
        ({"device": "auto"}, True, True, True),  # auto: compute.gpus for methods marked gpu: true
        ({"device": "auto"}, True, False, False),
        ({"device": "auto"}, False, True, False),
        ({"accelerator": "auto"}, True, True, True),
        ({}, True, True, True),  # no device param (a lab's method): as auto
        ({}, True, False, False),
        ({"features": "raw"}, False, True, False),
    ],
)
def test_a_job_asks_for_a_gpu_where_its_params_name_one_or_leave_it_to_compute_gpus(params, gpu_method, gpus, asks):
    assert requests_gpu(params, gpu_method, gpus) is asks


def test_a_variant_or_the_configs_method_params_decide_a_jobs_gpu(registries):
    celltreeqm = copy.deepcopy(registries.methods["celltreeqm"])
    celltreeqm["variants"]["on_cpu"] = {"setting": "supervised", "device": "cpu"}
    assert [job_gpus(celltreeqm, "supervised", gpus) for gpus in (False, True)] == [0, 1]  # device: auto
    assert [job_gpus(celltreeqm, "on_cpu", gpus) for gpus in (False, True)] == [0, 0]
    celltreeqm["params"]["device"] = "cuda"  # as the config's method_params set it (load_config's overlay)
    assert [job_gpus(celltreeqm, "supervised", gpus) for gpus in (False, True)] == [1, 1]
    assert job_gpus(celltreeqm, "on_cpu", True) == 0  # the variant's own device wins over the method's params


def planned_gpus(config: dict, root) -> dict[str, set[int]]:
    """method → the GPUs its run_method jobs of ``config`` (merged over config/config.yaml, as a --configfile)
    ask for, every planned run's."""
    merged = read_yaml(root / "config/config.yaml")
    update_config(merged, config)
    loaded, registries = load_config(merged, "config", root=root)
    gpus = {}
    for run in make_plan(loaded, registries).runs:
        entry = registries.methods[run.method]
        gpus.setdefault(run.method, set()).add(job_gpus(entry, run.variant, loaded["compute"]["gpus"]))
    return gpus


TRAINED_ON_GPU = {"celltreeqm", "triplet", "quadruplet", "scilama", "scvi"}  # the paper preset's device: cuda and
#                                                                             accelerator: gpu


def test_the_paper_presets_training_jobs_ask_for_a_gpu_as_shipped(repo):
    """`--configfile config/presets/paper.yaml` without compute.gpus: its cuda and gpu methods ask, no other does."""
    gpus = planned_gpus(read_yaml(repo / "config/presets/paper.yaml"), repo)
    assert gpus == {method: {1} if method in TRAINED_ON_GPU else {0} for method in gpus}
    assert set(gpus) == TRAINED_ON_GPU | {"nj_raw", "nj_pca", "upgma_raw", "pca", "harmony", "genept_w"}


def test_the_default_run_asks_for_gpus_only_with_compute_gpus(repo):
    assert set().union(*planned_gpus({}, repo).values()) == {0}  # every device auto: a workstation asks for none
    gpus = planned_gpus({"compute": {"gpus": True}}, repo)
    assert {method for method, asked in gpus.items() if asked == {1}} == TRAINED_ON_GPU
    assert {method for method, asked in gpus.items() if asked == {0}} == set(gpus) - TRAINED_ON_GPU
    cpu = planned_gpus({"compute": {"gpus": True}, "method_params": {"scilama": {"device": "cpu"}}}, repo)
    assert cpu["scilama"] == {0} and cpu["celltreeqm"] == {1}


KEYS_IN_A_FRESH_PROCESS = """
import json
from celldag.plan import make_plan
from celldag.registry import load_config, read_yaml
plan = make_plan(*load_config(read_yaml("config/config.yaml"), "config.yaml"))
print(json.dumps([[run.key, run.data_key] for run in plan.runs]))
"""


def test_keys_are_the_same_in_every_process(repo):
    plan = make_plan(*load_config(read_yaml(repo / "config/config.yaml"), "config.yaml", root=repo))
    here = [[run.key, run.data_key] for run in plan.runs]
    for hash_seed in ("1", "2"):  # str hashing (set order) differs between these processes
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", KEYS_IN_A_FRESH_PROCESS],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(result.stdout) == here


def test_url_datasets_add_one_download_job_per_file(registries):
    plan = plan_for(registries, datasets=["bm_default", "celegans_packer2019"], methods=["nj_raw"], seeds=[0, 1])
    counts = plan.jobs_per_rule()
    assert counts["download_file"] == 3  # shared by both seeds
    assert counts["prepare_dataset"] == 4 and counts["run_method"] == 2
    assert "download_file" not in plan_for(registries, datasets=["bm_default"], methods=["nj_raw"]).jobs_per_rule()


def test_chained_track_runs_every_classifier_on_every_representation_run(registries):
    """annotation chains on representation: a classifier × every run on a dataset that lists it under
    `chained`; one task and one scoring job per dataset, one run job per representation job."""
    from celldag.plan import CHAINED_OUTPUT, CHAINED_SCORES, chained_kinds

    plan = plan_for(
        registries,
        datasets=["pbmc68k_batched"],
        seeds=[0, 1],
        methods=["pca", "expression", "scilama/random", "knn", "logistic"],
    )
    assert len(plan.runs) == 3 * 2  # the annotation methods add no run of their own
    assert sorted({(r.chained_method, r.label) for r in plan.chained}) == [
        (classifier, upstream)
        for classifier in ("knn", "logistic")
        for upstream in ("expression/default", "pca/default", "scilama/random")
    ]
    counts = plan.jobs_per_rule()
    assert (counts["annotation_task"], counts["run_annotation"], counts["evaluate_annotation"]) == (1, 3, 1)
    figures = {f"figure_annotation_{figure.name}": 1 for figure in registries.track("annotation").figures}
    assert figures.items() <= counts.items()
    run = next(r for r in plan.chained if r.chained_method == "knn" and r.label == "pca/default" and r.seed == 1)
    assert run.path(CHAINED_OUTPUT).startswith(run.upstream.path(RUN_DIR) + "/annotation-")
    assert plan.chained_scores == (
        CHAINED_SCORES.format(name="default", dataset="pbmc68k_batched", track="annotation"),
    )
    # a representation control carries through to the annotation on it
    kinds = chained_kinds(plan.chained, registries)
    assert kinds["knn/scilama/random"] == "control" and kinds["knn/pca/default"] == "baseline"


def test_chained_methods_without_their_dataset_or_upstream_run_nothing(registries):
    lineage = plan_for(registries, datasets=["bm_default"], methods=["nj_raw", "knn"], seeds=[0])
    assert lineage.chained == () and "run_annotation" not in lineage.jobs_per_rule()
    no_classifier = plan_for(registries, datasets=["pbmc68k_batched"], methods=["pca"], seeds=[0])
    assert no_classifier.chained == ()


def test_listing_a_chained_track_recomputes_nothing_of_the_dataset(registries):
    """`chained` is not part of a dataset's prepared-data or run keys: adding the annotation track to a dataset
    keeps its representation runs (and every key of datasets written before chained tracks existed)."""
    entry = registries.datasets["pbmc68k_batched"]
    assert "annotation" in entry["chained"]
    without = {key: value for key, value in entry.items() if key != "chained"}
    assert data_key(entry) == data_key(without) == data_key(without | {"chained": {}})
    params = method_params(registries.methods["pca"], "default")
    from celldag.plan import run_key

    assert run_key(entry, params) == run_key(without, params)


def test_a_run_records_log_is_found_by_the_patterns_that_spell_both():
    from celldag import plan

    record = plan.fill(plan.RUN_RECORD, dataset="bm", method="nj_raw", variant="default", key="0123456789", seed=2)
    assert plan.log_of_record(record) == "results/logs/run_method/bm/nj_raw/default/0123456789/seed2.log"
    chained = plan.fill(
        plan.CHAINED_RECORD,
        dataset="pbmc",
        method="scilama",
        variant="text",
        key="abcdef0123",
        seed=0,
        track="annotation",
        chain_key="9876543210",
        chained_method="knn",
    )
    assert plan.parse(plan.CHAINED_RECORD, chained)["chained_method"] == "knn"
    assert (
        plan.log_of_record(chained) == "results/logs/run_chained/pbmc/scilama/text/abcdef0123/annotation-9876543210.log"
    )
    assert plan.log_of_record("elsewhere/run.json") is None  # a record at no planned path gets no link, not a guess


def test_the_scores_digests_sit_beside_every_scores_table_and_pattern():
    from celldag import plan

    assert plan.checksums_path("results/x/scores/bm.parquet") == "results/x/scores/bm.sha256.json"
    assert plan.checksums_path(plan.fill(plan.CHAINED_SCORES, track="annotation")) == (
        "results/{name}/scores/{dataset}.annotation.sha256.json"
    )


def test_a_method_that_runs_nowhere_is_warned_of_once(registries):
    """pca's track has no selected dataset; knn's chained track has no representation run to chain on; nj_multi runs."""
    with pytest.warns(UserWarning) as caught:
        plan_for(
            registries,
            datasets=["bm_default"],
            methods=["nj_multi/raw", "nj_multi", "pca", "knn", "pca/default"],
            seeds=[0],
        )
    assert [str(warning.message) for warning in caught] == [
        "method 'pca' runs on no selected dataset: none of its track ('representation')",
        "method 'knn' runs on no selected dataset: none listing 'annotation' under chained with a run of a selected "
        "'representation' method",
    ]


def test_a_chained_method_on_a_dataset_that_chains_its_track_is_not_warned_of(registries):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = plan_for(
            registries, datasets=["bm_default", "pbmc68k_batched"], methods=["nj_raw", "pca", "knn"], seeds=[0]
        )
    assert {run.chained_method for run in plan.chained} == {"knn"}


def test_a_query_of_config_annotate_takes_a_registry_dataset_or_a_labelled_h5ad(registries):
    """config ``annotate``: a registry dataset's reference is its prepared file, a path ending in .h5ad the file
    as named (``celldag annotate`` prepares a plain one itself: issue 51)."""
    plan = plan_for(
        registries,
        datasets=["pbmc68k_batched"],
        methods=["pca"],
        seeds=[0],
        annotate={
            "from_registry": {"reference": "pbmc68k_batched", "query": "lab.h5ad"},
            "from_atlas": {"reference": "data/atlas.h5ad", "query": "lab.h5ad", "reference_label_key": "cell_type"},
        },
    )
    queries = dict(plan.queries)
    entry = registries.datasets["pbmc68k_batched"]
    assert queries["from_registry"] == PREPARED.format(dataset="pbmc68k_batched", data_key=data_key(entry), seed=0)
    assert queries["from_atlas"] == "data/atlas.h5ad"
    # `snakemake annotate` makes these alone; the default target makes them beside the benchmark's tables
    assert plan.annotated == ["results/default/annotate/from_atlas", "results/default/annotate/from_registry"]
    assert set(plan.annotated) < set(plan.final_targets)


def test_a_query_naming_a_registry_model_downloads_it_and_reads_its_download(registries):
    """config ``annotate``: a ``model`` that is a pretrained model's id (config/models.yaml) is one more download,
    resources/models/<name>, which the query's settings then name; a .pkl is read as given and downloads nothing;
    an id the registry lacks is refused naming the query's key (issue 52)."""
    from celldag.plan import annotate_settings

    annotate = {
        "pretrained": {"reference": "pbmc68k_batched", "query": "lab.h5ad", "model": "celltypist_immune_all_low"},
        "own": {"reference": "pbmc68k_batched", "query": "lab.h5ad", "model": "models/lab.pkl"},
    }
    plan = plan_for(registries, datasets=["pbmc68k_batched"], methods=["pca"], seeds=[0], annotate=annotate)
    assert [path for path in plan.downloads if path.startswith("resources/models/")] == [
        "resources/models/Immune_All_Low.pkl"
    ]
    settings = annotate_settings({"annotate": annotate}, registries)
    assert settings["pretrained"]["model"] == "resources/models/Immune_All_Low.pkl"
    assert settings["own"]["model"] == "models/lab.pkl" and settings["own"]["query"] == "lab.h5ad"
    with pytest.raises(
        ValueError,
        match=r"annotate\.bad\.model: 'immune_typo' is neither a \.pkl file nor a "
        r"pretrained model of the registry \(celltypist_immune_all_low\)",
    ):
        plan_for(
            registries,
            datasets=["pbmc68k_batched"],
            methods=["pca"],
            seeds=[0],
            annotate={"bad": {"reference": "pbmc68k_batched", "query": "lab.h5ad", "model": "immune_typo"}},
        )
