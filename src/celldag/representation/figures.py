"""The representation track's report figures: UMAPs of the cell embeddings, marker genes in gene-embedding
space (static vs contextual) and the paired differences the run config asks for.

Each ``draw`` takes a ``celldag.tracks.FigureData`` and returns a ``matplotlib.figure.Figure`` made
without pyplot (no global state, no display), the same pixels for the same inputs: fixed random
states, a fixed point order, no timestamps. Heavy imports live inside the functions, so the track
module can name these functions without importing matplotlib or scanpy.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cache
from typing import TYPE_CHECKING

from celldag.report import figures as report_figures
from celldag.representation.metrics import marker_clustering, marker_types
from celldag.representation.numba_cache import cache_umap_graph_kernels
from celldag.representation.scoring import CONTROLS, static_gene_space, stratified_subsample
from celldag.results.leaderboard import paired_rows

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

    from celldag.tracks import FigureData

PANEL_INCHES = 2.6  # side of one scatter panel
METHODS_PER_ROW = 3  # UMAP grid: methods side by side before wrapping to the next row
POINT_SIZE = 3.0  # UMAP points (700 to a few thousand cells per panel)
UMAP_MAX_CELLS = 20_000  # larger datasets: the UMAPs show a seeded stratified subsample of this many cells


def palette(
    categories: list[str], qualitative: tuple[str, ...] = ("tab10", "tab20"), avoid: Collection[tuple] = ()
) -> dict[str, tuple]:
    """A colour per category, in the order given: the first qualitative colour map with enough colours
    not in ``avoid`` (another colouring's, in the same figure), else evenly spaced hues that avoid them."""
    import matplotlib
    import numpy as np

    n, avoid = len(categories), {tuple(np.round(colour[:3], 6)) for colour in avoid}

    def usable(colours) -> list[tuple]:
        return [tuple(colour) for colour in colours if tuple(np.round(colour[:3], 6)) not in avoid]

    fitting = [usable(matplotlib.colormaps[name].colors) for name in qualitative]
    fitting = [colours for colours in fitting if len(colours) >= n]
    if fitting:
        colours = fitting[0][:n]
    else:
        colours = usable(matplotlib.colormaps["turbo"](np.linspace(0.05, 0.95, n + len(avoid))))[:n]
    return {category: tuple(colour) for category, colour in zip(categories, colours)}


BATCH_COLOURS = ("Dark2", "tab20b")  # not the cell types' tab10/tab20, and never one of their colours


def label_colours(labels: pd.Series) -> dict[str, tuple]:
    """The dataset's cell types → colours: one palette for every figure of the dataset (UMAP, markers)."""
    return palette(categories_of(labels))


def categories_of(values: pd.Series) -> list[str]:
    """Category names in their declared order (categorical) or sorted: the same order in every panel."""
    if hasattr(values, "cat"):
        return [str(category) for category in values.cat.categories if (values == category).any()]
    return sorted(set(values.astype(str)))


def add_legends(
    figure: Figure, colourings: dict[str, dict[str, tuple]], where: str = "right upper", ncols: int = 1
) -> None:
    """One legend outside the panels (they share it) holding every colouring, each under its own heading,
    so that the batches' colours sit right under the cell types'; constrained layout makes room."""
    from matplotlib.lines import Line2D

    handles, names = [], []
    for title, colours in colourings.items():
        if len(colourings) > 1:  # a heading: an entry without a marker
            handles.append(Line2D([], [], linestyle="", marker=""))
            names.append(f"— {title} —")
        handles += [Line2D([], [], marker="o", linestyle="", color=colour, markersize=5) for colour in colours.values()]
        names += list(colours)
    title = next(iter(colourings)) if len(colourings) == 1 else None
    figure.legend(
        handles,
        names,
        title=title,
        loc=f"outside {where}",
        ncols=ncols,
        frameon=False,
        fontsize="small",
        title_fontsize="small",
    )


# ── UMAP grid ──────────────────────────────────────────────────────────────────────────────────────────


def ok_outputs(outputs) -> dict:
    """The outputs of runs that are ``ok`` ("method/variant" -> AnnData), in the order given."""
    return {key: output for key, output in outputs.items() if output.uns.get("status") == "ok"}


SCANPY_EXACT_NEIGHBOURS_UP_TO = 4096  # scanpy's own switch to approximate neighbours


def umap_coordinates(embedding: np.ndarray) -> np.ndarray:
    """2-D UMAP of one cell embedding: scanpy's neighbour graph and UMAP, both with random_state 0.

    Below 4,096 cells scanpy's neighbours are exact; above, its default (pynndescent) is approximate and,
    with scipy's sparse arrays, fails inside scanpy 1.11 (`csr_array` has no `getnnz`), so there the
    exact neighbours of scikit-learn's transformer are asked for. A seeded UMAP runs single-threaded:
    the same embedding gives the same coordinates at every size.
    """
    import anndata
    import numpy as np
    import scanpy as sc

    cache_umap_graph_kernels()
    adata = anndata.AnnData(np.zeros((len(embedding), 0), dtype=np.float32))
    adata.obsm["X_emb"] = np.asarray(embedding, dtype=np.float32)
    exact = {"transformer": "sklearn"} if len(embedding) > SCANPY_EXACT_NEIGHBOURS_UP_TO else {}
    sc.pp.neighbors(adata, use_rep="X_emb", random_state=0, **exact)
    sc.tl.umap(adata, random_state=0)
    return np.asarray(adata.obsm["X_umap"])


def scatter_panel(axes, coordinates: np.ndarray, values: np.ndarray, colours: dict[str, tuple], order) -> None:
    """Cells coloured by category, drawn in one fixed shuffled order so no category hides under another."""
    import numpy as np

    rgba = np.array([colours[value] for value in values[order]])
    axes.scatter(coordinates[order, 0], coordinates[order, 1], c=rgba, s=POINT_SIZE, linewidths=0, rasterized=True)
    axes.set_xticks([])
    axes.set_yticks([])
    axes.set_aspect("equal", adjustable="datalim")


def umap_rows(data: FigureData, max_cells: int = UMAP_MAX_CELLS) -> np.ndarray | None:
    """The cells a UMAP shows: None for every cell (``max_cells`` or fewer), else the scorer's stratified
    subsample (``stratified_subsample``: label × batch) of ``max_cells`` cells, drawn with the seed of
    ``evaluation.score_cells`` (0 without one) and the figure's dataset seed."""
    obs = data.prepared.obs
    if len(obs) <= max_cells:
        return None
    option = (data.evaluation or {}).get("score_cells") or {}
    batch = obs["batch"] if "batch" in obs else ["one"] * len(obs)
    return stratified_subsample(obs["label"], batch, max_cells, int(option.get("seed", 0)), data.seed)


def umap(data: FigureData) -> Figure:
    """UMAP of each ok run's cell embedding, coloured by label and batch: every cell of the prepared dataset,
    or above ``UMAP_MAX_CELLS`` cells a stratified subsample of that many (``umap_rows``; the title says so)."""
    import numpy as np

    outputs = ok_outputs(data.outputs)
    if not outputs:
        return report_figures.note_figure(f"{data.dataset}, seed {data.seed}: no run returned a cell embedding")
    rows = umap_rows(data, UMAP_MAX_CELLS)
    every = data.prepared.obs  # the palettes: those of the dataset's other figures
    obs = every if rows is None else every.iloc[rows]
    colourings = {"cell type": obs["label"]}
    if "batch" in obs and obs["batch"].nunique() > 1:  # one batch (pbmc3k): nothing to see in a batch panel
        colourings["batch"] = obs["batch"]
    colours = {"cell type": label_colours(every["label"])}
    if "batch" in colourings:
        colours["batch"] = palette(
            categories_of(every["batch"]), BATCH_COLOURS, avoid=list(colours["cell type"].values())
        )
    order = np.random.default_rng(0).permutation(len(obs))

    per_method = len(colourings)
    n_columns = per_method * min(METHODS_PER_ROW, len(outputs))
    n_rows = -(-len(outputs) // METHODS_PER_ROW)
    figure = report_figures.new_figure(PANEL_INCHES * n_columns, PANEL_INCHES * n_rows + 0.4)
    grid = figure.subplots(n_rows, n_columns, squeeze=False)
    for axes in grid.flat:
        axes.set_axis_off()  # panels past the last method stay blank
    for index, (key, output) in enumerate(outputs.items()):
        embedding = np.asarray(output.obsm["X_emb"])
        if rows is not None:
            embedding = embedding[rows]
        coordinates = umap_coordinates(embedding) if np.isfinite(embedding).all() else None
        for offset, (name, values) in enumerate(colourings.items()):
            axes = grid[index // METHODS_PER_ROW, (index % METHODS_PER_ROW) * per_method + offset]
            axes.set_axis_on()
            axes.set_title(f"{key}\n{name}", fontsize="small")
            if coordinates is None:
                axes.text(0.5, 0.5, "non-finite embedding", ha="center", va="center", transform=axes.transAxes)
                axes.set_xticks([])
                axes.set_yticks([])
                continue
            scatter_panel(axes, coordinates, values.astype(str).to_numpy(), colours[name], order)
    add_legends(figure, colours)  # one legend, the batches right under the cell types
    if rows is None:
        figure.suptitle(f"{data.dataset}: UMAP of each cell embedding (seed {data.seed}, {len(obs)} cells)")
    else:
        figure.suptitle(
            f"{data.dataset}: UMAP of each cell embedding (seed {data.seed}; a stratified subsample of "
            f"{len(rows):,} of its {len(every):,} cells, by label × batch)"
        )
    return figure


# ── marker genes: static vs contextual gene embedding ─────────────────────────────────────────────────


def davies_bouldin(vectors: np.ndarray, genes: list[str], markers: dict) -> str:
    """The marker_db value of these vectors (the scorer's function), or why there is none."""
    try:
        return f"DB {marker_clustering(vectors, genes, markers)['davies_bouldin']:.2f}"
    except ValueError:
        return "DB –: too few markers"


def principal_plane(vectors: np.ndarray) -> np.ndarray:
    """The first two principal components of the rows, signs fixed (largest loading positive) so the
    projection does not flip between LAPACK builds."""
    import numpy as np

    centred = np.asarray(vectors, dtype=np.float64) - np.mean(vectors, axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    components = components[:2]
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    plane = centred @ (components * signs[:, None]).T
    return plane if plane.shape[1] == 2 else np.column_stack([plane, np.zeros(len(plane))])


def marker_panel(
    axes,
    title: str,
    genes: list[str],
    vectors: np.ndarray,
    types: dict[str, str],
    colours: dict[str, tuple],
    markers: dict,
) -> None:
    """Marker genes of one gene space on its marker genes' principal plane, labelled and coloured by type."""
    row_of = {gene: i for i, gene in enumerate(genes)}
    shown = [gene for gene in types if gene in row_of]
    axes.set_xticks([])
    axes.set_yticks([])
    if len(shown) < 3:
        axes.set_title(title, fontsize="small")
        axes.text(0.5, 0.5, f"{len(shown)} marker genes here", ha="center", va="center", transform=axes.transAxes)
        return
    plane = principal_plane(vectors[[row_of[gene] for gene in shown]])
    axes.scatter(plane[:, 0], plane[:, 1], c=[colours[types[gene]] for gene in shown], s=30, linewidths=0)
    for (x, y), gene in zip(plane, shown):
        axes.annotate(gene, (x, y), xytext=(3, 2), textcoords="offset points", fontsize=6)
    axes.set_title(f"{title} · {davies_bouldin(vectors, genes, markers)}", fontsize="small")
    axes.set_xlabel("PC 1 of the markers", fontsize="x-small")
    axes.set_ylabel("PC 2", fontsize="x-small")


def named_as_labels(
    types: dict[str, str], marker_lists: dict, marker_labels: dict[str, str], labels: pd.Series
) -> tuple[dict[str, str], dict[str, tuple]]:
    """Marker gene → the name its cell type has in the figures, and name → colour: a marker type the
    registry maps to a label of the dataset (``marker_labels``) takes that label's name and UMAP colour;
    the others keep their marker name and get colours no label has."""
    label_colour = label_colours(labels)
    named = {cell_type: marker_labels.get(cell_type, cell_type) for cell_type in marker_lists}
    shown = [named[cell_type] for cell_type in marker_lists if cell_type in set(types.values())]
    unlabelled = [name for name in shown if name not in label_colour]
    others = palette(unlabelled, BATCH_COLOURS, avoid=list(label_colour.values()))
    colours = {name: label_colour.get(name) or others[name] for name in shown}
    return {gene: named[cell_type] for gene, cell_type in types.items()}, colours


def markers(data: FigureData) -> Figure:
    """Each ok run with a contextual gene embedding: its marker genes in the static space it started
    from (left) and in its contextual gene embedding (right), coloured by the cell type they mark."""
    import numpy as np

    from celldag.embeddings import read_table

    marker_lists = data.dataset_entry.get("markers", {})
    with_genes = {key: output for key, output in ok_outputs(data.outputs).items() if "X_gene_emb" in output.varm}
    if not marker_lists or not with_genes:
        reason = "no marker genes in the dataset entry" if not marker_lists else "no run returned a gene embedding"
        return report_figures.note_figure(f"{data.dataset}, seed {data.seed}: {reason}")
    read_table_cached = cache(read_table)  # most runs read the same static table: read it once
    present = set(next(iter(with_genes.values())).var_names)  # outputs share the genes
    types = {
        gene: next(iter(of)) for gene, of in marker_types(marker_lists).items() if gene in present and len(of) == 1
    }
    types, colours = named_as_labels(
        types, marker_lists, data.dataset_entry.get("marker_labels", {}), data.prepared.obs["label"]
    )
    figure = report_figures.new_figure(2 * PANEL_INCHES + 0.4, (PANEL_INCHES + 0.3) * len(with_genes) + 0.4)
    grid = figure.subplots(len(with_genes), 2, squeeze=False)
    for row, (key, output) in enumerate(with_genes.items()):
        static = static_gene_space(output, list(data.tables), read_table_cached)
        if static is None:
            grid[row, 0].set_title(f"{key}\nstatic", fontsize="small")
            grid[row, 0].text(
                0.5,
                0.5,
                "no static table\n(the run read none)",
                ha="center",
                va="center",
                transform=grid[row, 0].transAxes,
            )
            grid[row, 0].set_axis_off()
        else:
            name = f"{key}\nstatic {output.uns['embedding']}"
            if output.uns.get("gene_input") in CONTROLS:  # the vectors it drew from the table
                name += f" ({output.uns['gene_input']})"
            marker_panel(grid[row, 0], name, *static, types, colours, marker_lists)
        contextual = np.asarray(output.varm["X_gene_emb"])
        marker_panel(
            grid[row, 1], f"{key}\ncontextual", list(output.var_names), contextual, types, colours, marker_lists
        )
    if colours:
        add_legends(figure, {"marked cell type": colours}, "lower center", ncols=min(4, len(colours)))
    figure.suptitle(f"{data.dataset}: marker genes in gene-embedding space\n(seed {data.seed})", fontsize="medium")
    return figure


# ── paired differences ────────────────────────────────────────────────────────────────────────────────


def forest_panel(axes, metric: str, rows: list[dict], position_of: dict[str, int]) -> None:
    """One metric: each comparison's mean difference with its 95 % interval on the comparison's line, the
    number of seeds at the right, the zero line and the side that is better (differences keep their sign)."""
    from matplotlib.transforms import blended_transform_factory

    at_right = blended_transform_factory(axes.transAxes, axes.transData)
    for row in rows:
        y = position_of[comparison_name(row)]
        if row["n"] >= 2:
            axes.plot([row["low"], row["high"]], [y, y], color="black", linewidth=1.5, gid="interval")
        axes.plot([row["mean"]], [y], marker="o", color="black", linestyle="", gid="mean")
        axes.text(0.98, y + 0.12, f"n={row['n']}", transform=at_right, ha="right", fontsize="x-small", color="grey")
    axes.axvline(0.0, color="grey", linewidth=0.8, linestyle="--")
    axes.margins(x=0.15)
    axes.tick_params(labelsize="x-small")
    better = "better →" if rows[0]["higher_is_better"] else "← better"
    axes.set_title(metric, fontsize="small")
    axes.set_xlabel(f"difference   ({better})", fontsize="x-small")


def comparison_name(row: dict) -> str:
    return f"{row['method']} − {row['other']}"


def paired(data: FigureData) -> Figure:
    """A forest plot of the paired differences over seeds (``evaluation.paired``): a panel per metric (their
    scales differ), a line per comparison shared by the panels."""
    comparisons = data.evaluation.get("paired") or []
    rows = paired_rows(data.scores, comparisons) if data.scores is not None else []
    if not rows:
        what = "no paired comparison in the run config" if not comparisons else "no paired comparison applies"
        return report_figures.note_figure(f"{data.dataset}: {what}")
    metrics = list(dict.fromkeys(row["metric"] for row in rows))
    names = list(dict.fromkeys(comparison_name(row) for row in rows))
    position_of = {name: len(names) - 1 - i for i, name in enumerate(names)}  # the first comparison on top
    figure = report_figures.new_figure(2.4 * len(metrics) + 2.4, 0.45 * len(names) + 1.4)
    grid = figure.subplots(1, len(metrics), squeeze=False, sharey=True)[0]
    for axes, metric in zip(grid, metrics):
        forest_panel(axes, metric, [row for row in rows if row["metric"] == metric], position_of)
    grid[0].set_yticks(list(position_of.values()), list(position_of))
    grid[0].set_ylim(-0.7, len(names) - 0.3)
    figure.suptitle(f"{data.dataset}: paired differences over seeds (mean, 95\u00a0% interval)", fontsize="medium")
    return figure
