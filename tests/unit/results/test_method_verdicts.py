"""Per-method verdicts of ``celldag check`` (celldag.results.method_verdicts, docs/check.md "Verdicts per method"): z,
p, Bonferroni within a method and Holm over methods checked by hand; derived metrics left out; the shift a verdict
detects against the normal formula; the false-alarm rate under the noise model simulated, whatever the dependence."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import TRACKS
from scipy import stats
from test_reference import reference_inputs

from celldag.results import method_verdicts as mv
from celldag.results import reference as ref

GROUP = mv.GROUP


def noise_rows(rows: list[tuple]) -> pd.DataFrame:
    """Noise-model rows from (method, metric, sd, df, offset, reference mean, reference seeds)."""
    return pd.DataFrame(
        [
            {
                "dataset": "d",
                "track": "representation",
                "method": method,
                "variant": "default",
                "metric": metric,
                "kind": "smooth",
                "sd": sd,
                "df": df,
                "offset": offset,
                "mean": mean,
                "seeds": seeds,
            }
            for method, metric, sd, df, offset, mean, seeds in rows
        ]
    )


def here_scores(values: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "dataset": "d",
                "track": "representation",
                "method": method,
                "variant": "default",
                "seed": seed,
                "metric": metric,
                "status": "ok",
                "value": value,
            }
            for (method, metric), seeds in values.items()
            for seed, value in enumerate(seeds)
        ]
    )


def judge(noise: pd.DataFrame, here: pd.DataFrame, false_alarm: float = 0.01) -> pd.DataFrame:
    means = noise[[*GROUP, "mean", "seeds"]].rename(columns={"seeds": "n"})
    return mv.judge_methods(noise, means, here, TRACKS, false_alarm).set_index("method")


NOISE = noise_rows(
    [
        ("scilama", "kbet", 0.02, 10, 0.01, 0.50, 5),
        ("scilama", "ilisi", 0.05, 30, 0.0, 0.30, 5),
        ("scilama", "total", 0.01, 10, 0.0, 0.70, 5),  # derived (scIB's aggregate): left out
        ("scilama", "delta_kbet", 0.01, 10, 0.0, 0.10, 5),  # derived (a Δ): left out
        ("pca", "kbet", 0.02, 12, 0.005, 0.40, 5),
        ("pca", "ilisi", 0.0, 0, 0.0, 0.20, 5),  # no noise: judged score by score only
    ]
)


def test_z_and_p_per_metric_then_bonferroni_within_a_method_by_hand():
    here = here_scores(
        {
            ("scilama", "kbet"): [0.52, 0.55, 0.54],
            ("scilama", "ilisi"): [0.30, 0.31, 0.29],
            ("scilama", "total"): [9.0] * 3,
            ("scilama", "delta_kbet"): [9.0] * 3,
            ("pca", "kbet"): [0.40, 0.41, 0.40],
            ("pca", "ilisi"): [0.9] * 3,
        }
    )
    evidence = mv.metric_evidence(
        NOISE, NOISE[[*GROUP, "mean", "seeds"]].rename(columns={"seeds": "n"}), here, TRACKS
    ).set_index(["method", "metric"])
    assert sorted(evidence.index) == [("pca", "kbet"), ("scilama", "ilisi"), ("scilama", "kbet")]
    se = math.sqrt(0.02**2 * (1 / 3 + 1 / 5) + 0.01**2)
    assert evidence.loc[("scilama", "kbet"), "z"] == pytest.approx((1.61 / 3 - 0.50) / se, rel=1e-12)  # 0.5367 − 0.50
    p_kbet = 2 * stats.t.sf(abs((1.61 / 3 - 0.50) / se), 10)
    assert evidence.loc[("scilama", "kbet"), "p"] == pytest.approx(p_kbet, rel=1e-9)
    methods = judge(NOISE, here)
    assert methods.loc["scilama", "metrics"] == 2 and methods.loc["pca", "metrics"] == 1
    p_ilisi = evidence.loc[("scilama", "ilisi"), "p"]
    assert methods.loc["scilama", "p"] == pytest.approx(min(1.0, 2 * min(p_kbet, p_ilisi)), rel=1e-9)
    assert methods.loc["scilama", "worst_metric"] == "kbet"
    assert methods.loc["scilama", "seeds_here"] == 3 and methods.loc["scilama", "seeds_reference"] == 5


def test_holm_steps_down_over_the_methods():
    p = pd.Series([0.004, 0.02, 0.006, 0.5], index=list("abcd"))
    levels, rejected = mv.holm(p, 0.05)
    assert levels.to_dict() == pytest.approx({"a": 0.05 / 4, "c": 0.05 / 3, "b": 0.05 / 2, "d": 0.05})
    assert rejected.to_dict() == {"a": True, "c": True, "b": True, "d": False}
    _, rejected = mv.holm(pd.Series([0.02, 0.004, 0.006]), 0.01)  # 0.004 ≤ 0.0033? no: nothing is rejected
    assert not rejected.any()


def test_a_method_shifted_on_one_metric_is_changed_and_the_others_not():
    noise = noise_rows([(f"m{i}", metric, 0.02, 20, 0.0, 0.5, 10) for i in range(5) for metric in ("kbet", "ilisi")])
    rng = np.random.default_rng(0)
    values = {
        (f"m{i}", metric): list(0.5 + 0.02 * rng.standard_normal(3)) for i in range(5) for metric in ("kbet", "ilisi")
    }
    values[("m3", "ilisi")] = [value + 0.2 for value in values[("m3", "ilisi")]]  # 10 sd
    methods = judge(noise, here_scores(values))
    assert methods.loc["m3", "verdict"] == mv.CHANGED and methods.loc["m3", "worst_metric"] == "ilisi"
    assert (methods.drop(index="m3")["verdict"] == mv.NOT_DETECTED).all()
    assert mv.any_changed(methods.reset_index()) and mv.summary_line(methods.reset_index()).startswith("1 of 5 methods")


def test_a_machine_offset_that_seeds_cannot_average_out_keeps_many_seeds_from_calling_it_changed():
    """A kernel that moves every seed of a deterministic method by the same 0.01: within its offset, whatever n."""
    noise = noise_rows([("expression", "kbet", 0.002, 40, 0.01, 0.30, 10)])
    here = here_scores({("expression", "kbet"): [0.31] * 20})
    assert judge(noise, here).loc["expression", "verdict"] == mv.NOT_DETECTED
    without = judge(noise.assign(offset=0.0), here)  # what a model without the offset would have said
    assert without.loc["expression", "verdict"] == mv.CHANGED


def test_the_shift_detected_matches_the_normal_formula_where_the_sd_is_known():
    metrics = pd.DataFrame(
        {"sd": [1.0, 1.0], "df": [10**7, 10**7], "offset": [0.0, 0.5], "n_here": [3, 3], "n_reference": [10, 10]}
    )
    level = 1e-4
    shift = mv.detectable_shift(metrics, level)
    scale = np.sqrt(1 / 3 + 1 / 10 + np.array([0.0, 0.25]))
    expected = (stats.norm.isf(level / 2) + stats.norm.ppf(mv.POWER)) * scale
    assert shift == pytest.approx(expected, rel=0.03)  # 4,000 draws: the 0.9 quantile within a few %
    fewer_df = mv.detectable_shift(metrics.assign(df=5), level)
    assert (fewer_df > shift * 1.5).all()  # an sd estimated on 5 df costs power
    assert mv.detectable_shift(metrics.assign(sd=0.0), level).tolist() == [math.inf, math.inf]


@pytest.mark.parametrize("correlation", [0.0, 1.0])
def test_an_unchanged_installation_is_called_changed_under_the_false_alarm_rate(correlation):
    noise = noise_rows([(f"m{i}", f"x{j}", 0.1, 7 + i, 0.05 * (i % 2), 0.0, 5) for i in range(12) for j in range(6)])
    rate = mv.null_false_alarm(noise, n_here=3, false_alarm=0.2, correlation=correlation, draws=1500)
    assert rate <= 0.2 + 2 * math.sqrt(0.2 * 0.8 / 1500)  # Bonferroni + Holm: at most the level, any dependence
    assert rate > 0.02  # and not a test that never fires


def test_the_noise_model_holds_each_groups_mean_over_seeds_and_its_machine_offset():
    default, seeds, reruns = reference_inputs()
    noise, _, _ = ref.noise_model(default, seeds, reruns, TRACKS, false_alarm=0.01)
    trained = noise.set_index("metric").loc["total"]
    assert trained["mean"] == pytest.approx(0.506, rel=1e-12)  # the five seeds' mean
    # the rerun moved seeds 0–2 by +0.01, −0.02, 0: its mean move −0.01/3, the only rerun
    assert trained["offset"] == pytest.approx(0.01 / 3, rel=1e-9)
    assert noise.set_index("metric").loc["rf", "offset"] < 1e-11  # NJ's reruns moved by rounding only


def test_two_regimes_are_found_where_the_seeds_values_split_at_a_wide_gap_and_nowhere_else():
    set_sizes = [2.0, 2.1, 2.05, 4.7, 4.8, 2.02]  # a conformal threshold on one of two levels
    smooth = [0.5, 0.52, 0.47, 0.55, 0.49, 0.51]
    lone = [2.0, 2.1, 2.05, 2.02, 2.04, 4.8]  # one value apart: not a regime of its own
    rows = {"sets": set_sizes, "smooth": smooth, "lone": lone}
    seeds = pd.DataFrame(
        [
            {
                "dataset": "d",
                "track": "annotation",
                "method": "knn",
                "variant": "pca/default",
                "seed": seed,
                "metric": metric,
                "status": "ok",
                "value": value,
            }
            for metric, values in rows.items()
            for seed, value in enumerate(values)
        ]
    )
    groups = pd.MultiIndex.from_frame(seeds[GROUP].drop_duplicates())
    regimes = ref.two_regimes(seeds, groups).set_index("metric")
    assert list(regimes.index) == ["sets"]
    row = regimes.loc["sets"]
    assert row["split"] == pytest.approx(3.4) and row["above"] == 2 and row["values"] == 6
    assert row["low"] == pytest.approx(np.mean([2.0, 2.1, 2.05, 2.02])) and row["high"] == pytest.approx(4.75)
    squares = sum((v - row["low"]) ** 2 for v in [2.0, 2.1, 2.05, 2.02]) + 2 * 0.05**2
    assert row["within"] == pytest.approx(math.sqrt(squares / 4))
    assert not len(ref.two_regimes(seeds, groups[groups.get_level_values("metric") != "sets"]))  # only those asked


def test_a_two_regime_mean_is_changed_only_outside_the_regimes_envelope_by_hand():
    regime = {"above": 2, "values": 6, "low": 2.0, "high": 4.0, "within": 0.1}
    assert mv.two_regime_p(4.0, 3, regime, offset=0.0) == 1.0  # every seed in the upper regime: some share gives it
    assert mv.two_regime_p(3.1, 3, regime, offset=0.0) == 1.0
    # 0.5 above the upper regime: the noise of a mean of three when all three are upper seeds is the largest
    scale = 0.1 * math.sqrt(1 / 3 + 1 / 2)
    assert mv.two_regime_p(4.5, 3, regime, offset=0.0) == pytest.approx(2 * stats.t.sf(0.5 / scale, 4), rel=1e-12)
    with_offset = math.sqrt(scale**2 + 0.2**2)
    assert mv.two_regime_p(1.5, 3, regime, offset=0.2) == pytest.approx(2 * stats.t.sf(0.5 / with_offset, 4), rel=1e-12)


@pytest.mark.parametrize("share", [0.1, 0.4, 0.8])
def test_a_two_regime_metric_holds_its_level_whatever_the_share_and_sees_a_mean_beyond_both_regimes(share):
    """Seeds of a two-regime score (gap 10 within-sds): the reference sees ten, a lab three. Under no change the
    metric's p (twice the smaller of the normal and the envelope p) is ≤ 0.01 at most about 1 % of the draws,
    whatever the share; a lab whose every value moved 12 within-sds up is seen more often than by the normal model
    alone where both regimes are common."""
    rng = np.random.default_rng(1)
    level, draws = 0.01, 1500
    null, seen, seen_normal, used = 0, 0, 0, 0
    for _ in range(draws):
        reference = np.where(rng.random(10) < share, 10.0, 0.0) + rng.standard_normal(10)
        here = np.where(rng.random(3) < share, 10.0, 0.0) + rng.standard_normal(3)
        high = reference > 5
        if high.sum() < 2 or (~high).sum() < 2:
            continue  # not seen as two regimes: the normal model alone, as the reference would
        used += 1
        within = math.sqrt(
            (
                ((reference[high] - reference[high].mean()) ** 2).sum()
                + ((reference[~high] - reference[~high].mean()) ** 2).sum()
            )
            / 8
        )
        regime = {
            "above": high.sum(),
            "values": 10,
            "low": reference[~high].mean(),
            "high": reference[high].mean(),
            "within": within,
        }
        se = reference.std(ddof=1) * math.sqrt(1 / 3 + 1 / 10)

        def metric_p(values: np.ndarray) -> tuple[float, float]:
            normal = 2 * stats.t.sf(abs(values.mean() - reference.mean()) / se, 9)
            return min(1.0, 2 * min(normal, mv.two_regime_p(values.mean(), 3, regime, 0.0))), normal

        null += metric_p(here)[0] <= level
        both, normal = metric_p(here + 12.0)
        seen += both <= level
        seen_normal += normal <= level
    assert null / used <= level + 3 * math.sqrt(level / used)
    # measured: share 0.1 — 182 of 401 against the normal model's 284 (the Bonferroni of two costs where the
    # reference is mostly one regime and the normal sd small); 0.4 — 1,179 of 1,423 against 835; 0.8 — 912 of 923
    # against 799
    assert seen > seen_normal if share >= 0.4 else seen > 0.5 * seen_normal
