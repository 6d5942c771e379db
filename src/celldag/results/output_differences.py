"""What differs between a method output as its run recorded it and the same run redone: status, row names, cell and
gene embeddings, the tree; and between two runs' scores. Bit for bit on CPU; within a ``Tolerance`` where the record
says CUDA (``celldag.commands.audit`` re-runs, and reads these verdicts)."""

from __future__ import annotations

import re

import numpy as np

from celldag.results.tolerance import Tolerance, values_match


def score_differences(recorded: dict[str, float], now: dict[str, float], tolerance: Tolerance | None):
    """[(metric, recorded, now)] for every metric that differs or is on one side only (None there)."""
    metrics = sorted(set(recorded) | set(now))
    pairs = [(metric, recorded.get(metric), now.get(metric)) for metric in metrics]
    return [(metric, old, new) for metric, old, new in pairs if not values_match(old, new, tolerance)]


def array_difference(recorded, now, tolerance: Tolerance | None) -> str | None:
    """Why two arrays differ (shape, bits, or beyond the tolerance), or None."""
    recorded, now = np.asarray(recorded), np.asarray(now)
    if recorded.shape != now.shape:
        return f"shape {recorded.shape} recorded, {now.shape} now"
    if tolerance is None:
        same = recorded.dtype == now.dtype and recorded.tobytes() == now.tobytes()
    else:
        same = bool(np.allclose(now, recorded, rtol=tolerance.rel, atol=tolerance.abs, equal_nan=True))
    if same:
        return None
    delta = np.abs(now.astype(np.float64) - recorded.astype(np.float64))
    return f"max |Δ| {np.nanmax(delta):.3g}" if delta.size else "other dtype"


BRANCH_LENGTH = re.compile(r":([^,():;\[\]]+)")


def newick_difference(recorded: str, now: str, tolerance: Tolerance | None) -> str | None:
    """Exact text without a tolerance; else the same topology and names, branch lengths within it."""
    if recorded == now:
        return None
    if tolerance is None or BRANCH_LENGTH.sub(":", recorded) != BRANCH_LENGTH.sub(":", now):
        return "another tree" if tolerance is None else "another topology or leaf names"
    try:
        lengths = [np.asarray(BRANCH_LENGTH.findall(text), dtype=float) for text in (recorded, now)]
    except ValueError:
        return "unreadable branch lengths"
    return array_difference(*lengths, tolerance)


def output_differences(recorded, now, tolerance: Tolerance | None) -> list[str]:
    """What differs between two method outputs (AnnData): status, rows, cell and gene embeddings, tree.

    Other ``uns`` entries (training facts such as the device or the step a run resumed from) describe
    how the output was made, not what it is, and are not compared.
    """
    differences = []
    for key in ("status", "status_reason"):
        if recorded.uns.get(key) != now.uns.get(key):
            differences.append(f"uns['{key}'] recorded {recorded.uns.get(key)!r} now {now.uns.get(key)!r}")
    if list(recorded.obs_names) != list(now.obs_names) or list(recorded.var_names) != list(now.var_names):
        differences.append("row names (obs_names or var_names)")
    for slot in ("obsm", "varm"):
        mine, theirs = getattr(recorded, slot), getattr(now, slot)
        for key in sorted(set(mine) | set(theirs)):
            both = key in mine and key in theirs
            why = array_difference(mine[key], theirs[key], tolerance) if both else "on one side only"
            if why:
                differences.append(f"{slot}['{key}'] {why}")
    trees = [output.uns.get("tree_newick") for output in (recorded, now)]
    if trees != [None, None]:
        why = newick_difference(*trees, tolerance) if None not in trees else "on one side only"
        if why:
            differences.append(f"uns['tree_newick'] {why}")
    return differences
