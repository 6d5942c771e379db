"""End to end, outputs made elsewhere (celldag.methods.imported): a lab's files scored like any run.

One workflow copy, one config whose methods include the import methods of a lab registry file: its pca
run on pbmc68k_batched, its nj_raw run on bm_default and its annotation task are made first; the test saves
pca's embedding (cells shuffled) and nj_raw's tree (Newick) as a lab's files, and knn's probabilities on pca's
embedding as an in-house annotator's, one file per embedding it chains on. Then the whole config runs:
every import is scored in the same table as what it came from, bit for bit, and knn chains on the imported
embedding as on pca's. Configs with bad or missing files are refused before anything is scored. Targets
stop at the leaderboard (no figures); one seed, 1 (not 0: the {seed} placeholder is filled in).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, run_snakemake

from celldag.artifacts import sha256_file
from celldag.plan import CHAIN_TASK, CHAINED_SCORES, DATASET_SCORES, LEADERBOARD, PREPARED, make_plan
from celldag.registry import load_config

pytestmark = pytest.mark.e2e

SEED = 1
EMBEDDING = "lab/emb/{dataset}/seed{seed}.h5ad"
TREE = "lab/trees/{dataset}-{seed}.nwk"
PROBABILITIES = "lab/proba/{dataset}/{upstream}/seed{seed}.h5ad"


def importing(track: str, function: str, path: str, **entry) -> dict:
    return {
        "track": track,
        "run": f"celldag.methods.imported:{function}",
        "description": "made elsewhere",
        "params": {"path": path},
        **entry,
    }


LAB_METHODS = {
    "our_pca": importing("representation", "embedding", EMBEDDING, kind="method"),  # pca's, cells in another order
    "our_tree": importing("lineage", "tree", TREE),  # nj_raw's tree as Newick
    "our_knn": importing(
        "annotation", "probabilities", PROBABILITIES
    ),  # knn's probabilities, cells and classes shuffled
    "our_nan": importing("representation", "embedding", "lab/bad/nan-{seed}.h5ad"),
    "our_short": importing("representation", "embedding", "lab/bad/short-{seed}.h5ad"),
    "our_missing": importing("representation", "embedding", "lab/bad/none-{seed}.h5ad"),
}
COMMON = {
    "seeds": [SEED],
    "datasets": ["pbmc68k_batched"],
    "registries": {"methods": ["lab/methods.yaml"]},
    # the quadratic scIB metrics on 100 of the 700 cells, a sample of quartets: seconds, not minutes
    "evaluation": {"paired": [], "notes": [], "qdist_quartets": 2000, "score_cells": {"max_cells": 100}},
}
CONFIGS = {
    "imported": COMMON
    | {
        "name": "imported",
        "datasets": ["pbmc68k_batched", "bm_default"],
        "methods": ["pca", "our_pca", "nj_raw", "our_tree", "knn", "our_knn"],
    },
    "bad": COMMON | {"name": "bad", "methods": ["our_nan", "our_short"]},
    "missing": COMMON | {"name": "missing", "methods": ["our_missing"]},
}


@functools.cache
def plan_of(workdir, name: str = "imported"):
    """The plan of config ``name`` (its lab registry is read in ``workdir``) and its registries."""
    with contextlib.chdir(workdir):
        config, registries = load_config(yaml.safe_load(Path(f"{name}.yaml").read_text()), f"{name}.yaml", root=workdir)
    return make_plan(config, registries), registries


def planned(workdir, dataset: str, method: str, name: str = "imported"):
    plan, _ = plan_of(workdir, name)
    return next(run for run in plan.runs if (run.dataset, run.method) == (dataset, method))


def chained_on(workdir, method: str, upstream: str):
    plan, _ = plan_of(workdir)
    return next(run for run in plan.chained if (run.chained_method, run.upstream.method) == (method, upstream))


def knn_probabilities(workdir) -> anndata.AnnData:
    """knn's probabilities on pca's embedding as the annotation job computes them, as a lab's file: the task's
    cells and the classes in other orders."""
    from threadpoolctl import threadpool_limits

    from celldag.annotation.track import chain_input, method_input
    from celldag.methods.classifiers import knn

    run = chained_on(workdir, "knn", "pca")
    task, output = (anndata.read_h5ad(workdir / path) for path in (run.path(CHAIN_TASK), run.upstream.output))
    inputs = method_input(chain_input(task, output, json.loads((workdir / run.upstream.record).read_text())), None)
    with threadpool_limits(limits=1):  # as the job's BLAS
        result = knn(inputs, plan_of(workdir)[1].methods["knn"]["params"], SEED)
    rows = np.random.default_rng(1).permutation(task.n_obs)
    columns = np.arange(len(inputs.classes))[::-1]
    lab = anndata.AnnData(
        obs=pd.DataFrame(index=task.obs_names[rows]),
        obsm={key: values[np.ix_(rows, columns)] for key, values in result.obsm.items()},
    )
    lab.uns["classes"] = [inputs.classes[j] for j in columns]
    return lab


def save_as_lab_files(workdir) -> None:
    """pca's embedding (cells shuffled), nj_raw's tree, knn's probabilities for both embeddings (alike), and the
    bad files: a NaN, a cell short."""
    pca = anndata.read_h5ad(workdir / planned(workdir, "pbmc68k_batched", "pca").output)
    shuffled = np.random.default_rng(0).permutation(pca.n_obs)
    lab = anndata.AnnData(obs=pd.DataFrame(index=pca.obs_names[shuffled]), obsm={"X_emb": pca.obsm["X_emb"][shuffled]})
    files = {
        EMBEDDING.format(dataset="pbmc68k_batched", seed=SEED): lab,
        f"lab/bad/short-{SEED}.h5ad": lab[1:].copy(),
        f"lab/bad/nan-{SEED}.h5ad": lab.copy(),
    }
    files[f"lab/bad/nan-{SEED}.h5ad"].obsm["X_emb"][7, 3] = np.nan
    probabilities = knn_probabilities(workdir)
    for upstream in ("pca-default", "our_pca-default"):
        files[PROBABILITIES.format(dataset="pbmc68k_batched", upstream=upstream, seed=SEED)] = probabilities
    for path, adata in files.items():
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        adata.write_h5ad(workdir / path)
    nj = anndata.read_h5ad(workdir / planned(workdir, "bm_default", "nj_raw").output)
    (workdir / TREE).parent.mkdir(parents=True)
    (workdir / TREE.format(dataset="bm_default", seed=SEED)).write_text(nj.uns["tree_newick"])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"))
    for name, config in CONFIGS.items():
        (workdir / f"{name}.yaml").write_text(yaml.safe_dump(config))
    (workdir / "lab").mkdir()
    (workdir / "lab/methods.yaml").write_text(yaml.safe_dump(LAB_METHODS))
    made_here = [
        planned(workdir, "pbmc68k_batched", "pca").output,
        planned(workdir, "bm_default", "nj_raw").output,
        chained_on(workdir, "knn", "pca").path(CHAIN_TASK),
    ]
    run_snakemake(workdir, *made_here, "--configfile=imported.yaml")  # what the lab's files come from
    save_as_lab_files(workdir)
    run_snakemake(workdir, LEADERBOARD.format(name="imported"), "--configfile=imported.yaml")
    return workdir


def scores(workdir, dataset: str, pattern: str = DATASET_SCORES) -> pd.DataFrame:
    table = pd.read_parquet(workdir / pattern.format(name="imported", dataset=dataset, track="annotation"))
    return table.sort_values(["seed", "metric"]).reset_index(drop=True)


def values(table: pd.DataFrame) -> dict:
    return {
        (seed, metric): float(value).hex()
        for seed, metric, value in zip(table["seed"], table["metric"], table["value"])
    }


def test_an_imported_embedding_scores_as_the_run_it_came_from_bit_for_bit(workdir):
    table = scores(workdir, "pbmc68k_batched")
    pca, our_pca = table[table["method"] == "pca"], table[table["method"] == "our_pca"]
    assert len(pca) > 10 and set(our_pca["status"]) == {"ok"}
    assert values(our_pca) == values(pca)


def test_the_annotation_track_chains_on_the_imported_embedding_as_on_pca(workdir):
    table = scores(workdir, "pbmc68k_batched", CHAINED_SCORES)
    knn = table[table["method"] == "knn"]
    on_pca, on_ours = knn[knn["variant"] == "pca/default"], knn[knn["variant"] == "our_pca/default"]
    assert len(on_ours) > 20 and set(on_ours["status"]) == {"ok"}
    assert values(on_ours) == values(on_pca)
    leaderboard = (workdir / LEADERBOARD.format(name="imported")).read_text()
    assert "| our_pca |" in leaderboard and "| knn | our_pca/default |" in leaderboard


def test_imported_probabilities_chained_on_each_embedding_score_as_knn(workdir):
    table = scores(workdir, "pbmc68k_batched", CHAINED_SCORES)
    knn = table[(table["method"] == "knn") & (table["variant"] == "pca/default")]
    for upstream in ("pca", "our_pca"):
        ours = table[(table["method"] == "our_knn") & (table["variant"] == f"{upstream}/default")]
        assert set(ours["status"]) == {"ok"} and values(ours) == values(knn)
        run = chained_on(workdir, "our_knn", upstream)
        record = json.loads((workdir / run.record).read_text())
        lab_file = PROBABILITIES.format(dataset="pbmc68k_batched", upstream=f"{upstream}-default", seed=SEED)
        assert record["input_sha256"][lab_file] == sha256_file(workdir / lab_file)


def test_an_imported_newick_scores_as_the_tree_of_the_nj_run(workdir):
    from celldag.lineage.scoring import run_scores

    table = scores(workdir, "bm_default")
    nj, our_tree = table[table["method"] == "nj_raw"], table[table["method"] == "our_tree"]
    topology = {"rf", "quartet_dist"}
    assert values(our_tree[our_tree["metric"].isin(topology)]) == values(nj[nj["metric"].isin(topology)])
    # QDist reads a method's own distances where it gives them (nj_raw: its features), else the tree's path
    # lengths: the import's is that of nj_raw's tree
    run = planned(workdir, "bm_default", "nj_raw")
    output = anndata.read_h5ad(workdir / run.output)
    del output.obsm["X_emb"]
    expected = run_scores(
        anndata.read_h5ad(workdir / run.path(PREPARED)), output, SEED, COMMON["evaluation"]["qdist_quartets"]
    )
    assert values(our_tree) == {(SEED, metric): float(value).hex() for metric, value in expected.items()}


def test_the_record_holds_the_labs_file_digest_and_an_edit_reruns_the_run(workdir):
    run = planned(workdir, "pbmc68k_batched", "our_pca")
    record = json.loads((workdir / run.record).read_text())
    lab_path = EMBEDDING.format(dataset="pbmc68k_batched", seed=SEED)
    assert record["input_sha256"][lab_path] == sha256_file(workdir / lab_path)
    assert record["status"] == "ok" and record["config"]["method"]["kind"] == "method"
    assert record["method_facts"] == {"imported": lab_path}
    original = (workdir / lab_path).read_bytes()
    edited = anndata.read_h5ad(workdir / lab_path)
    edited.obsm["X_emb"] = edited.obsm["X_emb"] * 2
    edited.write_h5ad(workdir / lab_path)
    try:
        done = run_snakemake(workdir, "-n", "--configfile=imported.yaml", LEADERBOARD.format(name="imported"))
    finally:
        (workdir / lab_path).write_bytes(original)  # as recorded: the audit below checks it
    assert re.search(r"^run_method +1$", done.stdout, re.MULTILINE) and re.search(
        r"^run_annotation +1$", done.stdout, re.MULTILINE
    )
    assert f"reason: Updated input files: {lab_path}" in done.stdout


def test_an_audit_checks_the_labs_files_and_reruns_an_import_from_them(workdir, monkeypatch, capsys):
    """The lineage import is re-run (the representation one would re-score pbmc68k's scIB metrics: half a minute);
    every record's files are checked, the lab's embedding and probabilities among them."""
    from celldag.cli import main

    monkeypatch.chdir(workdir)
    status = main(["audit", "--configfile=imported.yaml", "--run", f"bm_default/our_tree/default/{SEED}"])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0, "\n".join(lines)
    assert any(
        line.startswith(f"reproduced: bm_default/our_tree/default/{SEED} (cpu; output and ") for line in lines
    ), lines
    # pca, our_pca, nj_raw, our_tree, and knn and our_knn on each embedding
    assert lines[-1].startswith("summary: 8 run records, ") and "(0 changed, 0 missing, 0 errors)" in lines[-1]
    tree = workdir / TREE.format(dataset="bm_default", seed=SEED)
    original = tree.read_text()
    tree.write_text(original.replace(":", ":1"))  # other branch lengths
    try:
        status = main(["audit", "--configfile=imported.yaml", "--sample", "0"])
    finally:
        tree.write_text(original)
    lines = capsys.readouterr().out.splitlines()
    assert (
        status == 1
        and f"input changed: {TREE.format(dataset='bm_default', seed=SEED)} (used by 1 run: "
        f"bm_default/our_tree/default/{SEED})"
        in lines
    )


def test_bad_files_are_refused_in_one_line_before_anything_is_scored(workdir):
    done = run_snakemake(workdir, "--configfile=bad.yaml", "--keep-going", check=False)
    console = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"error: lab/bad/nan-{SEED}.h5ad: obsm['X_emb']: 1 non-finite values (first at row 7, column 3)" in console
    assert (
        f"error: lab/bad/short-{SEED}.h5ad: obs_names: 699 cells in the file, 700 in the prepared dataset: "
        "1 missing (first: ["
    ) in console
    assert "rule evaluate" not in console and not (workdir / "results/bad/scores").exists()
    for method in ("our_nan", "our_short"):
        run_dir = workdir / planned(workdir, "pbmc68k_batched", method, "bad").output.rsplit("/", 1)[0]
        assert not run_dir.exists() or not any(run_dir.iterdir())  # no output, record or checkpoint


def test_a_missing_file_is_named_by_snakemake_before_any_job(workdir):
    done = run_snakemake(workdir, "--configfile=missing.yaml", "-n", check=False)
    console = done.stdout + done.stderr
    assert done.returncode != 0 and "MissingInputException" in console and f"lab/bad/none-{SEED}.h5ad" in console
