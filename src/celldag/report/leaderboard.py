"""A configuration's leaderboard.md (results/{name}/) and the blocks index.html renders: per dataset and metric group,
methods × metrics with their rank intervals, the notes under them and the paired differences. The numbers — the
gathered tables, the statistics over seeds and the ranks — are ``celldag.results.leaderboard``'s, re-exported here.

A track whose metric names start with a procedure's (``ROW_PREFIXES``: the annotation track's) shows them without it
(``group_layout``): a section of one procedure as columns under its heading, a group spanning procedures (a new batch)
as a row per run and procedure, at most ``MAX_METRIC_COLUMNS`` metric columns each; the full table of a group whose
metrics do not all fit is index.html's alone, folded under the one shown (``Detail``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from celldag import artifacts, contracts, document
from celldag.document import Block, Heading, Paragraph, Table
from celldag.results import floor_cards, qc
from celldag.results.leaderboard import (
    ANNOTATION_TRACK,
    DEFAULT_ALPHA,
    EFFICIENCY_CLASSIFIER,
    EFFICIENCY_METRICS,
    EFFICIENCY_PROCEDURE,
    LEVEL,
    POWER,
    REPRESENTATION_TRACK,
    RUN_COLUMNS,
    Ranking,
    add_deltas,
    aggregate_tables,
    agreement,
    clipped_runs,
    collect_runs,
    collect_scores,
    held_out_batch_rows,
    higher_is_better,
    interval_text,
    metric_groups,
    metric_is_count,
    paired_difference,
    paired_rows,
    rank_key,
    score_text,
    seeds_to_separate_half,
    t_interval,
    table_ranking,
)
from celldag.results.tolerance import plural
from celldag.tracks import DELTA_PREFIX, Track

__all__ = [  # the model's names, for code that imported them from here
    "RUN_COLUMNS",
    "Detail",
    "add_deltas",
    "aggregate",
    "clipped_runs",
    "collect_runs",
    "collect_scores",
    "leaderboard_blocks",
    "leaderboard_markdown",
    "markdown",
    "metric_groups",
    "metric_heading",
    "metric_is_count",
    "paired_difference",
    "paired_rows",
    "rank_key",
    "score_text",
    "t_interval",
]


@dataclass(frozen=True)
class Detail(Table):
    """A table that index.html folds under the one before it (a <details> element: ``celldag.report.html``) and
    leaderboard.md leaves out (``markdown``): a section's full table, every metric under the name ``scores.parquet``
    gives it, where the table shown holds some of them only."""

    summary: str = ""


def markdown(blocks: Sequence[Block]) -> str:
    """The blocks as Markdown (``celldag.document.markdown``), without the tables only index.html shows (``Detail``)."""
    return document.markdown([block for block in blocks if not isinstance(block, Detail)])


# ------------------------------------------------------------------------------------------ readable tables

# a table's metric columns at most, its procedure column included; its other metrics go to the folded full table
# (``Detail``): with the rank, the run's two labels and its seeds ok, 14 columns at most
MAX_METRIC_COLUMNS = 10
# The prefixes that name a row's procedure in a track's metric names, longest matched first: the annotation track's
# set procedures (annotation.track.PROCEDURES, the headline first) and its classifiers' own rules (RULES) on the
# random split and on the label-free new batch (a row each: "confident", "confident_label_free"). Spelled
# here, not imported: celldag.annotation's figures import the report's, so the report importing celldag.annotation
# would close an import cycle between celldag's children (tests/unit/results/test_readable_tables.py holds them equal).
ROW_PREFIXES: Mapping[str, tuple[str, ...]] = {
    ANNOTATION_TRACK: (
        "kandinsky_augmented",
        "kandinsky_augmented_unrandomised",
        "kandinsky",
        "split_lac",
        "split_aps",
        "class_conditional",
        "class_conditional_pooled",
        "mondrian_batch",
        "label_shift",
        *(
            f"{rule}{scenario}"
            for rule in ("confident", "best_match", "prob_match")
            for scenario in ("", "_label_free")
        ),
    )
}
PROCEDURE = "procedure"  # the column naming a row's procedure, where a table's metrics span several


def split_metric(metric: str, prefixes: Sequence[str]) -> tuple[str, str]:
    """(procedure, column) of a metric: its longest prefix among ``prefixes`` followed by '_', and the rest; ("",
    metric) for a metric of the run as a whole (accuracy)."""
    found = max((prefix for prefix in prefixes if metric.startswith(f"{prefix}_")), key=len, default="")
    return (found, metric[len(found) + 1 :]) if found else ("", metric)


@dataclass(frozen=True)
class Layout:
    """How a metric group's table shows its metrics: a run's own metrics (``run_columns``) as they are named, and
    the metrics of its procedures (``procedures``) under their names without the procedure's prefix (``columns``):
    as the table's columns where the group has one procedure (its section names it), one row per run and procedure
    where it has several. ``hidden``: the group's metrics not shown, beyond ``MAX_METRIC_COLUMNS`` (in the folded
    full table and scores.parquet)."""

    run_columns: tuple[str, ...]
    procedures: tuple[str, ...]
    columns: tuple[str, ...]
    hidden: tuple[str, ...]

    @property
    def per_procedure_rows(self) -> bool:
        return len(self.procedures) > 1

    def metric(self, procedure: str, column: str) -> str:
        return f"{procedure}_{column}" if procedure else column

    @property
    def shown(self) -> tuple[str, ...]:
        """The metrics shown, in the table's order (a run's own, then each procedure's columns)."""
        return (*self.run_columns, *(self.metric(p, column) for p in self.procedures for column in self.columns))


def group_layout(metrics: Sequence[str], prefixes: Sequence[str], headline: Sequence[str] = ()) -> Layout:
    """The layout of a group of ``metrics`` (in the track's order) whose procedures are ``prefixes``: its first
    ``MAX_METRIC_COLUMNS`` metric columns (a run's own and the procedures' columns, as first met); a group of one
    procedure keeps the columns ``headline`` (those the main table shows of the track's headline procedure) where it
    has any, so that every procedure's section shows what the main table does."""
    split = [split_metric(metric, prefixes) for metric in metrics]
    procedures = tuple(dict.fromkeys(procedure for procedure, _ in split if procedure))
    order = list(dict.fromkeys(column if procedure else ("run", column) for procedure, column in split))
    if len(procedures) == 1 and headline and any(column in headline for column in order):
        order = [column for column in order if isinstance(column, tuple) or column in headline]
    kept = order[: MAX_METRIC_COLUMNS - (len(procedures) > 1)]  # a table of several procedures names them in a column
    run_columns = tuple(column[1] for column in kept if isinstance(column, tuple))
    columns = tuple(column for column in kept if not isinstance(column, tuple))
    shown = set(Layout(run_columns, procedures, columns, ()).shown)
    return Layout(run_columns, procedures, columns, tuple(metric for metric in metrics if metric not in shown))


def _cell(values: pd.Series, statuses: pd.Series, count: bool = False) -> str:
    ok = values[statuses == "ok"]
    if ok.empty:
        return ", ".join(sorted(set(statuses)))
    if count:  # a count reads as one: 18, or its mean and range over seeds when they differ
        text = f"{ok.mean():g}" if ok.nunique() == 1 else f"{ok.mean():.1f} ({ok.min():g}–{ok.max():g})"
    else:
        text = f"{score_text(ok.mean())} ± {ok.std(ddof=1):.3f}" if len(ok) > 1 else score_text(ok.iloc[0])
    missing = len(values) - len(ok)
    return text + (f" ({missing} not ok)" if missing else "")


CLIPPED_NOTE = (
    "‡k/n: in k of the n seeds the scoring library clipped the raw value to its bound (scib-metrics sets a "
    "negative pcr_comparison, batch variance explained rising after integration, to 0); the mean includes "
    "the clipped values.",
)
CONTROLS_NOTE = (
    "Controls — a method run without the knowledge under test (random or shuffled gene vectors, "
    "relabelled leaves); not ranked: compare each with the method it controls for.",
)


def leaderboard_blocks(
    scores: pd.DataFrame,
    tracks: dict[str, Track],
    baseline: str | None = None,
    paired: Sequence[dict] = (),
    notes: Sequence[str | Mapping] = (),
    kinds: Mapping[str, str] | None = None,
    runs: pd.DataFrame | None = None,
    alpha: float = DEFAULT_ALPHA,
    cards: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
) -> list[Block]:
    """Per dataset and metric group: methods × metrics, mean ± sd over seeds, best first (rendered as
    Markdown here and as HTML by ``celldag.report.html``: one content, two formats). ``kinds``
    ("method/variant" → method, baseline or control): controls go to a table of their own under the
    ranking, never into it. ``runs`` (``collect_runs``): the methods' notes, under their dataset. The
    representation track's first table also shows each run's held-out-batch efficiency
    (``celldag.results.leaderboard.held_out_batch_rows`` at ``alpha``, the annotation scores' α) and whether its order
    agrees with the table's (``efficiency_notes``). ``cards`` (``celldag.results.floor_cards``): a floor card under each
    section; ``findings`` (``celldag.results.qc``): the quality checks, before the first dataset."""
    kinds = kinds or {}
    efficiency = held_out_batch_rows(scores, alpha)
    blocks: list[Block] = [
        Heading(1, "celldag leaderboard"),
        Paragraph(
            (
                "Mean ± sample sd over seeds (runs with status `ok`). ↓ lower is better, ↑ higher is better.",
                "Per-seed values: `scores.parquet` beside this file; run records: `runs.parquet`.",
            )
        ),
    ]
    shown_notes = notes_for(scores, notes)
    if shown_notes:
        blocks.append(Paragraph(shown_notes, bullets=True))
    paired_sections = {dataset: _paired_blocks(table, paired) for dataset, table in scores.groupby("dataset")}
    if baseline and scores["metric"].str.startswith(DELTA_PREFIX).any():
        blocks.append(
            Paragraph(
                (
                    f"Δ = relative reduction against `{baseline}` on the same dataset and seed: "
                    "(baseline − method) / baseline.",
                )
            )
        )
    if findings is not None:
        blocks += qc_blocks(findings)
    opened = set()
    sections = scores.groupby(["dataset", "track"], sort=True)
    # a dataset's own track first, then the tracks chained on it
    for (dataset, track), table in sorted(
        sections, key=lambda item: (item[0][0], tracks[item[0][1]].upstream is not None)
    ):
        first = dataset not in opened
        opened.add(dataset)
        blocks.append(Heading(2, f"{dataset} ({track})", dataset, track, dataset if first else f"{dataset}-{track}"))
        prefixes, headline = ROW_PREFIXES.get(track, ()), ()
        for index, (group, metrics) in enumerate(metric_groups(table, tracks[track]).items()):
            rows = table[table["metric"].isin(metrics)]
            keys = rows[["method", "variant"]].drop_duplicates()
            control = [
                kinds.get(f"{method}/{variant}") == "control" for method, variant in keys.itertuples(index=False)
            ]
            if index:
                blocks.append(Heading(3, group))
            clipped = clipped_runs(rows, tracks[track])
            ranked_keys = keys[[not c for c in control]]
            ranking = table_ranking(rows, list(ranked_keys.itertuples(index=False, name=None)), metrics[0])
            layout = group_layout(metrics, prefixes, headline) if prefixes else None
            if layout is not None and index == 0 and len(layout.procedures) == 1:
                headline = layout.columns  # every procedure's section shows the columns the main table does
            shown = metrics
            if index == 0 and track == REPRESENTATION_TRACK:  # the held-out-batch columns, after the track's own
                rows = pd.concat([rows, efficiency[efficiency["dataset"] == dataset]], ignore_index=True)
                shown = [*metrics, *EFFICIENCY_METRICS]
            if layout is not None and (layout.procedures or layout.hidden):
                blocks += layout_note(layout, group if index == 0 else "")
                blocks.append(_layout_table(rows, ranked_keys, layout, metrics[0], tracks[track], clipped, ranking))
                if layout.hidden:
                    blocks.append(_detail(_table(rows, ranked_keys, shown, tracks[track], clipped, ranking)))
            else:
                blocks.append(_table(rows, ranked_keys, shown, tracks[track], clipped, ranking))
            blocks += ranks_note(ranking, metrics[0])
            if shown != metrics:
                blocks += efficiency_notes(
                    rows, ranking, list(ranked_keys.itertuples(index=False, name=None)), metrics[0], alpha
                )
            if any(control):
                blocks.append(Paragraph(CONTROLS_NOTE))
                if layout is not None and (layout.procedures or layout.hidden):
                    blocks.append(_layout_table(rows, keys[control], layout, metrics[0], tracks[track], clipped))
                    if layout.hidden:
                        blocks.append(_detail(_table(rows, keys[control], shown, tracks[track], clipped)))
                else:
                    blocks.append(_table(rows, keys[control], shown, tracks[track], clipped))
            if clipped:
                blocks.append(Paragraph(CLIPPED_NOTE))
            if index == 0:  # the notes under the main table, before the sub-sections: they say how to read it
                blocks += (run_notes(runs, dataset) if first else []) + subsample_notes(table) + scoring_notes(table)
        if cards is not None:
            blocks += floor_card_blocks(cards[(cards["dataset"] == dataset) & (cards["track"] == track)], tracks[track])
        if first:  # a dataset's paired differences once, under its first section
            blocks += paired_sections.get(dataset, [])
    return blocks


QC_SHOWN = 20  # findings listed per severity; every one is in qc.parquet


def qc_blocks(findings: pd.DataFrame) -> list[Block]:
    """The quality checks (``celldag.results.qc``): their count per severity, then the errors and warnings listed."""
    counts = findings["severity"].value_counts()
    line = ", ".join(
        f"{counts.get(severity, 0)} {severity}" + ("s" if counts.get(severity, 0) != 1 else "")
        for severity in qc.SEVERITIES
    )
    blocks: list[Block] = [
        Heading(2, "Quality checks"),
        Paragraph(
            (
                f"{line} (`qc.parquet` beside this file lists every finding; docs/report.md says "
                "what each check means). Info: runs not applicable by design.",
            )
        ),
    ]
    for severity in ("error", "warning"):
        shown = findings[findings["severity"] == severity]
        if shown.empty:
            continue
        rows = tuple(
            (
                row.check,
                row.dataset or "–",
                "/".join(part for part in (row.method, row.variant) if part) or "–",
                f"`{row.metric}`" if row.metric else "–",
                row.detail,
            )
            for row in shown.head(QC_SHOWN).itertuples()
        )
        blocks.append(Table((f"{severity}: check", "dataset", "run", "metric", "detail"), rows))
        if len(shown) > QC_SHOWN:
            blocks.append(Paragraph((f"… and {len(shown) - QC_SHOWN} more {severity}s in `qc.parquet`.",)))
    return blocks


FLOOR_NOTE = (
    "Where each metric's floor and ceiling lie on this dataset: its null and oracle controls (named once in "
    "the track's declaration), mean ± sd over seeds; range = oracle − null, positive where the oracle is "
    "better; margin: the reference's seed-noise margin (`floor_cards.parquet` says which). ⚑ flagged: the "
    "range is within the margin, or the null beats the oracle — the metric cannot separate a method from "
    "noise or from nothing here. Scaled scores, (score − null) / (oracle − null) per seed, are the "
    "`scaled_<metric>` rows of `scores.parquet`. The main table's metrics and every flagged one are "
    "shown; every card is in `floor_cards.parquet`."
)


def _mean_sd(mean: float, sd: float) -> str:
    if pd.isna(mean):
        return "not run"
    return score_text(mean) + ("" if pd.isna(sd) else f" ± {sd:.3f}")


def floor_card_blocks(cards: pd.DataFrame, track: Track) -> list[Block]:
    """A section's floor card (``celldag.results.floor_cards``): the main table's controlled metrics and every flagged
    one, the flagged metrics with why, and the main table's guarantees with how many rows meet their target."""
    if cards.empty:
        return []
    main = {metric.name for metric in track.metric_groups[0].metrics}
    judged = cards["null_mean"].notna() & cards["oracle_mean"].notna()
    controlled = cards[judged & (cards["metric"].isin(main) | cards["flagged"])]
    rows = tuple(
        (
            f"`{card.metric}`",
            card.role,
            _mean_sd(card.null_mean, card.null_sd),
            _mean_sd(card.oracle_mean, card.oracle_sd),
            "–" if pd.isna(card.range) else score_text(card.range),
            "–" if pd.isna(card.margin) else f"{card.margin:.3g}",
            "⚑" if card.flagged else "",
        )
        for card in controlled.itertuples()
    )
    null, oracle = (
        cards[column].dropna().iloc[0] if cards[column].notna().any() else "–" for column in ("null", "oracle")
    )
    blocks: list[Block] = [Heading(3, "floor card"), Paragraph((FLOOR_NOTE,))]
    if rows:
        blocks.append(
            Table(("metric", "role", f"null `{null}`", f"oracle `{oracle}`", "range", "margin", "flag"), rows)
        )
    flagged = cards[cards["flagged"]]
    if judged.any():
        listed = "; ".join(f"`{card.metric}` ({card.why})" for card in flagged.itertuples())
        blocks.append(
            Paragraph(
                (
                    f"Flagged: {len(flagged)} of {int(judged.sum())} metrics judged against controls"
                    + (f": {listed}." if listed else "."),
                )
            )
        )
    elif cards["null"].notna().any():
        blocks.append(
            Paragraph(
                (
                    f"Not judged: the null `{null}` and the oracle `{oracle}` have no ok scores here (the "
                    "config's `methods` selects them: docs/report.md).",
                )
            )
        )
    guarantees = cards[cards["target"].notna() & cards["metric"].isin(main)]
    if not guarantees.empty:
        blocks.append(
            Table(
                ("guarantee", "target", "rows meeting it (mean over seeds)"),
                tuple(
                    (f"`{card.metric}`", card.target, f"{card.rows_meeting_target:g} of {card.rows:g}")
                    for card in guarantees.itertuples()
                ),
            )
        )
    return blocks


def subsample_notes(scores: pd.DataFrame) -> list[Block]:
    """Where a dataset's scores come from a subsample of its cells (``contracts.SCORE_FACTS`` columns): its
    size, seed and the dataset seeds it applies to; nothing for datasets scored on every cell."""
    if "scored_cells" not in scores:
        return []
    rows = scores[scores["scored_cells"].notna()]
    lines = []
    for (cells, seed), group in rows.groupby(["scored_cells", "subsample_seed"], sort=True):
        seeds = ", ".join(map(str, sorted(set(group["seed"]))))
        lines.append(
            f"Silhouettes, isolated labels, PCR comparison, Leiden and batch ASW from a stratified subsample "
            f"of {int(cells):,} cells (by label × batch; `evaluation.score_cells` seed {int(seed)} with the "
            f"dataset seed: seeds {seeds}), the same cells for every method of a seed; LISI, kBET, graph "
            "connectivity and k-means NMI/ARI on every cell. Aggregates scored this way stayed within 0.003 "
            "of every cell's at half of 20,000 cells (docs/representation.md)."
        )
    return [Paragraph(tuple(lines))] if lines else []


def scoring_notes(scores: pd.DataFrame) -> list[Block]:
    """The notes the scoring of a section's runs left (``contracts.SCORE_NOTE``): each distinct line with its seeds,
    and each part that lists groups per scenario (``note_parts``) as a table under what it lists
    (``scenario_table``), where a line per seed ran to thousands of characters on a dataset of a few batches."""
    if contracts.SCORE_NOTE not in scores:
        return []
    noted = scores[scores[contracts.SCORE_NOTE].fillna("").ne("")]
    lines: dict[str, set] = {}
    listed: dict[str, list[tuple[int, str, str]]] = {}  # what is listed → (seed, scenario, groups), as first met
    for seed, note in sorted(set(zip(noted["seed"], noted[contracts.SCORE_NOTE]))):
        for part in note_parts(note):
            if isinstance(part, str):
                lines.setdefault(part, set()).add(seed)
            else:
                listed.setdefault(part[0], []).extend((seed, scenario, groups) for scenario, groups in part[1])
    blocks: list[Block] = []
    if lines:
        blocks.append(
            Paragraph(tuple(f"Seeds {_seeds(seeds)}: {line}" for line, seeds in sorted(lines.items())), bullets=True)
        )
    for lead, entries in listed.items():
        blocks += scenario_table(lead, entries)
    return blocks


def scenario_table(lead: str, entries: Sequence[tuple[int, str, str]]) -> list[Block]:
    """What a note lists per scenario, over seeds: where every group carries a number ('name (4.2)': a dropped
    group's weight), a table of the groups by scenario with each seed's number; otherwise a row per scenario and
    distinct groups, with the seeds that list them."""
    words = lead.split()
    title = f"{lead[0].upper()}{lead[1:]}" if words and words[0].isalpha() else lead  # an id keeps its case
    scenarios = list(dict.fromkeys(scenario for _, scenario, _ in entries))
    seeds = sorted({seed for seed, _, _ in entries})
    numbers: dict[tuple[str, int], dict[str, str]] | None = {}
    for seed, scenario, groups in entries:
        items = [NUMBERED_GROUP.fullmatch(item) for item in groups.split(", ")]
        of_seed = {item["name"]: item["number"] for item in items if item}
        if len(of_seed) < len(items) or numbers.get((scenario, seed), of_seed) != of_seed:
            numbers = None
            break
        numbers[scenario, seed] = of_seed
    if numbers is not None:
        names = merged_order([list(of_seed) for of_seed in numbers.values()])

        def cell(name: str, scenario: str) -> str:
            found = [numbers.get((scenario, seed), {}).get(name) for seed in seeds]
            return ", ".join(number or "–" for number in found) if any(found) else ""

        return [
            Paragraph(
                (
                    f"{title}. Each cell gives the group's number in seeds {_seeds(seeds)} in turn (–: not in "
                    "that seed's list):",
                )
            ),
            Table(("group", *scenarios), tuple((name, *(cell(name, s) for s in scenarios)) for name in names)),
        ]
    rows: dict[tuple[str, str], set] = {}
    for seed, scenario, groups in entries:
        rows.setdefault((scenario, groups), set()).add(seed)
    shown = sorted(rows.items(), key=lambda item: (scenarios.index(item[0][0]), sorted(item[1]), item[0][1]))
    return [
        Paragraph((f"{title}:",)),
        Table(
            ("scenario", "seeds", "groups"), tuple((scenario, _seeds(of), groups) for (scenario, groups), of in shown)
        ),
    ]


def merged_order(lists: Sequence[Sequence[str]]) -> list[str]:
    """The names of ``lists`` in one order that keeps each list's own (a seed's list that lacks a group leaves it
    where the others have it); as first met where the lists say nothing or disagree."""
    waiting = list(dict.fromkeys(name for names in lists for name in names))
    before = {name: set() for name in waiting}  # name → the names a list puts right before it
    for names in lists:
        for previous, name in zip(names, names[1:]):
            before[name].add(previous)
    order: list[str] = []
    while waiting:
        ready = next((name for name in waiting if before[name] <= set(order)), waiting[0])
        order.append(ready)
        waiting.remove(ready)
    return order


def _seeds(seeds) -> str:
    return ", ".join(map(str, sorted(seeds)))


NUMBERED_GROUP = re.compile(r"(?P<name>.+) \((?P<number>-?\d+(?:\.\d+)?)\)")


# A note's part that lists groups per scenario, "<what is listed>: <scenario> — <groups> | <scenario> — <groups>"
# (celldag.annotation.scoring.groups_note: the groups too small to calibrate, those dropped from Kandinsky's design);
# a note's parts are joined by ". ". What is listed and a scenario's name hold no ':', '|', '—' or '. ', groups no '|'.
_NAME = r"(?:[^:|—.]|\.(?! ))+?"
SCENARIO_LIST = re.compile(rf"(?P<lead>{_NAME}): (?P<listed>{_NAME} — [^|]+?(?: \| {_NAME} — [^|]+?)*)(?:\. |$)")


def note_parts(note: str) -> list[str | tuple[str, tuple[tuple[str, str], ...]]]:
    """A scoring note's parts in order: (what is listed, ((scenario, groups), …)) for each part that lists groups
    per scenario (``SCENARIO_LIST``), the text between them as it is; a note without such a part is one text."""
    parts: list[str | tuple[str, tuple[tuple[str, str], ...]]] = []
    position = 0
    while position < len(note):
        found = SCENARIO_LIST.match(note, position)
        if found:
            rows = tuple(tuple(entry.split(" — ", 1)) for entry in found["listed"].split(" | "))
            parts.append((found["lead"], rows))  # type: ignore[arg-type]
            position = found.end()
            continue
        end = position
        while True:  # the text runs to the '. ' before the next list, or to the end
            end = note.find(". ", end + 1)
            if end < 0 or SCENARIO_LIST.match(note, end + 2):
                break
        parts.append(note[position:] if end < 0 else note[position:end])
        position = len(note) if end < 0 else end + 2
    return parts


def run_notes(runs: pd.DataFrame | None, dataset: str) -> list[Block]:
    """The notes the dataset's runs left (``collect_runs``), one bullet per run and distinct note, with its seeds."""
    if runs is None or "note" not in runs:
        return []
    noted = runs[(runs["dataset"] == dataset) & runs["note"].fillna("").ne("")]
    lines = tuple(
        f"`{method}/{variant}` (seeds {', '.join(map(str, sorted(group['seed'])))}): {note}"
        for (method, variant, note), group in noted.groupby(["method", "variant", "note"], sort=True)
    )
    return [Paragraph(lines, bullets=True)] if lines else []


def notes_for(scores: pd.DataFrame, notes: Sequence[str | Mapping]) -> tuple[str, ...]:
    """The config's notes that apply: plain ones always, ``{text, methods}`` ones when a method has scores."""
    present = set(scores["method"])
    return tuple(
        note if isinstance(note, str) else note["text"]
        for note in notes
        if isinstance(note, str) or present & set(note["methods"])
    )


def leaderboard_markdown(
    scores: pd.DataFrame,
    tracks: dict[str, Track],
    baseline: str | None = None,
    paired: Sequence[dict] = (),
    notes: Sequence[str] = (),
    kinds: Mapping[str, str] | None = None,
    runs: pd.DataFrame | None = None,
    alpha: float = DEFAULT_ALPHA,
    cards: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
) -> str:
    return markdown(leaderboard_blocks(scores, tracks, baseline, paired, notes, kinds, runs, alpha, cards, findings))


def _paired_blocks(scores: pd.DataFrame, paired: Sequence[dict]) -> list[Block]:
    rows = []
    for row in paired_rows(scores, paired):
        interval = "–" if row["n"] < 2 else f"[{score_text(row['low'])}, {score_text(row['high'])}]"
        rows.append(
            (
                f"{row['method']} − {row['other']}",
                row["metric"],
                score_text(row["mean"]),
                interval,
                str(row["n"]),
                _arrow(scores, row["metric"]),
            )
        )
    if not rows:
        return []
    return [
        Heading(3, "paired differences over seeds"),
        Paragraph(
            (
                "Mean of per-seed differences (first method − second) with a 95 % Student-t interval; an interval",
                "that covers 0 shows no difference at this number of seeds. ↑: higher is better, so a positive",
                "difference favours the first method; ↓: lower is better (e.g. marker_db), so a negative one does.",
            )
        ),
        Table(("comparison", "metric", "mean difference", "95 % interval", "seeds", "better"), tuple(rows)),
    ]


def _arrow(scores: pd.DataFrame, metric: str) -> str:
    """↑ or ↓: the metric's direction, from the scores table's higher_is_better column."""
    return "↑" if higher_is_better(scores, metric) else "↓"


def metric_heading(metric: str, arrow: str, track: Track, name: str = "") -> str:
    """A column's name: the metric (or ``name``, the metric without its procedure's prefix) and its direction, or
    "(count)" for a count, which has none."""
    return f"{name or metric} (count)" if metric_is_count(metric, track) else f"{name or metric} {arrow}"


def _table(
    rows: pd.DataFrame,
    keys: pd.DataFrame,
    metrics: list[str],
    track: Track,
    clipped: Mapping[tuple[str, str, str], tuple[int, int]],
    ranking: Ranking | None = None,
) -> Table:
    """``clipped``: ``clipped_runs`` of ``rows``, marked in their cells. ``ranking`` (``table_ranking`` by the first
    metric): a rank column and the rows by rank interval, then mean; without it (controls) the rows by mean."""
    arrows = {metric: _arrow(rows, metric) for metric in metrics}
    body = []
    for method, variant in keys.itertuples(index=False):
        runs = rows[(rows["method"] == method) & (rows["variant"] == variant)]
        cells = []
        for metric in metrics:
            of_metric = runs[runs["metric"] == metric]
            cell = (
                _cell(of_metric["value"], of_metric["status"], metric_is_count(metric, track))
                if len(of_metric)
                else "–"
            )
            if (method, variant, metric) in clipped:
                cell += " ‡{}/{}".format(*clipped[method, variant, metric])
            cells.append(cell)
        place, rank, seeds_ok = _place(runs, method, variant, metrics[0], arrows[metrics[0]] == "↑", ranking)
        row = (method, variant, *cells, seeds_ok)
        body.append((place, row if ranking is None else (rank, *row)))
    header = (*track.row_labels, *(metric_heading(m, arrows[m], track) for m in metrics), "seeds ok")
    return Table(("rank", *header) if ranking else header, tuple(cells for _, cells in sorted(body)))


def _detail(table: Table) -> Detail:
    """``table`` as the folded full table under the one shown."""
    metrics = len(table.header) - 3 - (table.header[0] == "rank")  # less the run's labels and seeds ok
    return Detail(table.header, table.rows, f"Full table: all {metrics} metrics, as `scores.parquet` names them")


def layout_note(layout: Layout, title: str = "") -> list[Block]:
    """How to read a table laid out by ``layout`` (``group_layout``): where its columns' names come from, the rows per
    procedure, the metrics left to the full table; ``title``: the group's, for the main table, which has no heading."""
    lines = []
    example = layout.procedures[0] if layout.procedures else ""
    if layout.per_procedure_rows:
        own = ", ".join(f"`{column}`" for column in layout.run_columns)
        lines.append(
            f"A row per run and {PROCEDURE}, in the track's order (`{example}` first); the rank"
            + (f", the run's own columns ({own})" if own else "")
            + f" and its seeds ok on its first row. A column `{layout.columns[0]}` of {PROCEDURE} `{example}` is "
            f"`{example}_{layout.columns[0]}` in `scores.parquet`."
        )
    elif layout.procedures:
        which = f"the columns after `{layout.run_columns[-1]}` are" if layout.run_columns else "the columns are"
        text = (
            f"{which} `{example}`'s metrics, its prefix left out of their names (`{layout.columns[0]}` is "
            f"`{example}_{layout.columns[0]}` in `scores.parquet`)."
        )
        lines.append(f"{title[0].upper()}{title[1:]}: {text}" if title else f"{text[0].upper()}{text[1:]}")
    if layout.hidden:
        lines.append(
            "Not shown here (index.html folds the full table under this one; every seed's value in "
            f"`scores.parquet`): {', '.join(f'`{metric}`' for metric in layout.hidden)}."
        )
    return [Paragraph(tuple(lines))] if lines else []


def _layout_table(
    rows: pd.DataFrame,
    keys: pd.DataFrame,
    layout: Layout,
    first_metric: str,
    track: Track,
    clipped: Mapping[tuple[str, str, str], tuple[int, int]],
    ranking: Ranking | None = None,
) -> Table:
    """A group's table as ``layout`` shows it: the cells, ranks and order of runs of ``_table`` (by ``first_metric``,
    the group's first), the procedure's prefix left out of the column names; where the group spans procedures, a row
    per run and procedure (in the track's order: the headline first), the rank, the run's own cells and its seeds ok
    on its first row; a run without an ok value in the group on one row of the statuses (procedure "–")."""
    single = layout.procedures[0] if len(layout.procedures) == 1 else ""
    procedures = layout.procedures if layout.per_procedure_rows else (single,)
    higher = _arrow(rows, first_metric) == "↑"

    def cell(runs: pd.DataFrame, metrics: Sequence[str]) -> str:
        """Mean ± sd over seeds of ``metrics``' rows (one metric, or a column's over procedures for the statuses)."""
        of_metrics = runs[runs["metric"].isin(metrics)]
        if of_metrics.empty:
            return "–"
        text = _cell(of_metrics["value"], of_metrics["status"], metric_is_count(metrics[0], track))
        method, variant = runs["method"].iloc[0], runs["variant"].iloc[0]
        marks = [clipped[method, variant, metric] for metric in metrics if (method, variant, metric) in clipped]
        return text + "".join(" ‡{}/{}".format(*mark) for mark in marks)

    body = []
    for method, variant in keys.itertuples(index=False):
        runs = rows[(rows["method"] == method) & (rows["variant"] == variant)]
        place, rank, seeds_ok = _place(runs, method, variant, first_metric, higher, ranking)
        own = tuple(cell(runs, [column]) for column in layout.run_columns)
        scored = set(runs["metric"])
        present = [p for p in procedures if any(layout.metric(p, c) in scored for c in layout.columns)]
        if layout.per_procedure_rows and not (runs["metric"].isin(layout.shown) & (runs["status"] == "ok")).any():
            lines = [("–", tuple(cell(runs, [layout.metric(p, c) for p in procedures]) for c in layout.columns))]
        else:
            lines = [(p, tuple(cell(runs, [layout.metric(p, c)]) for c in layout.columns)) for p in present or [single]]
        for line, (procedure, cells) in enumerate(lines):
            head = () if ranking is None else ("" if line else rank,)
            run_cells = tuple("" for _ in own) if line else own
            named = (procedure,) if layout.per_procedure_rows else ()
            body.append(((place, line), (*head, method, variant, *run_cells, *named, *cells, "" if line else seeds_ok)))
    arrows = dict(zip(rows["metric"], rows["higher_is_better"], strict=True))

    def heading(column: str, procedures: Sequence[str]) -> str:
        metric = next((m for m in (layout.metric(p, column) for p in procedures) if m in arrows), column)
        return metric_heading(metric, "↑" if arrows.get(metric, True) else "↓", track, column)

    header = (
        *track.row_labels,
        *(heading(column, [""]) for column in layout.run_columns),
        *((PROCEDURE,) if layout.per_procedure_rows else ()),
        *(heading(column, procedures) for column in layout.columns),
        "seeds ok",
    )
    return Table(("rank", *header) if ranking else header, tuple(cells for _, cells in sorted(body)))


def _place(
    runs: pd.DataFrame, method: str, variant: str, first_metric: str, higher: bool, ranking: Ranking | None
) -> tuple[tuple, str, str]:
    """A run's place in its table (``ranking``'s interval, unranked last, then by mean of ``first_metric``: without
    a ranking by mean alone), its rank's text and its seeds ok ("2/3")."""
    first = runs[runs["metric"] == first_metric]
    mean = first.loc[first["status"] == "ok", "value"].mean()
    # a run whose one procedure failed (rows 'failed') is still an ok run: ok when any of its rows is
    seeds = runs.groupby("seed")["status"].agg(lambda statuses: "ok" if (statuses == "ok").any() else statuses.iloc[0])
    seeds_ok = f"{(seeds == 'ok').sum()}/{len(seeds)}"
    by_mean = rank_key(mean, higher, method, variant)
    if ranking is None:
        return by_mean, "", seeds_ok
    interval = ranking.intervals.get((method, variant))
    if interval is None:  # unranked (< 2 ok seeds) last
        return (1, (0, 0), by_mean), "–", seeds_ok
    return (0, interval, by_mean), interval_text(interval), seeds_ok


def ranks_note(ranking: Ranking, metric: str) -> list[Block]:
    """How to read a table's rank column: what decided it, how many pairs the seeds separate, the tie with the best;
    nothing for a table of one ranked row and no unranked one."""
    ranked, pairs = len(ranking.intervals), len(ranking.pairs)
    lines = []
    if pairs:
        lines.append(
            f"Rank: the ranks compatible with paired t tests of {metric} over the seeds ok for both methods, "
            f"Holm over the table's {pairs} pairs (simultaneous 95 %; celldag.results.leaderboard): "
            f"{ranking.separable} of {pairs} pairs separable."
        )
    if pairs and not ranking.separable:
        lines.append(f"The seeds order none of these {ranked} methods: every rank is 1–{ranked}, the rows are by mean.")
    elif pairs:
        shared = sum(low != high for low, high in ranking.intervals.values())
        if len(ranking.tied_with_best) > 1:
            tied = ", ".join(f"`{method}/{variant}`" for method, variant in sorted(ranking.tied_with_best))
            lines.append(f"Not separable from the best: {tied}.")
        if shared:
            lines.append(
                f"{shared} of {ranked} methods share ranks (an interval like 2–5): the seeds cannot order "
                "them, read their order by mean as a tie."
            )
    if pairs and ranking.separable < pairs:
        lines.append(seeds_guide(ranking))
    if ranking.unranked:
        lines.append(f"Unranked (fewer than two ok seeds): {', '.join(f'`{m}/{v}`' for m, v in ranking.unranked)}.")
    return [Paragraph(tuple(lines))] if lines else []


MOST_SEEDS = 10_000  # beyond it the guide says "more than": no lab runs that many, and the sds of a few seeds are rough


def seeds_guide(ranking: Ranking) -> str:
    """The rough guide to the seeds that would separate half of a table's pairs
    (``celldag.results.leaderboard.seeds_to_separate_half``), as the rank note says it."""
    pairs, seeds = len(ranking.pairs), seeds_to_separate_half(ranking)
    level, power, half = f"{LEVEL * 100:g} %", f"{POWER * 100:g} %", math.ceil(pairs / 2)
    if pairs == 1:
        which, test = "the pair", f"a paired t test at {level}"
    else:
        which = f"half of the {pairs} pairs, the {half} farthest apart for their sd"
        test = f"each pair's paired t test at its Holm step's level, {level}/{pairs} for the farthest apart"
    if math.isinf(seeds):
        which, many = ("the pair", "its") if pairs == 1 else (f"half of the {pairs} pairs", f"at least {half} pairs'")
        return (
            f"Seeds to separate: more seeds would not separate {which}: {many} per-seed differences have no spread, "
            "a mean of 0 or fewer than two seeds in common."
        )
    truth = "its mean difference and sd" if pairs == 1 else "their mean differences and sds"
    guide = f"(rough guide: {test}, with {power} power, {truth} over these seeds taken as the truth)"
    if seeds > MOST_SEEDS:
        return f"Seeds to separate: more than {MOST_SEEDS:,} seeds would separate {which} {guide}."
    return f"Seeds to separate: about {seeds:.0f} seeds would separate {which} {guide}."


def efficiency_notes(
    rows: pd.DataFrame, ranking: Ranking, keys: Sequence[tuple[str, str]], metric: str, alpha: float
) -> list[Block]:
    """What the held-out-batch columns of a representation table are, and whether their orders agree with the
    table's own (``ranking``, by ``metric``: scIB's ``total``), stated on tie groups
    (``celldag.results.leaderboard.agreement``
    of the two rankings, each by paired t tests with Holm as the rank column), never as one ordering."""
    lines = [
        f"Held-out-batch columns (from the annotation scores; no scores of their own): the `{EFFICIENCY_CLASSIFIER}` "
        f"classifier on the run's embedding in the annotation track's new-batch scenario (each batch left out in "
        f"turn), sets by Kandinsky's augmented fit (`{EFFICIENCY_PROCEDURE}`, the track's headline). Shortfall = "
        f"max(0, 1 − α − the worst left-out batch's coverage), α = {alpha:g} (0: every batch covered at 1 − α); "
        f"set size: the mean over the new batches' cells. Lower is better for both; mean ± sd over seeds. "
        f"`not_applicable`: no chained annotation on this dataset (a dataset of one batch has none) or no "
        f"`{EFFICIENCY_CLASSIFIER}` run on the embedding."
    ]
    for column in EFFICIENCY_METRICS:
        other = table_ranking(rows, keys, column)
        found = agreement(ranking, other)
        if not found.pairs:
            continue
        name = column.removeprefix("held-out-batch ").split(" (")[0]  # shortfall, set size
        both = found.same + len(found.opposite)
        if not both:
            verdict = "no pair is separated by both, so the seeds cannot say whether the orders agree"
        elif found.opposite:
            listed = "; ".join(
                f"`{a[0]}/{a[1]}` ahead by {metric}, `{b[0]}/{b[1]}` by the {name}" for a, b in found.opposite
            )
            verdict = f"they disagree on {len(found.opposite)} of the {plural(both, 'pair')} both separate ({listed})"
        else:
            verdict = f"they agree on {'the' if both == 1 else 'all'} {plural(both, 'pair')} both separate"
        tied = (
            f"all {len(other.intervals)} ranked rows"
            if len(other.tied_with_best) == len(other.intervals)
            else ", ".join(f"`{method}/{variant}`" for method, variant in sorted(other.tied_with_best))
        )
        lines.append(
            f"{name[0].upper()}{name[1:]} against {metric}, pair by pair ({plural(found.pairs, 'pair')} both "
            f"rank): {metric} separates {found.first}, the {name} {found.second}; {verdict}. Not separable from the "
            f"best by the {name}: {tied}."
        )
    return [Paragraph(tuple(lines))]


def aggregate(
    *,
    score_paths: Sequence[str],
    record_paths: Sequence[str],
    scores_path: str,
    runs_path: str,
    leaderboard_path: str,
    baseline: str,
    tracks: dict[str, Track],
    paired: Sequence[dict] = (),
    notes: Sequence[str] = (),
    kinds: Mapping[str, str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    floor_cards_path: str | None = None,
    noise_path: str | None = None,
    qc_path: str | None = None,
    cost_path: str | None = None,
    missing: Mapping[str, Mapping[str, list[str]]] | None = None,
    recorded: Mapping[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """scores.parquet and runs.parquet (``celldag.results.leaderboard.aggregate_tables``), floor_cards.parquet
    (``celldag.results.floor_cards``, against the reference's noise at ``noise_path``), qc.parquet
    (``celldag.results.qc``: runs against the reference's cost at ``cost_path``, ``missing`` citation fields), then
    leaderboard.md from them. ``alpha``: the annotation scores'
    (``celldag.annotation.scoring.options(evaluation)["alpha"]``). ``recorded`` (``celldag audit``): the floor cards and
    quality checks written before, whose reference margins and cost findings
    are taken as read then (the reference may have been remade since) instead of from the two paths."""
    recorded = recorded or {}
    scores, runs = aggregate_tables(score_paths, record_paths, scores_path, runs_path, baseline, tracks)
    cards = floor_cards.floor_cards(
        scores, tracks, floor_cards.read_noise(noise_path), alpha, recorded.get("floor_cards")
    )
    flagged = set(zip(cards.loc[cards["flagged"], "dataset"], cards.loc[cards["flagged"], "metric"]))
    findings = qc.qc_table(scores, runs, missing or {}, qc.read_cost(cost_path), recorded.get("qc"), flagged)
    for table, path in ((cards, floor_cards_path), (findings, qc_path)):
        if path is not None:
            artifacts.write_parquet(table, path)
    with artifacts.atomic_path(leaderboard_path) as tmp:
        tmp.write_text(
            leaderboard_markdown(scores, tracks, baseline, paired, notes, kinds, runs, alpha, cards, findings)
        )
    return scores
