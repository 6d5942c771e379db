"""The report's shared figures (scores heatmap, cost), the figure job's PNGs, the static index page, and that
every title of every track's figures fits."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pandas as pd
import pytest
import test_representation_figures as representation_data
from conftest import TRACKS
from test_lineage_figures import figure_data as lineage_figure_data  # noqa: F401 (a fixture, by this name)

from celldag import extensions
from celldag.annotation.track import PROCEDURES
from celldag.report import figures, html
from celldag.report.leaderboard import leaderboard_blocks, markdown
from celldag.representation import figures as representation_figures

LINEAGE = TRACKS["lineage"]
KINDS = {"celltreeqm/high_level_partition_relabelled": "control", "nj_raw/default": "baseline"}


def scores_table() -> pd.DataFrame:
    rows = []
    values = {
        "nj_raw/default": (0.5, 0.3),
        "upgma_raw/default": (0.7, 0.2),
        "celltreeqm/high_level_partition_relabelled": (0.6, 0.4),
    }
    for key, (rf, quartet) in values.items():
        method, variant = key.split("/")
        for seed, shift in ((0, -0.1), (1, 0.1)):
            rows += [
                {
                    "dataset": "bm",
                    "track": "lineage",
                    "method": method,
                    "variant": variant,
                    "seed": seed,
                    "metric": m,
                    "value": v + shift,
                    "higher_is_better": False,
                    "status": "ok",
                }
                for m, v in (("rf", rf), ("quartet_dist", quartet))
            ]
    rows.append(
        {
            "dataset": "bm",
            "track": "lineage",
            "method": "broken",
            "variant": "default",
            "seed": 0,
            "metric": "rf",
            "value": float("nan"),
            "higher_is_better": False,
            "status": "failed",
        }
    )
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
    assert ranks["rf"].to_dict() == {
        "celltreeqm/high_level_partition_relabelled": 2.0,
        "nj_raw/default": 1.0,
        "upgma_raw/default": 3.0,
    }
    assert ranks["quartet_dist"]["upgma_raw/default"] == 1.0


def test_the_heatmap_marks_controls_and_baselines_and_is_deterministic():
    data = figure_data(scores=scores_table())
    first = figures.scores_heatmap(data)
    labels = [text.get_text() for text in first.axes[0].get_yticklabels()]
    # two seeds without spread in the differences separate nothing: both ranked rows share [1–2], then by mean rank
    # over the core metrics present (rf, quartet_dist): nj_raw (1, 2), upgma (3, 1); the control below, unranked
    assert labels == [
        "nj_raw/default (baseline)  [1–2]",
        "upgma_raw/default  [1–2]",
        "celltreeqm/high_level_partition_relabelled (control)",
    ]
    styles = {t.get_text(): t.get_fontstyle() for t in first.axes[0].get_yticklabels()}
    assert styles["celltreeqm/high_level_partition_relabelled (control)"] == "italic"
    assert png(first) == png(figures.scores_heatmap(data))


def test_the_heatmap_orders_its_rows_by_the_leaderboards_rank_intervals():
    """upgma_raw is best on quartet_dist, so by mean rank over the core metrics it ties nj_raw; by rf, the headline,
    four seeds separate them: nj_raw [1] above upgma_raw [2], as the leaderboard ranks them."""
    rows = []
    for method, rf, quartet in (("nj_raw", 0.30, 0.5), ("upgma_raw", 0.70, 0.1)):
        rows += [
            {
                "dataset": "bm",
                "track": "lineage",
                "method": method,
                "variant": "default",
                "seed": seed,
                "metric": metric,
                "value": value + 0.01 * seed * seed,
                "higher_is_better": False,
                "status": "ok",
            }
            for seed in range(4)
            for metric, value in (("rf", rf), ("quartet_dist", quartet))
        ]
    rows[0]["value"] += 0.002  # a seed's spread in the paired differences, so that the seeds can separate them
    labels = [
        text.get_text()
        for text in figures.scores_heatmap(figure_data(scores=pd.DataFrame(rows))).axes[0].get_yticklabels()
    ]
    assert labels == ["nj_raw/default (baseline)  [1]", "upgma_raw/default  [2]"]


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
    runs = pd.DataFrame(
        {
            "dataset": "bm",
            "method": ["nj_raw", "nj_raw", "scvi", "broken"],
            "variant": "default",
            "seed": [0, 1, 0, 0],
            "status": ["ok", "ok", "not_applicable", "failed"],
            "wall_time_s": [1.0, 2.0, 0.1, 3.0],
            "peak_rss_mb": [100.0, 120.0, 90.0, 80.0],
        }
    )
    figure = figures.cost(figure_data(runs=runs))
    time_axes, memory_axes = figure.axes
    assert time_axes.get_xscale() == "log" and memory_axes.get_xscale() == "log"
    labels = [t.get_text() for t in time_axes.get_yticklabels()]
    assert labels == ["nj_raw/default (baseline)", "broken/default"]  # by median time, slowest at the top
    plotted = sum(len(collection.get_offsets()) for collection in time_axes.collections)
    assert plotted == 3  # scvi was not applicable


def test_the_index_page_shows_tables_figures_captions_and_runs_not_ok(tmp_path):
    scores = scores_table()
    runs = pd.DataFrame(
        {
            "dataset": "bm",
            "method": ["nj_raw", "broken"],
            "variant": "default",
            "seed": 0,
            "status": ["ok", "failed"],
            "status_reason": ["", "ValueError: <bad> features"],
            "record": [
                "results/runs/bm/nj_raw/default/k/seed0/run.json",
                "results/runs/bm/broken/default/k/seed0/run.json",
            ],
        }
    )
    shown = [html.ShownFigure("bm", "scores", "results/x/figures/bm/scores.png", "Every ``metric`` of the dataset.")]
    page = html.index_page(
        scores=scores,
        runs=runs,
        tracks=TRACKS,
        figures=shown,
        index_path="results/x/index.html",
        kinds=KINDS,
        links=["results/x/scores.parquet"],
    )
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


# ---------------------------------------------------------------- every title fits

LONG_NAME = "a_dataset_whose_name_is_as_long_as_two_of_the_registrys"
# a procedure label as long as the annotation track's longest
LONG_LABEL = "Kandinsky groups, augmented fit (conditional calibration, Gibbs–Cherian–Candès)"


def runs_of(scores: pd.DataFrame) -> pd.DataFrame:
    """A run record per method, variant and seed of ``scores``, for the cost figure."""
    runs = scores[["method", "variant", "seed", "status"]].drop_duplicates()
    return runs.assign(dataset=LONG_NAME, wall_time_s=1.0 + np.arange(len(runs)), peak_rss_mb=100.0)


@pytest.fixture(scope="module")
def annotation_figure_data() -> figures.FigureData:
    """A 400-cell task (3 batches × 4 types), two runs' class probabilities and scores of every procedure."""
    import anndata

    from celldag.annotation.track import TRACK, chain_task

    rng = np.random.default_rng(0)
    labels, batches = rng.integers(4, size=400), rng.integers(3, size=400)
    obs = pd.DataFrame(
        {"label": [f"type{v}" for v in labels], "batch": [f"b{v}" for v in batches]},
        index=[f"c{i}" for i in range(400)],
    )
    x = (3 * np.eye(4)[labels] @ rng.normal(size=(4, 20)) + rng.normal(size=(400, 20))).astype(np.float32)
    task = chain_task(anndata.AnnData(x, obs=obs, uns={"dataset_id": "toy"}), {}, 0)
    outputs, rows = {}, []
    for key, sharpness in (("knn/pca/default", 2.0), ("logistic/scilama_with_a_long_variant/text", 4.0)):
        logits = sharpness * np.eye(4)[labels] + rng.normal(size=(400, 4))
        proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        outputs[key] = anndata.AnnData(
            obs=pd.DataFrame(index=task.obs_names),
            obsm={"proba_random": proba},
            uns={"status": "ok", "classes": [f"type{v}" for v in range(4)]},
        )
        method, variant = key.split("/", 1)
        rows += [
            {
                "method": method,
                "variant": variant,
                "seed": 0,
                "metric": f"{procedure}_{metric}",
                "value": rng.uniform(0.5, 1.0),
                "higher_is_better": True,
                "status": "ok",
            }
            for procedure in PROCEDURES
            for metric in ("set_size", "worst_batch", "worst_type")
        ]
    return figures.FigureData(
        "toy",
        {},
        "annotation",
        TRACK,
        0,
        {"annotation": {"alpha": 0.1, "min_group_cells": 5}},
        scores=pd.DataFrame(rows),
        prepared=task,
        outputs=outputs,
    )


@pytest.fixture
def representation_figure_data(tmp_path) -> figures.FigureData:
    outputs = {
        "scilama/text": representation_data.output("scilama", "text", gene_embedding=True),
        "pca/default": representation_data.output("pca", "default"),
    }
    return representation_data.figure_data(
        tmp_path, outputs, representation_data.scores_table(), representation_data.PAIRED
    )


def title_places(figure):
    """(title, the box it must stay in): a figure text (the suptitle) the figure, an axes title the figure
    above and below its axes (a panel's title must not run into the next panel's)."""
    from matplotlib.transforms import Bbox

    places = [(text, figure.bbox) for text in figure.texts]
    for axes in figure.axes:
        places.append((axes.title, Bbox([[axes.bbox.x0, figure.bbox.y0], [axes.bbox.x1, figure.bbox.y1]])))
    return [(text, place) for text, place in places if text.get_visible() and text.get_text()]


def inside(box, place) -> bool:
    """``box`` within ``place``, to a pixel."""
    place = place.padded(1)
    return place.x0 <= box.x0 and box.x1 <= place.x1 and place.y0 <= box.y0 and box.y1 <= place.y1


EVERY_FIGURE = [
    pytest.param(track_id, figure, id=f"{track_id}:{figure.name}")
    for track_id, track in TRACKS.items()
    for figure in track.figures
]


@pytest.mark.parametrize("track_id, figure", EVERY_FIGURE)
def test_every_title_fits_inside_the_figure_and_over_its_axes(track_id, figure, request, monkeypatch):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setitem(PROCEDURES, next(iter(PROCEDURES)), LONG_LABEL)
    monkeypatch.setattr(representation_figures, "umap_coordinates", lambda embedding: embedding[:, :2])  # titles only
    data = request.getfixturevalue(f"{track_id}_figure_data")
    data = dataclasses.replace(data, dataset=LONG_NAME, runs=runs_of(data.scores))
    drawn = extensions.load(figure.draw)(data)
    canvas = FigureCanvasAgg(drawn)
    canvas.draw()  # as save_png's savefig: the figure's own size and DPI
    places = title_places(drawn)
    assert places
    for text, place in places:
        box = text.get_window_extent(canvas.get_renderer())
        assert inside(box, place), f"{text.get_text()!r}: {box.extents.round()} outside {place.extents.round()}"
