"""Floor cards: where each metric's null and oracle controls land on a dataset, whether the metric has any range
there, and every run's score scaled between the two (docs/report.md, "Floor cards").

A metric means something on a dataset only between its floor and its ceiling. Each efficiency and ranking metric
names its null and its oracle once, in its track's declaration (``celldag.tracks.Metric``): controls run like any
method (``kind: control``), never ranked. From their scores, per dataset:

- the **card**: the null's and the oracle's mean ± sd over seeds, the range between them (oriented: positive when
  the oracle is better) and the noise margin it is held against;
- a **flag** where the range is within that margin, or negative (the null scores beyond the oracle): the metric
  cannot tell a method from noise, or from nothing, on this dataset. A flag reads the controls alone, so adding or
  removing a method never changes one;
- the **control-scaled score** of every run, per dataset and seed: (score − null) / (oracle − null) with the same
  seed's controls — 0 the null, 1 the oracle — written as ``scaled_<metric>`` rows beside the raw scores.

The margin: ``reference/default``'s seed-noise margin (``celldag.results.reference``: the largest move of one score
within seed noise, the smallest change ``celldag check`` detects) — the median over the reference's runs of the metric
on this dataset, else over all its datasets, else none (then only a negative range flags). A metric is flagged where the
whole span from its floor to its ceiling is a change the check could not tell from seed noise in one score. Guarantee
metrics are judged against their target instead: their card says how many rows meet it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from celldag.tracks import SCALED_PREFIX, TARGETS, Metric, Track, target_met

CARD_COLUMNS = [
    "dataset",
    "track",
    "metric",
    "role",
    "null",
    "oracle",
    "null_mean",
    "null_sd",
    "null_seeds",
    "oracle_mean",
    "oracle_sd",
    "oracle_seeds",
    "range",
    "margin",
    "margin_source",
    "flagged",
    "why",
    "target",
    "rows_meeting_target",
    "rows",
]
NUMBERS = [
    "null_mean",
    "null_sd",
    "null_seeds",
    "oracle_mean",
    "oracle_sd",
    "oracle_seeds",
    "range",
    "margin",
    "rows_meeting_target",
    "rows",
]  # float: NaN in the cards they do not describe
NOISE_KEY = ["dataset", "track", "method", "variant", "metric"]  # reference/default/noise.tsv's group


def control_key(name: str) -> tuple[str, str]:
    """("method", "variant") of a control named "method/variant" (an annotation row's variant holds a "/" itself)."""
    method, _, variant = name.partition("/")
    return method, variant


def controlled_metrics(tracks: Mapping[str, Track]) -> pd.DataFrame:
    """One row per metric judged against controls: track, metric, and the null's and oracle's method and variant."""
    rows = [
        (track_id, metric.name, *control_key(metric.null), *control_key(metric.oracle))
        for track_id, track in tracks.items()
        for metric in track.metrics.values()
        if metric.null
    ]
    return pd.DataFrame(
        rows, columns=["track", "metric", "null_method", "null_variant", "oracle_method", "oracle_variant"]
    )


def _control_values(ok: pd.DataFrame, which: str) -> pd.Series:
    rows = ok[(ok["method"] == ok[f"{which}_method"]) & (ok["variant"] == ok[f"{which}_variant"])]
    return rows.set_index(["dataset", "track", "metric", "seed"])["value"].rename(which)


def scaled_scores(scores: pd.DataFrame, tracks: Mapping[str, Track]) -> pd.DataFrame:
    """``scaled_<metric>`` rows: each ok score's (score − null) / (oracle − null), the same dataset and seed's
    controls; none where a control has no ok score or the two are equal (no range to scale by)."""
    ok = scores[scores["status"] == "ok"].merge(controlled_metrics(tracks), on=["track", "metric"])
    keys = ["dataset", "track", "metric", "seed"]
    rows = ok.join(_control_values(ok, "null"), on=keys).join(_control_values(ok, "oracle"), on=keys)
    span = rows["oracle"] - rows["null"]
    rows = rows[span.notna() & (span != 0)]
    scaled = rows[scores.columns].assign(
        metric=SCALED_PREFIX + rows["metric"],
        value=(rows["value"] - rows["null"]) / span[span.index.isin(rows.index)],
        higher_is_better=True,
    )
    return scaled.reset_index(drop=True)


def noise_margins(noise: pd.DataFrame | None, cards: pd.DataFrame) -> pd.DataFrame:
    """Per card row: ``margin`` and where it comes from (``margin_source``), from reference/default's noise table."""
    margins = pd.DataFrame(
        {"margin": np.nan, "margin_source": "none: no reference noise for this metric"}, index=cards.index
    )
    if noise is None or noise.empty:
        return margins
    by_dataset = noise.groupby(["dataset", "track", "metric"])["margin"].median()
    by_metric = noise.groupby(["track", "metric"])["margin"].median()
    for index, card in cards.iterrows():
        if (card["dataset"], card["track"], card["metric"]) in by_dataset.index:
            margins.loc[index] = (
                float(by_dataset[(card["dataset"], card["track"], card["metric"])]),
                "the metric's median on this dataset",
            )
        elif (card["track"], card["metric"]) in by_metric.index:
            margins.loc[index] = (float(by_metric[(card["track"], card["metric"])]), "the metric's median")
    return margins


def _stats(values: pd.Series) -> tuple[float, float, int]:
    return (
        float(values.mean()) if len(values) else np.nan,
        float(values.std(ddof=1)) if len(values) > 1 else np.nan,
        int(len(values)),
    )


def _control_card(rows: pd.DataFrame, metric: Metric) -> dict:
    """The null's and the oracle's statistics and the oriented range between their means."""
    card = {"null": metric.null, "oracle": metric.oracle}
    for which in ("null", "oracle"):
        method, variant = control_key(getattr(metric, which))
        values = rows.loc[(rows["method"] == method) & (rows["variant"] == variant), "value"]
        card[f"{which}_mean"], card[f"{which}_sd"], card[f"{which}_seeds"] = _stats(values)
    difference = card["oracle_mean"] - card["null_mean"]
    card["range"] = difference if metric.higher_is_better else -difference
    return card


def flag(card: Mapping) -> tuple[bool, str]:
    """Whether a metric is flagged on a dataset, and why (a property of its controls alone)."""
    if np.isnan(card["null_mean"]) or np.isnan(card["oracle_mean"]):
        missing = [which for which in ("null", "oracle") if np.isnan(card[f"{which}_mean"])]
        return (
            False,
            f"not judged: no ok score of the {' and the '.join(missing)} ({', '.join(card[m] for m in missing)})",
        )
    if card["range"] < 0:
        return True, "the null scores beyond the oracle"
    if card["range"] == 0 or (not np.isnan(card["margin"]) and card["range"] <= card["margin"]):
        return True, f"the null–oracle range ({card['range']:.3g}) is within the noise margin ({card['margin']:.3g})"
    return False, ""


def floor_cards(
    scores: pd.DataFrame,
    tracks: Mapping[str, Track],
    noise: pd.DataFrame | None,
    alpha: float,
    recorded: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One card per dataset × metric scored there (``CARD_COLUMNS``): efficiency and ranking metrics against their
    controls, guarantees against their target (how many method/variant rows meet it by their mean over seeds).
    ``recorded``: earlier cards whose margins are taken as they were read (``celldag audit`` rebuilds cards with the
    margins the aggregate job read from the reference then) instead of ``noise``'s."""
    ok = scores[scores["status"] == "ok"]
    cards = []
    for (dataset, track_id, name), rows in ok.groupby(["dataset", "track", "metric"], sort=True):
        metric = tracks[track_id].metrics.get(name) if track_id in tracks else None
        if metric is None or metric.role == "diagnostic" or metric.count:
            continue  # a Δ, a scaled score, a count: nothing to judge
        card = {"dataset": dataset, "track": track_id, "metric": name, "role": metric.role}
        if metric.target is not None:
            means = rows.groupby(["method", "variant"])["value"].mean()
            card |= {
                "target": TARGETS[metric.target],
                "rows": int(len(means)),
                "rows_meeting_target": int(sum(target_met(metric.target, m, alpha) for m in means)),
            }
        elif metric.null is not None:
            card |= _control_card(rows, metric)
        cards.append(card)
    table = pd.DataFrame(cards, columns=CARD_COLUMNS).astype({column: float for column in NUMBERS})
    controlled = table["null"].notna()
    margins = noise_margins(noise, table[controlled])
    if recorded is not None:
        keys = ["dataset", "track", "metric"]
        known = table.loc[controlled, keys].merge(recorded[[*keys, "margin", "margin_source"]], on=keys, how="left")
        margins = known[["margin", "margin_source"]].set_axis(margins.index)
    table["margin"] = margins["margin"].reindex(table.index)
    table["margin_source"] = margins["margin_source"].reindex(table.index)
    verdicts = [
        flag(card) if has_controls else (False, "") for has_controls, (_, card) in zip(controlled, table.iterrows())
    ]
    table["flagged"] = [flagged for flagged, _ in verdicts]
    table["why"] = [why for _, why in verdicts]
    return table.astype({"flagged": bool})


def read_noise(path: str | None) -> pd.DataFrame | None:
    """reference/default/noise.tsv, or None where the workflow ships no reference (a lab's copy without it: no file
    at ``path``)."""
    if not path or not os.path.isfile(path):
        return None
    return pd.read_csv(
        path, sep="\t", usecols=[*NOISE_KEY, "margin"], keep_default_na=False, dtype={"variant": str, "method": str}
    )
