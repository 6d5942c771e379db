"""Outputs made elsewhere (celldag.methods.imported): each reader's checks and their one-line messages, the
file-param hook (registry check, plan paths, runner digests) without Snakemake."""

from __future__ import annotations

import json

import anndata
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, TRACKS

from celldag.annotation.track import AnnotationInput, fit_labels
from celldag.contracts import ContractError
from celldag.errors import InputError
from celldag.lineage.reconstruct import euclidean_distances
from celldag.lineage.track import LineageInput
from celldag.methods import distance_tree, imported
from celldag.representation.track import RepresentationInput

CELLS = tuple(f"c{i}" for i in range(6))
LEAVES = tuple(f"leaf{i}" for i in range(8))


def refused(call, *args) -> str:
    """The ContractError (or InputError) of ``call(*args)``, one line."""
    with pytest.raises(InputError) as raised:
        call(*args)
    assert "\n" not in str(raised.value)
    return str(raised.value)


# ---------------------------------------------------------------- representation


def cells_input() -> RepresentationInput:
    n = len(CELLS)
    return RepresentationInput(
        names=CELLS,
        features=np.zeros((n, 2), np.float32),
        gene_names=("g0", "g1"),
        batch=np.full(n, "b"),
        train_mask=np.ones(n, bool),
        lognorm=np.zeros((n, 2)),
        counts=None,
    )


def write_embedding(path, names, values) -> str:
    adata = anndata.AnnData(obs=pd.DataFrame(index=list(names)))
    if values is not None:
        adata.obsm["X_emb"] = values
    adata.write_h5ad(path)
    return str(path)


def test_an_embedding_is_put_in_the_prepared_order_of_its_cells(tmp_path):
    values = np.arange(12, dtype=np.float64).reshape(6, 2)
    order = [3, 0, 5, 1, 4, 2]
    path = write_embedding(tmp_path / "emb.h5ad", [CELLS[i] for i in order], values[order])
    result = imported.embedding(cells_input(), {"path": path}, seed=0)
    assert result.embedding.tobytes() == values.tobytes() and result.uns == {"imported": path}


def test_an_embedding_with_a_nan_or_without_x_emb_is_refused_naming_file_and_field(tmp_path):
    values = np.ones((6, 2))
    values[4, 1] = np.nan
    path = write_embedding(tmp_path / "nan.h5ad", CELLS, values)
    assert (
        refused(imported.embedding, cells_input(), {"path": path}, 0)
        == f"{path}: obsm['X_emb']: 1 non-finite values (first at row 4, column 1)"
    )
    path = write_embedding(tmp_path / "none.h5ad", CELLS, None)
    assert (
        refused(imported.embedding, cells_input(), {"path": path}, 0)
        == f"{path}: obsm['X_emb']: missing (the cell embedding: cells × dimensions)"
    )


def test_an_embedding_of_other_cells_says_how_many_differ_and_names_the_first(tmp_path):
    path = write_embedding(tmp_path / "short.h5ad", CELLS[:4], np.ones((4, 2)))
    assert (
        refused(imported.embedding, cells_input(), {"path": path}, 0)
        == f"{path}: obs_names: 4 cells in the file, 6 in the prepared dataset: 2 missing (first: ['c4', 'c5'])"
    )
    path = write_embedding(tmp_path / "long.h5ad", (*CELLS, "x1", "x2", "x3", "x4"), np.ones((10, 2)))
    assert (
        refused(imported.embedding, cells_input(), {"path": path}, 0)
        == f"{path}: obs_names: 10 cells in the file, 6 in the prepared dataset: 4 not in the prepared dataset "
        "(first: ['x1', 'x2', 'x3'])"
    )


def test_a_file_that_is_no_h5ad_is_refused(tmp_path):
    (tmp_path / "emb.h5ad").write_text("not hdf5")
    assert refused(imported.embedding, cells_input(), {"path": str(tmp_path / "emb.h5ad")}, 0).startswith(
        f"{tmp_path / 'emb.h5ad'}: file: not a readable h5ad file"
    )


# ---------------------------------------------------------------- lineage


def leaves_input(seed: int = 0) -> LineageInput:
    features = np.random.default_rng(seed).normal(size=(len(LEAVES), 5))
    return LineageInput(names=LEAVES, features=features, train_features=None, tree_newick="")


def write_matrix(path, distances, names, sep="\t") -> str:
    pd.DataFrame(distances, index=list(names), columns=list(names)).to_csv(path, sep=sep)
    return str(path)


def test_a_newick_file_gives_the_tree_it_holds(tmp_path):
    inputs = leaves_input()
    nj = distance_tree.run(inputs, {"features": "raw", "reconstruction": "nj"}, seed=0).tree_newick
    (tmp_path / "tree.nwk").write_text(f"[written by our lab]\n{nj}\n")
    result = imported.tree(inputs, {"path": str(tmp_path / "tree.nwk")}, seed=0)
    assert result.tree_newick == nj and result.embedding is None


@pytest.mark.parametrize(("suffix", "sep", "how"), [(".tsv", "\t", "nj"), (".csv", ",", "upgma")])
def test_a_distance_matrix_is_built_into_the_tree_distance_tree_builds(tmp_path, suffix, sep, how):
    inputs = leaves_input(1)
    order = [5, 2, 7, 0, 1, 6, 3, 4]  # rows and columns in another order than the prepared leaves
    distances = euclidean_distances(inputs.features)[np.ix_(order, order)]
    path = write_matrix(tmp_path / f"d{suffix}", distances, [LEAVES[i] for i in order], sep)
    expected = distance_tree.run(inputs, {"features": "raw", "reconstruction": how}, seed=0).tree_newick
    assert imported.tree(inputs, {"path": path, "reconstruction": how}, seed=0).tree_newick == expected


def test_format_overrides_the_suffix_and_an_unknown_suffix_is_refused(tmp_path):
    inputs = leaves_input()
    path = write_matrix(tmp_path / "d.txt", euclidean_distances(inputs.features), LEAVES)
    assert imported.tree(inputs, {"path": path, "format": "matrix"}, seed=0).tree_newick
    assert refused(imported.tree, inputs, {"path": path}, 0) == (
        f"{path}: file: suffix '.txt' is neither a Newick tree's (.nwk, .newick, .tre) nor a distance matrix's "
        "(.tsv, .csv); give params.format: newick or matrix"
    )
    assert (
        refused(imported.tree, inputs, {"path": path, "format": "phylip"}, 0)
        == f"params.format: 'phylip' is not one of newick, matrix ({path})"
    )


def test_a_newick_over_other_leaves_or_malformed_is_refused(tmp_path):
    path = tmp_path / "tree.nwk"
    path.write_text("((leaf0,leaf1),(leaf2,leaf3),(leaf4,(leaf5,(leaf6,other))));")
    assert (
        refused(imported.tree, leaves_input(), {"path": str(path)}, 0)
        == f"{path}: leaves: 8 leaves in the file, 8 in the prepared dataset: 1 missing (first: ['leaf7']); "
        "1 not in the prepared dataset (first: ['other'])"
    )
    path.write_text("((leaf0,leaf1),(leaf2,leaf3)")
    assert refused(imported.tree, leaves_input(), {"path": str(path)}, 0).startswith(
        f"{path}: tree: not a valid Newick tree (malformed Newick at character"
    )


def bad_matrix(change) -> np.ndarray:
    distances = euclidean_distances(leaves_input().features)
    change(distances)
    return distances


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.__setitem__((1, 2), d[1, 2] + 0.5), "values: not symmetric: row 'leaf1', column 'leaf2' holds"),
        (
            lambda d: d.__setitem__((3, 3), 0.25),
            "diagonal: 1 non-zero distances of a leaf to itself (first: 'leaf3': 0.25)",
        ),
        (
            lambda d: d.__setitem__((0, 4), -1.0),
            "values: 1 negative distances (first: row 'leaf0', column 'leaf4': -1.0)",
        ),
        (lambda d: d.__setitem__((6, 2), np.nan), "values: 1 non-finite values (first at row 6, column 2)"),
    ],
)
def test_a_distance_matrix_that_is_no_metric_is_refused(tmp_path, change, message):
    path = write_matrix(tmp_path / "d.tsv", bad_matrix(change), LEAVES)
    assert refused(imported.tree, leaves_input(), {"path": path}, 0).startswith(f"{path}: {message}")


def test_a_distance_matrix_symmetric_within_rounding_passes_and_text_or_other_leaves_do_not(tmp_path):
    distances = euclidean_distances(leaves_input().features)
    rounded = tmp_path / "rounded.tsv"
    pd.DataFrame(distances, index=list(LEAVES), columns=list(LEAVES)).to_csv(rounded, sep="\t", float_format="%.6g")
    assert imported.tree(leaves_input(), {"path": str(rounded)}, seed=0).tree_newick
    text = pd.DataFrame(distances, index=list(LEAVES), columns=list(LEAVES)).astype(object)
    text.iloc[2, 5] = "far"
    text.to_csv(tmp_path / "text.tsv", sep="\t")
    assert (
        refused(imported.tree, leaves_input(), {"path": str(tmp_path / "text.tsv")}, 0)
        == f"{tmp_path / 'text.tsv'}: values: must be distances (could not convert string to float: 'far')"
    )
    path = write_matrix(tmp_path / "seven.tsv", distances[:7, :7], LEAVES[:7])
    assert (
        refused(imported.tree, leaves_input(), {"path": path}, 0)
        == f"{path}: index (first column): 7 leaves in the file, 8 in the prepared dataset: "
        "1 missing (first: ['leaf7'])"
    )


# ---------------------------------------------------------------- annotation


TASK_LABELS = np.array(["T", "B", "NK", "T", "B", "NK"])


def task_input() -> AnnotationInput:
    labels = TASK_LABELS
    batch = np.array(["b0", "b0", "b0", "b1", "b1", "b1"])
    fits = {"random": np.ones(6, bool), "without_0": batch != "b0", "without_1": batch != "b1"}
    return AnnotationInput(
        features=np.zeros((6, 2), np.float32),
        labels=fit_labels(labels, fits),
        batch=batch,
        classes=("B", "NK", "T"),
        fits=fits,
        names=CELLS,
    )


def task_probabilities(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    raw = {key: rng.random((6, 3)) for key in ("proba_random", "proba_without_0", "proba_without_1")}
    return {key: values / values.sum(axis=1, keepdims=True) for key, values in raw.items()}


def write_probabilities(path, obsm, names=CELLS, classes=("B", "NK", "T")) -> str:
    adata = anndata.AnnData(obs=pd.DataFrame(index=list(names)), obsm=obsm)
    adata.uns["classes"] = list(classes)
    adata.write_h5ad(path)
    return str(path)


def test_probabilities_are_put_in_the_tasks_cell_and_class_order(tmp_path):
    expected = task_probabilities()
    rows, columns = [4, 2, 0, 5, 1, 3], [2, 0, 1]  # cells shuffled; classes T, B, NK
    obsm = {key: values[np.ix_(rows, columns)] for key, values in expected.items()}
    path = write_probabilities(tmp_path / "p.h5ad", obsm, [CELLS[i] for i in rows], ["T", "B", "NK"])
    result = imported.probabilities(task_input(), {"path": path}, seed=0)
    assert {key: value.tobytes() for key, value in result.obsm.items()} == {
        key: value.tobytes() for key, value in expected.items()
    }
    assert result.uns["classes"] == ["B", "NK", "T"] and result.uns["fits"] == ["random", "without_0", "without_1"]


def test_probabilities_of_other_fits_classes_or_cells_are_refused(tmp_path):
    obsm = task_probabilities()
    missing = write_probabilities(tmp_path / "m.h5ad", {k: v for k, v in obsm.items() if k != "proba_without_1"})
    assert refused(imported.probabilities, task_input(), {"path": missing}, 0) == (
        f"{missing}: obsm['proba_without_1']: missing; "
        "the task's fits need proba_random, proba_without_0, proba_without_1"
    )
    extra = write_probabilities(tmp_path / "e.h5ad", obsm | {"proba_b2": obsm["proba_random"]})
    assert refused(imported.probabilities, task_input(), {"path": extra}, 0).startswith(
        f"{extra}: obsm['proba_b2']: not a fit of the task"
    )
    classes = write_probabilities(tmp_path / "c.h5ad", obsm, classes=("B", "NK", "Mono"))
    assert refused(imported.probabilities, task_input(), {"path": classes}, 0) == (
        f"{classes}: uns['classes']: 3 classes in the file, 3 in the task: 1 missing (first: ['T']); "
        "1 not in the task (first: ['Mono'])"
    )
    cells = write_probabilities(tmp_path / "x.h5ad", obsm, names=(*CELLS[:5], "zz"))
    assert refused(imported.probabilities, task_input(), {"path": cells}, 0) == (
        f"{cells}: obs_names: 6 cells in the file, 6 in the task: 1 missing (first: ['c5']); "
        "1 not in the task (first: ['zz'])"
    )


def test_probabilities_off_the_simplex_break_the_tracks_contract_in_the_labs_file(tmp_path):
    obsm = task_probabilities()
    obsm["proba_without_0"] = obsm["proba_without_0"] * 2
    path = write_probabilities(tmp_path / "p.h5ad", obsm)
    assert (
        refused(imported.probabilities, task_input(), {"path": path}, 0)
        == f"{path}: obsm['proba_without_0']: must be (6, 3) probabilities"
    )


# ---------------------------------------------------------------- the file-param hook


def lab_config(tmp_path, monkeypatch, methods: dict, selected: list[str]):
    from celldag.registry import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "lab").mkdir(exist_ok=True)
    (tmp_path / "lab/methods.yaml").write_text(yaml.safe_dump(methods))
    config = {
        "datasets": ["pbmc68k_batched"],
        "methods": selected,
        "seeds": [0, 1],
        "registries": {"methods": ["lab/methods.yaml"]},
    }
    return load_config(config, "lab.yaml", root=REPO)


OUR_EMBEDDING = {
    "track": "representation",
    "run": "celldag.methods.imported:embedding",
    "description": "x",
    "params": {"path": "lab/emb/{dataset}/seed{seed}.h5ad"},
}
OUR_PROBABILITIES = {
    "track": "annotation",
    "run": "celldag.methods.imported:probabilities",
    "description": "x",
    "params": {"path": "lab/proba/{upstream}/seed{seed}.h5ad"},
}


def test_the_plan_names_each_runs_file_with_its_placeholders_filled_in(tmp_path, monkeypatch):
    from celldag.plan import make_plan, run_files

    config, registries = lab_config(
        tmp_path,
        monkeypatch,
        {"our_emb": OUR_EMBEDDING, "our_proba": OUR_PROBABILITIES},
        ["pca", "our_emb", "our_proba", "knn"],
    )
    plan = make_plan(config, registries)
    assert {run.method: run_files(run, registries) for run in plan.runs if run.seed == 1} == {
        "pca": [],
        "our_emb": ["lab/emb/pbmc68k_batched/seed1.h5ad"],
    }
    chained = {(run.chained_method, run.label, run.seed): run_files(run, registries) for run in plan.chained}
    assert chained[("our_proba", "our_emb/default", 0)] == ["lab/proba/our_emb-default/seed0.h5ad"]
    assert chained[("our_proba", "pca/default", 1)] == ["lab/proba/pca-default/seed1.h5ad"]
    assert chained[("knn", "pca/default", 1)] == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"path": "lab/{dataset}/{sed}.h5ad"},
            "lab/methods.yaml: our_emb.params.path: 'lab/{dataset}/{sed}.h5ad': unknown placeholder {sed}; "
            "known: {dataset}, {seed}",
        ),
        (
            {"path": "lab/{upstream}.h5ad"},  # only a chained track's runs chain on a run
            "lab/methods.yaml: our_emb.params.path: 'lab/{upstream}.h5ad': unknown placeholder {upstream}; "
            "known: {dataset}, {seed}",
        ),
        (
            {},
            "lab/methods.yaml: our_emb.params.path: the path of a file the method reads, "
            "relative to the working directory, "
            "with placeholders {dataset}, {seed}; got None",
        ),
        ({"path": "lab/{dataset"}, "lab/methods.yaml: our_emb.params.path: 'lab/{dataset' is not a path pattern"),
    ],
)
def test_a_file_param_that_is_no_pattern_of_the_runs_placeholders_fails_the_parse(
    tmp_path, monkeypatch, params, message
):
    from celldag.registry import ConfigError

    with pytest.raises(ConfigError) as raised:
        lab_config(tmp_path, monkeypatch, {"our_emb": OUR_EMBEDDING | {"params": params}}, ["our_emb"])
    assert str(raised.value).startswith(message)


def test_the_runner_digests_the_labs_file_and_stops_on_a_bad_one_leaving_nothing(tmp_path, monkeypatch):
    """A lineage import by the runner: the record's input_sha256 holds the file; a bad file raises, no output."""
    from runs import DATASET, NJ_RAW, run_and_score

    from celldag.artifacts import sha256_file
    from celldag.jobs.runner import run_method

    monkeypatch.chdir(tmp_path)
    _, nj_dir = run_and_score(tmp_path, NJ_RAW, tag="nj")
    nj = anndata.read_h5ad(nj_dir / "output.h5ad")
    lab_file = tmp_path / "lab/bm_t-seed0.nwk"
    lab_file.parent.mkdir()
    lab_file.write_text(nj.uns["tree_newick"])
    entry = {
        "track": "lineage",
        "run": "celldag.methods.imported:tree",
        "params": {"path": "lab/{dataset}-seed{seed}.nwk"},
        "variants": {"default": {}},
    }
    status, run_dir = run_and_score(tmp_path, entry, tag="ours")
    record = json.loads((run_dir / "run.json").read_text())
    assert status == "ok" and record["input_sha256"]["lab/bm_t-seed0.nwk"] == sha256_file(lab_file)
    assert anndata.read_h5ad(run_dir / "output.h5ad").uns["tree_newick"] == nj.uns["tree_newick"]
    assert record["config"]["params"] == {
        "path": "lab/{dataset}-seed{seed}.nwk"
    }  # the pattern: an audit fills it in again

    bad = tmp_path / "bad"

    def run_bad() -> None:
        run_method(
            prepared_path=str(tmp_path / "data0.h5ad"),
            output_path=str(bad / "output.h5ad"),
            record_path=str(bad / "run.json"),
            dataset_id="bm_t",
            dataset_entry=DATASET,
            method_id="ours",
            method_entry=entry,
            variant="default",
            seed=0,
            track=TRACKS["lineage"],
        )

    lab_file.write_text("(leaf_a,leaf_b,(leaf_c,leaf_d));")
    with pytest.raises(ContractError, match=r"^lab/bm_t-seed0\.nwk: leaves: 4 leaves in the file, \d+ in the prepared"):
        run_bad()
    assert not bad.exists() or not any(bad.iterdir())  # no output, record or checkpoint
    lab_file.unlink()
    with pytest.raises(
        ContractError, match=r"^lab/bm_t-seed0\.nwk: file: missing \(the file ours's params\.path names"
    ):
        run_bad()


def test_held_out_type_fits_are_optional_and_taken_when_given(tmp_path):
    """A lab's file need not hold the fits that leave one type out (its held-out-type scenario is then not scored);
    given, they are read like the others."""
    with_types = task_input()
    fits = with_types.fits | {"without_type_0": TASK_LABELS != "B"}
    with_types = AnnotationInput(**{**with_types.__dict__, "fits": fits, "labels": fit_labels(TASK_LABELS, fits)})
    obsm = task_probabilities()
    without = imported.probabilities(with_types, {"path": write_probabilities(tmp_path / "a.h5ad", obsm)}, seed=0)
    assert sorted(without.obsm) == ["proba_random", "proba_without_0", "proba_without_1"]
    assert without.uns["fits"] == ["random", "without_0", "without_1"]
    given = obsm | {"proba_without_type_0": task_probabilities(1)["proba_random"]}
    taken = imported.probabilities(with_types, {"path": write_probabilities(tmp_path / "b.h5ad", given)}, seed=0)
    assert taken.obsm["proba_without_type_0"].tobytes() == given["proba_without_type_0"].tobytes()
    assert taken.uns["fits"] == ["random", "without_0", "without_1", "without_type_0"]
