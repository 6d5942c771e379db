"""`make bench`: run every speed benchmark, then write docs/performance.md and docs/performance-scaling.png.

Each script of BENCHMARKS runs in its own process and writes results/bench/<name>.json (format:
benchmarks/common.py); a script that is missing or fails is noted in the document, not fatal.

Run: .venv/bin/python benchmarks/run_all.py [--quick] [--report-only]
  --quick        every script with --quick: small sizes, to check the scripts work (numbers mean little)
  --report-only  rewrite the document from the JSON files already in results/bench/
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import RESULTS, ROOT, fit_exponent, machine

BENCHMARKS = ("lineage_scaling", "representation_scaling", "conformal_fits", "annotate_speed")
# results that `make bench` reports when present but never runs: benchmarks/gpu.py needs a GPU machine
DEVICE_BENCHMARKS = ("gpu",)
DOC = ROOT / "docs" / "performance.md"
FIGURE = ROOT / "docs" / "performance-scaling.png"
DEFAULT_RUN = ROOT / "benchmarks" / "default_run.md"  # hand-measured times of `make run`, copied into the document


def run_benchmark(name: str, quick: bool) -> str | None:
    """Run one script; a note for the document when it is missing or fails, else None."""
    script = ROOT / "benchmarks" / f"{name}.py"
    if not script.exists():
        return f"`benchmarks/{name}.py` does not exist yet: skipped."
    (RESULTS / f"{name}.json").unlink(missing_ok=True)  # never report an earlier run's numbers as this one's
    print(f"==== {name}", flush=True)
    start = time.perf_counter()
    code = subprocess.run([sys.executable, str(script), *(["--quick"] if quick else [])], cwd=ROOT).returncode
    print(f"==== {name}: {time.perf_counter() - start:.0f} s, exit {code}\n", flush=True)
    return None if code == 0 else f"`benchmarks/{name}.py` failed (exit {code}); its results are missing."


def load_results() -> list[dict]:
    names = (*BENCHMARKS, *DEVICE_BENCHMARKS)
    return [json.loads(path.read_text()) for name in names if (path := RESULTS / f"{name}.json").exists()]


def scaling_figure(results: list[dict], path: Path) -> list[tuple[str, str, float]]:
    """Log–log seconds against size, one panel per size unit; returns (label, unit, exponent) per series."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    panels: dict[str, list[tuple[str, dict]]] = {}
    for result in results:
        for label, entry in result["series"].items():
            if len(entry["sizes"]) >= 2:
                panels.setdefault(entry["size_name"], []).append((label, entry))
    exponents = []
    figure = Figure(figsize=(7 * max(len(panels), 1), 5.5), layout="constrained")
    for ax, (unit, entries) in zip(figure.subplots(1, max(len(panels), 1), squeeze=False)[0], panels.items()):
        for label, entry in entries:
            k = fit_exponent(entry["sizes"], entry["seconds"])
            exponents.append((label, unit, k))
            ax.loglog(
                entry["sizes"],
                entry["seconds"],
                "o--" if entry.get("peer") else "o-",
                label=f"{label}: ∝ {unit}^{k:.2f}",
            )
        ax.set(xlabel=f"{unit} (log)", ylabel="seconds (log)", title=f"time against {unit}")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle("celldag solid, peers dashed; exponent: least-squares slope on log–log", fontsize=10)
    figure.savefig(path, dpi=120)
    return exponents


def git_revision() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    revision = git("rev-parse", "--short", "HEAD") or "unknown"
    # this script's own outputs do not count: the figure is written before the document
    changes = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        f":!{DOC.relative_to(ROOT)}",
        f":!{FIGURE.relative_to(ROOT)}",
    )
    return revision + (" with uncommitted changes" if changes else "")


def targets_table(results: list[dict]) -> list[str]:
    marks = {True: "met", False: "**not met**", None: "–"}
    lines = ["| target | measured | |", "| --- | --- | --- |"]
    for result in results:
        for t in result.get("targets", []):
            met = "– (--quick sizes)" if result.get("quick") else marks[t["met"]]
            lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    return lines


def document(results: list[dict], notes: list[str], exponents: list[tuple[str, str, float]], quick: bool) -> str:
    facts = machine()
    cores = len(os.sched_getaffinity(0))
    busy = [f"{r['name']} ({r['load'][0]:.1f})" for r in results if r.get("load") and r["load"][0] > cores / 2]
    lines = [
        "<!-- Generated by benchmarks/run_all.py (`make bench`): do not edit by hand, rerun it. -->",
        "# Performance",
        "",
        "Speed claims measured against named peers in one run, on the machine below. Every ratio is the peer's "
        "time over celldag's, both measured in the same run (> 1: celldag is faster).",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC at revision {git_revision()}.",
    ]
    if quick:
        lines += ["", "**`--quick` run: shrunken sizes that check the scripts work; the numbers mean little.**"]
    if busy:
        lines += [
            "",
            "**The machine was busy** (cores busy with other work above half the cores at the start of: "
            + ", ".join(busy)
            + "): the times are higher and noisier than on an idle machine.",
        ]
    lines += ["", "## Targets", "", *targets_table(results), "", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in facts.items()]
    lines += [
        "",
        "## Scaling",
        "",
        "The whole pipeline on 8,192-leaf trees and 100,000 cells (`config/presets/scale.yaml`: "
        "wall time and peak memory per rule, and what to expect at 10^6 cells): [scale.md](scale.md).",
        "",
        f"![time against size, log–log]({FIGURE.name})",
        "",
        "| series | size | fitted exponent |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {label} | {unit} | {k:.2f} |" for label, unit, k in exponents]
    lines += ["", "## The default run", "", DEFAULT_RUN.read_text().strip()]
    for result in results:
        lines += ["", f"## {result['name']}", ""]
        for table in result["tables"]:
            lines += [table, ""]
        lines += [f"- {note}" for note in result.get("notes", [])]
    if notes:
        lines += ["", "## Not run", "", *(f"- {note}" for note in notes)]
    lines += [
        "",
        "## How to rerun",
        "",
        "    make bench   # installs the peers (requirements/bench.txt), runs every benchmark, writes this file",
        "    .venv/bin/python benchmarks/run_all.py --quick         # small sizes: checks that the scripts work",
        "    .venv/bin/python benchmarks/run_all.py --report-only   # this file again from results/bench/*.json",
        "    .venv/bin/python benchmarks/lineage_scaling.py --only nj quartet   # one script, some sections",
        "",
        "Run it on an otherwise idle machine: the scripts time wall clock, best or median of repeats.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes in every script")
    parser.add_argument("--report-only", action="store_true", help="only rewrite the document from results/bench/")
    args = parser.parse_args()
    notes = [] if args.report_only else [note for name in BENCHMARKS if (note := run_benchmark(name, args.quick))]
    notes += [
        f"`benchmarks/{name}.py`: no results yet; run it on a GPU machine (`PYTHONPATH=src python "
        f"benchmarks/{name}.py`; docs/gpu.md), then `benchmarks/run_all.py --report-only`."
        for name in DEVICE_BENCHMARKS
        if not (RESULTS / f"{name}.json").exists()
    ]
    results = load_results()
    quick = args.quick or any(result.get("quick") for result in results)
    exponents = scaling_figure(results, FIGURE)
    DOC.write_text(document(results, notes, exponents, quick))
    print(f"wrote {DOC} and {FIGURE}")


if __name__ == "__main__":
    main()
