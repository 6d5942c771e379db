"""The reference a release ships and ``celldag check`` (celldag.results.reference, docs/check.md): the noise model on
hand-made scores checked by hand, the verdicts, the environment rule, and the files read back bit for bit."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import TRACKS
from scipy import stats

from celldag.errors import InputError
from celldag.results import reference as ref
from celldag.results.tolerance import Tolerance


def scores(values: dict[tuple, float], status: dict[tuple, str] | None = None) -> pd.DataFrame:
    """Score rows from {(dataset, track, method/variant, seed, metric): value}."""
    rows = []
    for (dataset, track, entry, seed, metric), value in values.items():
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
                "status": (status or {}).get((dataset, entry, seed, metric), "ok"),
            }
        )
    return pd.DataFrame(rows)


TRAINED = ("d", "representation", "scilama/text")  # a trained method: every seed another value, reruns move it
NJ = ("d", "lineage", "nj_raw/default")  # deterministic: the seeds change the data, a rerun moves by rounding at most
SEED_VALUES = {0: 0.50, 1: 0.52, 2: 0.47, 3: 0.55, 4: 0.49}
NJ_VALUES = {0: 0.25, 1: 0.75, 2: 0.5, 3: 0.5, 4: 0.25}


def reference_inputs():
    seeds = scores(
        {
            **{(*TRAINED, seed, "total"): value for seed, value in SEED_VALUES.items()},
            **{(*NJ, seed, "rf"): value for seed, value in NJ_VALUES.items()},
            **{(*TRAINED, seed, "n_marker_genes"): 18.0 for seed in SEED_VALUES},
        }
    )
    default = seeds[seeds["seed"] <= 2].reset_index(drop=True)
    rerun = default.copy()
    trained = (rerun["method"] == "scilama") & (rerun["metric"] == "total")
    rerun.loc[trained, "value"] += [0.01, -0.02, 0.0]  # another path of training
    rerun.loc[rerun["method"] == "nj_raw", "value"] *= 1 + 1e-12  # rounding
    return default, seeds, {"avx": rerun}


def test_the_noise_model_pools_the_seeds_spread_with_the_reruns_moves_and_sets_bonferroni_margins():
    default, seeds, reruns = reference_inputs()
    noise, tolerance, how = ref.noise_model(default, seeds, reruns, TRACKS, false_alarm=0.01)
    by_metric = noise.set_index("metric")
    trained = by_metric.loc["total"]
    squares = sum((v - 0.506) ** 2 for v in SEED_VALUES.values())  # mean of the five seeds: 0.506
    halves = (0.01**2 + 0.02**2 + 0.0) / 2  # each rerun move Δ²/2, one df each (the third moved by 0: still a draw)
    assert trained["kind"] == "discontinuous" and trained["seeds"] == 5 and trained["df"] == 4 + 3
    assert trained["sd"] == pytest.approx(math.sqrt((squares + halves) / 7), rel=1e-12)
    judged = 3 + 3  # m: scilama's total and nj's rf at seeds 0–2 have a spread; n_marker_genes (18 every seed) none
    assert how["scores_judged_by_noise"] == judged
    quantile = stats.t.ppf(1 - 0.01 / (2 * judged), 7)
    assert trained["margin"] == pytest.approx(quantile * math.sqrt(2) * trained["sd"], rel=1e-12)
    nj = by_metric.loc["rf"]
    assert nj["kind"] == "smooth" and nj["df"] == 4 + 3
    count = by_metric.loc["n_marker_genes"]
    assert count["kind"] == "count" and count["sd"] == 0 and count["margin"] == 0
    # the tolerance: 10 × the largest relative move of a smooth score (1e-12, up to the float's rounding)
    assert tolerance.rel == pytest.approx(1e-11, rel=1e-3) and tolerance.abs == pytest.approx(1e-14, rel=1e-3)


def test_a_deterministic_method_without_spread_of_its_own_gets_its_metrics_spread_on_the_dataset():
    """The expression baseline's kBET: the same at every seed, unmoved by the reruns, yet kNN flips on another
    machine move it — its sd is the pooled one of every method of the dataset for that metric."""
    default, seeds, reruns = reference_inputs()
    fixed = ("d", "representation", "expression/default")
    seeds = pd.concat([seeds, scores({(*fixed, seed, "total"): 0.3 for seed in SEED_VALUES})], ignore_index=True)
    default = seeds[seeds["seed"] <= 2].reset_index(drop=True)
    reruns = {"avx": pd.concat([reruns["avx"], default[default["method"] == "expression"]], ignore_index=True)}
    noise, _, how = ref.noise_model(default, seeds, reruns, TRACKS, false_alarm=0.01)
    rows = noise.set_index(["method", "metric"])
    trained, expression = rows.loc[("scilama", "total")], rows.loc[("expression", "total")]
    squares = sum((v - 0.506) ** 2 for v in SEED_VALUES.values()) + (0.01**2 + 0.02**2) / 2  # scilama's; expression's 0
    assert expression["sd"] == pytest.approx(math.sqrt(squares / (7 + 7)), rel=1e-12) and expression["df"] == 14
    assert trained["sd"] == pytest.approx(math.sqrt(squares / 7), rel=1e-12) and trained["df"] == 7  # its own: larger
    assert expression["kind"] == "smooth" and expression["margin"] > 0 and how["groups_at_the_metric_floor"] == 1
    assert rows.loc[("nj_raw", "rf"), "df"] == 7  # another metric, another dataset's floor: untouched


def test_without_any_smooth_move_the_tolerance_is_the_floor_and_a_large_move_is_never_rounding():
    default, seeds, reruns = reference_inputs()
    reruns["avx"].loc[reruns["avx"]["method"] == "nj_raw", "value"] = default.loc[
        default["method"] == "nj_raw", "value"
    ] + [0, 0.25, 0]
    noise, tolerance, _ = ref.noise_model(default, seeds, reruns, TRACKS, false_alarm=0.01)
    assert noise.set_index("metric").loc["rf", "kind"] == "discontinuous"  # a topology flipped
    assert tolerance == Tolerance(
        rel=ref.TOLERANCE_FLOOR, abs=ref.ROUNDING.abs * ref.TOLERANCE_FLOOR / ref.ROUNDING.rel
    )


def built_reference(tmp_path: Path) -> ref.Reference:
    default, seeds, reruns = reference_inputs()
    noise, tolerance, how = ref.noise_model(default, seeds, reruns, TRACKS, false_alarm=0.01)
    meta = {
        "commit": "abc",
        "noise": how,
        "numerical_tolerance": {"rel": tolerance.rel, "abs": tolerance.abs},
        "environment": {"machine.cpu_model": "AMD EPYC", "numpy": "2.4.6"},
    }
    empty = pd.DataFrame(columns=ref.COLUMNS[ref.RUNS_FILE])
    cost = pd.DataFrame({"rule": ["run scilama"], "wall_s": [100.0], "peak_mb": [900.0]})
    reference = ref.Reference(default[[*ref.KEY, "status", "value"]], noise, empty, cost, meta)
    ref.write(reference, tmp_path / "reference")
    return ref.read(tmp_path / "reference")


def test_a_reference_reads_back_every_score_to_the_bit(tmp_path):
    generator = random.Random(0)
    values = [generator.random() * 10 ** generator.randint(-12, 3) for _ in range(200)] + [math.nan, 0.1 + 0.2, -0.0]
    table = scores({("d", "lineage", "nj_raw/default", i, "rf"): value for i, value in enumerate(values)})
    reference = ref.Reference(
        table[[*ref.KEY, "status", "value"]],
        pd.DataFrame(columns=ref.COLUMNS[ref.NOISE_FILE]),
        pd.DataFrame(columns=ref.COLUMNS[ref.RUNS_FILE]),
        pd.DataFrame(columns=ref.COLUMNS[ref.COST_FILE]),
        {"numerical_tolerance": {"rel": 1e-11, "abs": 1e-14}, "environment": {}},
    )
    ref.write(reference, tmp_path / "r")
    back = ref.read(tmp_path / "r").scores["value"].tolist()
    assert all(ref.same_bits(a, b) for a, b in zip(values, back, strict=True))
    assert (tmp_path / "r" / "scores.tsv").read_text().splitlines()[1].split("\t")[-1] == repr(values[0])


def test_a_group_without_an_ok_seed_reads_back_with_a_nan_mean_and_the_two_regime_groups_with_it(tmp_path):
    reference = built_reference(tmp_path)
    noise = reference.noise.copy()
    noise.loc[0, "mean"] = math.nan  # a method not_applicable on every seed of the noise model's run
    regimes = pd.DataFrame(
        [
            dict(zip(ref.GROUP, noise.loc[0, ref.GROUP]))
            | {"split": 3.4, "low": 2.0, "high": 4.75, "within": 0.04, "above": 2, "values": 10}
        ]
    )
    ref.write(replace(reference, noise=noise, regimes=regimes), tmp_path / "again")
    back = ref.read(tmp_path / "again")
    assert back.noise["mean"].dtype == float and math.isnan(back.noise.loc[0, "mean"])
    assert back.regimes.to_dict("records") == regimes.to_dict("records")


def test_a_folder_without_a_file_or_a_column_is_refused_naming_it(tmp_path):
    reference = built_reference(tmp_path)
    with pytest.raises(InputError, match=r"noise\.tsv: not found"):
        (tmp_path / "reference" / "noise.tsv").unlink()
        ref.read(tmp_path / "reference")
    ref.write(reference, tmp_path / "reference")
    noise = tmp_path / "reference" / "noise.tsv"
    noise.write_text("\n".join("\t".join(line.split("\t")[:-2]) for line in noise.read_text().splitlines()) + "\n")
    with pytest.raises(InputError, match=r"noise\.tsv: no column 'mean' .* made before celldag 0\.3\.0: remake it"):
        ref.read(tmp_path / "reference")
    ref.write(reference, tmp_path / "reference")
    (tmp_path / "reference" / "cost.tsv").write_text("rule\twall\nx\t1\n")
    with pytest.raises(InputError, match=r"cost\.tsv: no column 'wall_s'"):
        ref.read(tmp_path / "reference")


def verdicts(
    reference: ref.Reference,
    edits: dict[tuple, float],
    rule: str = ref.NOISE_AWARE,
    status: dict[tuple, str] | None = None,
    drop: tuple | None = None,
) -> dict[tuple, str]:
    """(method, seed, metric) → verdict of the reference's scores edited by ``edits`` (key → added Δ)."""
    here = reference.scores.copy()
    for (method, seed, metric), delta in edits.items():
        here.loc[(here["method"] == method) & (here["seed"] == seed) & (here["metric"] == metric), "value"] += delta
    for (method, seed, metric), value in (status or {}).items():
        here.loc[(here["method"] == method) & (here["seed"] == seed) & (here["metric"] == metric), "status"] = value
    if drop:
        here = here[~((here["method"] == drop[0]) & (here["seed"] == drop[1]) & (here["metric"] == drop[2]))]
    return {(item.key[2], item.key[4], item.key[5]): item.verdict for item in ref.judge(reference, here, rule)}


def test_each_move_gets_the_verdict_its_size_and_its_scores_noise_give(tmp_path):
    reference = built_reference(tmp_path)
    margin = reference.noise.set_index("metric").loc["total", "margin"]
    found = verdicts(
        reference,
        {
            ("scilama", 0, "total"): margin * 0.9,
            ("scilama", 1, "total"): margin * 1.1,
            ("nj_raw", 0, "rf"): 0.25 * 5e-12,
            ("scilama", 0, "n_marker_genes"): 1.0,
        },
        status={("nj_raw", 2, "rf"): "failed"},
        drop=("scilama", 2, "total"),
    )
    assert found == {
        ("scilama", 0, "total"): ref.SEED_NOISE,  # less than its seed spread allows
        ("scilama", 1, "total"): ref.CHANGED,  # more
        ("scilama", 2, "total"): ref.ONLY_REFERENCE,
        ("nj_raw", 0, "rf"): ref.NUMERICAL,  # smooth, within 10× the reruns' rounding
        ("nj_raw", 1, "rf"): ref.IDENTICAL,
        ("nj_raw", 2, "rf"): ref.STATUS_CHANGED,
        ("scilama", 0, "n_marker_genes"): ref.CHANGED,  # a count the same at every seed: one more is a change
        ("scilama", 1, "n_marker_genes"): ref.IDENTICAL,
        ("scilama", 2, "n_marker_genes"): ref.IDENTICAL,
    }
    assert ref.reproduces(ref.judge(reference, reference.scores, ref.NOISE_AWARE))


def test_bit_for_bit_calls_any_move_a_change_and_the_rule_follows_the_environment(tmp_path):
    reference = built_reference(tmp_path)
    found = verdicts(reference, {("scilama", 0, "total"): 1e-15, ("nj_raw", 0, "rf"): 1e-15}, rule=ref.BIT_FOR_BIT)
    assert found[("scilama", 0, "total")] == found[("nj_raw", 0, "rf")] == ref.CHANGED
    assert (
        ref.rule_for(ref.environment_differences(reference.environment, dict(reference.environment))) == ref.BIT_FOR_BIT
    )
    here = reference.environment | {"machine.cpu_model": "Intel Xeon", "machine.kernels.OPENBLAS_CORETYPE": "Nehalem"}
    differences = ref.environment_differences(reference.environment, here)
    assert differences == {
        "machine.cpu_model": ("AMD EPYC", "Intel Xeon"),
        "machine.kernels.OPENBLAS_CORETYPE": ("absent", "Nehalem"),
    }
    assert ref.rule_for(differences) == ref.NOISE_AWARE


def test_the_summary_counts_each_verdict_and_says_whether_the_release_is_reproduced(tmp_path):
    reference = built_reference(tmp_path)
    same = ref.judge(reference, reference.scores, ref.NOISE_AWARE)
    assert ref.summary_line(same) == (
        "reproduces the release: 9 identical, 0 within numerical tolerance, 0 within seed noise, 0 changed (9 scores)"
    )
    here = reference.scores.copy()
    here.loc[here["metric"] == "n_marker_genes", "value"] += 1
    assert ref.summary_line(ref.judge(reference, here, ref.NOISE_AWARE)).startswith(
        "does not reproduce the release: 6 identical, 0 within numerical tolerance, 0 within seed noise, 3 changed"
    )


def test_cost_ratios_are_this_machines_over_the_references_per_rule(tmp_path):
    reference = built_reference(tmp_path)
    here = pd.DataFrame({"rule": ["run scilama"], "wall_s": [150.0], "peak_mb": [450.0]})
    ratios = ref.cost_ratios(reference, here).iloc[0]
    assert (ratios["wall_ratio"], ratios["peak_ratio"]) == (1.5, 0.5)


def test_the_environment_keeps_what_may_change_a_number_at_its_most_common_value(tmp_path):
    machine = {
        "cpu_model": "AMD EPYC",
        "cpus": 2,
        "isa": ["avx2"],
        "os": "Linux-6.1-x86_64-with-glibc2.36",
        "libraries": [],
        "threads": {"OMP_NUM_THREADS": "1"},
        "gpu": None,
    }
    record = {
        "config": {"params": {"k": 1}},
        "config_hash": "c" * 64,
        "input_sha256": {"a": "b" * 64},
        "inputs": {},
        "packages": {"numpy": "2.4.6"},
        "device": "cpu",
        "host": "node1",
        "threads": 1,
        "environment": {"SLURM_JOB_ID": "7"},
        "machine": machine,
    }
    other = record | {"host": "node2", "threads": 2, "machine": machine | {"cpus": 64}}
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements/lock.txt").write_text("numpy==2.4.6\n")
    environment = ref.environment_of({1: record, 2: record, 3: other, 4: None}, tmp_path)
    assert environment["threads"] == "1" and environment["machine.libc"] == "glibc2.36"
    assert environment["lock file sha256"] == ref.lock_digest(tmp_path) != "none"
    assert not {"host", "SLURM job", "machine.cpus", "machine.os", "config_hash", "params.k"} & set(environment)
