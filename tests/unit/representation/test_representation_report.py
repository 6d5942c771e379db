"""The leaderboard's paired differences carry each metric's direction (↑ / ↓ from higher_is_better)."""

from __future__ import annotations

import pandas as pd
from conftest import TRACKS


def test_paired_differences_say_which_direction_is_better():
    from celldag.report.leaderboard import leaderboard_markdown

    rows = []
    for seed, (text, random) in enumerate([(0.3, 0.5), (0.4, 0.6), (0.2, 0.5)]):
        for variant, value in (("text", text), ("random", random)):
            for metric, higher_is_better in (("total", True), ("marker_db", False)):
                rows.append(
                    {
                        "dataset": "d",
                        "track": "representation",
                        "method": "scilama",
                        "variant": variant,
                        "seed": seed,
                        "metric": metric,
                        "value": value,
                        "higher_is_better": higher_is_better,
                        "status": "ok",
                    }
                )
    paired = [{"method": "scilama/text", "against": ["scilama/random"], "metrics": ["total", "marker_db"]}]
    text = leaderboard_markdown(pd.DataFrame(rows), TRACKS, paired=paired)
    # the same difference (text − random = −0.233): worse on total (↑), better on marker_db (↓)
    assert "| comparison | metric | mean difference | 95 % interval | seeds | better |" in text
    assert "| scilama/text − scilama/random | total | -0.233 | [-0.377, -0.090] | 3 | ↑ |" in text
    assert "| scilama/text − scilama/random | marker_db | -0.233 | [-0.377, -0.090] | 3 | ↓ |" in text
    assert "↓: lower is better (e.g. marker_db), so a negative one does." in text


def test_a_control_scoring_above_its_method_is_listed_under_the_ranking_not_in_it():
    from celldag.report.html import render
    from celldag.report.leaderboard import CONTROLS_NOTE, leaderboard_blocks, markdown

    values = {("scilama", "text"): 0.4, ("scilama", "random"): 0.6, ("pca", "default"): 0.5}
    rows = [
        {
            "dataset": "d",
            "track": "representation",
            "method": method,
            "variant": variant,
            "seed": seed,
            "metric": "total",
            "value": value + seed / 100,
            "higher_is_better": True,
            "status": "ok",
        }
        for (method, variant), value in values.items()
        for seed in range(3)
    ]
    kinds = {"scilama/text": "method", "scilama/random": "control", "pca/default": "baseline"}
    text = markdown(leaderboard_blocks(pd.DataFrame(rows), TRACKS, kinds=kinds))
    ranking, controls = text.split(CONTROLS_NOTE[0])
    ranked = [
        line.split(" | ")[1] + "/" + line.split(" | ")[2]
        for line in ranking.splitlines()
        if line.startswith("| ") and "---" not in line and not line.startswith("| rank")
    ]
    assert ranked == ["pca/default", "scilama/text"]  # best first, without the control that scored highest
    assert "| scilama | random | 0.610 ± 0.010 |" in controls
    html = "\n".join(render(leaderboard_blocks(pd.DataFrame(rows), TRACKS, kinds=kinds), kinds))
    assert html.index("scilama</td><td>text") < html.index(CONTROLS_NOTE[0].split(" (")[0]) < html.index("random")
    # without kinds (a table of unknown kinds), every row is ranked as before
    assert CONTROLS_NOTE[0] not in markdown(leaderboard_blocks(pd.DataFrame(rows), TRACKS))


def test_a_note_about_methods_shows_only_where_they_ran(repo):
    from celldag.registry import load_config, read_yaml
    from celldag.report.leaderboard import leaderboard_markdown

    config, _ = load_config(read_yaml(repo / "config/config.yaml"), "config.yaml", root=repo)
    notes = config["evaluation"]["notes"] + ["a plain note is always shown"]
    rows = [
        {
            "dataset": "d",
            "track": "representation",
            "method": "pca",
            "variant": "default",
            "seed": 0,
            "metric": "total",
            "value": 0.5,
            "higher_is_better": True,
            "status": "ok",
        }
    ]
    without = leaderboard_markdown(pd.DataFrame(rows), TRACKS, notes=notes)
    assert "CPU smoke sizes" not in without and "- a plain note is always shown" in without
    rows.append(
        rows[0]
        | {"track": "lineage", "method": "triplet", "variant": "supervised", "metric": "rf", "higher_is_better": False}
    )
    assert "- CPU smoke sizes: celltreeqm, triplet and quadruplet train" in leaderboard_markdown(
        pd.DataFrame(rows), TRACKS, notes=notes
    )


def test_a_methods_note_on_its_runs_shows_under_its_dataset_with_the_seeds(tmp_path):
    import json

    from celldag.report.leaderboard import collect_runs, leaderboard_markdown

    paths = []
    for seed, note in enumerate(["no validation replicate here", "no validation replicate here", None]):
        record = {
            "dataset_id": "lab",
            "method_id": "celltreeqm",
            "variant": "supervised",
            "seed": seed,
            "status": "ok",
            "status_reason": None,
            "wall_time_s": 1.0,
            "peak_rss_mb": 1.0,
            "device": "cpu",
            "config_hash": "x",
            "track": "lineage",
            "config": {"params": {}},
            "input_sha256": "0" * 64,
            "method_facts": {"training": {}} | ({"note": note} if note else {}),
        }
        paths.append(tmp_path / f"{seed}.json")
        paths[-1].write_text(json.dumps(record))
    runs = collect_runs(paths)
    assert runs["note"].tolist() == ["no validation replicate here", "no validation replicate here", ""]
    rows = [
        {
            "dataset": "lab",
            "track": "lineage",
            "method": "celltreeqm",
            "variant": "supervised",
            "seed": seed,
            "metric": "rf",
            "value": 0.5,
            "higher_is_better": False,
            "status": "ok",
        }
        for seed in range(3)
    ]
    text = leaderboard_markdown(pd.DataFrame(rows), TRACKS, runs=runs)
    assert text.count("no validation replicate") == 1
    assert text.index("## lab (lineage)") < text.index(
        "- `celltreeqm/supervised` (seeds 0, 1): no validation replicate here"
    )
    assert "validation" not in leaderboard_markdown(pd.DataFrame(rows), TRACKS, runs=runs.assign(note=""))


def clipped_and_count_scores() -> pd.DataFrame:
    """pca's pcr_comparison clipped to 0 by scib-metrics in one seed of three; n_marker_genes a count."""
    rows = []
    for seed in range(3):
        for method, total, pcr, n_markers in (("pca", 0.5, (0.0, 0.2, 0.1)[seed], 18.0), ("harmony", 0.6, 0.3, 18.0)):
            for metric, value in (
                ("total", total + seed / 100),
                ("pcr_comparison", pcr),
                ("n_marker_genes", n_markers),
            ):
                rows.append(
                    {
                        "dataset": "d",
                        "track": "representation",
                        "method": method,
                        "variant": "default",
                        "seed": seed,
                        "metric": metric,
                        "value": value,
                        "higher_is_better": True,
                        "status": "ok",
                    }
                )
    return pd.DataFrame(rows)


def test_clipped_values_are_marked_and_counts_carry_no_direction():
    from celldag.report.leaderboard import CLIPPED_NOTE, leaderboard_markdown

    text = leaderboard_markdown(clipped_and_count_scores(), TRACKS)
    assert "| pca | default | 0.100 ± 0.100 ‡1/3 | 3/3 |" in text
    assert "| harmony | default | 0.300 ± 0.000 | 3/3 |" in text  # never clipped
    assert CLIPPED_NOTE[0] in text
    assert "n_marker_genes (count)" in text and "n_marker_genes ↑" not in text
    assert "| pca | default | 18 | 3/3 |" in text


def test_the_heatmap_marks_clipped_means_and_leaves_counts_unshaded():
    from celldag.report import figures

    data = figures.FigureData(
        "d", {}, "representation", TRACKS["representation"], 0, {}, {}, scores=clipped_and_count_scores()
    )
    figure = figures.scores_heatmap(data)
    axes = figure.axes[0]
    columns = [label.get_text() for label in axes.get_xticklabels()]
    count_column, pcr_column = columns.index("n_marker_genes (count)"), columns.index("pcr_comparison ↑")
    shading = axes.images[0].get_array()
    assert shading.mask[:, count_column].all() and not shading.mask[:, pcr_column].any()
    rows = [label.get_text().split("  [")[0] for label in axes.get_yticklabels()]  # without the rank interval
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in axes.texts}
    assert cells[rows.index("pca/default"), pcr_column] == "0.100‡"
    assert cells[rows.index("harmony/default"), pcr_column] == "0.300"
