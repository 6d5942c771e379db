"""celegans_packer2019 end to end on a tiny file set in the GEO GSE126954 formats, served from 127.0.0.1.

The fixture's cells (column order of the matrix), with their fate under min_cells_per_leaf=2:

    0-2   ABalaa                 → ABalaa (3 cells)
    3-4   ABalap                 → ABalap (2)
    5     ABala                  ancestor of ABalaa and ABalap → ambiguous
    6, 9  MSaa                   → MSaa (4, with 7 and 8)
    7     MSa                    ancestor with one candidate below it → MSaa
    8     MSxa                   wildcard matching only MSaa → MSaa
    10    Ea                     → Ea (2, with 11)
    11    Ea/Dp                  Dp is no candidate → Ea
    12-13 Ep                     → Ep (2)
    14    Ex                     Ea or Ep → ambiguous
    15    Cpa                    → Cpa, a 1-cell leaf, dropped
    16    ABalaa/Cpa             ambiguous (decided before small leaves are dropped)
    17    28_cell_or_earlier     not a Sulston name → unmatched
    18    Dxa                    matches no candidate → unmatched
    19    Dpa      (QC failed)   not a candidate: only QC-passed cells define leaves
    20    ""       (empty)       not annotated
    21    NA                     not annotated
    22    ABalaa   (QC failed)   excluded

Genes (rows): 0 lin-1 leaf-constant [ABalaa 3, ABalap 0, Ea 1, Ep 1, MSaa 7]; 1 low-1 only ABalaa 3+3+3
= 9 counts in used cells (< 10; the QC-failed cell 22 has 50 more, which must not count); 2 flat-1 2 in
every used cell (zero variance); 3 spl-1 5 in every used cell except Ea's cells 10 and 11 (0 and 4),
so Ea's halves are {0} and {4} in an order the seed decides; 4 lin-1 again (duplicate short name)
leaf-constant [1, 1, 0, 0, 10].
"""

from __future__ import annotations

import gzip
import hashlib
import math

import numpy as np
import pytest
from conftest import check_prepared
from scipy import sparse

from celldag import artifacts
from celldag.data.leaf_profiles import pseudo_bulk
from celldag.data.packer2019 import CELL_ANNOTATION, GENE_ANNOTATION, MATRIX, prepare_packer2019
from celldag.jobs.download import DownloadError, decompress_gzip, download, record_pin, verify_pinned
from celldag.lineage.tree import parse_newick, path_distances

PARAMS = {"min_cells_per_leaf": 2, "min_gene_counts": 10, "standardize": True}  # z-scores: hand-checked below
LEAVES = ["ABalaa", "ABalap", "Ea", "Ep", "MSaa"]


def fetch(geo, folder) -> dict[str, str]:
    """Download with the expected checksums and decompress, as the pipeline's download rule does."""
    url, checksums, _ = geo
    files = {}
    for name, sha in checksums.items():
        gz = download(f"{url}/{name}", folder / name, sha256=sha, backoff=0)
        assert gz == sha
        files[name] = str(decompress_gzip(folder / name, folder / name.removesuffix(".gz")))
    return files


def test_end_to_end(geo, tmp_path):
    files = fetch(geo, tmp_path / "raw")
    adata = prepare_packer2019("celegans_packer2019", PARAMS, 0, files)

    assert list(adata.obs_names) == LEAVES
    assert adata.obs["n_cells_train"].tolist() == [1, 1, 1, 1, 2]
    assert adata.obs["n_cells_test"].tolist() == [2, 1, 1, 1, 2]
    assert adata.uns["cell_assignment"] == {
        "cells": 23,
        "qc_passed": 21,
        "annotated": 19,
        "assigned": 14,
        "ambiguous_dropped": 3,
        "unmatched": 2,
        "in_leaves_below_min_cells": 1,
        "used": 13,
        "candidate_leaves": 6,
    }
    # low-1 fails min_gene_counts (9 counts in used cells), flat-1 does not vary across leaves
    assert list(adata.var_names) == ["lin-1", "spl-1", "lin-1-1"]
    assert adata.var["gene_id"].tolist() == ["WBGene00000001", "WBGene00000004", "WBGene00000005"]
    assert adata.uns["gene_filter"] == {"genes": 5, "passed_min_gene_counts": 4, "kept": 3}

    # lin-1: pseudo-bulks [3, 0, 1, 1, 7] in both halves; log1p = ln2·[2, 0, 1, 1, 3], mean 1.4·ln2,
    # deviations ln2·[0.6, -1.4, -0.4, -0.4, 1.6], sample variance 5.2/4·ln2² ⇒ z = deviations/(ln2·√1.3)
    expected = np.array([0.6, -1.4, -0.4, -0.4, 1.6]) / math.sqrt(1.3)
    np.testing.assert_allclose(adata.layers["train"][:, 0], expected, rtol=1e-12)
    np.testing.assert_allclose(adata.layers["test"][:, 0], expected, rtol=1e-12)
    np.testing.assert_allclose(adata.X[:, 0], expected, rtol=1e-12)
    assert ea_train_mean(adata) in (0, 4)

    tree = parse_newick(adata.uns["tree_newick"])
    assert sorted(tree.leaf_names) == LEAVES
    pairs = ["ABalaa", "MSaa", "Ea"]
    # branch points: P0, ABala, EMS, E; ABalaa-MSaa via ABala, P0, EMS; Ea-MSaa via E, EMS
    np.testing.assert_array_equal(path_distances(tree, pairs, topology_only=True), [[0, 4, 5], [4, 0, 3], [5, 3, 0]])
    # in divisions: |u| + |v| - 2·LCP = 5 + 5 - 0 and 4 + 5 - 2·2
    np.testing.assert_array_equal(path_distances(tree, pairs, topology_only=False), [[0, 10, 9], [10, 0, 5], [9, 5, 0]])

    raw = tmp_path / "raw"
    assert adata.uns["source_files"] == {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (
            raw / "GSE126954_gene_by_cell_count_matrix.txt",
            raw / "GSE126954_cell_annotation.csv",
            raw / "GSE126954_gene_annotation.csv",
        )
    }
    # holds to the prepared-dataset contract and survives an h5ad round trip
    adata.uns |= {"dataset_id": "celegans_packer2019", "track": "lineage", "seed": 0}
    check_prepared(adata, "seed0.h5ad")
    artifacts.write_h5ad(adata, tmp_path / "seed0.h5ad")
    assert artifacts.read_h5ad(tmp_path / "seed0.h5ad").uns["cell_assignment"]["used"] == 13


def ea_train_mean(adata) -> int:
    """Ea's train pseudo-bulk of spl-1 (0 or 4), read back from the test z-score it implies.

    spl-1's train pseudo-bulks are [5, 5, a, 5, 5]; the z-score is scale-free, so Ea's train z is
    -0.8/√0.2 either way, but its test value 4 - a lands at a different, hand-computed z.
    """
    l5, l6 = math.log(5), math.log(6)
    np.testing.assert_allclose(adata.layers["train"][:, 1], np.array([0.2, 0.2, -0.8, 0.2, 0.2]) / math.sqrt(0.2))
    test_z = {
        0: (l5 - 0.8 * l6) / (l6 * math.sqrt(0.2)),  # train [l6, l6, 0, l6, l6], test Ea ln 5
        4: -(0.8 * l6 + 0.2 * l5) / ((l6 - l5) * math.sqrt(0.2)),
    }  # train Ea ln 5, test Ea 0
    matches = [a for a, z in test_z.items() if math.isclose(adata.layers["test"][2, 1], z, rel_tol=1e-9)]
    assert len(matches) == 1, adata.layers["test"][2, 1]
    return matches[0]


def test_without_standardize_the_replicates_hold_log1p_pseudo_bulks(geo, tmp_path):
    files = fetch(geo, tmp_path)
    raw = prepare_packer2019("celegans_packer2019", PARAMS | {"standardize": False}, 0, files)
    scaled = prepare_packer2019("celegans_packer2019", PARAMS, 0, files)
    assert raw.uns["standardized"] is False and scaled.uns["standardized"] is True
    assert list(raw.var_names) == list(scaled.var_names)  # the same genes either way
    train = raw.layers["train"]
    np.testing.assert_allclose((train - train.mean(0)) / train.std(0, ddof=1), scaled.layers["train"])
    assert train.min() >= 0  # log1p of mean counts


def test_seed_changes_the_split_only(geo, tmp_path):
    files = fetch(geo, tmp_path)
    first = prepare_packer2019("celegans_packer2019", PARAMS, 0, files)
    seen = set()
    for seed in range(8):
        adata = prepare_packer2019("celegans_packer2019", PARAMS, seed, files)
        assert list(adata.obs_names) == list(first.obs_names)
        assert list(adata.var_names) == list(first.var_names)
        assert adata.uns["tree_newick"] == first.uns["tree_newick"]
        np.testing.assert_array_equal(adata.layers["train"][:, [0, 2]], first.layers["train"][:, [0, 2]])
        seen.add(ea_train_mean(adata))
    assert seen == {0, 4}  # each of Ea's two cells was the train half for some seed
    again = prepare_packer2019("celegans_packer2019", PARAMS, 7, files)
    np.testing.assert_array_equal(again.layers["test"], adata.layers["test"])  # same seed, same split


def test_validation_cells_leave_the_test_half_as_it_was(geo, tmp_path):
    files = fetch(geo, tmp_path)
    without = prepare_packer2019("celegans_packer2019", PARAMS | {"standardize": False}, 0, files)
    adata = prepare_packer2019(
        "celegans_packer2019", PARAMS | {"standardize": False, "validation_cells": 0.5}, 0, files
    )
    np.testing.assert_array_equal(adata.layers["test"], without.layers["test"])
    np.testing.assert_array_equal(adata.layers["counts"], without.layers["counts"])
    assert adata.obs["n_cells_train"].tolist() == [1, 1, 1, 1, 1]  # the last leaf's 2 train cells: 1 + 1 validation
    assert adata.obs["n_cells_validation"].tolist() == [0, 0, 0, 0, 1]
    np.testing.assert_array_equal(adata.layers["validation"][:4], adata.layers["train"][:4])  # no cells: the train row
    np.testing.assert_allclose(
        np.expm1(adata.layers["train"][4]) + np.expm1(adata.layers["validation"][4]),
        2 * np.expm1(without.layers["train"][4]),
    )  # the two cells' counts, split


def test_gzip_files_read_directly(geo, tmp_path):
    url, checksums, _ = geo
    files = {}
    for name, sha in checksums.items():
        download(f"{url}/{name}", tmp_path / name, sha256=sha, backoff=0)
        files[name] = str(tmp_path / name)
    compressed = prepare_packer2019("celegans_packer2019", PARAMS, 3, files)
    plain = prepare_packer2019("celegans_packer2019", PARAMS, 3, fetch(geo, tmp_path / "plain"))
    np.testing.assert_array_equal(compressed.X, plain.X)
    assert compressed.uns["source_files"] == checksums  # the pinned GEO digests


def test_corrupted_download_fails_before_parsing(geo, tmp_path):
    _, _, suppl = geo
    served = suppl / MATRIX
    served.write_bytes(served.read_bytes()[:-8] + b"corrupt!")
    with pytest.raises(DownloadError, match="checksum mismatch") as error:
        fetch(geo, tmp_path)
    assert MATRIX in str(error.value)
    assert not (tmp_path / MATRIX).exists()


def test_locally_changed_file_fails_its_pin(geo, tmp_path):
    url, _, _ = geo
    pins = tmp_path / "pins.json"
    for name in (MATRIX, CELL_ANNOTATION, GENE_ANNOTATION):  # GEO has no checksums: pin on first fetch
        record_pin(tmp_path / name, download(f"{url}/{name}", tmp_path / name, sha256=None, backoff=0), pins)
    (tmp_path / CELL_ANNOTATION).write_bytes(gzip.compress(b"edited\n"))
    assert verify_pinned(tmp_path / MATRIX, pins)
    with pytest.raises(DownloadError, match=CELL_ANNOTATION.replace(".", r"\.")):
        verify_pinned(tmp_path / CELL_ANNOTATION, pins)


def test_pseudo_bulk_means():
    counts = sparse.csc_array(np.array([[1, 2, 4, 8], [0, 3, 0, 3]]))
    groups = [np.array([0, 2]), np.array([1]), np.array([3, 1, 0])]
    np.testing.assert_allclose(pseudo_bulk(counts, groups), [[2.5, 0], [2, 3], [11 / 3, 2]])


@pytest.mark.parametrize(
    "params, message",
    [
        ({"min_cells_per_leaf": 1, "min_gene_counts": 10}, "min_cells_per_leaf must be an integer >= 2"),
        ({"min_cells_per_leaf": 2}, r"missing \['min_gene_counts'\]"),
        ({**PARAMS, "ambiguous": "spread"}, r"unknown \['ambiguous'\]"),
        (
            {**PARAMS, "validation_cells": 1.0},
            r"celegans_packer2019 params: validation_cells must be a fraction in \[0, 1\), got 1.0",
        ),
    ],
)
def test_bad_params(params, message):
    with pytest.raises(ValueError, match=message):
        prepare_packer2019("celegans_packer2019", params, 0, {})
