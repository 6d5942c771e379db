"""Runner, evaluation and aggregation without Snakemake: statuses, determinism, leaderboard numbers."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, TRACKS
from runs import DATASET, NJ_RAW, run_and_score

from celldag import artifacts
from celldag.contracts import check_scores
from celldag.jobs.prepare import write_prepared_dataset
from celldag.jobs.runner import run_method
from celldag.provenance import config_hash
from celldag.report.leaderboard import aggregate, leaderboard_markdown


def test_same_seed_gives_identical_scores(tmp_path):
    _, first = run_and_score(tmp_path / "one", NJ_RAW)
    _, second = run_and_score(tmp_path / "two", NJ_RAW)
    pd.testing.assert_frame_equal(
        artifacts.read_scores(first / "scores.parquet"), artifacts.read_scores(second / "scores.parquet")
    )
    one, two = (json.loads((d / "run.json").read_text()) for d in (first, second))
    assert one["config_hash"] == two["config_hash"] == config_hash(one["config"])
    assert list(one["input_sha256"].values()) == list(two["input_sha256"].values())
    # what the prepared dataset was (e.g. whether it was standardised) is in the record, not only in its file
    assert one["dataset_facts"] == {"standardized": False, "dataset_id": "bm_t", "track": "lineage", "seed": 0}


def test_other_seed_gives_other_scores(tmp_path):
    _, first = run_and_score(tmp_path, NJ_RAW, seed=0)
    _, second = run_and_score(tmp_path, NJ_RAW, seed=1)
    assert not np.array_equal(
        artifacts.read_scores(first / "scores.parquet")["value"],
        artifacts.read_scores(second / "scores.parquet")["value"],
    )


def test_not_applicable_and_failed_methods_are_recorded(tmp_path, monkeypatch):
    import celldag.methods.distance_tree as module
    from celldag.methods import NotApplicable

    def refuse(inputs, params, seed):
        raise NotApplicable("needs counts")

    monkeypatch.setattr(module, "run", refuse)
    status, run_dir = run_and_score(tmp_path, NJ_RAW, tag="refuses")
    assert status == "not_applicable"
    scores = artifacts.read_scores(run_dir / "scores.parquet")
    assert set(scores["status"]) == {"not_applicable"} and scores["value"].isna().all()
    assert json.loads((run_dir / "run.json").read_text())["status_reason"] == "needs counts"


def test_a_need_the_dataset_cannot_meet_is_not_applicable_without_calling_the_method(tmp_path, monkeypatch):
    import anndata

    import celldag.methods.distance_tree as module

    def must_not_run(inputs, params, seed):
        raise AssertionError("the runner called a method whose needs the dataset does not meet")

    monkeypatch.setattr(module, "run", must_not_run)
    paired = tmp_path / "paired.h5ad"
    write_prepared_dataset("bm_t", DATASET, TRACKS["lineage"], 0, str(paired))
    single = anndata.read_h5ad(paired)
    del single.layers["train"], single.layers["test"], single.layers["validation"]  # one profile per leaf
    artifacts.write_h5ad(single, tmp_path / "single.h5ad")
    status = run_method(
        prepared_path=str(tmp_path / "single.h5ad"),
        output_path=str(tmp_path / "run/output.h5ad"),
        record_path=str(tmp_path / "run/run.json"),
        dataset_id="bm_t",
        dataset_entry=DATASET,
        method_id="pairwise",
        method_entry=NJ_RAW | {"needs_by_variant": {"default": ["replicates"]}},
        variant="default",
        seed=0,
        track=TRACKS["lineage"],
    )
    assert status == "not_applicable"
    reason = json.loads((tmp_path / "run/run.json").read_text())["status_reason"]
    assert reason == "pairwise/default needs a train/test replicate pair; this dataset has one profile per leaf"


def test_aggregate_writes_mean_and_sd(tmp_path):
    dirs = [run_and_score(tmp_path, NJ_RAW, seed=seed)[1] for seed in (0, 1, 2)]
    scores = aggregate(
        score_paths=[str(d / "scores.parquet") for d in dirs],
        record_paths=[str(d / "run.json") for d in dirs],
        scores_path=str(tmp_path / "scores.parquet"),
        runs_path=str(tmp_path / "runs.parquet"),
        leaderboard_path=str(tmp_path / "leaderboard.md"),
        baseline="nj_raw",
        tracks=TRACKS,
    )
    rf = scores.loc[scores["metric"] == "rf", "value"]
    assert f"| a | default | {rf.mean():.3f} ± {rf.std(ddof=1):.3f} |" in (tmp_path / "leaderboard.md").read_text()
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    assert list(runs["seed"]) == [0, 1, 2] and (runs["status"] == "ok").all()


def test_leaderboard_orders_by_first_metric_and_marks_direction():
    rows = []
    for method, rf in (("worse", 0.8), ("better", 0.2)):
        for seed in (0, 1):
            for metric in ("qdist_sampled", "rf"):
                rows.append(
                    {
                        "dataset": "d",
                        "track": "lineage",
                        "method": method,
                        "variant": "default",
                        "seed": seed,
                        "metric": metric,
                        "value": rf + seed / 10,
                        "higher_is_better": False,
                        "status": "ok",
                    }
                )
    text = leaderboard_markdown(pd.DataFrame(rows), TRACKS)
    assert "| method | variant | rf ↓ | qdist_sampled ↓ | seeds ok |" in text
    assert text.index("| better |") < text.index("| worse |")
    assert "| better | default | 0.250 ± 0.071 | 0.250 ± 0.071 | 2/2 |" in text


@pytest.mark.parametrize("value", [{"b": 1, "a": [1, 2]}, {"a": [1, 2], "b": 1}])
def test_config_hash_is_key_order_independent(value):
    assert config_hash(value) == config_hash({"a": [1, 2], "b": 1})
    assert config_hash(value) != config_hash({"a": [2, 1], "b": 1})


def score_rows(method, metric_values, seeds=(0, 1), status="ok", variant="default"):
    return [
        {
            "dataset": "d",
            "track": "lineage",
            "method": method,
            "variant": variant,
            "seed": seed,
            "metric": metric,
            "value": value if status == "ok" else np.nan,
            "higher_is_better": False,
            "status": status,
        }
        for seed in seeds
        for metric, value in metric_values.items()
    ]


def test_deltas_are_relative_reductions_against_the_baseline_per_seed():
    from celldag.report.leaderboard import add_deltas

    scores = pd.DataFrame(
        score_rows("nj_raw", {"rf": 0.5, "quartet_dist": 0.0})
        + score_rows("model", {"rf": 0.2, "quartet_dist": 0.1})
        + score_rows("broken", {"rf": 0.0}, status="failed")
    )
    with_deltas = add_deltas(scores, "nj_raw", TRACKS)
    deltas = with_deltas[with_deltas["metric"].str.startswith("delta_")]
    # 0.6 = (0.5 - 0.2) / 0.5; no Δ where the baseline is 0, for failed runs, or for the baseline itself
    assert deltas[["method", "seed", "metric"]].values.tolist() == [["model", 0, "delta_rf"], ["model", 1, "delta_rf"]]
    np.testing.assert_allclose(deltas["value"], [0.6, 0.6])
    assert deltas["higher_is_better"].all()
    check_scores(with_deltas, "s.parquet")


def test_leaderboard_puts_setting_metrics_in_their_own_table():
    scores = pd.DataFrame(
        score_rows("nj_raw", {"rf": 0.5}) + score_rows("celltreeqm", {"rf": 0.3, "k_qdist": 0.01}, variant="hlp")
    )
    text = leaderboard_markdown(scores, TRACKS, "nj_raw")
    main, hlp = text.split("### high-level partition")
    assert "| celltreeqm | hlp | 0.300 ± 0.000 | 2/2 |" in main and "| nj_raw | default | 0.500 ± 0.000 | 2/2 |" in main
    assert "| celltreeqm | hlp | 0.010 ± 0.000 | 2/2 |" in hlp and "nj_raw" not in hlp
    assert "Δ = relative reduction" not in text  # no Δ rows here: the note would explain nothing


def test_leaderboard_prints_no_negative_zero():
    rows = score_rows("nj_raw", {"rf": 0.5}) + score_rows("m", {"rf": -0.00001})
    assert "| m | default | 0.000 ± 0.000 | 2/2 |" in leaderboard_markdown(pd.DataFrame(rows), TRACKS)


def test_paired_difference_is_a_t_interval_over_seeds():
    from celldag.report.leaderboard import leaderboard_markdown, paired_difference

    rows = []
    for seed, (a, b) in enumerate([(0.5, 0.4), (0.7, 0.5), (0.6, 0.3), (0.9, None)]):  # seed 3: b failed
        for variant, value in (("text", a), ("random", b)):
            rows.append(
                {
                    "dataset": "d",
                    "track": "representation",
                    "method": "scilama",
                    "variant": variant,
                    "seed": seed,
                    "metric": "total",
                    "value": value if value is not None else float("nan"),
                    "higher_is_better": True,
                    "status": "ok" if value is not None else "failed",
                }
            )
    scores = pd.DataFrame(rows)
    result = paired_difference(scores, "scilama/text", "scilama/random", "total")
    # differences 0.1, 0.2, 0.3 (seed 3 unpaired): mean 0.2, sd 0.1, t(0.975, 2) = 4.3027
    assert result["n"] == 3 and result["mean"] == pytest.approx(0.2)
    assert result["high"] - result["mean"] == pytest.approx(4.302653 * 0.1 / 3**0.5, rel=1e-5)
    text = leaderboard_markdown(
        scores, TRACKS, paired=[{"method": "scilama/text", "against": ["scilama/random"], "metrics": ["total"]}]
    )
    assert "| scilama/text − scilama/random | total | 0.200 | [-0.048, 0.448] | 3 |" in text


# a device: cuda run is a GPU job whether its caller says so or not (rule run_method's gpu=1: plan.requests_gpu)
@pytest.mark.parametrize("gpu_requested", [True, False])
def test_a_gpu_job_without_cuda_aborts_unless_cpu_fallback_is_allowed(tmp_path, gpu_requested):
    from celldag.jobs.runner import NoGPUError

    prepared = tmp_path / "data.h5ad"
    write_prepared_dataset("bm_t", DATASET, TRACKS[DATASET["track"]], 0, str(prepared))
    method = {
        "track": "lineage",
        "run": "celldag.methods.celltreeqm:run",
        "gpu": True,
        "needs": ["supervision"],
        "params": {
            **yaml.safe_load((REPO / "config/methods.yaml").read_text())["celltreeqm"]["params"],
            "steps": 2,
            "device": "cuda",
        },
        "variants": {"supervised": {"setting": "supervised"}},
    }
    run_dir = tmp_path / "run"
    common = dict(
        prepared_path=str(prepared),
        output_path=str(run_dir / "output.h5ad"),
        record_path=str(run_dir / "run.json"),
        dataset_id="bm_t",
        dataset_entry=DATASET,
        method_id="celltreeqm",
        method_entry=method,
        variant="supervised",
        seed=0,
        track=TRACKS["lineage"],
        gpu_requested=gpu_requested,
    )
    with pytest.raises(NoGPUError, match="requested a GPU but torch .* sees no CUDA device"):
        run_method(**common, cpu_fallback=False)
    assert not run_dir.exists()  # aborted before anything was written
    assert run_method(**common, cpu_fallback=True) == "ok"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["config"]["params"]["device"] == "cpu" and record["environment"]["CUDA_VISIBLE_DEVICES"] is None


def test_checkpoints_of_a_run_with_other_params_are_not_resumed(tmp_path, caplog):
    from celldag.jobs.runner import keep_only_matching_checkpoints

    directory = tmp_path / "checkpoint"
    run = {"params": {"lr": 0.001}, "seed": 0, "inputs": {"prepared.h5ad": "ab" * 32}}
    keep_only_matching_checkpoints(directory, run)
    (directory / "checkpoint.pt").write_bytes(b"weights")
    keep_only_matching_checkpoints(directory, run)  # the same run, rerun after a kill: resumes
    assert (directory / "checkpoint.pt").read_bytes() == b"weights"
    keep_only_matching_checkpoints(directory, run | {"params": {"lr": 0.01}})  # lr changed before the rerun
    assert not (directory / "checkpoint.pt").exists() and directory.is_dir()
    assert "holds checkpoints of a run with other params or inputs" in caplog.text
    (directory / "run-fingerprint.txt").unlink()
    (directory / "checkpoint.pt").write_bytes(b"weights of unknown origin")
    keep_only_matching_checkpoints(directory, run)
    assert not (directory / "checkpoint.pt").exists()


def test_out_of_memory_fails_the_job_while_a_method_bug_becomes_a_failed_row(monkeypatch):
    """OOM is the machine's limit: the job must fail so Snakemake retries it with twice the memory (resuming its
    checkpoint). A bug fails the same way every time: one `failed` row, and the benchmark goes on."""
    import types

    from celldag.jobs.runner import call_method

    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name, without needing CUDA
        pass

    for name, error in (
        ("oom_host", MemoryError()),
        ("oom_gpu", OutOfMemoryError("CUDA out of memory")),
        ("buggy", ValueError("bad shape")),
    ):
        module = types.ModuleType(name)
        module.run = lambda inputs, params, seed, error=error: (_ for _ in ()).throw(error)
        monkeypatch.setitem(sys.modules, name, module)
    inputs = object()  # never read: run() raises first
    with pytest.raises(MemoryError):
        call_method("oom_host:run", inputs, {}, 0)
    with pytest.raises(OutOfMemoryError):
        call_method("oom_gpu:run", inputs, {}, 0)
    _, status, reason = call_method("buggy:run", inputs, {}, 0)
    assert (status, reason) == ("failed", "ValueError: bad shape")


def test_run_method_reports_progress_outside_snakemake(tmp_path):
    """Called from a lab's own script (no Snakemake job log), the runner still says what it does."""
    import subprocess

    prepared = tmp_path / "data.h5ad"
    write_prepared_dataset("bm_t", DATASET, TRACKS["lineage"], 0, str(prepared))
    script = f"""
from celldag.registry import read_yaml
from celldag.jobs.runner import run_method
from celldag.tracks import load_track
run_method(prepared_path={str(prepared)!r}, output_path={str(tmp_path / "run/output.h5ad")!r},
           record_path={str(tmp_path / "run/run.json")!r}, dataset_id="bm_t", dataset_entry={DATASET!r},
           method_id="nj_raw", method_entry={NJ_RAW!r}, variant="default", seed=0,
           track=load_track("celldag.lineage.track:TRACK"))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "running nj_raw/default on bm_t (seed 0)" in result.stderr and "status ok" in result.stderr


PEAKS_IN_ONE_PROCESS = """
import json
import numpy as np
from celldag.provenance import RunClock

first = RunClock()
block = np.ones(400 * 2**20 // 8)  # 400 MB resident
block[:] = 2.0
del block
large = first.record(seed=0, config={}, input_checksums={})["peak_rss_mb"]
small = RunClock().record(seed=1, config={}, input_checksums={})["peak_rss_mb"]
print(json.dumps([large, small]))
"""


def test_each_run_of_a_job_records_its_own_peak_rss():
    """A job running its seeds in turn: the second run's peak is not the first one's 400 MB."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PEAKS_IN_ONE_PROCESS], capture_output=True, text=True, check=True)
    large, small = json.loads(done.stdout)
    assert large > 400 and small < large - 300


class FakeCuda:
    """torch.cuda of a process that used a GPU: 1.5 GiB peak until reset."""

    def __init__(self) -> None:
        self.peak = 1.5 * 2**30

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def max_memory_allocated(self) -> float:
        return self.peak

    def reset_peak_memory_stats(self) -> None:
        self.peak = 0.0


def test_a_run_records_its_peak_gpu_memory_and_none_without_a_gpu(monkeypatch):
    from types import SimpleNamespace

    from celldag import provenance

    cpu_record = provenance.RunClock().record(seed=0, config={}, input_checksums={})
    assert "peak_gpu_mb" in cpu_record and cpu_record["peak_gpu_mb"] is None  # this machine has no GPU

    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    assert provenance.peak_gpu_mb() == 1536.0
    monkeypatch.setattr(provenance, "device_description", lambda: "cuda")
    monkeypatch.setattr(provenance, "machine_description", lambda: {})
    clock = provenance.RunClock()  # a new run of the job starts the peak over
    cuda.peak = 2.25 * 2**30
    assert clock.record(seed=1, config={}, input_checksums={})["peak_gpu_mb"] == 2304.0
