"""Which procedure should `celldag annotate` default to? Every procedure it offers, measured where a lab meets it
(issue 51; docs/annotation.md, "The default procedure").

  .venv/bin/python benchmarks/annotate_defaults.py [--scores results/default/scores] [--realdata ../shared/realdata]

- **The default run** (its scores, annotation track): per procedure the mean over runs of the random split's coverage,
  worst type, set size and singletons, and of the label-free new batch's coverage, worst batch and set size (what
  `celldag annotate` gives a lab's batch).
- **CellBench** (real cell lines, genotype-verified labels; `../shared/realdata`): `celldag annotate` run as a lab
  runs it, each reference and query a plain h5ad of raw counts — protocols (reference CEL-seq2, query Drop-seq, and
  the reverse) and plates (reference plates 1–2, query plate 3) — with pca and logistic, per procedure: coverage of
  the query's cells (their labels given to `--label-key`, so the report measures it), mean set size, singletons and
  the shift verdict.

Prints Markdown.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from celldag.annotation.query import PROCEDURES  # noqa: E402
from celldag.commands.annotate import Request, annotate  # noqa: E402
from celldag.data.cellbench import BATCH_KEY, COUNT, LABEL_KEY, METADATA, singlets  # noqa: E402
from celldag.registry import load_config, read_yaml  # noqa: E402

MIXOLOGY = "raw.githubusercontent.com/LuyiTian/sc_mixology/7d00ffb0bd043467f365a9358d7312f294f13c9f/data/csv"
PAIRS = {  # name → (reference experiments, query experiments)
    "protocols: CEL-seq2 → Drop-seq": (["sc_celseq2"], ["sc_dropseq"]),
    "protocols: Drop-seq → CEL-seq2": (["sc_dropseq"], ["sc_celseq2"]),
    "plates: 1, 2 → 3": (["sc_celseq2_5cl_p1", "sc_celseq2_5cl_p2"], ["sc_celseq2_5cl_p3"]),
}


def cellbench_h5ad(realdata: Path, experiments: list[str], path: Path) -> None:
    """The experiments' singlets as one plain h5ad of raw counts (``celldag.data.cellbench.singlets``)."""
    files = {
        f"{experiment}{suffix}": str(realdata / MIXOLOGY / f"{experiment}{suffix}")
        for experiment in experiments
        for suffix in (COUNT, METADATA)
    }
    singlets(files)[0].write_h5ad(path)


def default_run(scores_folder: Path) -> None:
    frames = [pd.read_parquet(path) for path in sorted(scores_folder.glob("*.parquet"))]
    scores = pd.concat(frames)
    scores = scores[(scores["track"] == "annotation") & (scores["status"] == "ok")]
    means = scores.groupby("metric")["value"].mean()
    runs = scores.groupby(["dataset", "method", "variant", "seed"]).ngroups
    print(f"## The default run ({runs} annotation runs, means)\n")
    print(
        "| procedure | coverage | worst type | set size | singletons | label-free coverage | worst batch | set size |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for procedure in PROCEDURES:
        values = [
            means.get(f"{procedure}_{name}", np.nan)
            for name in (
                "coverage",
                "worst_type",
                "set_size",
                "singletons",
                "label_free_coverage",
                "label_free_worst",
                "label_free_set_size",
            )
        ]
        print(f"| `{procedure}` | " + " | ".join(f"{value:.3f}" for value in values) + " |")
    print()


def cellbench(realdata: Path) -> None:
    config = REPO / "config" / "config.yaml"
    methods = load_config(read_yaml(config), config.name, root=REPO)[1].methods
    print("## CellBench through `celldag annotate` (pca, logistic, α = 0.1; coverage on the query's labelled cells)\n")
    print("| pair | procedure | batch | cells | coverage | set size | singletons | shift verdict |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for pair, procedure, batches in pair_batches(realdata, methods, Path(folder), PROCEDURES):
            for row in batches.itertuples():
                print(
                    f"| {pair} | `{procedure}` | {row.batch} | {row.cells} | {row.labelled_coverage:.3f} | "
                    f"{row.mean_set_size:.2f} | {row.singletons:.2f} | {row.verdict} |"
                )


def pair_batches(realdata: Path, methods: dict, folder: Path, procedures, **options):
    """(pair, procedure, batches.tsv with each batch's share of singleton sets) of `celldag annotate` on each pair of
    ``PAIRS`` (the query's labels given, so coverage is measured) and each procedure; ``options``: more settings."""
    for pair, (reference_parts, query_parts) in PAIRS.items():
        reference, query = folder / "reference.h5ad", folder / "query.h5ad"
        cellbench_h5ad(realdata, reference_parts, reference)
        cellbench_h5ad(realdata, query_parts, query)
        for procedure in procedures:
            out = annotate(
                Request(
                    str(reference),
                    str(query),
                    str(folder / "out"),
                    batch_key=BATCH_KEY,
                    label_key=LABEL_KEY,
                    procedure=procedure,
                    reference_label_key=LABEL_KEY,
                    reference_batch_key=BATCH_KEY,
                    **options,
                ),
                methods,
            )
            batches = pd.read_csv(out / "batches.tsv", sep="\t")
            cells = pd.read_csv(out / "cells.tsv", sep="\t", keep_default_na=False)
            batches["singletons"] = [
                float((cells.loc[cells["batch"] == batch, "set_size"] == 1).mean()) for batch in batches["batch"]
            ]
            yield pair, procedure, batches


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--scores", type=Path, default=REPO / "results/default/scores")
    arguments.add_argument("--realdata", type=Path, default=REPO.parent / "shared/realdata")
    args = arguments.parse_args()
    if args.scores.is_dir():
        default_run(args.scores)
    if (args.realdata / MIXOLOGY).is_dir():
        cellbench(args.realdata)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
