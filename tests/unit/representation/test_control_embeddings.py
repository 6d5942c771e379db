"""Controls of the representation track (``celldag.methods.control_embeddings``): the null embeddings keep PCA's
shape and spread but no information about the cells; the oracle's one-hot columns give the labels back."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.methods import control_embeddings, pca
from celldag.representation.track import RepresentationInput

N_PER, TYPES, GENES = 80, 3, 12
N_COMPONENTS = 5


def _dataset(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated types in 12 genes: PCA keeps them apart."""
    rng = np.random.default_rng(seed)
    types = np.repeat(np.array(["alpha", "beta", "gamma"]), N_PER)
    centres = 5.0 * rng.normal(size=(TYPES, GENES))
    features = centres[np.repeat(np.arange(TYPES), N_PER)] + rng.normal(size=(TYPES * N_PER, GENES))
    return features, types


def _inputs(features: np.ndarray, labels: np.ndarray | None = None, train_fraction: float = 0.7) -> RepresentationInput:
    n, p = features.shape
    train = np.random.default_rng(1).random(n) < train_fraction
    return RepresentationInput(
        names=tuple(f"c{i}" for i in range(n)),
        features=features,
        gene_names=tuple(f"g{j}" for j in range(p)),
        batch=np.full(n, "b1"),
        train_mask=train,
        lognorm=np.abs(features),
        counts=None,
        labels=labels,
    )


def _knn_accuracy(embedding: np.ndarray, labels: np.ndarray, k: int = 15) -> float:
    """Leave-one-out accuracy of the majority label among each cell's k nearest other cells."""
    from sklearn.neighbors import NearestNeighbors

    _, neighbours = NearestNeighbors(n_neighbors=k + 1).fit(embedding).kneighbors(embedding)
    votes = labels[neighbours[:, 1:]]
    predicted = np.array([max(set(row), key=list(row).count) for row in votes])
    return float(np.mean(predicted == labels))


def _null(kind: str, inputs: RepresentationInput, seed: int = 0) -> np.ndarray:
    result = control_embeddings.null_embedding(inputs, {"kind": kind, "n_components": N_COMPONENTS}, seed)
    assert result.embedding.dtype == np.float32
    assert result.uns == {"kind": kind, "n_components": N_COMPONENTS}
    return result.embedding


def _pca(inputs: RepresentationInput, seed: int = 0) -> np.ndarray:
    return pca.run(inputs, {"n_components": N_COMPONENTS}, seed).embedding


def test_random_null_has_pca_shape_and_per_column_spread():
    features, _ = _dataset()
    inputs = _inputs(features)
    reference, random = _pca(inputs), _null("random", inputs)
    assert random.shape == reference.shape == (TYPES * N_PER, N_COMPONENTS)
    # the standard deviation of 240 normal draws is within ~5 % of the true one (relative standard error 1/√480)
    np.testing.assert_allclose(random.std(axis=0), reference.std(axis=0), rtol=0.2)
    assert np.all(np.abs(random.mean(axis=0)) < 3 * reference.std(axis=0) / np.sqrt(random.shape[0]))
    # the leading components differ in spread: the draw follows each column's, not one common scale
    assert reference.std(axis=0)[0] > 2 * reference.std(axis=0)[-1]


def test_random_null_is_seeded():
    features, _ = _dataset()
    inputs = _inputs(features)
    np.testing.assert_array_equal(_null("random", inputs, seed=3), _null("random", inputs, seed=3))
    assert not np.allclose(_null("random", inputs, seed=3), _null("random", inputs, seed=4))


def test_null_embeddings_carry_no_label_information():
    features, labels = _dataset()
    inputs = _inputs(features)
    assert _knn_accuracy(_pca(inputs), labels) > 0.95
    for kind in control_embeddings.NULL_KINDS:
        accuracy = _knn_accuracy(_null(kind, inputs), labels)
        assert accuracy < 0.5, (kind, accuracy)  # chance is 1/3


def test_random_null_ignores_the_cells_order_and_values_beyond_the_spread():
    """The same features with rows reordered give the same draw: nothing of a cell reaches its row."""
    features, _ = _dataset()
    order = np.random.default_rng(5).permutation(features.shape[0])
    inputs = _inputs(features, train_fraction=1.0)
    reordered = _inputs(features[order], train_fraction=1.0)
    np.testing.assert_allclose(_null("random", inputs), _null("random", reordered), rtol=1e-4, atol=1e-5)


def test_shuffled_null_is_a_row_permutation_of_pca():
    features, _ = _dataset()
    inputs = _inputs(features)
    reference, shuffled = _pca(inputs), _null("shuffled_pca", inputs)
    np.testing.assert_array_equal(np.sort(shuffled, axis=0), np.sort(reference, axis=0))
    # whole rows move together: the rows as a set are PCA's rows
    assert {row.tobytes() for row in shuffled} == {row.tobytes() for row in reference}
    assert not np.array_equal(shuffled, reference)
    assert np.mean(np.all(shuffled == reference, axis=1)) < 0.05  # few cells keep their own row
    np.testing.assert_array_equal(shuffled, _null("shuffled_pca", inputs))  # seeded
    assert not np.array_equal(shuffled, _null("shuffled_pca", inputs, seed=1))


def test_null_refuses_an_unknown_kind():
    features, _ = _dataset()
    with pytest.raises(ValueError, match="random, shuffled_pca"):
        control_embeddings.null_embedding(_inputs(features), {"kind": "zeros", "n_components": 2}, 0)


def test_oracle_one_hot_recovers_the_labels():
    features, labels = _dataset()
    inputs = _inputs(features, labels=labels)
    exact = control_embeddings.oracle_embedding(inputs, {"noise_sd": 0.0}, 0)
    expected = (labels[:, None] == np.array(["alpha", "beta", "gamma"])[None, :]).astype(np.float32)
    np.testing.assert_array_equal(exact.embedding, expected)
    assert exact.uns == {"n_components": 3, "noise_sd": 0.0, "classes": ["alpha", "beta", "gamma"]}

    noisy = control_embeddings.oracle_embedding(inputs, {"noise_sd": 0.1}, 0).embedding
    assert noisy.dtype == np.float32 and noisy.shape == (TYPES * N_PER, 3)
    np.testing.assert_array_equal(np.array(["alpha", "beta", "gamma"])[noisy.argmax(axis=1)], labels)
    assert 0.08 < float(np.std(noisy - expected)) < 0.12
    np.testing.assert_array_equal(noisy, control_embeddings.oracle_embedding(inputs, {"noise_sd": 0.1}, 0).embedding)
    assert not np.array_equal(noisy, control_embeddings.oracle_embedding(inputs, {"noise_sd": 0.1}, 1).embedding)


def test_oracle_needs_the_labels_and_a_non_negative_noise():
    features, labels = _dataset()
    with pytest.raises(ValueError, match=r"needs: \[truth\]"):
        control_embeddings.oracle_embedding(_inputs(features), {"noise_sd": 0.1}, 0)
    with pytest.raises(ValueError, match="noise_sd"):
        control_embeddings.oracle_embedding(_inputs(features, labels=labels), {"noise_sd": -0.1}, 0)


def test_accepted_params():
    assert control_embeddings.null_embedding.accepted_params == ("kind", "n_components")
    assert control_embeddings.oracle_embedding.accepted_params == ("noise_sd",)
