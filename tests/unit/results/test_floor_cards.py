"""Floor cards: control-scaled scores by hand, flags read from the controls alone (a method removed changes none),
margins from the reference's noise, guarantees against their target."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS

from celldag import artifacts
from celldag.report.leaderboard import aggregate, floor_card_blocks
from celldag.results.floor_cards import floor_cards, scaled_scores
from celldag.results.leaderboard import RUN_COLUMNS

NULL, ORACLE = ("null_tree", "random"), ("oracle_tree", "default")


def lineage_rows(method: tuple[str, str], rf: list[float], dataset: str = "d", metric: str = "rf") -> list[dict]:
    return [
        {
            "dataset": dataset,
            "track": "lineage",
            "method": method[0],
            "variant": method[1],
            "seed": seed,
            "metric": metric,
            "value": value,
            "higher_is_better": False,
            "status": "ok",
        }
        for seed, value in enumerate(rf)
    ]


def table(*parts: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([row for part in parts for row in part])


def test_a_scaled_score_is_its_place_between_the_same_seeds_null_and_oracle():
    scores = table(
        lineage_rows(NULL, [1.0, 0.9, 0.8]),
        lineage_rows(ORACLE, [0.2, 0.1, 0.0]),
        lineage_rows(("nj_raw", "default"), [0.6, 0.5, 0.8]),
    )
    scaled = scaled_scores(scores, TRACKS).set_index(["method", "seed"])
    assert set(scaled["metric"]) == {"scaled_rf"}
    assert scaled["higher_is_better"].all()
    # (score − null) / (oracle − null): seed 0 (0.6 − 1.0) / (0.2 − 1.0) = 0.5; seed 1 0.5; seed 2 (0.8−0.8)/(−0.8) = 0
    assert scaled.loc[("nj_raw", 0), "value"] == pytest.approx(0.5)
    assert scaled.loc[("nj_raw", 1), "value"] == pytest.approx(0.5)
    assert scaled.loc[("nj_raw", 2), "value"] == pytest.approx(0.0)
    assert scaled.loc[[("null_tree", s) for s in range(3)], "value"].tolist() == [0.0, 0.0, 0.0]
    assert scaled.loc[[("oracle_tree", s) for s in range(3)], "value"].tolist() == [1.0, 1.0, 1.0]


def test_no_scaled_score_where_a_seeds_control_failed_or_has_no_range():
    null = lineage_rows(NULL, [1.0, 0.5, 0.8])
    null[0]["status"], null[0]["value"] = "failed", math.nan
    scores = table(null, lineage_rows(ORACLE, [0.2, 0.5, 0.0]), lineage_rows(("nj_raw", "default"), [0.6, 0.5, 0.4]))
    scaled = scaled_scores(scores, TRACKS)
    assert sorted(scaled.loc[scaled["method"] == "nj_raw", "seed"]) == [2]  # seed 0: no null; seed 1: null = oracle


def test_a_metric_is_flagged_when_the_null_beats_the_oracle_or_the_range_is_within_the_margin():
    scores = table(
        lineage_rows(NULL, [0.98, 1.0, 0.99]),
        lineage_rows(ORACLE, [0.97, 0.99, 0.98]),
        lineage_rows(NULL, [1.0, 1.0, 1.0], metric="quartet_dist"),
        lineage_rows(ORACLE, [0.1, 0.2, 0.1], metric="quartet_dist"),
        lineage_rows(NULL, [0.5, 0.6, 0.5], metric="split_recovery"),
        lineage_rows(ORACLE, [0.4, 0.4, 0.4], metric="split_recovery"),
    )
    noise = pd.DataFrame(
        [
            ("d", "lineage", *NULL, "rf", 0.02),
            ("d", "lineage", "nj_raw", "default", "rf", 0.03),
            ("d", "lineage", *ORACLE, "rf", 0.05),
            ("e", "lineage", "nj_raw", "default", "quartet_dist", 0.05),
        ],
        columns=["dataset", "track", "method", "variant", "metric", "margin"],
    )
    cards = floor_cards(scores, TRACKS, noise, alpha=0.1).set_index("metric")
    assert cards.loc["rf", "range"] == pytest.approx(0.01)  # lower is better: null − oracle
    assert cards.loc["rf", "margin"] == pytest.approx(0.03)  # the median of the reference's runs on this dataset
    assert cards.loc["rf", "margin_source"] == "the metric's median on this dataset"
    assert cards.loc["rf", "flagged"] and "within the noise margin" in cards.loc["rf", "why"]
    assert cards.loc["quartet_dist", "margin"] == pytest.approx(0.05)  # not on this dataset: over all of them
    assert cards.loc["quartet_dist", "margin_source"] == "the metric's median"
    assert not cards.loc["quartet_dist", "flagged"]
    assert cards.loc["split_recovery", "range"] == pytest.approx(0.4 - 1.6 / 3)  # higher is better: oracle − null
    assert cards.loc["split_recovery", "flagged"]
    assert cards.loc["split_recovery", "why"] == "the null scores beyond the oracle"
    assert math.isnan(cards.loc["split_recovery", "margin"])  # the reference has no margin for it
    assert cards.loc["rf", "null_mean"] == pytest.approx(0.99) and cards.loc["rf", "null_sd"] == pytest.approx(0.01)


def test_a_metric_without_its_controls_is_not_judged_and_not_flagged():
    cards = floor_cards(table(lineage_rows(("nj_raw", "default"), [0.5, 0.6])), TRACKS, None, alpha=0.1)
    card = cards.set_index("metric").loc["rf"]
    assert not card["flagged"]
    assert card["why"] == "not judged: no ok score of the null and the oracle (null_tree/random, oracle_tree/default)"


def test_a_guarantee_is_judged_against_its_target_not_against_controls():
    rows = [
        {
            "dataset": "p",
            "track": "annotation",
            "method": method,
            "variant": "pca/default",
            "seed": seed,
            "metric": "split_lac_coverage",
            "value": value,
            "higher_is_better": True,
            "status": "ok",
        }
        for method, values in (("knn", [0.91, 0.89]), ("logistic", [0.85, 0.87]))
        for seed, value in enumerate(values)
    ]
    card = floor_cards(pd.DataFrame(rows), TRACKS, None, alpha=0.1).set_index("metric").loc["split_lac_coverage"]
    assert card["role"] == "guarantee" and card["target"] == "≥ 1 − α"
    assert (card["rows_meeting_target"], card["rows"]) == (1, 2)  # knn's mean 0.90 meets 0.9; logistic's 0.86 not
    assert not card["flagged"] and pd.isna(card["null"])


def test_removing_a_method_changes_no_other_scaled_score_and_no_card(tmp_path, monkeypatch):
    """Item 5's check: aggregate a finished run, drop one method's scores, aggregate again: bit for bit."""
    monkeypatch.setattr("celldag.results.leaderboard.collect_runs", lambda paths: pd.DataFrame(columns=RUN_COLUMNS))
    rng = np.random.default_rng(3)
    parts = [
        lineage_rows(method, list(rng.uniform(0, 1, 4)), metric=metric)
        for method in (NULL, ORACLE, ("nj_raw", "default"), ("upgma_raw", "default"))
        for metric in ("rf", "quartet_dist", "qdist_sampled")
    ]
    full = table(*parts)
    results = {}
    for name, scores in (("full", full), ("without", full[full["method"] != "upgma_raw"])):
        folder = tmp_path / name
        folder.mkdir()
        artifacts.write_parquet(scores.reset_index(drop=True), str(folder / "d.parquet"))
        aggregate(
            score_paths=[str(folder / "d.parquet")],
            record_paths=[],
            scores_path=str(folder / "scores.parquet"),
            runs_path=str(folder / "runs.parquet"),
            leaderboard_path=str(folder / "leaderboard.md"),
            baseline="nj_raw",
            tracks=TRACKS,
            floor_cards_path=str(folder / "floor_cards.parquet"),
        )
        results[name] = (pd.read_parquet(folder / "scores.parquet"), pd.read_parquet(folder / "floor_cards.parquet"))
    (scores_full, cards_full), (scores_without, cards_without) = results["full"], results["without"]
    scaled_full = scores_full[scores_full["metric"].str.startswith("scaled_") & (scores_full["method"] != "upgma_raw")]
    scaled_without = scores_without[scores_without["metric"].str.startswith("scaled_")]
    assert len(scaled_full) == 3 * 3 * 4
    pd.testing.assert_frame_equal(scaled_full.reset_index(drop=True), scaled_without.reset_index(drop=True))
    pd.testing.assert_frame_equal(cards_full, cards_without)


def test_the_card_section_shows_the_main_tables_metrics_and_lists_the_flagged_ones():
    scores = table(
        lineage_rows(NULL, [1.0, 1.0]),
        lineage_rows(ORACLE, [1.0, 0.98]),
        lineage_rows(NULL, [0.9, 0.9], metric="k_qdist"),
        lineage_rows(ORACLE, [0.1, 0.1], metric="k_qdist"),
    )
    blocks = floor_card_blocks(floor_cards(scores, TRACKS, None, alpha=0.1), TRACKS["lineage"])
    text = "\n".join(str(block) for block in blocks)
    assert "`rf`" in text and "`k_qdist`" not in text.split("Flagged")[0]  # k_qdist: not the main table, not flagged
    flagged = [block for block in blocks if "Flagged" in str(block)][0]
    assert flagged.lines == ("Flagged: 0 of 2 metrics judged against controls.",)


def test_recorded_margins_are_taken_as_read_then():
    """celldag audit rebuilds the cards with the margins the aggregate job read from the reference at the time."""
    scores = table(lineage_rows(NULL, [1.0, 0.9]), lineage_rows(ORACLE, [0.2, 0.1]))
    noise = pd.DataFrame(
        [("d", "lineage", *NULL, "rf", 0.02)], columns=["dataset", "track", "method", "variant", "metric", "margin"]
    )
    then = floor_cards(scores, TRACKS, noise, alpha=0.1).assign(margin=0.9, margin_source="the metric's median")
    rebuilt = floor_cards(scores, TRACKS, None, alpha=0.1, recorded=then).set_index("metric")
    assert rebuilt.loc["rf", "margin"] == 0.9 and rebuilt.loc["rf", "flagged"]  # range 0.8 within the recorded 0.9
