"""Per-method verdicts of ``celldag check`` (docs/check.md, "Verdicts per method"): each (dataset, track, method,
variant) judged as a whole, its evidence pooled over the lab's seeds and its metrics, beside the per-score margins.

A per-score margin holds one seed's score against one reference value, at a Bonferroni level over thousands of
scores: it sees a broken method, not a regression of a few points. A method's scores share their seeds and move
together, so this module asks, per method, one question with one test:

- per metric j of the method (its scores that are not derived from others — scIB's ``total``, a Δ — and whose noise
  is above 0): the mean over this run's ok seeds against the reference's mean over its seeds,

      z_j = (mean here − mean of the reference) / √(sd_j² · (1/n_here + 1/n_reference) + offset_j²),

  sd_j the score's spread from run to run and offset_j how far another machine moves a mean over seeds
  (``celldag.results.reference``: the part of a machine's move every seed shares, which more seeds cannot average out);
  p_j = 2·P(t(df_j) > |z_j|). A two-regime score (a conformal set size on one of two levels: kind ``two-regime``,
  regimes.tsv) also gets ``two_regime_p`` — how far its mean leaves the envelope of the two regimes, valid whatever
  share of seeds lands in each — and p_j is twice the smaller of the two;
- the method's p = min(1, k · min_j p_j): the maximum |z| over its k metrics, Bonferroni within the method, valid
  whatever the dependence between its metrics (they are far from independent: a set size and its coverage move
  together);
- Holm over the methods at the reference's ``family_false_alarm``: an unchanged installation has any method called
  changed with chance under it, on the noise model's assumptions — which ``make reference`` tests on its held-out
  reruns, and ``null_false_alarm`` by simulation.

Its power is stated, not hoped for: ``detectable_shift`` is the shift of one metric, in units of its sd, that the
verdict sees with probability ``POWER`` (simulated under the noise model), which a check prints per method, and
``power_table`` gives it over lab seeds × reference seeds (docs/check.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from celldag.multiplicity import holm_steps
from celldag.results.leaderboard import metric_is_derived
from celldag.tracks import Track

FAMILY = ["dataset", "track", "method", "variant"]
GROUP = [*FAMILY, "metric"]
POWER = 0.9  # a shift is "detected" when the verdict sees it with this probability
SIMULATED_DRAWS = 4000
SIMULATION_SEED = 43  # the simulations draw from a fixed stream: the same reference gives the same numbers
CHANGED, NOT_DETECTED = "changed", "no change detected"
REFERENCE_COLUMNS = ["kind", "sd", "df", "offset"]
VERDICT_COLUMNS = [
    *FAMILY,
    "metrics",
    "seeds_here",
    "seeds_reference",
    "p",
    "level",
    "verdict",
    "worst_metric",
    "worst_z",
    "worst_delta",
    "detectable_sd",
]


def means_over_seeds(scores: pd.DataFrame) -> pd.DataFrame:
    """Per score group: the mean over its ok seeds and how many there are (``GROUP`` + mean, n)."""
    ok = scores[(scores["status"] == "ok") & scores["value"].notna()]
    return ok.groupby(GROUP)["value"].agg(mean="mean", n="count").reset_index()


def two_regime_p(mean_here: float, n_here: int, regime: Mapping, offset: float) -> float:
    """The p of a mean over ``n_here`` seeds of a two-regime score (``celldag.results.reference.two_regimes``), whatever
    share of its seeds lands in the upper regime: how far the mean lies outside the regimes' envelope [low, high],
    against the noise of a mean given its count of upper seeds — the within-regime sd over the seeds, the regimes'
    means as estimated from the reference's few seeds on each side, and the machine's offset — at its largest over
    the counts. A mean inside the envelope is what some share of the two regimes gives (p = 1): ten reference seeds
    cannot pin a share down to the levels a check needs, so a move of the share is not called a change."""
    above, values = float(regime["above"]), float(regime["values"])
    low, high, within = float(regime["low"]), float(regime["high"]), float(regime["within"])
    weight = np.arange(n_here + 1) / n_here
    scale = float(
        np.sqrt(within**2 * (1 / n_here + (1 - weight) ** 2 / (values - above) + weight**2 / above) + offset**2).max()
    )
    outside = max(0.0, low - mean_here, mean_here - high)
    if outside == 0:
        return 1.0
    return 0.0 if scale == 0 else float(min(1.0, 2 * stats.t.sf(outside / scale, max(values - 2, 1))))


def metric_evidence(
    noise: pd.DataFrame,
    reference_means: pd.DataFrame,
    here: pd.DataFrame,
    tracks: Mapping[str, Track],
    regimes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per metric judged: the reference's noise (``REFERENCE_COLUMNS``), both sides' means over seeds and counts,
    the standard error of their difference, z and p. A two-regime group (``regimes``: regimes.tsv) has two valid
    p's, the normal one (its sd holds the regimes' spread) and ``two_regime_p`` (far narrower, outside the regimes'
    envelope): its p is twice the smaller. ``reference_means`` and ``here``: ``means_over_seeds``."""
    merged = (
        judged_metrics(noise, tracks)[[*GROUP, *REFERENCE_COLUMNS]]
        .merge(reference_means, on=GROUP)
        .merge(means_over_seeds(here), on=GROUP, suffixes=("_reference", "_here"))
    )
    se = np.sqrt(merged["sd"] ** 2 * (1 / merged["n_here"] + 1 / merged["n_reference"]) + merged["offset"] ** 2)
    z = (merged["mean_here"] - merged["mean_reference"]) / se
    df = merged["df"].clip(lower=1)
    merged = merged.assign(se=se, z=z, p=2 * stats.t.sf(z.abs(), df), model="normal").reset_index(drop=True)
    if regimes is not None and len(regimes):
        by_group = regimes.set_index(GROUP)
        for index, row in merged.iterrows():
            group = tuple(row[GROUP])
            if group in by_group.index:
                envelope = two_regime_p(row["mean_here"], int(row["n_here"]), by_group.loc[group], row["offset"])
                merged.loc[index, ["p", "model"]] = (min(1.0, 2 * min(row["p"], envelope)), "two-regime")
    return merged


def holm(p: pd.Series, level: float) -> tuple[pd.Series, pd.Series]:
    """Holm's step-down over ``p``: per entry, the level its step compares it with and whether it is rejected
    (``celldag.multiplicity.holm_steps``)."""
    thresholds, rejected = holm_steps(p.tolist(), level)
    return pd.Series(thresholds, index=p.index, dtype=float), pd.Series(rejected, index=p.index, dtype=bool)


def verdicts(evidence: pd.DataFrame, false_alarm: float) -> pd.DataFrame:
    """Per method (``FAMILY``): its metrics k, seeds on each side, p (Bonferroni over its metrics of the smallest
    p_j), Holm's level at its step, the verdict, the metric with the largest |z| and its move, and the shift of
    one metric (in sd) it detects with probability ``POWER``, at the strictest Holm step."""
    if evidence.empty:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    families = len(evidence.groupby(FAMILY))
    rows = []
    for key, group in evidence.groupby(FAMILY, sort=True):
        worst = group.loc[group["z"].abs().idxmax()]
        k = len(group)
        shift = detectable_shift(group, false_alarm / families / k)
        rows.append(
            {
                **dict(zip(FAMILY, key)),
                "metrics": k,
                "seeds_here": int(group["n_here"].max()),
                "seeds_reference": int(group["n_reference"].max()),
                "p": min(1.0, k * float(group["p"].min())),
                "worst_metric": worst["metric"],
                "worst_z": float(worst["z"]),
                "worst_delta": float(worst["mean_here"] - worst["mean_reference"]),
                "detectable_sd": float(shift.min()),
            }
        )
    table = pd.DataFrame(rows)
    table["level"], rejected = holm(table["p"], false_alarm)
    table["verdict"] = np.where(rejected, CHANGED, NOT_DETECTED)
    return table[VERDICT_COLUMNS]


def judge_methods(
    noise: pd.DataFrame,
    reference_means: pd.DataFrame,
    here: pd.DataFrame,
    tracks: Mapping[str, Track],
    false_alarm: float,
    regimes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    return verdicts(metric_evidence(noise, reference_means, here, tracks, regimes), false_alarm)


def any_changed(methods: pd.DataFrame) -> bool:
    return bool((methods["verdict"] == CHANGED).any())


def summary_line(methods: pd.DataFrame) -> str:
    """``0 of 54 methods changed (Holm at 0.01 over methods); …`` — with the shift a verdict detects."""
    if methods.empty:
        return "0 of 0 methods changed (no method has scores with noise on both sides)"
    changed = int((methods["verdict"] == CHANGED).sum())
    finite = methods.loc[np.isfinite(methods["detectable_sd"]), "detectable_sd"]
    power = (
        (
            f"; each detects one metric shifted by a median {finite.median():.2g} sd of its most sensitive metric "
            f"(range {finite.min():.2g}–{finite.max():.2g}) with probability {POWER:g}"
        )
        if len(finite)
        else ""
    )
    return f"{changed} of {len(methods)} methods changed, their seeds and metrics pooled{power}"


# ------------------------------------------------------------------------------------------ power, by simulation


def _draws(df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal draws and the ratio σ̂/σ of an sd estimated with ``df`` degrees of freedom, per metric × draw,
    from the module's fixed stream."""
    rng = np.random.default_rng(SIMULATION_SEED)
    normal = rng.standard_normal(SIMULATED_DRAWS)
    chi = rng.chisquare(np.clip(df, 1, None)[:, None], size=(len(df), SIMULATED_DRAWS))
    return normal, np.sqrt(chi / np.clip(df, 1, None)[:, None])


def detectable_shift(
    metrics: pd.DataFrame, level: float | np.ndarray, n_here: float | None = None, n_reference: float | None = None
) -> np.ndarray:
    """Per metric (rows with sd, df, offset, n_here, n_reference), the shift of its mean in units of its sd that a
    test at ``level`` on it alone rejects with probability ``POWER``: simulated with the sd re-estimated on its df
    each draw (``level``: one, or one per metric); ``inf`` where the metric has no spread of its own (sd 0) to measure
    a shift in."""
    sd = metrics["sd"].to_numpy(float)
    df = metrics["df"].to_numpy(float)
    here = np.full(len(sd), n_here, float) if n_here is not None else metrics["n_here"].to_numpy(float)
    reference = (
        np.full(len(sd), n_reference, float) if n_reference is not None else metrics["n_reference"].to_numpy(float)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(sd > 0, metrics["offset"].to_numpy(float) / sd, np.inf)
    scale = np.sqrt(1 / here + 1 / reference + ratio**2)  # the difference's se over sd
    critical = stats.t.isf(level / 2, np.clip(df, 1, None))
    normal, estimate = _draws(df)
    low, high = np.zeros(len(sd)), np.full(len(sd), 1.0)
    grow = np.isfinite(scale)
    for _ in range(60):  # find an upper bound: power at high ≥ POWER
        power = _power(high, scale, critical, normal, estimate)
        more = grow & (power < POWER)
        if not more.any():
            break
        high = np.where(more, high * 2, high)
    for _ in range(40):  # bisection to 1e-12 of the bound
        middle = (low + high) / 2
        enough = _power(middle, scale, critical, normal, estimate) >= POWER
        low, high = np.where(enough, low, middle), np.where(enough, middle, high)
    return np.where(grow, high, np.inf)


def _power(
    shift: np.ndarray, scale: np.ndarray, critical: np.ndarray, normal: np.ndarray, estimate: np.ndarray
) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        z = (shift[:, None] / scale[:, None] + normal[None, :]) / estimate
    return (np.abs(z) >= critical[:, None]).mean(axis=1)


def null_false_alarm(
    noise: pd.DataFrame, n_here: int, false_alarm: float, correlation: float, draws: int = 2000
) -> float:
    """The simulated chance that an unchanged installation has any method called changed: every metric of ``noise``
    (GROUP, sd, df, offset, seeds) drawn under the noise model — the lab's and the reference's means, sd re-estimated
    on its df — with the metrics of a method correlated at ``correlation`` (0: independent; 1: one move shared), and
    judged by ``verdicts``. The Bonferroni within a method and Holm over methods hold it under ``false_alarm``
    whatever the correlation."""
    rng = np.random.default_rng(SIMULATION_SEED)
    table = noise[(noise["sd"] > 0) | (noise["offset"] > 0)].reset_index(drop=True)
    family = table.groupby(FAMILY, sort=False).ngroup().to_numpy()
    sd, df, offset = (table[name].to_numpy(float) for name in ("sd", "df", "offset"))
    n_reference = table["seeds"].clip(lower=1).to_numpy(float)
    se = np.sqrt(sd**2 * (1 / n_here + 1 / n_reference) + offset**2)
    dof = np.clip(df, 1, None)
    alarms = 0
    for _ in range(draws):
        shared = rng.standard_normal(family.max() + 1)[family]
        own = rng.standard_normal(len(table))
        move = se * (math.sqrt(correlation) * shared + math.sqrt(1 - correlation) * own)
        estimated = se * np.sqrt(rng.chisquare(dof) / dof)
        p = pd.Series(2 * stats.t.sf(np.abs(move / estimated), dof))
        per_family = p.groupby(family).agg(lambda v: min(1.0, len(v) * v.min()))
        alarms += bool(holm(per_family, false_alarm)[1].any())
    return alarms / draws


def judged_metrics(noise: pd.DataFrame, tracks: Mapping[str, Track]) -> pd.DataFrame:
    """The rows of ``noise`` a per-method verdict judges: not derived, with noise above 0."""
    derived = np.array(
        [metric_is_derived(metric, tracks[track]) for track, metric in zip(noise["track"], noise["metric"])], dtype=bool
    )
    return noise[~derived & ((noise["sd"] > 0) | (noise["offset"] > 0))].reset_index(drop=True)


def power_table(
    noise: pd.DataFrame,
    kinds: Mapping[tuple, str],
    tracks: Mapping[str, Track],
    false_alarm: float,
    lab_seeds: tuple[int, ...],
    reference_seeds: tuple[int, ...],
) -> pd.DataFrame:
    """Per method kind (``kinds``: FAMILY tuple → label), lab seeds and reference seeds: the median, over the kind's
    metrics, of the shift of one metric (in its sd) a check detects with probability ``POWER`` at the strictest Holm
    step (level ``false_alarm`` / methods / the method's metrics), and the share of the kind's metrics for which a
    1-sd shift is detected so (simulated under the noise model; docs/check.md)."""
    table = judged_metrics(noise, tracks)
    table = table[table["sd"] > 0].reset_index(drop=True)
    families = table.groupby(FAMILY, sort=False)
    metrics_per_family = families["metric"].transform("count").to_numpy(float)
    level = false_alarm / families.ngroups / metrics_per_family
    kind = pd.Series([kinds[tuple(row)] for row in table[FAMILY].itertuples(index=False)])
    rows = []
    for n_here in lab_seeds:
        for n_reference in reference_seeds:
            shift = detectable_shift(table, level, n_here, n_reference)
            for label, where in kind.groupby(kind).groups.items():
                chosen = shift[np.asarray(where)]
                rows.append(
                    {
                        "kind": label,
                        "lab seeds": n_here,
                        "reference seeds": n_reference,
                        "metrics": len(chosen),
                        "median shift detected (sd)": float(np.median(chosen)),
                        "share with 1 sd detected": float((chosen <= 1).mean()),
                    }
                )
    return pd.DataFrame(rows)
