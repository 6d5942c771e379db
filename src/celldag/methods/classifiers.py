"""Classifiers of the annotation track: cell-type probabilities from a cell embedding, one model per fit.

Each method trains one model per fit of ``inputs.fits`` — only on the cells of that fit's mask, whose
labels are the only ones it is given (``inputs.labels[fit]``) — and predicts every cell. Its result holds, for each fit,
``obsm["proba_<fit>"]``: (n, K) float64 probabilities whose columns follow ``inputs.classes``; a class
without training cells in a fit has probability 0 there. Conformal sets are computed from these later
(the track's scoring), so the methods return probabilities only.

All are deterministic: brute-force k-nearest neighbours, lbfgs logistic regression, and CellTypist's one-vs-rest
model (``celldag.annotation.celltypist``), which reads genes rather than the embedding.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from scipy import sparse

from celldag.annotation import celltypist as celltypist_model
from celldag.methods import MethodResult

if TYPE_CHECKING:
    from celldag.annotation.track import AnnotationInput

# fit_predict(train_x, train_y, all_x) -> (probabilities (n, c), the c classes of their columns)
FitPredict = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
CLIP = 10.0  # CellTypist's bound on the z-scored features


def predict_each(inputs: AnnotationInput, fit_predict: FitPredict) -> dict[str, np.ndarray]:
    """``{"proba_<fit>": (n, K) float64}`` for each fit of ``inputs.fits``, columns in ``inputs.classes``.

    ``fit_predict`` gets the features and labels of the fit's cells and all features; the classes it
    returns must be labels of those cells. Each row must sum to 1 (checked, then renormalised exactly).
    """
    features = inputs.features if sparse.issparse(inputs.features) else np.asarray(inputs.features)
    column = {name: j for j, name in enumerate(inputs.classes)}
    n = features.shape[0]
    probabilities = {}
    for fit, mask in inputs.fits.items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (n,):
            raise ValueError(f"fit {fit!r}: mask of shape {mask.shape}, expected ({n},)")
        if not mask.any():
            raise ValueError(f"fit {fit!r} has no training cells")
        train_y = np.asarray(inputs.labels[fit]).astype(str)
        proba, seen = fit_predict(features[mask], train_y, features)
        proba, seen = np.asarray(proba, dtype=np.float64), np.asarray(seen).astype(str)
        unknown = sorted(set(seen) - set(np.unique(train_y)))
        if unknown:
            raise ValueError(f"fit {fit!r}: classes {unknown} are not labels of its training cells")
        if proba.shape != (n, seen.size) or len(set(seen)) != seen.size:
            raise ValueError(f"fit {fit!r}: probabilities of shape {proba.shape} for {seen.size} classes and {n} cells")
        if not np.isfinite(proba).all() or (proba < 0).any() or not np.allclose(proba.sum(axis=1), 1.0, atol=1e-6):
            raise ValueError(f"fit {fit!r}: probabilities must be finite, non-negative, and sum to 1 per cell")
        full = np.zeros((n, len(inputs.classes)), dtype=np.float64)
        full[:, [column[name] for name in seen]] = proba
        probabilities[f"proba_{fit}"] = full / full.sum(axis=1, keepdims=True)
    return probabilities


def _facts(inputs: AnnotationInput, **extra) -> dict:
    return {
        "classes": list(inputs.classes),
        "fits": list(inputs.fits),
        "train_cells": {fit: int(np.count_nonzero(mask)) for fit, mask in inputs.fits.items()},
        **extra,
    }


def knn(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """Class frequencies among each cell's k nearest training cells (Euclidean, exact brute force).

    Params: ``n_neighbors`` (15; capped by a fit's training cells), ``weights`` ("uniform" or
    "distance", sklearn's). A training cell counts itself among its neighbours. ``seed`` is unused:
    the neighbours are exact.
    """
    from sklearn.neighbors import KNeighborsClassifier

    k, weights = int(params.get("n_neighbors", 15)), params.get("weights", "uniform")
    if k < 1 or weights not in ("uniform", "distance"):
        raise ValueError(f"knn: n_neighbors must be >= 1 and weights uniform or distance, got {k}, {weights!r}")
    used = []  # k of each fit, in the order of inputs.fits

    def fit_predict(train_x, train_y, all_x):
        used.append(min(k, train_x.shape[0]))
        model = KNeighborsClassifier(n_neighbors=used[-1], weights=weights, algorithm="brute")
        model.fit(train_x, train_y)
        return model.predict_proba(all_x), model.classes_

    obsm = predict_each(inputs, fit_predict)
    return MethodResult(
        obsm=obsm, uns=_facts(inputs, n_neighbors=k, weights=weights, neighbors_used=dict(zip(inputs.fits, used)))
    )


knn.accepted_params = ("n_neighbors", "weights")


def logistic(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """Multinomial logistic regression on z-scored features: CellTypist's scaling and penalty with one softmax model
    (CellTypist's own one-vs-rest model on genes is ``celltypist``).

    Each fit z-scores the features with its training cells' mean and standard deviation (sklearn
    StandardScaler; constant features get scale 1) and clips them at ±10, then fits lbfgs with ``C``
    (1.0) and ``max_iter`` (1000). CellTypist clips only above (+10, its inputs are non-negative log
    expression) and defaults to one-vs-rest; an embedding has both tails, and the multinomial model's
    probabilities are its own. A fit with a single class predicts it with probability 1. lbfgs is
    deterministic; ``seed`` is unused. ``uns["converged"]`` records per fit whether lbfgs converged.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    C, max_iter = float(params.get("C", 1.0)), int(params.get("max_iter", 1000))
    if not C > 0 or max_iter < 1:
        raise ValueError(f"logistic: C must be > 0 and max_iter >= 1, got {C}, {max_iter}")
    converged = []  # per fit, in the order of inputs.fits

    def fit_predict(train_x, train_y, all_x):
        classes = np.unique(train_y)
        if classes.size == 1:
            converged.append(True)
            return np.ones((all_x.shape[0], 1)), classes
        scaler = StandardScaler().fit(np.asarray(train_x, dtype=np.float64))

        def scaled(x):
            return np.clip(scaler.transform(np.asarray(x, dtype=np.float64)), -CLIP, CLIP)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # recorded in uns instead
            model = LogisticRegression(C=C, solver="lbfgs", max_iter=max_iter).fit(scaled(train_x), train_y)
        converged.append(bool(model.n_iter_.max() < max_iter))
        return model.predict_proba(scaled(all_x)), model.classes_

    obsm = predict_each(inputs, fit_predict)
    return MethodResult(
        obsm=obsm, uns=_facts(inputs, C=C, max_iter=max_iter, converged=dict(zip(inputs.fits, converged)))
    )


logistic.accepted_params = ("C", "max_iter")


def celltypist(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """CellTypist's model (``celldag.annotation.celltypist``): per fit, trained on the log-normalised expression of
    the fit's cells (``inputs.expression``; the registry entry ``needs: [genes]``, so it runs on the `expression`
    upstream alone) and predicting every cell.

    ``obsm["proba_<fit>"]``: each cell's one-vs-rest sigmoids divided by their sum — a distribution over the types,
    so every conformal procedure (APS and label shift included) calibrates on it, and each cell's types keep the
    order of their sigmoids (coverage holds for any score; the normalised one lets no procedure be left out).
    ``obsm["sigmoid_<fit>"]``: the raw sigmoids, CellTypist's own probabilities (its prob-match rule reads them); a
    type without training cells in a fit has 0 in both. Params: ``C`` (1.0) and ``max_iter`` (CellTypist's budget by
    size when unset). A fit with one type predicts it with probability 1. ``seed`` is unused."""
    C = float(params.get("C", 1.0))
    max_iter = params.get("max_iter")
    if not C > 0 or (max_iter is not None and int(max_iter) < 1):
        raise ValueError(f"celltypist: C must be > 0 and max_iter >= 1, got {C}, {max_iter}")
    column = {name: j for j, name in enumerate(inputs.classes)}
    fits, genes = list(inputs.fits), inputs.genes
    sigmoid: dict[str, np.ndarray] = {}
    converged: list[bool] = []

    def fit_predict(train_x, train_y, all_x):
        fit = fits[len(converged)]
        types = np.unique(train_y)
        raw = np.ones((all_x.shape[0], 1))
        converged.append(True)
        if types.size > 1:
            model = celltypist_model.train(train_x, train_y, genes, C=C, max_iter=max_iter)
            raw = celltypist_model.sigmoids(celltypist_model.decision(model, all_x, genes)[0])
            types, converged[-1] = model.types, bool(model.description["converged"])
        full = np.zeros((all_x.shape[0], len(inputs.classes)))
        full[:, [column[name] for name in types]] = raw
        sigmoid[f"sigmoid_{fit}"] = full
        return celltypist_model.normalised(raw), types

    obsm = predict_each(dataclasses.replace(inputs, features=inputs.expression), fit_predict)
    return MethodResult(
        obsm=obsm | sigmoid,
        uns=_facts(inputs, C=C, max_iter=max_iter, genes=len(genes), converged=dict(zip(fits, converged))),
    )


celltypist.accepted_params = ("C", "max_iter")
