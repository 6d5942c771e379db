"""CellTypist's model (Domínguez Conde et al. 2022), built from scikit-learn's pieces as CellTypist 1.7.1 builds it.

Training: log-normalised expression (log1p of counts per 10,000) of the training cells; genes no training cell
expresses are dropped; each gene is z-scored with the training cells' mean and standard deviation (sklearn's
``StandardScaler``) and clipped above at 10 (the values are non-negative log expression, so CellTypist clips one
tail); then one L2 logistic regression per type against all others (sklearn's ``OneVsRestClassifier`` around
``LogisticRegression``: CellTypist's ``multi_class='ovr'``, which the lock's scikit-learn no longer takes), lbfgs
below 50,000 cells and sag above, ``C`` 1 and CellTypist's iteration budget by size. Prediction: the query's genes
that the model knows, scaled with the model's mean and scale and clipped alike; each type's decision value, and its
sigmoid — one-vs-rest, so a cell's sigmoids need not sum to 1. CellTypist's rules: *best match* (the largest
decision value) and *prob match* (every type whose sigmoid exceeds 0.5; none = "Unassigned").

Model files are CellTypist's pickle (``{"Model": classifier, "Scaler_": scaler, "description": {...}}``), so
``celltypist.annotate`` reads what ``write_model`` writes and ``read_model`` reads CellTypist's published models.
A pickle can run any code when it is read; ``read_model`` unpickles with an allow-list of the classes a CellTypist
model holds (``MODEL_GLOBALS``: scikit-learn's logistic and SGD classifiers, its scaler, their loss objects and numpy
arrays), so a file naming anything else is refused before any of it is built.
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.special import expit

CLIP = 10.0  # CellTypist's upper bound on the z-scored expression
PROB_MATCH_THRESHOLD = 0.5  # CellTypist's p_thres of prob match
UNASSIGNED = "Unassigned"  # CellTypist's call for a cell whose prob-match set is empty
SAG_ABOVE = 50_000  # cells above which CellTypist trains with sag rather than lbfgs
DECISION_ROWS = 2048  # cells scaled and decided at a time (memory: this many rows of float64 genes)


# (module, name) of every global a CellTypist model file may name; a module ending in "." allows its every name (the
# compiled loss objects of scikit-learn's SGD models, whose class names follow the loss)
MODEL_GLOBALS = (
    ("sklearn.linear_model._logistic", "LogisticRegression"),
    ("sklearn.linear_model._stochastic_gradient", "SGDClassifier"),
    ("sklearn.preprocessing._data", "StandardScaler"),
    ("sklearn._loss._loss.", ""),
    ("sklearn.linear_model._sgd_fast.", ""),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
)


class ModelUnpickler(pickle.Unpickler):
    """Unpickles only what ``MODEL_GLOBALS`` allows: any other global stops the read (``pickle.UnpicklingError``)."""

    def find_class(self, module: str, name: str):
        if (module, name) in MODEL_GLOBALS or (f"{module}.", "") in MODEL_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a CellTypist model does not hold")


@dataclass(frozen=True)
class Model:
    """A fitted CellTypist model: per type (rows) a linear decision over the genes (columns) of the scaled values."""

    genes: np.ndarray  # (G,) str
    types: np.ndarray  # (K,) str, the rows of coef
    mean: np.ndarray  # (G,) float64; zeros for a model scaled without centring
    scale: np.ndarray  # (G,) float64
    coef: np.ndarray  # (K, G) float64
    intercept: np.ndarray  # (K,) float64
    description: dict = field(default_factory=dict)


def iteration_budget(n_cells: int) -> int:
    """CellTypist's default ``max_iter``: 1,000 below 50,000 cells, 500 below 500,000, else 200."""
    return 1000 if n_cells < 50_000 else 500 if n_cells < 500_000 else 200


def train(
    lognorm, labels: np.ndarray, genes, C: float = 1.0, max_iter: int | None = None, description: dict | None = None
) -> Model:
    """The model of ``labels`` (≥ 2 types) on ``lognorm`` (cells × ``genes``, dense or sparse); ``uns``-ready facts
    go in ``description`` (CellTypist's field) with ``converged``: whether every type's fit stopped before
    ``max_iter``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels).astype(str)
    types = np.unique(labels)
    if types.size < 2:
        raise ValueError(f"CellTypist's model needs two or more types among its training cells, got {types.tolist()}")
    # a dense copy of its own (CellTypist densifies too), scaled in place below
    values = lognorm.toarray().astype(np.float64) if sparse.issparse(lognorm) else np.array(lognorm, np.float64)
    expressed = values.sum(axis=0) != 0
    kept = np.asarray(genes).astype(str)[expressed]
    if not expressed.all():
        values = values[:, expressed]
    scaler = StandardScaler(copy=False).fit(values)
    scaled = np.minimum(scaler.transform(values), CLIP, out=values)  # cells × genes once, not three times
    budget = iteration_budget(values.shape[0]) if max_iter is None else int(max_iter)
    solver = "sag" if values.shape[0] > SAG_ABOVE else "lbfgs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded in the description instead
        fitted = OneVsRestClassifier(LogisticRegression(C=C, solver=solver, max_iter=budget)).fit(scaled, labels)
    binary = [(estimator.coef_[0], estimator.intercept_[0]) for estimator in fitted.estimators_]
    if types.size == 2:  # one estimator, for the second type; the first's decision is its negative
        ((weights, bias),) = binary
        binary = [(-weights, -bias), (weights, bias)]
    converged = all(int(np.max(estimator.n_iter_)) < budget for estimator in fitted.estimators_)
    return Model(
        genes=kept,
        types=types,
        mean=scaler.mean_.copy(),
        scale=scaler.scale_.copy(),
        coef=np.vstack([weights for weights, _ in binary]),
        intercept=np.array([bias for _, bias in binary], dtype=np.float64),
        description={
            **(description or {}),
            "C": float(C),
            "max_iter": budget,
            "solver": solver,
            "converged": converged,
        },
    )


def decision(model: Model, lognorm, genes) -> tuple[np.ndarray, int]:
    """(decision values (n, K), genes used): on the genes of ``lognorm`` the model knows, as CellTypist predicts —
    a model gene the data lack is left out of every decision (its term dropped)."""
    genes = np.asarray(genes).astype(str)
    position = pd.Index(model.genes).get_indexer(genes)
    known = position >= 0
    if not known.any():
        raise ValueError("no gene of the data is a gene of the CellTypist model (gene symbols are expected)")
    columns = position[known]
    mean, scale, weights = model.mean[columns], model.scale[columns], np.ascontiguousarray(model.coef[:, columns].T)
    decisions = np.empty((lognorm.shape[0], model.types.size))
    for start in range(0, lognorm.shape[0], DECISION_ROWS):  # in blocks of rows: a query of 10⁵ cells stays small
        rows = lognorm[start : start + DECISION_ROWS]
        block = np.asarray(rows.toarray() if sparse.issparse(rows) else rows, dtype=np.float64)[:, known]
        block -= mean
        block /= scale
        np.minimum(block, CLIP, out=block)
        decisions[start : start + DECISION_ROWS] = block @ weights + model.intercept
    return decisions, int(known.sum())


def sigmoids(decisions: np.ndarray) -> np.ndarray:
    """Each type's one-vs-rest probability: the sigmoid of its decision value (CellTypist's probability matrix)."""
    return expit(np.asarray(decisions, dtype=np.float64))


def normalised(sigmoid: np.ndarray) -> np.ndarray:
    """The sigmoids of each cell divided by their sum: a distribution over the types, in the order of the sigmoids
    (what the conformal procedures are calibrated on); a cell whose sigmoids all underflow gets uniform weights."""
    sigmoid = np.asarray(sigmoid, dtype=np.float64)
    total = sigmoid.sum(axis=1, keepdims=True)
    uniform = np.full_like(sigmoid, 1.0 / sigmoid.shape[1])
    return np.where(total > 0, sigmoid / np.where(total > 0, total, 1.0), uniform)


def prob_match(sigmoid: np.ndarray, threshold: float = PROB_MATCH_THRESHOLD) -> np.ndarray:
    """CellTypist's prob match: (n, K) bool, every type whose sigmoid exceeds ``threshold`` (an empty row:
    Unassigned)."""
    return np.asarray(sigmoid) > threshold


def write_model(model: Model, path: str | Path) -> None:
    """``model`` as a CellTypist model file (``celltypist.Model.load`` reads it)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    classifier = LogisticRegression(C=float(model.description.get("C", 1.0)))
    classifier.classes_ = np.asarray(model.types, dtype=object)
    classifier.coef_ = np.asarray(model.coef, dtype=np.float64)
    classifier.intercept_ = np.asarray(model.intercept, dtype=np.float64)
    classifier.n_features_in_ = len(model.genes)
    classifier.features = np.asarray(model.genes, dtype=object)  # CellTypist's attribute: the genes of the columns
    scaler = StandardScaler()
    scaler.mean_, scaler.scale_ = np.asarray(model.mean, dtype=np.float64), np.asarray(model.scale, dtype=np.float64)
    scaler.var_ = scaler.scale_**2
    scaler.n_features_in_ = len(model.genes)
    description = {**model.description, "number_celltypes": len(model.types)}
    with open(path, "wb") as handle:
        pickle.dump({"Model": classifier, "Scaler_": scaler, "description": description}, handle)


def read_model(path: str | Path) -> Model:
    """A CellTypist model file (``write_model``'s, or one of CellTypist's published models: logistic regression or
    SGD, either scaling), unpickled through ``ModelUnpickler``; raises ValueError naming the file and what is wrong."""
    with open(path, "rb") as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's warning on a pickle of another version: the fields are read
        try:
            content = ModelUnpickler(handle).load()
        except Exception as error:  # a pickle raises anything its objects' code raises
            raise ValueError(f"{path}: not a CellTypist model file ({type(error).__name__}: {error})") from error
    missing = [key for key in ("Model", "Scaler_") if not isinstance(content, dict) or key not in content]
    if missing:
        raise ValueError(f"{path}: not a CellTypist model file (no {missing[0]!r} entry)")
    classifier, scaler = content["Model"], content["Scaler_"]
    for owner, name, attribute in (
        (classifier, "Model", "coef_"),
        (classifier, "Model", "intercept_"),
        (classifier, "Model", "classes_"),
        (classifier, "Model", "features"),
        (scaler, "Scaler_", "scale_"),
    ):
        if not hasattr(owner, attribute):
            raise ValueError(f"{path}: {name} has no {attribute}")
    coef, intercept = np.asarray(classifier.coef_, dtype=np.float64), np.asarray(classifier.intercept_, np.float64)
    types = np.asarray(classifier.classes_).astype(str)
    if coef.shape[0] == 1 and types.size == 2:  # a binary model stores the second type's decision only
        coef, intercept = np.vstack([-coef, coef]), np.concatenate([-intercept, intercept])
    genes = np.asarray(classifier.features).astype(str)
    if coef.shape != (types.size, genes.size) or intercept.shape != (types.size,):
        raise ValueError(f"{path}: coef_ of shape {coef.shape} for {types.size} types and {genes.size} genes")
    with_mean = bool(getattr(scaler, "with_mean", True)) and getattr(scaler, "mean_", None) is not None
    mean = np.asarray(scaler.mean_, dtype=np.float64) if with_mean else np.zeros(genes.size)
    return Model(
        genes=genes,
        types=types,
        mean=mean,
        scale=np.asarray(scaler.scale_, dtype=np.float64),
        coef=coef,
        intercept=intercept,
        description=dict(content.get("description") or {}),
    )


@dataclass(frozen=True)
class LabelMap:
    """How a model's types become a reference's labels: ``columns[j]`` the model types (indices) of label j."""

    labels: tuple[str, ...]  # the reference's labels, sorted
    columns: tuple[tuple[int, ...], ...]  # per label, the model types mapped to it
    unmapped_types: tuple[str, ...]  # model types no label takes (their scores are dropped)
    labels_without_type: tuple[str, ...]  # reference labels no model type maps to (their score is 0)


def read_label_map(path: str | Path) -> dict[str, str]:
    """{model type: reference label} from a two-column TSV (header ``model_type``, ``label``); many-to-one."""
    table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    missing = [column for column in ("model_type", "label") if column not in table.columns]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r} (a TSV with columns model_type and label)")
    repeated = table["model_type"][table["model_type"].duplicated()].unique().tolist()
    if repeated:
        raise ValueError(f"{path}: model_type {repeated[0]!r} is mapped more than once")
    return dict(zip(table["model_type"], table["label"], strict=True))


def label_map(types, labels, mapping: dict[str, str] | None = None) -> LabelMap:
    """The map of model ``types`` onto the reference's ``labels``: through ``mapping`` (model type → label), or each
    type to the label of the same name."""
    types = [str(name) for name in types]
    labels = tuple(sorted({str(name) for name in labels}))
    target = {name: (mapping or {name: name for name in types}).get(name) for name in types}
    columns = tuple(tuple(j for j, name in enumerate(types) if target[name] == label) for label in labels)
    return LabelMap(
        labels=labels,
        columns=columns,
        unmapped_types=tuple(name for name in types if target[name] not in labels),
        labels_without_type=tuple(label for label, taken in zip(labels, columns) if not taken),
    )


def mapped_sigmoids(sigmoid: np.ndarray, mapped: LabelMap) -> np.ndarray:
    """(n, labels) sigmoids of the reference's labels: a label's is the largest of its model types' (a label is
    present when one of its types is, so prob match on the labels is prob match on the types, mapped); 0 for a label
    no type maps to."""
    sigmoid = np.asarray(sigmoid, dtype=np.float64)
    out = np.zeros((sigmoid.shape[0], len(mapped.labels)))
    for j, columns in enumerate(mapped.columns):
        if columns:
            out[:, j] = sigmoid[:, list(columns)].max(axis=1)
    return out
