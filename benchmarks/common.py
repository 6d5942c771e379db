"""Helpers shared by the speed benchmarks (`make bench` runs them through benchmarks/run_all.py).

Every benchmark script writes one JSON file, results/bench/<name>.json (results/ is git-ignored),
which run_all.py turns into docs/performance.md and docs/performance-scaling.png:

    {
      "name": "<name>",                      # the script's name, e.g. "lineage_scaling"
      "quick": false,                        # true when run with --quick (shrunken sizes)
      "load": [0.1, 1.2],                    # at the start: cores busy with other work, 1-minute load average
      "series": {                            # time against size; run_all plots every series with >= 2 sizes
        "<label>": {"size_name": "cells", "sizes": [...], "seconds": [...],
                    "peak_mb": [...],        # optional, may hold null
                    "peer": false}           # optional: true draws it dashed (a named peer, not celldag)
      },
      "tables": ["<markdown table>", ...],   # copied into docs/performance.md as they are
      "targets": [                           # the issue's claims; run_all lists them with met / not met
        {"target": "NJ, 2,000 leaves <= 1 s", "measured": "0.8 s", "met": true}
      ],
      "notes": ["<free text>", ...]          # optional, printed under the tables
    }

A table's first line should be a "### title" heading, so the document reads without the JSON.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "bench"


def run_params(method: str, variant: str | None = None, preset: str | None = None) -> dict:
    """A method's params as celldag's runs get them (``load_config``: schema defaults, then a config's
    ``method_params``): of ``config/presets/<preset>`` or else config/config.yaml; with ``variant``, that
    variant's params over them (``plan.method_params``), without it the method's shared params."""
    from celldag.plan import method_params
    from celldag.registry import load_config, read_yaml

    path = ROOT / "config" / ("presets/" + preset if preset else "config.yaml")
    _, registries = load_config(read_yaml(path), path.name, root=ROOT)
    entry = registries.methods[method]
    return dict(entry["params"]) if variant is None else method_params(entry, variant)


def timed(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best of ``repeat`` wall-clock seconds of ``fn()``."""
    return measure(fn, repeat)[0]


def measure(fn: Callable[[], object], repeat: int = 3) -> tuple[float, float]:
    """(best seconds, peak MB) of ``repeat`` calls of ``fn()``.

    Peak MB is the rise of this process's resident-set high-water mark over its size before each call
    (Linux: /proc/self/clear_refs resets the mark); nan where that is not available. Sizes are
    measured from small to large in one process, so memory freed earlier may hide a little of it.
    """
    from celldag.provenance import reset_peak_rss, status_mb

    best, peak = float("inf"), float("nan")
    for _ in range(repeat):
        before = status_mb("VmRSS") if reset_peak_rss() else None
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        if before is not None:
            peak = np.nanmax([peak, status_mb("VmHWM") - before])
    return best, float(peak)


# Runs argv[2:] and writes "<seconds> <peak RSS kB>" to argv[1]. A process forked from this (large) one
# would report this one's resident set as its own peak, so a small interpreter forks the measured child.
_CHILD = """import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[2:])
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    out.write(f"{seconds} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
sys.exit(code)
"""


def run_child(command: Sequence[str], cwd: Path | str | None = None) -> tuple[float, float, int, str]:
    """(seconds, peak RSS MB, return code, output tail) of one child process."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as facts:
        result = subprocess.run(
            [sys.executable, "-c", _CHILD, facts.name, *command],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seconds, peak_kb = (facts.read().split() + ["nan", "nan"])[:2]
    return float(seconds), float(peak_kb) / 1024, result.returncode, result.stdout[-3000:]


def fit_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """k of seconds ≈ a·size^k, by least squares on log–log (nan with fewer than two sizes)."""
    sizes, seconds = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    keep = np.isfinite(seconds) & (seconds > 0)
    if np.unique(sizes[keep]).size < 2:
        return float("nan")
    return float(np.polyfit(np.log(sizes[keep]), np.log(seconds[keep]), 1)[0])


class Table:
    """A Markdown table built row by row; ``show()`` prints it and returns its text."""

    def __init__(self, title: str, columns: Sequence[str]) -> None:
        self.title, self.columns, self.rows = title, list(columns), []

    def add(self, *cells: object) -> None:
        self.rows.append([_cell(cell) for cell in cells])

    def markdown(self) -> str:
        lines = [
            f"### {self.title}",
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join(" --- " for _ in self.columns) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def show(self) -> str:
        text = self.markdown()
        print(text + "\n", flush=True)
        return text


def _cell(value: object) -> str:
    if isinstance(value, float):
        if not np.isfinite(value):
            return "–"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def series(size_name: str, sizes: list, seconds: list, peak_mb: list | None = None, peer: bool = False) -> dict:
    entry = {"size_name": size_name, "sizes": list(sizes), "seconds": [float(s) for s in seconds], "peer": peer}
    if peak_mb is not None:
        entry["peak_mb"] = [None if not np.isfinite(m) else round(float(m), 1) for m in peak_mb]
    return entry


def target(text: str, measured: str, met: bool | None) -> dict:
    return {"target": text, "measured": measured, "met": None if met is None else bool(met)}


def load_average(seconds: float = 2.0) -> list[float]:
    """[cores busy over the next ``seconds`` while this process sleeps, /proc/loadavg's 1-minute value].

    The first is what tells a busy machine: the load average also counts the benchmark that ran just
    before (make bench runs its scripts back to back), and so called an idle machine busy.
    """

    def cpu_times() -> list[int]:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]

    try:
        before = cpu_times()
        time.sleep(seconds)
        after = cpu_times()
        load = float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return []
    total = sum(after) - sum(before)
    idle = (after[3] + after[4]) - (before[3] + before[4])  # idle + iowait
    return [round(len(os.sched_getaffinity(0)) * (total - idle) / max(total, 1), 2), load]


def write_results(
    name: str,
    quick: bool,
    series: dict,
    tables: list[str],
    targets: list[dict],
    notes: list[str] = (),
    load: list[float] | None = None,
    sections: dict | None = None,
    results: Path = RESULTS,
) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{name}.json"
    result = {
        "name": name,
        "quick": quick,
        "load": load if load is not None else load_average(),
        "series": series,
        "tables": tables,
        "targets": targets,
        "notes": list(notes),
    }
    if sections is not None:
        result["sections"] = sections
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return path


class Section:
    """What the sections of one benchmark script add to its results file."""

    def __init__(self) -> None:
        self.series, self.tables, self.targets, self.notes = {}, [], [], []


def run_sections(
    name: str,
    sections: dict[str, Callable[[bool, Section], None]],
    only: Sequence[str],
    quick: bool,
    results: Path = RESULTS,
) -> Path:
    """Run the ``only`` sections in order (each timed), print each series' fitted exponent, write the results
    into ``results``/<name>.json after every section, so that a run stopped by a time limit keeps what it measured.

    The sections not run keep their results from the script's last run (same ``--quick``), so that
    ``--only`` reruns a part without dropping the rest from docs/performance.md (`make bench` starts afresh).
    """
    path = results / f"{name}.json"
    earlier = json.loads(path.read_text()) if path.exists() else {}
    done = earlier.get("sections", {}) if earlier.get("quick") == quick else {}
    for section in only:
        start, load, out = time.perf_counter(), load_average(), Section()
        print(f"== {section}", flush=True)
        sections[section](quick, out)
        print(f"== {section}: {time.perf_counter() - start:.0f} s\n", flush=True)
        for label, entry in out.series.items():
            print(f"{label}: time ~ size^{fit_exponent(entry['sizes'], entry['seconds']):.2f}")
        done[section] = vars(out) | {"load": load}
        ordered = [done[key] for key in sections if key in done]
        busiest = max((result["load"] for result in ordered if result["load"]), default=[])
        path = write_results(
            name,
            quick,
            {label: entry for result in ordered for label, entry in result["series"].items()},
            [table for result in ordered for table in result["tables"]],
            [item for result in ordered for item in result["targets"]],
            [note for result in ordered for note in result["notes"]],
            busiest,
            {key: done[key] for key in sections if key in done},
            results,
        )
    return path


def machine() -> dict[str, str]:
    """Cores, CPU model, RAM and the versions that set the numbers."""
    import torch

    def first(path: str, key: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "unknown"

    ram_kb = first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "cores": f"{len(os.sched_getaffinity(0))} usable ({os.cpu_count()} online)",
        "cpu": first("/proc/cpuinfo", "model name"),
        "ram": f"{int(ram_kb) / 2**20:.1f} GiB" if ram_kb.isdigit() else "unknown",
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": f"{torch.__version__} ({torch.get_num_threads()} threads)",
    }
