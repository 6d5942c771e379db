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
                rows.append({"dataset": "d", "track": "representation", "method": "scilama", "variant": variant,
                             "seed": seed, "metric": metric, "value": value, "higher_is_better": higher_is_better,
                             "status": "ok"})  # fmt: skip
    paired = [{"method": "scilama/text", "against": ["scilama/random"], "metrics": ["total", "marker_db"]}]
    text = leaderboard_markdown(pd.DataFrame(rows), TRACKS, paired=paired)
    # the same difference (text − random = −0.233): worse on total (↑), better on marker_db (↓)
    assert "| comparison | metric | mean difference | 95 % interval | seeds | better |" in text
    assert "| scilama/text − scilama/random | total | -0.233 | [-0.377, -0.090] | 3 | ↑ |" in text
    assert "| scilama/text − scilama/random | marker_db | -0.233 | [-0.377, -0.090] | 3 | ↓ |" in text
    assert "↓: lower is better (e.g. marker_db), so a negative one does." in text
