"""The papers' published numbers, and whether celldag's scores reproduce them (docs/published.md).

``config/published/<paper>.yaml`` (schema ``published.schema.yaml``) holds a paper's tables as it prints
them — provenance once per table, rows (its methods) × columns (its metrics), each value with its spread —
and a mapping of the paper's dataset, methods, metrics and row settings to celldag ids, with
``comparable: false`` and a reason where a definition differs. ``load_published`` reads every file of a
folder and checks it against the schema and the registries (ids, tracks, directions): one line naming
the file and the field per problem.

``verdicts`` holds each number against the config's scores: celldag's mean over seeds with a 95 %
Student-t interval, celldag − published, and one of ``VERDICTS``. ``celldag compare --published``
(``cli.compare_published``) writes (every number of every table, in published.md and published.html); the report's
index page shows the tables of the config's datasets (``report_blocks``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from celldag import plan as planning
from celldag.document import Block, Heading, Paragraph, Table
from celldag.errors import InputError
from celldag.registry import Registries, apply_schema, read_yaml
from celldag.results.leaderboard import score_text, t_interval
from celldag.tracks import DELTA_PREFIX, Track

DEFAULT_FOLDER = "config/published"
FIGURE_APPROX = "figure-approx"  # a table read off a figure: its `precision` holds on a value and on a spread

INSIDE_SPREAD = "inside the published spread"  # |celldag − published| ≤ the published spread
INSIDE_INTERVAL = "inside celldag's interval"  # the published value lies in celldag's 95 % interval
NEITHER = "neither"
NOT_COMPARABLE = "not comparable"  # the mapping says why: no celldag counterpart, or another definition
NOT_COMPUTED = "not computed"  # comparable, but these results hold no ok score for it
VERDICTS = (INSIDE_SPREAD, INSIDE_INTERVAL, NEITHER, NOT_COMPARABLE, NOT_COMPUTED)


@dataclass(frozen=True)
class Link:
    """A paper's name → a celldag id (None: celldag has none), and whether the numbers under it compare."""

    celldag: str | None
    comparable: bool = True
    reason: str = ""  # why celldag has none, or why it does not compare
    note: str = ""  # a remark where it compares
    baseline: str | None = None  # a Δ metric: the celldag method the paper's Δ is against

    @property
    def why_not(self) -> str:
        return "" if self.comparable else self.reason


@dataclass(frozen=True)
class Number:
    """One published number (a cell of a table) with the celldag run, metric and setting it maps to."""

    method: str  # the row's method, as the paper names it
    setting: str  # the row's setting (the table's, unless the row names its own)
    metric: str  # the column, as the paper names it
    value: float
    spread: float | None  # the paper's ±; None where it gives none
    higher_is_better: bool
    run: Link  # → "method/variant"
    score: Link  # → a metric of the dataset's track
    in_setting: Link | None = None  # the row setting's mapping, for tables whose rows name settings


@dataclass(frozen=True)
class PublishedTable:
    file: str
    paper: str
    citation: str
    url: str
    table: str  # as the paper labels it ("Table 1")
    source: str
    dataset: str  # as the paper names it
    setting: str
    reading: str  # exact | figure-approx
    precision: float | None  # figure-approx: ± on a value and on a spread
    spread_kind: str | None
    n_runs: str | None
    offline_reproducible: bool
    notes: tuple[str, ...]
    dataset_link: Link  # → a celldag dataset id
    mapping_note: str
    numbers: tuple[Number, ...]

    @property
    def dataset_id(self) -> str | None:
        return self.dataset_link.celldag

    def tolerance(self, number: Number) -> float | None:
        """The spread a celldag mean must keep within: the paper's ±, widened for a figure reading by its
        precision on the value and on the ± (a reading without a ± gets the precision alone)."""
        if self.reading != FIGURE_APPROX:
            return number.spread
        return (number.spread or 0.0) + self.precision * (1 if number.spread is None else 2)


# ---------------------------------------------------------------------------------------------- loading


def published_files(folder: str | Path) -> list[str]:
    """The paper files of a folder (none where it does not exist)."""
    return sorted(str(path) for path in Path(folder).glob("*.yaml"))


def load_published(folder: str | Path, registries: Registries) -> tuple[PublishedTable, ...]:
    """Every table of every file of ``folder``, checked against the schema and the registries."""
    tables, defined = [], {}
    for path in published_files(folder):
        data = apply_schema(read_yaml(path), "published", path)
        for label, entry in data["tables"].items():
            key = (data["paper"], label)
            if key in defined:
                raise InputError(
                    f"{path}: tables.{label}: {data['paper']} {label} is defined twice, in {defined[key]} and here"
                )
            defined[key] = path
            tables.append(read_table(path, data, label, entry, registries))
    return tuple(tables)


def link(entry: dict) -> Link:
    """A mapping's entry; where it names no celldag id (null), its numbers do not compare. A row setting's
    entry has no id: it compares as it says."""
    comparable = entry.get("comparable", True) and entry.get("celldag", "") is not None
    return Link(entry.get("celldag"), comparable, entry.get("reason", ""), entry.get("note", ""), entry.get("baseline"))


def read_table(path: str, data: dict, label: str, entry: dict, registries: Registries) -> PublishedTable:
    where, mapping, columns = f"{path}: tables.{label}", entry["mapping"], entry["columns"]
    check_names(f"{where}.mapping.methods", mapping["methods"], [row["method"] for row in entry["rows"]], "method")
    check_names(f"{where}.mapping.metrics", mapping["metrics"], list(columns), "column")
    row_settings = [row["setting"] for row in entry["rows"] if "setting" in row]
    check_names(f"{where}.mapping.settings", mapping.get("settings", {}), row_settings, "row setting")
    dataset = link(mapping["dataset"])
    track = check_dataset(f"{where}.mapping.dataset", dataset.celldag, registries)
    runs = {method: link(value) for method, value in mapping["methods"].items()}
    scores = {column: link(value) for column, value in mapping["metrics"].items()}
    settings = {setting: link(value) for setting, value in mapping.get("settings", {}).items()}
    for method, run in runs.items():
        check_run(f"{where}.mapping.methods.{method}", run.celldag, track, registries)
    for column, score in scores.items():
        check_metric(
            f"{where}.mapping.metrics.{column}", score, columns[column] == "higher_is_better", track, registries
        )
    numbers, seen = [], set()
    for index, row in enumerate(entry["rows"]):
        key = (row["method"], row.get("setting"))
        if key in seen:
            raise InputError(f"{where}.rows.{index}: {' · '.join(filter(None, key))} has a row already")
        seen.add(key)
        for column, cell in row["values"].items():
            if column not in columns:
                raise InputError(
                    f"{where}.rows.{index}.values.{column}: not a column of the table (columns: {', '.join(columns)})"
                )
            value, spread = (cell["value"], cell["spread"]) if isinstance(cell, dict) else (cell, None)
            numbers.append(
                Number(
                    method=row["method"],
                    setting=row.get("setting", entry["setting"]),
                    metric=column,
                    value=float(value),
                    spread=None if spread is None else float(spread),
                    higher_is_better=columns[column] == "higher_is_better",
                    run=runs[row["method"]],
                    score=scores[column],
                    in_setting=settings.get(row.get("setting")),
                )
            )
    return PublishedTable(
        file=path,
        paper=data["paper"],
        citation=data["citation"],
        url=data["url"],
        table=label,
        source=entry["source"],
        dataset=entry["dataset"],
        setting=entry["setting"],
        reading=entry["reading"],
        precision=entry.get("precision"),
        spread_kind=entry["spread_kind"],
        n_runs=entry["n_runs"],
        offline_reproducible=entry["offline_reproducible"],
        notes=tuple(entry["notes"]),
        dataset_link=dataset,
        mapping_note=mapping.get("note", ""),
        numbers=tuple(numbers),
    )


def check_names(where: str, mapped: dict, names: list[str], what: str) -> None:
    """The mapping lists each of the table's names once, and nothing else (a typo is caught, not skipped)."""
    missing = [name for name in dict.fromkeys(names) if name not in mapped]
    if missing:
        raise InputError(
            f"{where}: no mapping for the {what} {missing[0]!r} (give celldag: null and a reason where "
            "celldag has none)"
        )
    extra = sorted(set(mapped) - set(names))
    if extra:
        raise InputError(f"{where}.{extra[0]}: no {what} of the table is called {extra[0]!r}")


def check_dataset(where: str, dataset: str | None, registries: Registries) -> str | None:
    """A mapped dataset exists; its track (None where the table maps to no dataset)."""
    if dataset is None:
        return None
    if dataset not in registries.datasets:
        raise InputError(f"{where}: unknown dataset id {dataset!r}; known: {', '.join(sorted(registries.datasets))}")
    return registries.datasets[dataset]["track"]


def check_run(where: str, selector: str | None, track: str | None, registries: Registries) -> None:
    """A mapped run is a method/variant of the registry, on the dataset's track."""
    if selector is None:
        return
    method, _, variant = selector.partition("/")
    if method not in registries.methods:
        raise InputError(f"{where}: unknown method id {method!r}; known: {', '.join(sorted(registries.methods))}")
    variants = registries.methods[method]["variants"]
    if variant not in variants:
        raise InputError(
            f"{where}: {selector!r}: name a variant of {method} as method/variant; known variants: "
            f"{', '.join(sorted(variants))}"
        )
    if track is not None and registries.methods[method]["track"] != track:
        own = registries.methods[method]["track"]
        raise InputError(f"{where}: {method} is a {own} method, the dataset a {track} one")


def check_metric(where: str, score: Link, higher_is_better: bool, track: str | None, registries: Registries) -> None:
    """A mapped metric is one its track declares (or its Δ, which then names the paper's baseline), in the
    column's direction; where the table maps to no dataset, one of any track."""
    if score.celldag is None:
        return
    tracks = {track: registries.track(track)} if track else {name: registries.track(name) for name in registries.tracks}
    owners = [definition for definition in tracks.values() if declares(definition, score.celldag)]
    if not owners:
        raise InputError(
            f"{where}: unknown metric {score.celldag!r} of the {' or '.join(tracks)} track "
            "(docs/metrics.md; a Δ is delta_<metric> of a metric with a Δ)"
        )
    if owners[0].higher_is_better(score.celldag) != higher_is_better:
        raise InputError(
            f"{where}: {score.celldag} is {direction(not higher_is_better)}, the column {direction(higher_is_better)}"
        )
    is_delta = score.celldag.startswith(DELTA_PREFIX)
    if is_delta and score.baseline is None:
        raise InputError(f"{where}: {score.celldag} is a Δ: name the method the paper's Δ is against (baseline)")
    if not is_delta and score.baseline is not None:
        raise InputError(f"{where}.baseline: only a Δ metric (delta_…) has a baseline")
    if is_delta and score.baseline not in registries.methods:
        raise InputError(f"{where}.baseline: unknown method id {score.baseline!r}")


def declares(track: Track, metric: str) -> bool:
    base = metric.removeprefix(DELTA_PREFIX)
    return metric in track.metrics or (metric != base and base in track.metrics and track.metrics[base].delta)


def direction(higher_is_better: bool) -> str:
    return "higher_is_better" if higher_is_better else "lower_is_better"


# ---------------------------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Context:
    """What verdicts read of a run config besides its scores (tuples: a rule's params compare by repr)."""

    datasets: tuple[str, ...]
    runs: tuple[str, ...]  # "dataset method/variant" of every run the config plans
    delta_baseline: str
    missing: tuple[tuple[str, str], ...] = ()  # (dataset, a file of it not downloaded)
    # (shipped id, the config's dataset standing for it, what differs): a lab's copy (stands_for in its entry)
    stand_ins: tuple[tuple[str, str, str], ...] = ()

    def scored_as(self, dataset: str | None) -> tuple[str | None, str]:
        """The config's dataset whose scores a table of ``dataset`` is held against — itself, else a lab's copy
        standing for it — and, for a copy, the line saying so; None where the config has neither."""
        if dataset in self.datasets:
            return dataset, ""
        for shipped, copy, differs in self.stand_ins:
            if shipped == dataset:
                return copy, f"on {copy}, a lab's copy of {shipped}: {differs}"
        return None, ""


def context_of(config: dict, plan: planning.Plan, registries: Registries, check_downloads: bool = True) -> Context:
    stand_ins: dict[str, tuple[str, str]] = {}
    for dataset in config["datasets"]:
        declared = registries.datasets[dataset].get("stands_for")
        if declared is None:
            continue
        if declared["dataset"] in stand_ins:
            raise InputError(
                f"datasets {stand_ins[declared['dataset']][0]} and {dataset} of the config both stand for "
                f"{declared['dataset']}: its published tables can be held against one of them only"
            )
        stand_ins[declared["dataset"]] = (dataset, declared["differs"])
    missing = []
    for dataset in config["datasets"] if check_downloads else ():
        entry = registries.datasets[dataset]
        files = [path for path in planning.dataset_files(dataset, entry).values() if not Path(path).is_file()]
        if entry["source"] == "url" and files:
            missing.append((dataset, files[0]))
    runs = sorted({f"{run.dataset} {run.method}/{run.variant}" for run in plan.runs})
    return Context(
        tuple(config["datasets"]),
        tuple(runs),
        config["evaluation"]["delta_baseline"],
        tuple(missing),
        tuple((shipped, copy, differs) for shipped, (copy, differs) in stand_ins.items()),
    )


@dataclass(frozen=True)
class Verdict:
    table: PublishedTable
    number: Number
    verdict: str  # one of VERDICTS
    why: str = ""  # for not comparable and not computed
    mean: float = math.nan  # celldag's, over the seeds' ok values
    low: float = math.nan  # its 95 % Student-t interval (NaN for one seed)
    high: float = math.nan
    n: int = 0  # seeds
    stand_in: str = ""  # held against a lab's copy of the dataset: which, and what differs (Context.scored_as)

    @property
    def text(self) -> str:
        text = f"{self.verdict} ({self.why})" if self.why else self.verdict
        return f"{text}; {self.stand_in}" if self.stand_in else text


def verdicts(tables: Sequence[PublishedTable], scores: pd.DataFrame, context: Context) -> list[Verdict]:
    return [judge(table, number, scores, context) for table in tables for number in table.numbers]


def incomparable(table: PublishedTable, number: Number, context: Context) -> str:
    """Why a number does not compare with celldag's ('' where it does)."""
    for mapped in (table.dataset_link, number.run, number.score, number.in_setting):
        if mapped is not None and mapped.why_not:
            return mapped.why_not
    baseline = number.score.baseline
    if baseline is not None and baseline != context.delta_baseline:
        return f"Δ against {context.delta_baseline} here (evaluation.delta_baseline), against {baseline} in the paper"
    return ""


def judge(table: PublishedTable, number: Number, scores: pd.DataFrame, context: Context) -> Verdict:
    why = incomparable(table, number, context)
    if why:
        return Verdict(table, number, NOT_COMPARABLE, why)
    run, metric = number.run.celldag, number.score.celldag
    dataset, stand_in = context.scored_as(table.dataset_id)
    if dataset is None:
        return Verdict(table, number, NOT_COMPUTED, "dataset not in this config")
    if f"{dataset} {run}" not in context.runs:
        return Verdict(table, number, NOT_COMPUTED, f"{run} is not run by this config", stand_in=stand_in)
    method, _, variant = run.partition("/")
    of_run = scores[(scores["dataset"] == dataset) & (scores["method"] == method) & (scores["variant"] == variant)]
    rows = of_run[of_run["metric"] == metric]
    ok = rows.loc[rows["status"] == "ok", "value"]
    if ok.empty:
        if of_run.empty:
            missing = dict(context.missing).get(dataset)
            why = f"not downloaded: {missing}" if missing else "no scores of it in these results"
        elif rows.empty:
            why = f"its runs have no {metric} score"
        else:
            why = "no ok runs: " + ", ".join(f"{n} {status}" for status, n in sorted(Counter(rows["status"]).items()))
        return Verdict(table, number, NOT_COMPUTED, why, stand_in=stand_in)
    interval = t_interval(ok)
    delta, tolerance = interval["mean"] - number.value, table.tolerance(number)
    if tolerance is not None and (abs(delta) <= tolerance or math.isclose(abs(delta), tolerance)):
        verdict = INSIDE_SPREAD
    elif interval["low"] <= number.value <= interval["high"]:
        verdict = INSIDE_INTERVAL
    else:
        verdict = NEITHER
    return Verdict(table, number, verdict, **interval, stand_in=stand_in)


# ---------------------------------------------------------------------------------------------- rendering


def published_cell(number: Number) -> str:
    return f"{number.value:g}" + ("" if number.spread is None else f" ± {number.spread:g}")


def celldag_cell(found: Verdict) -> str:
    if found.n == 0:
        return "–"
    if found.n == 1:
        return f"{score_text(found.mean)} (1 seed: no interval)"
    return f"{score_text(found.mean)} [{score_text(found.low)}, {score_text(found.high)}] ({found.n} seeds)"


def provenance(table: PublishedTable) -> Paragraph:
    """The table's provenance, one bullet each, then its notes and the mapping's remarks."""
    dataset = table.dataset_link
    mapped = f"celldag `{dataset.celldag}`" if dataset.celldag else "no celldag dataset"
    remark = dataset.why_not or dataset.note
    if table.reading == FIGURE_APPROX:
        reading = (
            f"read off a figure, ±{table.precision:g} on each value and each spread: the published spread is "
            f"widened by {2 * table.precision:g} (by {table.precision:g} where there is none)"
        )
    else:
        reading = "copied from the text"
    spread = f"± = {table.spread_kind}" if table.spread_kind else "no spread given"
    named = {(number.method, number.run) for number in table.numbers} | {(n.metric, n.score) for n in table.numbers}
    remarks = sorted(f"{name} → `{mapped.celldag}`: {mapped.note}" for name, mapped in named if mapped.note)
    return Paragraph(
        (
            f"Paper: {table.citation} {table.url}",
            f"Source: {table.source}; {reading} (`{Path(table.file).name}`)",
            f"Dataset: {table.dataset} → {mapped}" + (f": {remark}" if remark else ""),
            f"Setting: {table.setting}; {spread}; runs: {table.n_runs or 'not stated'}",
            *table.notes,
            *filter(None, [table.mapping_note]),
            *remarks,
        ),
        bullets=True,
    )


def table_blocks(found: Sequence[Verdict], level: int) -> list[Block]:
    """Per (paper, table): its provenance and a row per number, in the table's order."""
    blocks: list[Block] = []
    for table in dict.fromkeys(verdict.table for verdict in found):
        of_table = [verdict for verdict in found if verdict.table is table]
        settings = any(verdict.number.in_setting is not None for verdict in of_table)
        rows = []
        for verdict in of_table:
            number = verdict.number
            mapped = f"{number.run.celldag or '–'} · {number.score.celldag or '–'}"
            delta = f"{verdict.mean - number.value:+.3f}" if verdict.n else "–"
            metric = f"{number.metric} {'↑' if number.higher_is_better else '↓'}"
            rows.append(
                (
                    number.method,
                    *([number.setting] if settings else []),
                    metric,
                    published_cell(number),
                    mapped,
                    celldag_cell(verdict),
                    delta,
                    verdict.text,
                )
            )
        header = (
            "paper's method",
            *(("setting",) if settings else ()),
            "metric",
            "published",
            "celldag run · metric",
            "celldag mean [95 % interval]",
            "Δ celldag − published",
            "verdict",
        )
        blocks += [Heading(level, f"{table.paper} {table.table}"), provenance(table), Table(header, tuple(rows))]
    return blocks


EXPLANATION = (
    "Each published number against celldag's mean over seeds (ok runs) with its 95 % Student-t interval; Δ = celldag "
    "− published. Verdicts: inside the published spread (|Δ| ≤ the paper's ±), inside celldag's interval, neither; "
    "not comparable (the mapping says why: no celldag counterpart, or another definition); not computed (why). "
    "Tables and mappings: config/published/ (docs/published.md).",
)


def summary(found: Sequence[Verdict]) -> list[str]:
    """Counts per verdict, and per reason of the numbers not computed."""
    counts = Counter(verdict.verdict for verdict in found)
    lines = [f"{len(found)} published numbers: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS)]
    missing = Counter(verdict.why for verdict in found if verdict.verdict == NOT_COMPUTED)
    lines += [f"not computed, {why}: {count}" for why, count in missing.most_common()]
    lines += [f"held {stand_in}" for stand_in in dict.fromkeys(verdict.stand_in for verdict in found) if stand_in]
    return lines


def section(title: str, found: Sequence[Verdict], level: int, anchor: str = "") -> list[Block]:
    return [
        Heading(level, title, anchor=anchor),
        Paragraph(EXPLANATION),
        Paragraph(tuple(summary(found)), bullets=True),
        *table_blocks(found, level + 1),
    ]


def report_blocks(tables: Sequence[PublishedTable], scores: pd.DataFrame, context: Context) -> list[Block]:
    """The index page's section: the tables of the config's datasets, every number of them."""
    shown = [table for table in tables if context.scored_as(table.dataset_id)[0] is not None]
    return section("published vs reproduced", verdicts(shown, scores, context), 2, "published") if shown else []
