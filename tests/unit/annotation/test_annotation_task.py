"""The annotation task (splits, labelled cells, soft groups, fit masks) and its classifiers (knn, logistic)."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.annotation.task import (
    SPLITS,
    fit_masks,
    labelled_in_new_batch,
    principal_components,
    soft_groups,
    split_cells,
)
from celldag.annotation.track import AnnotationInput, fit_labels
from celldag.methods import classifiers


def make_input(features, labels, batch, fits) -> AnnotationInput:
    labels, batch = np.asarray(labels, dtype=str), np.asarray(batch, dtype=str)
    fits = {name: np.asarray(mask, dtype=bool) for name, mask in fits.items()}
    return AnnotationInput(
        features=np.asarray(features, dtype=np.float32),
        labels=fit_labels(labels, fits),
        batch=batch,
        classes=tuple(sorted(set(labels.tolist()))),
        fits=fits,
    )


# ---------------------------------------------------------------- split_cells


def strata_cells(sizes: dict[tuple[str, str], int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """labels, batch with the given (batch, label) stratum sizes, cells in a shuffled order."""
    batch = np.concatenate([[b] * n for (b, _), n in sizes.items()])
    labels = np.concatenate([[label] * n for (_, label), n in sizes.items()])
    order = np.random.default_rng(seed).permutation(batch.size)
    return labels[order], batch[order]


SIZES = {
    ("b0", "T"): 1,
    ("b0", "B"): 2,
    ("b0", "NK"): 3,
    ("b1", "T"): 4,
    ("b1", "B"): 7,
    ("b1", "NK"): 10,
    ("b2", "T"): 50,
    ("b2", "B"): 101,
    ("b2", "mono"): 5,
    ("b0", "mono"): 33,
}


@pytest.mark.parametrize("fractions", [(0.5, 0.25, 0.25), (0.8, 0.1, 0.1), (0.6, 0.2, 0.2)])
def test_split_cells_is_stratified_with_every_part_in_every_stratum(fractions):
    labels, batch = strata_cells(SIZES)
    split = split_cells(labels, batch, fractions, seed=3)
    assert split.shape == labels.shape and set(split) <= set(SPLITS)
    for (b, label), n in SIZES.items():
        in_stratum = (batch == b) & (labels == label)
        counts = np.array([np.count_nonzero(in_stratum & (split == part)) for part in SPLITS])
        assert counts.sum() == n
        quotas = np.array(fractions) * n
        if n >= 3:
            assert (counts >= 1).all(), ((b, label), counts)
        if quotas.min() >= 1:  # nothing to fill: each part its quota's floor or ceiling
            assert (np.abs(counts - quotas) < 1).all(), ((b, label), counts, quotas)


def test_split_cells_counts_by_hand():
    labels, batch = strata_cells({("a", "x"): 10, ("a", "y"): 3, ("b", "x"): 101, ("c", "x"): 8})
    seen = {key: set() for key in [("a", "x"), ("a", "y"), ("b", "x"), ("c", "x")]}
    for seed in range(40):
        split = split_cells(labels, batch, (0.5, 0.25, 0.25), seed=seed)
        for key in seen:
            seen[key].add(
                tuple(np.count_nonzero((batch == key[0]) & (labels == key[1]) & (split == p)) for p in SPLITS)
            )
    assert seen[("a", "x")] == {(5, 3, 2), (5, 2, 3)}  # 5, 2.5, 2.5: the half cell goes to either, at random
    assert seen[("a", "y")] == {(1, 1, 1)}  # 1.5, 0.75, 0.75: an empty part is filled from train
    assert seen[("b", "x")] == {(51, 25, 25), (50, 26, 25), (50, 25, 26)}  # 50.5, 25.25, 25.25
    assert seen[("c", "x")] == {(4, 2, 2)}  # exact quotas are kept
    split = split_cells(labels, batch, (0.8, 0.1, 0.1), seed=0)
    # 2.4, 0.3, 0.3 -> an empty part takes one from train
    assert [np.count_nonzero((batch == "a") & (labels == "y") & (split == p)) for p in SPLITS] == [1, 1, 1]


@pytest.mark.parametrize("fractions", [(0.5, 0.25, 0.25), (0.6, 0.2, 0.2)])
def test_split_favours_neither_calibration_nor_query(fractions):
    """Over 2,000 seeds, in every stratum shape (1 to 12 cells, and 33), calibration and query receive the same
    expected number of cells, so the same expected type mix: the bias issue 51 found (a lone cell and remainders
    to calibration) would fail by far more than the 4-SE margin."""
    sizes = {("b", f"t{n}"): n for n in (*range(1, 13), 33)}
    labels, batch = strata_cells(sizes)
    seeds = 2000
    tallies = {n: np.zeros((seeds, len(SPLITS))) for n in sizes.values()}
    for seed in range(seeds):
        split = split_cells(labels, batch, fractions, seed=seed)
        for (_, label), n in sizes.items():
            in_stratum = labels == label
            tallies[n][seed] = [np.count_nonzero(in_stratum & (split == part)) for part in SPLITS]
    for n, counts in tallies.items():
        difference = counts[:, 1] - counts[:, 2]
        se = max(difference.std(ddof=1) / np.sqrt(seeds), 1e-12)
        assert abs(difference.mean()) <= 4 * se, (n, counts.mean(axis=0))
        if n < 3 or min(fractions) * n >= 1:  # no part filled: every expectation is the quota itself
            quotas = np.array(fractions) * n
            se_parts = counts.std(axis=0, ddof=1) / np.sqrt(seeds) + 1e-12
            assert (np.abs(counts.mean(axis=0) - quotas) <= 4 * se_parts).all(), (n, counts.mean(axis=0), quotas)


def test_split_cells_is_seeded():
    labels, batch = strata_cells(SIZES)
    first = split_cells(labels, batch, (0.6, 0.2, 0.2), seed=7)
    assert np.array_equal(first, split_cells(list(labels), list(batch), (0.6, 0.2, 0.2), seed=7))
    other = split_cells(labels, batch, (0.6, 0.2, 0.2), seed=8)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("fractions", [(0.5, 0.5, 0.0), (0.5, 0.3, 0.3), (1.0, 0.1), (-0.2, 0.6, 0.6)])
def test_split_cells_refuses_bad_fractions(fractions):
    labels, batch = strata_cells({("a", "x"): 10})
    with pytest.raises(ValueError, match="fractions"):
        split_cells(labels, batch, fractions, seed=0)


# ---------------------------------------------------------------- labelled_in_new_batch


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.9])
def test_labelled_in_new_batch_has_the_batch_type_mix_in_expectation(fraction):
    """Each stratum's labelled count is its quota's floor or ceiling and, over 2,000 seeds, the quota in mean: no
    per-stratum minimum over-represents rare types in the labelled share (issue 51)."""
    sizes = {("b0", f"type{m}"): m for m in (1, 2, 3, 10, 25)}
    labels, batch = strata_cells(sizes)
    seeds = 2000
    counts = np.zeros((seeds, len(sizes)))
    for seed in range(seeds):
        labelled = labelled_in_new_batch(labels, batch, fraction, seed=seed)
        assert labelled.dtype == bool and labelled.shape == labels.shape
        counts[seed] = [np.count_nonzero(labelled[labels == label]) for (_, label) in sizes]
    quotas = fraction * np.array(list(sizes.values()))
    assert ((counts == np.floor(quotas)) | (counts == np.ceil(quotas))).all()
    se = counts.std(axis=0, ddof=1) / np.sqrt(seeds) + 1e-12
    assert (np.abs(counts.mean(axis=0) - quotas) <= 4 * se).all(), (counts.mean(axis=0), quotas)


def test_labelled_in_new_batch_is_seeded_and_its_own_stream():
    labels, batch = strata_cells(SIZES)
    first = labelled_in_new_batch(labels, batch, 0.3, seed=1)
    assert np.array_equal(first, labelled_in_new_batch(labels, batch, 0.3, seed=1))
    assert not np.array_equal(first, labelled_in_new_batch(labels, batch, 0.3, seed=2))
    with pytest.raises(ValueError):
        labelled_in_new_batch(labels, batch, 1.0, seed=1)


# ---------------------------------------------------------------- soft_groups


def clustered(seed: int, n_per: int = 100, dim: int = 30):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 6, size=(3, dim))
    truth = np.repeat(np.arange(3), n_per)
    return (centres[truth] + rng.normal(size=(truth.size, dim))).astype(np.float32), truth


def test_soft_groups_rows_are_memberships_and_deterministic():
    expression, truth = clustered(0)
    groups = soft_groups(expression, 3, seed=0)
    assert groups.shape == (300, 3) and groups.dtype == np.float64
    assert (groups >= 0).all() and np.allclose(groups.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.array_equal(groups, soft_groups(expression.copy(), 3, seed=0))
    # well-separated clusters: each group is one cluster
    hard = groups.argmax(axis=1)
    assert all(np.unique(hard[truth == t]).size == 1 for t in range(3)) and np.unique(hard).size == 3
    # columns ordered by the first principal component: the same group numbers under another seed
    assert np.array_equal(hard, soft_groups(expression, 3, seed=5).argmax(axis=1))
    assert soft_groups(expression[:, :1], 1, seed=0).tolist() == [[1.0]] * 300  # one group: everyone in it


def test_soft_groups_of_the_principal_components_are_those_of_the_expression():
    expression, _ = clustered(1, dim=40)
    components = principal_components(expression, seed=0)
    assert components.shape == (300, 20) and components.dtype == np.float64
    assert np.array_equal(components, principal_components(expression, seed=0))
    variances = components.var(axis=0)
    assert (np.diff(variances) <= 1e-9 * variances[0]).all()  # leading components first
    # the track fits the groups on the components: the same groups as on the expression
    np.testing.assert_allclose(soft_groups(components, 3, seed=0), soft_groups(expression, 3, seed=0), atol=1e-6)


def test_soft_groups_refuses_more_groups_than_cells():
    with pytest.raises(ValueError):
        soft_groups(np.random.default_rng(0).normal(size=(3, 4)), 4, seed=0)


# ---------------------------------------------------------------- fit_masks


def test_fit_masks_by_hand():
    split = ["train", "train", "calibration", "train", "query", "train"]
    batch = ["b", "a", "a", "c", "b", "b"]
    masks = fit_masks(split, batch)
    assert list(masks) == ["random", "without_0", "without_1", "without_2"]  # batches a, b, c in sorted order
    assert masks["random"].tolist() == [True, True, False, True, False, True]
    assert masks["without_0"].tolist() == [True, False, False, True, False, True]  # no a
    assert masks["without_1"].tolist() == [False, True, False, True, False, False]  # no b
    assert masks["without_2"].tolist() == [True, True, False, False, False, True]  # no c
    assert all(mask.dtype == bool for mask in masks.values())


# ---------------------------------------------------------------- knn

# 1-D positions (second coordinate 0). Training cells 0–5; batch b2's training cells are the only C.
# Cells 6–8 never train; D is the label of cells in no fit.
X = [0.0, 1.0, 2.5, 10.0, 11.0, 12.5, 0.4, 10.7, 50.0]
LABELS = ["A", "A", "B", "B", "C", "C", "D", "B", "D"]
BATCH = ["b0", "b0", "b1", "b1", "b2", "b2", "b1", "b0", "b2"]
SPLIT = ["train"] * 6 + ["calibration", "query", "query"]


def toy_input(x=X) -> AnnotationInput:
    features = np.column_stack([x, np.zeros(len(x))])
    return make_input(features, LABELS, BATCH, fit_masks(SPLIT, BATCH))


def test_knn_probabilities_are_the_neighbour_frequencies():
    inputs = toy_input()
    result = classifiers.knn(inputs, {"n_neighbors": 3}, seed=0)
    third = 1 / 3
    # columns A, B, C, D; by hand from the distances on the line
    random = [
        [2, 1, 0, 0],
        [2, 1, 0, 0],
        [2, 1, 0, 0],
        [0, 1, 2, 0],
        [0, 1, 2, 0],
        [0, 1, 2, 0],
        [2, 1, 0, 0],
        [0, 1, 2, 0],
        [0, 1, 2, 0],
    ]
    without_b2 = [
        [2, 1, 0, 0],
        [2, 1, 0, 0],
        [2, 1, 0, 0],
        [1, 2, 0, 0],
        [1, 2, 0, 0],
        [1, 2, 0, 0],
        [2, 1, 0, 0],
        [1, 2, 0, 0],
        [1, 2, 0, 0],
    ]
    # training cells 2–5 (B at 2.5 and 10, C at 11 and 12.5): cells near 0 see 2.5, 10, 11; the others 10, 11, 12.5
    without_b0 = [[0, 2, 1, 0] if x < 5 else [0, 1, 2, 0] for x in X]
    assert set(result.obsm) == {"proba_random", "proba_without_0", "proba_without_1", "proba_without_2"}
    np.testing.assert_allclose(result.obsm["proba_random"], np.array(random) * third, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.obsm["proba_without_2"], np.array(without_b2) * third, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.obsm["proba_without_0"], np.array(without_b0) * third, rtol=0, atol=1e-12)
    for proba in result.obsm.values():
        assert proba.dtype == np.float64 and proba.shape == (9, 4)
        assert np.allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert (proba[:, 3] == 0).all()  # D labels no training cell
    assert (result.obsm["proba_without_2"][:, 2] == 0).all()  # C: only in the held-out batch b2
    assert result.uns["classes"] == ["A", "B", "C", "D"]
    assert result.uns["fits"] == ["random", "without_0", "without_1", "without_2"]
    assert result.uns["n_neighbors"] == 3 and result.uns["train_cells"]["without_2"] == 4


def test_knn_without_a_batch_never_sees_its_cells():
    moved = list(X)
    moved[4], moved[5] = 0.5, 0.7  # batch b2's training cells move next to the A cells
    before, after = (classifiers.knn(toy_input(x), {"n_neighbors": 3}, seed=0).obsm for x in (X, moved))
    others = np.array(BATCH) != "b2"  # rows of the moved cells change as queries; every other row must not
    assert np.array_equal(before["proba_without_2"][others], after["proba_without_2"][others])
    assert not np.array_equal(before["proba_random"][others], after["proba_random"][others])


def test_knn_caps_k_at_the_training_cells_and_weights_by_distance():
    inputs = make_input(np.array([[0.0], [1.0], [3.0]]), ["A", "B", "B"], ["x", "x", "x"], {"two": [True, True, False]})
    uniform = classifiers.knn(inputs, {"n_neighbors": 15}, seed=0)
    np.testing.assert_allclose(uniform.obsm["proba_two"], 0.5)
    assert uniform.uns["neighbors_used"] == {"two": 2}
    distance = classifiers.knn(inputs, {"n_neighbors": 2, "weights": "distance"}, seed=0).obsm["proba_two"]
    np.testing.assert_allclose(
        distance[2], [1 / 3 / (1 / 3 + 1 / 2), 1 / 2 / (1 / 3 + 1 / 2)]
    )  # 3 away from A, 2 from B


# ---------------------------------------------------------------- logistic


def separable(seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0, 0.0], [8.0, 0.0, 3.0], [0.0, 8.0, -3.0]])
    truth = np.repeat(np.arange(3), 40)
    features = centres[truth] + rng.uniform(-1, 1, size=(truth.size, 3))
    labels = np.array(["alpha", "beta", "gamma"])[truth]
    batch = np.where(np.arange(truth.size) % 2 == 0, "p", "q")
    split = split_cells(labels, batch, (0.5, 0.25, 0.25), seed=seed)
    return features, labels, batch, split


def test_logistic_separates_a_separable_toy_and_is_deterministic():
    features, labels, batch, split = separable()
    masks = fit_masks(split, batch) | {"no_gamma": (split == "train") & (labels != "gamma")}
    inputs = make_input(features, labels, batch, masks)
    result = classifiers.logistic(inputs, {}, seed=0)
    assert set(result.obsm) == {f"proba_{fit}" for fit in masks}
    for fit, proba in result.obsm.items():
        assert proba.dtype == np.float64 and proba.shape == (120, 3)
        assert np.allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    predicted = np.array(inputs.classes)[result.obsm["proba_random"].argmax(axis=1)]
    assert (predicted == labels).mean() == 1.0
    assert (result.obsm["proba_no_gamma"][:, 2] == 0).all()
    assert all(result.uns["converged"].values()) and result.uns["C"] == 1.0
    again = classifiers.logistic(inputs, {}, seed=1)
    assert all(np.array_equal(result.obsm[key], again.obsm[key]) for key in result.obsm)


def test_logistic_scales_on_the_training_cells_only():
    features, labels, batch, split = separable()
    inputs = make_input(features, labels, batch, {"random": split == "train"})
    query = np.flatnonzero(split == "query")[0]
    shifted = features.copy()
    shifted[query] += 1000.0  # a far outlier outside the fit
    before = classifiers.logistic(inputs, {}, seed=0).obsm["proba_random"]
    after = classifiers.logistic(make_input(shifted, labels, batch, {"random": split == "train"}), {}, seed=0)
    others = np.arange(labels.size) != query
    np.testing.assert_allclose(after.obsm["proba_random"][others], before[others], rtol=0, atol=1e-12)


def test_logistic_with_one_class_in_a_fit():
    features, labels, batch, split = separable()
    inputs = make_input(features, labels, batch, {"alpha_only": (split == "train") & (labels == "alpha")})
    proba = classifiers.logistic(inputs, {}, seed=0).obsm["proba_alpha_only"]
    assert (proba[:, 0] == 1).all() and (proba[:, 1:] == 0).all()


def test_predict_each_refuses_classes_the_fit_never_saw():
    inputs = make_input(np.zeros((3, 1)), ["A", "B", "B"], ["x"] * 3, {"f": [True, False, False]})

    def cheat(train_x, train_y, all_x):
        return np.full((all_x.shape[0], 2), 0.5), np.array(["A", "B"])

    with pytest.raises(ValueError, match="not labels of its training cells"):
        classifiers.predict_each(inputs, cheat)


def test_accepted_params():
    assert classifiers.knn.accepted_params == ("n_neighbors", "weights")
    assert classifiers.logistic.accepted_params == ("C", "max_iter")
