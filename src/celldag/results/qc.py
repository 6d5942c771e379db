"""The quality checks of a configuration's results: what a reader should know before trusting a table, each with a
severity (docs/report.md, "Quality checks").

- ``error``: a run that **failed** (its scores are missing from every table it would be in);
- ``warning``: a metric **absent** from a run that is ok while other runs of its dataset have it; a control-scaled
  score outside [−1, 2] (mean over seeds: a method far below the null or beyond the oracle, which says more about
  the controls or the metric than about the method), on a metric its floor card does not flag; a method's **cost** an
  outlier against the shipped reference (``reference/default/cost.tsv``: more than ``WALL_RATIO`` times its wall time or
  ``PEAK_RATIO`` times its peak memory, the default run only, whose runs the reference measured); a method or dataset
  without the **reference** or **license** `celldag cite` needs;
- ``info``: runs ``not_applicable`` by design (a dataset without what the method needs).

``qc.parquet`` (one row per finding, ``QC_COLUMNS``) is written by the aggregate job; the leaderboard and
``index.html`` show it; ``celldag check`` prints its errors.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

import pandas as pd

from celldag.tracks import SCALED_PREFIX

QC_COLUMNS = ["severity", "check", "dataset", "method", "variant", "metric", "detail"]
SEVERITIES = ("error", "warning", "info")  # most severe first
SCALED_RANGE = (-1.0, 2.0)  # Open Problems' QC: a scaled score beyond these says the controls do not bound it
WALL_RATIO, PEAK_RATIO = 3.0, 2.0  # beyond the seed-to-seed and machine-to-machine spread of a run's cost
COST_CONFIG = "default"  # the configuration whose runs the shipped reference measured


def _row(
    severity: str, check: str, detail: str, dataset: str = "", method: str = "", variant: str = "", metric: str = ""
) -> dict:
    return {
        "severity": severity,
        "check": check,
        "dataset": dataset,
        "method": method,
        "variant": variant,
        "metric": metric,
        "detail": detail,
    }


def _seeds(seeds) -> str:
    return ", ".join(str(seed) for seed in sorted(set(seeds)))


def status_rows(scores: pd.DataFrame) -> list[dict]:
    """A run not ok — failed (error) or not_applicable (info) — once per dataset, method and variant, with its seeds
    and its reason."""
    rows = []
    not_ok = scores[scores["status"] != "ok"]
    for (dataset, method, variant, status), group in not_ok.groupby(["dataset", "method", "variant", "status"]):
        reasons = group["status_reason"].dropna() if "status_reason" in group else pd.Series(dtype=str)
        reason = f": {reasons.iloc[0]}" if len(reasons) and reasons.iloc[0] else ""
        severity = "info" if status == "not_applicable" else "error"
        rows.append(_row(severity, status, f"seeds {_seeds(group['seed'])}{reason}", dataset, method, variant))
    return rows


def absent_rows(scores: pd.DataFrame) -> list[dict]:
    """A metric an ok seed of a run lacks while another ok seed of the same run has it (warning). A metric only some
    runs can have (a supervision setting's, a rule of raw sigmoids) is absent by design from runs of another kind, so
    a run is held against its own seeds alone."""
    ok = scores[(scores["status"] == "ok") & ~scores["metric"].str.startswith(SCALED_PREFIX)]
    present = ok.groupby(["dataset", "method", "variant", "seed"])["metric"].agg(set)
    rows = []
    for (dataset, method, variant), seeds in present.groupby(level=[0, 1, 2]):
        expected = set().union(*seeds)
        for (*_, seed), metrics in seeds.items():
            missing = sorted(expected - metrics)
            if missing:
                rows.append(
                    _row(
                        "warning", "absent", f"seed {seed}: {', '.join(missing)}", dataset, method, variant, missing[0]
                    )
                )
    return rows


def scaled_rows(scores: pd.DataFrame, flagged: Collection[tuple[str, str]] = ()) -> list[dict]:
    """A control-scaled score whose mean over seeds lies outside ``SCALED_RANGE`` (warning), on a metric its floor
    card does not flag (``flagged``: (dataset, metric) pairs; there the card already says the controls give the metric
    no range, and a scale of almost nothing sends every score far out)."""
    scaled = scores[(scores["status"] == "ok") & scores["metric"].str.startswith(SCALED_PREFIX)]
    means = scaled.groupby(["dataset", "method", "variant", "metric"])["value"].mean()
    low, high = SCALED_RANGE
    return [
        _row(
            "warning",
            "scaled score",
            f"mean {value:.3g}, outside [{low:g}, {high:g}]",
            dataset,
            method,
            variant,
            metric,
        )
        for (dataset, method, variant, metric), value in means.items()
        if not low <= value <= high and (dataset, metric.removeprefix(SCALED_PREFIX)) not in flagged
    ]


def cost_rows(runs: pd.DataFrame, reference_cost: pd.DataFrame | None) -> list[dict]:
    """A method whose summed wall time or highest peak memory over its runs is an outlier against the reference's
    (warning): the cost table ``celldag check`` prints, per rule ``run <method>``."""
    if reference_cost is None or runs.empty:
        return []
    reference = reference_cost.set_index("rule")
    rows = []
    for method, group in runs.groupby("method"):
        rule = f"run {method}"
        if rule not in reference.index:
            continue
        wall, peak = group["wall_time_s"].sum(), group["peak_rss_mb"].max()
        wall_ratio = wall / reference.at[rule, "wall_s"] if reference.at[rule, "wall_s"] > 0 else 0.0
        peak_ratio = peak / reference.at[rule, "peak_mb"] if reference.at[rule, "peak_mb"] > 0 else 0.0
        if wall_ratio > WALL_RATIO or peak_ratio > PEAK_RATIO:
            rows.append(
                _row(
                    "warning",
                    "cost",
                    f"wall {wall:.1f} s = {wall_ratio:.2f}× the reference's, peak "
                    f"{peak:.0f} MB = {peak_ratio:.2f}× (thresholds {WALL_RATIO:g}×, {PEAK_RATIO:g}×)",
                    method=method,
                )
            )
    return rows


def metadata_rows(missing: Mapping[str, Mapping[str, list[str]]]) -> list[dict]:
    """A method or dataset of the run without the reference or license ``celldag cite`` reads (warning)."""
    return [
        _row(
            "warning",
            "metadata",
            f"{kind} {entry_id}: no {' or '.join(fields)} (celldag cite cannot cite it)",
            method=entry_id if kind == "method" else "",
            dataset=entry_id if kind == "dataset" else "",
        )
        for kind, entries in missing.items()
        for entry_id, fields in sorted(entries.items())
        if fields
    ]


def qc_table(
    scores: pd.DataFrame,
    runs: pd.DataFrame,
    missing: Mapping[str, Mapping[str, list[str]]],
    reference_cost: pd.DataFrame | None,
    recorded: pd.DataFrame | None = None,
    flagged: Collection[tuple[str, str]] = (),
) -> pd.DataFrame:
    """Every finding (``QC_COLUMNS``), most severe first. ``missing``: kind ("method", "dataset") → id → the
    citation fields its registry entry lacks; ``reference_cost``: reference/default/cost.tsv, or None where the run
    is not the one the reference measured; ``recorded``: an earlier table whose cost findings are taken as they were
    (``celldag audit``: the reference's cost then) instead of ``reference_cost``'s; ``flagged``: the (dataset, metric)
    pairs the floor cards flag, whose scaled scores are not checked."""
    cost = (
        cost_rows(runs, reference_cost)
        if recorded is None
        else recorded[recorded["check"] == "cost"][QC_COLUMNS].to_dict("records")
    )
    rows = [
        *status_rows(scores),
        *absent_rows(scores),
        *scaled_rows(scores, set(flagged)),
        *cost,
        *metadata_rows(missing),
    ]
    table = pd.DataFrame(rows, columns=QC_COLUMNS)
    order = table["severity"].map({severity: rank for rank, severity in enumerate(SEVERITIES)})
    return (
        table.assign(order=order)
        .sort_values(["order", "check", "dataset", "method", "variant", "metric"], kind="stable")
        .drop(columns="order")
        .reset_index(drop=True)
    )


def missing_citations(registries, plan) -> dict[str, dict[str, list[str]]]:
    """The citation fields (reference, license) each method and dataset entry of the plan's runs lacks."""
    fields = ("reference", "license")
    methods = sorted({run.method for run in plan.runs} | {run.chained_method for run in plan.chained})
    datasets = sorted({run.dataset for run in plan.runs})
    return {
        "method": {m: [f for f in fields if not registries.methods[m].get(f)] for m in methods},
        "dataset": {d: [f for f in fields if not registries.datasets[d].get(f)] for d in datasets},
    }


def read_cost(path: str | None) -> pd.DataFrame | None:
    """reference/default/cost.tsv, or None where there is none at ``path`` (or no path: not the default run)."""
    return pd.read_csv(path, sep="\t") if path and os.path.isfile(path) else None
