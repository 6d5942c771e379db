"""The lineage track's report figures: true vs reconstructed trees, tree distances per run, K-/U-QDist.

Each ``draw`` takes a ``celldag.tracks.FigureData`` and returns a ``matplotlib.figure.Figure`` built
without pyplot (no global state, any backend). Nothing random or time-dependent goes in: the same
inputs give the same PNG. Heavy imports (matplotlib, numpy, pandas) happen inside the functions, so
the track module can name these functions without importing them.

Trees are unrooted for RF: a split is an unordered pair of leaf sets, kept as a bitmask over the true
leaf order (``Split``).
An estimated tree is drawn re-rooted on the edge that best matches the true tree's root split, its
children ordered by the true leaf order, so a correct tree draws without crossings in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from celldag.report.figures import label, new_figure, style_label

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from celldag.lineage.tree import Tree
    from celldag.tracks import FigureData

RAW_BASELINE = "nj_raw"  # neighbour joining on the raw features: the reference every tree panel shows
RAW_REFERENCE_ROW = "raw-feature distances"  # the partition figure's reference row (derived, not a run)

LEAF_LABELS_UP_TO = 60  # above this many leaves the names would overlap: the axis says how many instead
WRONG_COLOUR = "#d62728"
CONTROL_COLOUR = "0.5"  # hollow dots of controls; their labels follow celldag.report.figures.KIND_STYLE
SEED_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")

# A split (unrooted bipartition) is a bitmask over the leaf order (bit i: leaf_order[i]) of the side
# without leaf_order[0]: an int of n bits, so that 8,192-leaf trees keep their n − 3 splits in megabytes
# (sets of leaf names took gigabytes on unbalanced trees).
Split = int


# ---------------------------------------------------------------- splits and the best run


def split_of(side: int, n_leaves: int) -> Split:
    """The split one side (a bitmask of ``n_leaves`` bits) makes, in canonical form."""
    return side ^ ((1 << n_leaves) - 1) if side & 1 else side


def bipartition(side: Iterable[str], leaf_order: Sequence[str]) -> Split:
    """The split between the leaves ``side`` and the rest of ``leaf_order``."""
    rank = {name: position for position, name in enumerate(leaf_order)}
    return split_of(sum(1 << rank[name] for name in set(side)), len(leaf_order))


def tree_splits(tree: Tree, leaf_order: Sequence[str] | None = None) -> set[Split]:
    """The non-trivial splits of the unrooted tree (``celldag.lineage.tree.splits``) over ``leaf_order``
    (default: the tree's own)."""
    import numpy as np

    from celldag.lineage.tree import splits

    order = tree.leaf_names if leaf_order is None else leaf_order
    rows = splits(tree, order)
    packed = np.packbits(rows, axis=1, bitorder="little")
    return {split_of(int.from_bytes(row.tobytes(), "little"), len(order)) for row in packed}


def wrong_splits(estimate: Tree, truth: Tree) -> set[Split]:
    """Splits of ``estimate`` that the true tree lacks (over the truth's leaf order): the estimate's half
    of the RF distance."""
    return tree_splits(estimate, truth.leaf_names) - tree_splits(truth)


def run_key(method: str, variant: str) -> str:
    return f"{method}/{variant}"


def with_run(scores: pd.DataFrame) -> pd.DataFrame:
    """``scores`` with a ``run`` column ("method/variant")."""
    return scores.assign(run=[run_key(m, v) for m, v in zip(scores["method"], scores["variant"])])


def ok_values(scores: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Rows of ``metrics`` from ok runs with a value, with a ``run`` column."""
    rows = scores[scores["metric"].isin(metrics) & (scores["status"] == "ok") & scores["value"].notna()]
    return with_run(rows)


def mean_by_run(scores: pd.DataFrame, metric: str) -> dict[str, float]:
    """Mean over seeds of ``metric`` per run (ok runs only), lowest first, ties by run name."""
    means = ok_values(scores, [metric]).groupby("run")["value"].mean()
    return dict(sorted(means.items(), key=lambda item: (item[1], item[0])))


def best_by_rf(scores: pd.DataFrame) -> str | None:
    """The "method/variant" with the lowest mean RF over its ok seeds (ties: name order); None if none ran ok."""
    return next(iter(mean_by_run(scores, "rf")), None)


# ---------------------------------------------------------------- cladogram layout


@dataclass(frozen=True)
class Cladogram:
    """A tree laid out for drawing. Nodes are indices; unreachable ones (a suppressed root) are ignored."""

    root: int
    children: tuple[tuple[int, ...], ...]  # in drawing order (top to bottom)
    clade: tuple[int, ...]  # the leaves below each node, a bitmask over the leaf order
    x: tuple[float, ...]  # depth in edges from the root
    y: tuple[float, ...]  # leaves: rank in the leaf order; internal nodes: middle of their children
    n_leaves: int

    def edges(self) -> Iterable[tuple[int, int]]:
        """(parent, child) for every edge, in preorder."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            for child in reversed(self.children[node]):
                yield node, child
                stack.append(child)

    def split_above(self, node: int) -> Split | None:
        """The split the edge above ``node`` makes; None when one side has fewer than 2 leaves."""
        below = self.clade[node].bit_count()
        if min(below, self.n_leaves - below) < 2:
            return None
        return split_of(self.clade[node], self.n_leaves)


def cladogram(tree: Tree, leaf_order: Sequence[str], root_clade: int | None = None) -> Cladogram:
    """Lay ``tree`` out with its leaves at their rank in ``leaf_order``.

    ``root_clade`` None: drawn as rooted. Otherwise (a bitmask over ``leaf_order``) the tree is taken
    unrooted and re-rooted in the middle of the edge whose split is closest to (``root_clade`` | the
    rest), so that an estimate that recovers the true root split is drawn the way the truth is.
    """
    rank = {name: position for position, name in enumerate(leaf_order)}
    neighbours = _adjacency(tree, unrooted=root_clade is not None)
    root = 0
    if root_clade is not None:
        root = _root_on_edge(neighbours, _closest_edge(neighbours, tree, root_clade, rank))
    children = _children_from(neighbours, root)
    names = list(tree.names) + [""] * (len(neighbours) - tree.n_nodes)
    clade, rank_sum = _clades(children, root, names, rank)
    # children top to bottom by the mean rank of their leaves: a tree that matches the order draws uncrossed
    children = [sorted(kids, key=lambda kid: rank_sum[kid] / clade[kid].bit_count()) for kids in children]
    x, y = _coordinates(children, root, names, rank)
    return Cladogram(root, tuple(map(tuple, children)), tuple(clade), tuple(x), tuple(y), len(leaf_order))


def _adjacency(tree: Tree, unrooted: bool) -> list[list[int]]:
    neighbours: list[list[int]] = [[] for _ in range(tree.n_nodes)]
    for node, parent in enumerate(tree.parent.tolist()[1:], start=1):
        neighbours[node].append(parent)
        neighbours[parent].append(node)
    # a root of degree 1 or 2 is no vertex of the unrooted tree: drop it, joining its two sides
    if unrooted and len(neighbours[0]) == 1:
        (only,) = neighbours[0]
        neighbours[only].remove(0)
        neighbours[0] = []
    if unrooted and len(neighbours[0]) == 2:
        a, b = neighbours[0]
        neighbours[a][neighbours[a].index(0)] = b
        neighbours[b][neighbours[b].index(0)] = a
        neighbours[0] = []
    return neighbours


def _children_from(neighbours: list[list[int]], root: int) -> list[list[int]]:
    """Children of each node with the tree hung from ``root`` (neighbour order kept)."""
    children: list[list[int]] = [[] for _ in neighbours]
    stack, seen = [root], {root}
    while stack:
        node = stack.pop()
        for other in neighbours[node]:
            if other not in seen:
                seen.add(other)
                children[node].append(other)
                stack.append(other)
    return children


def _postorder(children: Sequence[Sequence[int]], root: int) -> list[int]:
    order, stack = [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(children[node])
    return order[::-1]


def _clades(
    children: list[list[int]], root: int, names: list[str], rank: dict[str, int]
) -> tuple[list[int], list[int]]:
    """Per node, its leaves as a bitmask over ``rank`` and the sum of their ranks."""
    clade, rank_sum = [0] * len(children), [0] * len(children)
    for node in _postorder(children, root):
        kids = children[node]
        if kids:
            for kid in kids:
                clade[node] |= clade[kid]
                rank_sum[node] += rank_sum[kid]
        else:
            clade[node], rank_sum[node] = 1 << rank[names[node]], rank[names[node]]
    return clade, rank_sum


def _closest_edge(neighbours: list[list[int]], tree: Tree, target: int, rank: dict[str, int]) -> tuple[int, int]:
    """The edge (a, b) whose split differs least from (target | rest): fewest leaves to move across it."""
    start = int(tree.leaves[0])  # any leaf: every edge then lies below some node
    children = _children_from(neighbours, start)
    clade, _ = _clades(children, start, list(tree.names), rank)
    n_leaves = tree.leaves.size
    best, best_cost = None, None
    for parent in _postorder(children, start)[::-1]:  # parents first: ties go to the edge met first
        for child in children[parent]:
            moved = (clade[child] ^ target).bit_count()
            cost = min(moved, n_leaves - moved)
            if best_cost is None or cost < best_cost:
                best, best_cost = (parent, child), cost
    return best


def _root_on_edge(neighbours: list[list[int]], edge: tuple[int, int]) -> int:
    """Insert a new root node in the middle of ``edge`` (modifies ``neighbours``); returns its index."""
    a, b = edge
    root = len(neighbours)
    neighbours.append([a, b])
    neighbours[a][neighbours[a].index(b)] = root
    neighbours[b][neighbours[b].index(a)] = root
    return root


def _coordinates(children: list[list[int]], root: int, names: list[str], rank: dict[str, int]):
    x, y = [0.0] * len(children), [0.0] * len(children)
    postorder = _postorder(children, root)
    for node in postorder[::-1]:  # parents first
        for child in children[node]:
            x[child] = x[node] + 1
    for node in postorder:
        kids = children[node]
        y[node] = (min(y[k] for k in kids) + max(y[k] for k in kids)) / 2 if kids else float(rank[names[node]])
    return x, y


# ---------------------------------------------------------------- drawing helpers


def note_axes(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, wrap=True)
    ax.set_axis_off()


def draw_cladogram(ax: Axes, layout: Cladogram, wrong: set[Split]) -> None:
    """Rectangular cladogram; edges whose split is in ``wrong`` drawn red and thick (both halves of the
    edge a re-rooted tree's root splits carry one split, so both are marked)."""
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import MaxNLocator

    plain, marked = [], []
    for parent, child in layout.edges():
        segment = [(layout.x[parent], layout.y[child]), (layout.x[child], layout.y[child])]
        (marked if layout.split_above(child) in wrong else plain).append(segment)
    for node in _postorder(layout.children, layout.root):
        kids = layout.children[node]
        if kids:  # the vertical bar joining the children
            low, high = min(layout.y[k] for k in kids), max(layout.y[k] for k in kids)
            plain.append([(layout.x[node], low), (layout.x[node], high)])
    ax.add_collection(LineCollection(plain, colors="black", linewidths=0.8))
    ax.add_collection(LineCollection(marked, colors=WRONG_COLOUR, linewidths=2.2))
    ax.set_xlim(-0.5, max(layout.x) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # depths are whole edges


# ---------------------------------------------------------------- trees


def trees(data: FigureData) -> Figure:
    """The true tree of ``data.seed`` beside the trees of the best run (mean RF) and of nj_raw."""
    from celldag.lineage.metrics import robinson_foulds
    from celldag.lineage.tree import parse_newick

    if data.prepared is None:
        raise ValueError("the trees figure needs the prepared dataset (FigureData.prepared)")
    truth = parse_newick(data.prepared.uns["tree_newick"])
    order = truth.leaf_names
    root_clade = _first_root_clade(truth)  # a bitmask over the truth's leaf order
    truth_splits = tree_splits(truth)
    panels = _tree_panels(data)
    fig = new_figure(4.0 * (1 + len(panels)), _tree_figure_height(len(order)))
    axes = fig.subplots(1, 1 + len(panels), sharey=True, squeeze=False)[0]
    draw_cladogram(axes[0], cladogram(truth, order), set())
    axes[0].set_title(f"true tree\n\nseed {data.seed}: {len(truth_splits)} splits", fontsize=9)
    for ax, (run, role) in zip(axes[1:], panels):
        output = data.outputs.get(run)
        status = "not run" if output is None else str(output.uns.get("status", "unknown"))
        if status != "ok":
            note_axes(ax, f"{label(run, data.kinds)}\n{role}\nseed {data.seed}: {status}")
            continue
        estimate = parse_newick(output.uns["tree_newick"])
        wrong = wrong_splits(estimate, truth)
        draw_cladogram(ax, cladogram(estimate, order, root_clade), wrong)
        rf = robinson_foulds(estimate, truth).normalized
        counts = f"{len(wrong)} of {len(tree_splits(estimate))} splits not in truth"
        title = ax.set_title(f"{label(run, data.kinds)}\n{role}\nseed {data.seed}: RF {rf:.3f}, {counts}", fontsize=9)
        style_label(title, run, data.kinds)
    _leaf_axis(axes[0], order)
    _wrong_split_legend(fig)
    for ax in axes:
        ax.set_xlabel("depth (edges from root)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig


def _wrong_split_legend(fig: Figure) -> None:
    from matplotlib.lines import Line2D

    marked = Line2D([], [], color=WRONG_COLOUR, linewidth=2.2, label="edge whose split is not in the true tree")
    fig.legend(handles=[marked], loc="outside lower center", fontsize=8, frameon=False)


def _first_root_clade(truth: Tree) -> int:
    """The leaves below the true root's first child (a bitmask over the truth's leaf order): one side of
    the true root split, at the top of the order."""
    first_child = truth.children[0][0]
    start, stop = truth.leaf_span
    return ((1 << int(stop[first_child])) - 1) ^ ((1 << int(start[first_child])) - 1)


def _tree_panels(data: FigureData) -> list[tuple[str, str]]:
    """(run, role) per estimated-tree panel: the best run by mean RF, then nj_raw's runs (once each)."""
    best = best_by_rf(data.scores)
    panels = [] if best is None else [(best, f"best: mean RF {mean_by_run(data.scores, 'rf')[best]:.3f}")]
    panels += [
        (run, "raw-feature reference")
        for run in sorted(data.outputs)
        if run.split("/", 1)[0] == RAW_BASELINE and run != best
    ]
    return panels


def _tree_figure_height(n_leaves: int) -> float:
    """Inches: room for a leaf name per row while names are shown, at most 10 (the report's page)."""
    return min(max((0.16 if n_leaves <= LEAF_LABELS_UP_TO else 0.07) * n_leaves, 4.0), 10.0)


def _leaf_axis(ax: Axes, order: Sequence[str]) -> None:
    """Leaves top to bottom in the true order; names only while they stay legible."""
    ax.set_ylim(len(order) - 0.5, -0.5)
    if len(order) <= LEAF_LABELS_UP_TO:
        # points per row, less ~1.3 in of titles and axis labels; 3/4 of a row keeps names apart
        row_points = 72 * (_tree_figure_height(len(order)) - 1.3) / len(order)
        ax.set_yticks(range(len(order)), order, fontsize=max(4.0, min(8.0, 0.75 * row_points)))
    else:
        ax.set_yticks([])
        ax.set_ylabel(f"{len(order)} leaves, true-tree order", fontsize=8)


# ---------------------------------------------------------------- per-run distances


def distances(data: FigureData) -> Figure:
    """RF and exact quartet distance per run, one dot per seed, runs ordered by mean RF."""
    return _dot_figure(data.scores, ("rf", "quartet_dist"), data.kinds)


def partition(data: FigureData) -> Figure:
    """K-QDist and U-QDist of the high-level-partition runs, with the raw-feature distances on the same quartets."""
    metrics = ("k_qdist", "u_qdist")
    if ok_values(data.scores, metrics).empty:
        fig = new_figure(6.0, 2.5)
        note_axes(fig.add_subplot(), "no high-level-partition runs on this dataset")
        return fig
    return _dot_figure(data.scores, metrics, data.kinds, reference=raw_reference(data.scores))


def raw_reference(scores: pd.DataFrame) -> pd.DataFrame:
    """QDist of the raw-feature distances on the K / U quartets, per seed, recovered from the runs' reductions.

    The scorer stores ``<m>_reduction_vs_raw`` = (raw − m) / raw beside ``m``, so raw = m / (1 − reduction);
    it is undefined where the reduction is 1 (a perfect run). Runs of one seed share the quartets, so the
    values agree up to rounding; distinct values (e.g. from different partition levels) are all kept.
    """
    import numpy as np
    import pandas as pd

    rows = []
    for metric in ("k_qdist", "u_qdist"):
        reduction_name = f"{metric}_reduction_vs_raw"
        pairs = ok_values(scores, [metric, reduction_name])
        wide = pairs.pivot_table(index=["run", "seed"], columns="metric", values="value")
        if not {metric, reduction_name} <= set(wide.columns):
            continue
        usable = wide[wide[reduction_name] < 1]  # nan (no raw QDist) compares False too
        raw = usable[metric] / (1 - usable[reduction_name])
        for seed, value in sorted({(int(s), round(float(v), 9)) for (_, s), v in raw.items() if np.isfinite(v)}):
            rows.append({"run": RAW_REFERENCE_ROW, "seed": seed, "metric": metric, "value": value})
    return pd.DataFrame(rows, columns=["run", "seed", "metric", "value"])


def _dot_figure(
    scores: pd.DataFrame, metrics: Sequence[str], kinds: Mapping[str, str], reference: pd.DataFrame | None = None
) -> Figure:
    import pandas as pd

    values = ok_values(scores, metrics)[["run", "seed", "metric", "value"]]
    runs = _runs_by_mean(scores, metrics)
    kinds = dict(kinds)
    labels = {run: label(run, kinds) + _not_ok_note(scores, run) for run in runs}
    if reference is not None and not reference.empty:
        values = pd.concat([values, reference], ignore_index=True)
        runs.append(RAW_REFERENCE_ROW)
        kinds[RAW_REFERENCE_ROW] = "control"  # not a run: drawn like one that must not be read as a result
        labels[RAW_REFERENCE_ROW] = RAW_REFERENCE_ROW + " (reference)"
    controls = {run for run in runs if kinds.get(run) == "control"}
    seeds = sorted(set(values["seed"].astype(int)) | set(scores["seed"].astype(int)))
    fig = new_figure(4.0 * len(metrics) + 2.5, 1.4 + 0.32 * max(len(runs), 3))
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        _dot_panel(ax, values[values["metric"] == metric], runs, seeds, controls)
        ax.set_title(f"{metric} (lower is better)", fontsize=9)
    axes[0].set_yticks(range(len(runs)), [labels[run] for run in runs], fontsize=8)
    for tick, run in zip(axes[0].get_yticklabels(), runs):
        style_label(tick, run, kinds)
    axes[0].set_ylim(len(runs) - 0.5, -0.5)
    _seed_legend(axes[-1], seeds)
    return fig


def _runs_by_mean(scores: pd.DataFrame, metrics: Sequence[str]) -> list[str]:
    """Runs with rows of ``metrics``, by mean of the first (lowest first); runs without an ok value of it
    last, by name (a run that never ran ok still gets its row for the core metrics, whose rows every run has)."""
    ranked = list(mean_by_run(scores, metrics[0]))
    present = set(with_run(scores[scores["metric"].isin(metrics)])["run"])
    return ranked + sorted(present - set(ranked))


def _not_ok_note(scores: pd.DataFrame, run: str) -> str:
    """ " (n not ok)": seeds of the run without a result (a run's status is the same on all its rows)."""
    rows = with_run(scores)
    missing = rows.loc[(rows["run"] == run) & (rows["status"] != "ok"), "seed"].nunique()
    return f" ({missing} not ok)" if missing else ""


def _dot_panel(ax: Axes, values: pd.DataFrame, runs: list[str], seeds: list[int], controls: set[str]) -> None:
    """One row per run: a dot per seed, offset by the seed's position so equal values stay visible; the mean a bar."""
    offset = _seed_offsets(seeds)
    for row, run in enumerate(runs):
        mine = values[values["run"] == run].sort_values(["seed", "value"])
        if mine.empty:
            continue
        control = run in controls
        for seed, value in zip(mine["seed"].astype(int), mine["value"]):
            colour = SEED_COLOURS[seeds.index(seed) % len(SEED_COLOURS)]
            ax.scatter(
                [value],
                [row + offset[seed]],
                s=22,
                zorder=3,
                linewidths=1.2,
                facecolors="none" if control else colour,
                edgecolors=colour,
            )
        ax.scatter(
            [mine["value"].mean()],
            [row],
            marker="|",
            s=260,
            linewidths=2,
            zorder=2,  # under the dots
            color=CONTROL_COLOUR if control else "black",
        )
    ax.grid(axis="x", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(axis="x", labelsize=7)
    ax.margins(x=0.08)


def _seed_offsets(seeds: list[int]) -> dict[int, float]:
    if len(seeds) == 1:
        return {seeds[0]: 0.0}
    step = 0.5 / (len(seeds) - 1)
    return {seed: -0.25 + step * index for index, seed in enumerate(seeds)}


def _seed_legend(ax: Axes, seeds: list[int]) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", linestyle="", color=SEED_COLOURS[i % len(SEED_COLOURS)], label=f"seed {seed}")
        for i, seed in enumerate(seeds)
    ]
    handles.append(
        Line2D([], [], marker="|", linestyle="", color="black", markersize=12, markeredgewidth=2, label="mean")
    )
    handles.append(
        Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color=CONTROL_COLOUR, label="control")
    )
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
