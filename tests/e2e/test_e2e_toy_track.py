"""End to end, a third track registered from the test suite (tests/support/toy_track.py): no edit of celldag.

The copied workflow gets one entry in each registry (tracks, datasets, methods), all naming code in
tests/support/toy_track.py by reference; Snakemake prepares, runs, scores and aggregates it like the
shipped tracks, and the leaderboard shows its metric group.
"""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from conftest import REPO, copy_workflow, run_snakemake

pytestmark = pytest.mark.e2e


def add_entry(workdir, registry: str, entry_id: str, entry: dict) -> None:
    path = workdir / f"config/{registry}.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | {entry_id: entry}))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"))
    add_entry(workdir, "tracks", "toy", {"definition": "toy_track:TRACK", "description": "toy annotation"})
    add_entry(
        workdir,
        "datasets",
        "blobs",
        {
            "track": "toy",
            "source": "builtin",
            "loader": "toy_track:load",
            "params": {"n": 60, "separation": 6.0},
            "description": "two labelled blobs",
            "license": "generated",
        },
    )
    add_entry(
        workdir, "methods", "centroid", {"track": "toy", "run": "toy_track:run", "description": "nearest centroid"}
    )
    (workdir / "config/config.yaml").write_text(
        yaml.safe_dump({"datasets": ["blobs"], "methods": ["centroid"], "seeds": [0, 1]})
    )
    with pytest.MonkeyPatch.context() as patch:  # the jobs import tests/support/toy_track.py by its reference
        patch.setenv("PYTHONPATH", str(REPO / "tests/support"))
        run_snakemake(workdir)
    return workdir


def test_a_track_from_the_test_suite_runs_to_scores_and_leaderboard(finished_run):
    scores = pd.read_parquet(finished_run / "results/default/scores.parquet")
    assert set(scores["track"]) == {"toy"} and set(scores["metric"]) == {"accuracy"}
    assert list(scores["seed"]) == [0, 1] and (scores["status"] == "ok").all()
    assert (scores["value"] > 0.9).all() and scores["higher_is_better"].all()  # separated blobs: near-perfect
    leaderboard = (finished_run / "results/default/leaderboard.md").read_text()
    assert "## blobs (toy)" in leaderboard and "| method | variant | accuracy ↑ | seeds ok |" in leaderboard
    assert "| centroid | default |" in leaderboard
