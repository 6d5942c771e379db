"""Label-shift-weighted sets against class-conditional ones on a constructed label shift of real annotation runs
(issue 44; docs/annotation.md, "Label shift").

  .venv/bin/python benchmarks/label_shift.py RUNS [RUNS ...] [--dataset ID] [--draws 200] [--share 0.5]

RUNS: a `results/runs` folder. For every classifier output under it (`…/annotation-<key>/<classifier>/output.h5ad`,
its random-split fit `proba_random`) the sets are calibrated on the random split's calibration cells, as the
benchmark scores them, and measured on a query drawn from the random split's query cells with skewed type
proportions: draw d puts `--share` of the query on one type (the types with ≥ 20 query cells in turn) and the rest
on the others in their calibration proportions. Two constructions, `--draws` draws each:

- **pure**: the query drawn from the query cells of every batch — within a type, cells are drawn uniformly, so
  P(X | Y) is the calibration cells' exactly and only P(Y) moves: the assumption of `label_shift`;
- **one batch**: the query drawn from one batch's query cells (the batches in turn), as a lab's batch with another
  composition would be: P(Y) moves, and with it whatever the batch changes in P(X | Y).

Per construction and procedure (`label_shift`, `class_conditional`, `split_lac`): the mean coverage over draws and
outputs with its standard error (draws of one output are independent given the calibration; the SE is over every
draw, so it understates the spread between calibrations), and the mean set size. The label-shift weights come from
the drawn query's unlabelled cells alone (`celldag.annotation.label_shift.query_proportions`).

Prints Markdown.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from annotation_runs import annotation_tasks, ok_outputs, parser  # noqa: E402

from celldag.annotation import conformal  # noqa: E402
from celldag.annotation.label_shift import weighted_sets  # noqa: E402
from celldag.annotation.track import HELD_OUT_TYPE_MIN_QUERY, SCORING_DEFAULTS  # noqa: E402

STREAM = 44  # this benchmark's random stream: its draws share nothing with the pipeline's
PROCEDURES = ("label_shift", "class_conditional", "split_lac")
CONSTRUCTIONS = ("pure", "one batch")


def skewed_query(
    labels: np.ndarray, pool: np.ndarray, favoured: str, share: float, base: dict[str, float], rng: np.random.Generator
) -> np.ndarray:
    """Indices of a query drawn without replacement from ``pool`` (a mask): ``share`` of it type ``favoured``, the
    rest the other types the pool holds in the proportions ``base``, as large as the pool's cells of each type allow
    (empty when the pool holds no cell of ``favoured``)."""
    held = set(labels[pool])
    if favoured not in held:
        return np.zeros(0, dtype=int)
    others = {label: weight for label, weight in base.items() if label != favoured and label in held}
    total = sum(others.values())
    target = {favoured: share} | {label: (1 - share) * weight / total for label, weight in others.items()}
    available = {label: np.flatnonzero(pool & (labels == label)) for label in target}
    size = min(available[label].size / weight for label, weight in target.items() if weight > 0)
    drawn = [
        rng.choice(available[label], int(np.floor(weight * size)), replace=False)
        for label, weight in target.items()
        if weight > 0
    ]
    return np.sort(np.concatenate(drawn))


def procedure_sets(
    name: str, proba: np.ndarray, truth: np.ndarray, calibration: np.ndarray, query: np.ndarray, alpha: float
) -> np.ndarray:
    lac = conformal.lac_scores(proba)
    cal_true = conformal.true_scores(lac[calibration], truth[calibration])
    if name == "label_shift":
        rows = np.zeros(truth.size, dtype=bool)
        rows[query] = True
        return weighted_sets(proba, lac, truth, calibration, rows, alpha)[0]
    if name == "class_conditional":
        return conformal.class_conditional_sets(cal_true, truth[calibration], lac[query], alpha)
    return conformal.split_sets(cal_true, lac[query], alpha)


def main() -> int:
    arguments = parser(__doc__)
    arguments.add_argument("--draws", type=int, default=200, help="draws per construction and output (default 200)")
    arguments.add_argument("--share", type=float, default=0.5, help="the favoured type's share of a query")
    args = arguments.parse_args()
    alpha = float(SCORING_DEFAULTS["alpha"])
    covered = defaultdict(list)  # (construction, procedure) → coverage of each draw
    sizes = defaultdict(list)
    outputs = 0
    for folder, task, labels, batch in annotation_tasks(args.runs, args.dataset):
        split = task.obs["split"].astype(str).to_numpy()
        calibration, query = split == "calibration", split == "query"
        kinds = [
            label
            for label in np.unique(labels)
            if np.count_nonzero(query & (labels == label)) >= HELD_OUT_TYPE_MIN_QUERY
        ]
        base = {label: float(np.mean(labels[calibration] == label)) for label in np.unique(labels)}
        for output, truth, proba in ok_outputs(folder, labels):
            outputs += 1
            rng = np.random.default_rng([STREAM, int(output.uns["seed"]), outputs])
            batches = np.unique(batch)
            for construction in CONSTRUCTIONS:
                for draw in range(args.draws):
                    pool = query if construction == "pure" else query & (batch == batches[draw % batches.size])
                    rows = skewed_query(labels, pool, kinds[draw % len(kinds)], args.share, base, rng)
                    if rows.size < HELD_OUT_TYPE_MIN_QUERY:  # a batch with too few cells of the type: no draw
                        continue
                    for name in PROCEDURES:
                        sets = procedure_sets(name, proba, truth, calibration, rows, alpha)
                        covered[construction, name].append(sets[np.arange(rows.size), truth[rows]].mean())
                        sizes[construction, name].append(sets.sum(axis=1).mean())
    drawn = {construction: len(covered[construction, PROCEDURES[0]]) for construction in CONSTRUCTIONS}
    print(
        f"{outputs} outputs; draws made: {', '.join(f'{c} {n:,}' for c, n in drawn.items())} (a draw needs "
        f"{HELD_OUT_TYPE_MIN_QUERY}+ cells); favoured type share {args.share:g}; 1 − α = {1 - alpha:g}\n"
    )
    print("| construction | procedure | coverage | SE | ≥ 1 − α − 2 SE | set size |")
    print("|---|---|---|---|---|---|")
    for construction in CONSTRUCTIONS:
        for name in PROCEDURES:
            values = np.asarray(covered[construction, name])
            mean, se = values.mean(), values.std(ddof=1) / np.sqrt(values.size)
            print(
                f"| {construction} | {name} | {mean:.4f} | {se:.4f} | {'yes' if mean >= 1 - alpha - 2 * se else 'no'} "
                f"| {np.mean(sizes[construction, name]):.3f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
