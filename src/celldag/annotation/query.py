"""Annotate a lab's unlabelled cells from a labelled reference: sets, unknown types and a shift verdict per batch.

The arrays of ``celldag annotate`` (``celldag.commands.annotate`` reads and writes the files). The classifier has given
probabilities for every reference and query cell, trained on the reference's train cells; here

- the sets of one conformal procedure are calibrated on the reference's calibration cells and built for the
  query cells and for the reference's held-out cells (whose labels give a check of the calibration itself);
- a cell is flagged **unknown type** when it is farther from the reference, or less fitting to every type, than
  nearly every calibration cell: its distance to its ``NOVELTY_NEIGHBOURS``-th nearest reference train cell in the
  embedding, or its best label's score 1 − max p(y | x), exceeds the conformal (1 − ``unknown_level``/2) quantile of
  the calibration cells' — so a query cell drawn like the calibration cells is flagged with probability ≤
  ``unknown_level`` (default α; the union of two tests at half the level each). Each test sees what the other
  misses: an embedding fitted on the reference can fold a new type onto known ones (the distance misses, the
  classifier's doubt does not), and a classifier can be sure of a cell far from every reference cell (the
  distance sees it). Both are calibrated over all calibration cells, so a rare type needs no calibration cells of
  its own; an empty class-conditional set, the other candidate, flags nothing while one type has fewer than
  (1 − α)/α calibration cells (``benchmarks/unknown_types.py``). Apart from it, a cell whose set holds two or more
  types is **ambiguous**: several types fit, which is not the same as none;
- each query batch gets a shift test (``celldag.annotation.shift``): whether its cells conform less than the
  calibration cells did, the direction that breaks the sets' promise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celldag.annotation import conformal, shift
from celldag.annotation.label_shift import weighted_sets
from celldag.annotation.novelty import novelty_tests
from celldag.annotation.scoring import ProcedureFailed, no_empty_sets, procedure_sets

# the procedures a query can be annotated with: the others need labels of the query's own batches (Mondrian by
# batch) or are the plain Kandinsky fit, which under-covers at a few hundred calibration cells (docs/annotation.md)
LABEL_SHIFT = "label_shift"  # weighted by the query's estimated type proportions (celldag.annotation.label_shift)
PROCEDURES = (
    "class_conditional",
    "class_conditional_pooled",
    "split_lac",
    "split_aps",
    "kandinsky_augmented",
    LABEL_SHIFT,
)
APS = "split_aps"  # its empty sets are its most confident cells: called by their top type (``cell_calls``)
# chosen by measurement (issue 51; docs/annotation.md, "The default procedure", benchmarks/annotate_defaults.py): on
# the default run's label-free new batch it covers 0.917 at 1.97 labels where class_conditional gives 6.6 (a rare
# type enters every set), and it keeps marginal coverage when the query's type proportions differ from the reference's
DEFAULT_PROCEDURE = LABEL_SHIFT
# the query's batches have no calibration cells, so Kandinsky's groups are the candidate type and soft groups, beside
# one batch that holds every cell: the constant, which always enters the design (``design.sized_columns``), so that
# marginal coverage keeps its guarantee however many light groups are dropped
QUERY_KANDINSKY_GROUPS = ("batch", "type", "soft")
UNKNOWN, AMBIGUOUS, EMPTY = "unknown type", "ambiguous", "no type"


@dataclass(frozen=True)
class QueryAnnotation:
    """What ``annotate_query`` finds, query cells in the order given."""

    sets: np.ndarray  # (m, K) bool: the procedure's set of each query cell, columns in ``classes``
    unknown: np.ndarray  # (m,) bool: farther from the reference train cells than the calibration cells' quantile
    calls: np.ndarray  # (m,) str: the one type of the set, AMBIGUOUS, UNKNOWN or EMPTY
    tests: list[shift.ShiftTest]  # one per query batch
    held_out_coverage: float  # on the reference's held-out cells: the calibration's own check
    held_out_set_size: float
    held_out_unknown: float  # share of held-out reference cells (all of known types) flagged unknown: ≤ α + noise
    query_labelled_coverage: dict[str, float]  # batch → coverage of its labelled cells (batches with any)
    query_proportions: dict[str, float]  # label_shift: the query's type proportions estimated from its cells
    unknown_by: np.ndarray  # (m,) str: which test flagged the cell: "distance", "doubt", "both" or ""
    held_out_flagged: dict[str, float]  # test → share of held-out reference cells it flags (each ≤ level/2 by design)


def cell_calls(
    sets: np.ndarray, unknown: np.ndarray, classes: tuple[str, ...], confident_empty: np.ndarray | None = None
) -> np.ndarray:
    """(m,) str: the type of a single-type set, AMBIGUOUS for a larger one, EMPTY for an empty one, and UNKNOWN,
    whatever the set, where ``unknown`` flags the cell (``novelty_tests``).

    ``confident_empty`` (m,) the top type's index of each cell, for a procedure whose empty sets are its most
    confident cells (APS: S(x, top) = p_top, so a cell whose top probability exceeds the threshold has an empty
    set): such a cell is called by its top type, not EMPTY."""
    sizes = sets.sum(axis=1)
    names = np.asarray(classes, dtype=object)
    single = names[sets.argmax(axis=1)]
    empty = names[confident_empty] if confident_empty is not None else np.full(sizes.size, EMPTY, dtype=object)
    calls = np.where(sizes == 1, single, np.where(sizes > 1, AMBIGUOUS, empty)).astype(object)
    calls[unknown] = UNKNOWN
    return calls.astype(str)


def annotate_query(
    proba: np.ndarray,
    reference_labels: np.ndarray,
    reference_split: np.ndarray,
    query_batch: np.ndarray,
    query_labels: np.ndarray | None,
    classes: tuple[str, ...],
    alpha: float,
    procedure: str = DEFAULT_PROCEDURE,
    soft: np.ndarray | None = None,
    level: float = shift.LEVEL,
    unknown_level: float | None = None,
    distances: np.ndarray | None = None,
    no_empty: bool = False,
) -> QueryAnnotation:
    """Sets, unknown-type flags, calls and shift tests of the query cells.

    ``proba`` (n_reference + m, K): the classifier's probabilities, reference cells first, columns in ``classes``;
    ``reference_labels`` and ``reference_split`` (train / calibration / query) per reference cell; ``query_labels``
    per query cell, '' where unlabelled (None: none labelled) — a labelled cell of a type the reference lacks is
    left out of the labelled test and of coverage; ``soft`` (n_reference + m, S) the soft-group memberships that
    ``kandinsky_augmented`` needs; ``distances`` (n_reference + m,) each cell's ``novelty_distances`` (None: the
    unknown-type flag rests on the classifier's doubt alone); ``no_empty`` adds the top label to an empty set
    (``scoring.no_empty_sets``), so no cell is called EMPTY. The augmented fit is unrandomised: a lab's sets are a
    function of its data.
    """
    if procedure not in PROCEDURES:
        raise ValueError(f"procedure must be one of {', '.join(PROCEDURES)}, got {procedure!r}")
    proba = np.asarray(proba, dtype=np.float64)
    reference_labels = np.asarray(reference_labels).astype(str)
    n_reference, n_classes = reference_labels.size, len(classes)
    m = proba.shape[0] - n_reference
    query_batch = np.asarray(query_batch).astype(str)
    if proba.shape[1] != n_classes or m < 1 or query_batch.shape != (m,):
        raise ValueError(
            f"probabilities of shape {proba.shape} for {n_reference} reference cells, "
            f"{query_batch.size} query cells and {n_classes} classes"
        )
    index = {label: i for i, label in enumerate(classes)}
    query_labels = np.full(m, "", dtype=object) if query_labels is None else np.asarray(query_labels).astype(str)
    known = np.array([label in index for label in query_labels])
    truth = np.concatenate(
        [[index[label] for label in reference_labels], [index.get(label, 0) for label in query_labels]]
    ).astype(int)
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
        train = split == "train"
        built = procedure_sets(
            proba,
            truth,
            np.zeros(n_reference + m, dtype=int),
            soft,
            calibration,
            queried,
            alpha,
            QUERY_KANDINSKY_GROUPS,
            (procedure,),
            sizing=train,
        )
        if built.failed:  # no other procedure's sets stand in for the one asked for
            raise ProcedureFailed("; ".join(built.failed.values()))
        held_sets, lab_sets = built.sets[procedure][held_out[queried]], built.sets[procedure][lab[queried]]
        proportions = {}
    if no_empty:
        held_sets, lab_sets = no_empty_sets(held_sets, proba[held_out]), no_empty_sets(lab_sets, proba[lab])
    unknown_level = alpha if unknown_level is None else unknown_level
    unknown_by = novelty_tests(
        np.full(n_reference + m, np.inf) if distances is None else np.asarray(distances),
        shift.top_scores(proba),
        calibration,
        unknown_level,
    )
    unknown_all = unknown_by != ""
    query_true = np.where(known, lac[lab][np.arange(m), truth[lab]], np.nan)
    tests = shift.batch_tests(
        shift.top_scores(proba[calibration]), cal_true, shift.top_scores(proba[lab]), query_true, query_batch, level
    )
    held_truth = truth[held_out]
    covered = held_sets[np.arange(held_truth.size), held_truth]
    unknown = unknown_all[lab]
    lab_covered = lab_sets[np.arange(m), truth[lab]] & known
    labelled_coverage = {
        batch: float(lab_covered[(query_batch == batch) & known].mean()) for batch in np.unique(query_batch[known])
    }
    return QueryAnnotation(
        sets=lab_sets,
        unknown=unknown,
        tests=tests,
        calls=cell_calls(lab_sets, unknown, classes, proba[lab].argmax(axis=1) if procedure == APS else None),
        held_out_coverage=float(covered.mean()) if covered.size else float("nan"),
        held_out_set_size=float(held_sets.sum(axis=1).mean()) if covered.size else float("nan"),
        held_out_unknown=float(unknown_all[held_out].mean()) if covered.size else float("nan"),
        query_labelled_coverage=labelled_coverage,
        unknown_by=unknown_by[lab],
        held_out_flagged={
            test: float(np.isin(unknown_by[held_out], (test, "both")).mean()) if covered.size else float("nan")
            for test in ("distance", "doubt")
        },
        query_proportions=proportions,
    )
