"""The quality checks (celldag.results.qc): one planted row per condition, found with its severity; nothing planted,
nothing found; the leaderboard's section and `celldag check`'s lines."""

from __future__ import annotations

import pandas as pd

from celldag.commands.check import qc_errors
from celldag.report.leaderboard import qc_blocks
from celldag.results.qc import qc_table


def score(
    method: str,
    seed: int,
    metric: str,
    value: float,
    status: str = "ok",
    variant: str = "default",
    reason: str | None = None,
) -> dict:
    return {
        "dataset": "d",
        "track": "lineage",
        "method": method,
        "variant": variant,
        "seed": seed,
        "metric": metric,
        "value": value,
        "higher_is_better": False,
        "status": status,
        "status_reason": reason,
    }


def clean_scores() -> list[dict]:
    return [
        score(method, seed, metric, 0.5)
        for method in ("nj_raw", "upgma_raw")
        for seed in (0, 1)
        for metric in ("rf", "quartet_dist", "scaled_rf")
    ]


RUNS = pd.DataFrame(
    {
        "dataset": ["d"] * 4,
        "method": ["nj_raw", "nj_raw", "upgma_raw", "upgma_raw"],
        "seed": [0, 1, 0, 1],
        "wall_time_s": [1.0, 1.0, 2.0, 2.0],
        "peak_rss_mb": [100.0] * 4,
    }
)
COST = pd.DataFrame({"rule": ["run nj_raw", "run upgma_raw"], "wall_s": [2.0, 4.0], "peak_mb": [100.0, 100.0]})
CITED = {"method": {"nj_raw": [], "upgma_raw": []}, "dataset": {"d": []}}


def test_nothing_planted_nothing_found():
    assert qc_table(pd.DataFrame(clean_scores()), RUNS, CITED, COST).empty


def test_each_planted_condition_is_found_once_with_its_severity():
    scores = clean_scores()
    scores += [
        score("bonsai", 0, "rf", float("nan"), "failed", reason="bonsai-rs exited 1"),
        score("bonsai", 1, "rf", float("nan"), "failed", reason="bonsai-rs exited 1"),
        score("scvi", 0, "rf", float("nan"), "not_applicable", reason="needs counts"),
    ]
    scores = [
        row
        for row in scores
        if not (row["method"] == "upgma_raw" and row["seed"] == 1 and row["metric"] == "quartet_dist")
    ]
    scores.append(score("nj_raw", 0, "scaled_quartet_dist", -3.0) | {"method": "nj_pca"})
    scores.append(score("nj_pca", 1, "scaled_quartet_dist", -2.0))
    runs = RUNS.assign(wall_time_s=[1.0, 1.0, 7.0, 7.0])  # upgma_raw: 14 s against the reference's 4 s
    missing = CITED | {"method": {"nj_raw": [], "upgma_raw": ["license"]}}
    found = qc_table(pd.DataFrame(scores), runs, missing, COST)
    got = [(row.severity, row.check, row.method, row.metric) for row in found.itertuples()]
    assert got == [
        ("error", "failed", "bonsai", ""),
        ("warning", "absent", "upgma_raw", "quartet_dist"),
        ("warning", "cost", "upgma_raw", ""),
        ("warning", "metadata", "upgma_raw", ""),
        ("warning", "scaled score", "nj_pca", "scaled_quartet_dist"),
        ("info", "not_applicable", "scvi", ""),
    ]
    details = dict(zip(found["check"], found["detail"]))
    assert details["failed"] == "seeds 0, 1: bonsai-rs exited 1"
    assert details["absent"] == "seed 1: quartet_dist"
    assert details["scaled score"] == "mean -2.5, outside [-1, 2]"
    assert details["cost"].startswith("wall 14.0 s = 3.50× the reference's")
    assert details["metadata"] == "method upgma_raw: no license (celldag cite cannot cite it)"


def test_cost_is_checked_only_against_a_reference_measured_on_the_same_run():
    assert qc_table(pd.DataFrame(clean_scores()), RUNS.assign(wall_time_s=100.0), CITED, None).empty


def test_the_leaderboard_counts_every_severity_and_check_prints_the_errors(tmp_path):
    scores = [*clean_scores(), score("bonsai", 0, "rf", float("nan"), "failed", reason="exited 1")]
    found = qc_table(pd.DataFrame(scores), RUNS, CITED, COST)
    blocks = qc_blocks(found)
    assert blocks[1].lines[0].startswith("1 error, 0 warnings, 0 infos")
    assert blocks[2].rows == (("failed", "d", "bonsai/default", "–", "seeds 0: exited 1"),)
    found.to_parquet(tmp_path / "qc.parquet")
    assert qc_errors(tmp_path) == ["qc error: failed d/bonsai/default: seeds 0: exited 1"]
    assert qc_errors(tmp_path / "elsewhere") == []


def test_recorded_cost_findings_are_taken_as_they_were():
    runs = RUNS.assign(wall_time_s=100.0)
    then = qc_table(pd.DataFrame(clean_scores()), runs, CITED, COST)
    assert set(then["check"]) == {"cost"}
    rebuilt = qc_table(pd.DataFrame(clean_scores()), runs, CITED, None, recorded=then)
    pd.testing.assert_frame_equal(rebuilt, then)


def test_a_scaled_score_out_of_range_is_not_warned_of_on_a_metric_its_floor_card_flags():
    scores = [*clean_scores(), score("nj_pca", 0, "scaled_rf", 40.0)]
    assert list(qc_table(pd.DataFrame(scores), RUNS, CITED, COST)["check"]) == ["scaled score"]
    assert qc_table(pd.DataFrame(scores), RUNS, CITED, COST, flagged={("d", "rf")}).empty
