"""A third track, registered from the test suite only: cell-type annotation of labelled points.

tests/e2e/test_e2e_toy_track.py names everything here by reference in a copied workflow's registries
(config/tracks.yaml, datasets.yaml, methods.yaml) and runs it through Snakemake: proof that a track
needs no edit of celldag itself. Prepared data: two features per cell and a label; the method
predicts a label per cell; the scorer reports the accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celldag.contracts import ContractError
from celldag.methods import MethodResult
from celldag.tracks import Metric, MetricGroup, Track

TRACK = Track(
    x_dtype="float64",
    check_prepared="toy_track:check_prepared",
    check_output="toy_track:check_output",
    method_input="toy_track:method_input",
    inputs={},
    scorer="toy_track:score_seed",
    metric_groups=(MetricGroup("annotation", (Metric("accuracy", higher_is_better=True, core=True),)),),
    dataset_facts="toy_track:dataset_facts",
)


@dataclass(frozen=True)
class AnnotationInput:
    features: np.ndarray
    train_labels: np.ndarray  # the label of every training cell, "" for the cells to annotate

    def unmet(self, need: str) -> str | None:
        return None


def load(dataset_id, params, seed, files):
    """Two Gaussian blobs per label; every third cell's label is hidden from methods."""
    import anndata
    import pandas as pd

    rng = np.random.default_rng(seed)
    labels = np.repeat(["a", "b"], params["n"] // 2)
    centres = np.where(labels[:, None] == "a", 0.0, params["separation"])
    return anndata.AnnData(
        X=centres + rng.normal(size=(len(labels), 2)),
        obs=pd.DataFrame({"label": labels}, index=[f"cell{i}" for i in range(len(labels))]),
    )


def check_prepared(adata, path):
    if "label" not in adata.obs:
        raise ContractError(path, "obs['label']", "missing")


def check_output(adata, path):
    if len(adata.uns.get("predicted", ())) != adata.n_obs:
        raise ContractError(path, "uns['predicted']", "one predicted label per cell needed")


def method_input(prepared, work_dir, gene_table=None):
    labels = prepared.obs["label"].astype(str).to_numpy().copy()
    labels[::3] = ""
    return AnnotationInput(np.asarray(prepared.X), labels)


def run(inputs: AnnotationInput, params, seed):
    """Nearest centroid of the labelled cells."""
    known = inputs.train_labels != ""
    names = np.unique(inputs.train_labels[known])
    centroids = np.stack([inputs.features[inputs.train_labels == name].mean(axis=0) for name in names])
    nearest = np.argmin(((inputs.features[:, None, :] - centroids[None]) ** 2).sum(axis=2), axis=1)
    return MethodResult(uns={"predicted": [str(name) for name in names[nearest]]})


def score_seed(prepared, outputs, context):
    hidden = np.zeros(prepared.n_obs, bool)
    hidden[::3] = True  # scored on the cells whose label the method did not see
    truth = prepared.obs["label"].astype(str).to_numpy()[hidden]
    return [
        {"accuracy": float(np.mean(np.asarray(output.uns["predicted"])[hidden] == truth))}
        if output.uns["status"] == "ok"
        else {}
        for output in outputs
    ]


def dataset_facts(prepared, entry):
    return [("cells", str(prepared.n_obs))]
