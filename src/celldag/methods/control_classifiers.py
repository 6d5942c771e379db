"""Null controls of the annotation track: classifiers that cannot know the cell types, run like any classifier
(``kind: control``), so that every metric's floor is on the leaderboard beside the methods.

``permuted_labels`` is the ``logistic`` classifier (``celldag.methods.classifiers``) trained on each fit's labels
permuted across its training cells: the features are the real embedding and the classes keep their frequencies, but
the link between labels and features is broken. ``uniform`` gives every cell the same flat distribution over the
classes a fit was trained on: no feature is read at all. ``majority`` answers every cell with the type most frequent
among a fit's training cells, with probability 1: the floor of a rule that answers when confident (its coverage is
that type's share, which neither a permuted nor a flat classifier reaches: they are rarely confident). All return the
classifiers' contract (``obsm["proba_<fit>"]`` through ``predict_each``, the same ``uns`` facts), so the conformal
procedures calibrate on them like on any other.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from celldag.annotation.track import AnnotationInput
from celldag.methods import MethodResult, classifiers
from celldag.methods.classifiers import _facts, predict_each

PERMUTATION_STREAM = 201  # second entry of the seed sequence the label permutations are drawn from


def permuted_labels(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """``logistic`` with ``params`` (``C``, ``max_iter``) trained on permuted labels: within each fit, its training
    cells' labels shuffled among them (one permutation per fit, in the order of ``inputs.fits``, drawn from
    ``np.random.default_rng([seed, PERMUTATION_STREAM])``). Each fit keeps its classes and their counts. ``uns``:
    logistic's facts, and ``permuted_labels``: True."""
    rng = np.random.default_rng([seed, PERMUTATION_STREAM])
    permuted = {fit: rng.permutation(np.asarray(inputs.labels[fit])) for fit in inputs.fits}
    result = classifiers.logistic(dataclasses.replace(inputs, labels=permuted), params, seed)
    return dataclasses.replace(result, uns={**result.uns, "permuted_labels": True})


# the registry params this function reads (logistic's): any other key is refused when the workflow is parsed
permuted_labels.accepted_params = ("C", "max_iter")


def uniform(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """Probability 1/K for each of the K classes among a fit's training labels, 0 for the classes that fit never saw,
    the same for every cell. ``uns``: the classifiers' facts and ``classes_seen`` (K per fit). ``seed`` is unused."""
    seen = []  # K of each fit, in the order of inputs.fits

    def fit_predict(train_x, train_y, all_x):
        classes = np.unique(train_y)
        seen.append(int(classes.size))
        return np.full((all_x.shape[0], classes.size), 1.0 / classes.size), classes

    obsm = predict_each(inputs, fit_predict)
    return MethodResult(obsm=obsm, uns=_facts(inputs, classes_seen=dict(zip(inputs.fits, seen))))


uniform.accepted_params = ()


def majority(inputs: AnnotationInput, params: dict, seed: int) -> MethodResult:
    """Probability 1 for the type most frequent among a fit's training labels (the first in sorted order on a tie),
    for every cell: the training labels' distribution read, the features not. ``uns``: the classifiers' facts and
    ``majority`` (the type of each fit). ``seed`` is unused."""
    chosen = []  # the majority type of each fit, in the order of inputs.fits

    def fit_predict(train_x, train_y, all_x):
        classes, counts = np.unique(train_y, return_counts=True)
        chosen.append(str(classes[np.argmax(counts)]))
        return np.ones((all_x.shape[0], 1)), classes[[np.argmax(counts)]]

    obsm = predict_each(inputs, fit_predict)
    return MethodResult(obsm=obsm, uns=_facts(inputs, majority=dict(zip(inputs.fits, chosen))))


majority.accepted_params = ()
