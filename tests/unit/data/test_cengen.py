"""cengen_neurons reads the installed wormneuroatlas package (a run-time dependency) at test time."""

import hashlib

import h5py
import numpy as np
import pytest
from conftest import check_prepared
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr

from celldag.data import cengen
from celldag.data.cengen import map_classes, prepare_cengen_neurons, read_cell_lineage
from celldag.lineage.tree import parse_newick, path_distances

PARAMS = {"threshold": 1, "n_top_genes": 2000}


@pytest.fixture(scope="module")
def adata():
    return prepare_cengen_neurons("cengen_neurons", PARAMS, seed=0)


def tree_distances(adata, names):
    return path_distances(parse_newick(adata.uns["tree_newick"]), names, topology_only=False)


def test_leaves_tree_and_contract(adata, tmp_path):
    assert 90 <= adata.n_obs <= 110
    assert adata.n_vars == 2000 and adata.var_names.is_unique and not adata.layers
    assert set(parse_newick(adata.uns["tree_newick"]).leaf_names) == set(adata.obs_names)
    assert set(adata.obs_names).isdisjoint(adata.uns["dropped_classes"])
    assert adata.n_obs + len(adata.uns["dropped_classes"]) == 128
    adata = adata.copy()
    adata.uns |= {"dataset_id": "cengen_neurons", "track": "lineage"}
    check_prepared(adata, "cengen_neurons.h5ad")
    adata.write_h5ad(tmp_path / "cengen.h5ad")  # nested uns dicts must survive h5ad


def test_expression_is_log1p_tpm_and_z_scored_only_when_asked(adata):
    assert np.isfinite(adata.X).all() and adata.X.min() >= 0 and adata.uns["standardized"] is False
    scaled = prepare_cengen_neurons("cengen_neurons", PARAMS | {"standardize": True}, seed=0)
    assert list(scaled.var_names) == list(adata.var_names) and scaled.uns["standardized"] is True
    np.testing.assert_allclose(scaled.X.mean(axis=0), 0, atol=1e-10)
    np.testing.assert_allclose(scaled.X.std(axis=0, ddof=1), 1)
    np.testing.assert_allclose(scaled.X, (adata.X - adata.X.mean(0)) / adata.X.std(0, ddof=1))


def test_hand_checked_mappings(adata):
    mapping = adata.uns["leaf_mapping"]
    assert mapping["ADA"] == {"cell": "ADAL", "lineage": "AB plapaaaapp"}
    assert mapping["ADE"] == {"cell": "ADEL", "lineage": "AB plapaaaapa"}
    assert mapping["I3"] == {"cell": "I3", "lineage": "MS aaaaapaa"}
    assert mapping["DB01"]["cell"] == "DB1" and mapping["DB"]["cell"] == "DB2"  # DB1 is its own class
    assert mapping["RMD_DV"]["cell"] == "RMDDL" and mapping["RMD_LR"]["cell"] == "RMDL"
    assert mapping["ALM"]["lineage"] == "AB arppaappa"  # mistyped "AB.arppaappa" in the table
    assert mapping["DVC"]["lineage"] == "C aapaa"
    # ADAL and ADEL are sisters; ADAL (AB + 10) and I3 (MS + 8) meet only at P0: 11 + 11 divisions
    np.testing.assert_array_equal(tree_distances(adata, ["ADA", "ADE", "I3"]), [[0, 2, 22], [2, 0, 22], [22, 22, 0]])


def test_post_embryonic_and_pooled_classes_are_dropped(adata):
    dropped = adata.uns["dropped_classes"]
    assert "QR.paa" in dropped["AVM"] and "P1.apa" in dropped["AS"]
    assert {"VD_DD", "AWC_ON", "AWC_OFF", "VA", "VB", "PVD"} <= set(dropped)


def test_deterministic_and_seed_free(adata):
    again = prepare_cengen_neurons("cengen_neurons", PARAMS, seed=1)
    np.testing.assert_array_equal(adata.X, again.X)
    assert list(adata.obs_names) == list(again.obs_names) and list(adata.var_names) == list(again.var_names)
    assert adata.uns["tree_newick"] == again.uns["tree_newick"]


def test_source_files_are_fingerprinted(adata):
    for name in ("cengen.h5", "cell_lineage.txt"):
        assert adata.uns["source_files"][name] == hashlib.sha256(cengen.data_file(name).read_bytes()).hexdigest()


def test_lineage_signal_is_weak_but_present(adata):
    """Spearman ρ of expression vs lineage distance; data-sources.md §3.1 reports ρ ≈ 0.13."""
    with h5py.File(cengen.data_file("cengen.h5"), "r") as h5:
        classes = [name.decode() for name in h5["neuron_ids"][:]]
        log_tpm = np.log1p(h5["tpm_th1"][:].astype(np.float64))
    names = list(adata.obs_names)
    log_tpm = log_tpm[[classes.index(name) for name in names]]
    top = np.argsort(-log_tpm.var(axis=0, ddof=1))[:2000]
    lineage = tree_distances(adata, names)[np.triu_indices(len(names), 1)]
    rho = spearmanr(pdist(log_tpm[:, top], "correlation"), lineage).statistic
    assert 0.05 < rho < 0.3  # ≈ 0.147 with these 101 leaves
    rho_prepared = spearmanr(pdist(adata.X, "euclidean"), lineage).statistic  # what methods see
    assert 0.05 < rho_prepared < 0.3  # ≈ 0.155


def test_all_genes_and_other_thresholds():
    full = prepare_cengen_neurons("cengen_neurons", {"threshold": 4, "n_top_genes": None}, seed=0)
    assert full.n_vars > 13000 and np.isfinite(full.X).all()


@pytest.mark.parametrize(
    "params, message",
    [({"threshold": 5}, "threshold"), ({"n_top_genes": 0}, "n_top_genes"), ({"thresold": 1}, "unknown params")],
)
def test_bad_params(params, message):
    with pytest.raises(ValueError, match=message):
        prepare_cengen_neurons("cengen_neurons", params, seed=0)


def test_missing_data_file_is_named():
    with pytest.raises(FileNotFoundError, match="no_such_file.h5"):
        cengen.data_file("no_such_file.h5")


def test_read_cell_lineage_repairs_the_table(tmp_path):
    table = tmp_path / "cells.txt"
    table.write_text(
        "#Cell \tLineage Name \tDescription\n"
        "ADFL\tAB alpppppaa\tfirst\n"
        "ADFL\tAB praaappaa\trepeated: ignored\n"
        "ALML\tAB.arppaappa\tdot for the space\n"
        "D\tP0.pppa\tdot for the space\n"
        "PDB\tP12.apa\tpost-embryonic: kept verbatim\n"
        "DB1/3\tAB plpaaaapp\tfirst identity\n"
        "AVFL/R\tP1.aaaa\tfirst identity\n"
        "hyp7 \tAB x\ttrailing space in the name\n"
    )
    assert read_cell_lineage(table) == {
        "ADFL": "AB alpppppaa",
        "ALML": "AB arppaappa",
        "D": "P0 pppa",
        "PDB": "P12.apa",
        "DB1": "AB plpaaaapp",
        "AVFL": "P1.aaaa",
        "hyp7": "AB x",
    }


def test_map_classes_rules_and_conflicts():
    lineage = {
        "ADAL": "AB plapaaaapp",
        "ADAR": "AB prapaaaapp",
        "AVG": "AB prpapppap",
        "CEPDL": "AB plaaaaappa",
        "RMED": "AB alapppaap",
        "DB1": "AB plpaaaapp",
        "DB2": "AB arappappa",
        "AVM": "QR.paa",
        "XL": "AB plapaaaap",
        "YL": "MS aa",
        "ZL": "MS aa",
    }
    classes = ["ADA", "AVG", "CEP", "RME_DV", "DB", "DB01", "AVM", "AWC_ON", "NONE", "X", "Y", "Z"]
    paths, mapping, dropped = map_classes(classes, lineage)
    assert list(paths) == ["ADA", "AVG", "CEP", "RME_DV", "DB", "DB01"]
    assert [mapping[name]["cell"] for name in paths] == ["ADAL", "AVG", "CEPDL", "RMED", "DB2", "DB1"]
    assert paths["ADA"] == "aplapaaaapp"
    assert set(dropped) == {"AVM", "AWC_ON", "NONE", "X", "Y", "Z"}
    assert dropped["X"] == "is a lineage ancestor of class ADA"  # the descendant ADA is kept
    assert dropped["Y"] == "shares its lineage path with class Z"
