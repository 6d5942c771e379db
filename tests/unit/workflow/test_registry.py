"""Config and registry validation: one clear message naming the file and the key."""

from __future__ import annotations

import pytest
import yaml

from celldag.registry import KINDS, ConfigError, apply_schema, load_config, read_yaml


def write_tree(tmp_path, repo, config: dict, methods: dict | None = None):
    (tmp_path / "config").mkdir()
    for name in set(KINDS) - {"methods"}:
        (tmp_path / f"config/{name}.yaml").write_text((repo / f"config/{name}.yaml").read_text())
    methods_text = yaml.safe_dump(methods) if methods is not None else (repo / "config/methods.yaml").read_text()
    (tmp_path / "config/methods.yaml").write_text(methods_text)
    return config


def test_shipped_config_is_valid_and_defaults_are_filled(repo):
    config, registries = load_config(read_yaml(repo / "config/config.yaml"), "config/config.yaml", root=repo)
    assert config["registries"] == {
        "tracks": [],
        "datasets": [],
        "methods": [],
        "embeddings": [],
        "models": [],
    }  # no lab overlays
    assert registries.origin("methods", "nj_raw") == "config/methods.yaml"  # shown relative to the working directory
    assert config["evaluation"]["qdist_quartets"] == 100_000 and config["evaluation"]["delta_baseline"] == "nj_raw"
    assert (
        config["name"]
        == apply_schema({"datasets": ["bm_default"], "methods": ["nj_raw"]}, "config", "c")["name"]
        == "default"
    )
    nj = registries.methods["nj_raw"]
    assert (nj["gpu"], nj["env"], nj["kind"], nj["variants"]) == (False, "lineage", "baseline", {"default": {}})


def test_unknown_method_id_names_file_index_and_id(tmp_path, repo):
    config = write_tree(tmp_path, repo, {"datasets": ["bm_default"], "methods": ["nj_raw", "nj_bogus"]})
    with pytest.raises(
        ConfigError,
        match=r"^my\.yaml: methods\[1\]: unknown method id 'nj_bogus'; "
        r"known ids: bonsai, celltreeqm, celltypist, expression, genept_w, harmony, knn, logistic, majority, nj_pca",
    ):
        load_config(config, "my.yaml", root=tmp_path)


def test_unknown_dataset_and_variant(tmp_path, repo):
    config = write_tree(tmp_path, repo, {"datasets": ["nope"], "methods": ["nj_raw"]})
    with pytest.raises(ConfigError, match=r"datasets\[0\]: unknown dataset id 'nope'"):
        load_config(config, "c.yaml", root=tmp_path)
    config = {"datasets": ["bm_default"], "methods": ["nj_raw/fancy"]}
    with pytest.raises(ConfigError, match=r"method 'nj_raw' has no variant 'fancy'; known variants: default"):
        load_config(config, "c.yaml", root=tmp_path)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"datasets": ["bm_default"], "methods": ["nj_raw"], "seeds": ["a"]},
            r"c\.yaml: seeds\.0: 'a' is not of type 'integer'",
        ),
        ({"datasets": ["bm_default"]}, r"c\.yaml: \(top level\): 'methods' is a required property"),
        (
            {"datasets": ["bm_default"], "methods": ["nj_raw"], "sedes": [1]},
            r"c\.yaml: \(top level\): .*'sedes' was unexpected",
        ),
        # results/<name>/ holds a configuration's tables: a name must not be a shared folder of results/
        (
            {"name": "runs", "datasets": ["bm_default"], "methods": ["nj_raw"]},
            r"c\.yaml: name: 'runs' should not be valid",
        ),
        (
            {"name": "My run", "datasets": ["bm_default"], "methods": ["nj_raw"]},
            r"c\.yaml: name: 'My run' does not match",
        ),
    ],
)
def test_schema_errors_name_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        apply_schema(config, "config", "c.yaml")


def test_errors_name_the_file_that_set_the_key(tmp_path, repo):
    config = write_tree(tmp_path, repo, {"datasets": ["bm_default"], "methods": ["nj_bogus"]})
    sources = {"datasets": "config/config.yaml", "methods": "/lab/override.yaml"}
    with pytest.raises(ConfigError, match=r"^/lab/override\.yaml: methods\[0\]"):
        load_config(config, sources, root=tmp_path)


def test_registry_entry_errors_name_the_registry_file(tmp_path, repo):
    methods = {
        "nj_raw": {"track": "lineage", "run": "celldag.methods.distance_tree:run", "description": "x", "gpu": "yes"}
    }
    config = write_tree(tmp_path, repo, {"datasets": ["bm_default"], "methods": ["nj_raw"]}, methods)
    with pytest.raises(ConfigError, match=r"/config/methods\.yaml: nj_raw\.gpu: 'yes' is not of type 'boolean'"):
        load_config(config, "c.yaml", root=tmp_path)
    methods = {"nj_raw": {"track": "lineage", "description": "x"}}
    (tmp_path / "config/methods.yaml").write_text(yaml.safe_dump(methods))
    with pytest.raises(ConfigError, match=r"config/methods\.yaml: nj_raw: 'run' is a required property"):
        load_config(config, "c.yaml", root=tmp_path)


def test_bad_registry_id_is_rejected(tmp_path, repo):
    methods = {"NJ-raw": {"track": "lineage", "run": "m:run", "description": "x"}}
    config = write_tree(tmp_path, repo, {"datasets": ["bm_default"], "methods": ["nj_raw"]}, methods)
    with pytest.raises(ConfigError, match=r"config/methods\.yaml: .*NJ-raw"):
        load_config(config, "c.yaml", root=tmp_path)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        read_yaml(tmp_path / "absent.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        read_yaml(tmp_path / "list.yaml")


def test_command_line_seed_strings_become_integers(repo):
    config = {"datasets": ["bm_default"], "methods": ["nj_raw"], "seeds": ["0", "12"]}
    assert load_config(config, "--config", root=repo)[0]["seeds"] == [0, 12]
    with pytest.raises(ConfigError, match=r"--config: seeds\.0: '-1' is not of type 'integer'"):
        load_config({**config, "seeds": ["-1"]}, "--config", root=repo)


def test_method_params_override_the_registry(repo):
    config = {
        "datasets": ["bm_default"],
        "methods": ["celltreeqm"],
        "method_params": {"celltreeqm": {"proj_dim": 1024}},
    }
    _, registries = load_config(config, "paper.yaml", root=repo)
    assert registries.methods["celltreeqm"]["params"]["proj_dim"] == 1024
    assert registries.methods["triplet"]["params"]["proj_dim"] == 64  # the YAML anchor is not shared state
    with pytest.raises(
        ConfigError,
        match=r"paper\.yaml: method_params\.celltreeqm: unknown key 'proj_dims'; accepted: checkpoint_every, ",
    ):
        load_config(config | {"method_params": {"celltreeqm": {"proj_dims": 1}}}, "paper.yaml", root=repo)
    with pytest.raises(ConfigError, match=r"method_params\.nope: unknown method id 'nope'"):
        load_config(config | {"method_params": {"nope": {}}}, "paper.yaml", root=repo)


def test_paper_preset_is_valid(repo):
    config, registries = load_config(read_yaml(repo / "config/presets/paper.yaml"), "paper.yaml", root=repo)
    assert registries.methods["quadruplet"]["params"]["n_layers"] == 8
    assert registries.methods["quadruplet"]["params"]["loss"] == "quadruplet"


def test_paper_preset_plans_the_pancreas_benchmark(repo):
    from celldag.plan import data_key, make_plan

    config, registries = load_config(read_yaml(repo / "config/presets/paper.yaml"), "paper.yaml", root=repo)
    scilama = registries.methods["scilama"]["params"]
    assert (scilama["hidden_dims"], scilama["latent_dim"], scilama["batch_size"], scilama["max_epochs"]) == (
        [900, 400],
        40,
        128,
        500,
    )
    plan = make_plan(config, registries)
    jobs = plan.jobs_per_rule()
    assert "resources/scib_pancreas/human_pancreas_norm_complexBatch.h5ad" in plan.downloads
    assert "resources/tran2020_pancreas/myData_pancreatic_5batches.txt.gz" in plan.downloads
    assert "resources/embeddings/GenePT_gene_embedding_ada_text.pickle" in plan.downloads
    pancreas = ("scib_pancreas", "tran2020_pancreas")
    tables = {
        f"results/embeddings/{embedding}/{dataset}-{data_key(registries.datasets[dataset])}.parquet"
        for embedding in ("go_text", "genept_ada", "go_svd")
        for dataset in pancreas
    }
    assert tables == set(plan.gene_tables)
    for dataset in pancreas:
        pancreas_runs = [run for run in plan.runs if run.dataset == dataset]
        assert len(pancreas_runs) == 5 * (
            7 + 1 + 1 + 2 + 1
        )  # seeds × (sciLaMA variants, pca, harmony, scvi ×2, genept_w)
    assert jobs["embed_genes"] == 6 and jobs["evaluate"] == 7 and jobs["dataset_genes"] == 2


def test_command_line_strings_become_seeds_and_switches(repo):
    config = {
        "datasets": ["bm_default"],
        "methods": ["nj_raw"],
        "seeds": ["0", "3"],
        "compute": {"gpus": "true", "cpu_fallback": "false"},
        "downloads": {"strict": "true", "mirror": "mirror"},
    }  # what `--config` hands over
    config, _ = load_config(config, "--config", root=repo)
    assert config["seeds"] == [0, 3] and config["compute"] == {
        "gpus": True,
        "cpu_fallback": False,
        "job_per_seed": False,
    }
    assert config["downloads"]["strict"] is True and config["downloads"]["mirror"] == "mirror"
    with pytest.raises(ConfigError, match=r"compute\.gpus: 'yes' is not of type 'boolean'"):
        load_config(
            {"datasets": ["bm_default"], "methods": ["nj_raw"], "compute": {"gpus": "yes"}}, "--config", root=repo
        )


def test_a_variant_may_have_its_own_kind_and_must_exist(registries):
    from celldag.plan import method_kind

    assert method_kind(registries.methods["scilama"], "random") == "control"
    assert method_kind(registries.methods["scilama"], "text") == "method"
    assert method_kind(registries.methods["celltreeqm"], "high_level_partition_relabelled") == "control"
    assert method_kind(registries.methods["nj_raw"], "default") == "baseline"
