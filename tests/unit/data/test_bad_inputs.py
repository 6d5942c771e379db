"""The bad-input suite: every kind of bad input a lab can hand celldag, and the exact one-line error it gets.

Each case builds the bad input in a temp directory and calls the code that meets it first (the
registry at parse time, the loader before any training job, the download, the runner's contract).
The error is an ``InputError`` whose message names the file (or registry entry) and the field, fits
on one line, and nothing is left at the output path. ``{d}`` in an expected message is the case's
temp directory.
"""

from __future__ import annotations

import hashlib

import anndata
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import TRACKS, ok, truncated
from lab_data import NEWICK, leaves

from celldag.errors import InputError

GENES = [f"G{i}" for i in range(12)]


def cells(n_cells: int = 40, seed: int = 0) -> anndata.AnnData:
    """Integer counts, 4 labels, 2 batches: a valid representation source."""
    rng = np.random.default_rng(seed)
    obs = pd.DataFrame(
        {"celltype": [f"type{i % 4}" for i in range(n_cells)], "tech": [f"batch{i % 2}" for i in range(n_cells)]},
        index=[f"cell{i}" for i in range(n_cells)],
    )
    return anndata.AnnData(
        X=rng.poisson(3.0, size=(n_cells, len(GENES))).astype(np.float32), obs=obs, var=pd.DataFrame(index=GENES)
    )


def prepare_cells(d, adata: anndata.AnnData, **params) -> None:
    """Write ``adata`` as a lab's h5ad and prepare it with the ``h5ad`` loader, as the pipeline's first job."""
    from celldag.jobs.prepare import write_prepared_dataset

    adata.write_h5ad(d / "lab.h5ad")
    entry = {
        "track": "representation",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "source": "local",
        "files": [{"name": "lab.h5ad", "path": str(d / "lab.h5ad")}],
        "params": {"file": "lab.h5ad", "label_key": "celltype", "batch_key": "tech", "min_genes": 0, "min_cells": 0}
        | params,
    }
    write_prepared_dataset(
        "lab", entry, TRACKS[entry["track"]], 0, str(d / "out" / "seed0.h5ad"), {"lab.h5ad": str(d / "lab.h5ad")}
    )


def prepare_leaves(d, adata: anndata.AnnData, newick: str | None = NEWICK, **params) -> None:
    """Write a lineage source (and its Newick file) and prepare it with the ``lineage_h5ad`` loader."""
    from celldag.jobs.prepare import write_prepared_dataset

    adata.write_h5ad(d / "lineage.h5ad")
    files = {"lineage.h5ad": str(d / "lineage.h5ad")}
    tree = {}
    if newick is not None:
        (d / "tree.nwk").write_text(newick)
        files["tree.nwk"] = str(d / "tree.nwk")
        tree = {"newick": "tree.nwk"}
    entry = {
        "track": "lineage",
        "loader": "celldag.data.h5ad:prepare_lineage_h5ad",
        "source": "local",
        "files": [{"name": name, "path": path} for name, path in files.items()],
        "params": {"file": "lineage.h5ad", "values": "transformed"} | tree | params,
    }
    write_prepared_dataset("lab_lineage", entry, TRACKS[entry["track"]], 0, str(d / "out" / "seed0.h5ad"), files)


def with_x(adata: anndata.AnnData, change) -> anndata.AnnData:
    x = np.array(adata.X)
    change(x)
    adata.X = x
    return adata


def set_value(row: int, col: int, value: float):
    def change(x):
        x[row, col] = value

    return change


# ---------------------------------------------------------------- config and registries


def load(d, config: dict, datasets: dict | None = None, methods: dict | None = None):
    """load_config on the shipped registries, with entries added to (or replacing) them."""
    from conftest import REPO

    from celldag.registry import KINDS, load_config, read_yaml

    (d / "config").mkdir()
    for name in KINDS:  # every shipped registry, two of them with entries added
        registry = read_yaml(REPO / f"config/{name}.yaml") | (
            {"datasets": datasets, "methods": methods}.get(name) or {}
        )
        (d / f"config/{name}.yaml").write_text(yaml.safe_dump(registry))
    load_config({"datasets": ["bm_default"], "methods": ["nj_raw"]} | config, "run.yaml", root=d)


def lab_url_dataset(file: dict) -> dict:
    return {
        "lab": {
            "track": "representation",
            "source": "url",
            "loader": "celldag.data.h5ad:prepare_h5ad",
            "description": "x",
            "license": "x",
            "files": [file],
            "params": {"file": file["name"], "label_key": "cell_type"},
        }
    }


# ---------------------------------------------------------------- downloads


BODY = b"counts\n" * 100
BODY_SHA = hashlib.sha256(BODY).hexdigest()


def fetch(d, server, path: str, sha256: str | None) -> None:
    """Download from conftest's 127.0.0.1 server: /ok.txt whole, /cut.txt promising twice its body."""
    from celldag.jobs.download import download

    server.routes |= {"/ok.txt": ok(BODY), "/cut.txt": truncated(BODY)}
    download(server.url(path), d / "out" / "file.txt", sha256=sha256, retries=1, backoff=0)


# ---------------------------------------------------------------- method outputs and evaluation


def short_embedding(d) -> None:
    """A method that returns one embedding row too few: the runner's output contract stops it."""
    from celldag.jobs.runner import output_anndata
    from celldag.methods import MethodResult

    prepared = anndata.AnnData(obs=pd.DataFrame(index=[f"cell{i}" for i in range(5)]))
    result = MethodResult(embedding=np.zeros((4, 2)))
    output_anndata(prepared, result, {}, "ok", "", str(d / "out" / "output.h5ad"))


def three_leaf_quartets(d) -> None:
    from celldag.lineage.metrics import quartet_distance
    from celldag.lineage.tree import parse_newick

    tree = parse_newick("(A,B,C);")
    quartet_distance(tree, tree)


def no_gene_matches(d) -> None:
    from celldag.embeddings import embed_genes

    pd.DataFrame({"gene_id": ["ENSG000001", "ENSG000002"], "embedding": [[0.1, 0.2], [0.3, 0.4]]}).to_parquet(
        d / "table.parquet"
    )
    embed_genes(
        "celldag.embeddings.providers:from_file",
        {"format": "parquet"},
        ["CD3E", "MS4A1", "LYZ"],
        {"table": str(d / "table.parquet")},
        0,
    )


def corrupt_h5ad(d) -> None:
    from celldag.jobs.prepare import write_prepared_dataset

    (d / "lab.h5ad").write_bytes(b"<html>502 Bad Gateway</html>")  # what a proxy may serve instead of the file
    entry = {
        "track": "representation",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "source": "local",
        "files": [{"name": "lab.h5ad", "path": str(d / "lab.h5ad")}],
        "params": {"file": "lab.h5ad", "label_key": "celltype", "batch_key": "tech"},
    }
    write_prepared_dataset(
        "lab", entry, TRACKS[entry["track"]], 0, str(d / "out" / "seed0.h5ad"), {"lab.h5ad": str(d / "lab.h5ad")}
    )


CASES = {
    # ---- a lab's cells × genes h5ad (loader h5ad), met by the prepare_dataset job
    "missing label key": (
        lambda d: prepare_cells(d, cells(), label_key="cell_type"),
        "{d}/lab.h5ad: obs['cell_type']: missing label column (obs columns: ['celltype', 'tech'])",
    ),
    "missing batch key": (
        lambda d: prepare_cells(d, cells(), batch_key="donor"),
        "{d}/lab.h5ad: obs['donor']: missing batch column (obs columns: ['celltype', 'tech'])",
    ),
    "label values missing": (
        lambda d: prepare_cells(d, _nan_label(cells())),
        "{d}/lab.h5ad: obs['celltype']: label missing for 1 of 40 rows (first: 'cell3')",
    ),
    "single batch where batch metrics are requested": (
        lambda d: prepare_cells(d, _one_batch(cells())),
        "{d}/lab.h5ad: obs['tech']: a single batch ('run1'): batch-correction metrics need 2 or more; "
        "set batch_key: null to score bio-conservation only",
    ),
    "NaN in X": (
        lambda d: prepare_cells(d, with_x(cells(), set_value(2, 3, np.nan))),
        "{d}/lab.h5ad: X: 1 NaN or infinite values",
    ),
    "inf in X": (
        lambda d: prepare_cells(d, with_x(cells(), set_value(5, 0, np.inf)), counts_layer=None, lognorm_layer="X"),
        "{d}/lab.h5ad: X: 1 NaN or infinite values",
    ),
    "negative counts": (
        lambda d: prepare_cells(d, with_x(cells(), set_value(0, 0, -2))),
        "{d}/lab.h5ad: X: negative counts (min -2)",
    ),
    "non-integer counts where counts are required": (
        lambda d: prepare_cells(d, with_x(cells(), set_value(1, 1, 0.5))),
        "{d}/lab.h5ad: X: 1 non-integer values (e.g. 0.5): raw counts expected; name it in lognorm_layer instead "
        "for log-normalised input",
    ),
    "non-integer counts in the counts layer beside log-normalised X": (
        lambda d: prepare_cells(
            d, _counts_layer(with_x(cells(), set_value(1, 1, 0.5))), counts_layer="counts", lognorm_layer="X"
        ),
        "{d}/lab.h5ad: layers['counts']: 1 non-integer values (e.g. 0.5): raw counts expected; name it in "
        "lognorm_layer instead for log-normalised input",
    ),
    "neither counts nor log-normalised values named": (
        lambda d: prepare_cells(d, cells(), counts_layer=None),
        "h5ad params: counts_layer and lognorm_layer are both null; name the matrix of either or both (X or a layer "
        "name)",
    ),
    "counts layer missing": (
        lambda d: prepare_cells(d, cells(), counts_layer="raw", lognorm_layer="X"),
        "{d}/lab.h5ad: layers['raw']: missing (layers: [])",
    ),
    "split column with other values than train and val": (
        lambda d: prepare_cells(d, _fold(cells(), ["train", "test"]), split_key="fold"),
        "{d}/lab.h5ad: obs['fold']: split values must be 'train' or 'val', some 'train'; found ['test', 'train']",
    ),
    "split column and val_fraction together": (
        lambda d: prepare_cells(d, _fold(cells(), ["train", "val"]), split_key="fold", val_fraction=0.2),
        "{d}/lab.h5ad: params: split_key ('fold') and val_fraction both given: the file's split is used as it is; "
        "drop val_fraction",
    ),
    "duplicate obs names": (
        lambda d: prepare_cells(d, _renamed(cells(), obs={1: "cell0"})),
        "{d}/lab.h5ad: obs_names: 1 duplicated cell ids (first: ['cell0'])",
    ),
    "duplicate var names": (
        lambda d: prepare_cells(d, _renamed(cells(), var={2: "G0"})),
        "{d}/lab.h5ad: var_names: 1 duplicated gene names (first: ['G0']); set duplicate_genes: make_unique "
        "to suffix them",
    ),
    "empty matrix": (
        lambda d: prepare_cells(d, cells()[:0].copy()),
        "{d}/lab.h5ad: X: empty matrix (0 cells × 12 genes)",
    ),
    "zero variance everywhere": (
        lambda d: prepare_cells(d, with_x(cells(), lambda x: x.fill(3))),
        "{d}/lab.h5ad: X: no gene varies across cells (every gene is constant)",
    ),
    "corrupt h5ad": (
        corrupt_h5ad,
        "{d}/lab.h5ad: file: not a readable h5ad file (OSError: Unable to synchronously open file (file "
        "signature not found))",
    ),
    "gene ids that match no gene embedding": (
        no_gene_matches,
        "provider 'celldag.embeddings.providers:from_file' embedded none of the 3 requested genes "
        "(first: ['CD3E', 'MS4A1', 'LYZ']); genes are "
        "matched by exact name: the dataset's var_names must be the ids the source uses (e.g. HGNC symbols, not "
        "Ensembl ids)",
    ),
    # ---- a lab's lineage h5ad (loader lineage_h5ad)
    "tree leaves that do not match obs names": (
        lambda d: prepare_leaves(d, leaves(["A", "B", "C", "D", "E", "X"])),
        "{d}/tree.nwk: tree leaves: differ from obs_names of {d}/lineage.h5ad: 1 tree leaves have no data "
        "(first: ['F']), 1 data leaves are not in the tree (first: ['X'])",
    ),
    "unparsable Newick": (
        lambda d: prepare_leaves(d, leaves(), newick="((A,B),(C,D),(E,F);"),
        "{d}/tree.nwk: tree: not a valid Newick tree (malformed Newick at character 18: unbalanced parentheses: "
        "1 '(' not closed)",
    ),
    "a tree with a single leaf": (
        lambda d: prepare_leaves(d, leaves(["A"]), newick="A;"),
        "{d}/tree.nwk: tree: a single leaf ('A'); a lineage needs 4 or more",
    ),
    "too few leaves for quartets at ingest": (
        lambda d: prepare_leaves(d, leaves(["A", "B", "C"]), newick="((A,B),C);"),
        "{d}/tree.nwk: tree leaves: 3 leaves; lineage metrics compare quartets of leaves: 4 or more needed",
    ),
    "replicate column with three values": (
        lambda d: prepare_leaves(
            d, _replicates(leaves(), ["r1", "r2", "r3"] * 4), leaf_key="leaf", replicate_key="rep"
        ),
        "{d}/lineage.h5ad: obs['rep']: 3 replicate values (first: ['r1', 'r2', 'r3']); "
        "a replicate pair needs exactly 2",
    ),
    "a leaf measured in one replicate only": (
        lambda d: prepare_leaves(
            d, _replicates(leaves(), ["r1"] * 6 + ["r2"] * 5 + ["r1"]), leaf_key="leaf", replicate_key="rep"
        ),
        "{d}/lineage.h5ad: obs['rep']: 1 leaves lack rows of one replicate (first: ['F']); each needs both "
        "['r1', 'r2']",
    ),
    "seeded and given replicates together": (
        lambda d: prepare_leaves(d, leaves(), replicates=True, replicate_key="rep"),
        "lineage_h5ad params: replicates: true (seeded cell halves) and replicate_key (the file's own pairs) exclude "
        "each other; give one",
    ),
    "standardize that is not a boolean": (
        lambda d: prepare_leaves(d, leaves(), standardize="yes"),
        "lineage_h5ad params: standardize must be true or false, got 'yes'",
    ),
    "lineage names that match no leaf": (
        lambda d: prepare_leaves(
            d, _lineage_named(["ABal", "ABar", "MSa", "Epithelium", "Cpp", "Dxx"]), newick=None, lineage_key="lineage"
        ),
        "{d}/lineage.h5ad: obs['lineage']: 2 of 6 lineage names match no leaf of the C. elegans embryonic lineage "
        "(not Sulston names; first: ['Epithelium', 'Dxx'])",
    ),
    # ---- the run config and the registries, at parse time (before Snakemake schedules a job)
    "unknown dataset id": (
        lambda d: load(d, {"datasets": ["pbmc_68k"]}),
        "run.yaml: datasets[0]: unknown dataset id 'pbmc_68k'; known ids: bm_2k, bm_8k, bm_default, bm_easy, bm_hard, "
        "celegans_packer2019, cellbench_plates, cellbench_protocols, cengen_neurons, kptracer_3457_apc_t1_fam, "
        "kptracer_3513_nt_t4, kptracer_3726_nt_t2, pbmc3k, pbmc68k_batched, scib_immune_human, scib_pancreas, "
        "synthetic_100k, synthetic_20k, tran2020_pancreas",
    ),
    "unknown method id": (
        lambda d: load(d, {"methods": ["scilamma"]}),
        "run.yaml: methods[0]: unknown method id 'scilamma'; "
        "known ids: bonsai, celltreeqm, celltypist, expression, genept_w, harmony, knn, logistic, majority, nj_pca, "
        "nj_raw, null_embedding, null_tree, oracle_embedding, oracle_tree, pca, "
        "permuted_labels, quadruplet, scilama, scvi, triplet, uniform, upgma_raw",
    ),
    "wrong config types": (lambda d: load(d, {"seeds": "0,1,2"}), "run.yaml: seeds: '0,1,2' is not of type 'array'"),
    "dataset id with a path separator": (
        lambda d: load(d, {}, datasets={"../lab": lab_url_dataset({"name": "a.h5ad", "path": "a.h5ad"})["lab"]}),
        "{d}/config/datasets.yaml: id '../lab': ids are lower-case letters, digits and '_', starting with a letter",
    ),
    "dataset id with '..' given to validate": (
        lambda d: _validate_id(d, ".."),
        "'..' is not a dataset id: ids are lower-case letters, digits and '_', never a path",
    ),
    "url source without checksum": (
        lambda d: load(d, {}, datasets=lab_url_dataset({"name": "lab.h5ad", "url": "https://lab.example/lab.h5ad"})),
        "{d}/config/datasets.yaml: lab.files[0]: the url https://lab.example/lab.h5ad has no sha256; give the file's "
        "digest, or 'pin-on-first-fetch' to trust the first download and pin it",
    ),
    "out-of-range hyper-parameter": (
        lambda d: load(d, {"method_params": {"scilama": {"dropout": 1.5}}}),
        "run.yaml: method_params.scilama.dropout: 1.5 is greater than or equal to the maximum of 1",
    ),
    # ---- downloads (a local server on 127.0.0.1)
    "checksum mismatch": (
        lambda d, server: fetch(d, server, "/ok.txt", "0" * 64),
        "checksum mismatch for {url}/ok.txt → {d}/out/file.txt: expected sha256 " + "0" * 64 + f", got {BODY_SHA}",
    ),
    "truncated download": (
        lambda d, server: fetch(d, server, "/cut.txt", BODY_SHA),
        "download of {url}/cut.txt → {d}/out/file.txt failed after 2 attempts: truncated body: 700 of 1400 bytes",
    ),
    "HTTP error": (
        lambda d, server: fetch(d, server, "/missing.txt", BODY_SHA),
        "download of {url}/missing.txt → {d}/out/file.txt failed: HTTP 404 Not Found",
    ),
    # ---- method outputs and evaluation
    "method output with the wrong number of rows": (
        short_embedding,
        "{d}/out/output.h5ad: obsm['X_emb']: the method returned shape (4, 2); expected 5 rows, one per cell of "
        "the dataset",
    ),
    "a run with too few leaves for quartets": (
        three_leaf_quartets,
        "the quartet distance needs at least 4 leaves, got 3",
    ),
}


def _nan_label(adata):
    adata.obs["celltype"] = adata.obs["celltype"].astype(object)
    adata.obs.iloc[3, 0] = np.nan
    return adata


def _one_batch(adata):
    adata.obs["tech"] = "run1"
    return adata


def _renamed(adata, obs=None, var=None):
    obs_names, var_names = list(adata.obs_names), list(adata.var_names)
    for index, name in (obs or {}).items():
        obs_names[index] = name
    for index, name in (var or {}).items():
        var_names[index] = name
    adata.obs_names, adata.var_names = obs_names, var_names
    return adata


def _counts_layer(adata):
    """The counts moved to layers['counts'], log-normalised values in X."""
    adata.layers["counts"] = adata.X
    adata.X = np.log1p(np.asarray(adata.X) + 0.5)
    return adata


def _fold(adata, values):
    adata.obs["fold"] = np.resize(values, adata.n_obs)
    return adata


def _replicates(adata, replicate_of_row):
    """Two rows per leaf (the leaf's profile twice), each labelled with its replicate."""
    twice = anndata.concat([adata, adata])
    twice.obs = pd.DataFrame(
        {"leaf": list(adata.obs_names) * 2, "rep": replicate_of_row}, index=[f"row{i}" for i in range(twice.n_obs)]
    )
    return twice


def _lineage_named(names):
    cells_ = anndata.AnnData(
        X=np.random.default_rng(0).poisson(2.0, size=(len(names), 5)).astype(np.float32),
        obs=pd.DataFrame({"lineage": names}, index=[f"cell{i}" for i in range(len(names))]),
    )
    return cells_


def _validate_id(d, dataset_id):
    from conftest import REPO

    from celldag.commands.validate import validate_dataset
    from celldag.registry import load_config, read_yaml

    _, registries = load_config(read_yaml(REPO / "config/config.yaml"), "config/config.yaml", root=REPO)
    validate_dataset(dataset_id, registries)


def test_the_suite_has_at_least_25_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_one_exact_line_and_leaves_nothing(name, tmp_path, request):
    build, expected = CASES[name]
    arguments = [tmp_path]
    url = ""
    if "server" in build.__code__.co_varnames[: build.__code__.co_argcount]:
        server = request.getfixturevalue("server")
        arguments.append(server)
        url = server.url("")
    with pytest.raises(InputError) as raised:
        build(*arguments)
    message = str(raised.value)
    assert message == expected.format(d=tmp_path, url=url)
    assert "\n" not in message
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir()), f"left behind: {list(out.iterdir())}"
