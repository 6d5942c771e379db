"""The annotation track's figures: coverage of every group against 1 − α, and set size against worst-group coverage."""

from __future__ import annotations

import numpy as np

from celldag.annotation.track import PROCEDURES, RULES
from celldag.report.figures import label, new_figure, note_figure, style_label
from celldag.tracks import FigureData

NO_RUN = "no annotation run finished with status ok"  # the note a figure shows instead
GROUP_STYLE = {"batch": ("tab:blue", "o", 28), "type": ("tab:orange", "s", 18), "batch_type": ("0.6", ".", 10)}
PROCEDURE_STYLE = {
    "kandinsky": ("tab:red", "*"),
    "split_lac": ("0.3", "o"),
    "split_aps": ("0.6", "v"),
    "class_conditional": ("tab:green", "s"),
    "class_conditional_pooled": ("tab:olive", "p"),
    "mondrian_batch": ("tab:blue", "D"),
    "kandinsky_augmented": ("tab:purple", "P"),
    "kandinsky_augmented_unrandomised": ("tab:pink", "X"),
    "label_shift": ("tab:orange", "^"),
}


def target(alpha: float) -> str:
    """The target, "1 − α = 0.9", with non-breaking spaces: a title wrapped to fit keeps it on one line."""
    return f"1\u00a0−\u00a0α\u00a0=\u00a0{1 - alpha:g}"


def alpha_of(data: FigureData) -> float:
    from celldag.annotation.scoring import options

    return float(options(data.evaluation)["alpha"])


def coverage_by_group(data: FigureData):
    """Per procedure (panel) and run (row): the query coverage of each batch, cell type and batch × type
    of the figure's seed (groups of at least ``min_group_cells`` query cells), the marginal coverage (|)
    and the 1 − α line."""
    from celldag.annotation.metrics import group_coverage
    from celldag.annotation.scoring import Settings, query_groupings, random_split

    settings = Settings.of(data.evaluation)
    alpha, min_cells, procedures = settings.alpha, settings.min_cells, settings.procedures
    ok = {key: output for key, output in sorted(data.outputs.items()) if output.uns["status"] == "ok"}
    if not ok:
        return note_figure(NO_RUN)
    task = data.prepared
    # height: the axis, the suptitle and panel titles of up to three lines (a long procedure name wraps), the rows
    figure = new_figure(3.0 * len(procedures) + 2.5, 1.5 + 0.28 * len(ok))
    panels = figure.subplots(1, len(procedures), sharey=True, squeeze=False)[0]
    rows = list(ok)
    for key, output in ok.items():
        scenario, truth, query = random_split(task, output, settings)
        sets = scenario.sets  # a procedure that failed on this run has no sets: its panel leaves the row empty
        groupings = query_groupings(task, query)
        y = rows.index(key)
        for axes, procedure in ((axes, procedure) for axes, procedure in zip(panels, procedures) if procedure in sets):
            for kind, members in groupings.items():
                table = group_coverage(sets[procedure], truth, members)
                table = table[table["n"] >= min_cells]
                colour, marker, size = GROUP_STYLE[kind]
                axes.scatter(
                    table["coverage"],
                    np.full(len(table), y),
                    c=colour,
                    marker=marker,
                    s=size,
                    alpha=0.8,
                    label=kind.replace("_", " × ") if y == 0 else None,
                    zorder=2,
                )
            marginal = sets[procedure][np.arange(len(truth)), truth].mean()
            axes.scatter(
                [marginal], [y], marker="|", c="black", s=150, zorder=3, label="every query cell" if y == 0 else None
            )
    for axes, procedure in zip(panels, procedures):
        axes.axvline(1 - alpha, color="tab:red", lw=1, ls="--", zorder=1)
        axes.set_title(PROCEDURES[procedure], fontsize=9)
        axes.set_xlabel("coverage of the query cells")
        axes.set_xlim(min(0.5, axes.get_xlim()[0]), 1.02)
        axes.grid(axis="x", alpha=0.3)
    panels[0].set_yticks(range(len(rows)), [label(key, data.kinds) for key in rows], fontsize=8)
    for text, key in zip(panels[0].get_yticklabels(), rows):
        style_label(text, key, data.kinds)
    panels[0].invert_yaxis()
    panels[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    figure.suptitle(
        f"{data.dataset}: coverage per group, seed {data.seed} (dashed: {target(alpha)}; rows: classifier/embedding)",
        fontsize=10,
    )
    return figure


def run_means(data: FigureData):
    """Each classifier/embedding's mean over seeds of every metric (rows (method, variant), a column per metric),
    runs with status ok alone; None when no run is ok."""
    scores = data.scores[data.scores["status"] == "ok"]
    if scores.empty:
        return None
    return scores.pivot_table(index=["method", "variant"], columns="metric", values="value", aggfunc="mean")


def set_size_vs_coverage(data: FigureData):
    """Mean set size against the worst batch or cell-type coverage, one point per run and procedure (mean
    over seeds): the better runs sit near the 1 − α line at the left."""
    alpha = alpha_of(data)
    means = run_means(data)
    if means is None:
        return note_figure(NO_RUN)
    figure = new_figure(8, 5.5)
    axes = figure.subplots()
    for procedure, title in PROCEDURES.items():
        if f"{procedure}_set_size" not in means:  # a procedure evaluation.annotation.procedures leaves out
            continue
        worst = means[[f"{procedure}_worst_batch", f"{procedure}_worst_type"]].min(axis=1)
        colour, marker = PROCEDURE_STYLE[procedure]
        axes.scatter(means[f"{procedure}_set_size"], worst, c=colour, marker=marker, s=36, alpha=0.75, label=title)
    axes.axhline(1 - alpha, color="tab:red", lw=1, ls="--")
    axes.set_xlabel("mean set size (query cells)")
    axes.set_ylabel("worst coverage of a batch or a cell type")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, frameon=False, loc="lower right")
    axes.set_title(
        f"{data.dataset}: one point per classifier/embedding and procedure, mean over seeds (dashed: {target(alpha)})",
        fontsize=10,
    )
    return figure


RULE_STYLE = {"confident": ("black", "X"), "best_match": ("tab:olive", "D"), "prob_match": ("tab:brown", "P")}


def risk_coverage(data: FigureData):
    """The share of query cells answered with one type (x) against the error among them (y), one point per run and
    procedure (its singleton sets) or tool rule (``track.RULES``), mean over seeds: a rule that answers more cells at
    a lower error sits at the bottom right. Random split."""
    means = run_means(data)
    if means is None:
        return note_figure(NO_RUN)
    figure = new_figure(8, 5.5)
    axes = figure.subplots()
    styles = {procedure: (PROCEDURE_STYLE[procedure], title) for procedure, title in PROCEDURES.items()}
    styles |= {rule: (RULE_STYLE[rule], text) for rule, text in RULES.items()}
    for name, ((colour, marker), title) in styles.items():
        if f"{name}_singletons" not in means:  # a procedure left out, or a rule no run has (CellTypist's)
            continue
        answered, wrong = means[f"{name}_singletons"], means[f"{name}_singleton_errors"]
        error = wrong / answered.where(answered > 0)  # a run that answers no cell with one type has no point
        axes.scatter(answered, error, c=colour, marker=marker, s=36, alpha=0.75, label=title)
    axes.set_xlabel("share of query cells answered with one type")
    axes.set_ylabel("error among them")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, frameon=False, loc="upper left")
    axes.set_title(
        f"{data.dataset}: one point per classifier/embedding and procedure or tool rule, mean over seeds", fontsize=10
    )
    return figure
