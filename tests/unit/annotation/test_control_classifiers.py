"""Null controls of the annotation track (``celldag.methods.control_classifiers``): logistic regression on permuted
labels falls to chance where the real labels give ~1, and the uniform control is exactly flat over a fit's classes."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.annotation.track import AnnotationInput, check_output, fit_labels
from celldag.methods import classifiers, control_classifiers

TYPES = np.array(["a", "b", "c", "d"])
N_PER = 60


def _inputs(seed: int = 0) -> tuple[AnnotationInput, np.ndarray, np.ndarray]:
    """Four well-separated types in 6 dimensions; fits: a random half of the cells, and that half without type a."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(TYPES, N_PER)
    centres = 8.0 * rng.normal(size=(TYPES.size, 6))
    features = centres[np.repeat(np.arange(TYPES.size), N_PER)] + rng.normal(size=(labels.size, 6))
    train = rng.random(labels.size) < 0.5
    fits = {"random": train, "without_type_0": train & (labels != "a")}
    inputs = AnnotationInput(
        features=features.astype(np.float32),
        labels=fit_labels(labels, fits),
        batch=np.where(rng.random(labels.size) < 0.5, "b1", "b2"),
        classes=tuple(TYPES),
        fits=fits,
    )
    return inputs, labels, train


def _accuracy(proba: np.ndarray, labels: np.ndarray, cells: np.ndarray) -> float:
    return float(np.mean(TYPES[proba[cells].argmax(axis=1)] == labels[cells]))


def test_permuted_labels_fall_to_chance_where_logistic_is_near_perfect():
    inputs, labels, train = _inputs()
    held_out = ~train
    real = classifiers.logistic(inputs, {}, 0).obsm["proba_random"]
    assert _accuracy(real, labels, held_out) > 0.98
    # a permuted fit predicts nearly one type per well-separated cluster, right for a cluster by chance (1/4):
    # averaged over seeds
    accuracies = [
        _accuracy(control_classifiers.permuted_labels(inputs, {}, seed).obsm["proba_random"], labels, held_out)
        for seed in range(8)
    ]
    assert np.mean(accuracies) < 0.45, accuracies
    permuted = control_classifiers.permuted_labels(inputs, {}, 0).obsm["proba_random"]
    assert not np.allclose(permuted, real, atol=0.05)
    # no confidence either: the top probability stays far below logistic's on the real labels
    assert permuted.max(axis=1).mean() < 0.6 < 0.95 < real.max(axis=1).mean()


def test_permuted_labels_shuffle_each_fit_within_itself(monkeypatch):
    inputs, labels, _ = _inputs()
    seen, logistic = [], classifiers.logistic

    def spy(given, params, seed):
        seen.append((given, params, seed))
        return logistic(given, params, seed)

    monkeypatch.setattr(classifiers, "logistic", spy)
    params = {"C": 0.5, "max_iter": 200}
    result = control_classifiers.permuted_labels(inputs, params, 7)
    ((given, passed, seed),) = seen
    assert passed == params and seed == 7
    assert given.fits is inputs.fits and given.features is inputs.features
    for fit in inputs.fits:
        assert sorted(given.labels[fit]) == sorted(inputs.labels[fit])  # the same labels, as many of each
        assert np.mean(given.labels[fit] != inputs.labels[fit]) > 0.5
    assert result.uns["C"] == 0.5 and result.uns["max_iter"] == 200 and result.uns["permuted_labels"] is True
    assert result.uns["classes"] == list(TYPES) and result.uns["fits"] == ["random", "without_type_0"]
    # the fit without type a never sees it, permuted or not
    assert "a" not in set(given.labels["without_type_0"])
    np.testing.assert_array_equal(result.obsm["proba_without_type_0"][:, 0], 0.0)


def test_permuted_labels_are_seeded():
    inputs, _, _ = _inputs()
    first = control_classifiers.permuted_labels(inputs, {}, 3).obsm
    again = control_classifiers.permuted_labels(inputs, {}, 3).obsm
    other = control_classifiers.permuted_labels(inputs, {}, 4).obsm
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.allclose(first["proba_random"], other["proba_random"])


def test_uniform_is_flat_over_each_fits_classes():
    import anndata

    inputs, labels, _ = _inputs()
    result = control_classifiers.uniform(inputs, {}, 0)
    assert set(result.obsm) == {"proba_random", "proba_without_type_0"}
    full = result.obsm["proba_random"]
    assert full.shape == (labels.size, 4) and full.dtype == np.float64
    np.testing.assert_array_equal(full, 0.25)
    without_a = result.obsm["proba_without_type_0"]
    np.testing.assert_array_equal(without_a[:, 0], 0.0)
    np.testing.assert_allclose(without_a[:, 1:], 1 / 3, rtol=0, atol=1e-15)
    for proba in result.obsm.values():
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    train_cells = {fit: int(mask.sum()) for fit, mask in inputs.fits.items()}
    assert result.uns == {
        "classes": list(TYPES),
        "fits": ["random", "without_type_0"],
        "train_cells": train_cells,
        "classes_seen": {"random": 4, "without_type_0": 3},
    }
    # the track's output contract, as the runner writes it
    check_output(anndata.AnnData(np.zeros((labels.size, 1)), obsm=result.obsm, uns=result.uns), "uniform.h5ad")


def test_uniform_ignores_the_features():
    inputs, _, _ = _inputs()
    scrambled = AnnotationInput(
        features=np.zeros_like(inputs.features),
        labels=inputs.labels,
        batch=inputs.batch,
        classes=inputs.classes,
        fits=inputs.fits,
    )
    for key, proba in control_classifiers.uniform(inputs, {}, 0).obsm.items():
        np.testing.assert_array_equal(proba, control_classifiers.uniform(scrambled, {}, 1).obsm[key])


def test_accepted_params_match_the_classifiers():
    assert control_classifiers.permuted_labels.accepted_params == classifiers.logistic.accepted_params
    assert control_classifiers.uniform.accepted_params == ()
    with pytest.raises(ValueError, match="C must be > 0"):
        control_classifiers.permuted_labels(_inputs()[0], {"C": 0}, 0)


def test_majority_answers_each_fits_most_frequent_type_with_certainty():
    inputs, labels, _ = _inputs()
    # make b the majority of the random fit's training cells: drop a third of its other types' cells from the fit
    fits = {
        "random": inputs.fits["random"] & ((labels == "b") | (np.arange(labels.size) % 3 != 0)),
        "without_type_0": inputs.fits["without_type_0"],
    }
    inputs = AnnotationInput(
        features=inputs.features, labels=fit_labels(labels, fits), batch=inputs.batch, classes=inputs.classes, fits=fits
    )
    result = control_classifiers.majority(inputs, {}, 0)
    counts = {fit: dict(zip(*np.unique(labels[mask], return_counts=True))) for fit, mask in fits.items()}
    expected = {fit: max(sorted(c), key=lambda t: c[t]) for fit, c in counts.items()}
    assert result.uns["majority"] == expected and expected["random"] == "b"
    for fit, proba in result.obsm.items():
        column = list(TYPES).index(expected[fit.removeprefix("proba_")])
        np.testing.assert_array_equal(proba[:, column], 1.0)
        assert proba.sum() == labels.size
    assert control_classifiers.majority.accepted_params == ()
