"""The representation track's figures on tiny synthetic inputs: same inputs give the same PNG bytes, the UMAP
grid has a panel per ok run and colouring, the forest plot draws the leaderboard's paired differences, and
the marker figure copes with runs that return no gene embedding."""

from __future__ import annotations

import io

import anndata
import numpy as np
import pandas as pd
import pytest

from celldag.embeddings.table import gene_frame, write_table
from celldag.report.leaderboard import paired_difference, paired_rows
from celldag.representation import figures
from celldag.representation.scoring import marker_scores
from celldag.representation.track import TRACK
from celldag.tracks import FigureData

LABELS = ("T", "B", "Mono")
# CD3E is listed under two types (ambiguous: left out, as the scorer does); NKG7 is not among the genes
MARKERS = {
    "T": ["CD3E", "IL7R", "CD8A"],
    "B": ["MS4A1", "CD79A", "CD79B"],
    "Mono": ["LYZ", "CD14", "S100A8"],
    "NK": ["NKG7", "CD3E"],
}
GENES = [gene for genes in list(MARKERS.values())[:3] for gene in genes] + [f"G{i}" for i in range(11)]


def prepared(n_batches: int = 2) -> anndata.AnnData:
    """60 cells, 3 labels, train / val split, ``n_batches`` batches."""
    rng = np.random.default_rng(1)
    obs = pd.DataFrame(
        {
            "label": pd.Categorical(np.repeat(LABELS, 20)),
            "batch": [f"b{i % n_batches}" for i in range(60)],
            "split": ["train"] * 48 + ["val"] * 12,
        },
        index=[f"c{i}" for i in range(60)],
    )
    return anndata.AnnData(rng.normal(size=(60, len(GENES))).astype(np.float32), obs=obs, var=pd.DataFrame(index=GENES))


def output(method: str, variant: str, status: str = "ok", gene_embedding: bool = False) -> anndata.AnnData:
    """A run's output: an 8-dim cell embedding whose clusters follow the labels; sciLaMA-like ones add a
    contextual gene embedding read from the go_text table."""
    rng = np.random.default_rng(len(method) + len(variant))
    if status != "ok":
        return anndata.AnnData(np.zeros((60, 0), dtype=np.float32), uns={"status": status})
    centres = rng.normal(scale=4.0, size=(3, 8))
    out = anndata.AnnData(
        np.zeros((60, len(GENES)), dtype=np.float32), var=pd.DataFrame(index=GENES), uns={"status": "ok", "seed": 0}
    )
    out.obsm["X_emb"] = (np.repeat(centres, 20, axis=0) + rng.normal(size=(60, 8))).astype(np.float32)
    if gene_embedding:
        out.varm["X_gene_emb"] = rng.normal(size=(len(GENES), 6)).astype(np.float32)
        gene_input = variant if variant in ("random", "shuffled") else "embeddings"
        out.uns |= {"embedding": "go_text", "gene_input": gene_input}
    return out


def figure_data(tmp_path, outputs: dict, scores: pd.DataFrame | None = None, paired=(), n_batches=2) -> FigureData:
    table = tmp_path / "embeddings" / "go_text" / "toy-abc.parquet"
    if not table.exists():
        vectors = np.random.default_rng(2).normal(size=(len(GENES) - 2, 5))  # the table lacks two genes
        write_table(gene_frame(GENES[2:], vectors), table)
    return FigureData(
        dataset="toy",
        dataset_entry={"markers": MARKERS},
        track_id="representation",
        track=TRACK,
        seed=0,
        evaluation={"paired": list(paired)},
        scores=scores,
        prepared=prepared(n_batches),
        outputs=outputs,
        tables=(str(table),),
    )


def png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def panels(figure) -> list:
    """Axes that show something (the UMAP grid switches off the blank cells past the last run)."""
    return [axes for axes in figure.axes if axes.axison]


def test_umap_grid_draws_a_panel_per_ok_run_and_colouring_the_same_pixels_twice(tmp_path):
    outputs = {
        "pca/default": output("pca", "default"),
        "scvi/batch": output("scvi", "batch", "not_applicable"),
        "harmony/default": output("harmony", "default"),
    }
    data = figure_data(tmp_path, outputs)
    figure = figures.umap(data)
    titles = [axes.get_title() for axes in panels(figure)]
    assert titles == [
        "pca/default\ncell type",
        "pca/default\nbatch",
        "harmony/default\ncell type",
        "harmony/default\nbatch",
    ]
    assert png(figure) == png(figures.umap(data))

    one_batch = figures.umap(figure_data(tmp_path, outputs, n_batches=1))
    assert [axes.get_title() for axes in panels(one_batch)] == ["pca/default\ncell type", "harmony/default\ncell type"]


def test_umap_without_an_ok_run_is_a_note(tmp_path):
    figure = figures.umap(figure_data(tmp_path, {"scvi/batch": output("scvi", "batch", "failed")}))
    assert not figure.axes and "no run returned a cell embedding" in figure.texts[0].get_text()


def scores_table() -> pd.DataFrame:
    """Three seeds of sciLaMA's text variant and two controls; the shuffled control failed on seed 2."""
    rows = []
    values = {
        "scilama/text": (0.60, 0.62, 0.65),
        "scilama/random": (0.50, 0.58, 0.51),
        "scilama/shuffled": (0.55, 0.50, 0.40),
    }
    for selector, per_seed in values.items():
        method, variant = selector.split("/")
        for seed, value in enumerate(per_seed):
            status = "failed" if (variant, seed) == ("shuffled", 2) else "ok"
            rows.append((method, variant, seed, "total", value, True, status))
            rows.append((method, variant, seed, "marker_db", 3.0 - value, False, status))
    frame = pd.DataFrame(rows, columns=["method", "variant", "seed", "metric", "value", "higher_is_better", "status"])
    return frame.assign(dataset="toy", track="representation")


PAIRED = [
    {
        "method": "scilama/text",
        "against": ["scilama/random", "scilama/shuffled"],
        "metrics": ["total", "marker_db", "batch_correction"],
    }
]


def test_the_forest_plot_draws_the_leaderboards_paired_differences(tmp_path):
    scores = scores_table()
    rows = paired_rows(scores, PAIRED)
    assert [(row["other"], row["metric"]) for row in rows] == [
        ("scilama/random", "total"),
        ("scilama/random", "marker_db"),
        ("scilama/shuffled", "total"),
        ("scilama/shuffled", "marker_db"),
    ]  # batch_correction: no rows
    for row in rows:
        assert {key: row[key] for key in ("mean", "low", "high", "n")} == paired_difference(
            scores, "scilama/text", row["other"], row["metric"]
        )

    figure = figures.paired(figure_data(tmp_path, {}, scores, PAIRED))
    by_metric = {axes.get_title(): axes for axes in figure.axes}
    assert list(by_metric) == ["total", "marker_db"]
    assert "better →" in by_metric["total"].get_xlabel() and "← better" in by_metric["marker_db"].get_xlabel()
    first = figure.axes[0]  # the panels share the comparison lines; the first labels them
    comparison_at = {tick: label.get_text() for tick, label in zip(first.get_yticks(), first.get_yticklabels())}
    assert list(comparison_at.values()) == ["scilama/text − scilama/random", "scilama/text − scilama/shuffled"]
    for metric, axes in by_metric.items():  # read the drawn intervals and means back, with their line's label
        drawn = {
            (comparison_at[line.get_ydata()[0]], line.get_gid()): list(line.get_xdata())
            for line in axes.lines
            if line.get_gid() in ("interval", "mean")
        }
        expected = {}
        for row in rows:
            if row["metric"] == metric:
                name = f"{row['method']} − {row['other']}"
                expected |= {(name, "interval"): [row["low"], row["high"]], (name, "mean"): [row["mean"]]}
        assert drawn == expected
    assert png(figure) == png(figures.paired(figure_data(tmp_path, {}, scores, PAIRED)))


@pytest.mark.parametrize(
    "paired, note",
    [
        ([], "no paired comparison in the run config"),
        (
            [{"method": "pca/default", "against": ["harmony/default"], "metrics": ["total"]}],
            "no paired comparison applies",
        ),
    ],
)
def test_the_forest_plot_without_a_comparison_that_applies_is_a_note(tmp_path, paired, note):
    figure = figures.paired(figure_data(tmp_path, {}, scores_table(), paired))
    assert not figure.axes and note in figure.texts[0].get_text()


def test_markers_static_beside_contextual_with_the_scorers_davies_bouldin(tmp_path):
    outputs = {
        "scilama/text": output("scilama", "text", gene_embedding=True),
        "scilama/random": output("scilama", "random", gene_embedding=True),
        "pca/default": output("pca", "default"),
    }
    data = figure_data(tmp_path, outputs)
    figure = figures.markers(data)
    titles = [axes.get_title() for axes in figure.axes]
    assert len(titles) == 4 and titles[0].startswith("scilama/text\nstatic go_text ·")
    assert titles[2].startswith("scilama/random\nstatic go_text (random) ·")
    for row, key in enumerate(("scilama/text", "scilama/random")):  # the scorer's numbers, control redrawn
        scored = marker_scores(outputs[key], MARKERS, list(data.tables))
        assert titles[2 * row].endswith(f" · DB {scored['marker_db_static']:.2f}")
        assert titles[2 * row + 1] == f"{key}\ncontextual · DB {scored['marker_db']:.2f}"
    assert png(figure) == png(figures.markers(data))


def test_markers_without_a_gene_embedding_is_a_note(tmp_path):
    figure = figures.markers(figure_data(tmp_path, {"pca/default": output("pca", "default")}))
    assert not figure.axes and "no run returned a gene embedding" in figure.texts[0].get_text()


def legend_colours(figure) -> dict[str, tuple]:
    """Legend entry → its marker's RGB, of every legend of the figure (headings have no marker)."""
    colours = {}
    for legend in figure.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            if handle.get_marker() not in ("", "None", None):
                colours[text.get_text()] = tuple(np.round(matplotlib_rgb(handle.get_color()), 6))
    return colours


def matplotlib_rgb(colour) -> tuple:
    import matplotlib.colors

    return matplotlib.colors.to_rgb(colour)


@pytest.mark.parametrize("n_labels", [3, 12, 25])  # tab10, tab20, evenly spaced hues
def test_no_batch_shares_a_colour_with_a_cell_type_and_one_legend_holds_both(n_labels):
    labels = pd.Series(pd.Categorical([f"type{i:02d}" for i in range(n_labels)] * 2))
    types = figures.label_colours(labels)
    batches = figures.palette([f"b{i}" for i in range(12)], figures.BATCH_COLOURS, avoid=list(types.values()))
    rounded = {tuple(np.round(colour[:3], 6)) for colour in types.values()}
    assert len(batches) == 12 and not rounded & {tuple(np.round(colour[:3], 6)) for colour in batches.values()}
    assert len(set(batches.values())) == 12


def test_the_umap_legend_lists_batches_under_the_cell_types_in_colours_of_their_own(tmp_path):
    figure = figures.umap(figure_data(tmp_path, {"pca/default": output("pca", "default")}, n_batches=3))
    (legend,) = figure.legends
    names = [text.get_text() for text in legend.get_texts()]
    assert names == ["— cell type —", "B", "Mono", "T", "— batch —", "b0", "b1", "b2"]
    colours = legend_colours(figure)
    assert not {colours[t] for t in ("B", "Mono", "T")} & {colours[b] for b in ("b0", "b1", "b2")}


def test_the_marker_figure_names_and_colours_cell_types_as_the_umap(tmp_path):
    outputs = {"scilama/text": output("scilama", "text", gene_embedding=True), "pca/default": output("pca", "default")}
    data = figure_data(tmp_path, outputs)
    data = FigureData(
        **{**vars(data), "dataset_entry": {"markers": MARKERS, "marker_labels": {"T": "T", "Mono": "Mono"}}}
    )
    umap_colours = legend_colours(figures.umap(data))
    marker_colours = legend_colours(figures.markers(data))
    # B has no marker_labels entry here but is a label too: it keeps its name, hence its UMAP colour
    assert set(marker_colours) == {"T", "B", "Mono"}
    assert all(marker_colours[name] == umap_colours[name] for name in marker_colours)


def test_a_marker_type_without_a_label_gets_a_colour_no_label_has():
    labels = pd.Series(pd.Categorical(["CD19+ B", "CD14+ Monocyte", "Dendritic"]))
    types, colours = figures.named_as_labels(
        {"MS4A1": "B", "LYZ": "CD14 Mono", "PPBP": "Megakaryocyte"},
        {"B": [], "CD14 Mono": [], "Megakaryocyte": []},
        {"B": "CD19+ B", "CD14 Mono": "CD14+ Monocyte"},
        labels,
    )
    assert types == {"MS4A1": "CD19+ B", "LYZ": "CD14+ Monocyte", "PPBP": "Megakaryocyte"}
    label_colours = figures.label_colours(labels)
    assert colours["CD19+ B"] == label_colours["CD19+ B"]
    assert colours["Megakaryocyte"] not in label_colours.values()


@pytest.mark.slow
def test_umap_coordinates_above_scanpys_exact_neighbour_size_are_computed_and_repeat():
    # above 4,096 cells scanpy's approximate neighbours fail on scipy sparse arrays (scanpy 1.11): exact ones
    from celldag.representation.figures import SCANPY_EXACT_NEIGHBOURS_UP_TO, umap_coordinates

    points = np.random.default_rng(0).normal(size=(SCANPY_EXACT_NEIGHBOURS_UP_TO + 100, 4)).astype(np.float32)
    points[: len(points) // 2] += 6.0  # two groups
    first = umap_coordinates(points)
    assert first.shape == (len(points), 2) and np.isfinite(first).all()
    np.testing.assert_array_equal(first, umap_coordinates(points))
