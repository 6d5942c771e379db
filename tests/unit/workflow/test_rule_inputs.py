"""What each job reads (celldag.jobs.rule_inputs): the paths the rules' input functions give for a job's wildcards."""

from __future__ import annotations

import pytest

from celldag import plan
from celldag.jobs.rule_inputs import NotPlanned, RuleInputs, current_key, gene_table
from celldag.plan import make_plan, make_run
from celldag.registry import apply_schema


def inputs_for(registries, **config) -> RuleInputs:
    config = apply_schema(config, "config", "config.yaml")
    return RuleInputs(make_plan(config, registries), registries, config)


@pytest.fixture
def lineage(registries) -> RuleInputs:
    return inputs_for(registries, datasets=["bm_default", "bm_small"], methods=["nj_raw", "nj_multi"], seeds=[2, 0])


@pytest.fixture
def representation(registries) -> RuleInputs:
    """sciLaMA reading go_text's table, its shuffled control (go_text's vectors permuted), PCA reading none, and
    annotation's kNN chained on every one of them."""
    return inputs_for(
        registries,
        datasets=["pbmc68k_batched"],
        methods=["pca", "scilama/text", "scilama/shuffled", "knn"],
        seeds=[1, 0],
    )


def test_a_run_job_reads_the_prepared_file_of_each_of_its_seeds(lineage, registries):
    run = make_run("bm_default", "nj_multi", "pca", 2, registries)
    prepared = [f"results/data/bm_default/{run.data_key}/seed{seed}.h5ad" for seed in (2, 0)]  # the config's order
    assert lineage.run_seeds(None) == [2, 0]
    assert lineage.run("bm_default", "nj_multi", "pca", run.key) == {"prepared": prepared, "files": []}


def test_a_job_per_seed_reads_its_own_seed(registries):
    inputs = inputs_for(
        registries, datasets=["bm_default"], methods=["nj_raw"], seeds=[0, 1], compute={"job_per_seed": True}
    )
    run = make_run("bm_default", "nj_raw", "default", 1, registries)
    assert inputs.run_seeds("1") == [1]
    assert inputs.run("bm_default", "nj_raw", "default", run.key, "1") == {
        "prepared": [run.path(plan.PREPARED)],
        "files": [],
    }


def test_a_path_of_another_key_is_refused_with_one_line(lineage, registries):
    key = make_run("bm_default", "nj_raw", "default", 0, registries).key
    with pytest.raises(
        NotPlanned,
        match=rf"^run bm_default/nj_raw/default: key 0000000000 is of other settings than "
        rf"this configuration's \({key}\); make it with the configuration that gives it$",
    ):
        lineage.run("bm_default", "nj_raw", "default", "0000000000")
    with pytest.raises(NotPlanned, match="^dataset bm_small: key 0000000000 is of other settings"):
        lineage.genes_source("bm_small", "0000000000")
    assert current_key("abc", "abc", "anything") == "abc"


def test_a_run_reading_a_gene_embedding_reads_its_table(representation, registries):
    text = make_run("pbmc68k_batched", "scilama", "text", 0, registries)
    table = f"results/embeddings/go_text/pbmc68k_batched-{text.data_key}.parquet"
    assert representation.run("pbmc68k_batched", "scilama", "text", text.key)["embedding"] == table
    pca = make_run("pbmc68k_batched", "pca", "default", 0, registries)
    assert "embedding" not in representation.run("pbmc68k_batched", "pca", "default", pca.key)
    # built once for every planned run; a run the plan lacks gets its table all the same
    assert representation.tables[text] == table and representation.tables[pca] is None
    assert len(representation.tables) == len(representation.plan.runs)
    unplanned = make_run("pbmc68k_batched", "scilama", "go_svd", 0, registries)
    assert unplanned not in representation.tables
    assert (
        representation.gene_table(unplanned)
        == gene_table(unplanned, registries)
        == unplanned.path(plan.GENE_TABLE, embedding="go_svd")
    )


def test_evaluation_reads_every_run_on_its_dataset_and_the_tables_they_read(representation):
    runs = representation.plan.runs_on("pbmc68k_batched")
    key = runs[0].data_key
    inputs = representation.evaluation("pbmc68k_batched")
    assert inputs["prepared"] == [f"results/data/pbmc68k_batched/{key}/seed{seed}.h5ad" for seed in (0, 1)]
    assert inputs["outputs"] == [run.output for run in runs] and len(runs) == 3 * 2
    # sciLaMA's text variant and its shuffled control both read go_text's table: listed once
    assert inputs["tables"] == [f"results/embeddings/go_text/pbmc68k_batched-{key}.parquet"]
    assert representation.evaluation("bm_default") == {"prepared": [], "outputs": [], "tables": []}


def test_aggregate_reads_the_record_of_every_run_then_of_every_chained_run(representation):
    records = representation.records
    assert records[: len(representation.plan.runs)] == [run.record for run in representation.plan.runs]
    assert records[len(representation.plan.runs) :] == [run.record for run in representation.plan.chained]
    assert len(records) == 3 * 2 + 3 * 2  # kNN on each of the three runs, per seed


def test_a_builtin_dataset_has_no_files_and_a_url_one_its_downloads_and_their_validation(registries):
    inputs = inputs_for(registries, datasets=["bm_default", "celegans_packer2019"], methods=["nj_raw"], seeds=[0])
    bm = plan.data_key(registries.datasets["bm_default"])
    assert inputs.dataset_files("bm_default", bm) == {} and inputs.preparation("bm_default", bm) == {}
    key = plan.data_key(registries.datasets["celegans_packer2019"])
    names = [f["name"] for f in registries.datasets["celegans_packer2019"]["files"]]
    files = {name: f"resources/celegans_packer2019/{name}" for name in names}
    assert inputs.dataset_files("celegans_packer2019", key) == files
    assert inputs.preparation("celegans_packer2019", key) == files | {
        plan.VALIDATION_INPUT: f"results/data/celegans_packer2019/{key}/validation.txt"
    }
    with pytest.raises(NotPlanned, match="^dataset celegans_packer2019: key 0000000000 "):
        inputs.preparation("celegans_packer2019", "0000000000")


def test_a_local_dataset_reads_its_own_paths(registries):
    registries.datasets["lab_local"] = registries.datasets["celegans_packer2019"] | {
        "source": "local",
        "files": [{"name": "cells.h5ad", "path": "data/cells.h5ad"}],
    }
    inputs = inputs_for(registries, datasets=["lab_local"], methods=["nj_raw"], seeds=[0])
    key = plan.data_key(registries.datasets["lab_local"])
    assert inputs.preparation("lab_local", key) == {
        "cells.h5ad": "data/cells.h5ad",
        plan.VALIDATION_INPUT: f"results/data/lab_local/{key}/validation.txt",
    }


def test_a_download_is_the_entry_of_the_file_it_names(lineage, registries):
    packer = registries.datasets["celegans_packer2019"]["files"][0]
    assert lineage.download_entry("celegans_packer2019", packer["name"]) == packer
    go = lineage.download_entry(plan.EMBEDDING_SOURCE, "GO.sqlite")  # shared by go_text and go_svd: one download
    assert go["role"] == "go_sqlite" and go is registries.embeddings["go_text"]["files"][1]
    model = lineage.download_entry(plan.MODEL_SOURCE, "Immune_All_Low.pkl")  # a pretrained model of the registry
    assert model is registries.models["celltypist_immune_all_low"]["file"]
    with pytest.raises(NotPlanned, match="^no registry entry of 'bm_default' downloads a file 'x.txt'$"):
        lineage.download_entry("bm_default", "x.txt")


def test_gene_lists_and_tables_read_the_smallest_seed_and_the_entrys_files(representation, registries):
    key = plan.data_key(registries.datasets["pbmc68k_batched"])
    assert representation.genes_source("pbmc68k_batched", key) == f"results/data/pbmc68k_batched/{key}/seed0.h5ad"
    genes = f"results/data/pbmc68k_batched/{key}/genes.txt"
    assert representation.embedding("go_text", "pbmc68k_batched", key) == {
        "genes": genes,
        "org_hs_eg_sqlite": "resources/embeddings/org.Hs.eg.sqlite",
        "go_sqlite": "resources/embeddings/GO.sqlite",
    }
    assert representation.embedding("go_text_shuffled", "pbmc68k_batched", key) == {
        "genes": genes,
        "base": f"results/embeddings/go_text/pbmc68k_batched-{key}.parquet",
    }


def test_ensembl_ids_add_org_hs_eg_db_to_a_table_without_it(registries):
    inputs = inputs_for(registries, datasets=["cellbench_protocols"], methods=["pca"], seeds=[0])
    key = plan.data_key(registries.datasets["cellbench_protocols"])
    assert inputs.embedding("genept_ada", "cellbench_protocols", key) == {
        "genes": f"results/data/cellbench_protocols/{key}/genes.txt",
        "table": "resources/embeddings/GenePT_gene_embedding_ada_text.pickle",
        "org_hs_eg_sqlite": "resources/embeddings/org.Hs.eg.sqlite",
    }


def test_a_figure_reads_what_it_needs_of_its_dataset_from_the_smallest_seed(representation):
    runs = representation.plan.runs_on("pbmc68k_batched")
    shown = [run for run in runs if run.seed == 0]
    scores = "results/default/scores/pbmc68k_batched.parquet"
    assert representation.figure(("scores",), "representation", "pbmc68k_batched", "default") == {"scores": scores}
    assert representation.figure(("runs",), "representation", "pbmc68k_batched", "default") == {
        "records": [run.record for run in runs]
    }
    assert representation.figure(("outputs", "tables"), "representation", "pbmc68k_batched", "default") == {
        "prepared": shown[0].path(plan.PREPARED),
        "outputs": [run.output for run in shown],
        "tables": sorted({representation.tables[run] for run in shown} - {None}),
    }


def test_a_chained_tracks_figure_reads_its_own_scores_task_and_outputs(representation):
    chained = representation.plan.chained_on("pbmc68k_batched", "annotation")
    shown = [run for run in chained if run.seed == 0]
    assert representation.figure(
        ("scores", "runs", "outputs", "tables"), "annotation", "pbmc68k_batched", "default"
    ) == {
        "scores": "results/default/scores/pbmc68k_batched.annotation.parquet",
        "records": [run.record for run in chained],
        "prepared": shown[0].path(plan.CHAIN_TASK),
        "outputs": [run.output for run in shown],
    }


def test_a_chained_track_reads_its_task_and_the_upstream_runs(representation, registries):
    assert representation.chained_tracks == ["annotation"] and representation.chained_methods("annotation") == ["knn"]
    key = plan.data_key(registries.datasets["pbmc68k_batched"])
    assert representation.chained_prepared("pbmc68k_batched", key) == [
        f"results/data/pbmc68k_batched/{key}/seed{seed}.h5ad" for seed in (1, 0)
    ]
    chained = representation.plan.chained_on("pbmc68k_batched", "annotation")
    chain_key = chained[0].chain_key
    pca = make_run("pbmc68k_batched", "pca", "default", 0, registries)
    by_seed = {run.seed: run for run in chained if run.upstream.method == "pca"}
    assert representation.chained_run("annotation", "pbmc68k_batched", chain_key, "pca", "default", pca.key) == {
        "prepared": [by_seed[seed].path(plan.CHAIN_TASK) for seed in (1, 0)],
        "upstream_outputs": [by_seed[seed].upstream.output for seed in (1, 0)],
        "upstream_records": [by_seed[seed].upstream.record for seed in (1, 0)],
        "files": [],
    }
    assert by_seed[1].path(plan.CHAIN_TASK) == f"results/data/pbmc68k_batched/{key}/annotation-{chain_key}/seed1.h5ad"
    inputs = sorted({run.path(plan.CHAINED_INPUT) for run in chained})  # one per upstream run and seed
    assert len(inputs) == len({(run.upstream.method, run.upstream.variant, run.seed) for run in chained})
    assert inputs[0].endswith(f"/annotation-{chain_key}/input.h5ad")
    assert representation.chained_evaluation("annotation", "pbmc68k_batched") == {
        "prepared": sorted({run.path(plan.CHAIN_TASK) for run in chained}),
        "outputs": [run.output for run in chained],
        "inputs": inputs,
        "tables": [],
    }


def test_a_chained_job_of_other_settings_or_of_no_planned_upstream_run_is_refused(representation):
    chain_key = representation.plan.chained[0].chain_key
    with pytest.raises(
        NotPlanned,
        match=rf"^annotation on pbmc68k_batched: key 0000000000 is of other settings than "
        rf"this configuration's \({chain_key}\)",
    ):
        representation.chained_run("annotation", "pbmc68k_batched", "0000000000", "pca", "default", "0123456789")
    with pytest.raises(
        NotPlanned, match="^no planned run pbmc68k_batched/pca/default with key 0123456789 for annotation to chain on$"
    ):
        representation.chained_run("annotation", "pbmc68k_batched", chain_key, "pca", "default", "0123456789")
