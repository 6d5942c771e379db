"""``celldag compare A B``: one results folder against another — a rerun on another machine, a release
against the last one (docs/compare.md).

Every score row is matched by (dataset, track, method, variant, seed, metric) and judged: ``identical``
(the same float64 bits, NaN = NaN, the same status), ``within tolerance``, ``moved``, ``status changed``,
or on one side only. Bit identity is the promise where both runs (and the runs they chain on) ran on a
CPU; where either ran on CUDA, or is missing from runs.parquet, a continuous metric may move by
``tolerance.CUDA_TOLERANCE`` (the audit's too) and a count not at all. Then each leaderboard's order by its headline
metric, and the run-record fields — inputs, packages, machine, threads — that differ between the matched runs.

The record fields are compared by ``celldag.results.record_differences``; the Markdown and HTML files are
``celldag.report.comparison``'s.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from celldag.errors import InputError
from celldag.plan import method_kind
from celldag.records import read_record
from celldag.registry import read_yaml, shipped_registries
from celldag.results.leaderboard import metric_groups, metric_is_count, rank_key, table_ranking
from celldag.results.record_differences import INPUT, FieldDifference, record_differences
from celldag.results.tolerance import CUDA_TOLERANCE, Tolerance, values_match
from celldag.tracks import Track, tracks_of

KEY = ["dataset", "track", "method", "variant", "seed", "metric"]
MOVED, STATUS_CHANGED, ONLY_A, ONLY_B = "moved", "status changed", "only in A", "only in B"
WITHIN, IDENTICAL = "within tolerance", "identical"
VERDICTS = (MOVED, STATUS_CHANGED, ONLY_A, ONLY_B, WITHIN, IDENTICAL)  # the order rows are listed and counted in
PASSING = (WITHIN, IDENTICAL)
NO_CHANGE = Tolerance(rel=0.0, abs=0.0)  # a count: moving by one is a move
DEFAULT_OUT = "results/compare"

RunKey = tuple[str, str, str, int]  # dataset, method, variant, seed: a row of runs.parquet


# ------------------------------------------------------------------------------------------ the two sides


@dataclass(frozen=True)
class Side:
    """One results folder: its scores, its runs.parquet rows and their records (None: the file is missing)."""

    folder: Path  # …/results/{name}
    scores: pd.DataFrame
    runs: dict[RunKey, dict]
    records: dict[RunKey, dict | None]


def results_folder(text: str) -> Path:
    """``…/results/{name}``, a ``…/results`` folder holding exactly one, or a config name under ./results."""
    path = Path(text)
    if (path / "scores.parquet").is_file():
        return path
    if path.is_dir():
        names = sorted(found.parent.name for found in path.glob("*/scores.parquet"))
        if len(names) == 1:
            return path / names[0]
        if names:
            raise InputError(
                f"{text}: holds the results of {len(names)} configs ({', '.join(names)}): name one, "
                f"e.g. {path / names[0]}"
            )
        raise InputError(f"{text}: no scores.parquet in it or in a folder of it: not a celldag results folder")
    if (Path("results") / text / "scores.parquet").is_file():
        return Path("results") / text
    raise InputError(
        f"{text}: not a results folder (…/results/NAME holding scores.parquet), nor a config name "
        f"with results/{text}/scores.parquet here"
    )


def run_key(dataset: str, method: str, variant: str, seed) -> RunKey:
    return (dataset, method, variant, int(seed))


def upstream_key(key: RunKey) -> RunKey | None:
    """The run a chained run's rows chain on: their variant is its method/variant (``plan.ChainedRun.label``)."""
    dataset, _, variant, seed = key
    return (dataset, *variant.split("/", 1), seed) if "/" in variant else None  # type: ignore[return-value]


def read_side(text: str) -> Side:
    folder = results_folder(text)
    runs_path = folder / "runs.parquet"
    if not runs_path.is_file():
        raise InputError(f"{runs_path}: not found (the aggregate job writes it beside scores.parquet)")
    workflow = folder.resolve().parent.parent  # record paths are relative to the folder above results/
    runs = {
        run_key(row["dataset"], row["method"], row["variant"], row["seed"]): row
        for row in pd.read_parquet(runs_path).to_dict("records")
    }
    records = {}
    for key, row in runs.items():
        path = workflow / row["record"]
        records[key] = read_record(path) if path.is_file() else None
    return Side(folder, pd.read_parquet(folder / "scores.parquet"), runs, records)


def declared_tracks(workflow: str, sides: tuple[Side, Side]) -> dict[str, Track]:
    """The tracks of the workflow folder's registry, which must declare every track the scores name."""
    path = shipped_registries(workflow)["tracks"]
    tracks = tracks_of(read_yaml(path))
    for side in sides:
        unknown = sorted(set(side.scores["track"]) - set(tracks))
        if unknown:
            raise InputError(
                f"{side.folder / 'scores.parquet'}: track {unknown[0]!r} is not declared in {path} "
                "(--workflow names the celldag workflow folder that declares it)"
            )
    return tracks


# ------------------------------------------------------------------------------------------ scores


@dataclass(frozen=True)
class Rule:
    """How one score is compared: by its bits (``tolerance`` None) or within a tolerance, and why."""

    tolerance: Tolerance | None
    why: str

    def __str__(self) -> str:
        if self.tolerance is None:
            return f"same bits ({self.why})"
        if self.tolerance == NO_CHANGE:
            return f"Δ = 0 ({self.why})"
        # abs(), not |…|: the rule is a cell of a Markdown table
        return f"abs(Δ) ≤ {self.tolerance.abs:g} + {self.tolerance.rel:g}·abs(A) ({self.why})"


def off_cpu(side: Side, key: RunKey) -> str | None:
    """Why a run of this side may not give the same bits: it (or the run it chains on) ran on CUDA, or
    runs.parquet has no such run (nothing says where it ran); None where it ran on a CPU."""
    if key not in side.runs:
        return "not in runs.parquet"
    keys = [key, *filter(None, [upstream_key(key)])]
    devices = [str(side.runs[k]["device"]) for k in keys if k in side.runs]
    return "CUDA" if any(not device.startswith("cpu") for device in devices) else None


def rule_of(a: Side, b: Side, key: RunKey, count: bool, tolerance: Tolerance, overridden: bool) -> Rule:
    reasons = [f"{why} in {name}" for name, side in (("A", a), ("B", b)) if (why := off_cpu(side, key))]
    if not reasons and not overridden:
        return Rule(None, "both on CPU")
    if count:
        return Rule(NO_CHANGE, "a count")
    return Rule(tolerance, "--rtol/--atol" if overridden else ", ".join(reasons))


@dataclass(frozen=True)
class Judged:
    """One score row of A and/or B and its verdict."""

    key: tuple  # the values of KEY
    verdict: str
    a: float | None  # None: no row on that side
    b: float | None
    statuses: tuple[str | None, str | None]
    rule: Rule | None  # None for a row on one side only

    @property
    def run(self) -> RunKey:
        dataset, _, method, variant, seed, _ = self.key
        return run_key(dataset, method, variant, seed)

    @property
    def delta(self) -> float:
        return self.b - self.a if None not in (self.a, self.b) else math.nan

    @property
    def relative(self) -> float:
        return self.delta / abs(self.a) if self.a else math.nan


def verdict(a: float, b: float, statuses: tuple[str, str], rule: Rule) -> str:
    if statuses[0] != statuses[1]:
        return STATUS_CHANGED
    if values_match(a, b, None):
        return IDENTICAL
    return WITHIN if values_match(a, b, rule.tolerance) else MOVED


def judge_scores(a: Side, b: Side, tracks: dict[str, Track], tolerance: Tolerance, overridden: bool) -> list[Judged]:
    columns = [*KEY, "value", "status"]
    merged = a.scores[columns].merge(b.scores[columns], on=KEY, how="outer", suffixes=("_a", "_b"), indicator="side")
    judged = []
    for row in merged.to_dict("records"):
        key = tuple(row[column] for column in KEY)
        statuses = (row["status_a"], row["status_b"])
        if row["side"] != "both":
            only_a = row["side"] == "left_only"
            value = row["value_a"] if only_a else row["value_b"]
            judged.append(
                Judged(
                    key,
                    ONLY_A if only_a else ONLY_B,
                    value if only_a else None,
                    None if only_a else value,
                    statuses,
                    None,
                )
            )
            continue
        count = metric_is_count(row["metric"], tracks[row["track"]])
        rule = rule_of(
            a, b, run_key(row["dataset"], row["method"], row["variant"], row["seed"]), count, tolerance, overridden
        )
        values = (float(row["value_a"]), float(row["value_b"]))
        judged.append(Judged(key, verdict(*values, statuses, rule), *values, statuses, rule))
    return sorted(judged, key=lambda item: (VERDICTS.index(item.verdict), item.key))


# ------------------------------------------------------------------------------------------ rankings


@dataclass(frozen=True)
class Ranking:
    """One leaderboard's order of method/variant, best first, in A and in B."""

    scope: str  # "bm_small (lineage)", or "lineage: mean rank over 3 datasets"
    metric: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    # the pairs each side's seeds separate (celldag.results.leaderboard.rank; over datasets: separated on any of them)
    separable_a: frozenset[frozenset[str]] = frozenset()
    separable_b: frozenset[frozenset[str]] = frozenset()

    @property
    def changed(self) -> bool:
        """An entry ranked on one side only, or a pair whose order swapped while both sides' seeds separate it: a
        swap between methods the seeds cannot tell apart is noise, not a change of the leaderboard."""
        return bool(self.only_in("A") or self.only_in("B") or self.swapped())

    def only_in(self, side: str) -> list[str]:
        """The entries ranked in A only (``side`` "A") or in B only."""
        mine, theirs = (self.a, self.b) if side == "A" else (self.b, self.a)
        return [entry for entry in mine if entry not in theirs]

    def reversed_pairs(self) -> list[tuple[str, str]]:
        """Pairs ranked one way in A and the other way in B, separable or not (each first as A ranks it)."""
        where = {entry: position for position, entry in enumerate(self.b)}
        common = [entry for entry in self.a if entry in where]
        return [(x, y) for i, x in enumerate(common) for y in common[i + 1 :] if where[x] > where[y]]

    def swapped(self) -> list[tuple[str, str]]:
        """The reversed pairs both sides' seeds separate: an order change."""
        both = self.separable_a & self.separable_b
        return [pair for pair in self.reversed_pairs() if frozenset(pair) in both]

    def tied_swaps(self) -> int:
        """Pairs whose order swapped where either side's seeds cannot separate them (not a change)."""
        return len(self.reversed_pairs()) - len(self.swapped())


def controls(side: Side) -> set[str]:
    """method/variant of the runs its records call controls (not ranked: ``leaderboard_blocks``); a
    chained run on a control is one (``plan.chained_kinds``)."""
    kinds = {
        key: method_kind(record["config"]["method"], record["config"]["variant"])
        for key, record in side.records.items()
        if record
    }
    return {f"{key[1]}/{key[2]}" for key in kinds if "control" in (kinds[key], kinds.get(upstream_key(key)))}


def leaderboard_order(scores: pd.DataFrame, metric: str, higher_is_better: bool, excluded: set[str]) -> tuple[str, ...]:
    """method/variant by their mean over ok seeds of ``metric``, best first, then by name (the leaderboard's order)."""
    rows = scores[scores["metric"] == metric]
    entries = {f"{m}/{v}" for m, v in zip(rows["method"], rows["variant"])} - excluded
    ok = rows[rows["status"] == "ok"]
    means = ok.groupby(ok["method"] + "/" + ok["variant"])["value"].mean().to_dict()
    return tuple(
        sorted(entries, key=lambda entry: rank_key(means.get(entry, math.nan), higher_is_better, *entry.split("/", 1)))
    )


def separable_pairs(scores: pd.DataFrame, metric: str, excluded: set[str]) -> frozenset:
    """The pairs of method/variant whose ok seeds of ``metric`` separate them: the leaderboard's own ranking
    (celldag.results.leaderboard.table_ranking) of the entries not ``excluded``."""
    if not (scores["metric"] == metric).any():  # a dataset or metric on the other side only
        return frozenset()
    keys = sorted({(m, v) for m, v in zip(scores["method"], scores["variant"]) if f"{m}/{v}" not in excluded})
    ranking = table_ranking(scores, keys, metric)
    return frozenset(frozenset(f"{m}/{v}" for m, v in test.rows) for test in ranking.pairs if test.better is not None)


def mean_rank_order(orders: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Entries by their mean position over the datasets that rank them, then by name."""
    positions = defaultdict(list)
    for order in orders:
        for position, entry in enumerate(order, start=1):
            positions[entry].append(position)
    return tuple(sorted(positions, key=lambda entry: (sum(positions[entry]) / len(positions[entry]), entry)))


def rankings(a: Side, b: Side, tracks: dict[str, Track]) -> list[Ranking]:
    """Per dataset and track the order by its headline metric — the first metric of its leaderboard's first
    metric group — and per track on several datasets the order by mean rank."""
    excluded = controls(a) | controls(b)
    found, per_track = [], defaultdict(list)
    both = pd.concat([a.scores, b.scores], ignore_index=True)
    for (dataset, track_id), table in both.groupby(["dataset", "track"], sort=True):
        track = tracks[track_id]
        metric = next(iter(metric_groups(table, track).values()))[0]
        tables = [
            side.scores[(side.scores["dataset"] == dataset) & (side.scores["track"] == track_id)] for side in (a, b)
        ]
        higher = track.higher_is_better(metric)
        orders = [leaderboard_order(scores, metric, higher, excluded) for scores in tables]
        separable = [separable_pairs(scores, metric, excluded) for scores in tables]
        found.append(Ranking(f"{dataset} ({track_id})", metric, *orders, *separable))
        per_track[track_id].append(found[-1])
    for track_id, ranked in sorted(per_track.items()):
        if len(ranked) > 1:
            metrics = ", ".join(sorted({r.metric for r in ranked}))
            found.append(
                Ranking(
                    f"{track_id}: mean rank over {len(ranked)} datasets",
                    metrics,
                    mean_rank_order([r.a for r in ranked]),
                    mean_rank_order([r.b for r in ranked]),
                    frozenset().union(*(r.separable_a for r in ranked)),
                    frozenset().union(*(r.separable_b for r in ranked)),
                )
            )
    return found


# ------------------------------------------------------------------------------------------ the comparison


@dataclass(frozen=True)
class Comparison:
    a: Side
    b: Side
    scores: list[Judged]  # VERDICTS' order
    rankings: list[Ranking]
    run_differences: dict[RunKey, dict[str, tuple[str, str]]]
    environment: list[FieldDifference]
    tolerance: Tolerance  # of continuous metrics not compared by their bits
    overridden: bool  # the tolerance is --rtol/--atol's

    @property
    def counts(self) -> Counter:
        return Counter(item.verdict for item in self.scores)

    @property
    def failed(self) -> bool:
        return any(item.verdict not in PASSING for item in self.scores) or any(r.changed for r in self.rankings)

    @property
    def different_inputs(self) -> list[FieldDifference]:
        return [item for item in self.environment if item.field.startswith(INPUT)]


def compare_sides(
    a: Side, b: Side, tracks: dict[str, Track], rtol: float | None = None, atol: float | None = None
) -> Comparison:
    if any(value is not None and not value >= 0 for value in (rtol, atol)):
        raise InputError(f"--rtol {rtol} --atol {atol}: a tolerance is a number ≥ 0")
    overridden = rtol is not None or atol is not None
    tolerance = Tolerance(
        rel=CUDA_TOLERANCE.rel if rtol is None else rtol, abs=CUDA_TOLERANCE.abs if atol is None else atol
    )
    per_run, summary = record_differences(a.records, b.records)
    return Comparison(
        a,
        b,
        judge_scores(a, b, tracks, tolerance, overridden),
        rankings(a, b, tracks),
        per_run,
        summary,
        tolerance,
        overridden,
    )
