"""Score the annotation runs of one dataset seed: point labels, then conformal sets by every procedure.

Two scenarios per classifier output (``celldag.annotation.track``):

- **random split**: the classifier trained on the train cells (``proba_random``); sets calibrated on the
  calibration cells, measured on the query cells — marginal coverage, coverage of each batch, cell type
  and batch × type (their worst among groups of at least ``min_group_cells`` query cells, and the
  largest shortfall below 1 − α), mean set size, singleton and empty shares;
- **new batch**: for each batch in turn, the classifier trained on the other batches
  (``proba_without_<i>``), calibrated on the other batches' calibration cells plus the new batch's
  labelled share; coverage and set size on the rest of the new batch, pooled over batches, and the
  worst batch.

The control recalibrates split conformal on permuted calibration labels (seeded): what set size a
calibration that carries no information buys. α and ``min_group_cells`` come from the config's
``evaluation.annotation``.
"""

from __future__ import annotations

import numpy as np

from celldag.annotation.track import PROCEDURES, SCORING_DEFAULTS
from celldag.tracks import ScoringContext

PERMUTATION_STREAM = 6  # random stream of the permuted-calibration control
# Kandinsky's default groups: batch, cell type and soft groups — not batch × type, whose B·K columns on a
# few hundred calibration cells make the slack of order G/n larger than the gaps it would close
KANDINSKY_GROUPS = ("batch", "type", "soft")


def options(evaluation: dict) -> dict:
    """The run config's ``evaluation.annotation`` over the track's defaults."""
    return SCORING_DEFAULTS | dict(evaluation.get("annotation") or {})


def codes(values) -> np.ndarray:
    """Integer codes of string values in sorted order."""
    return np.unique(np.asarray(values).astype(str), return_inverse=True)[1]


def procedure_sets(proba: np.ndarray, truth: np.ndarray, batch: np.ndarray, soft: np.ndarray,
                   calibration: np.ndarray, query: np.ndarray, alpha: float,
                   groups: tuple[str, ...] = KANDINSKY_GROUPS) -> dict[str, np.ndarray]:  # fmt: skip
    """{procedure: (query cells, classes) bool sets} for every procedure of ``PROCEDURES``.

    ``truth`` class indices, ``batch`` integer codes, ``soft`` the soft group memberships; the masks pick
    calibration and query cells. Kandinsky's ``groups``, of ``batch`` (one-hot), ``type`` (the candidate
    label's class), ``batch_type`` (batch × class) and ``soft`` (the soft groups).
    """
    from celldag.annotation import conformal

    n_classes = proba.shape[1]
    lac, aps = conformal.lac_scores(proba), conformal.aps_scores(proba)
    cal_lac = conformal.true_scores(lac[calibration], truth[calibration])
    batch_of = np.repeat(batch[query][:, None], n_classes, axis=1)
    one_hot = np.eye(batch.max() + 1)[batch]
    covariates = np.hstack([one_hot if "batch" in groups else one_hot[:, :0], soft if "soft" in groups else soft[:, :0]])
    features = conformal.kandinsky_features(covariates, n_classes, class_groups="type" in groups,
                                            covariate_class_weights=one_hot if "batch_type" in groups else None)
    cal_features = features[calibration][np.arange(calibration.sum()), truth[calibration]]
    return {
        "kandinsky": conformal.kandinsky_sets(cal_lac, cal_features, lac[query], features[query], alpha)[0],
        "split_lac": conformal.split_sets(cal_lac, lac[query], alpha),
        "split_aps": conformal.split_sets(conformal.true_scores(aps[calibration], truth[calibration]), aps[query], alpha),
        "class_conditional": conformal.class_conditional_sets(cal_lac, truth[calibration], lac[query], alpha),
        "mondrian_batch": conformal.mondrian_sets(cal_lac, batch[calibration], lac[query], batch_of, alpha)[0],
    }  # fmt: skip


def split_masks(task) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, query) cells of the task's random split."""
    split = task.obs["split"].astype(str).to_numpy()
    return split == "calibration", split == "query"


def query_groupings(task, query: np.ndarray) -> dict[str, np.ndarray]:
    """The query cells' group of each grouping coverage is reported by: batch, type and batch × type."""
    batch = task.obs["batch"].astype(str).to_numpy()[query]
    label = task.obs["label"].astype(str).to_numpy()[query]
    return {"batch": batch, "type": label, "batch_type": np.char.add(np.char.add(batch, " × "), label)}


def random_split(task, output, alpha: float, groups: tuple[str, ...] = KANDINSKY_GROUPS):
    """(sets by procedure, query truth, query mask) of the random-split scenario of one output."""
    truth, batch, soft = task_arrays(task, output)
    calibration, query = split_masks(task)
    proba = np.asarray(output.obsm["proba_random"], dtype=np.float64)
    return procedure_sets(proba, truth, batch, soft, calibration, query, alpha, groups), truth[query], query


def task_arrays(task, output) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class index of each cell in the output's class order, batch codes, soft group memberships)."""
    classes = list(output.uns["classes"])
    index = {label: i for i, label in enumerate(classes)}
    truth = np.array([index[label] for label in task.obs["label"].astype(str)])
    return truth, codes(task.obs["batch"]), np.asarray(task.obsm["soft_groups"], dtype=np.float64)


def random_split_scores(task, output, alpha: float, min_cells: int, groups: tuple[str, ...]) -> dict[str, float]:
    from celldag.annotation.metrics import max_shortfall, point_metrics, set_metrics, worst_coverage

    sets, truth, query = random_split(task, output, alpha, groups)
    groupings = query_groupings(task, query)
    n_classes = len(output.uns["classes"])
    scores = point_metrics(np.asarray(output.obsm["proba_random"])[query], truth, n_classes)
    for procedure, procedure_set in sets.items():
        scores |= {f"{procedure}_{name}": value for name, value in set_metrics(procedure_set, truth).items()}
        for name, members in groupings.items():
            scores[f"{procedure}_worst_{name}"] = worst_coverage(procedure_set, truth, members, min_cells)
        scores[f"{procedure}_max_shortfall"] = max_shortfall(procedure_set, truth, list(groupings.values()), alpha,
                                                             min_cells)  # fmt: skip
    return scores


def new_batch_scores(task, output, alpha: float, groups: tuple[str, ...]) -> dict[str, float]:
    """Leave each batch out in turn: pooled coverage and set size on its unlabelled cells, worst batch."""
    from celldag.annotation.metrics import point_metrics

    truth, batch, soft = task_arrays(task, output)
    split = task.obs["split"].astype(str).to_numpy()
    labelled = task.obs["new_batch_labelled"].to_numpy(dtype=bool)
    covered = {procedure: [] for procedure in PROCEDURES}
    sizes = {procedure: [] for procedure in PROCEDURES}
    probabilities, truths = [], []
    for held_out in range(batch.max() + 1):
        proba = np.asarray(output.obsm[f"proba_without_{held_out}"], dtype=np.float64)
        new = batch == held_out
        calibration = (~new & (split == "calibration")) | (new & labelled)
        query = new & ~labelled
        sets = procedure_sets(proba, truth, batch, soft, calibration, query, alpha, groups)
        for procedure, procedure_set in sets.items():
            covered[procedure].append(procedure_set[np.arange(query.sum()), truth[query]])
            sizes[procedure].append(procedure_set.sum(axis=1))
        probabilities.append(proba[query])
        truths.append(truth[query])
    point = point_metrics(np.vstack(probabilities), np.concatenate(truths), len(output.uns["classes"]))
    scores = {f"{name}_new_batch": value for name, value in point.items()}
    for procedure in PROCEDURES:
        scores[f"{procedure}_new_batch_coverage"] = float(np.concatenate(covered[procedure]).mean())
        scores[f"{procedure}_new_batch_worst"] = float(min(part.mean() for part in covered[procedure]))
        scores[f"{procedure}_new_batch_set_size"] = float(np.concatenate(sizes[procedure]).mean())
    return scores


def permuted_scores(task, output, alpha: float, seed: int) -> dict[str, float]:
    """Split conformal (LAC) calibrated on a seeded permutation of the calibration labels."""
    from celldag.annotation import conformal
    from celldag.annotation.metrics import set_metrics

    truth, _, _ = task_arrays(task, output)
    calibration, query = split_masks(task)
    lac = conformal.lac_scores(np.asarray(output.obsm["proba_random"], dtype=np.float64))
    permuted = np.random.default_rng([PERMUTATION_STREAM, seed]).permutation(truth[calibration])
    sets = conformal.split_sets(conformal.true_scores(lac[calibration], permuted), lac[query], alpha)
    measured = set_metrics(sets, truth[query])
    return {"permuted_coverage": measured["coverage"], "permuted_set_size": measured["set_size"]}


def score_seed(task, outputs: list, context: ScoringContext) -> list[dict[str, float]]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``)."""
    settings = options(context.evaluation)
    alpha, min_cells = float(settings["alpha"]), int(settings["min_group_cells"])
    groups = tuple(settings["kandinsky_groups"])
    scores: list[dict[str, float]] = [{} for _ in outputs]
    for i, output in enumerate(outputs):
        if output.uns["status"] != "ok":
            continue
        scores[i] = (random_split_scores(task, output, alpha, min_cells, groups)
                     | new_batch_scores(task, output, alpha, groups) | permuted_scores(task, output, alpha, context.seed))
    return scores
