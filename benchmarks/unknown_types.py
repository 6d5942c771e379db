"""Does `celldag annotate`'s unknown-type flag find a type the reference lacks? A held-out-type scenario on real
annotation runs (issue 44; docs/annotation.md, "Unknown types on real runs").

  .venv/bin/python benchmarks/unknown_types.py RUNS [RUNS ...] [--dataset ID] [--min-cells 20]

RUNS: a `results/runs` folder. For every annotation task under it (`…/annotation-<key>/input.h5ad`: the task with
a representation run's embedding as X), each type with at least `--min-cells` query cells is removed in turn from
the training and calibration cells; the classifier (`knn`, `logistic`, as the track runs them) trains on the rest,
is calibrated on the rest, and a query cell is flagged `unknown type` when no
query cell is flagged `unknown type` by ``celldag.annotation.query``'s rule at α (distance to the reference train
cells or the classifier's doubt beyond the calibration cells' quantile at α/2 each) — and, to compare, by each of
its two tests alone and by an empty class-conditional set; and candidates for a better flag (issue 51), each one test
at α on the calibration cells: the residual off the train cells' principal subspace, the distance to the train cells
of the type the classifier calls the cell, and a transductive test of query clusters (k-means, K + 1 clusters, a
cluster's distances against the calibration cells', Holm at 0.05: all its cells flagged). Per rule, classifier and
embedding: the share of the removed type's query cells flagged (detection, Wilson 95 % interval over every cell of
every removal and seed) and the share of the other query cells flagged (false flags: at most α by construction, plus
binomial noise).

Prints Markdown.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import anndata  # noqa: E402
from annotation_runs import annotation_folders, parser, rate  # noqa: E402

from celldag.annotation import conformal, shift  # noqa: E402
from celldag.annotation.novelty import novelty_distances, novelty_tests  # noqa: E402
from celldag.annotation.track import SCORING_DEFAULTS, AnnotationInput  # noqa: E402
from celldag.methods.classifiers import knn, logistic  # noqa: E402

CLASSIFIERS = {"knn": knn, "logistic": logistic}


def tasks(runs: Path, dataset: str):
    """(embedding, task) of every annotation task under ``runs`` whose representation run is ok."""
    for folder in annotation_folders(runs, dataset):
        path, outputs = folder / "input.h5ad", list(folder.glob("*/output.h5ad"))
        if outputs and anndata.read_h5ad(outputs[0]).uns.get("status") == "ok":
            embedding = "/".join(path.relative_to(runs).parts[1:3])
            yield embedding, anndata.read_h5ad(path)


RULES = (
    "annotate: distance or doubt",
    "distance alone",
    "doubt alone",
    "empty class-conditional set",
    "candidate: residual off the train cells' principal subspace",
    "candidate: distance to the best type's cells",
    "candidate: query clusters shifted in distance",
)
SUBSPACE = 10  # principal axes of the train cells the residual candidate projects on (at most the embedding's - 1)
CLUSTER_LEVEL = 0.05  # family-wise level of the cluster candidate's tests (Holm over the query's clusters)


def calibrated_flags(values: np.ndarray, calibration: np.ndarray, level: float) -> np.ndarray:
    """(n,) bool: a score beyond the calibration cells' conformal quantile at ``level`` (one test at the level)."""
    return values > conformal.conformal_quantile(values[calibration], level)


def residuals(embedding: np.ndarray, train: np.ndarray) -> np.ndarray:
    """(n,) each cell's distance from the affine subspace of the train cells' first ``SUBSPACE`` principal axes: a
    type the reference lacks may lie off the directions the reference's types span."""
    from sklearn.decomposition import PCA

    k = min(SUBSPACE, embedding.shape[1] - 1, int(train.sum()) - 1)
    pca = PCA(n_components=k, svd_solver="full").fit(embedding[train])
    return np.linalg.norm(embedding - pca.inverse_transform(pca.transform(embedding)), axis=1)


def best_type_distances(
    embedding: np.ndarray, train: np.ndarray, labels: np.ndarray, best: np.ndarray, classes: tuple[str, ...]
) -> np.ndarray:
    """(n,) each cell's novelty distance to the train cells of the type the classifier calls it (label-free, so the
    calibration and query cells are scored alike): a cell can be near the reference yet far from its own call."""
    distances = np.empty(labels.size)
    for j, name in enumerate(classes):
        called = best == j
        if called.any():
            of_type = train & (labels == name)
            rows = called | of_type
            distances[called] = novelty_distances(embedding[rows], of_type[rows])[called[rows]]
    return distances


def cluster_flags(
    embedding: np.ndarray, distances: np.ndarray, calibration: np.ndarray, query: np.ndarray, n_clusters: int, seed: int
) -> np.ndarray:
    """(n,) bool: every query cell of a query cluster (k-means on the query cells' embedding rows) whose novelty
    distances are stochastically larger than the calibration cells' (one-sided Mann–Whitney, Holm over clusters) —
    transductive: a missing type arrives as a group of cells, which one cell's test may miss."""
    from sklearn.cluster import KMeans

    found = np.zeros(distances.size, dtype=bool)
    rows = np.flatnonzero(query)
    clusters = KMeans(n_clusters=min(n_clusters, rows.size), n_init=4, random_state=seed).fit_predict(embedding[rows])
    p_values = [
        shift.larger_p(distances[calibration], distances[rows[clusters == c]])[1]
        if np.count_nonzero(clusters == c) >= shift.MIN_CELLS
        else 1.0
        for c in range(clusters.max() + 1)
    ]
    shifted = shift.holm(p_values) <= CLUSTER_LEVEL
    found[rows] = shifted[clusters]
    return found


def flagged(task, classifier, removed: str, alpha: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per rule of ``RULES``: (flags of the removed type's query cells, flags of the other query cells)."""
    labels = task.obs["label"].astype(str).to_numpy()
    split = task.obs["split"].astype(str).to_numpy()
    known = labels != removed
    classes = tuple(sorted(set(labels[known])))
    embedding = np.asarray(task.X, dtype=np.float32)
    train = (split == "train") & known
    inputs = AnnotationInput(
        features=embedding,
        labels={"known": labels[train]},
        batch=task.obs["batch"].astype(str).to_numpy(),
        classes=classes,
        fits={"known": train},
    )
    proba = classifier(inputs, {}, int(task.uns["seed"])).obsm["proba_known"]
    lac = conformal.lac_scores(proba)
    calibration, query = (split == "calibration") & known, split == "query"
    truth = np.array([classes.index(label) if label in classes else -1 for label in labels])
    cal_scores = conformal.true_scores(lac[calibration], truth[calibration])
    empty = ~conformal.class_conditional_sets(cal_scores, truth[calibration], lac[query], alpha).any(axis=1)
    distances = novelty_distances(embedding, train)
    by = novelty_tests(distances, shift.top_scores(proba), calibration, alpha)[query]
    seed = int(task.uns["seed"])
    rules = {
        RULES[0]: by != "",
        RULES[1]: np.isin(by, ("distance", "both")),
        RULES[2]: np.isin(by, ("doubt", "both")),
        RULES[3]: empty,
        RULES[4]: calibrated_flags(residuals(embedding, train), calibration, alpha)[query],
        RULES[5]: calibrated_flags(
            best_type_distances(embedding, train, labels, proba.argmax(axis=1), classes), calibration, alpha
        )[query],
        RULES[6]: cluster_flags(embedding, distances, calibration, query, len(classes) + 1, seed)[query],
    }
    novel = ~known[query]
    return {rule: (flags[novel], flags[~novel]) for rule, flags in rules.items()}


def joined_rate(flags: list[np.ndarray]) -> str:
    joined = np.concatenate(flags)
    return rate(int(joined.sum()), joined.size)


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--min-cells", type=int, default=20)
    args = arguments.parse_args()
    alpha = SCORING_DEFAULTS["alpha"]
    detected, false_flags, removals = defaultdict(list), defaultdict(list), defaultdict(set)
    for runs in args.runs:
        for embedding, task in tasks(runs, args.dataset):
            labels = task.obs["label"].astype(str).to_numpy()
            query = task.obs["split"].astype(str).to_numpy() == "query"
            types, counts = np.unique(labels[query], return_counts=True)
            for removed in types[counts >= args.min_cells]:
                for name, classifier in CLASSIFIERS.items():
                    for rule, (novel, known) in flagged(task, classifier, removed, alpha).items():
                        detected[rule, name, embedding].append(novel)
                        false_flags[rule, name, embedding].append(known)
                        detected[rule, name, "all"].append(novel)
                        false_flags[rule, name, "all"].append(known)
                    removals[name, embedding].add(removed)
    print(
        f"## Held-out types flagged unknown (α = {alpha}; types with ≥ {args.min_cells} query cells: "
        f"{', '.join(sorted(set().union(*removals.values())))})\n"
    )
    print("| rule | classifier | embedding | detected [95 %] | false flags on known types [95 %] |")
    print("|---|---|---|---|---|")
    for key in sorted(detected, key=lambda key: (RULES.index(key[0]), key[1], key[2] != "all", key[2])):
        if key[0] == RULES[0] or key[2] == "all":
            print(
                f"| {key[0]} | {key[1]} | {key[2]} | {joined_rate(detected[key])} | {joined_rate(false_flags[key])} |"
            )


if __name__ == "__main__":
    main()
