"""``celldag reference`` and CI's score snapshot (.ci/check-scores) on a tiny workflow, end to end: the reference is
made from real runs (more seeds, a perturbed rerun, a held-out one), the workflow's own run passes bit for bit, and a
change to a method's settings that moves its scores fails the snapshot naming them — until the reference is remade."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, dry_run_jobs, run_snakemake, tiny_lineage_workflow

from celldag.cli import main

TINY = {"name": "tiny", "datasets": ["bm_small"], "methods": ["nj_raw", "upgma_raw"], "seeds": [0, 1]}
REFERENCE_CONFIG = {
    "seeds": [0, 1, 2],
    "family_false_alarm": 0.01,
    "perturbations": [
        {"name": "sandybridge_two_threads", "env": {"OPENBLAS_CORETYPE": "Sandybridge"}, "threads": {"run_method": 2}}
    ],
    "held_out": [{"name": "nehalem", "env": {"OPENBLAS_CORETYPE": "Nehalem"}}],
}


def snapshot(workdir: Path) -> subprocess.CompletedProcess:
    """The CI script as .ci/run calls it, in the tiny workflow, with this interpreter's celldag."""
    env = os.environ | {"RESULTS": "results/tiny", "CELLDAG": str(Path(sys.executable).parent / "celldag")}
    return subprocess.run(
        ["bash", ".ci/check-scores"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def referenced(tmp_path_factory):
    workdir = tiny_lineage_workflow(tmp_path_factory.mktemp("referenced"), TINY)
    (workdir / ".ci").mkdir()
    shutil.copy(REPO / ".ci/check-scores", workdir / ".ci/check-scores")
    (workdir / "requirements").mkdir()
    shutil.copy(REPO / "requirements/lock.txt", workdir / "requirements/lock.txt")
    (workdir / "config/reference.yaml").write_text(yaml.safe_dump(REFERENCE_CONFIG))
    status = main(
        ["reference", "--workflow", str(workdir), "--out", str(workdir / "reference/default"), "--cores", "2"]
    )
    return workdir, status


@pytest.mark.e2e
def test_the_reference_holds_the_runs_scores_its_noise_model_and_the_held_out_reruns_verdict(referenced):
    workdir, status = referenced
    assert status == 0
    folder = workdir / "reference/default"
    scores = pd.read_csv(folder / "scores.tsv", sep="\t")
    made = pd.read_parquet(workdir / "results/tiny/scores.parquet")
    assert len(scores) == len(made) and set(scores["seed"]) == {0, 1}  # the workflow's own seeds
    noise = pd.read_csv(folder / "noise.tsv", sep="\t")
    meta = yaml.safe_load((folder / "reference.yaml").read_text())
    # a group's df: 3 seeds and 2 perturbed moves; or, where its metric's floor is larger, that floor's, pooled over
    # the dataset's two methods
    assert set(noise["seeds"]) == {3} and set(noise["df"]) <= {2 + 2, 2 * (2 + 2)}
    assert (noise["df"] == 8).sum() == meta["noise"]["groups_at_the_metric_floor"]
    assert meta["seeds"] == [0, 1, 2] and meta["noise"]["reruns"] == ["sandybridge_two_threads"]
    held_out = meta["held_out"]["nehalem"]
    assert held_out["rule"] == "noise-aware" and held_out["verdict"].startswith("reproduces the release")
    assert "machine.kernels.OPENBLAS_CORETYPE: absent → Nehalem" in held_out["environment"]
    assert held_out["methods"].startswith("0 of 2 methods changed")  # nj_raw and upgma_raw on bm_small
    assert meta["left_out"] == {}  # one perturbation: none to leave out
    judged = noise[~noise["metric"].str.startswith("delta_")]
    assert judged["mean"].notna().all() and (noise["offset"] >= 0).all()
    cost = pd.read_csv(folder / "cost.tsv", sep="\t")
    assert {"run nj_raw", "run upgma_raw", "prepare_dataset", "evaluate"} <= set(cost["rule"])
    assert dry_run_jobs(workdir) == {}  # make check's `make run` then reruns nothing


@pytest.mark.e2e
def test_ci_passes_bit_for_bit_then_fails_on_a_change_that_moves_scores_until_the_reference_is_remade(referenced):
    workdir, _ = referenced
    passed = snapshot(workdir)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "rule: bit for bit" in passed.stdout and "exit 0: nothing changed beyond noise" in passed.stdout

    config = yaml.safe_load((workdir / "config/config.yaml").read_text())
    config["method_params"] = {"nj_raw": {"features": "pca", "n_components": 3}}  # a commit that moves nj_raw's scores
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "results/tiny/scores.parquet", "results/tiny/runs.parquet")
    failed = snapshot(workdir)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "changed: bm_small/lineage/nj_raw/default/" in failed.stdout
    assert "updates the reference in the same commit" in failed.stderr
    assert "upgma_raw" not in "".join(line for line in failed.stdout.splitlines() if line.startswith("changed"))


@pytest.mark.e2e
def test_compare_noise_calls_a_method_shifted_on_every_seed_changed_where_each_score_alone_passes(referenced, tmp_path):
    """A lab's regression of a few sd in one method, on every seed: each score stays within its margin (Bonferroni
    over every score), the per-method verdict pools the seeds and metrics and calls it changed."""
    workdir, _ = referenced
    noise = pd.read_csv(workdir / "reference/default/noise.tsv", sep="\t")
    shifted = tmp_path / "shifted/results/tiny"
    shutil.copytree(workdir / "results/tiny", shifted, ignore=shutil.ignore_patterns("figures", "report"))
    scores = pd.read_parquet(shifted / "scores.parquet")
    margin = scores.merge(noise, on=["dataset", "track", "method", "variant", "metric"], how="left")["margin"]
    upgma = (scores["method"] == "upgma_raw").to_numpy() & (margin > 0).to_numpy()
    # 0.8 of each score's margin, on every seed: each within seed noise; their mean over seeds is √n times as far
    # out, against a method's level (Bonferroni over its metrics, Holm over two methods) laxer than a score's
    scores.loc[upgma, "value"] += 0.8 * margin[upgma]
    scores.to_parquet(shifted / "scores.parquet")
    out = tmp_path / "compare"
    status = main(
        [
            "compare",
            str(workdir / "results/tiny"),
            str(shifted),
            "--noise",
            str(workdir / "reference/default"),
            "--workflow",
            str(workdir),
            "--out",
            str(out),
        ]
    )
    assert status == 1
    text = (out / "check.md").read_text()
    assert "0 changed" in text and "1 of 2 methods changed" in text
    assert "| changed | bm_small | lineage | upgma_raw | default |" in text
    assert "| no change detected | bm_small | lineage | nj_raw | default |" in text
