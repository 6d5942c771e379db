"""``celldag compare``: verdicts, tolerances, rankings and environment differences on hand-made tables and
records; the machine section of run records; then one tiny real run compared with itself and with an edited copy."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, TRACKS

from celldag import provenance
from celldag.cli import main
from celldag.errors import InputError
from celldag.report.comparison import SCORE_HEADER, comparison_blocks
from celldag.report.leaderboard import markdown
from celldag.results import compare, record_differences
from celldag.results.compare import Side, compare_sides
from celldag.results.record_differences import run_facts

ULP = math.ulp(0.5)
CPU, GPU = "cpu (x86_64)", "cuda:0 (NVIDIA H200)"

# ---------------------------------------------------------------- hand-made sides


def record(method: str, variant: str = "default", kind: str = "baseline", **fields) -> dict:
    """A run record holding what compare reads of one."""
    return {
        "config": {"method": {"kind": kind, "kind_by_variant": {}}, "variant": variant, "params": {"k": 1}},
        "config_hash": "c" * 64,
        "input_sha256": {"results/data/d/seed0.h5ad": "a" * 64},
        "inputs": {"prepared": "results/data/d/seed0.h5ad"},
        "packages": {"numpy": "2.3.1"},
        "device": CPU,
        "host": "laptop",
        "threads": 1,
        "environment": {"CUDA_VISIBLE_DEVICES": None, "SLURM_JOB_ID": None},
    } | fields


def side(
    values: dict[tuple, float],
    device: str = CPU,
    status: dict[tuple, str] | None = None,
    track: str = "lineage",
    records: dict[str, dict] | None = None,
    runs: list[tuple] | None = None,
) -> Side:
    """A side from {(dataset, method/variant, seed, metric): value}; every run on ``device`` with a default record
    (``records``: method/variant → the record of its runs); ``runs``: the runs in runs.parquet (default: all)."""
    status = status or {}
    rows = []
    for (dataset, entry, seed, metric), value in values.items():
        method, variant = entry.split("/", 1)
        rows.append(
            {
                "dataset": dataset,
                "track": track,
                "method": method,
                "variant": variant,
                "seed": seed,
                "metric": metric,
                "value": value,
                "higher_is_better": TRACKS[track].higher_is_better(metric),
                "status": status.get((dataset, entry, seed, metric), "ok"),
            }
        )
    keys = runs if runs is not None else sorted({(d, *e.split("/", 1), s) for d, e, s, _ in values})
    records = records or {}
    return Side(
        Path("results/x"),
        pd.DataFrame(rows),
        {key: {"device": device} for key in keys},
        {key: records.get(f"{key[1]}/{key[2]}", record(key[1], key[2])) for key in keys},
    )


def verdicts(a: Side, b: Side, **tolerance) -> dict[tuple, tuple[str, str]]:
    """(method/variant, seed, metric) → (verdict, rule)."""
    return {
        (f"{j.key[2]}/{j.key[3]}", j.key[4], j.key[5]): (j.verdict, str(j.rule))
        for j in compare_sides(a, b, TRACKS, **tolerance).scores
    }


def test_cpu_runs_are_compared_by_their_bits():
    a = side(
        {
            ("d", "nj/default", 0, "rf"): 0.5,
            ("d", "nj/default", 0, "quartet_dist"): math.nan,
            ("d", "nj/default", 1, "rf"): 0.5,
        }
    )
    b = side(
        {
            ("d", "nj/default", 0, "rf"): 0.5,
            ("d", "nj/default", 0, "quartet_dist"): math.nan,
            ("d", "nj/default", 1, "rf"): 0.5 + ULP,
        }
    )
    assert verdicts(a, b) == {
        ("nj/default", 0, "rf"): ("identical", "same bits (both on CPU)"),
        ("nj/default", 0, "quartet_dist"): ("identical", "same bits (both on CPU)"),  # NaN = NaN
        ("nj/default", 1, "rf"): ("moved", "same bits (both on CPU)"),  # one unit in the last place
    }
    moved = next(j for j in compare_sides(a, b, TRACKS).scores if j.verdict == "moved")
    assert moved.delta == ULP and moved.relative == ULP / 0.5


def test_cuda_runs_move_within_the_audits_bound_and_counts_not_at_all():
    values = {
        ("d", "scvi/default", 0, "nmi_kmeans"): 0.5,
        ("d", "scvi/default", 0, "ari_kmeans"): 0.5,
        ("d", "scvi/default", 0, "n_marker_genes"): 18.0,
    }
    moved = {
        ("d", "scvi/default", 0, "nmi_kmeans"): 0.5 + 4e-5,
        ("d", "scvi/default", 0, "ari_kmeans"): 0.5 + 1e-4,
        ("d", "scvi/default", 0, "n_marker_genes"): 19.0,
    }
    a, b = side(values, track="representation"), side(moved, GPU, track="representation")
    found = verdicts(a, b)
    bound = "abs(Δ) ≤ 1e-06 + 0.0001·abs(A) (CUDA in B)"
    assert found == {
        ("scvi/default", 0, "nmi_kmeans"): ("within tolerance", bound),  # 4e-5 ≤ 1e-6 + 1e-4 · 0.5
        ("scvi/default", 0, "ari_kmeans"): ("moved", bound),
        ("scvi/default", 0, "n_marker_genes"): ("moved", "Δ = 0 (a count)"),
    }
    rows = [
        line for line in markdown(comparison_blocks(compare_sides(a, b, TRACKS))).splitlines() if line.startswith("| ")
    ]
    assert {line.count(" | ") for line in rows[1:]} == {len(SCORE_HEADER) - 1}  # the rule's text does not split a cell


def test_a_run_without_record_is_compared_within_the_tolerance():
    a = side({("d", "nj/default", 0, "rf"): 0.5})
    b = side({("d", "nj/default", 0, "rf"): 0.5 + ULP}, runs=[])
    assert verdicts(a, b) == {
        ("nj/default", 0, "rf"): ("within tolerance", "abs(Δ) ≤ 1e-06 + 0.0001·abs(A) (not in runs.parquet in B)")
    }


def test_rtol_and_atol_replace_the_tolerance_everywhere_and_are_stated():
    a = side({("d", "nj/default", 0, "rf"): 0.5, ("d", "nj/default", 0, "quartet_dist"): 0.5})
    b = side({("d", "nj/default", 0, "rf"): 0.51, ("d", "nj/default", 0, "quartet_dist"): 0.53})
    assert verdicts(a, b, rtol=0.05, atol=0.0) == {
        ("nj/default", 0, "rf"): ("within tolerance", "abs(Δ) ≤ 0 + 0.05·abs(A) (--rtol/--atol)"),  # 0.01 ≤ 0.025
        ("nj/default", 0, "quartet_dist"): ("moved", "abs(Δ) ≤ 0 + 0.05·abs(A) (--rtol/--atol)"),
    }
    text = markdown(comparison_blocks(compare_sides(a, b, TRACKS, rtol=0.05, atol=0.0)))
    assert "Tolerance (--rtol/--atol): |Δ| ≤ 0 + 0.05·|A| for every continuous metric; counts Δ = 0." in text
    with pytest.raises(InputError, match="--rtol -1.0 --atol None: a tolerance is a number ≥ 0"):
        compare_sides(a, b, TRACKS, rtol=-1.0)


def test_status_changes_and_rows_on_one_side_only_come_first():
    a = side({("d", "nj/default", 0, "rf"): 0.5, ("d", "upgma/default", 0, "rf"): 0.25})
    b = side(
        {("d", "nj/default", 0, "rf"): math.nan, ("d", "nj/default", 1, "rf"): 0.5},
        status={("d", "nj/default", 0, "rf"): "failed"},
    )
    comparison = compare_sides(a, b, TRACKS)
    assert [(j.verdict, j.key[2], j.key[4]) for j in comparison.scores] == [
        ("status changed", "nj", 0),
        ("only in A", "upgma", 0),
        ("only in B", "nj", 1),
    ]
    assert comparison.counts["status changed"] == 1 and comparison.failed
    table = markdown(comparison_blocks(comparison))
    assert "| status changed | d | lineage | nj | default | 0 | rf | 0.5 | nan (failed) | – | – |" in table


# ---------------------------------------------------------------- rankings


def ranked(values: dict[str, tuple[float, ...]], dataset: str = "d") -> dict[tuple, float]:
    """{method/variant: (rf of seed 0, of seed 1, …)} → side values."""
    return {(dataset, entry, seed, "rf"): value for entry, pair in values.items() for seed, value in enumerate(pair)}


def test_an_order_change_counts_only_between_methods_the_seeds_separate_on_both_sides():
    a = side(
        ranked(
            {
                "nj/default": (0.10, 0.12, 0.11, 0.13),
                "upgma/default": (0.50, 0.52, 0.51, 0.55),
                "fnj/default": (0.80, 0.81, 0.83, 0.82),
            }
        )
    )
    b = side(
        ranked(
            {
                "nj/default": (0.60, 0.61, 0.62, 0.64),
                "upgma/default": (0.50, 0.52, 0.51, 0.55),
                "fnj/default": (0.80, 0.81, 0.83, 0.82),
            }
        )
    )
    (ranking,) = compare_sides(a, b, TRACKS).rankings
    assert ranking.metric == "rf"  # lower is better: the first metric of lineage's first group
    assert ranking.a == ("nj/default", "upgma/default", "fnj/default")
    assert ranking.b == ("upgma/default", "nj/default", "fnj/default")
    assert ranking.swapped() == [("nj/default", "upgma/default")] and ranking.changed
    assert frozenset({"nj/default", "upgma/default"}) in ranking.separable_a & ranking.separable_b


def test_a_swap_between_methods_the_seeds_cannot_separate_is_not_an_order_change():
    """Two seeds (or no seed spread) cannot separate nj from upgma: their means swap, the leaderboard has not
    changed; `celldag compare` of a run against its own rerun does not fail on noise between tied methods."""
    a = side(ranked({"nj/default": (0.1, 0.2), "upgma/default": (0.3, 0.3), "fnj/default": (0.5, 0.6)}))
    b = side(ranked({"nj/default": (0.4, 0.4), "upgma/default": (0.3, 0.3), "fnj/default": (0.5, 0.6)}))
    (ranking,) = compare_sides(a, b, TRACKS).rankings
    assert ranking.b == ("upgma/default", "nj/default", "fnj/default")
    assert ranking.swapped() == [] and ranking.tied_swaps() == 1 and not ranking.changed
    same = compare_sides(
        a,
        side(ranked({"nj/default": (0.1, 0.2), "upgma/default": (0.3, 0.3), "fnj/default": (0.5, 0.6 + ULP)})),
        TRACKS,
    )
    assert not same.rankings[0].changed and same.failed  # a moved score, the same order


def test_controls_are_not_ranked_and_failed_runs_rank_last():
    values = ranked({"nj/default": (0.2, 0.2), "nj/relabelled": (0.1, 0.1), "upgma/default": (math.nan, math.nan)})
    a = side(
        values,
        status={key: "failed" for key in values if key[1] == "upgma/default"},
        records={"nj/relabelled": record("nj", "relabelled", kind="control")},
    )
    (ranking,) = compare_sides(a, a, TRACKS).rankings
    assert ranking.a == ("nj/default", "upgma/default") and not ranking.changed


def test_several_datasets_of_a_track_are_also_ranked_by_mean_rank():
    a = side(
        ranked({"nj/default": (0.1, 0.1), "upgma/default": (0.2, 0.2)}, "d1")
        | ranked({"nj/default": (0.1, 0.1), "upgma/default": (0.2, 0.2)}, "d2")
    )
    b = side(
        ranked({"nj/default": (0.3, 0.3), "upgma/default": (0.2, 0.2)}, "d1")
        | ranked({"nj/default": (0.3, 0.3), "upgma/default": (0.2, 0.2)}, "d2")
    )
    rankings = {r.scope: r for r in compare_sides(a, b, TRACKS).rankings}
    assert list(rankings) == ["d1 (lineage)", "d2 (lineage)", "lineage: mean rank over 2 datasets"]
    overall = rankings["lineage: mean rank over 2 datasets"]
    assert overall.a == ("nj/default", "upgma/default") and overall.b == ("upgma/default", "nj/default")
    assert compare.mean_rank_order([("x", "y", "z"), ("y", "x")]) == ("x", "y", "z")  # x: 1.5, y: 1.5 (by name), z: 3


# ---------------------------------------------------------------- environment differences

MACHINE = {
    "cpu_model": "AMD EPYC",
    "isa": ["avx", "avx2", "fma"],
    "cpus": 16,
    "os": "Linux-6.8",
    "gpu": None,
    "libraries": [
        {
            "internal_api": "openblas",
            "version": "0.3.27",
            "num_threads": 16,
            "architecture": "Haswell",
            "file": "libopenblas.so",
        }
    ],
    "threads": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": None},
}


def test_the_fields_that_differ_are_summarised_with_their_values_inputs_first():
    values = ranked({"nj/default": (0.1, 0.2), "upgma/default": (0.3, 0.3)})
    intel = MACHINE | {"cpu_model": "Intel Xeon", "isa": ["avx", "avx2", "avx512f", "fma"]}
    a = side(values, records={e: record(e.split("/")[0], machine=MACHINE) for e in ("nj/default", "upgma/default")})
    b_records = {
        "nj/default": record(
            "nj",
            packages={"numpy": "2.3.4"},
            machine=intel,
            threads=4,
            environment={"CUDA_VISIBLE_DEVICES": None, "SLURM_JOB_ID": "123"},
        ),
        "upgma/default": record(
            "upgma", packages={"numpy": "2.3.4"}, machine=intel, input_sha256={"results/data/d/seed0.h5ad": "b" * 64}
        ),
    }
    comparison = compare_sides(a, side(values, records=b_records), TRACKS)
    assert [str(item) for item in comparison.environment] == [
        "input prepared sha256 aaaaaaaaaaaa… → sha256 bbbbbbbbbbbb… (2 of 4 runs)",
        "machine.cpu_model AMD EPYC → Intel Xeon (all 4 runs)",
        "machine.isa avx avx2 fma → avx avx2 avx512f fma (all 4 runs)",
        "numpy 2.3.1 → 2.3.4 (all 4 runs)",
        "SLURM job no → yes (2 of 4 runs)",
        "threads 1 → 4 (2 of 4 runs)",
    ]
    assert comparison.run_differences[("d", "nj", "default", 0)]["threads"] == ("1", "4")
    text = markdown(comparison_blocks(comparison))
    assert "Different inputs: 2 matched runs did not read the same data" in text
    assert comparison.environment[0].field == "input prepared" and not comparison.failed  # the scores are the same


def test_records_without_machine_or_without_a_file_are_compared_as_not_recorded():
    old = record("nj")  # written before the machine section
    new = record("nj", machine=MACHINE | {"cpu_model": "Intel Xeon"})
    assert record_differences.differing_facts(run_facts(old), run_facts(new)) == {
        "machine": ("not recorded", "recorded")
    }
    assert record_differences.differing_facts(run_facts(None), run_facts(new)) == {"run record": ("missing", "found")}
    assert record_differences.differing_facts(run_facts(None), run_facts(None)) == {}
    gpu = MACHINE | {
        "gpu": {"name": "NVIDIA H200", "cuda": "12.8", "cudnn": 91002, "driver_cuda": "12.8"},
        "libraries": [
            *MACHINE["libraries"],
            {
                "internal_api": "openmp",
                "version": None,
                "num_threads": 16,
                "architecture": None,
                "file": "libgomp.so.1",
            },
        ],
    }
    differences = record_differences.differing_facts(
        run_facts(record("nj", machine=MACHINE)), run_facts(record("nj", machine=gpu))
    )
    assert differences["machine.gpu.name"] == ("absent", "NVIDIA H200")
    assert differences["machine.openmp"] == ("absent", "(16 threads, libgomp.so.1)")


# ---------------------------------------------------------------- the machine section of run records


MACHINE_NOW = """
import json, sys, time
if sys.argv[1] == "numpy":
    import numpy
from celldag import provenance
start = time.perf_counter()
machine = provenance.machine_description()
print(json.dumps([machine, time.perf_counter() - start, "torch" in sys.modules]))
"""


def machine_now(*args: str) -> tuple[dict, float, bool]:
    """A fresh process's machine section, the seconds it took and whether torch got imported."""
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "3"}
    done = subprocess.run(
        [sys.executable, "-c", MACHINE_NOW, *args], capture_output=True, text=True, check=True, env=env
    )
    return tuple(json.loads(done.stdout))


def test_the_machine_section_names_cpu_isa_libraries_and_threads_without_importing_torch():
    machine, seconds, torch_imported = machine_now("numpy")
    assert seconds < 0.05 and not torch_imported
    assert {library["internal_api"] for library in machine["libraries"]} >= {"openblas"}
    assert set(machine["libraries"][0]) == {"internal_api", "version", "num_threads", "architecture", "file"}
    assert machine["threads"] == {
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": None,
        "OPENBLAS_NUM_THREADS": None,
        "NUMBA_NUM_THREADS": None,
    }
    assert machine["gpu"] is None and machine["cpus"] >= 1 and machine["os"].startswith("Linux")
    assert machine["isa"] == sorted(machine["isa"])
    assert all(
        flag in provenance.NUMERIC_ISA or flag.startswith(provenance.NUMERIC_ISA_PREFIXES) for flag in machine["isa"]
    )
    without_numpy, _, _ = machine_now("bare")
    assert without_numpy["libraries"] == []  # threadpoolctl is asked only once numpy is loaded


def test_only_the_flags_that_change_numerics_are_recorded(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu sse2 sse4_2 avx2 avx "
        "avx512f avx512_bf16 amx_tile fma ht\n\nprocessor\t: 1\nmodel name\t: other\n"
    )
    assert provenance.cpu_model_and_isa(str(x86)) == (
        "Intel(R) Xeon(R) Platinum 8480+",
        ["amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "fma", "sse4_2"],
    )
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sve crc32\nCPU part\t: 0xd40\n")
    model, isa = provenance.cpu_model_and_isa(str(arm))
    assert isa == ["asimd", "sve"] and model  # ARM names no model: the platform's name stands in
    assert provenance.cpu_model_and_isa(str(tmp_path / "none"))[1] == []


# ---------------------------------------------------------------- arguments


def test_a_folder_is_a_config_output_a_results_folder_with_one_or_a_config_name(tmp_path, monkeypatch):
    for name in ("default", "other"):
        (tmp_path / "results" / name).mkdir(parents=True)
        (tmp_path / "results" / name / "scores.parquet").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert compare.results_folder("results/other") == Path("results/other")
    assert compare.results_folder("default") == Path("results/default")
    with pytest.raises(InputError, match=r"^results: holds the results of 2 configs \(default, other\): name one, "):
        compare.results_folder("results")
    (tmp_path / "results/other/scores.parquet").unlink()
    assert compare.results_folder("results") == Path("results/default")
    with pytest.raises(InputError, match="^nothing: not a results folder"):
        compare.results_folder("nothing")


def test_bad_arguments_are_one_line_and_exit_status_2(capsys):
    assert main(["compare", "results/default"]) == 2
    assert main(["compare", "a", "b", "--configfile", "x.yaml"]) == 2
    assert main(["compare", "--published", "a", "b"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        "error: celldag compare A B: two results folders, got 1 (or --published [RESULTS])",
        "error: celldag compare A B: --configfile and --config-key are for --published (A and B are read as they are)",
        "error: celldag compare --published [RESULTS]: one results folder at most, without --rtol/--atol/--all",
    ]


def test_published_hands_its_arguments_to_celldag_published(monkeypatch):
    from celldag import cli

    calls = []
    monkeypatch.setattr(cli, "compare_published", lambda *args: calls.append(args) or 0)
    assert main(["compare", "--published", "results/default", "--configfile", "mine.yaml", "--out", "o"]) == 0
    assert calls == [("results/default", "mine.yaml", ".", None, "o")]
    assert main(["compare", "--published", "--config-key", "celldag"]) == 0
    assert calls[1] == (None, "config/config.yaml", ".", "celldag", None)  # None: the config's results folder


def test_make_compare_names_the_baseline_it_needs():
    missing = subprocess.run(["make", "-n", "compare"], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and "make compare BASELINE=path/to/results/default" in missing.stderr
    given = subprocess.run(
        ["make", "-n", "compare", "BASELINE=old/results/default"], cwd=REPO, capture_output=True, text=True
    )
    assert ".venv/bin/celldag compare old/results/default results/default --out results/compare" in given.stdout


# ---------------------------------------------------------------- end to end: a tiny run, then an edited copy


@pytest.fixture
def finished(tiny_lineage_run):
    """The tiny lineage run (conftest.TINY_LINEAGE), read only: each test edits a copy."""
    return tiny_lineage_run


def copied_back(workdir: Path, to: Path) -> Path:
    """What docs/compare.md says to copy back from a cluster: results/{name}/ and results/runs/**/run.json."""
    shutil.copytree(workdir / "results/tiny", to / "results/tiny")
    for path in (workdir / "results/runs").glob("**/run.json"):
        target = to / path.relative_to(workdir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return to / "results/tiny"


def run_compare(capsys, *args: str) -> tuple[int, list[str]]:
    status = main(["compare", *args, "--workflow", str(REPO)])
    return status, capsys.readouterr().out.splitlines()


@pytest.mark.e2e
def test_a_run_compared_with_its_copy_is_identical(finished, tmp_path, monkeypatch, capsys):
    copy = copied_back(finished, tmp_path / "cluster")
    monkeypatch.chdir(finished)
    status, lines = run_compare(capsys, "tiny", str(copy), "--out", str(tmp_path / "out"))
    assert status == 0, "\n".join(lines)
    assert lines[0] == (
        f"compared 30 scores of A results/tiny and B {copy}: 0 moved, 0 status changed, 0 only in A, "
        "0 only in B, 0 within tolerance, 30 identical"
    )  # 6 runs × 3 metrics; nj_pca's and upgma's 2 seeds × 3 Δ
    assert "ranking: order unchanged on 1 leaderboard" in lines
    assert "environment: the matched runs' records agree" in lines
    assert (tmp_path / "out/compare.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.e2e
def test_an_edited_copy_names_the_moved_score_the_missing_run_and_the_record_fields(finished, tmp_path, capsys):
    copy = copied_back(finished, tmp_path / "cluster")
    scores = pd.read_parquet(copy / "scores.parquet")
    edited = (scores["method"] == "nj_raw") & (scores["seed"] == 0) & (scores["metric"] == "quartet_dist")
    before = float(scores.loc[edited, "value"].iloc[0])
    scores.loc[edited, "value"] = before + 0.125
    removed = (scores["method"] == "upgma_raw") & (scores["seed"] == 1)
    scores[~removed].to_parquet(copy / "scores.parquet", index=False)
    runs = pd.read_parquet(copy / "runs.parquet")
    gone = (runs["method"] == "upgma_raw") & (runs["seed"] == 1)
    (copy.parent.parent / runs.loc[gone, "record"].iloc[0]).unlink()
    runs[~gone].to_parquet(copy / "runs.parquet", index=False)
    path = copy.parent.parent / runs.loc[(runs["method"] == "nj_raw") & (runs["seed"] == 0), "record"].iloc[0]
    changed = json.loads(path.read_text())
    numpy = changed["packages"]["numpy"]
    changed["packages"]["numpy"], changed["machine"]["threads"]["OMP_NUM_THREADS"] = "9.9.9", "4"
    path.write_text(json.dumps(changed))

    status, lines = run_compare(capsys, str(finished / "results"), str(copy), "--out", str(tmp_path / "out"))
    assert status == 1
    assert lines[0].endswith(": 1 moved, 0 status changed, 6 only in A, 0 only in B, 0 within tolerance, 23 identical")
    assert f"moved: bm_small/nj_raw/default/0 quartet_dist {before!r} → {before + 0.125!r} (Δ +0.125)" in lines
    report = (tmp_path / "out/compare.md").read_text()
    moved = next(line for line in report.splitlines() if line.startswith("| moved |"))
    assert moved.endswith(
        f"| +0.125 | {0.125 / before:+.3g} | same bits (both on CPU) | "
        f"machine.threads.OMP_NUM_THREADS 1 → 4; numpy {numpy} → 9.9.9 |"
    )
    assert (
        sum(
            line.startswith("| only in A | bm_small | lineage | upgma_raw | default | 1 |")
            for line in report.splitlines()
        )
        == 6
    )
    assert f"| numpy | 1 of 5 | {numpy} | 9.9.9 |" in report
    assert "| machine.threads.OMP_NUM_THREADS | 1 of 5 | 1 | 4 |" in report
    assert "23 identical rows are counted, not listed (--all lists them)." in report
    status, _ = run_compare(capsys, str(finished / "results"), str(copy), "--out", str(tmp_path / "all"), "--all")
    assert (
        sum(line.startswith("| identical |") for line in (tmp_path / "all/compare.md").read_text().splitlines()) == 23
    )
