"""Does the shift test of `celldag annotate` say when the sets' promise fails? On real annotation runs (issue 44;
docs/annotation.md, "How the shift test does on real runs").

  .venv/bin/python benchmarks/shift_test.py RUNS [RUNS ...] [--dataset ID] [--resplits 500]

RUNS: a `results/runs` folder (the default run's, or a reference rerun's on more seeds). For every ok output of
the annotation track under it (`…/annotation-<key>/<classifier>/output.h5ad` beside its `input.h5ad` task):

- **false alarms under nulls that hold by construction**, over `--resplits` re-splits each, seeded by the run, the
  cells of each null pooled and dealt again at the calibration's size, tested label-free and labelled: the random
  split's calibration against its whole query set; one batch's own calibration cells against its own query cells;
  every batch so, Holm over the batches as `celldag annotate` corrects (the family's rate). (A batch against the
  calibration cells of all batches is no null: batches differ, and the test is right to see it.)
- **sensitivity and specificity for shortfalls**: per new batch of the new-batch scenario (the classifier trained
  without it), the label-free test of its unlabelled cells and the labelled test of its labelled share, each against
  the other batches' calibration cells, beside whether a procedure's coverage of that batch falls more than 0.05
  below 1 − α (the headline `kandinsky_augmented`, calibrated as the benchmark calibrates it, and `split_lac`).

Prints Markdown. The default run's 48 outputs take about a minute.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import anndata  # noqa: E402
from annotation_runs import annotation_folders, parser, rate  # noqa: E402

from celldag.annotation import conformal, shift  # noqa: E402
from celldag.annotation.scoring import (  # noqa: E402
    Settings,
    new_batch_calibration,
    procedure_sets,
    scenario_randomisation,
    split_masks,
    task_arrays,
)

SHORTFALL = 0.05  # a batch covered more than this below 1 − α is a broken promise
PROCEDURES = ("kandinsky_augmented", "split_lac")


def outputs(runs: Path, dataset: str):
    """(task, output, name) of every ok annotation output under ``runs``."""
    for path in (p for folder in annotation_folders(runs, dataset) for p in sorted(folder.glob("*/output.h5ad"))):
        output = anndata.read_h5ad(path)
        if output.uns.get("status") == "ok":
            yield anndata.read_h5ad(path.parent.parent / "input.h5ad"), output, str(path.relative_to(runs).parent)


def scores(proba: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best-label score, own-label score) per cell."""
    return shift.top_scores(proba), conformal.true_scores(conformal.lac_scores(proba), truth)


NULLS = (
    "the random split's calibration against its query set",
    "a batch's own calibration cells against its own query cells",
    "every batch against its own calibration cells, Holm over batches",
)


def null_alarms(task, output, name: str, resplits: int) -> np.ndarray:
    """(null of ``NULLS``, test: label-free, labelled) → alarms over the re-splits. Each re-split deals the pooled
    cells again at the calibration's size: within the whole random split, and within every batch."""
    truth, batch, _ = task_arrays(task, output)
    top, own = scores(np.asarray(output.obsm["proba_random"], dtype=np.float64), truth)
    calibration, query = split_masks(task)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    alarms = np.zeros((len(NULLS), 2), dtype=int)

    def dealt(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        shuffled = rng.permutation(cells)
        size = int(calibration[cells].sum())
        return shuffled[:size], shuffled[size:]

    batches = [np.flatnonzero((calibration | query) & (batch == b)) for b in range(batch.max() + 1)]
    for _ in range(resplits):
        cal, qry = dealt(np.flatnonzero(calibration | query))
        per_batch = [dealt(cells) for cells in batches]
        one = rng.integers(len(batches))
        for column, values in enumerate((top, own)):
            alarms[0, column] += shift.larger_p(values[cal], values[qry])[1] <= shift.LEVEL
            p_values = [shift.larger_p(values[c], values[q])[1] for c, q in per_batch]
            alarms[1, column] += p_values[one] <= shift.LEVEL
            alarms[2, column] += bool((shift.holm(p_values) <= shift.LEVEL).any())
    return alarms


def new_batch_rows(task, output, name: str, settings: Settings) -> list[dict]:
    """Per new batch: both tests' p and each procedure's coverage of the batch."""
    truth, batch, soft = task_arrays(task, output)
    split = task.obs["split"].astype(str).to_numpy()
    labelled = task.obs["new_batch_labelled"].to_numpy(dtype=bool)
    rows = []
    for held, batch_name in enumerate(sorted(set(task.obs["batch"].astype(str)))):
        proba = np.asarray(output.obsm[f"proba_without_{held}"], dtype=np.float64)
        top, own = scores(proba, truth)
        calibration, query = new_batch_calibration(task, held)
        others = (split == "calibration") & (batch != held)
        new_labelled = labelled & (batch == held)
        draws = scenario_randomisation(
            task, f"new batch {batch_name}", calibration, query, truth, proba.shape[1], settings
        )
        built = procedure_sets(
            proba,
            truth,
            batch,
            soft,
            calibration,
            query,
            settings.alpha,
            settings.groups,
            PROCEDURES,
            settings.min_weight,
            draws,
        )
        row = {
            "run": name,
            "batch": batch_name,
            "p_label_free": shift.larger_p(top[others], top[query])[1],
            "p_labelled": shift.larger_p(own[others], own[new_labelled])[1] if new_labelled.sum() >= 2 else np.nan,
        }
        for procedure, sets in built.sets.items():
            row[f"{procedure}_coverage"] = float(sets[np.arange(query.sum()), truth[query]].mean())
        rows.append(row)
    return rows


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--resplits", type=int, default=500)
    args = arguments.parse_args()
    settings = Settings.of({})
    alarms, rows = [], []
    for runs in args.runs:
        for task, output, name in outputs(runs, args.dataset):
            alarms.append(null_alarms(task, output, name, args.resplits))
            rows += new_batch_rows(task, output, name, settings)
    totals, n = np.sum(alarms, axis=0), len(alarms) * args.resplits
    print(
        f"## False alarms under exchangeability ({len(alarms)} outputs × {args.resplits} re-splits, level "
        f"{shift.LEVEL})\n"
    )
    print("| null | label-free [95 % interval] | labelled [95 % interval] |\n|---|---|---|")
    for null, (free, labelled) in zip(NULLS, totals, strict=True):
        print(f"| {null} | {rate(int(free), n)} | {rate(int(labelled), n)} |")
    table = pd.DataFrame(rows)
    print(
        f"\n## Shortfalls of the new batch ({len(table)} batch scenarios; shortfall: coverage < "
        f"{1 - settings.alpha - SHORTFALL:.2f})\n"
    )
    print("| procedure | batches short | test | sensitivity | specificity |\n|---|---|---|---|---|")
    for procedure in PROCEDURES:
        column = f"{procedure}_coverage"
        if column not in table:
            continue
        short = table[column] < 1 - settings.alpha - SHORTFALL
        for test in ("p_label_free", "p_labelled"):
            tested = table[test].notna()
            called = table[test] <= shift.LEVEL
            hits, misses = (called & short & tested).sum(), (~called & short & tested).sum()
            quiet, false_calls = (~called & ~short & tested).sum(), (called & ~short & tested).sum()
            sensitivity = rate(int(hits), int(hits + misses)) if hits + misses else "–"
            specificity = rate(int(quiet), int(quiet + false_calls)) if quiet + false_calls else "–"
            print(
                f"| {procedure} | {int(short.sum())} of {len(table)} | {test.removeprefix('p_').replace('_', '-')} "
                f"| {sensitivity} | {specificity} |"
            )
    worst = table.groupby("run")[[f"{p}_coverage" for p in PROCEDURES]].min().mean()
    print(
        "\nMean over outputs of the worst new batch's coverage: "
        + ", ".join(f"{column.removesuffix('_coverage')} {value:.3f}" for column, value in worst.items())
    )


if __name__ == "__main__":
    main()
