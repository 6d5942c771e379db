"""Score the annotation runs of one dataset seed: point labels, then conformal sets by every procedure.

Scenarios per classifier output (``celldag.annotation.track``):

- **random split**: the classifier trained on the train cells (``proba_random``); sets calibrated on the
  calibration cells, measured on the query cells — marginal coverage, coverage of each batch, cell type
  and batch × type (their worst among groups of at least ``min_group_cells`` query cells, and the
  largest shortfall below 1 − α), mean set size, singleton and empty shares;
- **new batch**: for each batch in turn, the classifier trained on the other batches
  (``proba_without_<i>``), calibrated on the other batches' calibration cells plus the new batch's
  labelled share; coverage and set size on the rest of the new batch, pooled over batches, and the
  worst batch;
- **label-free new batch**: the same fits, no cell of the new batch labelled — calibrated on the other batches
  alone, measured on all its cells (what ``celldag annotate`` gives a lab's batch; Mondrian by batch does not apply);
- **shift test per left-out batch** (``celldag.annotation.shift``): whether the new batch's cells conform less than
  the other batches' calibration cells, on its labelled share and label-free; batches called shifted (Holm);
- **held-out types**: each type with ≥ 20 query cells left out of a fit's training and of calibration in turn
  (``proba_without_type_<j>``); how many of its query cells the unknown-type rule of ``celldag annotate`` flags
  (``celldag.annotation.novelty``, in the embedding the classifier ran on: ``ScoringContext.chained_inputs``), and
  how many known cells it flags. Nothing in it is drawn at random;
- **no empty sets**: the random split's sets with the top label added to each empty one.

The control recalibrates split conformal on permuted calibration labels (seeded): what set size a
calibration that carries no information buys. Settings come from the config's ``evaluation.annotation``
(``Settings``). Both Kandinsky fits take a design sized to each scenario's calibration cells
(``celldag.annotation.design``); the augmented fit is randomised by draws derived from the seed and each cell's key
(``Randomisation``; the label-free scenario's keys name it, so no earlier draw changes), and scored unrandomised as
a procedure of its own. A procedure that fails fails alone: its metrics are returned as failed, with their reason.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from celldag.annotation import celltypist, conformal, design, shift
from celldag.annotation.label_shift import weighted_sets
from celldag.annotation.metrics import (
    confident_answers,
    max_shortfall,
    point_metrics,
    rule_metrics,
    set_metrics,
    worst_coverage,
)
from celldag.annotation.novelty import novelty_distances, novelty_tests
from celldag.annotation.quantile_lp import QuantileRegressionError, UnverifiedPrograms
from celldag.annotation.track import (
    HELD_OUT_TYPE_FIT,
    KANDINSKY_FITS,
    LABEL_FREE_METRICS,
    NEW_BATCH_METRICS,
    NO_EMPTY_METRICS,
    NOT_LABEL_FREE,
    POOLED,
    PROCEDURES,
    SCORING_DEFAULTS,
    SET_METRICS,
)
from celldag.contracts import SCORE_FAILED
from celldag.tracks import ScoringContext

PERMUTATION_STREAM = 6  # random stream of the permuted-calibration control
RANDOM_SPLIT = "random split"  # the scenario's name in notes, reasons and the randomised fit's cell keys
# Kandinsky's default groups: batch, cell type and soft groups — not batch × type, whose B·K columns on a
# few hundred calibration cells make the slack of order G/n larger than the gaps it would close
KANDINSKY_GROUPS = ("batch", "type", "soft")


def options(evaluation: dict) -> dict:
    """The run config's ``evaluation.annotation`` over the track's defaults."""
    return SCORING_DEFAULTS | dict(evaluation.get("annotation") or {})


@dataclass(frozen=True)
class Settings:
    """What the scoring of every scenario takes from ``evaluation.annotation`` (docs/annotation.md)."""

    alpha: float
    min_cells: int  # query cells a group needs to count in a worst-group coverage
    groups: tuple[str, ...]  # of both Kandinsky fits
    procedures: tuple[str, ...]
    min_weight: float  # calibration weight a Kandinsky group's direction needs to enter the design
    randomised: bool  # the augmented fit's randomised rule (exact coverage) or the unrandomised one

    @classmethod
    def of(cls, evaluation: dict) -> Settings:
        settings = options(evaluation)
        alpha = float(settings["alpha"])
        weight = settings["kandinsky_min_weight"]
        return cls(
            alpha,
            int(settings["min_group_cells"]),
            tuple(settings["kandinsky_groups"]),
            tuple(settings["procedures"]),
            design.default_min_weight(alpha) if weight is None else float(weight),
            bool(settings["kandinsky_randomised"]),
        )


def codes(values) -> np.ndarray:
    """Integer codes of string values in sorted order."""
    return np.unique(np.asarray(values).astype(str), return_inverse=True)[1]


class ProcedureFailed(RuntimeError):
    """A conformal procedure that could not build its sets: the message names the procedure (and, in a score's
    reason, the run and the scenario)."""


@dataclass(frozen=True)
class Scenario:
    """The sets of one scenario (random split, or one new batch) by every procedure that built them."""

    sets: dict[str, np.ndarray]  # procedure → (query cells, classes) bool
    failed: dict[str, str]  # procedure → why it built no sets
    unverified: dict[str, int]  # Kandinsky fit → its programs that no attempt verified
    dropped: dict[int, float]  # Kandinsky design column → the calibration weight of its direction (too light)


def procedure_sets(
    proba: np.ndarray,
    truth: np.ndarray,
    batch: np.ndarray,
    soft: np.ndarray,
    calibration: np.ndarray,
    query: np.ndarray,
    alpha: float,
    groups: tuple[str, ...] = KANDINSKY_GROUPS,
    procedures: tuple[str, ...] = tuple(PROCEDURES),
    min_weight: float | None = None,
    randomisation: Randomisation | None = None,
    sizing: np.ndarray | None = None,
) -> Scenario:
    """The sets of each of ``procedures`` (ids of ``PROCEDURES``); a procedure that fails is named in ``failed``
    with its reason, and the others are built all the same.

    ``truth`` class indices, ``batch`` integer codes, ``soft`` the soft group memberships; the masks pick
    calibration and query cells; ``groups`` those of both Kandinsky fits (``design.kandinsky_design``), sized to
    the calibration set with ``min_weight`` (default ``design.default_min_weight``); ``randomisation`` makes the
    augmented fit randomised (``scenario_randomisation``), None unrandomised.

    ``sizing``: the labelled cells the design is chosen on (the fit's train cells), their weights scaled to the
    calibration set's size — so the design is chosen without the labels its quantile is fitted on, and the fit's
    guarantee, which assumes a design fixed before calibration, holds as stated. None: the calibration cells
    themselves (tests that pin the old rule).
    """
    n_classes = proba.shape[1]
    lac, aps = conformal.lac_scores(proba), conformal.aps_scores(proba)
    cal_lac = conformal.true_scores(lac[calibration], truth[calibration])
    batch_of = np.repeat(batch[query][:, None], n_classes, axis=1)
    features = design.kandinsky_design(batch, soft, n_classes, groups)
    cal_features = features[calibration][np.arange(calibration.sum()), truth[calibration]]
    weight = design.default_min_weight(alpha) if min_weight is None else min_weight
    sizing = calibration if sizing is None or not sizing.any() else sizing
    sizing_features = features[sizing][np.arange(sizing.sum()), truth[sizing]]
    scale = calibration.sum() / sizing.sum()  # a sizing cell stands for this many calibration cells
    order = design.visiting_order(sizing_features, batch.max() + 1, soft.shape[1], n_classes, groups)
    kept, dropped = design.sized_columns(
        sizing_features,
        features[query].reshape(-1, features.shape[2]),
        weight / scale,
        order,
        always=batch.max() + 1 if "batch" in groups else 0,
    )
    dropped = {column: light * scale for column, light in dropped.items()}
    cal_design, query_design = cal_features[:, kept], features[query][:, :, kept]
    build = {
        "kandinsky_augmented": lambda: augmented(cal_lac, cal_design, lac[query], query_design, alpha, randomisation),
        "kandinsky_augmented_unrandomised": lambda: augmented(
            cal_lac, cal_design, lac[query], query_design, alpha, None
        ),
        "kandinsky": lambda: conformal.kandinsky_sets(cal_lac, cal_design, lac[query], query_design, alpha)[0],
        "split_lac": lambda: conformal.split_sets(cal_lac, lac[query], alpha),
        "split_aps": lambda: conformal.split_sets(
            conformal.true_scores(aps[calibration], truth[calibration]), aps[query], alpha
        ),
        "class_conditional": lambda: conformal.class_conditional_sets(cal_lac, truth[calibration], lac[query], alpha),
        "class_conditional_pooled": lambda: conformal.pooled_class_sets(cal_lac, truth[calibration], lac[query], alpha),
        "mondrian_batch": lambda: conformal.mondrian_sets(cal_lac, batch[calibration], lac[query], batch_of, alpha)[0],
        "label_shift": lambda: weighted_sets(proba, lac, truth, calibration, query, alpha)[0],
    }
    sets, failed, unverified = {}, {}, {}
    for procedure in procedures:
        if procedure in KANDINSKY_FITS:
            unverified[procedure] = 0
        try:
            sets[procedure] = build[procedure]()
        except Exception as err:  # noqa: BLE001 - any failure of one procedure is that procedure's result, not the job's
            failed[procedure] = f"conformal procedure {procedure} failed: {type(err).__name__}: {err}"
            if isinstance(
                err, QuantileRegressionError
            ):  # the plain fit is one program; the augmented fit counts its candidates
                unverified[procedure] = err.count if isinstance(err, UnverifiedPrograms) else 1
    return Scenario(sets, failed, unverified, dropped)


def augmented(
    cal_scores: np.ndarray,
    cal_design: np.ndarray,
    query_scores: np.ndarray,
    query_design: np.ndarray,
    alpha: float,
    randomisation: Randomisation | None,
) -> np.ndarray:
    """The augmented fit's sets: unrandomised, or randomised with the scores' ties broken (``Randomisation``)."""
    if randomisation is None:
        return conformal.augmented_sets(cal_scores, cal_design, query_scores, query_design, alpha)
    return conformal.augmented_sets(
        cal_scores + TIE_BREAK * randomisation.cal_ties,
        cal_design,
        query_scores + TIE_BREAK * randomisation.query_ties,
        query_design,
        alpha,
        randomisation.uniforms,
    )


def cell_uniforms(seed: int, keys: list[str]) -> np.ndarray:
    """(cells,) uniforms in (0, 1) of the randomised augmented fit, one per query cell: the top 53 bits of
    sha256(seed, key), so the same on every machine and re-run, and independent of the cells' order.

    ``keys`` identify the cells (dataset, scenario, batch, cell id: ``uniform_keys``); a duplicate would give two
    cells the same draw, and is refused."""
    if len(set(keys)) != len(keys):
        seen: set[str] = set()
        duplicate = next(key for key in keys if key in seen or seen.add(key))
        raise ValueError(f"duplicate cell key for the randomised sets: {duplicate!r}")
    draws = [int.from_bytes(hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()[:8], "big") >> 11 for key in keys]
    return (np.array(draws, dtype=np.float64) + 0.5) / 2.0**53


def uniform_keys(task, scenario: str, cells: np.ndarray) -> list[str]:
    """The key of each of ``cells`` (a mask) in ``scenario``: dataset, scenario, batch and cell id, unit-separated."""
    batch = task.obs["batch"].astype(str).to_numpy()[cells]
    names = np.asarray(task.obs_names)[cells]
    return [f"{task.uns['dataset_id']}\x1f{scenario}\x1f{b}\x1f{cell}" for b, cell in zip(batch, names)]


@dataclass(frozen=True)
class Randomisation:
    """The draws of the randomised augmented fit in one scenario, each a function of the seed and a cell's key.

    ``uniforms`` (query cells,) decide each query cell's level (``conformal.augmented_sets``). ``cal_ties``
    (calibration cells,) and ``query_ties`` (query cells, classes) break ties among scores: LAC scores of kNN take a
    few values (a class no neighbour has scores exactly 1), and a threshold that lands on a value many calibration
    cells share would hold every tied label, where exact coverage holds only some of them. Scores + ``TIE_BREAK``
    × draw are continuous, drawn alike for the calibration cells' true labels and every query candidate, so they
    stay exchangeable and the guarantee holds for them."""

    uniforms: np.ndarray
    cal_ties: np.ndarray
    query_ties: np.ndarray


# scale of the tie-breaking draws: far below the gaps between distinct scores (1/k for kNN), far above the
# solver's tolerance (``conformal.SOLVER_TOLERANCE``)
TIE_BREAK = 1e-3


def scenario_randomisation(
    task,
    scenario: str,
    calibration: np.ndarray,
    query: np.ndarray,
    truth: np.ndarray,
    n_classes: int,
    settings: Settings,
) -> Randomisation | None:
    """The randomised fit's draws for the scenario's cells (None for the unrandomised fit)."""
    if not settings.randomised or "kandinsky_augmented" not in settings.procedures:
        return None
    seed = int(task.uns["seed"])
    query_keys = uniform_keys(task, scenario, query)
    cal_keys = [
        f"{key}\x1f{label}" for key, label in zip(uniform_keys(task, scenario, calibration), truth[calibration])
    ]
    candidate_keys = [f"{key}\x1f{label}" for key in query_keys for label in range(n_classes)]
    return Randomisation(
        cell_uniforms(seed, query_keys),
        cell_uniforms(seed, cal_keys),
        cell_uniforms(seed, candidate_keys).reshape(len(query_keys), n_classes),
    )


def small_groups(
    task, output, calibration: np.ndarray, alpha: float, procedures: tuple[str, ...] = tuple(PROCEDURES)
) -> dict[str, list[str]]:
    """{procedure: names of its groups too small to calibrate (``conformal.too_small``)} over the calibration
    cells, for Mondrian by batch (its batches) and class-conditional (its classes): they give those groups the
    full label set. (The Kandinsky fits drop such groups from their design: ``dropped_names``.)"""
    truth, batch, _ = task_arrays(task, output)
    classes, batch_names = list(output.uns["classes"]), sorted(set(task.obs["batch"].astype(str)))
    weights = {
        "class_conditional": (np.eye(len(classes))[truth[calibration]], [f"type {name}" for name in classes]),
        "mondrian_batch": (np.eye(len(batch_names))[batch[calibration]], batch_names),
    }
    return {
        procedure: [name for name, small in zip(names, conformal.too_small(matrix, alpha)) if small]
        for procedure, (matrix, names) in weights.items()
        if procedure in procedures
    }


def pooled_types(task, output, calibration: np.ndarray, alpha: float) -> tuple[list[str], bool]:
    """(the types ``class_conditional_pooled`` calibrates as one pooled group on ``calibration``, whether the pool
    holds enough calibration cells — where it does not, those types are calibrated marginally)."""
    truth, _, _ = task_arrays(task, output)
    classes = list(output.uns["classes"])
    _, rare, pooled_enough = conformal.rare_pooled_groups(truth[calibration], len(classes), alpha)
    return [name for name, pooled in zip(classes, rare) if pooled], pooled_enough


def pooled_note(names: list[str], pooled_enough: bool, settings: Settings) -> str:
    """The note part naming the random split's pooled types ('' when there are none)."""
    if not names:
        return ""
    listed = ", ".join(names + ([] if pooled_enough else ["(calibrated marginally)"]))
    return (
        f"types with fewer than ⌈(1 − α)/α⌉ = {conformal.min_calibration_cells(settings.alpha)} calibration cells, "
        f"calibrated as one pooled group by {POOLED} (random split): {listed}"
    )


def training_conditional_note(task, settings: Settings) -> str:
    """The note part on training-conditional coverage: for split conformal on the random split's n calibration cells,
    P(coverage < 1 − α − ε) over calibration sets (``conformal.training_conditional_risk``)."""
    n = int(split_masks(task)[0].sum())
    epsilon = conformal.TRAINING_CONDITIONAL_SLACK
    risk = conformal.training_conditional_risk(n, settings.alpha, epsilon)
    return (
        f"training-conditional coverage: with {n} calibration cells, split conformal's coverage falls below "
        f"1 − α − {epsilon:g} = {1 - settings.alpha - epsilon:g} on {risk:.1%} of calibration sets (Beta law)"
    )


def dropped_names(task, output, dropped: dict[int, float], settings: Settings) -> list[str]:
    """'name (weight)' of each design column the Kandinsky fits dropped, in the design's order."""
    names = design.design_names(
        sorted(set(task.obs["batch"].astype(str))),
        list(output.uns["classes"]),
        task.obsm["soft_groups"].shape[1],
        settings.groups,
    )
    return [f"{names[column]} ({weight:.1f})" for column, weight in sorted(dropped.items())]


def groups_note(small: dict[str, dict[str, list[str]]], dropped: dict[str, list[str]], settings: Settings) -> str:
    """One line naming, per scenario, the groups too small to calibrate (Mondrian, class-conditional) and those
    the Kandinsky fits dropped from their design ('' when there are none)."""

    def listed(by_procedure: dict[str, list[str]]) -> str:
        by_names: dict[tuple[str, ...], list[str]] = {}
        for procedure, names in by_procedure.items():
            if names:
                by_names.setdefault(tuple(names), []).append(procedure)
        return "; ".join(f"{', '.join(procedures)}: {', '.join(names)}" for names, procedures in by_names.items())

    parts = []
    if any(names for of_scenario in small.values() for names in of_scenario.values()):
        parts.append(
            f"groups with less than 1/α − 1 = {1 / settings.alpha - 1:g} calibration cells' weight, too few "
            f"to calibrate at α = {settings.alpha:g}, in every set: "
            + " | ".join(
                f"{scenario} — {listed(of_scenario)}" for scenario, of_scenario in small.items() if listed(of_scenario)
            )
        )
    kandinsky = [procedure for procedure in settings.procedures if procedure in KANDINSKY_FITS]
    if kandinsky and any(dropped.values()):
        parts.append(
            f"dropped from the design of {', '.join(kandinsky)} (less than {settings.min_weight:g} "
            "calibration cells' weight, so no guarantee): "
            + " | ".join(f"{scenario} — {', '.join(names)}" for scenario, names in dropped.items() if names)
        )
    return ". ".join(parts)


def split_masks(task) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, query) cells of the task's random split."""
    split = task.obs["split"].astype(str).to_numpy()
    return split == "calibration", split == "query"


def train_cells(task) -> np.ndarray:
    """The random split's train cells: what the Kandinsky design is chosen on (``procedure_sets``' ``sizing``)."""
    return task.obs["split"].astype(str).to_numpy() == "train"


def query_groupings(task, query: np.ndarray) -> dict[str, np.ndarray]:
    """The query cells' group of each grouping coverage is reported by: batch, type and batch × type."""
    batch = task.obs["batch"].astype(str).to_numpy()[query]
    label = task.obs["label"].astype(str).to_numpy()[query]
    return {"batch": batch, "type": label, "batch_type": np.char.add(np.char.add(batch, " × "), label)}


def random_split(task, output, settings: Settings) -> tuple[Scenario, np.ndarray, np.ndarray]:
    """(the sets of every procedure, query truth, query mask) of the random-split scenario of one output."""
    truth, batch, soft = task_arrays(task, output)
    calibration, query = split_masks(task)
    proba = np.asarray(output.obsm["proba_random"], dtype=np.float64)
    draws = scenario_randomisation(task, RANDOM_SPLIT, calibration, query, truth, proba.shape[1], settings)
    scenario = procedure_sets(
        proba,
        truth,
        batch,
        soft,
        calibration,
        query,
        settings.alpha,
        settings.groups,
        settings.procedures,
        settings.min_weight,
        draws,
        train_cells(task),
    )
    return scenario, truth[query], query


def task_arrays(task, output) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class index of each cell in the output's class order, batch codes, soft group memberships)."""
    classes = list(output.uns["classes"])
    index = {label: i for i, label in enumerate(classes)}
    truth = np.array([index[label] for label in task.obs["label"].astype(str)])
    return truth, codes(task.obs["batch"]), np.asarray(task.obsm["soft_groups"], dtype=np.float64)


def random_split_scores(task, output, settings: Settings) -> tuple[dict[str, float], Scenario]:

    scenario, truth, query = random_split(task, output, settings)
    groupings = query_groupings(task, query)
    n_classes = len(output.uns["classes"])
    scores = point_metrics(np.asarray(output.obsm["proba_random"])[query], truth, n_classes)
    for procedure, procedure_set in scenario.sets.items():
        scores |= {f"{procedure}_{name}": value for name, value in set_metrics(procedure_set, truth).items()}
        for name, members in groupings.items():
            scores[f"{procedure}_worst_{name}"] = worst_coverage(procedure_set, truth, members, settings.min_cells)
        scores[f"{procedure}_max_shortfall"] = max_shortfall(
            procedure_set, truth, list(groupings.values()), settings.alpha, settings.min_cells
        )
        filled = set_metrics(no_empty_sets(procedure_set, np.asarray(output.obsm["proba_random"])[query]), truth)
        scores |= {f"{procedure}_no_empty_{name}": filled[name] for name in ("coverage", "set_size")}
    return scores, scenario


def rule_scores(task, output) -> dict[str, float]:
    """Each classifier's own rules (``track.RULES``) on the random split's query cells and, pooled, on every cell of
    each left-out batch under the fit that never saw it: ``<rule>_<metric>`` and ``<rule>_label_free_<metric>``
    (``metrics.rule_metrics``). CellTypist's rules (``best_match``, ``prob_match``) only where the output keeps its
    raw sigmoids (``sigmoid_<fit>``): they read the sigmoids, not the normalised probabilities."""
    truth, _, _ = task_arrays(task, output)
    _, query = split_masks(task)
    batch = codes(task.obs["batch"])
    rules = {"confident": ("proba", confident_answers)}
    if "sigmoid_random" in output.obsm:
        rules["best_match"] = ("sigmoid", confident_answers)  # the top type where its sigmoid reaches 0.5
        rules["prob_match"] = ("sigmoid", celltypist.prob_match)
    scores = {}
    for rule, (kind, answer) in rules.items():
        random = answer(np.asarray(output.obsm[f"{kind}_random"], dtype=np.float64)[query])
        scores |= {f"{rule}_{name}": value for name, value in rule_metrics(random, truth[query]).items()}
        left_out = [
            answer(np.asarray(output.obsm[f"{kind}_without_{b}"], dtype=np.float64)[batch == b])
            for b in range(batch.max() + 1)
        ]
        pooled = rule_metrics(np.vstack(left_out), np.concatenate([truth[batch == b] for b in range(len(left_out))]))
        scores |= {f"{rule}_label_free_{name}": value for name, value in pooled.items()}
    return scores


def no_empty_sets(sets: np.ndarray, proba: np.ndarray) -> np.ndarray:
    """``sets`` with the top label (largest probability, the first on ties) added to each empty one: the
    ``no_empty_sets`` option. Coverage can only grow, and the set of a cell that had one is unchanged."""
    filled = np.array(sets, dtype=bool, copy=True)
    empty = ~filled.any(axis=1)
    filled[np.flatnonzero(empty), np.asarray(proba)[empty].argmax(axis=1)] = True
    return filled


def new_batch_calibration(task, held_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, query) of the new-batch scenario for the held-out batch code: the other batches'
    calibration cells plus the new batch's labelled share; its unlabelled cells."""
    others, new = label_free_calibration(task, held_out)
    labelled = task.obs["new_batch_labelled"].to_numpy(dtype=bool)
    return others | (new & labelled), new & ~labelled


@dataclass(frozen=True)
class LeftOut:
    """Each batch left out in turn: per procedure the coverage and set size of each left-out batch's query cells,
    each batch's scenario by its name, and the query cells' probabilities and truth (batches in sorted order)."""

    covered: dict[str, list[np.ndarray]]
    sizes: dict[str, list[np.ndarray]]
    scenarios: dict[str, Scenario]
    probabilities: list[np.ndarray]
    truths: list[np.ndarray]

    def pooled(self, procedures: tuple[str, ...], prefix: str) -> dict[str, float]:
        """Coverage and set size pooled over the left-out batches, and the worst batch's coverage, of each procedure
        that built sets for every batch (``<procedure>_<prefix>_coverage``, ``_worst``, ``_set_size``)."""
        failed = {procedure for scenario in self.scenarios.values() for procedure in scenario.failed}
        scores = {}
        for procedure in procedures:
            if procedure in failed or not self.covered.get(procedure):
                continue
            scores[f"{procedure}_{prefix}_coverage"] = float(np.concatenate(self.covered[procedure]).mean())
            scores[f"{procedure}_{prefix}_worst"] = float(min(part.mean() for part in self.covered[procedure]))
            scores[f"{procedure}_{prefix}_set_size"] = float(np.concatenate(self.sizes[procedure]).mean())
        return scores


def leave_each_batch_out(
    task, output, settings: Settings, masks, batch: np.ndarray, procedures: tuple[str, ...], scenario: str
) -> LeftOut:
    """For each batch in turn, the classifier that never saw it (``proba_without_<i>``) and the sets of
    ``procedures`` on ``masks(task, i)`` = (calibration, query) cells; ``batch`` the codes Kandinsky's design and
    Mondrian see; ``scenario`` names it in the randomised fit's cell keys ('<scenario> <batch name>')."""
    truth, _, soft = task_arrays(task, output)
    left = LeftOut({procedure: [] for procedure in procedures}, {procedure: [] for procedure in procedures}, {}, [], [])
    for held_out, name in enumerate(sorted(set(task.obs["batch"].astype(str)))):
        proba = np.asarray(output.obsm[f"proba_without_{held_out}"], dtype=np.float64)
        calibration, query = masks(task, held_out)
        draws = scenario_randomisation(task, f"{scenario} {name}", calibration, query, truth, proba.shape[1], settings)
        sets = procedure_sets(
            proba,
            truth,
            batch,
            soft,
            calibration,
            query,
            settings.alpha,
            settings.groups,
            procedures,
            settings.min_weight,
            draws,
            train_cells(task) & (codes(task.obs["batch"]) != held_out),
        )
        left.scenarios[name] = sets
        for procedure, procedure_set in sets.sets.items():
            left.covered[procedure].append(procedure_set[np.arange(query.sum()), truth[query]])
            left.sizes[procedure].append(procedure_set.sum(axis=1))
        left.probabilities.append(proba[query])
        left.truths.append(truth[query])
    return left


def new_batch_scores(task, output, settings: Settings) -> tuple[dict[str, float], dict[str, Scenario]]:
    """Leave each batch out in turn: pooled coverage and set size on its unlabelled cells, worst batch; and each
    new batch's scenario by its name. A procedure that fails on any batch has no new-batch scores."""

    left = leave_each_batch_out(
        task, output, settings, new_batch_calibration, codes(task.obs["batch"]), settings.procedures, "new batch"
    )
    point = point_metrics(np.vstack(left.probabilities), np.concatenate(left.truths), len(output.uns["classes"]))
    scores = {f"{name}_new_batch": value for name, value in point.items()}
    return scores | left.pooled(settings.procedures, "new_batch"), left.scenarios


LABEL_FREE = "label-free new batch"  # the scenario's name in notes and in the randomised fit's cell keys


def label_free_scores(task, output, settings: Settings) -> tuple[dict[str, float], dict[str, Scenario]]:
    """Leave each batch out with no cell of it labelled: the classifier that never saw it (``proba_without_<i>``),
    sets calibrated on the other batches' calibration cells alone and measured on every cell of the new batch — what
    ``celldag annotate`` gives a lab's batch. Every batch is one (the constant of Kandinsky's design, as in
    ``celldag annotate``): the new batch's own column would have no calibration weight. Mondrian by batch does not
    apply (``NOT_LABEL_FREE``)."""
    procedures = procedures_of(LABEL_FREE, settings.procedures)
    left = leave_each_batch_out(
        task, output, settings, label_free_calibration, np.zeros(task.n_obs, dtype=int), procedures, LABEL_FREE
    )
    return left.pooled(procedures, "label_free"), left.scenarios


def label_free_calibration(task, held_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(calibration, query) of the label-free new batch: the other batches' calibration cells; every new-batch cell."""
    new = codes(task.obs["batch"]) == held_out
    return ~new & (task.obs["split"].astype(str).to_numpy() == "calibration"), new


def shift_verdicts(task, output, level: float = shift.LEVEL) -> tuple[dict[str, float], str]:
    """Per left-out batch, the shift test of ``celldag annotate`` under the classifier that never saw it, against the
    other batches' calibration cells: on the own-label scores of its labelled share (the new-batch scenario), and
    label-free on the best-label scores of all its cells; Holm over batches, each test apart. Returns
    ({new_batch_shifted, label_free_shifted}: batches called shifted, a note part that lists them with the run and
    their adjusted p per test — '' when none is — in the form the leaderboard tabulates by scenario)."""
    truth, _, _ = task_arrays(task, output)
    labelled = task.obs["new_batch_labelled"].to_numpy(dtype=bool)
    names = sorted(set(task.obs["batch"].astype(str)))
    raw: dict[str, list[float]] = {SHIFT_LABELLED: [], SHIFT_LABEL_FREE: []}
    for held_out in range(len(names)):
        proba = np.asarray(output.obsm[f"proba_without_{held_out}"], dtype=np.float64)
        calibration, new = label_free_calibration(task, held_out)
        true = conformal.true_scores(conformal.lac_scores(proba), truth)
        top = shift.top_scores(proba)
        share = new & labelled
        enough = np.count_nonzero(share) >= shift.MIN_CELLS
        raw[SHIFT_LABELLED].append(shift.larger_p(true[calibration], true[share])[1] if enough else np.nan)
        testable = np.count_nonzero(new) >= shift.MIN_CELLS
        raw[SHIFT_LABEL_FREE].append(shift.larger_p(top[calibration], top[new])[1] if testable else np.nan)
    run = f"{output.uns['method_id']} on {output.uns['variant']}"
    scores, listed, untested = {}, [], ""
    for scenario, metric in ((SHIFT_LABELLED, "new_batch_shifted"), (SHIFT_LABEL_FREE, "label_free_shifted")):
        p = np.asarray(raw[scenario])
        if scenario == SHIFT_LABELLED and np.isnan(p).any():  # the labelled test is made for every batch or none
            untested = (
                "the shift test of the labelled share is not made: a batch has fewer than "
                f"{shift.MIN_CELLS} labelled cells"
            )
            continue
        small = [name for name, value in zip(names, p) if np.isnan(value)]
        if small:
            untested = ". ".join(
                part
                for part in (
                    untested,
                    f"{shift.TOO_SMALL} (fewer than {shift.MIN_CELLS} cells), label-free: {', '.join(small)}",
                )
                if part
            )
        adjusted = shift.holm_tested(list(p))
        scores[metric] = float(np.count_nonzero(adjusted <= level))
        shifted = [f"{name} (p = {a:.2g})" for name, a in zip(names, adjusted) if a <= level]
        if shifted:
            listed.append(f"{scenario} — {run}: {', '.join(shifted)}")
    part = f"batches called shifted by the shift test, Holm over batches: {' | '.join(listed)}" if listed else ""
    return scores, ". ".join(text for text in (part, untested) if text)


SHIFT_LABELLED, SHIFT_LABEL_FREE = "new batch, its labelled share", "label-free new batch, all its cells"


def held_out_type_scores(
    task, output, embedding, alpha: float, distances: dict[int, np.ndarray] | None = None
) -> tuple[dict[str, float], str]:
    """Unknown types: each held-out type's fit (``proba_without_type_<j>``, trained without type j) and the rule of
    ``celldag annotate`` (``novelty_tests`` at level α: the 10th-nearest-train-cell distance in ``embedding`` or the
    classifier's doubt, calibrated on the random split's calibration cells of the other types). Detection: the
    share of type j's query cells flagged, pooled over the held-out types; false flags: the share of the other
    types' query cells flagged, pooled likewise. Nothing is drawn at random. ``distances``: {j: each cell's novelty
    distance without type j's train cells}, filled as computed — the classifiers of one embedding share them.
    Returns (scores, note)."""
    classes = list(output.uns["classes"])
    held_out = {
        int(key.removeprefix(f"proba_{HELD_OUT_TYPE_FIT}")): key
        for key in output.obsm
        if key.startswith(f"proba_{HELD_OUT_TYPE_FIT}")
    }
    if not held_out or embedding is None:
        why = "no held-out-type fit in the output" if not held_out else "no embedding given to the scorer"
        return {}, f"unknown types not scored: {why}"
    labels = task.obs["label"].astype(str).to_numpy()
    split = task.obs["split"].astype(str).to_numpy()
    distances = {} if distances is None else distances
    query = split == "query"
    detected, false_flags = [], []
    for j, key in sorted(held_out.items()):
        known = labels != classes[j]
        if j not in distances:
            distances[j] = novelty_distances(np.asarray(embedding.X), (split == "train") & known)
        flagged = (
            novelty_tests(
                distances[j],
                shift.top_scores(np.asarray(output.obsm[key], dtype=np.float64)),
                (split == "calibration") & known,
                alpha,
            )
            != ""
        )
        detected.append(flagged[query & ~known])
        false_flags.append(flagged[query & known])
    scores = {
        "unknown_type_detection": float(np.concatenate(detected).mean()),
        "unknown_type_false_flags": float(np.concatenate(false_flags).mean()),
    }
    saw = "was fitted on every cell, theirs included" if embedding.uns.get("transductive", True) else "did not see them"
    note = f"unknown types held out in turn: {', '.join(classes[j] for j in sorted(held_out))} (the embedding {saw})"
    return scores, note


def permuted_scores(task, output, alpha: float, seed: int) -> dict[str, float]:
    """Split conformal (LAC) calibrated on a seeded permutation of the calibration labels."""

    truth, _, _ = task_arrays(task, output)
    calibration, query = split_masks(task)
    lac = conformal.lac_scores(np.asarray(output.obsm["proba_random"], dtype=np.float64))
    permuted = np.random.default_rng([PERMUTATION_STREAM, seed]).permutation(truth[calibration])
    sets = conformal.split_sets(conformal.true_scores(lac[calibration], permuted), lac[query], alpha)
    measured = set_metrics(sets, truth[query])
    return {"permuted_coverage": measured["coverage"], "permuted_set_size": measured["set_size"]}


def procedure_metrics(procedure: str) -> list[str]:
    """The metrics of ``procedure`` that its sets make (failed together when it fails)."""
    label_free = () if procedure in NOT_LABEL_FREE else LABEL_FREE_METRICS
    return [f"{procedure}_{name}" for name in SET_METRICS + NEW_BATCH_METRICS + label_free + NO_EMPTY_METRICS]


def score_seed(task, outputs: list, context: ScoringContext) -> list[dict]:
    """One {metric: value} per output of one seed (empty for runs that are not ``ok``).

    A procedure that fails in a scenario fails alone: its set metrics are returned under ``SCORE_FAILED``
    ({metric: reason}, one line naming the procedure, the run, the seed and the scenario) and every other procedure
    and the classifier's metrics are scored. The Kandinsky fits count their unverified programs
    (``<p>_unverified``) and the design groups they dropped (``<p>_dropped_groups``); a ``note`` names the
    dropped groups, the groups too small to calibrate and any failure."""
    settings = Settings.of(context.evaluation)
    scores: list[dict] = [{} for _ in outputs]
    novelty_of: dict[str, dict[int, np.ndarray]] = {}  # upstream run → held-out type → novelty distances
    for i, output in enumerate(outputs):
        if output.uns["status"] != "ok":
            continue
        run = f"{output.uns['dataset_id']} {output.uns['method_id']} on {output.uns['variant']} seed {context.seed}"
        random, random_scenario = random_split_scores(task, output, settings)
        new_batch, new_scenarios = new_batch_scores(task, output, settings)
        label_free, free_scenarios = label_free_scores(task, output, settings)
        shifted, shift_note = shift_verdicts(task, output)
        unknown, unknown_note = held_out_type_scores(
            task,
            output,
            embedding_of(context, output),
            settings.alpha,
            novelty_of.setdefault(output.uns["variant"], {}),
        )
        scenarios = (
            {RANDOM_SPLIT: random_scenario}
            | {f"new batch {name}": s for name, s in new_scenarios.items()}
            | {f"{LABEL_FREE} {name}": s for name, s in free_scenarios.items()}
        )
        scores[i] = (
            random
            | new_batch
            | label_free
            | shifted
            | unknown
            | rule_scores(task, output)
            | permuted_scores(task, output, settings.alpha, context.seed)
        )
        reasons: dict[str, str] = {}
        for scenario_name, scenario in scenarios.items():
            for procedure, reason in scenario.failed.items():
                reasons.setdefault(procedure, f"{run}, {scenario_name}: {reason}")
        failed = {metric: reason for procedure, reason in reasons.items() for metric in procedure_metrics(procedure)}
        for metric in failed:
            scores[i].pop(metric, None)
        if failed:
            scores[i][SCORE_FAILED] = failed
        for procedure in settings.procedures:
            if procedure in KANDINSKY_FITS:
                scores[i][f"{procedure}_unverified"] = float(sum(s.unverified[procedure] for s in scenarios.values()))
                scores[i][f"{procedure}_dropped_groups"] = float(len(random_scenario.dropped))
        small = {
            name: small_groups(
                task, output, calibration_of(task, name), settings.alpha, procedures_of(name, settings.procedures)
            )
            for name in scenarios
        }
        scores[i] |= {
            f"{procedure}_small_groups": float(len(names)) for procedure, names in small[RANDOM_SPLIT].items()
        }
        pooled_part = ""
        if POOLED in settings.procedures:
            pooled, pooled_enough = pooled_types(task, output, split_masks(task)[0], settings.alpha)
            scores[i][f"{POOLED}_pooled_types"] = float(len(pooled))
            pooled_part = pooled_note(pooled, pooled_enough, settings)
        dropped = {
            name: dropped_names(task, output, scenario.dropped, settings) for name, scenario in scenarios.items()
        }
        note = ". ".join(
            part
            for part in (
                groups_note(small, dropped, settings),
                pooled_part,
                training_conditional_note(task, settings),
                shift_note,
                unknown_note,
                *(f"{procedure} failed: {reason}" for procedure, reason in reasons.items()),
            )
            if part
        )
        if note:
            scores[i]["note"] = note
    return scores


def calibration_of(task, scenario: str) -> np.ndarray:
    """The calibration cells of a scenario by its name (``RANDOM_SPLIT``, 'new batch <name>' or
    '``LABEL_FREE`` <name>')."""
    if scenario == RANDOM_SPLIT:
        return split_masks(task)[0]
    batch_names = sorted(set(task.obs["batch"].astype(str)))
    if scenario.startswith(LABEL_FREE):
        return label_free_calibration(task, batch_names.index(scenario.removeprefix(f"{LABEL_FREE} ")))[0]
    return new_batch_calibration(task, batch_names.index(scenario.removeprefix("new batch ")))[0]


def procedures_of(scenario: str, procedures: tuple[str, ...]) -> tuple[str, ...]:
    """The procedures a scenario builds sets by: all, but those that do not apply to a label-free new batch there."""
    if scenario.startswith(LABEL_FREE):
        return tuple(procedure for procedure in procedures if procedure not in NOT_LABEL_FREE)
    return procedures


def embedding_of(context: ScoringContext, output):
    """The chained input the output's classifier ran on (same upstream run: the output's ``variant``), or None."""
    matching = [chained for chained in context.chained_inputs if chained.uns.get("upstream") == output.uns["variant"]]
    if len(matching) > 1:
        raise ValueError(
            f"{len(matching)} chained inputs of upstream run {output.uns['variant']!r}, seed {context.seed}"
        )
    return matching[0] if matching else None
