"""Per-run scores and run records → results/scores.parquet, results/runs.parquet, results/leaderboard.md."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from celldag import contracts, io
from celldag.evaluate import TRACK_METRICS

RUN_COLUMNS = ["dataset", "method", "variant", "seed", "status", "status_reason", "wall_time_s", "peak_rss_mb",
               "device", "config_hash"]  # fmt: skip


def collect_scores(paths: Sequence[str]) -> pd.DataFrame:
    tables = [io.read_scores(path) for path in paths]
    scores = pd.concat(tables, ignore_index=True).sort_values(["dataset", "method", "variant", "metric", "seed"])
    return scores.reset_index(drop=True)


def collect_runs(paths: Sequence[str]) -> pd.DataFrame:
    records = []
    for path in paths:
        with open(path) as handle:
            record = json.load(handle)
        records.append({"dataset": record["dataset_id"], "method": record["method_id"], **record})
    return pd.DataFrame(records)[RUN_COLUMNS].sort_values(["dataset", "method", "variant", "seed"])


def _cell(values: pd.Series, statuses: pd.Series) -> str:
    ok = values[statuses == "ok"]
    if ok.empty:
        return ", ".join(sorted(set(statuses)))
    text = f"{ok.mean():.3f} ± {ok.std(ddof=1):.3f}" if len(ok) > 1 else f"{ok.iloc[0]:.3f}"
    missing = len(values) - len(ok)
    return text + (f" ({missing} not ok)" if missing else "")


def leaderboard_markdown(scores: pd.DataFrame) -> str:
    """One table per dataset: methods × metrics, mean ± sd over seeds, best mean first."""
    lines = [
        "# celldag leaderboard",
        "",
        "Mean ± sample sd over seeds (runs with status `ok`). ↓ lower is better, ↑ higher is better.",
        "Per-seed values: `results/scores.parquet`; run records: `results/runs.parquet`.",
    ]
    for (dataset, track), table in scores.groupby(["dataset", "track"], sort=True):
        known = list(TRACK_METRICS.get(track, ()))  # the track's own metric order first, then any others
        metrics = sorted(set(table["metric"]), key=lambda m: (known.index(m) if m in known else len(known), m))
        arrows = {m: "↑" if table.loc[table["metric"] == m, "higher_is_better"].iloc[0] else "↓" for m in metrics}
        rows = []
        for (method, variant), runs in table.groupby(["method", "variant"], sort=True):
            first = runs[runs["metric"] == metrics[0]]
            key = first.loc[first["status"] == "ok", "value"].mean()
            sort_key = -key if arrows[metrics[0]] == "↑" else key
            cells = [_cell(runs.loc[runs["metric"] == m, "value"], runs.loc[runs["metric"] == m, "status"]) for m in metrics]
            n_ok = int((first["status"] == "ok").sum())
            rows.append((pd.isna(sort_key), sort_key, [method, variant, *cells, f"{n_ok}/{len(first)}"]))
        lines += ["", f"## {dataset} ({track})", ""]
        lines.append("| method | variant | " + " | ".join(f"{m} {arrows[m]}" for m in metrics) + " | seeds ok |")
        lines.append("|" + "---|" * (len(metrics) + 3))
        lines += ["| " + " | ".join(cells) + " |" for _, _, cells in sorted(rows, key=lambda row: row[:2])]
    return "\n".join(lines) + "\n"


def aggregate(*, score_paths: Sequence[str], record_paths: Sequence[str], scores_path: str, runs_path: str,
              leaderboard_path: str) -> pd.DataFrame:  # fmt: skip
    scores = collect_scores(score_paths)
    contracts.check_scores(scores, scores_path)
    io.write_parquet(scores, scores_path)
    io.write_parquet(collect_runs(record_paths), runs_path)
    with io.atomic_path(leaderboard_path) as tmp:
        tmp.write_text(leaderboard_markdown(scores))
    return scores
