"""Annotation track: the cost of Kandinsky's augmented fit (conditional calibration), written to
results/bench/conformal_fits.json.

  augmented  celldag's thresholds for every (query cell, candidate label) — warm-started HiGHS, vertex and
             ray certificates shared between candidates (celldag.annotation.quantile_lp) — against the
             definition solved naively: one cold linear program per candidate (scipy's linprog: the refit with
             the candidate at its own score), measured on a sample of candidates and scaled to all of them.
             Data: n calibration cells, 10 classes × 3 batches, 4 soft groups (G = 17 columns, rank 15, the
             default run's), 175 query cells (1,750 candidates); plain-fit sets first, as the scorer does.

Run: .venv/bin/python benchmarks/conformal_fits.py [--quick]   (about a minute on 2 idle cores)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import Section, Table, run_sections, series, target
from scipy import sparse
from scipy.optimize import linprog

from celldag.annotation import conformal
from celldag.annotation.quantile_lp import Program, independent_columns

N_CLASSES, N_BATCHES, N_SOFT, N_QUERY, ALPHA = 10, 3, 4, 175, 0.1
PEER_SAMPLE = 60  # candidates the naive peer solves; its time is scaled to every candidate


def cells(rng, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(covariates: batch one-hot and soft memberships, labels, LAC-like scores (n, K)) of n cells."""
    batch = rng.integers(N_BATCHES, size=n)
    soft = rng.dirichlet(np.full(N_SOFT, 0.5), size=n)
    labels = rng.integers(N_CLASSES, size=n)
    logits = 2.5 * np.eye(N_CLASSES)[labels] + (1 + batch[:, None]) * rng.normal(size=(n, N_CLASSES))
    proba = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (
        np.column_stack([np.eye(N_BATCHES)[batch], soft]),
        labels,
        conformal.lac_scores(proba / proba.sum(1, keepdims=True)),
    )


def naive_seconds(
    cal_features: np.ndarray, cal_scores: np.ndarray, candidates: np.ndarray, scores: np.ndarray
) -> float:
    """Seconds per candidate of the definition: a cold program per candidate on n + 1 points."""
    start = time.perf_counter()
    for phi, score in zip(candidates, scores):
        features = np.vstack([cal_features, phi])
        targets = np.append(cal_scores, score)
        n, g = features.shape
        identity = sparse.identity(n, format="csr")
        linprog(
            np.concatenate([np.zeros(g), np.full(n, 1 - ALPHA), np.full(n, ALPHA)]),
            A_eq=sparse.hstack([sparse.csr_matrix(features), identity, -identity]),
            b_eq=targets,
            bounds=[(None, None)] * g + [(0, None)] * (2 * n),
            method="highs",
        )
    return (time.perf_counter() - start) / len(candidates)


def augmented_section(quick: bool, out: Section) -> None:
    sizes = [175, 700] if quick else [175, 700, 2800]
    table = Table(
        "Augmented fit: thresholds of 1,750 candidates (175 query cells × 10 labels), G = 17",
        [
            "calibration cells",
            "undecided by the plain fit",
            "programs solved",
            "celldag s",
            "one program per candidate s (scaled)",
            "ratio",
        ],
    )
    ours, peer = [], []
    for n_cal in sizes:
        rng = np.random.default_rng(n_cal)
        cal_covariates, cal_labels, cal_all = cells(rng, n_cal)
        query_covariates, _, query_scores = cells(rng, N_QUERY)
        cal_features = conformal.kandinsky_features(cal_covariates, N_CLASSES)[np.arange(n_cal), cal_labels]
        query_features = conformal.kandinsky_features(query_covariates, N_CLASSES)
        cal_scores = cal_all[np.arange(n_cal), cal_labels]
        solves = count_solves()
        start = time.perf_counter()
        conformal.augmented_sets(cal_scores, cal_features, query_scores, query_features, ALPHA)
        seconds = time.perf_counter() - start
        undecided = ~conformal.kandinsky_sets(cal_scores, cal_features, query_scores, query_features, ALPHA)[0]
        flat = query_features[undecided]
        pick = rng.choice(len(flat), size=min(PEER_SAMPLE, len(flat)), replace=False)
        naive = naive_seconds(cal_features, cal_scores, flat[pick], query_scores[undecided][pick]) * undecided.sum()
        table.add(n_cal, int(undecided.sum()), solves(), seconds, naive, naive / seconds)
        ours.append(seconds), peer.append(naive)
    out.tables.append(table.show())
    out.series["augmented fit (celldag)"] = series("calibration cells", sizes, ours)
    out.series["one program per candidate (scipy linprog, scaled)"] = series(
        "calibration cells", sizes, peer, peer=True
    )
    out.targets.append(
        target(
            "augmented fit at the default size (175 calibration cells) <= 0.5 s a fit",
            f"{ours[0]:.2f} s",
            ours[0] <= 0.5,
        )
    )
    out.notes.append(
        f"Column basis of the default groups: {len(independent_columns(cal_features))} of "
        f"{cal_features.shape[1]} columns."
    )


def count_solves():
    """Counts Program.solve calls from now on; returns a function reading the count."""
    calls = [0]
    solve = Program.solve

    def counted(self, linear=None):
        calls[0] += 1
        return solve(self, linear)

    Program.solve = counted
    return lambda: (setattr(Program, "solve", solve), calls[0])[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that the script works")
    args = parser.parse_args()
    run_sections("conformal_fits", {"augmented": augmented_section}, ["augmented"], args.quick)


if __name__ == "__main__":
    main()
