"""The reference of the default run that a release ships (``reference/default/``, docs/check.md): its scores, a
noise model per score, its environment and its cost — and a results folder judged against it (``celldag check``).

The noise model. Per score group (dataset, track, method, variant, metric) the reference holds:

- ``kind``: ``count`` (the track declares it), ``smooth`` (the perturbed reruns moved it by rounding at most:
  ≤ ``ROUNDING.rel``·|A| + ``ROUNDING.abs``) or ``discontinuous`` (a perturbed rerun moved it further: an NJ
  topology, a kNN tie, an argmax or an order statistic flipped, or a trained model took another path), and among
  those ``two-regime`` where its values over the seeds fall in two regimes (``two_regimes``, regimes.tsv);
- ``sd`` with ``df`` degrees of freedom: the spread the score has from run to run, pooled from its values over
  the reference's seeds (sample variance, n − 1 df) and from the perturbed reruns' moves at the same seed (each
  Δ²/2 with one df: a rerun perturbed like another machine is, for a trained method, another draw);
- a floor under ``sd``: the same pooling over every method and variant of the dataset for that metric, which
  a group falls back to where its own spread is smaller. A deterministic method (the expression baseline,
  GenePT-w) has no seed spread and only a few perturbed moves, so its own estimate rests on almost nothing —
  the held-out rerun showed its kBET and Leiden ARI flipping by 0.06 where two perturbations had moved them by
  0.009 or not at all; how far a kernel change can move a metric is better measured on all the dataset's methods;
- ``margin``: the largest move "within seed noise", t(df) at 1 − α/(2m) times √2·sd, where α is the family-wise
  false-alarm rate of config/reference.yaml and m the number of scores judged by noise (Bonferroni): on an
  unchanged installation, the chance that any score is called changed stays under α. It is also the smallest
  move a check can detect, which the check prints.
- ``mean``, the group's mean over the reference's seeds, and ``offset``, how far another machine moves that mean
  (``machine_offset``): what the per-method verdicts (``celldag.results.method_verdicts``) hold a lab's seeds against.

A smooth score may also move by the numerical tolerance, ``TOLERANCE_HEADROOM`` times the largest relative
move of any smooth score in the perturbed reruns (calibrated, never above ``ROUNDING``).

The reference's files are text, one row per line and sorted: a change of one score is one line of a diff.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from celldag import artifacts
from celldag.errors import InputError
from celldag.results.compare import KEY, Side
from celldag.results.leaderboard import metric_is_count
from celldag.results.record_differences import INPUT, MACHINE, RECORD, run_facts
from celldag.results.tolerance import Tolerance, plural
from celldag.tracks import Track

GROUP = ["dataset", "track", "method", "variant", "metric"]
METRIC_FLOOR = ["dataset", "track", "metric"]  # a score's spread is at least its metric's on its dataset
ROUNDING = Tolerance(rel=1e-6, abs=1e-9)  # a move no larger is rounding (kind smooth); one larger, a flip
TOLERANCE_HEADROOM = 10.0
TOLERANCE_FLOOR = 1e-12  # the numerical tolerance where no smooth score moved at all in the perturbed reruns
LOCK_FILE = "requirements/lock.txt"
# fields of the environment that do not change a number: which host, how it was scheduled, how many CPUs it had
NOT_NUMERICAL = ("host", "SLURM job", "CUDA_VISIBLE_DEVICES", "machine.os", "machine.cpus", RECORD, MACHINE)

IDENTICAL, NUMERICAL, SEED_NOISE = "identical", "within numerical tolerance", "within seed noise"
CHANGED, STATUS_CHANGED = "changed", "status changed"
ONLY_REFERENCE, ONLY_HERE = "only in the reference", "only in this run"
VERDICTS = (CHANGED, STATUS_CHANGED, ONLY_REFERENCE, ONLY_HERE, SEED_NOISE, NUMERICAL, IDENTICAL)  # listing order
PASSING = (IDENTICAL, NUMERICAL, SEED_NOISE)
BIT_FOR_BIT, NOISE_AWARE = "bit for bit", "noise-aware"

SCORES_FILE, NOISE_FILE, REGIMES_FILE, RUNS_FILE, COST_FILE, META_FILE = (
    "scores.tsv",
    "noise.tsv",
    "regimes.tsv",
    "runs.tsv",
    "cost.tsv",
    "reference.yaml",
)
TWO_REGIME = "two-regime"
REGIME_GAP = 4.0  # two regimes: a gap between the sorted values ≥ this many within-regime sds
REGIME_COLUMNS = [*GROUP, "split", "low", "high", "within", "above", "values"]


@dataclass(frozen=True)
class Reference:
    scores: pd.DataFrame  # KEY + status, value: the default run's
    noise: pd.DataFrame  # GROUP + kind, seeds, sd, df, margin
    runs: pd.DataFrame  # dataset, method, variant, seed, status, config_hash, inputs: what each run read
    cost: pd.DataFrame  # rule, job, wall_s, peak_mb
    meta: dict = field(default_factory=dict)  # reference.yaml: how, where and from what it was made
    # GROUP + split, low, high, within, above, values: the two-regime groups (``two_regimes``)
    regimes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=REGIME_COLUMNS))

    @property
    def tolerance(self) -> Tolerance:
        return Tolerance(rel=self.meta["numerical_tolerance"]["rel"], abs=self.meta["numerical_tolerance"]["abs"])

    @property
    def environment(self) -> dict[str, str]:
        return self.meta["environment"]


# ------------------------------------------------------------------------------------------ environment


def lock_digest(workflow: Path) -> str:
    path = workflow / LOCK_FILE
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "none"


def libc(platform_name: str) -> str:
    """``glibc2.36`` of ``Linux-6.1-x86_64-with-glibc2.36``: the C library's maths, not the kernel's version."""
    return platform_name.rpartition("-with-")[2] if "-with-" in platform_name else "unknown"


def environment_of(records: dict[tuple, dict | None], workflow: Path) -> dict[str, str]:
    """Of a side's run records, each field that may change a number (packages, device, threads, the machine section
    but its OS string and CPU count, plus the C library) at its most common value over the runs, and the lock
    file's digest: one machine's environment, as a reference stores it."""
    values: dict[str, Counter] = {}
    for record in records.values():
        if record is None:
            continue
        facts = run_facts(record)
        if "machine" in record and record["machine"]:
            facts["machine.libc"] = libc(record["machine"]["os"])
        for name, value in facts.items():
            if not (
                name.startswith(INPUT) or name.startswith("params.") or name == "config_hash" or name in NOT_NUMERICAL
            ):
                values.setdefault(name, Counter())[value] += 1
    environment = {name: counts.most_common(1)[0][0] for name, counts in sorted(values.items())}
    return environment | {"lock file sha256": lock_digest(workflow)}


def environment_differences(reference: dict[str, str], here: dict[str, str]) -> dict[str, tuple[str, str]]:
    """field → (the reference's value, this run's) where they differ; a field on one side only is "absent" on the
    other."""
    return {
        name: (reference.get(name, "absent"), here.get(name, "absent"))
        for name in sorted(set(reference) | set(here))
        if reference.get(name) != here.get(name)
    }


# ------------------------------------------------------------------------------------------ building


def inputs_digest(record: dict | None) -> str:
    """One digest of every input a run read (their sha256 by path): two runs that read the same bytes share it."""
    if record is None:
        return "no record"
    text = "\n".join(f"{path} {digest}" for path, digest in sorted(record["input_sha256"].items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ok_values(scores: pd.DataFrame) -> pd.DataFrame:
    return scores[(scores["status"] == "ok") & scores["value"].notna()]


def perturbed_moves(default: pd.DataFrame, reruns: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per perturbed rerun and score row on both sides (status ok): the rerun's value − the default run's, and |A|."""
    base = ok_values(default)[[*KEY, "value"]]
    moves = []
    for name, scores in reruns.items():
        merged = base.merge(ok_values(scores)[[*KEY, "value"]], on=KEY, suffixes=("_a", "_b"))
        moves.append(
            merged.assign(rerun=name, delta=merged["value_b"] - merged["value_a"], size=merged["value_a"].abs())
        )
    return pd.concat(moves, ignore_index=True)


def numerical_tolerance(moves: pd.DataFrame, smooth: pd.Series) -> Tolerance:
    """TOLERANCE_HEADROOM × the largest relative move of a smooth score in the perturbed reruns (TOLERANCE_FLOOR
    where none moved), never above ROUNDING; the absolute part is ROUNDING's scaled alike."""
    rows = moves[smooth.reindex(pd.MultiIndex.from_frame(moves[GROUP])).to_numpy() & (moves["delta"] != 0)]
    relative = (rows["delta"].abs() / rows["size"].where(rows["size"] > 0)).max() if len(rows) else math.nan
    rel = TOLERANCE_FLOOR if math.isnan(relative) else min(TOLERANCE_HEADROOM * relative, ROUNDING.rel)
    return Tolerance(rel=float(max(rel, TOLERANCE_FLOOR)), abs=float(ROUNDING.abs * rel / ROUNDING.rel))


def machine_offset(moves: pd.DataFrame, groups: pd.Index) -> pd.Series:
    """Per score group, how far another machine moves its mean over seeds: the root mean square, over the perturbed
    reruns, of the rerun's moves averaged over the seeds — never below its metric's on its dataset (the same mean
    over every method and variant), as ``sd`` has its floor. A move that every seed shares (a kernel that shifts a
    deterministic method's kBET) does not average out over a lab's seeds; this is the part of the noise that more
    seeds cannot shrink (``celldag.results.method_verdicts``)."""
    averaged = moves.groupby([*GROUP, "rerun"])["delta"].mean().pow(2).rename("square").reset_index()
    own = averaged.groupby(GROUP)["square"].mean().reindex(groups)
    floor = averaged.groupby(METRIC_FLOOR)["square"].mean()
    floor = floor.reindex(pd.MultiIndex.from_frame(groups.to_frame()[METRIC_FLOOR])).to_numpy()
    return pd.Series(
        pd.concat([own.fillna(0.0).rename("own"), pd.Series(floor, index=groups).fillna(0.0).rename("floor")], axis=1)
        .max(axis=1)
        .pow(0.5),
        index=groups,
    )


def noise_model(
    default: pd.DataFrame,
    seeds: pd.DataFrame,
    reruns: dict[str, pd.DataFrame],
    tracks: dict[str, Track],
    false_alarm: float,
) -> tuple[pd.DataFrame, Tolerance, dict]:
    """Per score group of the default run: kind, seeds, sd, df and margin (the module's docstring), the
    calibrated numerical tolerance, and how the margins were set (for reference.yaml)."""
    from scipy import stats

    groups = default[GROUP].drop_duplicates().set_index(GROUP).index
    spread = (
        ok_values(seeds)
        .groupby(GROUP)["value"]
        .agg(seeds="count", mean="mean", squares=lambda v: float(((v - v.mean()) ** 2).sum()))
    )
    moves = perturbed_moves(default, reruns)
    rounding = moves["delta"].abs() <= ROUNDING.rel * moves["size"] + ROUNDING.abs
    by_group = moves.assign(half_square=moves["delta"] ** 2 / 2, flip=~rounding).groupby(GROUP)
    perturbed = by_group.agg(moves=("delta", "count"), half_squares=("half_square", "sum"), flips=("flip", "sum"))
    table = pd.DataFrame(index=groups).join(spread.drop(columns="mean")).join(perturbed).fillna(0)
    count = pd.Series(
        [
            metric_is_count(metric, tracks[track])
            for track, metric in zip(table.index.get_level_values("track"), table.index.get_level_values("metric"))
        ],
        index=table.index,
    )
    table["kind"] = "smooth"
    table.loc[table["flips"] > 0, "kind"] = "discontinuous"
    table.loc[count, "kind"] = "count"
    table["df"] = (table["seeds"] - 1).clip(lower=0) + table["moves"]
    pooled = ((table["squares"] + table["half_squares"]) / table["df"].where(table["df"] > 0)).fillna(0.0)
    # the metric's floor: the same pooling over every method and variant of the dataset (the module's docstring)
    sums = table.assign(total=table["squares"] + table["half_squares"]).groupby(METRIC_FLOOR)[["total", "df"]].sum()
    floor = sums.reindex(pd.MultiIndex.from_frame(table.index.to_frame()[METRIC_FLOOR]))
    floor_variance = (floor["total"] / floor["df"].where(floor["df"] > 0)).fillna(0.0).to_numpy()
    floored = pd.Series(floor_variance > pooled.to_numpy(), index=table.index)
    table["sd"] = pooled.where(~floored, floor_variance).pow(0.5)
    table["df"] = table["df"].where(~floored, floor["df"].to_numpy())
    rows_per_group = default.groupby(GROUP).size().reindex(table.index)
    judged = int(rows_per_group[table["sd"] > 0].sum())  # m: every score whose margin is above 0
    level = 1 - false_alarm / (2 * max(judged, 1))
    quantile = table["df"].where(table["df"] > 0).map(lambda df: float(stats.t.ppf(level, df)))
    table["margin"] = (quantile * math.sqrt(2) * table["sd"]).fillna(0.0)
    table["mean"] = spread["mean"].reindex(table.index)
    table["offset"] = machine_offset(moves, table.index)
    tolerance = numerical_tolerance(moves, table["kind"] == "smooth")
    how = {
        "family_false_alarm": false_alarm,
        "scores_judged_by_noise": judged,
        "per_score_level": float(1 - level),
        "groups_at_the_metric_floor": int(floored.sum()),
        "reruns": sorted(reruns),
        "moves_beyond_rounding": int((~rounding).sum()),
        "moves": int((moves["delta"] != 0).sum()),
    }
    noise = table.reset_index()[[*GROUP, "kind", "seeds", "df", "sd", "margin", "mean", "offset"]]
    return noise.astype({"seeds": int, "df": int}), tolerance, how


def two_regimes(seeds: pd.DataFrame, discontinuous: pd.Index) -> pd.DataFrame:
    """The discontinuous groups whose values over the reference's seeds fall in two regimes — a conformal threshold
    that lands on one of two score levels, a new-batch set size of 2 or of 4.7: sorted, the values' largest gap is at
    least ``REGIME_GAP`` times the pooled sd within the two sides, each side holding two values or more. Per such
    group: the ``split`` (the gap's middle), each regime's mean (``low``, ``high``), the pooled ``within`` sd, and how
    many of its ``values`` lie ``above`` the split: what ``celldag.results.method_verdicts`` judges a lab's seeds
    against
    instead of a normal model, which under-states how far a mean of few seeds of a two-regime score moves."""
    rows = []
    ok = ok_values(seeds)
    ok = ok[pd.MultiIndex.from_frame(ok[GROUP]).isin(discontinuous)]
    for key, group in ok.groupby(GROUP, sort=True):
        values = sorted(group["value"])
        if len(values) < 4:
            continue
        gaps = [b - a for a, b in zip(values, values[1:])]
        at = max(range(len(gaps)), key=lambda i: (gaps[i], -i))
        low, high = values[: at + 1], values[at + 1 :]
        if len(low) < 2 or len(high) < 2 or gaps[at] <= 0:
            continue
        squares = sum((v - sum(low) / len(low)) ** 2 for v in low) + sum((v - sum(high) / len(high)) ** 2 for v in high)
        within = math.sqrt(squares / (len(values) - 2))
        if gaps[at] >= REGIME_GAP * within:
            rows.append(
                dict(zip(GROUP, key))
                | {
                    "split": (values[at] + values[at + 1]) / 2,
                    "low": sum(low) / len(low),
                    "high": sum(high) / len(high),
                    "within": within,
                    "above": len(high),
                    "values": len(values),
                }
            )
    return pd.DataFrame(rows, columns=REGIME_COLUMNS)


def cost_table(side: Side, measured: list[dict]) -> pd.DataFrame:
    """Per rule (a run's per method): wall seconds summed and the highest peak RSS, over the side's runs (their
    records' wall_time_s and peak_rss_mb) and the prepare and evaluate jobs ``celldag.jobs.resources.measured`` found
    for
    its datasets and seeds."""
    runs = pd.DataFrame(side.runs.values())
    rows = [
        {"rule": "run " + method, "wall_s": group["wall_time_s"].sum(), "peak_mb": group["peak_rss_mb"].max()}
        for method, group in runs.groupby("method")
    ]
    # prepare jobs by the prepared files the side's runs read (results/data/{dataset}/{key}/seed{seed}.h5ad)
    prepared = {
        tuple(Path(record["inputs"]["prepared"]).with_suffix("").parts[-3:])
        for record in side.records.values()
        if record and "prepared" in record.get("inputs", {})
    }
    datasets, name = set(runs["dataset"]), side.folder.name
    for rule in ("prepare_dataset", "evaluate"):
        jobs = [
            job
            for job in measured
            if job["rule"] == rule
            and job["dataset"] in datasets
            and (
                (*job["job"].split("/"), job["seed"]) in prepared
                if rule == "prepare_dataset"
                else job["job"].startswith(name + "/")
            )
        ]
        if jobs:
            rows.append(
                {
                    "rule": rule,
                    "wall_s": sum(job["wall_s"] for job in jobs),
                    "peak_mb": max(job["max_rss_mb"] for job in jobs),
                }
            )
    return pd.DataFrame(rows, columns=["rule", "wall_s", "peak_mb"]).round({"wall_s": 1, "peak_mb": 0})


def runs_table(side: Side) -> pd.DataFrame:
    rows = [
        {
            "dataset": key[0],
            "method": key[1],
            "variant": key[2],
            "seed": key[3],
            "status": side.runs[key]["status"],
            "config_hash": str(side.runs[key]["config_hash"])[:16],
            "inputs": inputs_digest(side.records[key]),
        }
        for key in sorted(side.runs)
    ]
    return pd.DataFrame(rows)


def build(
    default: Side,
    seeds: pd.DataFrame,
    reruns: dict[str, pd.DataFrame],
    tracks: dict[str, Track],
    config: dict,
    measured: list[dict],
    workflow: Path,
    made: dict,
) -> Reference:
    """The reference of ``default`` (the default run's results), its noise model from ``seeds`` (the same config on
    the noise model's seeds) and the perturbed ``reruns``' scores; ``made``: commit, date, … for reference.yaml."""
    missing = sorted(set(config["seeds"]) - set(seeds["seed"]))
    if missing:
        raise InputError(
            f"the run on the noise model's seeds has no scores of seed {missing[0]} (config/reference.yaml seeds)"
        )
    noise, tolerance, how = noise_model(default.scores, seeds, reruns, tracks, config["family_false_alarm"])
    discontinuous = pd.MultiIndex.from_frame(noise.loc[noise["kind"] == "discontinuous", GROUP])
    regimes = two_regimes(seeds, discontinuous)
    noise.loc[pd.MultiIndex.from_frame(noise[GROUP]).isin(pd.MultiIndex.from_frame(regimes[GROUP])), "kind"] = (
        TWO_REGIME
    )
    scores = default.scores[[*KEY, "status", "value"]].sort_values(KEY, ignore_index=True)
    meta = {
        **made,
        "seeds": list(config["seeds"]),
        "perturbations": config["perturbations"],
        "noise": how,
        "numerical_tolerance": {"rel": tolerance.rel, "abs": tolerance.abs},
        "environment": environment_of(default.records, workflow),
    }
    return Reference(scores, noise, runs_table(default), cost_table(default, measured), meta, regimes)


# ------------------------------------------------------------------------------------------ files


def write(reference: Reference, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tables = {
        SCORES_FILE: reference.scores,
        NOISE_FILE: reference.noise,
        REGIMES_FILE: reference.regimes,
        RUNS_FILE: reference.runs,
        COST_FILE: reference.cost,
    }
    for name, table in tables.items():
        with artifacts.atomic_path(folder / name) as tmp:
            # repr of every float: the shortest text that reads back as the same float64, so the file holds the bits
            table.to_csv(tmp, sep="\t", index=False, float_format=None, na_rep="nan")
    with artifacts.atomic_path(folder / META_FILE) as tmp:
        tmp.write_text(yaml.safe_dump(reference.meta, sort_keys=False, allow_unicode=True, width=110))


COLUMNS = {
    SCORES_FILE: [*KEY, "status", "value"],
    NOISE_FILE: [*GROUP, "kind", "seeds", "df", "sd", "margin", "mean", "offset"],
    REGIMES_FILE: REGIME_COLUMNS,
    RUNS_FILE: ["dataset", "method", "variant", "seed", "status", "config_hash", "inputs"],
    COST_FILE: ["rule", "wall_s", "peak_mb"],
}
TEXT = {
    "dataset": str,
    "track": str,
    "method": str,
    "variant": str,
    "metric": str,
    "status": str,
    "kind": str,
    "rule": str,
    "config_hash": str,
    "inputs": str,
}


def read(folder: str | Path) -> Reference:
    """A reference folder; a missing file or column raises one InputError naming it."""
    folder = Path(folder)
    tables = {}
    for name, columns in COLUMNS.items():
        path = folder / name
        if not path.is_file():
            what = (
                "a reference made before celldag 0.3.0: remake it (make reference)"
                if name == REGIMES_FILE
                else "not a celldag reference folder (made by `make reference`, docs/check.md)"
            )
            raise InputError(f"{path}: not found — {what}")
        table = pd.read_csv(
            path,
            sep="\t",
            dtype={c: t for c, t in TEXT.items() if c in columns},
            keep_default_na=False,
            na_values={"value": ["nan"], "mean": ["nan"]},
            float_precision="round_trip",
        )
        absent = [column for column in columns if column not in table.columns]
        if absent:
            made_before = (
                " — a reference made before celldag 0.3.0: remake it (make reference)"
                if absent[0] in ("mean", "offset")
                else ""
            )
            raise InputError(f"{path}: no column {absent[0]!r} (expected {', '.join(columns)}){made_before}")
        tables[name] = table[columns]
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise InputError(f"{meta_path}: not found — not a celldag reference folder")
    meta = yaml.safe_load(meta_path.read_text())
    for name in ("numerical_tolerance", "environment"):
        if name not in (meta or {}):
            raise InputError(f"{meta_path}: no {name!r}")
    return Reference(
        tables[SCORES_FILE], tables[NOISE_FILE], tables[RUNS_FILE], tables[COST_FILE], meta, tables[REGIMES_FILE]
    )


# ------------------------------------------------------------------------------------------ judging


@dataclass(frozen=True)
class Judgement:
    """One score row of the reference and/or this run, and its verdict."""

    key: tuple  # the values of KEY
    verdict: str
    reference: float | None  # None: no row there
    here: float | None
    statuses: tuple[str | None, str | None]
    kind: str  # of its group in the noise model; "" where the reference has none
    margin: float  # the largest move within seed noise: the smallest change the check detects

    @property
    def delta(self) -> float:
        return self.here - self.reference if None not in (self.reference, self.here) else math.nan


def same_bits(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or float(a).hex() == float(b).hex()


def score_verdict(a: float, b: float, kind: str, margin: float, tolerance: Tolerance, rule: str) -> str:
    if same_bits(a, b):
        return IDENTICAL
    if rule == BIT_FOR_BIT or math.isnan(a) or math.isnan(b):
        return CHANGED
    if kind == "smooth" and abs(b - a) <= tolerance.abs + tolerance.rel * abs(a):
        return NUMERICAL
    return SEED_NOISE if abs(b - a) <= margin else CHANGED


def judge(reference: Reference, scores: pd.DataFrame, rule: str) -> list[Judgement]:
    """Every score row of the reference and of ``scores`` (this run's), judged under ``rule``."""
    noise = reference.noise.set_index(GROUP)
    columns = [*KEY, "value", "status"]
    merged = reference.scores[columns].merge(
        scores[columns], on=KEY, how="outer", suffixes=("_a", "_b"), indicator="side"
    )
    found = []
    for row in merged.to_dict("records"):
        key = tuple(row[column] for column in KEY)
        group = tuple(row[column] for column in GROUP)
        kind, margin = (
            (noise.at[group, "kind"], float(noise.at[group, "margin"])) if group in noise.index else ("", 0.0)
        )
        statuses = (row["status_a"], row["status_b"])
        if row["side"] != "both":
            only_a = row["side"] == "left_only"
            value = float(row["value_a"] if only_a else row["value_b"])
            found.append(
                Judgement(
                    key,
                    ONLY_REFERENCE if only_a else ONLY_HERE,
                    value if only_a else None,
                    None if only_a else value,
                    statuses,
                    kind,
                    margin,
                )
            )
            continue
        a, b = float(row["value_a"]), float(row["value_b"])
        verdict = (
            STATUS_CHANGED
            if statuses[0] != statuses[1]
            else score_verdict(a, b, kind, margin, reference.tolerance, rule)
        )
        found.append(Judgement(key, verdict, a, b, statuses, kind, margin))
    return sorted(found, key=lambda item: (VERDICTS.index(item.verdict), item.key))


def rule_for(differences: dict[str, tuple[str, str]]) -> str:
    """Bit for bit where nothing that may change a number differs from the reference's environment, else noise-aware."""
    return NOISE_AWARE if differences else BIT_FOR_BIT


def cost_ratios(reference: Reference, here: pd.DataFrame) -> pd.DataFrame:
    """Per rule of the reference's cost: this run's wall time and peak memory over the reference's."""
    merged = reference.cost.merge(here, on="rule", how="left", suffixes=("_reference", "_here"))
    return merged.assign(
        wall_ratio=merged["wall_s_here"] / merged["wall_s_reference"],
        peak_ratio=merged["peak_mb_here"] / merged["peak_mb_reference"],
    )


def verdict_counts(found: list[Judgement]) -> Counter:
    return Counter(item.verdict for item in found)


def reproduces(found: list[Judgement]) -> bool:
    return all(item.verdict in PASSING for item in found)


def reproduces_release(found: list[Judgement], methods: pd.DataFrame) -> bool:
    """The verdict ``celldag check`` exits with: every score passes and no method (``method_verdicts``) changed."""
    return reproduces(found) and not (methods["verdict"] == CHANGED).any()


def score_counts(found: list[Judgement]) -> str:
    """``27,366 identical, 0 within numerical tolerance, 0 within seed noise, 0 changed (27,366 scores)``."""
    counts = verdict_counts(found)
    shown = [f"{counts[verdict]:,} {verdict}" for verdict in (IDENTICAL, NUMERICAL, SEED_NOISE, CHANGED)]
    shown += [
        f"{counts[verdict]:,} {verdict}" for verdict in (STATUS_CHANGED, ONLY_REFERENCE, ONLY_HERE) if counts[verdict]
    ]
    return ", ".join(shown) + f" ({plural(len(found), 'score')})"


def summary_line(found: list[Judgement]) -> str:
    """The scores' verdict alone (a held-out rerun's in reference.yaml): whether every score passes, and the counts."""
    head = "reproduces the release" if reproduces(found) else "does not reproduce the release"
    return f"{head}: {score_counts(found)}"
