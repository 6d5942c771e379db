"""The annotation track: cell-type labels transferred on a cell embedding, with calibrated prediction sets.

Chained on representation (``upstream``): a dataset listing ``annotation`` under ``chained`` gives every
representation run's embedding to every selected classifier. Per dataset seed one task
(``chain_task``): cells split by batch × label into train / calibration / query, a labelled share of
each batch (used when that batch is the new one), and soft groups — a Gaussian mixture's
memberships on the expression's principal components, the same for every embedding so worst-group
numbers compare. The classifiers return class probabilities for every fit (``AnnotationInput.fits``:
the random split, and one per held-out batch); the scorer builds conformal sets from them
(``celldag.annotation.scoring``). docs/annotation.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from celldag.annotation.task import (
    fit_masks,
    held_out_types,
    labelled_in_new_batch,
    principal_components,
    soft_groups,
    split_cells,
)
from celldag.contracts import ContractError
from celldag.tracks import Figure, Metric, MetricGroup, Track

if TYPE_CHECKING:
    from scipy import sparse

PROCEDURES = {  # id → what the leaderboard calls it; every one scores LAC = 1 − p(y|x) except split_aps
    "kandinsky_augmented": "Kandinsky groups, augmented fit (conditional calibration, Gibbs–Cherian–Candès)",
    "kandinsky_augmented_unrandomised": "Kandinsky groups, augmented fit, unrandomised (coverage ≥ 1 − α, no empty "
    "set drawn at random)",
    "kandinsky": "Kandinsky groups, the paper's plain fit",
    "split_lac": "split conformal, LAC",
    "split_aps": "split conformal, APS (non-randomised)",
    "class_conditional": "class-conditional",
    "class_conditional_pooled": "class-conditional, rare types pooled (types with too few calibration cells as one "
    "group)",
    "mondrian_batch": "Mondrian by batch",
    "label_shift": "label-shift weighted (the query's type proportions estimated from its unlabelled cells)",
}
HEADLINE = "kandinsky_augmented"  # its metrics sit beside accuracy in the track's first metric group
SET_METRICS = (
    "coverage",
    "worst_batch",
    "worst_type",
    "worst_batch_type",
    "max_shortfall",
    "set_size",
    "singletons",
    "empty",
    "singleton_errors",
)
# each classifier's own rule, scored on the same cells as the sets (scoring.rule_scores): the top type where its
# probability reaches 0.5 (every classifier; a lab's rule for imported probabilities), and CellTypist's best match
# with its confidence (the top sigmoid) at 0.5 and prob match (every type whose sigmoid exceeds 0.5) on the
# classifiers that keep raw sigmoids; random split and label-free batch
RULES = {
    "confident": "the top type at p ≥ 0.5",
    "best_match": "CellTypist's best match at σ ≥ 0.5",
    "prob_match": "CellTypist's prob match (every type with σ > 0.5)",
}
RULE_METRICS = ("coverage", "set_size", "unassigned", "singletons", "singleton_errors")
KANDINSKY_FITS = (
    "kandinsky_augmented",
    "kandinsky_augmented_unrandomised",
    "kandinsky",
)  # quantile-regression fits on a sized design (annotation.design)
GROUPED = ("class_conditional", "mondrian_batch")  # procedures that give groups too small to calibrate full sets
POOLED = "class_conditional_pooled"  # calibrates its rare types as one group (conformal.pooled_class_sets)
LOWER_IS_BETTER = (
    "max_shortfall",
    "set_size",
    "empty",
    "small_groups",
    "dropped_groups",
    "unverified",
    "shifted",
    "false_flags",
    "pooled_types",
    "errors",
    "unassigned",
)  # name endings
NEW_BATCH_METRICS = ("new_batch_coverage", "new_batch_worst", "new_batch_set_size")
# the label-free new batch: no cell of it labelled, calibrated on the other batches alone; Mondrian by batch has no
# calibration cell of the new batch, so it does not apply
LABEL_FREE_METRICS = ("label_free_coverage", "label_free_worst", "label_free_set_size")
NOT_LABEL_FREE = ("mondrian_batch",)
NO_EMPTY_METRICS = ("no_empty_coverage", "no_empty_set_size")  # random split, the top label added to an empty set
LOGNORM = "lognorm"  # the task's obsm of log-normalised expression (genes in uns['genes'])
HELD_OUT_TYPE_MIN_QUERY = 20  # query cells a type needs to be held out in turn (issue 44: a rate on ≥ 20 cells)
HELD_OUT_TYPE_FIT = "without_type_"  # + j: the fit that never saw type j (j its index among the sorted labels)
TASK_DEFAULTS = {"split": [0.5, 0.25, 0.25], "labelled_fraction": 0.1, "soft_groups": 4}
SCORING_DEFAULTS = {
    "alpha": 0.1,
    "min_group_cells": 10,
    "kandinsky_groups": ["batch", "type", "soft"],
    "kandinsky_min_weight": None,
    "kandinsky_randomised": True,
    "procedures": list(PROCEDURES),
}


# Each metric's role (celldag.tracks.ROLES), read from its name: a procedure's coverage — overall, worst group,
# new batch — is a guarantee of 1 − α, its shortfall one of 0, the unknown-type flag's false flags one of α; a
# classifier's own rule (RULES) promises nothing, so its coverage is ranked; sizes are efficiency; counts of what a
# procedure did (groups too small, batches called shifted) are diagnostics; accuracy and the rest are ranked.
# Efficiency and ranking are judged against the permuted-label classifier on PCA (the null: real features, the
# label–feature link broken) and logistic regression on the oracle embedding (one-hot types plus noise)
NULL = "permuted_labels/pca/default"
# a rule's coverage and errors rank how it answers when confident, which a permuted classifier rarely is: their floor is
# the majority type answered for every cell with certainty (an exploit battery case that beat the permuted null)
RULE_NULL = "majority/pca/default"
ORACLE = "logistic/oracle_embedding/default"
DIAGNOSTIC = ("small_groups", "pooled_types", "dropped_groups", "unverified", "shifted")
COVERAGE = ("coverage", "worst_batch", "worst_type", "worst_batch_type", "_worst")
EFFICIENCY = ("set_size", "singletons", "empty", "unassigned")


def role_of(name: str) -> tuple[str, str | None]:
    """(role, the guarantee's target or None) of an annotation metric, from its name."""
    if name.endswith(DIAGNOSTIC):
        return "diagnostic", None
    if name.endswith(EFFICIENCY):
        return "efficiency", None
    if is_rule_metric(name):
        return "ranking", None
    if name.endswith(COVERAGE):
        return "guarantee", "coverage"
    if name.endswith("max_shortfall"):
        return "guarantee", "shortfall"
    if name.endswith("false_flags"):
        return "guarantee", "error_rate"
    return "ranking", None


def is_rule_metric(name: str) -> bool:
    return name.startswith(tuple(f"{rule}_" for rule in RULES))


def _metric(name: str, core: bool = False) -> Metric:
    role, target = role_of(name)
    null = RULE_NULL if role == "ranking" and is_rule_metric(name) else NULL
    controls = {"null": null, "oracle": ORACLE} if role in ("efficiency", "ranking") else {}
    return Metric(
        name, higher_is_better=not name.endswith(LOWER_IS_BETTER), core=core, role=role, target=target, **controls
    )


def _procedure_metrics(procedure: str) -> tuple[Metric, ...]:
    """Its set metrics; for Mondrian and class-conditional ``small_groups`` (groups with too little calibration
    weight to be calibrated: in every set); for the pooled class-conditional ``pooled_types`` (types calibrated as
    one pooled group); for the Kandinsky fits ``dropped_groups`` (groups left out of the
    design, without a guarantee) and ``unverified`` (programs no attempt verified: any makes the fit's rows
    ``failed``). The leaderboard's note names the groups."""
    extra = (
        ("small_groups",)
        if procedure in GROUPED
        else ("pooled_types",)
        if procedure == POOLED
        else ("dropped_groups", "unverified")
        if procedure in KANDINSKY_FITS
        else ()
    )
    names = SET_METRICS + extra
    return tuple(_metric(f"{procedure}_{name}") for name in names)


TRACK = Track(
    x_dtype="float32",
    check_prepared="celldag.annotation.track:check_prepared",
    check_output="celldag.annotation.track:check_output",
    method_input="celldag.annotation.track:method_input",
    inputs={"genes": "log-normalised expression of genes: on the `expression` upstream only (obsm['lognorm'])"},
    scorer="celldag.annotation.scoring:score_seed",
    metric_groups=(
        MetricGroup(
            f"point labels and {PROCEDURES[HEADLINE]}",
            (
                _metric("accuracy", core=True),
                _metric("macro_f1", core=True),
                *_procedure_metrics(HEADLINE),
            ),
        ),
        *(
            MetricGroup(title, _procedure_metrics(procedure))
            for procedure, title in PROCEDURES.items()
            if procedure != HEADLINE
        ),
        MetricGroup(
            "new batch: classifier trained on the other batches, 10 % of the new one labelled",
            (
                _metric("accuracy_new_batch"),
                _metric("macro_f1_new_batch"),
                *(_metric(f"{procedure}_{name}") for procedure in PROCEDURES for name in NEW_BATCH_METRICS),
            ),
        ),
        MetricGroup(
            "label-free new batch: no cell of it labelled, calibrated on the other batches (Mondrian by batch does not "
            "apply); batches called shifted by the shift test, Holm over batches",
            (
                *(
                    _metric(f"{procedure}_{name}")
                    for procedure in PROCEDURES
                    if procedure not in NOT_LABEL_FREE
                    for name in LABEL_FREE_METRICS
                ),
                _metric("new_batch_shifted"),
                _metric("label_free_shifted"),
            ),
        ),
        MetricGroup(
            f"unknown types: each type with ≥ {HELD_OUT_TYPE_MIN_QUERY} query cells left out of training and "
            "calibration in turn (the embedding saw its cells)",
            (_metric("unknown_type_detection"), _metric("unknown_type_false_flags")),
        ),
        MetricGroup(
            "each classifier's own rule on the same cells: "
            + "; ".join(f"{rule}: {text}" for rule, text in RULES.items())
            + " (random split, then the label-free new batch)",
            tuple(
                _metric(f"{rule}_{scenario}{name}")
                for rule in RULES
                for scenario in ("", "label_free_")
                for name in RULE_METRICS
            ),
        ),
        MetricGroup(
            "no empty sets: the top label added to an empty set (random split)",
            tuple(_metric(f"{procedure}_{name}") for procedure in PROCEDURES for name in NO_EMPTY_METRICS),
        ),
        MetricGroup(
            "control: split conformal (LAC) calibrated on permuted labels",
            (_metric("permuted_coverage"), _metric("permuted_set_size")),
        ),
    ),
    dataset_facts="celldag.annotation.track:dataset_facts",
    figures=(
        Figure("coverage", "celldag.annotation.figures:coverage_by_group", "captions/coverage.rst", needs=("outputs",)),
        Figure("set_size", "celldag.annotation.figures:set_size_vs_coverage", "captions/sets.rst", needs=("scores",)),
        Figure("risk", "celldag.annotation.figures:risk_coverage", "captions/risk.rst", needs=("scores",)),
    ),
    upstream="representation",
    chain_task="celldag.annotation.track:chain_task",
    chain_input="celldag.annotation.track:chain_input",
    row_labels=("classifier", "embedding"),
)


@dataclass(frozen=True)
class AnnotationInput:
    """What a classifier's ``run`` receives: an embedding, the cells each fit may train on and those cells' labels
    alone. The task boundary is in the data, not in a promise: a fit is handed the labels of its own training cells
    and no other, so the calibration and query cells it is scored on carry no label a classifier could read
    (``fit_labels`` builds them from every cell's).

    Attributes:
        features: ``(n, d)`` float32: the cell embedding (or the prepared expression).
        labels: Fit → ``(cells of its mask,)`` str cell types of its training cells, in row order.
        batch: ``(n,)`` str: each cell's batch.
        classes: Sorted unique labels of the dataset: probability columns in this order.
        fits: Fit name → bool ``(n,)`` mask of the cells it trains on (``task.fit_masks``).
        names: Cell ids, one per row (``celldag.methods.imported`` matches a lab's file by them).
        expression: Log-normalised expression ``(n, genes)``, CSR, for a classifier that reads genes (CellTypist's
            model): given when the features are the prepared expression (the ``expression`` upstream) and by
            ``celldag annotate``; None otherwise.
        genes: The genes of ``expression``'s columns (empty without it).
    """

    features: np.ndarray
    labels: dict[str, np.ndarray]
    batch: np.ndarray
    classes: tuple[str, ...]
    fits: dict[str, np.ndarray]
    names: tuple[str, ...] = ()
    expression: sparse.csr_matrix | None = None
    genes: tuple[str, ...] = ()

    def __post_init__(self):
        for fit, mask in self.fits.items():
            cells = int(np.count_nonzero(mask))
            if fit not in self.labels or np.shape(self.labels[fit]) != (cells,):
                raise ValueError(f"fit {fit!r}: needs the labels of its {cells} training cells alone (fit_labels)")
        if set(self.labels) != set(self.fits):
            raise ValueError(
                f"labels for fits {sorted(set(self.labels) - set(self.fits))} that the input does not have"
            )

    def unmet(self, need: str) -> str | None:
        if need == "genes" and self.expression is None:
            return (
                "reads genes (log-normalised expression), so it runs on an upstream whose embedding is the "
                "expression itself (`expression`), not on a learned embedding"
            )
        return None


def fit_labels(labels, fits: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each fit's labels: those of the cells of its mask, in row order (``AnnotationInput.labels``)."""
    labels = np.asarray(labels).astype(str)
    return {fit: labels[np.asarray(mask, dtype=bool)] for fit, mask in fits.items()}


def method_input(prepared, work_dir: str | None, gene_table=None) -> AnnotationInput:
    """The fits: the random split's, one per held-out batch (``task.fit_masks``), then one per held-out type
    (``HELD_OUT_TYPE_FIT`` + the type's index among the sorted labels; ``task.held_out_types``) — last, so the
    others are trained as they were before the held-out-type scenario existed."""
    labels = prepared.obs["label"].astype(str).to_numpy()
    batch = prepared.obs["batch"].astype(str).to_numpy()
    split = prepared.obs["split"].astype(str).to_numpy()
    fits = fit_masks(split, batch)
    train = fits["random"]
    fits |= {
        f"{HELD_OUT_TYPE_FIT}{j}": train & (labels != name)
        for j, name in held_out_types(labels, split, HELD_OUT_TYPE_MIN_QUERY).items()
    }
    expression = prepared.obsm[LOGNORM] if LOGNORM in prepared.obsm else None  # sparse: the classifier densifies
    return AnnotationInput(
        features=np.asarray(prepared.X, dtype=np.float32),
        labels=fit_labels(labels, fits),
        batch=batch,
        classes=tuple(sorted(set(labels))),
        fits=fits,
        names=tuple(prepared.obs_names),
        expression=expression,
        genes=tuple(prepared.uns.get("genes", ())),
    )


def chain_task(prepared, params: dict, seed: int):
    """The annotation task of one upstream dataset seed: X = the expression's principal components (the
    covariates the soft groups are fitted on), obs label / batch / split / new_batch_labelled, obsm
    soft_groups and ``LOGNORM`` (the prepared log-normalised expression, its genes in uns['genes']: what a
    classifier that reads genes gets on the `expression` upstream). A function of the prepared dataset, the
    params and the seed only."""
    import anndata
    import pandas as pd

    params = TASK_DEFAULTS | params
    labels = prepared.obs["label"].astype(str).to_numpy()
    batch = prepared.obs["batch"].astype(str).to_numpy()
    expression = np.asarray(prepared.X.toarray() if hasattr(prepared.X, "toarray") else prepared.X, dtype=np.float32)
    components = principal_components(expression, seed)
    obs = pd.DataFrame(
        {
            "label": pd.Categorical(labels),
            "batch": pd.Categorical(batch),
            "split": pd.Categorical(split_cells(labels, batch, tuple(params["split"]), seed)),
            "new_batch_labelled": labelled_in_new_batch(labels, batch, params["labelled_fraction"], seed),
        },
        index=prepared.obs_names.copy(),
    )
    task = anndata.AnnData(X=components.astype(np.float32), obs=obs)
    task.obsm["soft_groups"] = soft_groups(components, int(params["soft_groups"]), seed)
    task.uns.update(
        dataset_id=prepared.uns["dataset_id"],
        track="annotation",
        seed=int(seed),
        task={key: params[key] for key in TASK_DEFAULTS},
    )
    if "lognorm" in prepared.layers:  # kept sparse: a dense copy would be cells × genes in every task file
        from scipy import sparse

        task.obsm[LOGNORM] = sparse.csr_matrix(prepared.layers["lognorm"], dtype=np.float32)
        task.uns["genes"] = list(prepared.var_names)
    return task


def chain_input(task, output, record: dict):
    """The task with the upstream run's cell embedding as X (the task's own X when the run is not ok).

    ``transductive``: the upstream method fitted its embedding on every cell of the dataset, query cells
    included (their features, never their labels) — its registry entry's ``transductive``, true unless
    the method says otherwise. The task's log-normalised expression stays only on an upstream whose
    embedding is the expression itself (its entry's ``embedding_is_expression``): a classifier that reads
    genes runs there alone, not once more per learned embedding with the same result."""
    import anndata

    features = np.asarray(output.obsm["X_emb"], dtype=np.float32) if output.uns["status"] == "ok" else task.X
    genes_here = bool(record["config"]["method"].get("embedding_is_expression", False))
    obsm = {key: value for key, value in task.obsm.items() if key != LOGNORM or genes_here}
    uns = {key: value for key, value in task.uns.items() if key != "genes" or genes_here}
    chained = anndata.AnnData(X=features, obs=task.obs.copy(), obsm=obsm, uns=uns)
    chained.uns["transductive"] = bool(record["config"]["method"].get("transductive", True))
    return chained


def check_prepared(adata, path: str) -> None:
    """label / batch / split (train, calibration, query), new_batch_labelled, soft_groups rows on the simplex."""
    for column in ("label", "batch", "split", "new_batch_labelled"):
        if column not in adata.obs:
            raise ContractError(path, f"obs['{column}']", "missing")
    unknown = set(adata.obs["split"].astype(str)) - {"train", "calibration", "query"}
    if unknown:
        raise ContractError(path, "obs['split']", f"unknown values {sorted(unknown)}")
    if adata.obs["batch"].nunique() < 2:
        raise ContractError(path, "obs['batch']", "the annotation track needs two or more batches")
    groups = np.asarray(adata.obsm.get("soft_groups", np.empty((0, 0))))
    if groups.shape[0] != adata.n_obs or not np.allclose(groups.sum(axis=1), 1, atol=1e-6) or (groups < 0).any():
        raise ContractError(path, "obsm['soft_groups']", "missing, or rows not non-negative summing to 1")


def check_output(adata, path: str) -> None:
    """One probability matrix per fit (obsm['proba_<fit>']), columns = uns['classes'], rows summing to 1."""
    classes = list(adata.uns.get("classes", []))
    keys = [key for key in adata.obsm if key.startswith("proba_")]
    if not classes or "proba_random" not in keys:
        raise ContractError(path, "obsm['proba_random']", "missing (or uns['classes'] missing)")
    for key in keys:
        proba = np.asarray(adata.obsm[key])
        if (
            proba.shape != (adata.n_obs, len(classes))
            or (proba < 0).any()
            or not np.allclose(proba.sum(axis=1), 1, atol=1e-6)
        ):
            raise ContractError(path, f"obsm['{key}']", f"must be ({adata.n_obs}, {len(classes)}) probabilities")


def dataset_facts(prepared, entry: dict) -> list[tuple[str, str]]:
    """What `celldag validate` says of a dataset the annotation track chains on."""
    n_labels, n_batches = prepared.obs["label"].nunique(), prepared.obs["batch"].nunique()
    return [
        (
            "annotation",
            f"{n_labels} cell types × {n_batches} batches"
            + ("" if n_batches > 1 else ": one batch, the annotation track needs two or more"),
        )
    ]
