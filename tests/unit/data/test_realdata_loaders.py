"""The real-data entries (CellBench, KP-Tracer) on the published files: ../shared/realdata holds them laid out as
<host>/<path> of their registry URLs. Each dataset is prepared as a job prepares it, from copies named as its
downloads land (resources/<dataset>/<name>), and the counts below are those of the files, checked by hand."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REALDATA, REPO, TRACKS, check_prepared

from celldag.contracts import ContractError
from celldag.data.kptracer import prepare_kptracer
from celldag.jobs.download import mirror_path
from celldag.jobs.prepare import prepare_dataset
from celldag.lineage.tree import parse_newick
from celldag.registry import read_yaml

REGISTRY = read_yaml(REPO / "config/datasets.yaml")
# the folders of the published files at the pinned commits, as https://raw.githubusercontent.com/<folder><name>
SC_MIXOLOGY = "LuyiTian/sc_mixology/7d00ffb0bd043467f365a9358d7312f294f13c9f/data/csv/"
PORCELAN = "uhlerlab/porcelan/41243e7642ee015f5721b80f36e1a5344225b232/data/preprocessed/"
CELLBENCH = ("cellbench_protocols", "cellbench_plates")
# dataset id: (tumour, cells, genes, transcriptional states, nodes with 3+ children, most children of a node)
KPTRACER = {
    "kptracer_3513_nt_t4": ("3513_NT_T4", 604, 476, 8, 68, 80),
    "kptracer_3457_apc_t1_fam": ("3457_Apc_T1_Fam", 885, 615, 17, 86, 86),
    "kptracer_3726_nt_t2": ("3726_NT_T2", 853, 689, 7, 100, 11),
}
NEW_ENTRIES = (*CELLBENCH, *KPTRACER)


def shared_copy(url: str) -> Path:
    return REALDATA / mirror_path(url)


def published(folder: str, name: str) -> Path:
    """The shared copy of the file ``name`` published in ``folder``."""
    return shared_copy(f"https://raw.githubusercontent.com/{folder}{name}")


def downloaded(dataset_id: str, folder: Path) -> dict[str, str]:
    """The entry's files copied where its downloads land, by the names the loader asks for."""
    files = {}
    for spec in REGISTRY[dataset_id]["files"]:
        target = folder / "resources" / dataset_id / spec["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_copy(spec["url"]), target)
        files[spec["name"]] = str(target)
    return files


@pytest.fixture(scope="module")
def prepared(realdata, tmp_path_factory):
    """Each new dataset prepared once (seed 0), through the registry entry and its track as a job does."""
    folder, cache = tmp_path_factory.mktemp("realdata"), {}

    def get(dataset_id: str):
        if dataset_id not in cache:
            entry = {"params": {}} | REGISTRY[dataset_id]
            data = prepare_dataset(dataset_id, entry, TRACKS[entry["track"]], 0, downloaded(dataset_id, folder))
            check_prepared(data, dataset_id)
            cache[dataset_id] = data
        return cache[dataset_id]

    return get


def test_the_registry_pins_the_sha256_of_the_published_files(realdata):
    for dataset_id in NEW_ENTRIES:
        entry = REGISTRY[dataset_id]
        assert entry["source"] == "url" and entry["license"].startswith("MIT") and entry["reference"]
        folder = SC_MIXOLOGY if dataset_id in CELLBENCH else PORCELAN
        for spec in entry["files"]:
            assert spec["url"] == f"https://raw.githubusercontent.com/{folder}{spec['name']}"  # at the pinned commit
            assert hashlib.sha256(shared_copy(spec["url"]).read_bytes()).hexdigest() == spec["sha256"], spec["name"]


# ---------------------------------------------------------------- CellBench


def test_cellbench_protocols_keeps_the_genotype_singlets_of_both_protocols(prepared):
    data = prepared("cellbench_protocols")
    # the files hold 274 and 225 cells, none flagged an outlier (CellBench publishes them after its QC): the
    # filter that bites is the genotype one, dropping 34 and 15 doublets
    assert data.uns["cellbench"] == {
        "sc_celseq2": {"cells_in_file": 274, "singlets_kept": 240},
        "sc_dropseq": {"cells_in_file": 225, "singlets_kept": 210},
    }
    assert pd.crosstab(data.obs["batch"], data.obs["label"]).to_dict("index") == {
        "sc_celseq2": {"H1975": 103, "H2228": 67, "HCC827": 70},
        "sc_dropseq": {"H1975": 79, "H2228": 65, "HCC827": 66},
    }
    assert data.uns["label_key"] == "cell_line_demuxlet" and data.uns["batch_key"] == "experiment"
    # 28,142 CEL-seq2 and 15,127 Drop-seq genes, 15,073 in both: their union without the 62 ERCC spike-ins
    assert data.uns["preprocess"]["genes_in"] == 28196
    assert data.n_vars == 2000 and data.var_names.str.match(r"^ENSG\d{11}$").all()
    counts = data.layers["counts"]
    assert counts.dtype == np.int32 and (counts.sum(axis=1) > 0).all()


def test_cellbench_plates_keeps_the_genotype_singlets_of_three_plates_whose_well_ids_repeat(prepared):
    data = prepared("cellbench_plates")
    assert data.uns["cellbench"] == {
        "sc_celseq2_5cl_p1": {"cells_in_file": 297, "singlets_kept": 156},
        "sc_celseq2_5cl_p2": {"cells_in_file": 307, "singlets_kept": 163},
        "sc_celseq2_5cl_p3": {"cells_in_file": 305, "singlets_kept": 252},
    }
    assert data.n_obs == 571 and data.obs["batch"].nunique() == 3
    assert data.obs["label"].value_counts().to_dict() == {
        "A549": 186,
        "H838": 146,
        "H1975": 89,
        "H2228": 85,
        "HCC827": 65,
    }
    # every plate names its wells p1_A1, …: the experiment in front keeps the cells apart
    assert {"sc_celseq2_5cl_p1:p1_A1", "sc_celseq2_5cl_p2:p1_A1", "sc_celseq2_5cl_p3:p1_A1"} <= set(data.obs_names)
    assert "counts" in data.layers and data.var_names.str.startswith("ENSG").all()


def test_the_demuxlet_label_is_the_cell_line_wherever_the_metadata_has_both(realdata):
    """Where a file also has cell_line (the 3-line protocols), it differs from the genotype call on doublets only."""
    for experiment, disagreeing_doublets in (("sc_celseq2", 2), ("sc_dropseq", 6)):
        metadata = pd.read_csv(published(SC_MIXOLOGY, f"{experiment}.metadata.csv.gz"), index_col=0)
        differ = metadata["cell_line"] != metadata["cell_line_demuxlet"]
        assert (metadata.loc[differ, "demuxlet_cls"] != "SNG").all() and differ.sum() == disagreeing_doublets


def test_cellbench_names_the_file_whose_cells_disagree(realdata, tmp_path):
    from celldag.data.cellbench import prepare_cellbench

    files = downloaded("cellbench_protocols", tmp_path)
    metadata = files["sc_dropseq.metadata.csv.gz"]
    rows = gzip.decompress(Path(metadata).read_bytes()).decode().splitlines()
    Path(metadata).write_bytes(gzip.compress("\n".join(rows[:-1]).encode()))  # one cell fewer
    with pytest.raises(ContractError, match=r"sc_dropseq\.count\.csv\.gz: header: its 225 cell ids are not the 224"):
        prepare_cellbench("cellbench_protocols", {}, 0, files)


# ---------------------------------------------------------------- KP-Tracer


@pytest.mark.parametrize("dataset_id", KPTRACER)
def test_kptracer_cells_are_the_leaves_of_the_multifurcating_barcode_tree(prepared, dataset_id):
    tumour, cells, genes, states, multifurcations, widest = KPTRACER[dataset_id]
    data = prepared(dataset_id)
    assert data.shape == (cells, genes)
    tree = parse_newick(data.uns["tree_newick"])
    assert sorted(tree.leaf_names) == sorted(data.obs_names)  # every leaf a cell, every cell a leaf, once each
    children = [len(kids) for kids in tree.children]
    assert sum(n > 2 for n in children) == multifurcations and max(children) == widest
    assert data.obs["cell_type"].nunique() == states
    assert not {"train", "test", "validation", "counts"} & set(data.layers)  # one profile per leaf, as published
    assert data.uns["standardized"] is False
    # the values as published: the first row of the table is the first cell of cells.txt
    first_cell = published(PORCELAN, f"{tumour}_cells.txt").read_text().split()[0]
    first_row = pd.read_csv(published(PORCELAN, f"{tumour}_normalized_log_counts.txt"), nrows=1).to_numpy().ravel()
    np.testing.assert_array_equal(data[first_cell].X.ravel(), first_row)


def test_kptracer_names_the_tree_whose_leaves_are_not_the_cells(realdata, tmp_path):
    files = downloaded("kptracer_3513_nt_t4", tmp_path)
    for name in ("3513_NT_T4_cells.txt", "3513_NT_T4_cell_types.txt", "3513_NT_T4_normalized_log_counts.txt"):
        lines = Path(files[name]).read_text().splitlines()
        Path(files[name]).write_text("\n".join(lines[:-1]) + "\n")  # the last cell gone from the data, not the tree
    with pytest.raises(ContractError, match=r"3513_NT_T4_pruned\.nwk: tree leaves: .* 1 only in the tree"):
        prepare_kptracer("kptracer_3513_nt_t4", {"tumour": "3513_NT_T4"}, 0, files)
