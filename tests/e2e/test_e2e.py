"""End to end: copy the workflow to a temp dir and run Snakemake on a tiny config through a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from browser import rendered_dom, texts
from conftest import TRACKS, copy_workflow, dry_run_jobs, planned_run, run_snakemake
from debian_packages import NotInstallable

from celldag.plan import RUN_RECORD, make_plan
from celldag.registry import load_config

pytestmark = pytest.mark.e2e

TINY_CONFIG = {
    "datasets": ["bm_clean", "bm_small"],
    "methods": ["nj_raw", "nj_pca", "upgma_raw", "broken"],
    "seeds": [0, 1],
}


snakemake = run_snakemake


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("workflow"))
    datasets = yaml.safe_load((workdir / "config/datasets.yaml").read_text())
    base = datasets["bm_default"]
    # noise-free Brownian motion with many features: distances are close to additive, NJ must be exact
    datasets["bm_clean"] = base | {
        "params": {
            **base["params"],
            "depth": 3,
            "n_signal": 4000,
            "n_noise": 0,
            "n_spurious": 0,
            "noise_std": 0.0,
            "measurement_std": 0.0,
        }
    }
    datasets["bm_small"] = base | {"params": {**base["params"], "depth": 4}}
    (workdir / "config/datasets.yaml").write_text(yaml.safe_dump(datasets))
    methods = yaml.safe_load((workdir / "config/methods.yaml").read_text())
    methods["broken"] = methods["nj_raw"] | {"params": {"features": "umap", "reconstruction": "nj"}}
    (workdir / "config/methods.yaml").write_text(yaml.safe_dump(methods))
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(TINY_CONFIG))
    return workdir


@pytest.fixture(scope="module")
def finished_run(workflow_copy):
    snakemake(workflow_copy)
    return workflow_copy


def test_dry_run_lists_the_planned_jobs(workflow_copy):
    listed = dry_run_jobs(workflow_copy)
    config, registries = load_config(dict(TINY_CONFIG), "config.yaml", root=workflow_copy)
    assert listed == dict(make_plan(config, registries).jobs_per_rule())
    assert listed["run_method"] == 2 * 4  # datasets × methods: each job runs both seeds


def test_scores_table_and_leaderboard(finished_run):
    scores = pd.read_parquet(finished_run / "results/default/scores.parquet")
    assert list(scores.columns[:8]) == [
        "dataset",
        "track",
        "method",
        "variant",
        "seed",
        "metric",
        "value",
        "higher_is_better",
    ]
    core = scores[~scores["metric"].str.startswith("delta_")]
    assert len(core) == 2 * 4 * 2 * 3  # datasets × methods × seeds × metrics
    ok = core[core["status"] == "ok"]
    assert set(ok["metric"]) == {"rf", "quartet_dist", "qdist_sampled"}
    assert ok["value"].between(0, 1).all()
    # Δ against nj_raw per seed; none on bm_clean, where nj_raw is perfect (0) and Δ is undefined
    deltas = scores[scores["metric"].str.startswith("delta_")].set_index(["dataset", "method", "seed", "metric"])[
        "value"
    ]
    assert set(deltas.index.get_level_values("dataset")) == {"bm_small"}
    by_run = ok.set_index(["dataset", "method", "seed", "metric"])["value"]
    for seed in (0, 1):
        baseline, value = by_run[("bm_small", "nj_raw", seed, "rf")], by_run[("bm_small", "upgma_raw", seed, "rf")]
        assert deltas[("bm_small", "upgma_raw", seed, "delta_rf")] == pytest.approx((baseline - value) / baseline)
    # the exact-ish metric on noise-free BM: NJ recovers every tree
    clean_nj = ok[(ok["dataset"] == "bm_clean") & (ok["method"] == "nj_raw")]
    assert clean_nj.set_index(["seed", "metric"])["value"].to_dict() == {
        (seed, metric): 0.0 for seed in (0, 1) for metric in ("rf", "quartet_dist", "qdist_sampled")
    }
    leaderboard = (finished_run / "results/default/leaderboard.md").read_text()
    small = ok[(ok["dataset"] == "bm_small") & (ok["method"] == "upgma_raw") & (ok["metric"] == "rf")]["value"]
    expected = f"{small.mean():.3f} ± {small.std(ddof=1):.3f}"
    row = next(line for line in leaderboard.splitlines() if "| upgma_raw |" in line and expected in line)
    assert row.endswith("| 2/2 |")
    assert "## bm_clean (lineage)" in leaderboard and "## bm_small (lineage)" in leaderboard


def test_failing_method_is_recorded_and_does_not_stop_the_dag(finished_run):
    scores = pd.read_parquet(finished_run / "results/default/scores.parquet")
    broken = scores[scores["method"] == "broken"]
    assert set(broken["status"]) == {"failed"} and broken["value"].isna().all()
    runs = pd.read_parquet(finished_run / "results/default/runs.parquet")
    reason = runs.loc[runs["method"] == "broken", "status_reason"].iloc[0]
    assert reason == "ValueError: params.features must be 'raw' or 'pca', got 'umap'"
    assert (
        "| broken | default | failed | failed | failed | 0/2 |"
        in (finished_run / "results/default/leaderboard.md").read_text()
    )


def test_run_records_hold_provenance(finished_run):
    record = json.loads(
        (finished_run / planned_run(finished_run, "bm_small", "nj_pca", "default", 1).path(RUN_RECORD)).read_text()
    )
    assert record["seed"] == 1 and record["status"] == "ok"
    assert record["config"]["params"] == {"features": "pca", "n_components": 10, "reconstruction": "nj"}
    assert len(record["config_hash"]) == 64
    (checksum,) = record["input_sha256"].values()
    assert len(checksum) == 64
    assert record["packages"]["numpy"] and record["packages"]["scikit-bio"]
    assert record["device"].startswith("cpu") and record["wall_time_s"] > 0 and record["peak_rss_mb"] > 10


def test_every_dataset_has_its_figures_and_the_index_shows_them_in_chromium(finished_run):
    figures = sorted((finished_run / "results/default/figures").glob("*/*.png"))
    names = [figure.name for figure in TRACKS["lineage"].figures]
    assert [f"{p.parent.name}/{p.stem}" for p in figures] == sorted(
        f"{d}/{n}" for d in ("bm_clean", "bm_small") for n in names
    )
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in figures)
    try:
        dom, widths = rendered_dom(finished_run / "results/default/index.html")
    except NotInstallable as err:
        pytest.skip(f"no Chromium here: {err}")
    assert dom.count("<table") >= 2 + 1  # a leaderboard table per dataset, and the runs that are not ok
    assert 'id="bm_clean"' in dom and 'id="bm_small"' in dom and "upgma_raw" in dom
    assert "ValueError: params.features must be" in dom  # the broken method's runs, with their reason
    assert sorted(widths) == sorted(f"figures/{p.parent.name}/{p.name}" for p in figures)
    assert all(width > 100 for width in widths.values()), widths  # every figure loaded
    # captions are reStructuredText rendered by docutils: cost.rst's **…** is bold text, no asterisks left
    assert "first seed's time includes importing the method's libraries" in texts(dom, ".//figcaption//strong")
    assert "**" not in dom


def test_snakemake_report_holds_every_figure(finished_run):
    snakemake(finished_run, "--report", "results/report.html")
    report = (finished_run / "results/report.html").read_text()
    for name in [figure.name for figure in TRACKS["lineage"].figures] + ["leaderboard"]:
        assert f"{name}.png" in report or f"{name}.html" in report, name


def test_second_run_has_nothing_to_do(finished_run):
    assert "Nothing to be done" in snakemake(finished_run, "-n").stdout + snakemake(finished_run, "-n").stderr


def test_a_corrected_citation_reruns_nothing(finished_run):
    """A registry entry's reference and license, and a track's references, enter no key and reach no job's params
    (plan.without_citation): correcting them leaves a finished run finished."""
    methods_path, tracks_path = finished_run / "config/methods.yaml", finished_run / "config/tracks.yaml"
    shipped = {path: path.read_text() for path in (methods_path, tracks_path)}
    methods, tracks = yaml.safe_load(shipped[methods_path]), yaml.safe_load(shipped[tracks_path])
    methods["nj_raw"] |= {"reference": "A corrected citation. 2026.", "license": "Apache-2.0"}
    tracks["lineage"]["references"]["splits"]["reference"] = "A corrected citation. 2026."
    methods_path.write_text(yaml.safe_dump(methods))
    tracks_path.write_text(yaml.safe_dump(tracks, sort_keys=False, allow_unicode=True))  # the order params keep
    try:
        result = snakemake(finished_run, "-n")
        assert "Nothing to be done" in result.stdout + result.stderr
    finally:
        for path, text in shipped.items():
            path.write_text(text)


def test_a_second_configuration_shares_identical_runs_and_keeps_its_own_tables(finished_run):
    """Another name and one method param changed: only that method's runs are computed again, in their own
    directories; the first configuration's runs, scores and leaderboard stay as they are."""
    other = finished_run / "other.yaml"
    # compute settings say where a job runs, not what it computes: they rerun nothing
    other.write_text(
        yaml.safe_dump(
            {
                "name": "other",
                "method_params": {"nj_pca": {"n_components": 5}},
                "compute": {"gpus": True, "cpu_fallback": True},
            }
        )
    )
    jobs = dry_run_jobs(finished_run, "--configfile", str(other))
    figures = {rule: 2 for rule in jobs if rule.startswith("figure_lineage_")}  # each figure of the two datasets
    assert len(figures) == len(TRACKS["lineage"].figures)
    assert jobs == {"run_method": 2, "evaluate": 2, "aggregate": 1, **figures, "report_html": 1, "all": 1}
    snakemake(finished_run, "--configfile", str(other))
    scores = {
        name: pd.read_parquet(finished_run / f"results/{name}/scores.parquet").set_index(
            ["dataset", "method", "seed", "metric"]
        )["value"]
        for name in ("default", "other")
    }
    assert scores["default"]["bm_small", "nj_raw"].equals(scores["other"]["bm_small", "nj_raw"])
    assert not scores["default"]["bm_small", "nj_pca"].equals(scores["other"]["bm_small", "nj_pca"])
    first = snakemake(finished_run, "-n")
    assert "Nothing to be done" in first.stdout + first.stderr  # the shared runs were not made again


def test_unknown_method_id_stops_before_any_job(workflow_copy, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(TINY_CONFIG | {"methods": ["nj_raw", "nj_typo"]}))
    result = snakemake(workflow_copy, "-n", "--configfile", str(bad), check=False)
    assert result.returncode != 0
    assert f"{bad}: methods[1]: unknown method id 'nj_typo'" in result.stdout + result.stderr


def test_workflow_lints_clean(repo):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr
