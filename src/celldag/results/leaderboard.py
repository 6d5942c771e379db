"""The leaderboard's model: a configuration's per-run scores and run records gathered into its tables, the
statistics over seeds its views show (paired differences, t intervals) and its ranking with the uncertainty the seeds
leave. ``celldag.report.leaderboard`` renders them (and re-exports these names).

Ranks with their uncertainty: a table ranked by its mean alone puts methods in a row that nothing in the data
separates. Here every pair of ranked rows is compared on the seeds ``ok`` for both, by a paired Student t test on the
per-seed differences (seeds are paired: the same seed draws the same data split, subsample and initialisation for
every method), with Holm's step-down over all pairs of the table, so that the chance of separating any pair whose
means are equal stays ≤ 5 % at once for the whole table. A row's rank interval is then every rank compatible with
those decisions (Mogstad, Romano, Shaikh & Wilhelm 2024, "Inference for ranks"): from 1 + the rows separably better
than it to the number of rows − those it is separably better than. The tie group is the rows not separable from the
best.

A pair whose per-seed differences have no spread (a deterministic method on fixed data beside another) cannot be
separated by seeds whatever its mean difference: the test has no error to scale it by, so it stays tied. A row with
fewer than two ``ok`` seeds is not ranked. Nothing is resampled: the same scores give the same ranks.

Where the seeds leave pairs tied, ``seeds_to_separate_half`` is a rough guide to how many seeds would separate half
of them: each pair's paired t test at its Holm step's level with 80 % power, the observed mean and sd of its per-seed
differences taken as the truth.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from scipy import stats

from celldag import artifacts, contracts
from celldag.multiplicity import holm_rejections
from celldag.records import read_record
from celldag.results import floor_cards
from celldag.tracks import DELTA_PREFIX, SCALED_PREFIX, Track, relative_reduction

LEVEL = 0.05  # the family error rate of a table's pairwise decisions
# a spread of the per-seed differences below this × the scores' size is rounding of a constant difference (0.3 + x −
# (0.7 + x) differs in its last bits from seed to seed), not seed noise: such a pair is not separable by seeds
NO_SPREAD = 1e-12


# ------------------------------------------------------------------------------------------ the tables

RUN_COLUMNS = [
    "dataset",
    "method",
    "variant",
    "seed",
    "status",
    "status_reason",
    "wall_time_s",
    "peak_rss_mb",
    "device",
    "config_hash",
    "note",
    "record",
]


def collect_scores(paths: Sequence[str]) -> pd.DataFrame:
    return pd.concat([artifacts.read_scores(path) for path in paths], ignore_index=True)


def collect_runs(paths: Sequence[str]) -> pd.DataFrame:
    records = []
    for path in paths:
        record = read_record(path)
        # a method's note for readers (uns["note"]: e.g. CellTreeQM's selection fallback) reaches the leaderboard
        note = (record.get("method_facts") or {}).get("note", "")
        records.append(
            {
                "dataset": record["dataset_id"],
                "method": record["method_id"],
                **record,
                "note": note,
                "record": str(path),
            }
        )
    return pd.DataFrame(records)[RUN_COLUMNS].sort_values(["dataset", "method", "variant", "seed"])


def add_deltas(scores: pd.DataFrame, baseline: str, tracks: dict[str, Track]) -> pd.DataFrame:
    """Append Δ rows (``delta_rf`` …) for the metrics their track declares with a Δ: relative reduction
    against ``baseline`` on the same dataset and seed."""
    with_delta = {
        (track_id, name) for track_id, track in tracks.items() for name, m in track.metrics.items() if m.delta
    }
    declared = pd.Series(
        [(track, metric) in with_delta for track, metric in zip(scores["track"], scores["metric"])], index=scores.index
    )
    ok = scores[(scores["status"] == "ok") & declared]
    reference = ok[ok["method"] == baseline].groupby(["dataset", "seed", "metric"])["value"].first()
    others = ok[ok["method"] != baseline].join(
        reference.rename("baseline"), on=["dataset", "seed", "metric"], how="inner"
    )
    deltas = others.assign(
        metric=DELTA_PREFIX + others["metric"],
        value=[relative_reduction(b, v) for b, v in zip(others["baseline"], others["value"])],
        higher_is_better=True,
    ).drop(columns="baseline")
    deltas = deltas[deltas["value"].notna()]
    return pd.concat([scores, deltas], ignore_index=True) if len(deltas) else scores


def score_text(value: float) -> str:
    text = f"{value:.3f}"
    return "0.000" if text == "-0.000" else text  # a rounding artefact, not a sign worth reading


def metric_groups(table: pd.DataFrame, track: Track) -> dict[str, list[str]]:
    """The track's metric groups (in their order; each Δ after its metrics), restricted to metrics present."""
    present = set(table["metric"])
    groups = {}
    for group in track.metric_groups:
        names = [metric.name for metric in group.metrics]
        names += [DELTA_PREFIX + metric.name for metric in group.metrics if metric.delta]
        groups[group.title] = [name for name in names if name in present]
    return {title: metrics for title, metrics in groups.items() if metrics}


def paired_difference(scores: pd.DataFrame, method: str, other: str, metric: str) -> dict | None:
    """``method`` − ``other`` on ``metric`` over the seeds where both ran ok: mean, 95 % t interval, n.

    Pairing by seed removes what the seed shares (split, data draw); the interval is Student's t on
    the per-seed differences, so with 3 seeds it is wide, and it is reported whatever its sign.
    """

    def per_seed(selector: str) -> pd.Series:
        name, _, variant = selector.partition("/")
        rows = scores[
            (scores["method"] == name)
            & (scores["variant"] == variant)
            & (scores["metric"] == metric)
            & (scores["status"] == "ok")
        ]
        return rows.set_index("seed")["value"]

    differences = (per_seed(method) - per_seed(other)).dropna()
    return None if differences.empty else t_interval(differences)


def t_interval(values: pd.Series) -> dict:
    """Mean of per-seed values with a 95 % Student-t interval (low, high: NaN for one value) and their number."""
    n, mean = len(values), float(values.mean())
    if n < 2:
        return {"mean": mean, "low": float("nan"), "high": float("nan"), "n": n}
    half = float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / n**0.5)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def paired_rows(scores: pd.DataFrame, paired: Sequence[dict]) -> list[dict]:
    """Every comparison the config asks for that has runs on this table: method, other, metric and the difference."""
    rows = []
    for comparison in paired:
        for other in comparison["against"]:
            for metric in comparison["metrics"]:
                result = paired_difference(scores, comparison["method"], other, metric)
                if result is not None:
                    rows.append(
                        {
                            "method": comparison["method"],
                            "other": other,
                            "metric": metric,
                            **result,
                            "higher_is_better": higher_is_better(scores, metric),
                        }
                    )
    return rows


def clipped_runs(rows: pd.DataFrame, track: Track) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(method, variant, metric) → (seeds whose value is the metric's clipping bound, seeds ok), where any is."""
    clipped = {}
    for metric, declared in track.metrics.items():
        if declared.clipped_at is None:
            continue
        ok = rows[(rows["metric"] == metric) & (rows["status"] == "ok")]
        for (method, variant), values in ok.groupby(["method", "variant"])["value"]:
            n_clipped = int((values == declared.clipped_at).sum())
            if n_clipped:
                clipped[method, variant, metric] = (n_clipped, len(values))
    return clipped


def metric_is_count(metric: str, track: Track) -> bool:
    return metric in track.metrics and track.metrics[metric].count


def metric_is_derived(metric: str, track: Track) -> bool:
    """A Δ against the baseline method, or a metric the track declares computed from the run's other scores."""
    return metric.startswith((DELTA_PREFIX, SCALED_PREFIX)) or (
        metric in track.metrics and track.metrics[metric].derived
    )


def rank_key(mean: float, higher_is_better: bool, method: str, variant: str) -> tuple:
    """A leaderboard row's place: the best mean of the headline metric first, rows without an ok value
    last, then by method and variant (``celldag compare`` ranks by the same key)."""
    missing = bool(pd.isna(mean))
    return (missing, 0.0 if missing else (-mean if higher_is_better else mean), method, variant)


def higher_is_better(scores: pd.DataFrame, metric: str) -> bool:
    """The metric's direction, from the scores table's higher_is_better column."""
    return bool(scores.loc[scores["metric"] == metric, "higher_is_better"].iloc[0])


def aggregate_tables(
    score_paths: Sequence[str],
    record_paths: Sequence[str],
    scores_path: str,
    runs_path: str,
    baseline: str,
    tracks: dict[str, Track],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every run's scores (with the Δ rows against ``baseline`` and the control-scaled rows,
    ``celldag.results.floor_cards``) and run records, checked and written to ``scores_path`` and ``runs_path``
    (scores.parquet, runs.parquet); returned for the views."""
    raw = collect_scores(score_paths)
    scores, scaled = add_deltas(raw, baseline, tracks), floor_cards.scaled_scores(raw, tracks)
    scores = pd.concat([scores, scaled], ignore_index=True) if len(scaled) else scores
    scores = scores.sort_values(["dataset", "method", "variant", "metric", "seed"]).reset_index(drop=True)
    contracts.check_scores(scores, scores_path)
    artifacts.write_parquet(scores, scores_path)
    runs = collect_runs(record_paths)
    artifacts.write_parquet(runs, runs_path)
    return scores, runs


# ------------------------------------------------------------------------------------------ ranks


@dataclass(frozen=True)
class PairTest:
    """One pair's paired comparison: ``better`` is the row the seeds put ahead, or None where not separable."""

    rows: tuple[Hashable, Hashable]
    seeds: int  # seeds ok for both
    mean_difference: float  # first minus second, on the table's scale
    p_value: float  # two-sided; 1.0 where the seeds cannot say (fewer than two, no spread)
    better: Hashable | None = None
    sd: float = math.nan  # of the per-seed differences (``paired_sd``): 0 without spread, NaN with < 2 seeds


@dataclass(frozen=True)
class Ranking:
    """A table's ranks: ``intervals`` (lowest, highest rank) per ranked row, ``tied_with_best`` the rows not
    separable from the best by mean, ``pairs`` every pair's test, ``unranked`` the rows with < 2 ok seeds."""

    intervals: Mapping[Hashable, tuple[int, int]]
    tied_with_best: frozenset
    pairs: tuple[PairTest, ...]
    unranked: tuple[Hashable, ...]

    @property
    def separable(self) -> int:
        return sum(test.better is not None for test in self.pairs)

    def separated(self, a: Hashable, b: Hashable) -> bool:
        """Whether the seeds separate rows ``a`` and ``b`` (False where either is unranked)."""
        return any(set(test.rows) == {a, b} and test.better is not None for test in self.pairs)


def _differences(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[list[float], float, float]:
    """The per-seed differences a − b on the seeds both have a finite score for, their mean and their sample sd (0
    where the spread is rounding of a constant difference, ``NO_SPREAD``; NaN for fewer than two seeds)."""
    seeds = sorted(seed for seed in set(a) & set(b) if math.isfinite(a[seed]) and math.isfinite(b[seed]))
    differences = [a[seed] - b[seed] for seed in seeds]
    if len(differences) < 2:
        return differences, (differences[0] if differences else math.nan), math.nan
    mean = math.fsum(differences) / len(differences)
    spread = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (len(differences) - 1))
    scale = max(max(abs(a[seed]), abs(b[seed])) for seed in seeds)
    return differences, mean, 0.0 if spread <= NO_SPREAD * scale else spread


def paired_test(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[int, float, float]:
    """(seeds, mean difference a − b, two-sided p) of the paired t test on the seeds both have a finite score for."""
    differences, mean, spread = _differences(a, b)
    if len(differences) < 2 or spread == 0.0:  # no spread: not separable by seeds, no error to scale the difference by
        return len(differences), mean, 1.0
    t = mean / (spread / math.sqrt(len(differences)))
    return len(differences), mean, float(2 * stats.t.sf(abs(t), df=len(differences) - 1))


def paired_sd(a: Mapping[int, float], b: Mapping[int, float]) -> float:
    """The sample sd of the per-seed differences a − b that ``paired_test`` scales by: 0 without spread (rounding of a
    constant difference), NaN for fewer than two seeds."""
    return _differences(a, b)[2]


def rank(per_seed: Mapping[Hashable, Mapping[int, float]], higher_is_better: bool, level: float = LEVEL) -> Ranking:
    """The rank intervals of a table's rows from their per-seed scores (seed → value; NaN or absent where not ok)."""
    finite = {row: {s: v for s, v in seeds.items() if math.isfinite(v)} for row, seeds in per_seed.items()}
    ranked = [row for row, seeds in finite.items() if len(seeds) >= 2]
    unranked = tuple(row for row in finite if len(finite[row]) < 2)
    sign = 1.0 if higher_is_better else -1.0
    raw = [(a, b, *paired_test(finite[a], finite[b])) for a, b in itertools.combinations(ranked, 2)]
    rejected = holm_rejections([p for *_, p in raw], level)  # family error ≤ level under any dependence
    pairs = tuple(
        PairTest(
            (a, b), seeds, mean, p, (a if sign * mean > 0 else b) if reject else None, paired_sd(finite[a], finite[b])
        )
        for (a, b, seeds, mean, p), reject in zip(raw, rejected, strict=True)
    )
    beaten_by = {row: 0 for row in ranked}  # rows separably better than it
    beats = {row: 0 for row in ranked}
    for test in pairs:
        if test.better is not None:
            worse = test.rows[1] if test.better == test.rows[0] else test.rows[0]
            beats[test.better] += 1
            beaten_by[worse] += 1
    intervals = {row: (1 + beaten_by[row], len(ranked) - beats[row]) for row in ranked}
    means = {row: math.fsum(finite[row].values()) / len(finite[row]) for row in ranked}
    best = max(ranked, key=lambda row: (sign * means[row], str(row)), default=None)
    tied = frozenset(
        row
        for row in ranked
        if row == best or not any(set(test.rows) == {row, best} and test.better is not None for test in pairs)
    )
    return Ranking(intervals, tied, pairs, unranked)


def table_ranking(rows: pd.DataFrame, keys: Sequence[tuple[str, str]], metric: str) -> Ranking:
    """``rank`` of a leaderboard table's rows ((method, variant) ``keys``) by ``metric``: each seed's ok value (the
    mean where a seed holds several rows of it)."""
    ok = rows[(rows["metric"] == metric) & (rows["status"] == "ok")]
    means = ok.groupby(["method", "variant", "seed"])["value"].mean()
    per_seed = {key: {} for key in keys}
    for (method, variant, seed), value in means.items():
        if (method, variant) in per_seed:
            per_seed[method, variant][int(seed)] = float(value)
    return rank(per_seed, higher_is_better(rows, metric))


# ------------------------------------------------------------------------------------------ seeds to separate

# A rough guide to how many seeds would order a table the seeds leave tied: the observed mean and sd of each pair's
# per-seed differences taken as the truth, each pair's paired t test at its Holm step with this power
POWER = 0.8
NORMAL_ENOUGH = 10**6  # seeds beyond which t's quantiles are the normal's (and n + 1 a float's n)


def seeds_to_separate(difference: float, sd: float, level: float, power: float = POWER) -> float:
    """The seeds a two-sided paired t test at ``level`` needs to separate, with probability ``power``, two rows whose
    per-seed differences have mean ``difference`` and sd ``sd``: the smallest n ≥ 2 with
    |difference| / sd · √n ≥ t_{n−1}(1 − level / 2) + t_{n−1}(power) (the normal approximation of the t test's power,
    with t's quantiles at n − 1 degrees of freedom; starting from its normal form ((z_{1−level/2} + z_power) · sd /
    |difference|)², which it never undercuts). Infinite where the difference is 0 or has no spread or no sd (< 2 seeds):
    more seeds of the same would not separate the pair (``rank`` keeps a pair without spread tied)."""
    if not (math.isfinite(difference) and math.isfinite(sd)) or difference == 0.0 or sd <= 0.0:
        return math.inf
    effect = abs(difference) / sd
    normal = ((stats.norm.ppf(1 - level / 2) + stats.norm.ppf(power)) / effect) ** 2
    if normal > NORMAL_ENOUGH:
        return float(math.ceil(normal))
    n = max(2, math.ceil(normal))
    while effect * math.sqrt(n) < stats.t.ppf(1 - level / 2, n - 1) + stats.t.ppf(power, n - 1):
        n += 1
    return float(n)


def seeds_to_separate_half(ranking: Ranking, level: float = LEVEL, power: float = POWER) -> float:
    """About how many seeds would separate half of a table's pairs (⌈pairs / 2⌉ of them) at the Holm level: the pairs in
    order of |mean difference| / sd, largest first; the j-th (j = 1, 2, …) tested at its Holm step's level,
    ``level`` / (pairs − j + 1), needs ``seeds_to_separate`` of its own; half of the pairs are separated once the first
    ⌈pairs / 2⌉ all are, at the largest of their needs. A rough guide (the seeds' own means and sds taken as the truth,
    each pair's power alone); infinite where half of the pairs have no spread or no difference; NaN without pairs."""
    pairs = ranking.pairs
    if not pairs:
        return math.nan

    def effect(test: PairTest) -> float:
        finite = math.isfinite(test.mean_difference) and math.isfinite(test.sd) and test.sd > 0
        return abs(test.mean_difference) / test.sd if finite else 0.0

    ordered = sorted(pairs, key=effect, reverse=True)
    half = math.ceil(len(pairs) / 2)
    return max(
        seeds_to_separate(test.mean_difference, test.sd, level / (len(pairs) - step), power)
        for step, test in enumerate(ordered[:half])
    )


def interval_text(interval: tuple[int, int]) -> str:
    """ "3" for a rank the seeds fix, "2–5" for the ranks compatible with them."""
    low, high = interval
    return str(low) if low == high else f"{low}–{high}"


# ------------------------------------------------------------------------------------------ held-out-batch efficiency

# Beside each representation run, what its embedding buys a lab annotating a new batch: the annotation track's logistic
# classifier on that embedding, its headline procedure in the new-batch scenario (docs/report.md). Joined from the
# annotation scores at aggregation, for the view only: no score row is added. The annotation track's names are spelled
# here, not imported: its figures are a view, so the results floor importing celldag.annotation would close an import
# cycle between celldag's children (tests/unit/results/test_held_out_batch.py holds them equal to the track's).
ANNOTATION_TRACK = "annotation"  # chained on the representation track (annotation.track.TRACK.upstream)
REPRESENTATION_TRACK = "representation"
EFFICIENCY_CLASSIFIER = "logistic"
EFFICIENCY_PROCEDURE = "kandinsky_augmented"  # annotation.track.HEADLINE
SHORTFALL = f"held-out-batch shortfall ({EFFICIENCY_CLASSIFIER}, Kandinsky)"
SET_SIZE = "held-out-batch set size"
EFFICIENCY_METRICS = {  # the view's column → the annotation metric it is read from
    SHORTFALL: f"{EFFICIENCY_PROCEDURE}_new_batch_worst",
    SET_SIZE: f"{EFFICIENCY_PROCEDURE}_new_batch_set_size",
}
# the views' α where a caller gives none: annotation.track.SCORING_DEFAULTS["alpha"]; the workflow and the audit pass
# the config's (celldag.annotation.scoring.options(evaluation)["alpha"]), the α the annotation scores were built with
DEFAULT_ALPHA = 0.1


def shortfall(worst: float, alpha: float) -> float:
    """How far the worst left-out batch's coverage falls below 1 − α: max(0, 1 − α − worst); 0 where it holds."""
    return max(0.0, 1.0 - alpha - worst)


def held_out_batch_rows(scores: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per representation run (dataset, method, variant, seed) of ``scores``: rows in the scores' columns for the
    two ``EFFICIENCY_METRICS`` columns (lower is better), read from the annotation run of ``EFFICIENCY_CLASSIFIER``
    chained on it (its variant is the run's ``method/variant``, ``plan.ChainedRun.label``), same seed. The shortfall
    is ``shortfall(worst, alpha)``; a row keeps the annotation row's status, and is ``not_applicable`` where there is
    none (no chained annotation on the dataset — a dataset of one batch has none —, or the classifier not run)."""
    columns = ["dataset", "track", "method", "variant", "seed", "metric", "value", "higher_is_better", "status"]
    runs = scores.loc[scores["track"] == REPRESENTATION_TRACK, ["dataset", "method", "variant", "seed"]]
    runs = runs.drop_duplicates().sort_values(["dataset", "method", "variant", "seed"])
    chained = scores[
        (scores["track"] == ANNOTATION_TRACK)
        & (scores["method"] == EFFICIENCY_CLASSIFIER)
        & scores["metric"].isin(list(EFFICIENCY_METRICS.values()))
    ]
    found = {
        (row.dataset, row.variant, int(row.seed), row.metric): (float(row.value), str(row.status))
        for row in chained.itertuples(index=False)
    }
    rows = []
    for run in runs.itertuples(index=False):
        for column, metric in EFFICIENCY_METRICS.items():
            value, status = found.get(
                (run.dataset, f"{run.method}/{run.variant}", int(run.seed), metric), (math.nan, "not_applicable")
            )
            if column == SHORTFALL and status == "ok":
                value = shortfall(value, alpha)
            rows.append(
                (
                    run.dataset,
                    REPRESENTATION_TRACK,
                    run.method,
                    run.variant,
                    int(run.seed),
                    column,
                    value if status == "ok" else math.nan,
                    False,
                    status,
                )
            )
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class Agreement:
    """Two rankings of the same table's rows (``rank``) pair by pair, on the pairs both rank: how many each
    separates, how many both separate in the same order, and the pairs they put in opposite orders."""

    pairs: int  # pairs of rows ranked by both
    first: int  # separated by the first ranking
    second: int  # separated by the second
    same: int  # separated by both, the same row ahead
    opposite: tuple[tuple[Hashable, Hashable], ...]  # separated by both, opposite rows ahead: (first's better, other)


def agreement(first: Ranking, second: Ranking) -> Agreement:
    """Whether ``second`` orders the rows as ``first`` does, stated on the tie groups the seeds leave: a pair
    counts only where each ranking separates it (Holm over its table, as the rank column), never by mean."""
    better = [{frozenset(test.rows): test.better for test in ranking.pairs} for ranking in (first, second)]
    separated = [(better[0][pair], better[1][pair]) for pair in set(better[0]) & set(better[1])]
    both = [(a, b) for a, b in separated if a is not None and b is not None]
    return Agreement(
        len(separated),
        sum(a is not None for a, _ in separated),
        sum(b is not None for _, b in separated),
        sum(a == b for a, b in both),
        tuple(sorted(((a, b) for a, b in both if a != b), key=str)),
    )
