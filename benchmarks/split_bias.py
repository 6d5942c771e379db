"""Does the random split favour calibration or query? Coverage on the query as a split rule deals it, against the same
cells re-dealt at random between calibration and query (issue 51; docs/annotation.md, "A split that favours no part").

  .venv/bin/python benchmarks/split_bias.py RUNS [RUNS ...] [--dataset ID] [--draws 200]

RUNS: a `results/runs` folder. Every classifier output under it (`…/annotation-<key>/<classifier>/output.h5ad`) keeps
its per-cell probabilities (`proba_random`) fixed; the task's cells are re-split `--draws` times by each rule:

- **random rounding** — `celldag.annotation.task.split_cells`, today's rule: remainders and small strata dealt at
  random, so calibration and query have the same expected count in every stratum;
- **by position** — the rule before issue 51, reproduced here for the "before" number: a 1-cell stratum to
  calibration, a 2-cell stratum to train and calibration, rounding remainders to the earlier part.

For each draw, the sets of each procedure are calibrated on the calibration cells the rule dealt and measured on its
query cells ("as dealt"); then the same calibration ∪ query cells are shuffled between the two parts, counts kept
("re-dealt"), and measured again; and the two parts are swapped — calibrated on the query, measured on the
calibration cells ("swapped"). The bias of a rule is the mean of (as dealt − re-dealt) over draws and outputs: 0
for a rule that favours no part. The re-deal is not stratified, so a procedure whose sets depend on how alike the
two parts' type mixes are (`label_shift` estimates the query's proportions) can differ from it by a stratified
split's own advantage; the swap keeps the strata, and a rule that favours no part gives calibration and query the
same law, so (as dealt − swapped) is 0 in expectation for every procedure. Both use the same cells with the same
probabilities (a cell dealt into train by a draw but trained on by the output is in-fit in both), so the difference
isolates the allocation. SE: over draws, of each draw's mean over outputs (the outputs of one seed share its draws, so
they are not independent).

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
from celldag.annotation.task import SPLITS, split_cells  # noqa: E402
from celldag.annotation.track import SCORING_DEFAULTS, TASK_DEFAULTS  # noqa: E402

STREAM = 51  # this benchmark's random stream: its draws share nothing with the pipeline's
PROCEDURES = (
    "split_lac",
    "split_aps",
    "class_conditional",
    "class_conditional_pooled",
    "mondrian_batch",
    "label_shift",
)
RULES = ("random rounding", "by position")


def by_position(labels: np.ndarray, batch: np.ndarray, fractions, seed: int) -> np.ndarray:
    """The split rule before issue 51 (largest-remainder rounding, ties and small strata to the earlier part)."""
    shares = np.asarray(fractions, dtype=np.float64)
    rng = np.random.default_rng([STREAM, seed])
    split = np.empty(labels.size, dtype=object)
    keys = np.char.add(np.char.add(batch.astype(str), "\x1f"), labels.astype(str))
    for key in np.unique(keys):
        members = np.flatnonzero(keys == key)
        n = members.size
        if n <= 2:
            counts = np.array([0, 1, 0]) if n == 1 else np.array([1, 1, 0])
        else:
            quotas = np.round(shares * n, 9)
            counts = np.floor(quotas).astype(int)
            counts[np.argsort(-(quotas - counts), kind="stable")[: n - counts.sum()]] += 1
            for part in np.flatnonzero(counts == 0):
                counts[np.argmax(counts)] -= 1
                counts[part] += 1
        split[rng.permutation(members)] = np.repeat(np.array(SPLITS, dtype=object), counts)
    return split.astype(str)


def coverage(
    name: str,
    proba: np.ndarray,
    lac: np.ndarray,
    aps: np.ndarray,
    truth: np.ndarray,
    batch: np.ndarray,
    calibration: np.ndarray,
    query: np.ndarray,
    alpha: float,
) -> float:
    """The query's coverage by procedure ``name`` calibrated on ``calibration``."""
    cal_lac = conformal.true_scores(lac[calibration], truth[calibration])
    if name == "split_lac":
        sets = conformal.split_sets(cal_lac, lac[query], alpha)
    elif name == "split_aps":
        sets = conformal.split_sets(conformal.true_scores(aps[calibration], truth[calibration]), aps[query], alpha)
    elif name == "class_conditional":
        sets = conformal.class_conditional_sets(cal_lac, truth[calibration], lac[query], alpha)
    elif name == "class_conditional_pooled":
        sets = conformal.pooled_class_sets(cal_lac, truth[calibration], lac[query], alpha)
    elif name == "mondrian_batch":
        groups = np.repeat(batch[query][:, None], lac.shape[1], axis=1)
        sets = conformal.mondrian_sets(cal_lac, batch[calibration], lac[query], groups, alpha)[0]
    else:
        sets = weighted_sets(proba, lac, truth, calibration, query, alpha)[0]
    return float(sets[np.arange(query.sum()), truth[query]].mean())


def main() -> int:
    import warnings

    from celldag.annotation.label_shift import ZeroedTypeWarning

    warnings.simplefilter("ignore", ZeroedTypeWarning)
    arguments = parser(__doc__)
    arguments.add_argument("--draws", type=int, default=200, help="splits drawn per rule and output (default 200)")
    args = arguments.parse_args()
    alpha = float(SCORING_DEFAULTS["alpha"])
    fractions = tuple(TASK_DEFAULTS["split"])
    differences = defaultdict(list)  # (rule, procedure) → per output, each draw's (as dealt − re-dealt)
    swaps = defaultdict(list)  # (rule, procedure) → per output, each draw's (as dealt − swapped)
    dealt = defaultdict(list)  # (rule, procedure) → each output's mean coverage as dealt
    outputs = 0
    for folder, task, labels, batch in annotation_tasks(args.runs, args.dataset):
        seed = int(task.uns["seed"])
        splits = {
            rule: [
                (split_cells if rule == RULES[0] else by_position)(labels, batch, fractions, 1000 * seed + d)
                for d in range(args.draws)
            ]
            for rule in RULES
        }
        for _, truth, proba in ok_outputs(folder, labels):
            outputs += 1
            lac, aps = conformal.lac_scores(proba), conformal.aps_scores(proba)
            rng = np.random.default_rng([STREAM, seed, outputs])
            for rule, drawn in splits.items():
                gaps, swapped, as_dealt = defaultdict(list), defaultdict(list), defaultdict(list)
                for split in drawn:
                    calibration, query = split == "calibration", split == "query"
                    pool = np.flatnonzero(calibration | query)
                    shuffled = np.zeros(labels.size, dtype=bool)
                    shuffled[rng.permutation(pool)[: calibration.sum()]] = True
                    redealt_cal, redealt_query = shuffled, (calibration | query) & ~shuffled
                    for name in PROCEDURES:
                        first = coverage(name, proba, lac, aps, truth, batch, calibration, query, alpha)
                        second = coverage(name, proba, lac, aps, truth, batch, redealt_cal, redealt_query, alpha)
                        third = coverage(name, proba, lac, aps, truth, batch, query, calibration, alpha)
                        gaps[name].append(first - second)
                        swapped[name].append(first - third)
                        as_dealt[name].append(first)
                for name in PROCEDURES:
                    differences[rule, name].append(gaps[name])
                    swaps[rule, name].append(swapped[name])
                    dealt[rule, name].append(np.mean(as_dealt[name]))
    print(
        f"{outputs} outputs × {args.draws} splits per rule; 1 − α = {1 - alpha:g}; bias = coverage as dealt − "
        "re-dealt at random, swap gap = as dealt − swapped; means over splits and outputs, SE over splits\n"
    )
    print("| rule | procedure | coverage as dealt | bias | SE | swap gap | SE |")
    print("|---|---|---|---|---|---|---|")
    for rule in RULES:
        for name in PROCEDURES:
            cells = [f"{np.mean(dealt[rule, name]):.4f}"]
            for table in (differences, swaps):
                per_draw = np.asarray(table[rule, name]).mean(axis=0)  # outputs × draws → each draw's mean
                se = per_draw.std(ddof=1) / np.sqrt(per_draw.size) if per_draw.size > 1 else float("nan")
                cells += [f"{per_draw.mean():+.4f}", f"{se:.4f}"]
            print(f"| {rule} | {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
