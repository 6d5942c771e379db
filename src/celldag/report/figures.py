"""The figures every track shares (the scores heatmap, the cost of each run) and the job that draws one figure.

A figure job reads what its ``Figure.needs`` names, fills a ``FigureData``, calls the figure's
``draw`` and writes one PNG. PNGs are deterministic: Agg rendering, no timestamp or version in the
file (``metadata={"Software": None}``), so an unchanged input gives an identical file. Every figure is made
by ``new_figure``, whose layout wraps each title to fit (``celldag.report.titles``).
Imports nothing heavy at module level: the workflow reads the figures' module at parse time. The two figures
here are listed in ``celldag.tracks.COMMON_FIGURES``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from celldag import extensions
from celldag.tracks import COMMON_FIGURES, DELTA_PREFIX, Figure, FigureData, Track

COMMON = COMMON_FIGURES  # its name before tracks held it: labs' track modules import it (docs/adding-a-track.md did)

KIND_STYLE = {  # how a row label shows what a method is: controls are what a reader must not mistake for results
    "method": {"color": "black", "fontweight": "bold", "fontstyle": "normal"},
    "baseline": {"color": "#333333", "fontweight": "normal", "fontstyle": "normal"},
    "control": {"color": "#888888", "fontweight": "normal", "fontstyle": "italic"},
}
DPI = 100


def label(key: str, kinds: Mapping[str, str]) -> str:
    """A row label: ``method/variant``, with the kind named unless it is a method under test."""
    kind = kinds.get(key, "method")
    return key if kind == "method" else f"{key} ({kind})"


def style_label(text, key: str, kinds: Mapping[str, str]) -> None:
    text.set(**KIND_STYLE[kinds.get(key, "method")])


def mean_table(scores, track: Track):
    """Methods × metrics: the mean over seeds of runs with status ok, in the track's metric order."""
    ok = scores[(scores["status"] == "ok") & ~scores["metric"].str.startswith(DELTA_PREFIX)]
    keys = ok["method"] + "/" + ok["variant"]
    table = ok.assign(key=keys).pivot_table(index="key", columns="metric", values="value", aggfunc="mean")
    return table[[metric for metric in track.metrics if metric in table.columns]]


def column_ranks(table, track: Track):
    """Per metric, each method's rank (1 = best, ties share the lower rank); missing values stay NaN."""
    return table.apply(lambda column: column.rank(ascending=not track.higher_is_better(column.name), method="min"))


def scores_heatmap(data: FigureData):
    """Methods × metrics, each column coloured from its worst (light) to its best (dark) value, with the
    mean over seeds written in each cell; the last column is the mean rank over the track's core metrics."""
    import numpy as np
    import pandas as pd

    from celldag.results.leaderboard import clipped_runs, interval_text, metric_groups, table_ranking

    table = mean_table(data.scores, data.track)
    if table.empty:
        return note_figure(f"{data.dataset}: no run with status ok")
    # controls are shown under the ranking, never in it: ranks and shading come from the other rows
    control = np.array([data.kinds.get(key) == "control" for key in table.index], dtype=bool)
    ranked, controls = table[~control], table[control].sort_index()
    ranks = column_ranks(ranked, data.track)
    core = [metric for metric in data.track.core_metrics if metric in table.columns]
    mean_rank = ranks[core].mean(axis=1)
    # rows in the leaderboard's order: its rank interval by the headline metric (celldag.results.leaderboard), then mean
    # rank
    headline = next(iter(metric_groups(data.scores, data.track).values()))[0]
    ranking = table_ranking(data.scores, [tuple(key.split("/", 1)) for key in ranked.index], headline)
    intervals = {key: ranking.intervals.get(tuple(key.split("/", 1))) for key in ranked.index}
    unranked = (len(ranked) + 1, len(ranked) + 1)  # fewer than two ok seeds: after the ranked rows
    mean_rank = mean_rank.loc[sorted(ranked.index, key=lambda key: (intervals[key] or unranked, mean_rank[key], key))]
    table = pd.concat([ranked.loc[mean_rank.index], controls])
    ranks, mean_rank = ranks.reindex(table.index), mean_rank.reindex(table.index)
    # colour by rank within the column, scaled to [0, 1] (1 = best): comparable across metrics of any range
    n_rows, n_ranked = len(table), len(ranked)
    shade = ((n_ranked - ranks) / max(n_ranked - 1, 1)).to_numpy(dtype=float)
    shade[:, [data.track.metrics[m].count for m in table.columns]] = np.nan  # a count is no score: not shaded
    shade = np.column_stack([shade, ((n_ranked - mean_rank.rank(method="min")) / max(n_ranked - 1, 1)).to_numpy()])
    columns = [*table.columns, "mean rank\n(core)"]
    headings = [arrowed(column, data.track) for column in columns]
    # height: the rows, the headings at 45° (~0.04 in a character) and a title of up to three lines
    figure = new_figure(1.2 + 0.75 * len(columns) + 2.2, 0.8 + 0.32 * n_rows + 0.04 * max(map(len, headings)))
    axes = figure.add_subplot()
    axes.imshow(np.ma.masked_invalid(shade), cmap="Blues", vmin=-0.15, vmax=1.15, aspect="auto")
    values = np.column_stack([table.to_numpy(dtype=float), mean_rank.to_numpy(dtype=float)])
    clipped = {f"{method}/{variant}/{metric}" for method, variant, metric in clipped_runs(data.scores, data.track)}
    for row in range(n_rows):
        for column in range(len(columns)):
            value = values[row, column]
            if np.isfinite(value):
                text = f"{value:.1f}" if column == len(columns) - 1 else f"{value:.3f}"
                if column < len(table.columns) and f"{table.index[row]}/{table.columns[column]}" in clipped:
                    text += "‡"  # a seed's raw value was clipped (the leaderboard says in how many)
                axes.text(
                    column,
                    row,
                    text,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if shade[row, column] > 0.6 else "black",
                )
    axes.set_xticks(range(len(columns)), headings, rotation=45, ha="right", fontsize=7)
    rank_labels = {key: f"  [{interval_text(interval)}]" for key, interval in intervals.items() if interval}
    axes.set_yticks(
        range(n_rows), [label(key, data.kinds) + rank_labels.get(key, "") for key in table.index], fontsize=7
    )
    for text, key in zip(axes.get_yticklabels(), table.index):
        style_label(text, key, data.kinds)
    axes.axvline(len(columns) - 1.5, color="black", linewidth=1)
    if len(controls) and n_ranked:
        axes.axhline(n_ranked - 0.5, color="black", linewidth=1)  # the controls below: not ranked
    axes.set_title(
        f"{data.dataset}: mean over seeds (status ok); darker = better in its column; [ranks] by {headline}, as in "
        "the leaderboard" + ("; controls (grey, below the line) not ranked" if len(controls) else ""),
        fontsize=9,
    )
    return figure


def arrowed(metric: str, track: Track) -> str:
    from celldag.report.leaderboard import metric_heading  # pandas: not at import, which every parse pays

    if metric not in track.metrics:
        return metric
    return metric_heading(metric, "↑" if track.higher_is_better(metric) else "↓", track)


def cost(data: FigureData):
    """Wall time and peak memory of every run (one dot per seed, log scale), slowest method on top."""
    runs = data.runs[data.runs["status"] != "not_applicable"]
    if runs.empty:
        return note_figure(f"{data.dataset}: no run")
    runs = runs.assign(key=runs["method"] + "/" + runs["variant"])
    order = runs.groupby("key")["wall_time_s"].median().sort_values(kind="stable").index
    position = {key: index for index, key in enumerate(order)}
    figure = new_figure(9, 0.9 + 0.3 * len(order))
    time_axes, memory_axes = figure.subplots(1, 2, sharey=True)
    for axes, column, title in (
        (time_axes, "wall_time_s", "wall time (s)"),
        (memory_axes, "peak_rss_mb", "peak RSS (MB)"),
    ):
        failed = runs["status"] != "ok"
        for subset, marker, colour in ((runs[~failed], "o", "#1f77b4"), (runs[failed], "x", "#d62728")):
            axes.scatter(subset[column], subset["key"].map(position), marker=marker, color=colour, s=18, zorder=3)
        axes.set_xscale("log")
        axes.set_xlabel(title, fontsize=8)
        axes.grid(axis="x", which="both", alpha=0.3)
        axes.tick_params(labelsize=7)
    time_axes.set_yticks(range(len(order)), [label(key, data.kinds) for key in order])
    for text, key in zip(time_axes.get_yticklabels(), order):
        style_label(text, key, data.kinds)
    figure.suptitle(f"{data.dataset}: cost per run (dots: seeds; × failed)", fontsize=9)
    return figure


def new_figure(width: float, height: float):
    """A figure of ``width`` × ``height`` inches at the report's DPI, in constrained layout that wraps every
    title (suptitle, axes titles) to the width it has, so none runs past the figure's edge or over the next
    panel (``celldag.report.titles.FittedTitles``)."""
    from matplotlib.figure import Figure as MplFigure

    from celldag.report.titles import FittedTitles

    return MplFigure(figsize=(width, height), dpi=DPI, layout=FittedTitles())


def note_figure(text: str):
    """A small figure that says why there is nothing to draw (a figure target must still exist)."""
    from matplotlib.figure import Figure as MplFigure

    figure = MplFigure(figsize=(6, 1.6), dpi=DPI)  # no axes, so no layout: matplotlib wraps the text as drawn
    figure.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True)
    return figure


def save_png(figure, path: str) -> None:
    from celldag import artifacts

    with artifacts.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})


def draw_figure(*, figure: Figure, data: FigureData, path: str) -> None:
    """Draw one figure and write its PNG."""
    save_png(extensions.load(figure.draw)(data), path)


def figure_data(
    *,
    dataset: str,
    dataset_entry: dict,
    track_id: str,
    track: Track,
    seed: int,
    evaluation: dict,
    kinds: Mapping[str, str],
    scores_path: str | None = None,
    record_paths: Sequence[str] = (),
    prepared_path: str | None = None,
    output_paths: Sequence[str] = (),
    table_paths: Sequence[str] = (),
) -> FigureData:
    """Read what a figure job was given (paths it was not given stay empty)."""
    from celldag import artifacts, contracts

    scores = runs = prepared = None
    if scores_path:
        scores = artifacts.read_scores(scores_path)
    if record_paths:
        from celldag.results.leaderboard import collect_runs

        runs = collect_runs(record_paths)
    if prepared_path:
        prepared = artifacts.read_h5ad(prepared_path, contracts.check_prepared_dataset, track_id=track_id, track=track)
    outputs = {}
    for path in output_paths:
        output = artifacts.read_h5ad(path, contracts.check_method_output, track=track)
        outputs[f"{output.uns['method_id']}/{output.uns['variant']}"] = output
    return FigureData(
        dataset,
        dataset_entry,
        track_id,
        track,
        seed,
        evaluation,
        dict(kinds),
        scores,
        runs,
        prepared,
        outputs,
        tuple(table_paths),
    )
