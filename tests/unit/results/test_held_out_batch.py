"""Held-out-batch efficiency beside each representation run (celldag.results.leaderboard.held_out_batch_rows): the
annotation track's logistic classifier on the run's embedding, Kandinsky's augmented fit on the new batch — shortfall
max(0, 1 − α − worst) and set size, mean ± sd over seeds — joined at aggregation, and its order against scIB's
stated on tie groups; ``celldag audit`` rebuilds it with the config's α."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import REPO, TRACKS

from celldag import artifacts
from celldag.annotation import track as annotation_track
from celldag.annotation.scoring import options
from celldag.commands.audit import Report, check_aggregate
from celldag.registry import read_yaml
from celldag.report.leaderboard import aggregate, leaderboard_markdown
from celldag.results import leaderboard
from celldag.results.leaderboard import SET_SIZE, SHORTFALL, held_out_batch_rows

WORST, SIZE = "kandinsky_augmented_new_batch_worst", "kandinsky_augmented_new_batch_set_size"
SEEDS = (0, 1, 2)


def representation(dataset: str, method: str, totals: list[float]) -> list[dict]:
    return [
        {
            "dataset": dataset,
            "track": "representation",
            "method": method,
            "variant": "default",
            "seed": seed,
            "metric": metric,
            "value": total * scale,
            "higher_is_better": True,
            "status": "ok",
        }
        for seed, total in zip(SEEDS, totals)
        for metric, scale in (("total", 1.0), ("bio_conservation", 0.9), ("batch_correction", 1.1))
    ]


def annotation(
    dataset: str,
    classifier: str,
    embedding: str,
    worst: list[float],
    size: list[float],
    status: tuple[str, ...] = ("ok",) * 3,
) -> list[dict]:
    rows = []
    for seed, w, s, st in zip(SEEDS, worst, size, status):
        for metric, value, higher in ((WORST, w, True), (SIZE, s, False), ("accuracy", 0.9, True)):
            rows.append(
                {
                    "dataset": dataset,
                    "track": "annotation",
                    "method": classifier,
                    "variant": embedding,
                    "seed": seed,
                    "metric": metric,
                    "value": value if st == "ok" else float("nan"),
                    "higher_is_better": higher,
                    "status": st,
                }
            )
    return rows


# harmony beats pca on scIB's total and on set size, pca beats harmony on the shortfall (seeds separate all three);
# knn's rows on the same embeddings must not be read; "plain" has no chained annotation
PCA_WORST, HARMONY_WORST = [0.88, 0.87, 0.875], [0.80, 0.79, 0.81]
PCA_SIZE, HARMONY_SIZE = [3.0, 3.1, 3.2], [2.0, 2.1, 2.05]
SCORES = pd.DataFrame(
    representation("three", "pca", [0.50, 0.51, 0.52])
    + representation("three", "harmony", [0.70, 0.705, 0.72])
    + annotation("three", "logistic", "pca/default", PCA_WORST, PCA_SIZE)
    + annotation("three", "logistic", "harmony/default", HARMONY_WORST, HARMONY_SIZE)
    + annotation("three", "knn", "pca/default", [0.1] * 3, [9.0] * 3)
    + representation("four", "pca", [0.5, 0.6, 0.55])
    + representation("four", "scvi", [0.6, 0.5, 0.65])
    + representation("four", "expression", [0.4, 0.45, 0.5])
    + annotation("four", "logistic", "pca/default", [0.95, 0.85, 0.9], [2.5, 2.6, 2.7])
    + annotation("four", "logistic", "scvi/default", [0.7, 0.8, 0.0], [4.0, 5.0, 0.0], ("ok", "ok", "failed"))
    + annotation("four", "knn", "expression/default", [0.9] * 3, [2.0] * 3)
    + representation("plain", "pca", [0.5, 0.6, 0.55])
)


def cell(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def test_the_names_spelled_in_the_leaderboard_are_the_annotation_tracks():
    """celldag.results.leaderboard cannot import celldag.annotation (an import cycle between celldag's children)."""
    assert leaderboard.EFFICIENCY_PROCEDURE == annotation_track.HEADLINE
    assert {
        metric.removeprefix(f"{annotation_track.HEADLINE}_") for metric in leaderboard.EFFICIENCY_METRICS.values()
    } <= set(annotation_track.NEW_BATCH_METRICS)
    assert set(leaderboard.EFFICIENCY_METRICS.values()) <= set(TRACKS[leaderboard.ANNOTATION_TRACK].metrics)
    assert TRACKS[leaderboard.ANNOTATION_TRACK].upstream == leaderboard.REPRESENTATION_TRACK
    assert leaderboard.DEFAULT_ALPHA == annotation_track.SCORING_DEFAULTS["alpha"] == options({})["alpha"]
    assert options({"annotation": {"alpha": 0.2}})["alpha"] == 0.2  # what the workflow and the audit pass


def test_shortfall_and_set_size_per_seed_from_the_logistic_rows_only():
    rows = held_out_batch_rows(SCORES, alpha=0.1).set_index(["dataset", "method", "metric", "seed"]).sort_index()
    for seed, worst, size in zip(SEEDS, PCA_WORST, PCA_SIZE):
        assert rows.loc[("three", "pca", SHORTFALL, seed), "value"] == max(0.0, 1 - 0.1 - worst)
        assert rows.loc[("three", "pca", SET_SIZE, seed), "value"] == size
    assert rows.loc[("four", "pca", SHORTFALL, 0), "value"] == 0.0  # 0.95 covers 1 − α: no shortfall, not −0.05
    assert rows.loc[("four", "scvi", SHORTFALL, 2), "status"] == "failed"
    assert (rows.loc[("plain", "pca", SHORTFALL), "status"] == "not_applicable").all()
    assert (rows.loc[("four", "expression", SET_SIZE), "status"] == "not_applicable").all()  # knn ran, logistic not
    assert not (rows["higher_is_better"]).any() and set(SCORES["metric"]) >= {WORST, SIZE}  # no score row was added


def test_the_representation_table_shows_mean_and_sd_over_seeds_or_not_applicable():
    text = leaderboard_markdown(SCORES, TRACKS)
    assert f"| total ↑ | bio_conservation ↑ | batch_correction ↑ | {SHORTFALL} ↓ | {SET_SIZE} ↓ | seeds ok |" in text
    shortfalls = [1 - 0.1 - worst for worst in PCA_WORST]
    assert (
        f"| pca | default | 0.510 ± 0.010 | 0.459 ± 0.009 | 0.561 ± 0.011 | {cell(shortfalls)} | {cell(PCA_SIZE)} |"
        in text
    )
    assert f"| scvi | default | 0.583 ± 0.076 | 0.525 ± 0.069 | 0.642 ± 0.084 | {cell([0.2, 0.1])} (1 not ok) |" in text
    assert (
        "| expression | default | 0.450 ± 0.050 | 0.405 ± 0.045 | 0.495 ± 0.055 | not_applicable | not_applicable |"
        in text
    )
    plain = text[text.index("## plain (representation)") : text.index("## three")]
    assert (
        "| pca | default | 0.550 ± 0.050 | 0.495 ± 0.045 | 0.605 ± 0.055 | not_applicable | not_applicable | 3/3 |"
        in plain
    )
    assert "α = 0.1 (0: every batch covered at 1 − α)" in text
    # the annotation section itself is as before: its own metrics, no column of the representation's
    annotation_section = text[text.index("## three (annotation)") : text.index("## three (representation)")]
    assert SHORTFALL not in annotation_section


def test_another_alpha_changes_the_shortfall():
    rows = held_out_batch_rows(SCORES, alpha=0.2).set_index(["dataset", "method", "metric", "seed"])
    assert rows.loc[("three", "harmony", SHORTFALL, 0), "value"] == pytest.approx(0.0)  # 1 − 0.2 − 0.80
    assert rows.loc[("three", "harmony", SHORTFALL, 1), "value"] == pytest.approx(0.01)
    assert rows.loc[("three", "pca", SHORTFALL, 0), "value"] == 0.0  # 0.88 covers 0.8
    assert rows.loc[("three", "pca", SET_SIZE, 0), "value"] == 3.0  # set sizes do not depend on α here
    text = leaderboard_markdown(SCORES, TRACKS, alpha=0.2)
    assert f"| harmony | default | 0.708 ± 0.010 | 0.638 ± 0.009 | 0.779 ± 0.011 | {cell([0.0, 0.01, 0.0])} |" in text
    assert "α = 0.2" in text and text != leaderboard_markdown(SCORES, TRACKS)


def test_the_order_against_scibs_is_stated_pair_by_pair_on_tie_groups():
    text = leaderboard_markdown(SCORES, TRACKS)
    three = text[text.index("## three (representation)") :]
    assert (
        "Shortfall against total, pair by pair (1 pair both rank): total separates 1, the shortfall 1; they "
        "disagree on 1 of the 1 pair both separate (`harmony/default` ahead by total, `pca/default` by the "
        "shortfall). Not separable from the best by the shortfall: `pca/default`."
    ) in three
    assert (
        "Set size against total, pair by pair (1 pair both rank): total separates 1, the set size 1; they "
        "agree on the 1 pair both separate." in three
    )
    # no pair of "four" is separated by both; "plain" has nothing to rank by the new columns
    four = text[text.index("## four (representation)") : text.index("## plain")]
    assert "so the seeds cannot say whether the orders agree" in four
    assert "Shortfall against" not in text[text.index("## plain") : text.index("## three")]


def test_agreement_counts_only_pairs_each_ranking_separates():
    first = leaderboard.rank(
        {"a": {0: 3.0, 1: 3.1, 2: 3.05}, "b": {0: 1.0, 1: 1.1, 2: 1.0}, "c": {0: 1.0, 1: 1.2, 2: 1.1}},
        higher_is_better=True,
    )
    same = leaderboard.agreement(first, first)
    assert (same.pairs, same.first, same.second, same.same, same.opposite) == (
        3,
        first.separable,
        first.separable,
        first.separable,
        (),
    )
    reversed_ = leaderboard.rank(
        {"a": {0: 3.0, 1: 3.1, 2: 3.05}, "b": {0: 1.0, 1: 1.1, 2: 1.0}}, higher_is_better=False
    )
    found = leaderboard.agreement(first, reversed_)
    assert found.pairs == 1 and found.opposite == (("a", "b"),) and found.same == 0


# ---------------------------------------------------------------- the audit rebuilds it with the config's α


def write_inputs(tmp_path) -> tuple[list[str], list[str]]:
    scores_path = tmp_path / "results/x/scores/all.parquet"
    scores_path.parent.mkdir(parents=True)
    artifacts.write_parquet(SCORES, scores_path)
    records = []
    for index, run in enumerate(
        SCORES[["dataset", "track", "method", "variant", "seed"]].drop_duplicates().itertuples()
    ):
        path = tmp_path / f"records/{index}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "dataset_id": run.dataset,
                    "method_id": run.method,
                    "variant": run.variant,
                    "seed": int(run.seed),
                    "status": "ok",
                    "track": run.track,
                    "device": "cpu",
                    "config_hash": "0",
                    "config": {"params": {}},
                    "input_sha256": "0",
                    "status_reason": "",
                    "wall_time_s": 1.0,
                    "peak_rss_mb": 1.0,
                }
            )
        )
        records.append(str(path))
    return [str(scores_path)], records


def test_the_audit_rebuilds_the_columns_with_the_configs_alpha(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    score_paths, records = write_inputs(tmp_path)
    evaluation = {"delta_baseline": "none", "paired": [], "notes": [], "annotation": {"alpha": 0.2}}

    def audit() -> Report:
        report = Report()
        plan = SimpleNamespace(
            name="x",
            runs=[SimpleNamespace(record=path, method="pca", dataset="pbmc") for path in records],
            chained=[],
            dataset_scores=score_paths,
            chained_scores=[],
        )
        # a method without a license: its metadata warning is rebuilt alike
        pca = {"reference": "r", "variants": {"default": {}}, "kind": "baseline"}
        registries = SimpleNamespace(
            tracks=read_yaml(REPO / "config/tracks.yaml"),
            methods={"pca": pca},
            datasets={"pbmc": {"reference": "r", "license": "l"}},
        )
        check_aggregate(plan, {"evaluation": evaluation}, registries, len(records), report)
        return report

    def write(alpha: float) -> None:
        aggregate(
            score_paths=score_paths,
            record_paths=records,
            scores_path="results/x/scores.parquet",
            runs_path="results/x/runs.parquet",
            leaderboard_path="results/x/leaderboard.md",
            baseline="none",
            tracks=TRACKS,
            alpha=alpha,
            floor_cards_path="results/x/floor_cards.parquet",
            qc_path="results/x/qc.parquet",
            missing={"method": {"pca": ["license"]}},
        )

    write(options(evaluation)["alpha"])
    report = audit()
    assert report.problems == 0 and report.counts["aggregate files"] == 5, capsys.readouterr().out
    write(0.1)  # a leaderboard made with another α than the scores' is not the one the scores give
    assert audit().problems == 2  # nor are its floor cards: a guarantee's rows meeting 1 − α
    out = capsys.readouterr().out
    assert "leaderboard changed: results/x/leaderboard.md line" in out
    assert "aggregate row changed: " in out and "floor_cards.parquet (rows_meeting_target now" in out
