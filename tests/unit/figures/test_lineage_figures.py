"""The lineage track's figures: which splits are marked wrong, which run is "best", stable pixels, the panels."""

from __future__ import annotations

import io

import anndata
import numpy as np
import pandas as pd
import pytest

from celldag.lineage import figures
from celldag.lineage.track import TRACK
from celldag.lineage.tree import parse_newick
from celldag.tracks import FigureData

TRUTH = "(((A,B),C),(D,(E,F)));"  # splits AB|CDEF, ABC|DEF, EF|ABCD (the root's two edges make one)


ORDER = "ABCDEF"  # the truth's leaf order: bit i of a split is ORDER[i]


def split(side: str, other: str):
    assert set(side) | set(other) == set(ORDER) and not set(side) & set(other)
    return figures.bipartition(side, ORDER)


def mask(leaves: str) -> int:
    return sum(1 << ORDER.index(leaf) for leaf in leaves)


def test_a_split_is_the_same_from_either_side_and_is_the_side_without_the_first_leaf():
    assert split("AB", "CDEF") == split("CDEF", "AB") == mask("CDEF")
    assert figures.split_of(mask("AB"), 6) == figures.split_of(mask("CDEF"), 6) == 0b111100


def test_wrong_splits_are_the_estimates_bipartitions_missing_from_the_truth():
    truth = parse_newick(TRUTH)
    assert figures.tree_splits(truth) == {split("AB", "CDEF"), split("ABC", "DEF"), split("EF", "ABCD")}
    # unrooted like an NJ tree: A and C swapped places with B
    estimate = parse_newick("((A,C),B,(D,(E,F)));")
    assert figures.wrong_splits(estimate, truth) == {split("AC", "BDEF")}
    # the same unrooted tree as the truth, rooted elsewhere: nothing is wrong
    assert figures.wrong_splits(parse_newick("(A,B,(C,(D,(E,F))));"), truth) == set()
    # a star has no split at all, so none is wrong
    assert figures.wrong_splits(parse_newick("(A,B,C,D,E,F);"), truth) == set()


def drawn_wrong_splits(layout: figures.Cladogram, wrong: set) -> set:
    return {layout.split_above(child) for _, child in layout.edges()} & wrong


def test_the_layout_re_roots_an_estimate_on_the_true_root_split_and_marks_its_wrong_edges():
    truth = parse_newick(TRUTH)
    order = truth.leaf_names
    root_clade = figures._first_root_clade(truth)
    assert "".join(order) == ORDER and root_clade == mask("ABC")
    correct = figures.cladogram(parse_newick("(A,B,(C,(D,(E,F))));"), order, root_clade)
    assert correct.clade[correct.root] == mask(ORDER)
    assert {correct.clade[kid] for kid in correct.children[correct.root]} == {mask("ABC"), mask("DEF")}
    # drawn in the true order without crossings: every clade takes a contiguous run of rows
    for clade in correct.clade:
        rows = [i for i in range(6) if clade >> i & 1]
        assert not rows or rows == list(range(rows[0], rows[-1] + 1))
    assert [correct.y[node] for node in range(len(correct.y)) if correct.clade[node].bit_count() == 1] == [
        0,
        1,
        2,
        3,
        4,
        5,
    ]

    estimate = parse_newick("((A,C),B,(D,(E,F)));")
    wrong = figures.wrong_splits(estimate, truth)
    layout = figures.cladogram(estimate, order, root_clade)
    assert drawn_wrong_splits(layout, wrong) == wrong == {split("AC", "BDEF")}
    assert len(list(layout.edges())) == 2 * 6 - 2  # binary, rooted on an edge


def scores_table(rows) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "dataset": "d",
                "track": "lineage",
                "method": m,
                "variant": v,
                "seed": s,
                "metric": metric,
                "value": value,
                "higher_is_better": False,
                "status": status,
            }
            for m, v, s, metric, value, status in rows
        ]
    )


def test_best_run_has_the_lowest_mean_rf_over_its_ok_seeds_ties_by_name():
    scores = scores_table(
        [
            ("zeta", "default", 0, "rf", 0.2, "ok"),
            ("zeta", "default", 1, "rf", 0.0, "ok"),  # mean 0.1
            ("beta", "x", 0, "rf", 0.1, "ok"),
            ("beta", "x", 1, "rf", np.nan, "failed"),  # mean of its ok seed: 0.1
            ("gamma", "default", 0, "rf", 0.3, "ok"),
            ("gamma", "default", 0, "quartet_dist", 0.0, "ok"),
            ("alpha", "default", 0, "rf", 0.05, "failed"),  # not ok: never best, whatever its value
        ]
    )
    assert figures.best_by_rf(scores) == "beta/x"
    assert figures.best_by_rf(scores[scores["method"] == "gamma"]) == "gamma/default"
    assert figures.best_by_rf(scores[scores["method"] == "alpha"]) is None


@pytest.fixture(scope="module")
def figure_data() -> FigureData:
    """Seed 0 of a hand-made dataset: 8 leaves, nj_raw off by one swap, a better method exact."""
    truth = "(((L0,L1),(L2,L3)),((L4,L5),(L6,L7)));"
    trees = {"nj_raw/default": "((L0,L2),(L1,L3),((L4,L5),(L6,L7)));", "good/v": "((L0,L1),(L2,L3),((L4,L5),(L6,L7)));"}
    leaves = [f"L{i}" for i in range(8)]
    prepared = anndata.AnnData(X=np.zeros((8, 2)), obs=pd.DataFrame(index=leaves))
    prepared.uns["tree_newick"] = truth
    outputs = {}
    for run, newick in trees.items():
        output = anndata.AnnData(obs=pd.DataFrame(index=leaves))
        output.uns.update(status="ok", tree_newick=newick, variant=run.split("/")[1])
        outputs[run] = output
    failed = anndata.AnnData(obs=pd.DataFrame(index=leaves))
    failed.uns["status"] = "failed"
    outputs["celltreeqm/high_level_partition"] = failed
    rows = []
    for seed in (0, 1):
        rows += [
            ("nj_raw", "default", seed, "rf", 0.4, "ok"),
            ("nj_raw", "default", seed, "quartet_dist", 0.3, "ok"),
            ("good", "v", seed, "rf", 0.1 * seed, "ok"),  # mean 0.05
            ("good", "v", seed, "quartet_dist", 0.05, "ok"),
        ]
        for variant, k_qdist in (("high_level_partition", 0.2), ("high_level_partition_relabelled", 0.25)):
            status = "failed" if seed == 0 and variant == "high_level_partition" else "ok"
            rows += [("celltreeqm", variant, seed, "rf", np.nan if status != "ok" else 0.5, status)]
            if status == "ok":
                rows += [
                    ("celltreeqm", variant, seed, "k_qdist", k_qdist, "ok"),
                    ("celltreeqm", variant, seed, "k_qdist_reduction_vs_raw", 1 - k_qdist / 0.5, "ok"),
                    ("celltreeqm", variant, seed, "u_qdist", 0.4, "ok"),
                ]
    kinds = {
        "nj_raw/default": "baseline",
        "good/v": "method",
        "celltreeqm/high_level_partition": "method",
        "celltreeqm/high_level_partition_relabelled": "control",
    }  # as methods.yaml's kind / kind_by_variant
    return FigureData(
        "d", {}, "lineage", TRACK, 0, {}, kinds=kinds, scores=scores_table(rows), prepared=prepared, outputs=outputs
    )


def png_bytes(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


@pytest.mark.parametrize("name", ["trees", "distances", "partition"])
def test_drawing_twice_gives_the_same_png(figure_data, name):
    draw = getattr(figures, name)
    assert png_bytes(draw(figure_data)) == png_bytes(draw(figure_data))


def test_trees_shows_the_truth_the_best_run_and_nj_raw(figure_data):
    titles = [ax.get_title() for ax in figures.trees(figure_data).axes]
    assert len(titles) == 3
    assert titles[0].startswith("true tree")
    assert titles[1].startswith("good/v\nbest: mean RF 0.050\n") and "RF 0.000, 0 of 5 splits" in titles[1]
    # nj_raw moved L1 and L2: its splits L0L2 and L1L3 are not in the truth
    assert titles[2].startswith("nj_raw/default (baseline)\n") and "RF 0.400, 2 of 5 splits not in truth" in titles[2]


def test_trees_notes_a_run_that_failed_on_the_drawn_seed(figure_data):
    scores = figure_data.scores.copy()
    scores.loc[scores["method"] == "celltreeqm", "value"] = 0.0  # best over the seeds, failed on seed 0
    scores = scores[~((scores["method"] == "celltreeqm") & (scores["variant"].str.endswith("relabelled")))]
    fig = figures.trees(FigureData(**{**vars(figure_data), "scores": scores}))
    texts = [text.get_text() for ax in fig.axes for text in ax.texts]
    assert any(
        text.startswith("celltreeqm/high_level_partition\n") and text.endswith("seed 0: failed") for text in texts
    )


def test_distances_lists_every_run_by_mean_rf_and_marks_baselines_and_controls(figure_data):
    fig = figures.distances(figure_data)
    assert [ax.get_title() for ax in fig.axes] == ["rf (lower is better)", "quartet_dist (lower is better)"]
    labels = fig.axes[0].get_yticklabels()
    assert [label.get_text() for label in labels] == [
        "good/v",
        "nj_raw/default (baseline)",
        "celltreeqm/high_level_partition (1 not ok)",
        "celltreeqm/high_level_partition_relabelled (control)",  # ties (mean RF 0.5) by name
    ]
    italic = [label.get_text() for label in labels if label.get_fontstyle() == "italic"]
    assert italic == ["celltreeqm/high_level_partition_relabelled (control)"]


def test_partition_shows_the_partition_runs_and_the_raw_reference(figure_data):
    fig = figures.partition(figure_data)
    assert [ax.get_title() for ax in fig.axes] == ["k_qdist (lower is better)", "u_qdist (lower is better)"]
    assert [label.get_text() for label in fig.axes[0].get_yticklabels()] == [
        "celltreeqm/high_level_partition (1 not ok)",
        "celltreeqm/high_level_partition_relabelled (control)",
        "raw-feature distances (reference)",
    ]
    reference = figures.raw_reference(figure_data.scores)
    assert reference["value"].tolist() == pytest.approx([0.5, 0.5]) and reference["metric"].eq("k_qdist").all()


def test_partition_without_partition_runs_draws_a_note(figure_data):
    scores = figure_data.scores[~figure_data.scores["metric"].str.startswith(("k_", "u_"))]
    fig = figures.partition(FigureData(**{**vars(figure_data), "scores": scores}))
    assert len(fig.axes) == 1
    assert fig.axes[0].texts[0].get_text() == "no high-level-partition runs on this dataset"


def test_the_lineage_track_declares_its_figures():
    assert [figure.name for figure in TRACK.figures] == ["scores", "cost", "trees", "distances", "partition"]
    assert all(figure.caption_path().is_file() for figure in TRACK.figures)
