"""Ranks with intervals and ties (celldag.results.leaderboard.rank): paired t tests by seed, Holm over a table's
pairs, rank intervals from the pairwise decisions."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from conftest import TRACKS
from scipy import stats

from celldag.report.html import render
from celldag.report.leaderboard import leaderboard_blocks, leaderboard_markdown
from celldag.results import leaderboard


def table(values: dict[str, list[float]]) -> dict[str, dict[int, float]]:
    return {row: dict(enumerate(seeds)) for row, seeds in values.items()}


def test_the_paired_test_is_scipys_on_the_seeds_both_rows_have():
    a = {0: 0.61, 1: 0.55, 2: 0.70, 3: math.nan}
    b = {0: 0.50, 1: 0.52, 2: 0.58, 4: 0.9}
    seeds, mean, p = leaderboard.paired_test(a, b)
    expected = stats.ttest_rel([0.61, 0.55, 0.70], [0.50, 0.52, 0.58])
    assert seeds == 3 and math.isclose(mean, (0.11 + 0.03 + 0.12) / 3) and math.isclose(p, expected.pvalue)
    assert leaderboard.paired_test({0: 1.0, 1: 2.0}, {0: 0.5, 1: 1.5}) == (2, 0.5, 1.0)  # no spread: seeds can't say
    # a constant difference whose rounding differs from seed to seed has no spread either
    rounded = leaderboard.paired_test(
        {s: 0.3 + 0.01 * s * s for s in range(4)}, {s: 0.7 + 0.01 * s * s for s in range(4)}
    )
    assert rounded[0] == 4 and math.isclose(rounded[1], -0.4) and rounded[2] == 1.0
    assert leaderboard.paired_test({0: 1.0}, {0: 0.5})[2] == 1.0


def test_far_apart_rows_are_separated_and_indistinguishable_ones_share_their_ranks():
    ranking = leaderboard.rank(
        table(
            {
                "best": [0.90, 0.91, 0.92],
                "close": [0.905, 0.90, 0.925],
                "far": [0.10, 0.12, 0.11],
            }
        ),
        higher_is_better=True,
    )
    assert ranking.intervals == {"best": (1, 2), "close": (1, 2), "far": (3, 3)}
    assert ranking.tied_with_best == {"best", "close"} and ranking.separable == 2 and len(ranking.pairs) == 3
    assert ranking.separated("best", "far") and not ranking.separated("best", "close")
    lower = leaderboard.rank(table({"a": [1.0, 1.1, 1.2], "b": [5.0, 5.3, 5.1]}), higher_is_better=False)
    assert lower.intervals == {"a": (1, 1), "b": (2, 2)}  # lower is better: a first


def test_a_pair_without_seed_spread_stays_tied_and_a_row_with_one_seed_is_unranked():
    ranking = leaderboard.rank(
        table(
            {
                "deterministic": [0.5, 0.5, 0.5],
                "shifted": [0.7, 0.7, 0.7],
                "one_seed": [0.9, math.nan, math.nan],
            }
        ),
        higher_is_better=True,
    )
    assert ranking.intervals == {"deterministic": (1, 2), "shifted": (1, 2)}
    assert ranking.unranked == ("one_seed",) and ranking.separable == 0
    assert leaderboard.interval_text((1, 2)) == "1–2" and leaderboard.interval_text((3, 3)) == "3"


def test_equal_means_are_separated_in_at_most_5_percent_of_tables_and_intervals_cover_the_true_ranks():
    """1,000 simulated tables of three seeds: six methods with equal means (any separated pair is a false one), and
    six with distinct means (the rank intervals must hold every true rank at once in ≥ 95 % of the tables)."""
    rng = np.random.default_rng(7)
    false_alarms = covered = 0
    means = np.array([0.0, 0.4, 0.8, 1.6, 3.2, 6.4])
    for _ in range(1000):
        seed_effect = rng.normal(size=3)  # shared by every method: what pairing by seed removes
        equal = {f"m{k}": dict(enumerate(seed_effect + rng.normal(size=3))) for k in range(6)}
        false_alarms += leaderboard.rank(equal, higher_is_better=True).separable > 0
        apart = {f"m{k}": dict(enumerate(seed_effect + means[k] + rng.normal(size=3))) for k in range(6)}
        intervals = leaderboard.rank(apart, higher_is_better=True).intervals
        covered += all(intervals[f"m{k}"][0] <= 6 - k <= intervals[f"m{k}"][1] for k in range(6))
    assert false_alarms <= 50, false_alarms
    assert covered >= 950, covered


def test_the_leaderboard_shows_rank_intervals_ties_and_how_many_pairs_the_seeds_separate():
    tracks = TRACKS
    rf = {
        "nj_raw": [0.30, 0.32, 0.35],
        "upgma_raw": [0.31, 0.32, 0.37],
        "nj_pca": [0.80, 0.83, 0.81],
        "bonsai": [0.5, float("nan"), float("nan")],
    }
    rows = [
        {
            "dataset": "bm",
            "track": "lineage",
            "method": method,
            "variant": "default",
            "seed": seed,
            "metric": "rf",
            "value": value,
            "higher_is_better": False,
            "status": "ok" if value == value else "failed",
        }
        for method, values in rf.items()
        for seed, value in enumerate(values)
    ]
    text = leaderboard_markdown(pd.DataFrame(rows), tracks)
    assert "| rank | method | variant | rf ↓ | seeds ok |" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [line.split(" | ")[:2] for line in table] == [
        ["| 1–2", "nj_raw"],
        ["| 1–2", "upgma_raw"],
        ["| 3", "nj_pca"],
        ["| –", "bonsai"],
    ]
    assert (
        "Rank: the ranks compatible with paired t tests of rf over the seeds ok for both methods, Holm over the "
        "table's 3 pairs (simultaneous 95 %; celldag.results.leaderboard): 2 of 3 pairs separable."
    ) in text
    assert "Not separable from the best: `nj_raw/default`, `upgma_raw/default`." in text
    assert "Unranked (fewer than two ok seeds): `bonsai/default`." in text
    one = leaderboard_markdown(pd.DataFrame([row for row in rows if row["method"] == "nj_pca"]), tracks)
    assert "| 1 | nj_pca | default |" in one and "Rank:" not in one  # one method: nothing to say of its rank
    tied = [
        row | {"value": row["value"] + 0.001 * row["seed"] ** 2 * (row["method"] == "nj_pca")}
        for row in rows
        if row["method"] in ("nj_raw", "nj_pca")
    ]
    tied[0]["value"] = 0.7  # nj_raw's first seed near nj_pca's: not separable
    assert "The seeds order none of these 2 methods: every rank is 1–2, the rows are by mean." in leaderboard_markdown(
        pd.DataFrame(tied), tracks
    )
    html = "\n".join(render(leaderboard_blocks(pd.DataFrame(rows), tracks), {}))
    assert "<td>1–2</td>" in html and "<th>rank</th>" in html
