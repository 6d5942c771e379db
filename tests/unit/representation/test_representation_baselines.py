"""Baselines of the representation track: PCA, Harmony, GenePT-w, scVI — checked against hand values."""

from __future__ import annotations

import numpy as np

from celldag.embeddings.table import GeneTable
from celldag.methods import genept_w, harmony, pca, scvi_baseline
from celldag.representation.track import RepresentationInput

SCVI_PARAMS = {
    "use_batch": True,
    "n_latent": 4,
    "n_layers": 1,
    "n_hidden": 32,
    "max_epochs": 5,
    "early_stopping": False,
    "batch_size": 64,
    "accelerator": "cpu",
}


def _inputs(features: np.ndarray, **fields) -> RepresentationInput:
    n, p = features.shape
    defaults = {"batch": np.full(n, "b1"), "train_mask": np.ones(n, bool), "lognorm": np.abs(features), "counts": None}
    return RepresentationInput(
        names=tuple(f"c{i}" for i in range(n)),
        features=features,
        gene_names=tuple(f"g{j}" for j in range(p)),
        **defaults | fields,
    )


def _batch_mixing(embedding: np.ndarray, groups: np.ndarray, k: int = 15) -> float:
    """Mean fraction of each cell's k nearest neighbours that lie in another group."""
    from sklearn.neighbors import NearestNeighbors

    _, neighbours = NearestNeighbors(n_neighbors=k + 1).fit(embedding).kneighbors(embedding)
    return float(np.mean(groups[neighbours[:, 1:]] != groups[:, None]))


def test_pca_is_the_svd_projection_on_the_training_cells_axes():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 8)) @ rng.normal(size=(8, 8))
    train = rng.random(60) < 0.7
    result = pca.run(_inputs(features, train_mask=train), {"n_components": 3}, seed=0)

    centred = features - features[train].mean(axis=0)
    _, _, axes = np.linalg.svd(centred[train], full_matrices=False)
    expected = centred @ axes[:3].T
    assert result.embedding.shape == (60, 3)
    signs = np.sign(np.sum(result.embedding * expected, axis=0))  # each axis is defined up to sign
    np.testing.assert_allclose(result.embedding * signs, expected, atol=1e-4)


def test_pca_caps_the_components_at_the_data_shape():
    features = np.random.default_rng(1).normal(size=(30, 6))
    result = pca.run(_inputs(features, train_mask=np.ones(30, bool)), {"n_components": 50}, seed=0)
    assert result.embedding.shape == (30, 5)  # ARPACK: fewer than min(cells, genes)


def test_harmony_removes_a_batch_shift_and_keeps_cell_types():
    rng = np.random.default_rng(0)
    n_per, genes = 50, 20
    types = np.repeat(np.arange(3), 2 * n_per)
    batch = np.tile(np.repeat(["b1", "b2"], n_per), 3)
    type_centres = 6.0 * rng.normal(size=(3, genes))
    shift = 2.0 * rng.normal(size=genes)  # added to every cell of batch b2
    features = type_centres[types] + (batch == "b2")[:, None] * shift + rng.normal(size=(len(types), genes))
    inputs = _inputs(features, batch=batch, train_mask=rng.random(len(types)) < 0.8)

    params = {"n_components": 10, "theta": 2.0, "max_iter": 10}
    corrected = harmony.run(inputs, params, seed=0).embedding
    uncorrected = pca.run(inputs, {"n_components": 10}, seed=0).embedding
    assert corrected.shape == (len(types), 10)
    # perfect mixing of two equal batches puts half the neighbours in the other batch
    assert _batch_mixing(uncorrected, batch) < 0.05
    assert _batch_mixing(corrected, batch) > 0.3
    assert _batch_mixing(corrected, types) < 0.02  # cell types stay apart
    np.testing.assert_array_equal(corrected, harmony.run(inputs, params, seed=0).embedding)


def test_one_batch_does_not_meet_harmonys_need():
    # config/methods.yaml: harmony needs [batches]; the runner records not_applicable without calling it
    features = np.zeros((4, 2))
    assert _inputs(features).unmet("batches") == "needs two or more batches; this dataset has one"
    assert _inputs(features, batch=np.array(["a", "a", "b", "b"])).unmet("batches") is None


def test_genept_w_is_the_expression_weighted_average_of_embedded_genes():
    # genes g0, g1, g2; the table has g0 = (1, 0), g2 = (0, 2) and a gene the dataset lacks; g1 has no vector
    table = GeneTable(gene_ids=("g2", "g9", "g0"), vectors=np.array([[0, 2], [7, 7], [1, 0]], np.float32))
    lognorm = np.array(
        [
            [1.0, 5.0, 1.0],  # (1·(1,0) + 1·(0,2)) / 2; g1's 5 carries no vector
            [2.0, 0.0, 0.0],  # only g0
            [0.0, 3.0, 0.0],
        ]
    )  # nothing embedded expressed → origin
    inputs = _inputs(np.zeros((3, 3)), lognorm=lognorm, gene_embedding=table)

    result = genept_w.run(inputs, {"normalize": False}, seed=0)
    np.testing.assert_allclose(result.embedding, [[0.5, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert result.uns == {"genes": {"n_modelled": 2, "n_without_embedding": 1}, "n_cells_without_expression": 1}
    normalised = genept_w.run(inputs, {"normalize": True}, seed=0)  # g2 becomes (0, 1)
    np.testing.assert_allclose(normalised.embedding, [[0.5, 0.5], [1.0, 0.0], [0.0, 0.0]])


def test_a_dataset_without_counts_does_not_meet_scvis_need():
    assert _inputs(np.zeros((4, 3))).unmet("counts") == "models raw counts; this dataset has none"
    assert _inputs(np.zeros((4, 3)), counts=np.ones((4, 3))).unmet("counts") is None


def test_scvi_fits_train_cells_embeds_all_and_repeats_exactly_for_a_seed():
    from scipy import sparse

    rng = np.random.default_rng(0)
    n_cells, n_genes = 200, 50
    cell_type = rng.integers(0, 2, n_cells)
    rates = rng.gamma(2.0, 1.0, size=(2, n_genes)) * 3
    counts = sparse.csr_matrix(rng.poisson(rates[cell_type]))
    inputs = _inputs(
        np.zeros((n_cells, n_genes)),
        counts=counts,
        batch=np.where(rng.random(n_cells) < 0.5, "a", "b"),
        train_mask=rng.random(n_cells) < 0.8,
    )

    first = scvi_baseline.run(inputs, SCVI_PARAMS, seed=0)
    assert first.embedding.shape == (n_cells, 4) and np.isfinite(first.embedding).all()
    assert first.uns["training"] == {"epochs": 5, "device": "cpu"}
    np.testing.assert_array_equal(first.embedding, scvi_baseline.run(inputs, SCVI_PARAMS, seed=0).embedding)
    assert not np.allclose(first.embedding, scvi_baseline.run(inputs, SCVI_PARAMS, seed=1).embedding)


def test_scvis_registry_settings_are_scvi_tools_defaults():
    import inspect

    import scvi
    import yaml
    from conftest import REPO

    params = yaml.safe_load((REPO / "config/methods.yaml").read_text())["scvi"]["params"]
    model = inspect.signature(scvi.model.SCVI.__init__).parameters
    train = inspect.signature(scvi.model.SCVI.train).parameters
    defaults = {name: model[name].default for name in ("n_latent", "n_layers", "n_hidden")} | {
        name: train[name].default for name in ("max_epochs", "batch_size", "early_stopping")
    }
    # max_epochs None: scvi-tools' rule, min(round(20,000 / cells · 400), 400)
    assert (
        {name: params[name] for name in defaults}
        == defaults
        == {
            "n_latent": 10,
            "n_layers": 1,
            "n_hidden": 128,
            "max_epochs": None,
            "batch_size": 128,
            "early_stopping": False,
        }
    )
