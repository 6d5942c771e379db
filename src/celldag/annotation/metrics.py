"""Metrics of the annotation track: coverage and size of prediction sets, overall and per group; point accuracy.

Prediction sets are bool arrays (m, K) (``celldag.annotation.conformal``); ``truth`` holds the integer
class index of each query cell; a grouping is one label per query cell (batch, class, cluster). Per-group
coverage comes with a Clopper-Pearson interval, so a shortfall can be told from the noise of a small group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.metrics import f1_score

CONFIDENCE = 0.95  # of the Clopper-Pearson intervals of group_coverage


def set_metrics(sets: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """coverage (share of cells whose set holds the true label), set_size (mean), singletons and empty (shares), and
    singleton_errors: the share of cells answered with one type that is wrong (their error among the answered is
    singleton_errors / singletons — the risk at that coverage, beside a tool's own rule: ``rule_metrics``)."""
    sets, truth = _check(sets, truth)
    sizes = sets.sum(axis=1)
    covered = _covered(sets, truth)
    return {
        "coverage": float(covered.mean()),
        "set_size": float(sizes.mean()),
        "singletons": float((sizes == 1).mean()),
        "empty": float((sizes == 0).mean()),
        "singleton_errors": float(((sizes == 1) & ~covered).mean()),
    }


def rule_metrics(answers: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """A tool's own rule scored as sets are (``answers``: (m, K) bool, the types it answers per cell; none:
    Unassigned): coverage, types answered (mean), the share Unassigned, the share answered with one type and the share
    answered with one wrong type."""
    measured = set_metrics(answers, truth)
    return {
        "coverage": measured["coverage"],
        "set_size": measured["set_size"],
        "unassigned": measured["empty"],
        "singletons": measured["singletons"],
        "singleton_errors": measured["singleton_errors"],
    }


def confident_answers(proba: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """(m, K) bool: each cell's top type where its probability reaches ``threshold`` (the rule labs apply to a
    tool's probabilities), else nothing."""
    proba = np.asarray(proba, dtype=float)
    top = proba.argmax(axis=1)
    answers = np.zeros(proba.shape, dtype=bool)
    answers[np.arange(top.size), top] = proba[np.arange(top.size), top] >= threshold
    return answers


def group_coverage(sets: np.ndarray, truth: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    """One row per group, sorted by the group as str: group (str), n, covered, coverage, lower, upper.

    lower and upper bound the exact (Clopper-Pearson) 95 % interval of the group's coverage: it never
    undercovers, which matters for the small groups (rare cell types) the per-group view is about.
    """
    sets, truth = _check(sets, truth)
    groups = np.asarray(groups)
    if groups.shape != truth.shape:
        raise ValueError(f"groups must be (m,) like truth, got {groups.shape}")
    table = pd.DataFrame({"group": groups.astype(str), "covered": _covered(sets, truth).astype(int)})
    table = table.groupby("group", sort=True)["covered"].agg(n="size", covered="sum").reset_index()
    table["coverage"] = table["covered"] / table["n"]
    table["lower"], table["upper"] = clopper_pearson(table["covered"].to_numpy(), table["n"].to_numpy())
    return table[["group", "n", "covered", "coverage", "lower", "upper"]]


def clopper_pearson(successes: np.ndarray, trials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided CONFIDENCE interval of a binomial proportion, from beta quantiles.

    At 0 successes the lower end is exactly 0 and at n the upper end exactly 1 (the beta quantile there
    is undefined, its limit is the bound).
    """
    tail = (1 - CONFIDENCE) / 2
    lower = stats.beta.ppf(tail, successes, trials - successes + 1)
    upper = stats.beta.ppf(1 - tail, successes + 1, trials - successes)
    lower = np.where(successes == 0, 0.0, lower)
    upper = np.where(successes == trials, 1.0, upper)
    return lower, upper


def worst_coverage(sets: np.ndarray, truth: np.ndarray, groups: np.ndarray, min_cells: int = 1) -> float:
    """Lowest coverage among the groups with >= min_cells cells; nan when no group is that large."""
    table = group_coverage(sets, truth, groups)
    large = table[table["n"] >= min_cells]
    return float(large["coverage"].min()) if len(large) else float("nan")


def max_shortfall(
    sets: np.ndarray, truth: np.ndarray, group_arrays: list[np.ndarray], alpha: float, min_cells: int = 1
) -> float:
    """Largest (1 - alpha) - coverage over every group of every grouping with >= min_cells cells; >= 0.

    0 means every group reaches the target coverage; groups smaller than min_cells are left out because
    their coverage is too noisy to call a shortfall.
    """
    shortfall = 0.0
    for groups in group_arrays:
        worst = worst_coverage(sets, truth, groups, min_cells)
        if not np.isnan(worst):
            shortfall = max(shortfall, (1 - alpha) - worst)
    return float(shortfall)


def point_metrics(proba: np.ndarray, truth: np.ndarray, n_classes: int) -> dict[str, float]:
    """accuracy of the most probable class, and macro-F1 over the classes present in truth."""
    proba = np.asarray(proba, dtype=float)
    truth = np.asarray(truth)
    if proba.shape != (len(truth), n_classes):
        raise ValueError(f"proba must be (m, {n_classes}) with m = {len(truth)}, got {proba.shape}")
    predicted = proba.argmax(axis=1)
    # only the classes present in the query: an absent class would add an F1 of 0 (if it is ever predicted)
    # or an undefined one (if not), so the macro average would depend on which classes the query lacks.
    # A present class always has a defined F1 = 2 TP / (2 TP + FP + FN), 0 when it is never predicted.
    macro_f1 = f1_score(truth, predicted, average="macro", labels=np.unique(truth))
    return {"accuracy": float((predicted == truth).mean()), "macro_f1": float(macro_f1)}


def _check(sets: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sets = np.asarray(sets, dtype=bool)
    truth = np.asarray(truth)
    if sets.ndim != 2 or truth.shape != (sets.shape[0],):
        raise ValueError(f"sets must be (m, K) and truth (m,), got {sets.shape} and {truth.shape}")
    return sets, truth


def _covered(sets: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return sets[np.arange(len(truth)), truth]
