"""Annotate a lab's unlabelled cells from a labelled reference: sets, unknown types and a shift verdict per batch.

The arrays of ``celldag annotate`` (``celldag.annotate`` reads and writes the files). The classifier has given
probabilities for every reference and query cell, trained on the reference's train cells; here

- the sets of one conformal procedure are calibrated on the reference's calibration cells and built for the
  query cells and for the reference's held-out cells (whose labels give a check of the calibration itself);
- a cell is flagged **unknown type** when its class-conditional set at ``unknown_level`` (default α) is empty:
  every reference type's own calibration cells say the cell conforms less than all but that share of them, so for
  a cell of a known type the flag is raised with probability ≤ ``unknown_level`` whatever the types' proportions
  in the query (class-conditional coverage holds under any label shift). Where the classifier is right on nearly
  every cell, about that share of known cells is flagged: a lower level flags fewer, but a type needs
  (1 − level)/level calibration cells before any cell can be flagged at all. Apart from it, a cell whose set holds two or more types is **ambiguous** — several
  types fit, which is not the same as none;
- each query batch gets a shift test (``celldag.annotation.shift``): whether its cells conform less than the
  calibration cells did, the direction that breaks the sets' promise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celldag.annotation import conformal, shift
from celldag.annotation.label_shift import label_shift_sets, query_proportions
from celldag.annotation.scoring import ProcedureFailed, procedure_sets

# the procedures a query can be annotated with: the others need labels of the query's own batches (Mondrian by
# batch) or are the plain Kandinsky fit, which under-covers at a few hundred calibration cells (docs/annotation.md)
LABEL_SHIFT = "label_shift"  # weighted by the query's estimated type proportions (celldag.annotation.label_shift)
PROCEDURES = ("class_conditional", "split_lac", "split_aps", "kandinsky_augmented", LABEL_SHIFT)
DEFAULT_PROCEDURE = "class_conditional"
# the query's batches have no calibration cells, so Kandinsky's groups are the candidate type and soft groups, beside
# one batch that holds every cell: the constant, which always enters the design (``design.sized_columns``), so that
# marginal coverage keeps its guarantee however many light groups are dropped
QUERY_KANDINSKY_GROUPS = ("batch", "type", "soft")
UNKNOWN, AMBIGUOUS, EMPTY = "unknown type", "ambiguous", "no type"


@dataclass(frozen=True)
class QueryAnnotation:
    """What ``annotate_query`` finds, query cells in the order given."""

    sets: np.ndarray  # (m, K) bool: the procedure's set of each query cell, columns in ``classes``
    unknown: np.ndarray  # (m,) bool: the class-conditional set at the unknown level is empty
    calls: np.ndarray  # (m,) str: the one type of the set, AMBIGUOUS, UNKNOWN or EMPTY
    tests: list[shift.ShiftTest]  # one per query batch
    held_out_coverage: float  # on the reference's held-out cells: the calibration's own check
    held_out_set_size: float
    held_out_unknown: float  # share of held-out reference cells (all of known types) flagged unknown: ≤ α + noise
    query_labelled_coverage: dict[str, float]  # batch → coverage of its labelled cells (batches with any)
    query_proportions: dict[str, float]  # label_shift: the query's type proportions estimated from its cells
    uncalibrated: tuple[str, ...]  # types with too few calibration cells for a finite threshold at the unknown
    #                                level: in every such set, so that no cell can be flagged unknown while one exists


def cell_calls(sets: np.ndarray, unknown: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """(m,) str: the type of a single-type set, AMBIGUOUS for a larger one, UNKNOWN where no class-conditional
    threshold admits any type, EMPTY for an empty set of another procedure (a randomised fit's)."""
    sizes = sets.sum(axis=1)
    single = np.asarray(classes, dtype=object)[sets.argmax(axis=1)]
    calls = np.where(sizes == 1, single, np.where(sizes > 1, AMBIGUOUS, EMPTY)).astype(object)
    calls[unknown] = UNKNOWN
    return calls.astype(str)


def weighted_sets(proba: np.ndarray, lac: np.ndarray, truth: np.ndarray, calibration: np.ndarray, rows: np.ndarray,
                  alpha: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(sets of ``rows``, their estimated type proportions): label-shift-weighted sets of one query."""
    n_classes = proba.shape[1]
    if not rows.any():
        return np.zeros((0, n_classes), dtype=bool), np.full(n_classes, np.nan)
    estimate = query_proportions(proba[calibration], truth[calibration], proba[rows])
    cal_true = conformal.true_scores(lac[calibration], truth[calibration])
    return label_shift_sets(cal_true, truth[calibration], lac[rows], estimate, alpha), estimate


def annotate_query(proba: np.ndarray, reference_labels: np.ndarray, reference_split: np.ndarray,
                   query_batch: np.ndarray, query_labels: np.ndarray | None, classes: tuple[str, ...],
                   alpha: float, procedure: str = DEFAULT_PROCEDURE, soft: np.ndarray | None = None,
                   level: float = shift.LEVEL, unknown_level: float | None = None) -> QueryAnnotation:  # fmt: skip
    """Sets, unknown-type flags, calls and shift tests of the query cells.

    ``proba`` (n_reference + m, K): the classifier's probabilities, reference cells first, columns in ``classes``;
    ``reference_labels`` and ``reference_split`` (train / calibration / query) per reference cell; ``query_labels``
    per query cell, '' where unlabelled (None: none labelled) — a labelled cell of a type the reference lacks is
    left out of the labelled test and of coverage; ``soft`` (n_reference + m, S) the soft-group memberships that
    ``kandinsky_augmented`` needs. The augmented fit is unrandomised: a lab's sets are a function of its data.
    """
    if procedure not in PROCEDURES:
        raise ValueError(f"procedure must be one of {', '.join(PROCEDURES)}, got {procedure!r}")
    proba = np.asarray(proba, dtype=np.float64)
    reference_labels = np.asarray(reference_labels).astype(str)
    n_reference, n_classes = reference_labels.size, len(classes)
    m = proba.shape[0] - n_reference
    query_batch = np.asarray(query_batch).astype(str)
    if proba.shape[1] != n_classes or m < 1 or query_batch.shape != (m,):
        raise ValueError(f"probabilities of shape {proba.shape} for {n_reference} reference cells, "
                         f"{query_batch.size} query cells and {n_classes} classes")  # fmt: skip
    index = {label: i for i, label in enumerate(classes)}
    query_labels = np.full(m, "", dtype=object) if query_labels is None else np.asarray(query_labels).astype(str)
    known = np.array([label in index for label in query_labels])
    truth = np.concatenate([[index[label] for label in reference_labels],
                            [index.get(label, 0) for label in query_labels]]).astype(int)  # fmt: skip
    split = np.concatenate([np.asarray(reference_split).astype(str), np.full(m, "lab query")])
    calibration, held_out, lab = split == "calibration", split == "query", split == "lab query"
    if np.count_nonzero(calibration) < 2:
        raise ValueError(f"the reference has {np.count_nonzero(calibration)} calibration cells; sets need 2+")
    # the held-out reference cells are queried beside the lab's: one calibration, two uses
    queried = held_out | lab
    lac = conformal.lac_scores(proba)
    cal_true = conformal.true_scores(lac[calibration], truth[calibration])
    if procedure == LABEL_SHIFT:  # each query weighted by its own estimated type proportions
        held_sets, _ = weighted_sets(proba, lac, truth, calibration, held_out, alpha)
        lab_sets, estimate = weighted_sets(proba, lac, truth, calibration, lab, alpha)
        proportions = dict(zip(classes, estimate.tolist(), strict=True))
    else:
        soft = np.zeros((n_reference + m, 1)) if soft is None else np.asarray(soft, dtype=np.float64)
        built = procedure_sets(proba, truth, np.zeros(n_reference + m, dtype=int), soft, calibration, queried, alpha,
                               QUERY_KANDINSKY_GROUPS, (procedure,))  # fmt: skip
        if built.failed:  # no other procedure's sets stand in for the one asked for
            raise ProcedureFailed("; ".join(built.failed.values()))
        held_sets, lab_sets = built.sets[procedure][held_out[queried]], built.sets[procedure][lab[queried]]
        proportions = {}
    unknown_level = alpha if unknown_level is None else unknown_level
    unknown_all = ~conformal.class_conditional_sets(cal_true, truth[calibration], lac, unknown_level).any(axis=1)
    query_true = np.where(known, lac[lab][np.arange(m), truth[lab]], np.nan)
    tests = shift.batch_tests(shift.top_scores(proba[calibration]), cal_true, shift.top_scores(proba[lab]),
                              query_true, query_batch, level)  # fmt: skip
    counts = np.bincount(truth[calibration], minlength=n_classes)
    uncalibrated = tuple(label for label, count in zip(classes, counts, strict=True)
                         if np.isinf(conformal.conformal_quantile(np.zeros(count), unknown_level)))  # fmt: skip
    held_truth = truth[held_out]
    covered = held_sets[np.arange(held_truth.size), held_truth]
    unknown = unknown_all[lab]
    lab_covered = lab_sets[np.arange(m), truth[lab]] & known
    labelled_coverage = {batch: float(lab_covered[(query_batch == batch) & known].mean())
                         for batch in np.unique(query_batch[known])}  # fmt: skip
    return QueryAnnotation(
        sets=lab_sets, unknown=unknown, calls=cell_calls(lab_sets, unknown, classes), tests=tests,
        held_out_coverage=float(covered.mean()) if covered.size else float("nan"),
        held_out_set_size=float(held_sets.sum(axis=1).mean()) if covered.size else float("nan"),
        held_out_unknown=float(unknown_all[held_out].mean()) if covered.size else float("nan"),
        query_labelled_coverage=labelled_coverage, uncalibrated=uncalibrated, query_proportions=proportions,
    )  # fmt: skip
