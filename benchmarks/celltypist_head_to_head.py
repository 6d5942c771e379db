"""CellTypist's own rules beside conformal sets on CellTypist's own scores, on the same cells (issue 52;
docs/annotation.md, "CellTypist head to head").

  .venv/bin/python benchmarks/celltypist_head_to_head.py [--realdata ../shared/realdata] [--scores FILE]

- **The default run** (`reference/default/scores.tsv`, or a run's scores folder): `celltypist` on the `expression`
  upstream of pbmc68k_batched, mean over seeds — CellTypist's prob match, its best match at σ ≥ 0.5 and the top type
  at p ≥ 0.5 beside the conformal sets on the same scores, on the random split's query cells and on the label-free
  new batches (each batch held out in turn under the fit that never saw it, pooled); the answered share and the
  error among cells answered with one type. kNN's and logistic's own rule on the same cells for scale.
- **Head to head** (CellBench, real cell lines with genotype-verified labels; `../shared/realdata`): each pair of
  `benchmarks/annotate_defaults.py` — reference and query plain h5ads of raw counts — through `celldag annotate
  --classifier celltypist` (CellTypist's model trained on the reference's train cells; pca for the unknown-type
  distance) with the default `label_shift` and with `split_lac`: per query batch, CellTypist's prob match (coverage,
  types answered, share Unassigned) and best match (accuracy) beside the sets (coverage, size, singletons) and the
  shift verdict.
- **A type the model lacks** (plates 1, 2 → 3): per cell line, a CellTypist model trained with that line and then
  stripped of it (its row of weights removed, as CellTypist's `Model.subset(exclude_cell_types=…)` does), annotated
  through `--model` against the reference without the line: the share of the line's query cells that celldag flags
  `unknown type` beside the share CellTypist leaves Unassigned, and both shares on the other lines' query cells. The
  model trains on the reduced reference's train cells (`celldag split`'s) and all of the line's reference cells, so
  it never saw a calibration cell.

Prints Markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import anndata
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from annotate_defaults import MIXOLOGY, PAIRS, cellbench_h5ad, pair_batches  # noqa: E402

from celldag.annotation import celltypist as ct  # noqa: E402
from celldag.commands.annotate import Request, annotate, read_reference, split_table  # noqa: E402
from celldag.data.cellbench import BATCH_KEY, LABEL_KEY  # noqa: E402
from celldag.registry import load_config, read_yaml  # noqa: E402

PROCEDURES = ("label_shift", "split_lac")
HELD_OUT_PAIR = "plates: 1, 2 → 3"


def registry_methods() -> dict:
    config = REPO / "config" / "config.yaml"
    return load_config(read_yaml(config), config.name, root=REPO)[1].methods


def request(reference: Path, query: Path, out: Path, **options) -> Request:
    return Request(
        str(reference),
        str(query),
        str(out),
        batch_key=BATCH_KEY,
        label_key=LABEL_KEY,
        reference_label_key=LABEL_KEY,
        reference_batch_key=BATCH_KEY,
        **options,
    )


RULE_ROWS = {
    "prob_match": "CellTypist's prob match (σ > 0.5)",
    "best_match": "CellTypist's best match at σ ≥ 0.5",
    "confident": "top type at p ≥ 0.5",
}
SET_ROWS = ("label_shift", "split_lac", "kandinsky_augmented")


def read_scores(path: Path) -> pd.DataFrame:
    """A scores table (.tsv, the shipped reference's) or a run's scores folder (parquet files)."""
    if path.is_dir():
        return pd.concat([pd.read_parquet(file) for file in sorted(path.glob("*.parquet"))])
    return pd.read_csv(path, sep="\t")


def default_run(path: Path) -> None:
    scores = read_scores(path)
    scores = scores[
        (scores["track"] == "annotation") & (scores["status"] == "ok") & (scores["variant"] == "expression/default")
    ]
    means = scores.pivot_table(index="method", columns="metric", values="value", aggfunc="mean")
    seeds = scores.loc[scores["method"] == "celltypist", "seed"].nunique()
    print(f"## The default run: pbmc68k_batched, the `expression` upstream, mean over {seeds} seeds (α = 0.1)\n")
    print(
        "| classifier | rule or procedure | scenario | coverage | labels per cell | no answer | answered with one "
        "type | error among them |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for scenario, infix in (("random split", ""), ("label-free new batch", "label_free_")):
        rows = [("celltypist", rule, text) for rule, text in RULE_ROWS.items()]
        rows += [("celltypist", procedure, f"`{procedure}` sets") for procedure in SET_ROWS]
        rows += [(method, "confident", RULE_ROWS["confident"]) for method in ("logistic", "knn")]
        for method, name, text in rows:
            row = means.loc[method]
            if name in RULE_ROWS:
                got = [
                    row.get(f"{name}_{infix}{metric}", np.nan)
                    for metric in ("coverage", "set_size", "unassigned", "singletons", "singleton_errors")
                ]
            elif infix:  # the label-free scenario scores coverage and size of the sets alone
                got = [row[f"{name}_label_free_coverage"], row[f"{name}_label_free_set_size"]] + [np.nan] * 3
            else:
                got = [
                    row[f"{name}_{metric}"]
                    for metric in ("coverage", "set_size", "empty", "singletons", "singleton_errors")
                ]
            coverage, size, none, single, wrong = got
            error = wrong / single if single > 0 else np.nan
            cells = [f"{value:.3f}" if np.isfinite(value) else "–" for value in (coverage, size, none, single, error)]
            print(f"| {method} | {text} | {scenario} | " + " | ".join(cells) + " |")
    print()


def head_to_head(realdata: Path, methods: dict, folder: Path) -> None:
    print("## CellTypist's rules and conformal sets on CellTypist's scores (CellBench, α = 0.1)\n")
    print(
        "| pair | batch | cells | prob match: coverage | types | Unassigned | best match: accuracy | procedure | "
        "sets: coverage | size | singletons | shift verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pair, procedure, batches in pair_batches(realdata, methods, folder, PROCEDURES, classifier="celltypist"):
        for row in batches.itertuples():
            print(
                f"| {pair} | {row.batch} | {row.cells} | {row.celltypist_coverage:.3f} | "
                f"{row.celltypist_set_size:.2f} | {row.celltypist_unassigned_share:.3f} | "
                f"{row.celltypist_top_accuracy:.3f} | `{procedure}` | {row.labelled_coverage:.3f} | "
                f"{row.mean_set_size:.2f} | {row.singletons:.2f} | {row.verdict} |"
            )
    print()


def dense(matrix) -> np.ndarray:
    return np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix, dtype=np.float64)


def without_type(model: ct.Model, name: str) -> ct.Model:
    """The model with one type's row of weights removed (CellTypist's ``Model.subset(exclude_cell_types=…)``)."""
    keep = model.types != name
    return dataclasses.replace(model, types=model.types[keep], coef=model.coef[keep], intercept=model.intercept[keep])


def type_the_model_lacks(realdata: Path, methods: dict, folder: Path) -> None:
    reference_parts, query_parts = PAIRS[HELD_OUT_PAIR]
    full, query = folder / "full.h5ad", folder / "query.h5ad"
    cellbench_h5ad(realdata, reference_parts, full)
    cellbench_h5ad(realdata, query_parts, query)
    raw = anndata.read_h5ad(full)
    truth = anndata.read_h5ad(query).obs[LABEL_KEY].astype(str)
    print(f"## A type the model lacks ({HELD_OUT_PAIR}; `--model` with the type's weights removed, α = 0.1)\n")
    print(
        "| cell line removed | its query cells | celldag: unknown type | CellTypist: Unassigned | "
        "other lines: unknown type | other lines: Unassigned |"
    )
    print("|---|---|---|---|---|---|")
    prepared_full = read_reference(request(full, query, folder / "unused"))
    lognorm, genes = dense(prepared_full.layers["lognorm"]), list(prepared_full.var_names)
    labels = prepared_full.obs["label"].astype(str)
    for line in sorted(labels.unique()):
        reduced = folder / f"without-{line}.h5ad"
        raw[raw.obs[LABEL_KEY].astype(str) != line].copy().write_h5ad(reduced)
        parts = split_table(request(reduced, query, folder / "unused"))
        trained_on = labels.index.isin(parts.index[parts["part"] == "train"]) | (labels == line).to_numpy()
        model = without_type(ct.train(lognorm[trained_on], labels[trained_on].to_numpy(), genes), line)
        ct.write_model(model, folder / "model.pkl")
        out = annotate(request(reduced, query, folder / f"out-{line}", model=str(folder / "model.pkl")), methods)
        cells = pd.read_csv(out / "cells.tsv", sep="\t", index_col="cell", keep_default_na=False)
        novel = (truth.loc[cells.index] == line).to_numpy()
        unknown, unassigned = cells["unknown_type"].astype(bool), cells["celltypist_prob_match"] == ct.UNASSIGNED
        print(
            f"| {line} | {novel.sum()} | {unknown[novel].mean():.3f} | {unassigned[novel].mean():.3f} | "
            f"{unknown[~novel].mean():.3f} | {unassigned[~novel].mean():.3f} |"
        )
    print()


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--realdata", type=Path, default=REPO.parent / "shared/realdata")
    arguments.add_argument(
        "--scores",
        type=Path,
        default=REPO / "reference/default/scores.tsv",
        help="the default run's scores: a .tsv, or a run's scores folder (results/default/scores)",
    )
    args = arguments.parse_args()
    default_run(args.scores)
    if not (args.realdata / MIXOLOGY).is_dir():
        print(f"no CellBench files under {args.realdata / MIXOLOGY}", file=sys.stderr)
        return 1
    methods = registry_methods()
    with tempfile.TemporaryDirectory() as folder:
        head_to_head(args.realdata, methods, Path(folder))
        type_the_model_lacks(args.realdata, methods, Path(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
