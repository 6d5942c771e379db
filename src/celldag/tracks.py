"""Tracks: one kind of benchmark task (lineage reconstruction, cell representation, …), declared in one place.

A track is a ``Track`` object named in ``config/tracks.yaml`` by its entry point (``package.module:NAME``).
It declares its prepared-data contract, the input its methods receive, the optional inputs a dataset
may lack, its scorer, its metrics (grouped as the leaderboard shows them, each with its direction and
whether it gets a Δ), the facts ``celldag validate`` reports and the figures of the report. Generic
code — preparation, the runner, scoring, validation, the leaderboard and the rules — looks a track
up by name and calls what it declares; nothing outside a track's own package knows what it holds.

The functions are entry points too, loaded on first use: a track module imports nothing heavy, so the
workflow can read every track when it parses, and each job imports only the functions it calls.

    config/tracks.yaml ── lineage: {definition: celldag.lineage.track:TRACK, env: lineage}
                               │
                    Track ─────┼── check_prepared / check_output ──► contracts (prepare, runner, scoring)
                               ├── method_input (+ inputs a dataset may lack) ──► runner → method.run()
                               ├── scorer + metric_groups ──► scoring (evaluate rule), leaderboard
                               └── dataset_facts, figures ──► celldag validate, report
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from celldag import extensions
from celldag.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    from anndata import AnnData

DELTA_PREFIX = "delta_"  # the leaderboard's Δ against the run config's delta_baseline method


def relative_reduction(baseline: float, value: float) -> float:
    """A Δ: (baseline − value) / baseline: 1 is perfect, 0 no better than the baseline; nan if baseline is 0."""
    return (baseline - value) / baseline if baseline > 0 else math.nan


# What a metric is judged against (docs/report.md, "Floor cards"): a guarantee against its target, never "beaten";
# efficiency and ranking against the null and oracle controls the metric names; a diagnostic (groups too small to
# calibrate, batches called shifted) against nothing: it says what happened, and is shown beside the scores
ROLES = ("guarantee", "efficiency", "ranking", "diagnostic")
# a guarantee's target, with α the annotation scores' level: coverage at least 1 − α, a rate of errors (false flags)
# at most α, a shortfall below 1 − α at most 0
TARGETS = {"coverage": "≥ 1 − α", "error_rate": "≤ α", "shortfall": "≤ 0"}
SCALED_PREFIX = "scaled_"  # a control-scaled score: (score − null) / (oracle − null), same dataset and seed


def target_met(target: str, value: float, alpha: float) -> bool:
    """Whether ``value`` meets a guarantee's ``target`` (a key of ``TARGETS``) at level ``alpha``."""
    bound = {"coverage": 1 - alpha, "error_rate": alpha, "shortfall": 0.0}[target]
    return value >= bound if target == "coverage" else value <= bound


@dataclass(frozen=True)
class Metric:
    """One metric of a track. ``role`` says what it is judged against (``ROLES``): a guarantee names its ``target``
    (``TARGETS``); an efficiency or ranking metric names its ``null`` and ``oracle``, each a control's
    "method/variant" (an annotation row: "classifier/embedding method/variant"), once, here — never chosen per
    dataset, so adding a method changes no metric's floor.

    Attributes:
        name: The metric's name: its column in the scores, unique in the track and never starting with
            ``DELTA_PREFIX`` or ``SCALED_PREFIX``.
        higher_is_better: The metric's direction: True if a higher value is better.
        role: What the metric is judged against, one of ``ROLES``: guarantee, efficiency, ranking (the default)
            or diagnostic.
        null: The null control's "method/variant", for an efficiency or ranking metric only; given together with
            ``oracle``, or neither.
        oracle: The oracle control's "method/variant", given together with ``null``.
        target: A guarantee's target, a key of ``TARGETS`` (e.g. ``"coverage"``); only a guarantee names one.
        core: Every run gets a row (NaN when the run is not ok): what "seeds ok" counts.
        delta: The leaderboard adds ``delta_<name>``, the relative reduction against the baseline method.
        count: A count (e.g. marker genes found), not a score: shown, never ranked or shaded.
        derived: Computed from other scores of the same run (scIB's aggregates, a reduction against raw
            distances): left out of check's per-method verdict, whose evidence its parts already carry (a Δ,
            ``DELTA_PREFIX``, is derived too).
        clipped_at: The bound to which the scoring library clips its raw score: values equal to it are marked;
            None if it clips nothing.
    """

    name: str
    higher_is_better: bool
    role: str = "ranking"
    null: str | None = None
    oracle: str | None = None
    target: str | None = None
    core: bool = False
    delta: bool = False
    count: bool = False
    derived: bool = False
    clipped_at: float | None = None


@dataclass(frozen=True)
class MetricGroup:
    """Metrics of a track shown together on the leaderboard, under one heading.

    Attributes:
        title: The leaderboard heading; the first group is the dataset's main table.
        metrics: The group's metrics, in the order the leaderboard shows them.
    """

    title: str
    metrics: tuple[Metric, ...]


@dataclass(frozen=True)
class ScoringContext:
    """What a scorer may read besides the prepared dataset and the outputs of one seed.

    Attributes:
        seed: The seed whose prepared dataset and outputs are scored.
        dataset: The dataset's registry entry (e.g. its marker genes).
        evaluation: The run config's ``evaluation`` section (e.g. the number of sampled quartets).
        table_paths: The gene-embedding tables the runs read.
        chained_inputs: A chained track's inputs of this seed, as AnnData (the task with each upstream run's
            embedding as X): what a scorer measures in the embedding itself (annotation: the distance of a
            held-out type's cells to the train cells).
    """

    seed: int
    dataset: dict
    evaluation: dict
    table_paths: tuple[str, ...] = ()
    chained_inputs: tuple = ()


FIGURE_INPUTS = ("scores", "runs", "outputs", "tables")  # what a figure may read (its job's inputs)


@dataclass(frozen=True)
class Figure:
    """One figure of a dataset's report: ``results/{name}/figures/{dataset}/{figure}.png``, one job each.

    ``needs`` lists what the job reads (of ``FIGURE_INPUTS``), so a figure reruns only when that changed
    and starts as soon as that exists (a UMAP grid needs the outputs, not the slow scoring job).

    Attributes:
        name: The file stem, unique in the track.
        draw: An entry point ``(FigureData) -> matplotlib.figure.Figure``; deterministic (same inputs, same
            pixels).
        caption: A reStructuredText file, relative to the folder of ``draw``'s module: what is plotted, which
            seed, how to read it.
        needs: What the figure's job reads, of ``FIGURE_INPUTS`` (default: the scores only).
    """

    name: str
    draw: str
    caption: str
    needs: tuple[str, ...] = ("scores",)

    def caption_path(self) -> Path:
        """The caption file (package data beside the drawing module), found without importing the module."""
        spec = importlib.util.find_spec(self.draw.partition(":")[0])
        return Path(spec.origin).parent / self.caption


# The figures a track may list beside its own: drawn by celldag.report.figures, named here so that a track module
# lists them without importing a view
COMMON_FIGURES = (
    Figure("scores", "celldag.report.figures:scores_heatmap", "captions/scores.rst", needs=("scores",)),
    Figure("cost", "celldag.report.figures:cost", "captions/cost.rst", needs=("runs",)),
)


@dataclass(frozen=True)
class FigureData:
    """What a figure's ``draw`` gets: one dataset, read by the figure job (fields it did not need are empty).

    Attributes:
        dataset: The dataset's id.
        dataset_entry: The dataset's registry entry (e.g. marker genes).
        track_id: The id of the dataset's track (its name in ``config/tracks.yaml``).
        track: That track's declaration.
        seed: The seed whose outputs are drawn: the run config's smallest.
        evaluation: The run config's ``evaluation`` section (e.g. ``paired``, ``delta_baseline``).
        kinds: "method/variant" → method, baseline or control.
        scores: ``results/{name}/scores/{dataset}.parquet``: every seed, no Δ rows.
        runs: The dataset's run records (``celldag.results.leaderboard.RUN_COLUMNS``), every seed.
        prepared: The prepared dataset of ``seed`` (given with "outputs").
        outputs: "method/variant" → its output of ``seed``.
        tables: The gene-embedding tables (parquet) the runs of ``seed`` read.
    """

    dataset: str
    dataset_entry: dict
    track_id: str
    track: "Track"
    seed: int
    evaluation: dict
    kinds: Mapping[str, str] = field(default_factory=dict)
    scores: "pd.DataFrame | None" = None
    runs: "pd.DataFrame | None" = None
    prepared: "AnnData | None" = None
    outputs: Mapping[str, "AnnData"] = field(default_factory=dict)
    tables: tuple[str, ...] = ()


@dataclass(frozen=True)
class Track:
    """A track's declaration. Each ``str`` field is an entry point (``module:function``) with the signature noted.

    A chained track (``upstream``, ``chain_task``, ``chain_input``) runs on the outputs of another track's runs
    (annotation on representation embeddings).

    Attributes:
        x_dtype: The dtype of a prepared dataset's X.
        check_prepared: ``(adata, path) -> None``: the track's part of the prepared-dataset contract.
        check_output: ``(adata, path) -> None``: its part of the contract of an ``ok`` method output.
        method_input: ``(prepared, work_dir, gene_table) ->`` the input object of its methods' ``run()``; the
            object's ``unmet(need) -> reason | None`` says whether the dataset provides an optional input.
        inputs: The optional inputs a method may list under ``needs`` → what provides them.
        scorer: ``(prepared, outputs, ScoringContext) -> [{metric: value}]``, one dict per output (empty if not
            ok).
        metric_groups: The track's metrics, grouped as the leaderboard shows them (the first group is the main
            table).
        dataset_facts: ``(prepared, registry entry) -> [(what, value)]``: what ``celldag validate`` reports of a
            prepared dataset.
        figures: The report's figures of each dataset of the track.
        arrange: ``(adata, seed) -> adata``: the rows of a prepared dataset in the order methods get them; None:
            as prepared.
        upstream: A chained track's upstream track id; the datasets listing this track under ``chained`` feed it.
        chain_task: ``(upstream prepared, task params, seed) -> adata``: the task of one dataset seed.
        chain_input: ``(task, upstream output, upstream record) -> adata``: a method's prepared input.
        row_labels: The leaderboard's names of a run's two id columns.
    """

    x_dtype: str
    check_prepared: str
    check_output: str
    method_input: str
    inputs: Mapping[str, str]
    scorer: str
    metric_groups: tuple[MetricGroup, ...]
    dataset_facts: str
    figures: tuple[Figure, ...] = field(default=())
    arrange: str | None = None
    upstream: str | None = None
    chain_task: str | None = None
    chain_input: str | None = None
    row_labels: tuple[str, str] = ("method", "variant")

    def figure(self, name: str) -> Figure:
        return next(figure for figure in self.figures if figure.name == name)

    def call(self, role: str, *args):
        """Call the function this track names for ``role`` (e.g. ``"scorer"``)."""
        return extensions.load(getattr(self, role))(*args)

    @property
    def metrics(self) -> dict[str, Metric]:
        return {metric.name: metric for group in self.metric_groups for metric in group.metrics}

    @property
    def core_metrics(self) -> tuple[str, ...]:
        return tuple(name for name, metric in self.metrics.items() if metric.core)

    def higher_is_better(self, metric: str) -> bool:
        """Direction of a declared metric, or of its leaderboard Δ or control-scaled score (higher-is-better both)."""
        for prefix in (DELTA_PREFIX, SCALED_PREFIX):
            if metric.startswith(prefix) and metric.removeprefix(prefix) in self.metrics:
                return True
        return self.metrics[metric].higher_is_better


ENTRY_POINT_ROLES = ("check_prepared", "check_output", "method_input", "scorer", "dataset_facts")


@cache
def load_track(definition: str) -> Track:
    track = extensions.load(definition)
    if not isinstance(track, Track):
        raise InputError(f"{definition}: names a {type(track).__name__}, not a celldag.tracks.Track")
    return track


def check_track(track_id: str, entry: dict, where: str) -> Track:
    """Parse-time checks of one tracks-registry entry: its definition and everything the definition declares."""
    extensions.check_entry_point(entry["definition"], f"{where}: {track_id}.definition")
    track = load_track(entry["definition"])
    check_declaration(track, f"{where}: {track_id} ({entry['definition']})")
    return track


def check_declaration(track: Track, where: str) -> None:
    """Every entry point names a definition; metric names are unique, not Δ names; one or more core metrics."""
    for role in ENTRY_POINT_ROLES:
        extensions.check_entry_point(getattr(track, role), f"{where}: {role}")
    for role in ("arrange", "chain_task", "chain_input"):
        if getattr(track, role) is not None:
            extensions.check_entry_point(getattr(track, role), f"{where}: {role}")
    if track.upstream is not None and (track.chain_task is None or track.chain_input is None):
        raise InputError(f"{where}: a chained track (upstream {track.upstream!r}) declares chain_task and chain_input")
    for figure in track.figures:
        extensions.check_entry_point(figure.draw, f"{where}: figures {figure.name!r}")
        if not figure.caption_path().is_file():
            raise InputError(f"{where}: figures {figure.name!r}: no caption file {figure.caption_path()}")
        unknown = sorted(set(figure.needs) - set(FIGURE_INPUTS))
        if unknown:
            raise InputError(f"{where}: figures {figure.name!r}: needs {unknown}, not among {list(FIGURE_INPUTS)}")
    figure_names = [figure.name for figure in track.figures]
    if len(set(figure_names)) < len(figure_names):
        raise InputError(f"{where}: figure names repeat: {figure_names}")
    names = [metric.name for group in track.metric_groups for metric in group.metrics]
    if not track.core_metrics:
        raise InputError(f"{where}: no core metric (every run needs at least one row)")
    for name in names:
        if names.count(name) > 1:
            raise InputError(f"{where}: metric {name!r} declared twice")
        if name.startswith((DELTA_PREFIX, SCALED_PREFIX)):
            raise InputError(
                f"{where}: metric {name!r}: the prefixes {DELTA_PREFIX!r} and {SCALED_PREFIX!r} are the "
                "leaderboard's Δ and control-scaled scores"
            )
    for metric in track.metrics.values():
        check_role(metric, f"{where}: metric {metric.name!r}")


def check_role(metric: Metric, where: str) -> None:
    """A role of ``ROLES``; a guarantee with a target of ``TARGETS`` and no controls; a control pair only where
    the role is judged against controls, both named or neither."""
    if metric.role not in ROLES:
        raise InputError(f"{where}: role {metric.role!r}, not one of {list(ROLES)}")
    if (metric.role == "guarantee") != (metric.target is not None):
        raise InputError(f"{where}: a guarantee, and only a guarantee, names a target ({list(TARGETS)})")
    if metric.target is not None and metric.target not in TARGETS:
        raise InputError(f"{where}: target {metric.target!r}, not one of {list(TARGETS)}")
    if (metric.null is None) != (metric.oracle is None):
        raise InputError(f"{where}: names a null and an oracle, or neither")
    if metric.null is not None and metric.role not in ("efficiency", "ranking"):
        raise InputError(
            f"{where}: a {metric.role} is not judged against controls; only efficiency and ranking "
            "metrics name a null and an oracle"
        )


def tracks_of(entries: Mapping[str, dict]) -> dict[str, Track]:
    """Track id → Track, for a tracks registry (e.g. a rule's params)."""
    return {track_id: load_track(entry["definition"]) for track_id, entry in entries.items()}
