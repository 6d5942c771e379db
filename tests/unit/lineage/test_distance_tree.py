"""Distance baselines: NJ and UPGMA recover trees from exact metrics; PCA keeps distances."""

from __future__ import annotations

import numpy as np
import pytest

from celldag.lineage.metrics import robinson_foulds
from celldag.lineage.reconstruct import euclidean_distances, neighbor_joining, reconstruct, upgma
from celldag.lineage.track import LineageInput
from celldag.lineage.tree import parse_newick, path_distances
from celldag.methods.distance_tree import pca_scores, run

ADDITIVE = "((A:1,B:2):1.5,(C:0.5,D:3):2,(E:1,(F:2,G:0.7):1.2):0.8);"
ULTRAMETRIC = "(((A:1,B:1):2,C:3):1,((D:0.5,E:0.5):1,F:1.5):2.5);"


@pytest.mark.parametrize(
    ("newick", "build"),
    [(ADDITIVE, neighbor_joining), (ULTRAMETRIC, upgma)],
    ids=["nj-additive", "upgma-ultrametric"],
)
def test_reconstruction_recovers_tree_and_lengths_from_its_exact_metric(newick, build):
    truth = parse_newick(newick)
    names = list(truth.leaf_names)
    distances = path_distances(truth, names, topology_only=False)
    estimate = build(distances, names)
    assert robinson_foulds(estimate, truth).distance == 0
    # both are consistent on their metric class: the branch lengths reproduce the distances exactly
    np.testing.assert_allclose(path_distances(estimate, names, topology_only=False), distances, atol=1e-9)


def test_nj_recovers_random_bm_tree_from_patristic_distances():
    from celldag.data.bm import simulate_bm

    sim = simulate_bm(
        depth=5, n_signal=1, n_noise=0, n_spurious=0, max_walk=3.0, noise_std=0.0, measurement_std=0.0, seed=4
    )
    truth = parse_newick(sim.tree_newick)
    names = list(truth.leaf_names)
    estimate = reconstruct(path_distances(truth, names, topology_only=False), names, "nj")
    assert robinson_foulds(estimate, truth).normalized == 0.0


def test_euclidean_distances_match_scipy():
    from scipy.spatial.distance import cdist

    points = np.random.default_rng(0).normal(size=(30, 7)) * 100
    distances = euclidean_distances(points)
    np.testing.assert_allclose(distances, cdist(points, points), atol=1e-9)
    assert (distances == distances.T).all() and (np.diag(distances) == 0).all()


def test_pca_scores_preserve_distances_with_all_components():
    points = np.random.default_rng(1).normal(size=(12, 5))
    np.testing.assert_allclose(euclidean_distances(pca_scores(points, 5)), euclidean_distances(points), atol=1e-9)
    assert pca_scores(points, 50).shape == (12, 5)  # capped at the data's rank bound


def test_run_returns_embedding_and_tree_over_all_leaves():
    rng = np.random.default_rng(2)
    names = tuple(f"leaf{i}" for i in range(10))
    inputs = LineageInput(names=names, features=rng.normal(size=(10, 6)), train_features=None, tree_newick="")
    result = run(inputs, {"features": "pca", "n_components": 3, "reconstruction": "upgma"}, seed=0)
    assert result.embedding.shape == (10, 3)
    assert sorted(parse_newick(result.tree_newick).leaf_names) == sorted(names)
    with pytest.raises(ValueError, match="params.features must be 'raw' or 'pca'"):
        run(inputs, {"features": "umap", "reconstruction": "nj"}, seed=0)


NJ_IN_A_FRESH_PROCESS = """
import sys
import jax
import numpy as np
from celldag.lineage.reconstruct import neighbor_joining
names = list("ABCDE")
distances = np.array([[0, 5, 9, 9, 8], [5, 0, 10, 10, 9], [9, 10, 0, 8, 7], [9, 10, 8, 0, 3], [8, 9, 7, 3, 0]], float)
neighbor_joining(distances, names)
print(sorted(name for name in ("torch", "cupy", "skbio") if name in sys.modules), jax.config.jax_enable_x64)
import torch  # reported missing to scikit-bio only while it was imported
"""


@pytest.mark.slow
def test_nj_imports_scikit_bio_without_its_array_backend_probe():
    """scikit-bio's import-time probe would import torch (≈ 2.5 s of an NJ job) and switch an
    already imported JAX to 64-bit floats for the whole process; neither happens, and torch stays
    importable afterwards."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NJ_IN_A_FRESH_PROCESS], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['skbio']", "False"]
