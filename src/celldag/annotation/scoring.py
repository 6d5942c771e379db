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


class ProcedureFailed(RuntimeError):
    """A conformal procedure that could not build its sets: the message names the procedure (and, raised again by
    ``score_seed``, the run and the scenario)."""


def kandinsky_design(batch: np.ndarray, soft: np.ndarray, n_classes: int,
                     groups: tuple[str, ...]) -> np.ndarray:  # fmt: skip
    """Phi(x, y) (cells, classes, G) of Kandinsky's ``groups``, of ``batch`` (one-hot), ``type`` (the candidate
    label's class), ``batch_type`` (batch × class) and ``soft`` (the soft groups), in ``kandinsky_features``' order."""
    from celldag.annotation import conformal

    one_hot = np.eye(batch.max() + 1)[batch]
    covariates = np.hstack([one_hot if "batch" in groups else one_hot[:, :0], soft if "soft" in groups else soft[:, :0]])
    return conformal.kandinsky_features(covariates, n_classes, class_groups="type" in groups,
                                        covariate_class_weights=one_hot if "batch_type" in groups else None)  # fmt: skip


def design_names(batch_names: list[str], classes: list[str], n_soft: int, groups: tuple[str, ...]) -> list[str]:
    """The name of each column of ``kandinsky_design`` with the same groups."""
    from celldag.annotation import conformal

    covariates = (list(batch_names) if "batch" in groups else []) + (
        [f"soft group {j + 1}" for j in range(n_soft)] if "soft" in groups else [])
    return conformal.kandinsky_feature_names(covariates, list(classes), class_groups="type" in groups,
                                             covariate_class_names=list(batch_names) if "batch_type" in groups else None)  # fmt: skip


def procedure_sets(proba: np.ndarray, truth: np.ndarray, batch: np.ndarray, soft: np.ndarray,
                   calibration: np.ndarray, query: np.ndarray, alpha: float,
                   groups: tuple[str, ...] = KANDINSKY_GROUPS,
                   procedures: tuple[str, ...] = tuple(PROCEDURES)) -> dict[str, np.ndarray]:  # fmt: skip
    """{procedure: (query cells, classes) bool sets} for each of ``procedures`` (ids of ``PROCEDURES``).

    ``truth`` class indices, ``batch`` integer codes, ``soft`` the soft group memberships; the masks pick
    calibration and query cells; ``groups`` those of both Kandinsky fits (``kandinsky_design``). A procedure
    that fails raises ``ProcedureFailed`` naming it.
    """
    from celldag.annotation import conformal

    n_classes = proba.shape[1]
    lac, aps = conformal.lac_scores(proba), conformal.aps_scores(proba)
    cal_lac = conformal.true_scores(lac[calibration], truth[calibration])
    batch_of = np.repeat(batch[query][:, None], n_classes, axis=1)
    features = kandinsky_design(batch, soft, n_classes, groups)
    cal_features = features[calibration][np.arange(calibration.sum()), truth[calibration]]
    build = {
        "kandinsky_augmented": lambda: conformal.augmented_sets(cal_lac, cal_features, lac[query], features[query], alpha),
        "kandinsky": lambda: conformal.kandinsky_sets(cal_lac, cal_features, lac[query], features[query], alpha)[0],
        "split_lac": lambda: conformal.split_sets(cal_lac, lac[query], alpha),
        "split_aps": lambda: conformal.split_sets(conformal.true_scores(aps[calibration], truth[calibration]), aps[query], alpha),
        "class_conditional": lambda: conformal.class_conditional_sets(cal_lac, truth[calibration], lac[query], alpha),
        "mondrian_batch": lambda: conformal.mondrian_sets(cal_lac, batch[calibration], lac[query], batch_of, alpha)[0],
    }  # fmt: skip
    sets = {}
    for procedure in procedures:
        try:
            sets[procedure] = build[procedure]()
        except Exception as err:  # noqa: BLE001 - any failure of one procedure is reported as that procedure's
            raise ProcedureFailed(f"conformal procedure {procedure} failed: {type(err).__name__}: {err}") from err
    return sets


def small_groups(task, output, calibration: np.ndarray, alpha: float, groups: tuple[str, ...],
                 procedures: tuple[str, ...] = tuple(PROCEDURES)) -> dict[str, list[str]]:  # fmt: skip
    """{procedure: names of its groups too small to calibrate (``conformal.too_small``)} over the calibration
    cells, for those of ``procedures`` with groups: Mondrian by batch's batches, class-conditional's classes,
    both Kandinsky fits' group columns."""
    from celldag.annotation import conformal

    truth, batch, soft = task_arrays(task, output)
    classes, batch_names = list(output.uns["classes"]), sorted(set(task.obs["batch"].astype(str)))
    cal_features = kandinsky_design(batch, soft, len(classes), groups)[calibration][
        np.arange(calibration.sum()), truth[calibration]]  # fmt: skip
    weights = {"class_conditional": (np.eye(len(classes))[truth[calibration]], [f"type {name}" for name in classes]),
               "mondrian_batch": (np.eye(len(batch_names))[batch[calibration]], batch_names),
               "kandinsky": (cal_features, design_names(batch_names, classes, soft.shape[1], groups))}  # fmt: skip
    weights["kandinsky_augmented"] = weights["kandinsky"]
    return {procedure: [name for name, small in zip(names, conformal.too_small(matrix, alpha)) if small]
            for procedure, (matrix, names) in weights.items() if procedure in procedures}  # fmt: skip


def small_groups_note(random: dict[str, list[str]], new_batch: dict[str, dict[str, list[str]]], alpha: float) -> str:
    """One line naming the groups too small to calibrate, per scenario and procedure ('' when there are none)."""
    def listed(small: dict[str, list[str]]) -> str:
        by_names: dict[tuple[str, ...], list[str]] = {}
        for procedure, names in small.items():
            if names:
                by_names.setdefault(tuple(names), []).append(procedure)
        return "; ".join(f"{', '.join(procedures)}: {', '.join(names)}" for names, procedures in by_names.items())

    scenarios = {"random split": listed(random)} | {f"new batch {batch}": listed(small) for batch, small in new_batch.items()}
    parts = [f"{scenario} — {names}" for scenario, names in scenarios.items() if names]
    if not parts:
        return ""
    return (f"groups with less than 1/α − 1 = {1 / alpha - 1:g} calibration cells' weight, too few to calibrate at "
            f"α = {alpha:g} (Mondrian and the augmented fit give them full sets, the plain Kandinsky fit under-covers "
            "them): " + " | ".join(parts))


def split_masks(task) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, query) cells of the task's random split."""
    split = task.obs["split"].astype(str).to_numpy()
    return split == "calibration", split == "query"


def query_groupings(task, query: np.ndarray) -> dict[str, np.ndarray]:
    """The query cells' group of each grouping coverage is reported by: batch, type and batch × type."""
    batch = task.obs["batch"].astype(str).to_numpy()[query]
    label = task.obs["label"].astype(str).to_numpy()[query]
    return {"batch": batch, "type": label, "batch_type": np.char.add(np.char.add(batch, " × "), label)}


def random_split(task, output, alpha: float, groups: tuple[str, ...] = KANDINSKY_GROUPS,
                 procedures: tuple[str, ...] = tuple(PROCEDURES)):  # fmt: skip
    """(sets by procedure, query truth, query mask) of the random-split scenario of one output."""
    truth, batch, soft = task_arrays(task, output)
    calibration, query = split_masks(task)
    proba = np.asarray(output.obsm["proba_random"], dtype=np.float64)
    return procedure_sets(proba, truth, batch, soft, calibration, query, alpha, groups, procedures), truth[query], query


def task_arrays(task, output) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class index of each cell in the output's class order, batch codes, soft group memberships)."""
    classes = list(output.uns["classes"])
    index = {label: i for i, label in enumerate(classes)}
    truth = np.array([index[label] for label in task.obs["label"].astype(str)])
    return truth, codes(task.obs["batch"]), np.asarray(task.obsm["soft_groups"], dtype=np.float64)


def random_split_scores(task, output, alpha: float, min_cells: int, groups: tuple[str, ...],
                        procedures: tuple[str, ...]) -> dict[str, float]:  # fmt: skip
    from celldag.annotation.metrics import max_shortfall, point_metrics, set_metrics, worst_coverage

    sets, truth, query = random_split(task, output, alpha, groups, procedures)
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


def new_batch_calibration(task, held_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, query) of the new-batch scenario for the held-out batch code: the other batches'
    calibration cells plus the new batch's labelled share; its unlabelled cells."""
    new = codes(task.obs["batch"]) == held_out
    split = task.obs["split"].astype(str).to_numpy()
    labelled = task.obs["new_batch_labelled"].to_numpy(dtype=bool)
    return (~new & (split == "calibration")) | (new & labelled), new & ~labelled


def new_batch_scores(task, output, alpha: float, groups: tuple[str, ...],
                     procedures: tuple[str, ...]) -> dict[str, float]:  # fmt: skip
    """Leave each batch out in turn: pooled coverage and set size on its unlabelled cells, worst batch."""
    from celldag.annotation.metrics import point_metrics

    truth, batch, soft = task_arrays(task, output)
    covered = {procedure: [] for procedure in procedures}
    sizes = {procedure: [] for procedure in procedures}
    probabilities, truths = [], []
    for held_out in range(batch.max() + 1):
        proba = np.asarray(output.obsm[f"proba_without_{held_out}"], dtype=np.float64)
        calibration, query = new_batch_calibration(task, held_out)
        sets = procedure_sets(proba, truth, batch, soft, calibration, query, alpha, groups, procedures)
        for procedure, procedure_set in sets.items():
            covered[procedure].append(procedure_set[np.arange(query.sum()), truth[query]])
            sizes[procedure].append(procedure_set.sum(axis=1))
        probabilities.append(proba[query])
        truths.append(truth[query])
    point = point_metrics(np.vstack(probabilities), np.concatenate(truths), len(output.uns["classes"]))
    scores = {f"{name}_new_batch": value for name, value in point.items()}
    for procedure in procedures:
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


def score_seed(task, outputs: list, context: ScoringContext) -> list[dict[str, float | str]]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``), with a ``note`` naming
    the groups too small to calibrate where there are any (the same for every run of the seed: they are the
    task's). A procedure that fails stops the scoring with one line naming it, the run and the scenario."""
    settings = options(context.evaluation)
    alpha, min_cells = float(settings["alpha"]), int(settings["min_group_cells"])
    groups, procedures = tuple(settings["kandinsky_groups"]), tuple(settings["procedures"])
    scores: list[dict[str, float | str]] = [{} for _ in outputs]
    for i, output in enumerate(outputs):
        if output.uns["status"] != "ok":
            continue
        run = f"{output.uns['dataset_id']} {output.uns['method_id']} on {output.uns['variant']} seed {context.seed}"
        scenario = "random split"
        try:
            scores[i] |= random_split_scores(task, output, alpha, min_cells, groups, procedures)
            scenario = "new batch"
            scores[i] |= new_batch_scores(task, output, alpha, groups, procedures)
        except ProcedureFailed as err:
            raise ProcedureFailed(f"{run}, {scenario}: {err}") from err
        scores[i] |= permuted_scores(task, output, alpha, context.seed)
        small = small_groups(task, output, split_masks(task)[0], alpha, groups, procedures)
        scores[i] |= {f"{procedure}_small_groups": float(len(names)) for procedure, names in small.items()}
        batch_names = sorted(set(task.obs["batch"].astype(str)))
        note = small_groups_note(small, {name: small_groups(task, output, new_batch_calibration(task, code)[0], alpha,
                                                            groups, procedures)
                                         for code, name in enumerate(batch_names)}, alpha)  # fmt: skip
        if note:
            scores[i]["note"] = note
    return scores
