"""`celldag annotate --classifier celltypist` against CellTypist's own process on the same cells (issue 52; docs/
performance.md, "celldag annotate beside CellTypist").

  .venv/bin/python benchmarks/annotate_speed.py [--realdata ../shared/realdata] [--query-cells 50000]

Cells: CellBench's five-line plates (`../shared/realdata`), counts thinned binomially to a fifth (a 10x-like depth),
resampled with replacement and thinned afresh so no two cells are equal: a query of `--query-cells` cells from plate
3, and references of 700 and of `--query-cells` cells from plates 1 and 2. Each command runs in a fresh process,
one at a time (two cores: nothing beside it):

- **celldag**: `celldag annotate REFERENCE QUERY --classifier celltypist --threads 2` (pca for the unknown-type
  distance, the default procedure; CellTypist's process uses both cores too), with an empty `$CELLDAG_CACHE` (the plain
  reference is prepared inside the timing); its stages from run.json's `stage_seconds`.
- **CellTypist**: its whole process — import, reading the reference, log-normalising it to 10⁴, training,
  writing the model, reading and log-normalising the query, `celltypist.annotate` (best match, no majority
  voting). `celltypist.train` cannot run on the lock's scikit-learn (it passes `multi_class='ovr'`), so training
  is `celldag.annotation.celltypist.train`, the same scikit-learn calls on all of the reference's cells.

Prints Markdown — wall time and peak memory of each process, and the stages of each — and writes
results/bench/annotate_speed.json for `make bench` (docs/performance.md), with the target of issue 52: celldag's
whole process within 1.5× CellTypist's, with either reference. `--quick`: 2,000 query cells.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from annotate_defaults import MIXOLOGY  # noqa: E402
from common import write_results  # noqa: E402

from celldag.data.cellbench import BATCH_KEY, COUNT, LABEL_KEY, METADATA, singlets  # noqa: E402

PLATES = ("sc_celseq2_5cl_p1", "sc_celseq2_5cl_p2", "sc_celseq2_5cl_p3")
DEPTH = 0.2  # the share of each count kept: CEL-seq2's depth thinned towards a 10x droplet's
SMALL_REFERENCE = 700
TARGET_RATIO = 1.5  # issue 52: celldag's whole process at most this many times CellTypist's
PYTHON = str(REPO / ".venv" / "bin" / "python")

# Run by PYTHON in a fresh process: the command, then its wall time and peak RSS (the child's, in MB) as JSON
MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    started = time.perf_counter()
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stdout[-2000:] + done.stderr[-4000:])
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}")
    print(json.dumps({"wall_s": time.perf_counter() - started,
                      "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
""")

# CellTypist's own process, stage by stage (argv: reference, query, model path); prints its stages as JSON
CELLTYPIST = textwrap.dedent("""
    import json, sys, time
    stages, last = {}, time.perf_counter()
    def lap(name):
        global last
        now = time.perf_counter(); stages[name] = round(now - last, 3); last = now
    import anndata, scanpy as sc, celltypist
    from celldag.annotation import celltypist as model_of
    lap("import")
    reference = anndata.read_h5ad(sys.argv[1])
    sc.pp.normalize_total(reference, target_sum=1e4); sc.pp.log1p(reference)
    lap("reference")
    model = model_of.train(reference.X.toarray(), reference.obs["%(label)s"].astype(str).to_numpy(),
                           list(reference.var_names))
    model_of.write_model(model, sys.argv[3])
    lap("training")
    query = anndata.read_h5ad(sys.argv[2])
    sc.pp.normalize_total(query, target_sum=1e4); sc.pp.log1p(query)
    lap("query")
    celltypist.annotate(query, model=sys.argv[3], majority_voting=False)
    lap("annotate")
    print(json.dumps(stages))
""") % {"label": LABEL_KEY}


def resampled(pool, n_cells: int, rng: np.random.Generator):
    """``n_cells`` cells drawn with replacement from ``pool`` (counts), each thinned binomially to ``DEPTH``."""
    from scipy import sparse

    picked = pool[rng.integers(0, pool.n_obs, n_cells)].copy()
    counts = sparse.csr_matrix(picked.X, dtype=np.int64)
    counts.data = rng.binomial(counts.data, DEPTH)
    counts.eliminate_zeros()
    picked.X = counts.astype(np.float32)
    picked.obs_names = [f"cell{i}" for i in range(n_cells)]
    return picked


def measured(command: list[str], env: dict) -> tuple[dict, dict]:
    """(the command's last stdout line as JSON, or {} where it printed none; {wall_s, peak_mb}) from a fresh
    process."""
    done = subprocess.run([PYTHON, "-c", MEASURE, *command], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[:2])} failed (exit {done.returncode}): {done.stderr[-3000:]}")
    *_, printed, timing = done.stdout.strip().splitlines()
    return (json.loads(printed) if printed.startswith("{") else {}), json.loads(timing)


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--realdata", type=Path, default=REPO.parent / "shared/realdata")
    arguments.add_argument("--query-cells", type=int, default=50_000)
    arguments.add_argument(
        "--reference-cells",
        type=int,
        nargs="+",
        default=None,
        help=f"the references' sizes (default {SMALL_REFERENCE} and --query-cells)",
    )
    arguments.add_argument("--quick", action="store_true", help="2,000 query cells: checks that the script works")
    args = arguments.parse_args()
    if args.quick:
        args.query_cells = 2_000
    files = {
        f"{plate}{suffix}": str(args.realdata / MIXOLOGY / f"{plate}{suffix}")
        for plate in PLATES
        for suffix in (COUNT, METADATA)
    }
    cells = singlets(files)[0]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        query = folder / "query.h5ad"
        resampled(cells[cells.obs[BATCH_KEY] == PLATES[2]], args.query_cells, rng).write_h5ad(query)
        references = {}
        for n_cells in args.reference_cells or (SMALL_REFERENCE, args.query_cells):
            references[n_cells] = folder / f"reference{n_cells}.h5ad"
            resampled(cells[cells.obs[BATCH_KEY] != PLATES[2]], n_cells, rng).write_h5ad(references[n_cells])
        env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO / ".parity"), str(REPO / "src")])}
        lines = [
            f"### `celldag annotate --classifier celltypist` beside CellTypist: {args.query_cells:,} query cells "
            "(CellBench plates, resampled; one process at a time)",
            "",
            "| reference cells | process | wall s | peak MB | stages (s) |",
            "|---|---|---|---|---|",
        ]
        targets = []
        for n_cells, reference in references.items():
            out = folder / f"out{n_cells}"
            _, ours = measured(
                [
                    str(REPO / ".venv/bin/celldag"),
                    "annotate",
                    str(reference),
                    str(query),
                    "--out",
                    str(out),
                    "--reference-label-key",
                    LABEL_KEY,
                    "--reference-batch-key",
                    BATCH_KEY,
                    "--batch-key",
                    BATCH_KEY,
                    "--classifier",
                    "celltypist",
                    "--threads",
                    "2",
                ],
                env | {"CELLDAG_CACHE": str(folder / f"cache{n_cells}")},
            )
            stages = json.loads((out / "run.json").read_text())["stage_seconds"]
            theirs_stages, theirs = measured(
                [PYTHON, "-c", CELLTYPIST, str(reference), str(query), str(folder / f"model{n_cells}.pkl")], env
            )
            for name, timing, parts in (("celldag annotate", ours, stages), ("CellTypist", theirs, theirs_stages)):
                lines.append(
                    f"| {n_cells:,} | {name} | {timing['wall_s']:.1f} | {timing['peak_mb']:,.0f} | "
                    + ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in parts.items())
                    + " |"
                )
            ratio = ours["wall_s"] / theirs["wall_s"]
            lines.append(
                f"| {n_cells:,} | celldag ÷ CellTypist | {ratio:.2f}× | {ours['peak_mb'] / theirs['peak_mb']:.2f}× | |"
            )
            targets.append(
                {
                    "target": f"`celldag annotate` on {args.query_cells:,} query cells, {n_cells:,}-cell "
                    f"reference: whole process <= {TARGET_RATIO}x CellTypist's",
                    "measured": f"{ratio:.2f}x ({ours['wall_s']:.1f} s vs {theirs['wall_s']:.1f} s)",
                    "met": bool(ratio <= TARGET_RATIO),
                }
            )
    print("\n".join(lines))
    write_results(
        "annotate_speed",
        args.quick,
        {},
        ["\n".join(lines)],
        targets,
        notes=[
            "CellTypist's training is celldag's `celltypist.train` (the same scikit-learn calls): "
            "`celltypist.train` 1.7.1 cannot run on the lock's scikit-learn."
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
