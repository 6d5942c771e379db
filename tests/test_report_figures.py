"""The report's shared figures (scores heatmap, cost), the figure job's PNGs and the static index page."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from celldag.report import figures, html
from celldag.report.leaderboard import leaderboard_blocks, markdown
from conftest import TRACKS

LINEAGE = TRACKS["lineage"]
KINDS = {"celltreeqm/high_level_partition_relabelled": "control", "nj_raw/default": "baseline"}


def scores_table() -> pd.DataFrame:
    rows = []
    values = {"nj_raw/default": (0.5, 0.3), "upgma_raw/default": (0.7, 0.2), "celltreeqm/high_level_partition_relabelled": (0.6, 0.4)}
    for key, (rf, quartet) in values.items():
        method, variant = key.split("/")
        for seed, shift in ((0, -0.1), (1, 0.1)):
            rows += [{"dataset": "bm", "track": "lineage", "method": method, "variant": variant, "seed": seed, "metric": m,
                      "value": v + shift, "higher_is_better": False, "status": "ok"}
                     for m, v in (("rf", rf), ("quartet_dist", quartet))]  # fmt: skip
    rows.append({"dataset": "bm", "track": "lineage", "method": "broken", "variant": "default", "seed": 0, "metric": "rf",
                 "value": float("nan"), "higher_is_better": False, "status": "failed"})  # fmt: skip
    return pd.DataFrame(rows)


def figure_data(**fields) -> figures.FigureData:
    return figures.FigureData("bm", {}, "lineage", LINEAGE, 0, {}, KINDS, **fields)


def png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=figures.DPI, metadata={"Software": None})
    return buffer.getvalue()


def test_the_heatmap_table_holds_means_of_ok_runs_and_ranks_by_direction():
    table = figures.mean_table(scores_table(), LINEAGE)
    assert list(table.columns) == ["rf", "quartet_dist"]  # the track's order, only metrics present
    assert "broken/default" not in table.index  # failed: no value to show
    assert table.loc["upgma_raw/default", "rf"] == pytest.approx(0.7)
    ranks = figures.column_ranks(table, LINEAGE)  # lower is better for both
    assert ranks["rf"].to_dict() == {"celltreeqm/high_level_partition_relabelled": 2.0, "nj_raw/default": 1.0, "upgma_raw/default": 3.0}
    assert ranks["quartet_dist"]["upgma_raw/default"] == 1.0


def test_the_heatmap_marks_controls_and_baselines_and_is_deterministic():
    data = figure_data(scores=scores_table())
    first = figures.scores_heatmap(data)
    labels = [text.get_text() for text in first.axes[0].get_yticklabels()]
    # rows sorted by mean rank over the core metrics present (rf, quartet_dist): nj_raw (1, 2), upgma (3, 1), control (2, 3)
    assert labels == ["nj_raw/default (baseline)", "upgma_raw/default", "celltreeqm/high_level_partition_relabelled (control)"]
    styles = {t.get_text(): t.get_fontstyle() for t in first.axes[0].get_yticklabels()}
    assert styles["celltreeqm/high_level_partition_relabelled (control)"] == "italic"
    assert png(first) == png(figures.scores_heatmap(data))


def test_a_control_better_than_every_method_stays_under_the_ranking_in_the_heatmap():
    scores = scores_table()
    control = scores["method"] == "celltreeqm"
    scores.loc[control, "value"] = 0.01  # best on both metrics
    figure = figures.scores_heatmap(figure_data(scores=scores))
    axes = figure.axes[0]
    labels = [text.get_text() for text in axes.get_yticklabels()]
    assert labels[-1] == "celltreeqm/high_level_partition_relabelled (control)"
    assert [line.get_ydata()[0] for line in axes.get_lines() if line.get_ydata()[0] == line.get_ydata()[1]] == [1.5]
    cells = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in axes.texts}
    assert cells[(0, 2)] == "0.010" and (2, 2) not in cells  # its values shown, no mean rank
    assert cells[(2, 0)] == "1.5" and cells[(2, 1)] == "1.5"  # ranks among the non-controls only


def test_cost_plots_every_applicable_run_on_log_axes():
    runs = pd.DataFrame({"dataset": "bm", "method": ["nj_raw", "nj_raw", "scvi", "broken"], "variant": "default",
                         "seed": [0, 1, 0, 0], "status": ["ok", "ok", "not_applicable", "failed"],
                         "wall_time_s": [1.0, 2.0, 0.1, 3.0], "peak_rss_mb": [100.0, 120.0, 90.0, 80.0]})  # fmt: skip
    figure = figures.cost(figure_data(runs=runs))
    time_axes, memory_axes = figure.axes
    assert time_axes.get_xscale() == "log" and memory_axes.get_xscale() == "log"
    labels = [t.get_text() for t in time_axes.get_yticklabels()]
    assert labels == ["nj_raw/default (baseline)", "broken/default"]  # by median time, slowest at the top
    plotted = sum(len(collection.get_offsets()) for collection in time_axes.collections)
    assert plotted == 3  # scvi was not applicable


def test_the_index_page_shows_tables_figures_captions_and_runs_not_ok(tmp_path):
    scores = scores_table()
    runs = pd.DataFrame({"dataset": "bm", "method": ["nj_raw", "broken"], "variant": "default", "seed": 0,
                         "status": ["ok", "failed"], "status_reason": ["", "ValueError: <bad> features"],
                         "record": ["results/runs/bm/nj_raw/default/k/seed0/run.json",
                                    "results/runs/bm/broken/default/k/seed0/run.json"]})  # fmt: skip
    shown = [html.ShownFigure("bm", "scores", "results/x/figures/bm/scores.png", "Every ``metric`` of the dataset.")]
    page = html.index_page(scores=scores, runs=runs, tracks=TRACKS, figures=shown, index_path="results/x/index.html",
                           kinds=KINDS, links=["results/x/scores.parquet"])  # fmt: skip
    assert '<h2 id="bm">bm (lineage)</h2>' in page
    assert page.index('<h2 id="bm">') < page.index('<img src="figures/bm/scores.png"') < page.index('id="not-ok"')
    assert "Every <code>metric</code> of the dataset." in page
    assert '<tr class="control"><td>celltreeqm</td><td>high_level_partition_relabelled</td>' in page
    assert "ValueError: &lt;bad&gt; features" in page  # escaped
    assert '<a href="../logs/run_method/bm/broken/default/k/seed0.log">log</a>' in page
    assert '<a href="scores.parquet">scores.parquet</a>' in page
    assert "<script" not in page


def test_markdown_and_html_leaderboards_hold_the_same_cells():
    blocks = leaderboard_blocks(scores_table(), TRACKS)
    text, page = markdown(blocks), "".join(html.render(blocks))
    cell = "0.500 ± 0.141"  # nj_raw rf over seeds 0.4, 0.6
    assert f"| nj_raw | default | {cell} |" in text and f"<td>{cell}</td>" in page
