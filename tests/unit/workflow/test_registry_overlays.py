"""A lab's registry files merged over celldag's, and parameter names checked when the config is parsed:
an unknown key of a dataset's or method's params (either track, registry or config) is one line naming
the file, the entry, the key and the accepted keys; a method_params key a selected variant fixes is refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import REPO, copy_workflow
from lab_data import BASE, LAB_LINEAGE, overlay

from celldag.cli import main
from celldag.registry import ConfigError, load_config

LAB_RNA = {
    "track": "representation",
    "source": "local",
    "loader": "celldag.data.h5ad:prepare_h5ad",
    "description": "x",
    "license": "x",
    "files": [{"name": "rna.h5ad", "path": "rna.h5ad"}],
    "params": {"file": "rna.h5ad", "label_key": "cell_type"},
}


def test_a_labs_entries_join_celldags_and_keep_their_file(tmp_path, monkeypatch):
    lab_nj = {
        "track": "lineage",
        "run": "celldag.methods.distance_tree:run",
        "description": "x",
        "params": {"features": "raw", "reconstruction": "nj"},
    }
    _, registries = overlay(tmp_path, monkeypatch, lab_datasets={"lab_rna": LAB_RNA}, lab_methods={"lab_nj": lab_nj})
    assert {"lab_rna", "bm_default", "pbmc68k_batched"} <= set(registries.datasets)
    assert registries.datasets["lab_rna"]["params"]["file"] == "rna.h5ad"
    assert registries.methods["lab_nj"]["variants"] == {"default": {}}  # the schema's defaults, as for celldag's own
    assert registries.origin("datasets", "lab_rna") == "lab/datasets.yaml"
    assert registries.origin("datasets", "bm_default").endswith("config/datasets.yaml")


def test_an_id_defined_twice_names_both_files(tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as raised:
        overlay(tmp_path, monkeypatch, lab_datasets={"bm_default": LAB_LINEAGE})
    assert str(raised.value) == (
        f"lab/datasets.yaml: bm_default: datasets id 'bm_default' is defined twice, in "
        f"{REPO}/config/datasets.yaml and in lab/datasets.yaml"
    )


def test_a_missing_overlay_file_names_the_config_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^lab\.yaml: registries\.methods\[0\]: lab/nope\.yaml: file not found"):
        load_config(BASE | {"registries": {"methods": ["lab/nope.yaml"]}}, "lab.yaml", root=REPO)


# ---------------------------------------------------------------- unknown parameter names


@pytest.mark.parametrize(
    ("datasets", "methods", "config", "message"),
    [
        # dataset params, each track
        (
            {"lab_rna": LAB_RNA | {"params": LAB_RNA["params"] | {"lable_key": "x"}}},
            None,
            {},
            "lab/datasets.yaml: lab_rna.params: unknown key 'lable_key'; "
            "accepted: batch_key, counts_layer, duplicate_genes, "
            "file, label_key, lognorm_layer, min_cells, min_genes, n_top_genes, split_key, val_fraction",
        ),
        (
            {"lab_tree": LAB_LINEAGE | {"params": LAB_LINEAGE["params"] | {"standardise": True, "replicate": True}}},
            None,
            {},
            "lab/datasets.yaml: lab_tree.params: unknown keys 'replicate', 'standardise'; "
            "accepted: file, layer, leaf_key, "
            "lineage_key, newick, newick_key, replicate_key, replicates, standardize, validation_cells, values",
        ),
        # the representation loader's earlier names say what they became
        (
            {"lab_rna": LAB_RNA | {"params": LAB_RNA["params"] | {"layer": "counts", "values": "lognorm"}}},
            None,
            {},
            "lab/datasets.yaml: lab_rna.params: unknown keys 'layer', 'values'; "
            "layer became counts_layer (layer: counts is counts_layer: counts); "
            "values became lognorm_layer (values: lognorm is counts_layer: null, lognorm_layer: X); "
            "accepted: batch_key, counts_layer, duplicate_genes, file, label_key, lognorm_layer, min_cells, min_genes, "
            "n_top_genes, split_key, val_fraction",
        ),
        # method params, variants and param_schema, each track
        (
            None,
            {
                "lab_pca": {
                    "track": "representation",
                    "run": "celldag.methods.pca:run",
                    "description": "x",
                    "params": {"n_component": 20},
                }
            },
            {},
            "lab/methods.yaml: lab_pca.params: unknown key 'n_component'; accepted: n_components",
        ),
        (
            None,
            {
                "lab_nj": {
                    "track": "lineage",
                    "run": "celldag.methods.distance_tree:run",
                    "description": "x",
                    "params": {"features": "raw", "reconstruction": "nj"},
                    "variants": {"pca": {"feature": "pca"}},
                }
            },
            {},
            "lab/methods.yaml: lab_nj.variants.pca: unknown key 'feature'; "
            "accepted: features, n_components, reconstruction",
        ),
        (
            None,
            {
                "lab_nj": {
                    "track": "lineage",
                    "run": "celldag.methods.distance_tree:run",
                    "description": "x",
                    "params": {"features": "raw", "reconstruction": "nj"},
                    "param_schema": {"n_components": {"type": "integer"}, "reconstrution": {"enum": ["nj"]}},
                }
            },
            {},
            "lab/methods.yaml: lab_nj.param_schema: unknown key 'reconstrution'; "
            "accepted: features, n_components, reconstruction",
        ),
        # a run function without a declaration: its entry's params and param_schema are the declaration
        (
            None,
            {
                "lab_own": {
                    "track": "lineage",
                    "run": "celldag.lineage.reconstruct:reconstruct",
                    "description": "x",
                    "params": {"method": "nj"},
                    "variants": {"fast": {"methd": "upgma"}},
                }
            },
            {},
            "lab/methods.yaml: lab_own.variants.fast: unknown key 'methd'; accepted: method",
        ),
        # the run config's method_params
        (
            None,
            None,
            {
                "methods": ["scilama/text"],
                "datasets": ["pbmc68k_batched"],
                "method_params": {"scilama": {"latent_dims": 30}},
            },
            "lab.yaml: method_params.scilama: unknown key 'latent_dims'; "
            "accepted: batch_size, checkpoint_every, checkpoint_seconds, device, "
            "dropout, embedding, gamma, gene_hidden_dims, gene_input, hidden_dims, kl_ramp_epochs, kl_warmup_epochs, "
            "latent_dim, lr, lr_decay, max_epochs, min_delta, mode, patience, use_batch, use_gene_vae, weight_decay",
        ),
        (
            None,
            None,
            {"methods": ["celltreeqm/supervised"], "method_params": {"celltreeqm": {"step": 30}}},
            "lab.yaml: method_params.celltreeqm: unknown key 'step'; "
            "accepted: checkpoint_every, checkpoint_seconds, device,",
        ),
    ],
    ids=[
        "representation dataset",
        "lineage dataset",
        "legacy layer/values",
        "method params",
        "method variant",
        "method param_schema",
        "undeclared run function",
        "method_params representation",
        "method_params lineage",
    ],
)
def test_unknown_parameter_names_are_refused_at_parse_time(tmp_path, monkeypatch, datasets, methods, config, message):
    with pytest.raises(ConfigError) as raised:
        overlay(tmp_path, monkeypatch, lab_datasets=datasets, lab_methods=methods, **config)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_every_shipped_loader_and_method_declares_its_parameters():
    from celldag.registry import declared_params, read_yaml

    for kind, field in (("datasets", "loader"), ("methods", "run")):
        for entry_id, entry in read_yaml(REPO / f"config/{kind}.yaml").items():
            accepted, _ = declared_params(entry[field], entry_id)
            assert accepted is not None, f"{entry_id}: {entry[field]} declares no accepted_params"
            assert set(entry.get("params", {})) <= accepted, entry_id


def test_declarations_are_read_from_source_without_importing_the_modules(repo):
    """Parsing the workflow reads every declaration of the registries and imports none of the heavy libraries."""
    heavy = (
        "torch",
        "anndata",
        "scanpy",
        "scvi",
        "skbio",
        "pandas",
        "celldag.methods.celltreeqm.train",
        "celldag.data.h5ad",
    )
    code = (
        "import sys; from celldag.registry import load_config, read_yaml; "
        "load_config(read_yaml('config/config.yaml'), 'c', root='.'); "
        f"print([name for name in {heavy!r} if name in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_declaration_that_is_not_literal_is_read_by_importing(tmp_path, monkeypatch):
    from celldag.extensions import declared_attribute

    (tmp_path / "labmod.py").write_text(
        "NAMES = {'alpha': 1}\n"
        "def literal(inputs, params, seed): ...\n"
        "literal.accepted_params = (*NAMES, 'beta')\n"
        "def computed(inputs, params, seed): ...\n"
        "computed.accepted_params = tuple(sorted(['b', 'a']))\n"
        "def undeclared(inputs, params, seed): ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert declared_attribute("labmod:literal", "accepted_params", "x") == ("alpha", "beta")
    assert "labmod" not in sys.modules  # read from its source
    assert declared_attribute("labmod:computed", "accepted_params", "x") == ("a", "b")  # imported to evaluate
    assert declared_attribute("labmod:undeclared", "accepted_params", "x") is None
    sys.modules.pop("labmod")


def test_method_params_of_a_key_a_selected_variant_fixes_are_refused(tmp_path, monkeypatch):
    sorted_variant = {
        "methods": ["celltreeqm/high_level_partition_sorted"],
        "method_params": {"celltreeqm": {"select": "topology_mismatch"}},
    }
    with pytest.raises(ConfigError) as raised:
        overlay(tmp_path, monkeypatch, **sorted_variant)
    assert str(raised.value) == (
        "lab.yaml: method_params.celltreeqm.select: the variant celltreeqm/high_level_partition_sorted fixes select "
        f"itself (select: 'ordered_mismatch', {REPO}/config/methods.yaml), "
        "so this override would be dropped; select other "
        "variants or define a variant of your own"
    )
    # the same override with variants that leave the key to the method's params is applied
    _, registries = overlay(tmp_path, monkeypatch, **sorted_variant | {"methods": ["celltreeqm/high_level_partition"]})
    assert registries.methods["celltreeqm"]["params"]["select"] == "topology_mismatch"


def test_snakemake_dry_run_refuses_an_unknown_param_in_one_line(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    datasets["bm_default"]["params"]["dept"] = 4
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n"], cwd=workdir, capture_output=True, text=True)
    assert result.returncode != 0
    console = result.stdout + result.stderr
    assert (
        "invalid configuration: config/datasets.yaml: bm_default.params: unknown key 'dept'; accepted: "
        "count_depth, count_scale, depth, max_walk, measurement_std, n_noise, n_signal, n_spurious, noise_std, "
        "standardize"
    ) in console


def test_celldag_validate_says_an_unknown_param_in_one_line(tmp_path, monkeypatch, capsys):
    overlay_datasets = {"lab_rna": LAB_RNA | {"params": LAB_RNA["params"] | {"layer": "counts"}}}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab/datasets.yaml").write_text(yaml.safe_dump(overlay_datasets))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(BASE | {"registries": {"datasets": ["lab/datasets.yaml"]}}))
    status = main(["validate", "lab_rna", "--configfile", "run.yaml", "--workflow", str(REPO)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error: lab/datasets.yaml: lab_rna.params: unknown key 'layer'; layer became counts_layer")
    assert "Traceback" not in err and err.count("\n") == 1


def test_a_labs_registry_naming_the_classifiers_old_module_still_runs_and_is_told_the_new_name(tmp_path, monkeypatch):
    from celldag import extensions
    from celldag.annotation.track import AnnotationInput, fit_labels
    from celldag.methods import classifiers

    lab_logistic = {
        "track": "annotation",
        "run": "celldag.annotation.classifiers:logistic",
        "kind": "baseline",
        "env": "representation",
        "description": "celldag's logistic under its 0.2 name",
    }
    with pytest.warns(FutureWarning) as warned:
        _, registries = overlay(tmp_path, monkeypatch, lab_methods={"lab_logistic": lab_logistic})
    (message,) = [str(warning.message) for warning in warned if "classifiers" in str(warning.message)]
    assert message.startswith("lab/methods.yaml: lab_logistic.run: 'celldag.annotation.classifiers:logistic'")
    assert message.endswith("write 'celldag.methods.classifiers:logistic'")
    run = extensions.load(registries.methods["lab_logistic"]["run"])
    assert run is classifiers.logistic
    rng = np.random.default_rng(0)
    labels = np.repeat(["a", "b"], 20)
    fits = {"random": rng.random(40) < 0.5}
    inputs = AnnotationInput(
        features=rng.normal(size=(40, 3)) + (labels == "a")[:, None] * 4,
        batch=np.zeros(40),
        labels=fit_labels(labels, fits),
        classes=("a", "b"),
        fits=fits,
    )
    old, new = run(inputs, {}, 0), classifiers.logistic(inputs, {}, 0)
    assert np.array_equal(old.obsm["proba_random"], new.obsm["proba_random"])
