"""scIB scores (scib-metrics' Benchmarker + extras) and marker-gene clustering, checked on hand-built cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from celldag.representation.metrics import SCIB_METRICS, marker_clustering, scib_scores

BIO = (
    "nmi_kmeans",
    "ari_kmeans",
    "nmi_leiden",
    "ari_leiden",
    "silhouette_label",
    "clisi",
    "isolated_labels",
    "bio_conservation",
)


def _toy_cells(n_per_label: int = 80, dim: int = 8, seed: int = 0):
    """Three labels × two batches (alternating within each label) and two 8-d embeddings of the same cells:
    ``bio`` places cells by label only (batches mixed), ``batch`` places them by batch only (labels mixed)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(["T", "B", "NK"], n_per_label)
    batch = np.tile(["b1", "b2"], len(labels) // 2)
    label_centre = {name: 12.0 * np.eye(dim)[i] for i, name in enumerate(("T", "B", "NK"))}
    batch_centre = {"b1": np.zeros(dim), "b2": 12.0 * np.ones(dim) / np.sqrt(dim)}
    bio = np.stack([label_centre[name] for name in labels]) + rng.normal(size=(len(labels), dim))
    by_batch = np.stack([batch_centre[name] for name in batch]) + rng.normal(size=(len(labels), dim))
    return labels, batch, bio, by_batch


@pytest.fixture(scope="module")
def toy_scores():
    labels, batch, bio, by_batch = _toy_cells()
    # unintegrated reference: both signals, batch included
    pre_integration = np.hstack([bio, by_batch])
    scores = scib_scores({"bio": bio, "batch": by_batch}, labels, batch, pre_integration)
    return scores, (labels, batch, bio, by_batch)


def test_scib_scores_rank_a_label_embedding_above_a_batch_embedding(toy_scores):
    scores, _ = toy_scores
    assert set(scores) == {"bio", "batch"}
    for key in scores:
        assert list(scores[key]) == list(SCIB_METRICS)  # every metric, in the declared order
        for metric, value in scores[key].items():
            # ARI is chance-corrected: about 0 for a random clustering, slightly negative at worst
            low = -0.5 if metric.startswith("ari_") else 0.0
            assert math.isfinite(value) and low <= value <= 1.0, (key, metric, value)
    bio, batch = scores["bio"], scores["batch"]
    assert bio["bio_conservation"] > batch["bio_conservation"] + 0.3
    assert bio["batch_correction"] > batch["batch_correction"] + 0.3
    assert bio["total"] == pytest.approx(0.6 * bio["bio_conservation"] + 0.4 * bio["batch_correction"])
    # perfectly separated labels: k-means and Leiden recover them exactly
    for metric in ("nmi_kmeans", "ari_kmeans", "nmi_leiden", "ari_leiden", "clisi"):
        assert bio[metric] == pytest.approx(1.0, abs=1e-6), metric
    assert bio["graph_connectivity"] > 0.95
    # batches well mixed in "bio", fully separated in "batch"
    assert bio["ilisi"] > 0.8 and batch["ilisi"] < 0.05
    assert bio["kbet"] > 0.8 and batch["kbet"] < 0.2
    assert bio["pcr_comparison"] > 0.9 and batch["pcr_comparison"] < 0.1


def test_scib_scores_agree_with_sklearn_silhouette(toy_scores):
    from sklearn.metrics import silhouette_samples, silhouette_score

    scores, (labels, batch, bio, _) = toy_scores
    assert scores["bio"]["silhouette_label"] == pytest.approx((silhouette_score(bio, labels) + 1) / 2, abs=1e-5)
    # classic batch ASW: 1 − |silhouette of the batches| within each label, averaged over cells then labels
    per_label = []
    for name in np.unique(labels):
        rows = labels == name
        per_label.append(np.mean(1 - np.abs(silhouette_samples(bio[rows], batch[rows]))))
    assert scores["bio"]["silhouette_batch"] == pytest.approx(np.mean(per_label), abs=1e-5)


def test_bio_only_scores_match_the_full_call(toy_scores):
    scores, (labels, batch, bio, _) = toy_scores
    bio_only = scib_scores({"bio": bio}, labels, batch, None, batch_metrics=False)["bio"]
    assert list(bio_only) == list(BIO)
    for metric in BIO:
        assert bio_only[metric] == pytest.approx(scores["bio"][metric], abs=1e-6), metric


GRAPH = ("nmi_kmeans", "ari_kmeans", "clisi", "ilisi", "kbet", "graph_connectivity")


@pytest.mark.slow
def test_a_subsample_scores_the_graph_metrics_on_every_cell_and_the_rest_on_its_rows(toy_scores):
    """subsample: neighbour-graph and k-means metrics of every cell (what a sparser sample would move), the
    silhouettes on the rows; the aggregates the Benchmarker's means. All rows: the full call's scores."""
    from sklearn.metrics import silhouette_score

    scores, (labels, batch, bio, by_batch) = toy_scores
    embeddings = {"bio": bio, "batch": by_batch}
    reference = np.hstack([bio, by_batch])
    every = scib_scores(embeddings, labels, batch, reference, subsample=np.arange(len(labels)))
    for key in embeddings:
        assert every[key] == pytest.approx(scores[key], abs=1e-6), key
    rows = np.sort(np.random.default_rng(1).choice(len(labels), size=150, replace=False))
    half = scib_scores(embeddings, labels, batch, reference[rows], subsample=rows)
    for key in embeddings:
        for metric in GRAPH:
            assert half[key][metric] == pytest.approx(scores[key][metric], abs=1e-6), (key, metric)
    assert half["bio"]["silhouette_label"] == pytest.approx(
        (silhouette_score(bio[rows], labels[rows]) + 1) / 2, abs=1e-5
    )
    assert half["bio"]["silhouette_label"] != pytest.approx(scores["bio"]["silhouette_label"], abs=1e-6)
    bio_mean = np.mean(
        [half["bio"][m] for m in ("nmi_kmeans", "ari_kmeans", "silhouette_label", "clisi", "isolated_labels")]
    )
    assert half["bio"]["bio_conservation"] == pytest.approx(bio_mean, abs=1e-12)
    assert half["bio"]["total"] == pytest.approx(0.6 * bio_mean + 0.4 * half["bio"]["batch_correction"], abs=1e-12)


def test_scib_scores_refuse_batch_metrics_with_one_batch():
    labels, _, bio, _ = _toy_cells(n_per_label=40)
    one_batch = np.full(len(labels), "only")
    with pytest.raises(ValueError, match="batch-correction metrics need ≥ 2 batches; 1 found"):
        scib_scores({"bio": bio}, labels, one_batch, bio)


def test_scib_scores_refuse_too_few_cells():
    labels, batch, bio, _ = _toy_cells(n_per_label=20)
    with pytest.raises(ValueError, match="more than 90 cells"):
        scib_scores({"bio": bio}, labels, batch, bio)


# marker genes: A = {a1 (0, 0), a2 (2, 0)}, B = {b1 (10, 0), b2 (10, 4)}
GENES = ["a1", "a2", "b1", "b2", "both", "other"]
VECTORS = np.array([[0, 0], [2, 0], [10, 0], [10, 4], [100, 100], [-50, 3]], dtype=float)
MARKERS = {"A": ["a1", "a2", "both", "absent"], "B": ["b1", "b2", "both"]}


def test_marker_clustering_matches_hand_computed_indices():
    result = marker_clustering(VECTORS, GENES, MARKERS)
    # centroids (1, 0) and (10, 2); mean distance to the centroid s_A = 1, s_B = 2; centroid distance √85.
    # Davies–Bouldin = mean over clusters of max_j (s_i + s_j) / d_ij = 3 / √85
    assert result["davies_bouldin"] == pytest.approx(3 / math.sqrt(85))
    # Calinski–Harabasz = [B / (k − 1)] / [W / (n − k)]; grand mean (5.5, 1): B = 2·(4.5² + 1) · 2 = 85,
    # W = 1 + 1 + 4 + 4 = 10  →  85 / 5 = 17
    assert result["calinski_harabasz"] == pytest.approx(17.0)
    # "both" is listed under two types (skipped), "absent" is not in the table, "other" is no marker
    assert (result["n_genes"], result["n_types"], result["n_missing"], result["n_ambiguous"]) == (4, 2, 1, 1)


def test_marker_clustering_needs_two_types_and_more_genes_than_types():
    with pytest.raises(ValueError, match="≥ 2 cell types"):
        marker_clustering(VECTORS, GENES, {"A": ["a1", "a2"], "B": ["absent"]})
    with pytest.raises(ValueError, match="more marker genes than types"):
        marker_clustering(VECTORS, GENES, {"A": ["a1"], "B": ["b1"]})


def test_the_pcr_reference_is_the_expressions_50_leading_principal_components():
    from celldag.representation.scoring import unintegrated_reference

    rng = np.random.default_rng(0)
    x = (rng.normal(size=(120, 80)) @ rng.normal(size=(80, 80))).astype(np.float32)
    reference = unintegrated_reference(x)
    assert reference.shape == (120, 50)  # scib's n_comps=50 and scanpy's default, whatever the embedding's size
    centred = x.astype(np.float64) - x.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    expected = centred @ axes[:50].T
    signs = np.sign(np.sum(reference * expected, axis=0))  # each axis is defined up to sign
    np.testing.assert_allclose(reference * signs, expected, atol=2e-3 * np.abs(expected).max())
    assert unintegrated_reference(x[:40]).shape == (40, 39)  # fewer only when the data have ≤ 50 cells or genes
