"""The task boundary, enforced in what each method is handed (issue 53): a lineage method gets the true tree only
when its entry needs `supervision`, a representation method no label, and a classifier the labels of each fit's own
training cells alone — never those of the calibration and query cells it is scored on."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, TRACKS
from runs import run_and_score

from celldag.jobs.runner import withheld


def label_bearing(inputs, n: int, names: set[str]) -> list[str]:
    """The fields of ``inputs`` (and of its dicts) holding a per-cell array with any of ``names`` in it."""
    found = []
    for field in dataclasses.fields(inputs):
        value = getattr(inputs, field.name)
        values = value.items() if isinstance(value, dict) else [(None, value)]
        for key, array in values:
            if isinstance(array, np.ndarray) and array.shape[:1] == (n,) and array.dtype.kind in "UO":
                if names & set(np.asarray(array).astype(str).ravel().tolist()):
                    found.append(field.name if key is None else f"{field.name}[{key}]")
    return found


@pytest.mark.parametrize("needs", [[], ["supervision"]])
def test_a_lineage_method_reads_the_true_tree_only_when_its_entry_needs_supervision(tmp_path, needs):
    entry = {
        "track": "lineage",
        "run": "boundary_methods:true_tree",
        "params": {},
        "variants": {"default": {}},
        "needs": needs,
    }
    status, run_dir = run_and_score(tmp_path, entry)
    if needs:  # declared (CellTreeQM's supervision settings): the tree is there, and it scores perfectly
        assert status == "ok"
        scores = pd.read_parquet(run_dir / "scores.parquet").set_index("metric")["value"]
        assert scores["rf"] == 0.0
    else:
        assert status == "failed"
        assert "the true tree was withheld" in json.loads((run_dir / "run.json").read_text())["status_reason"]


def test_the_entries_that_train_on_the_true_tree_declare_it_and_withheld_blanks_it_for_the_rest():
    """CellTreeQM's training (celltreeqm, and the paper's triplet and quadruplet baselines on its encoder) learns from
    what its setting reveals of the tree: those entries, and no other, need `supervision`."""
    from celldag.lineage.track import LineageInput
    from celldag.registry import read_yaml

    methods = read_yaml(REPO / "config/methods.yaml")
    declared = sorted(m for m, entry in methods.items() if "supervision" in entry.get("needs", []))
    trains_on_quartets = sorted(m for m, entry in methods.items() if entry["run"] == "celldag.methods.celltreeqm:run")
    assert declared == trains_on_quartets == ["celltreeqm", "quadruplet", "triplet"]
    given = LineageInput(names=("a", "b"), features=np.zeros((2, 1)), train_features=None, tree_newick="(a,b);")
    assert withheld(given, []).tree_newick is None and withheld(given, ["supervision"]).tree_newick == "(a,b);"
    assert TRACKS["lineage"].inputs.keys() >= {"supervision"}


def test_a_representation_method_is_handed_no_label():
    from celldag.jobs.prepare import prepare_dataset
    from celldag.representation.track import method_input

    entry = {"track": "representation", "loader": "celldag.data.pbmc:prepare_pbmc68k_batched", "params": {}}
    prepared = prepare_dataset("pbmc68k_batched", entry, TRACKS["representation"], 0)
    labels = set(prepared.obs["label"].astype(str))
    inputs = method_input(prepared, None)
    for needs in ([], ["counts", "batches"]):  # what a method hands over is what the runner leaves after withheld
        assert label_bearing(withheld(inputs, needs), prepared.n_obs, labels) == []
    # an oracle control (kind: control, needs: [truth]; the schema refuses it to any other kind) gets them, and only it
    assert label_bearing(withheld(inputs, ["truth"]), prepared.n_obs, labels) == ["labels"]


def test_an_oracle_reads_the_truth_and_scores_at_the_ceiling_a_null_at_the_floor(tmp_path):
    """The lineage oracle with no NNI move returns the true tree (RF 0) only when handed it; the random tree scores
    near RF 1."""
    oracle = {
        "track": "lineage",
        "run": "celldag.methods.control_trees:oracle_tree",
        "params": {"nni_rate": 0.0},
        "variants": {"default": {}},
        "needs": ["truth"],
        "kind": "control",
    }
    status, run_dir = run_and_score(tmp_path, oracle, tag="oracle")
    assert status == "ok"
    assert pd.read_parquet(run_dir / "scores.parquet").set_index("metric")["value"]["rf"] == 0.0
    status, run_dir = run_and_score(tmp_path, {**oracle, "needs": []}, tag="blind")
    assert status == "failed"
    assert "needs: [truth]" in json.loads((run_dir / "run.json").read_text())["status_reason"]
    null = {
        "track": "lineage",
        "run": "celldag.methods.control_trees:null_tree",
        "params": {"shape": "random"},
        "variants": {"default": {}},
        "kind": "control",
    }
    status, run_dir = run_and_score(tmp_path, null, tag="null")
    assert status == "ok"
    assert pd.read_parquet(run_dir / "scores.parquet").set_index("metric")["value"]["rf"] > 0.8


def test_a_classifier_is_handed_the_labels_of_its_fits_training_cells_alone():
    import anndata

    from celldag.annotation.track import chain_input, chain_task, method_input
    from celldag.representation.preprocess import preprocess

    rng = np.random.default_rng(0)
    labels = np.array(["B", "NK", "T"])[np.arange(300) % 3]
    counts = rng.poisson(1.0 + 4.0 * (np.arange(40)[None, :] % 3 == np.arange(300)[:, None] % 3), size=(300, 40))
    raw = anndata.AnnData(
        X=counts.astype(np.float32),
        var=pd.DataFrame(index=[f"g{i}" for i in range(40)]),
        obs=pd.DataFrame(
            {"type": labels, "sample": np.array(["a", "b", "c"])[np.arange(300) % 2]},
            index=[f"c{i}" for i in range(300)],
        ),
    )
    data = preprocess(raw, label_key="type", batch_key="sample", seed=0, params={})
    data.uns.update(dataset_id="lab", track="representation", seed=0)
    task = chain_task(data, {}, 0)
    upstream = anndata.AnnData(
        obs=pd.DataFrame(index=data.obs_names),
        uns={"status": "ok"},
        obsm={"X_emb": np.asarray(data.X, dtype=np.float32)},
    )
    inputs = method_input(chain_input(task, upstream, {"config": {"method": {}}}), None)
    truth = task.obs["label"].astype(str).to_numpy()
    split = task.obs["split"].astype(str).to_numpy()
    for fit, mask in inputs.fits.items():
        assert (inputs.labels[fit] == truth[mask]).all() and not (mask & (split != "train")).any()
    assert label_bearing(inputs, task.n_obs, set(truth)) == []  # no per-cell label array: the scored cells are blind
    with pytest.raises(ValueError, match="fit 'random': needs the labels of its .* training cells alone"):
        dataclasses.replace(inputs, labels=inputs.labels | {"random": truth})
