"""``celldag cite [RESULTS]`` (docs/citing.md): what a paper made with celldag cites — celldag itself, then the works
behind every method, dataset and gene embedding with at least one ``ok`` run in RESULTS (its runs.parquet), and
behind every metric with at least one ok score there (its scores.parquet): the procedures and metric families its
track's ``references:`` in the tracks registry names; or, without RESULTS, every entry the config's plan selects and
every family of the plan's tracks, marked planned; with the license of each entry. An entry whose registry holds no
``reference:``, a track without ``references:`` and a metric no family covers (a lab's own, often) are listed as
such rather than left out silently.

Works are formatted by ``celldag.bibliography``: a reference list in Markdown by default, BibTeX with
``--format bibtex``. A work cited by several entries or metric families (CellTreeQM's paper: the method, its
baselines, the simulated benchmark and the lineage metrics it defines) is listed once, naming them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import pandas as pd

import celldag
from celldag import release
from celldag.bibliography import bibtex, bibtex_key, format_reference, reference_id, references_of
from celldag.errors import InputError
from celldag.plan import Plan, embeddings_needed, method_params
from celldag.registry import Registries
from celldag.results.compare import results_folder
from celldag.tracks import DELTA_PREFIX, SCALED_PREFIX

KINDS = {"methods": "method", "datasets": "dataset", "embeddings": "gene embedding"}  # registry kind → its noun
SCORE_COLUMNS = ["track", "metric", "value", "status"]  # what cite reads of scores.parquet


@dataclass(frozen=True)
class Cited:
    """The entries a results folder (or a plan) used, by registry kind, each as an id, and the metrics it scored, by
    track; ``planned``: from a plan."""

    source: str  # what was read: the results folder, or the config whose plan it is
    entries: dict[str, list[str]]  # registry kind → sorted ids
    planned: bool
    # track id → the sorted metric names with an ok score (a plan: every metric its track declares)
    metrics: dict[str, list[str]] = field(default_factory=dict)


def used_embeddings(method: str, variant: str, registries: Registries) -> list[str]:
    """The gene embeddings a run of ``method/variant`` reads: its params' ``embedding`` and what that one is made of
    (a shuffled control's ``of``). A chained run's variant names its upstream run, whose own row says what it read."""
    entry = registries.methods.get(method)
    if entry is None or variant not in entry["variants"]:
        return []
    return embeddings_needed(method_params(entry, variant).get("embedding"), registries.embeddings)


def cited_entries(triples: set[tuple[str, str, str]], registries: Registries) -> dict[str, list[str]]:
    """Registry kind → the ids the (dataset, method, variant) runs use."""
    embeddings = {name for _, method, variant in triples for name in used_embeddings(method, variant, registries)}
    return {
        "methods": sorted({method for _, method, _ in triples}),
        "datasets": sorted({dataset for dataset, _, _ in triples}),
        "embeddings": sorted(embeddings),
    }


def read_scores(path: Path) -> pd.DataFrame:
    """The columns of a results folder's scores.parquet that say which metrics were scored ok (``SCORE_COLUMNS``)."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise InputError(f"{path}: not found (the aggregate job writes it beside runs.parquet)")
    missing = [column for column in SCORE_COLUMNS if column not in pq.read_schema(path).names]
    if missing:
        raise InputError(f"{path}: no column {', '.join(map(repr, missing))}: not a celldag scores table")
    return pd.read_parquet(path, columns=SCORE_COLUMNS)


def scored_metrics(scores: pd.DataFrame) -> dict[str, list[str]]:
    """Track id → the metrics with at least one ok, non-NaN row in a scores table; a leaderboard Δ or control-scaled
    row (``delta_rf``, ``scaled_rf``) counts for the metric it is computed from."""
    ok = scores[(scores["status"] == "ok") & scores["value"].notna()]
    names = ok["metric"].astype(str).str.replace(f"^(?:{DELTA_PREFIX}|{SCALED_PREFIX})", "", regex=True)
    return {str(track): sorted(set(group)) for track, group in names.groupby(ok["track"].astype(str), sort=True)}


def cited_by_results(results: str, registries: Registries) -> Cited:
    """The entries with at least one ok run in the results folder's runs.parquet, and the metrics with at least one ok
    score in its scores.parquet."""
    folder = results_folder(results)
    runs_path, scores_path = folder / "runs.parquet", folder / "scores.parquet"
    if not runs_path.is_file():
        raise InputError(f"{runs_path}: not found (the aggregate job writes it beside scores.parquet)")
    runs = pd.read_parquet(runs_path, columns=["dataset", "method", "variant", "status"])
    ok = runs[runs["status"] == "ok"]
    triples = set(zip(ok["dataset"], ok["method"], ok["variant"]))
    scores = read_scores(scores_path)
    return Cited(str(folder), cited_entries(triples, registries), planned=False, metrics=scored_metrics(scores))


def cited_by_plan(plan: Plan, configfile: str, registries: Registries) -> Cited:
    """The entries the plan's runs and chained runs use, and every metric of the tracks they belong to."""
    triples = {(run.dataset, run.method, run.variant) for run in plan.runs}
    triples |= {(run.upstream.dataset, run.chained_method, run.label) for run in plan.chained}
    tracks = {registries.datasets[run.dataset]["track"] for run in plan.runs} | {run.track for run in plan.chained}
    metrics = {track: sorted(registries.track(track).metrics) for track in sorted(tracks)}
    return Cited(f"the plan of {configfile}", cited_entries(triples, registries), planned=True, metrics=metrics)


@dataclass(frozen=True)
class Work:
    """One work to cite and what cites it: entries as ``kind id`` (``method celltreeqm``), metric families as
    ``track metrics family (patterns)`` (``annotation metrics kandinsky (kandinsky_*)``)."""

    reference: dict | str
    cited_for: tuple[str, ...]


def add_work(works: dict[tuple, Work], reference: dict | str, name: str) -> None:
    """Cite ``reference`` for ``name``: a work cited already gains the name. Its ``note`` (why it is cited) stays only
    while every citation gives the same one: cited for several reasons, the names say which."""
    key = reference_id(reference)
    if key not in works:
        works[key] = Work(reference, (name,))
        return
    kept = works[key].reference
    if isinstance(kept, dict) and isinstance(reference, dict) and kept.get("note") != reference.get("note"):
        kept = {part: value for part, value in kept.items() if part != "note"}
    works[key] = Work(kept, (*works[key].cited_for, name))


def family_name(track_id: str, family: str, patterns: list[str], planned: bool) -> str:
    """What a metric family's work is cited for: ``annotation metrics kandinsky (kandinsky_*)``."""
    return f"{track_id} metrics {family} ({', '.join(patterns)}{'; planned' if planned else ''})"


def metric_works(cited: Cited, registries: Registries, works: dict[tuple, Work]) -> list[str]:
    """Cite the works of every metric family (a track's ``references:``) that covers a metric of ``cited.metrics``;
    returns the gaps: a track the registries do not hold, a track without ``references:``, metrics no family covers."""
    gaps = []
    planned = " (planned)" if cited.planned else ""
    for track_id, metrics in cited.metrics.items():
        entry = registries.tracks.get(track_id)
        if entry is None:
            gaps.append(f"track {track_id}{planned}: not in the registries this config loads")
            continue
        families = entry.get("references") or {}
        if not families:
            origin = registries.origin("tracks", track_id)
            gaps.append(f"track {track_id}{planned} ({origin}): its entry has no `references:` for its metrics")
            continue
        covered: set[str] = set()
        for family, spec in families.items():
            matched = {metric for metric in metrics if any(fnmatchcase(metric, p) for p in spec["metrics"])}
            if not matched:
                continue
            covered |= matched
            for reference in references_of(spec):
                add_work(works, reference, family_name(track_id, family, spec["metrics"], cited.planned))
        uncovered = [metric for metric in metrics if metric not in covered]
        if uncovered:
            origin = registries.origin("tracks", track_id)
            gaps.append(
                f"{track_id} metrics {', '.join(uncovered)}{planned} ({origin}): no family of its track's "
                "`references:` covers them"
            )
    return gaps


def works_and_gaps(cited: Cited, registries: Registries) -> tuple[list[Work], list[str], list[tuple[str, str]]]:
    """The works to cite, each once, in the order first cited (methods, datasets, embeddings, then the tracks' metric
    families); the entries without a reference in their registry (``kind id (registry file)``) and the metrics
    without one; each entry's license as (``kind id``, license)."""
    works: dict[tuple, Work] = {}
    gaps, licenses = [], []
    for kind, ids in cited.entries.items():
        for entry_id in ids:
            name = f"{KINDS[kind]} {entry_id}" + (" (planned)" if cited.planned else "")
            entry = getattr(registries, kind).get(entry_id)
            if entry is None:
                gaps.append(f"{name}: not in the registries this config loads")
                continue
            licenses.append((name, entry.get("license", "not stated")))
            if not references_of(entry):
                gaps.append(f"{name} ({registries.origin(kind, entry_id)}): its entry has no `reference:`")
            for reference in references_of(entry):
                add_work(works, reference, name)
    gaps += metric_works(cited, registries, works)
    return list(works.values()), gaps, licenses


def celldag_line() -> str:
    """celldag itself, as CITATION.cff at the repository root records it, at the version and commit that run this
    command."""
    commit, url = release.package_commit(), release.repository_url()
    at = f", commit {commit[:12]}" if commit != "unknown" else ""
    return (
        f"The celldag developers ({release.RELEASE_DATE[:4]}). {release.TITLE}. Software, version "
        f"{celldag.__version__}{at}." + (f" {url}" if url != "unknown" else "")
    )


def markdown_citations(cited: Cited, registries: Registries) -> str:
    works, gaps, licenses = works_and_gaps(cited, registries)
    counts = ", ".join(f"{len(ids)} {KINDS[kind]}{'s' if len(ids) != 1 else ''}" for kind, ids in cited.entries.items())
    what = "selected by" if cited.planned else "with at least one ok run in"
    scored = ", ".join(f"{len(names)} of {track_id}" for track_id, names in cited.metrics.items()) or "none"
    metrics = "of their tracks" if cited.planned else "with at least one ok score"
    lines = [
        f"# Citations: {cited.source}",
        "",
        f"Entries {what} {cited.source}: {counts}; metrics {metrics}: {scored}. Cite celldag and these works:",
        "",
        f"1. {celldag_line()}",
    ]
    lines += [
        f"{number}. {format_reference(work.reference)} — for {', '.join(work.cited_for)}"
        for number, work in enumerate(works, start=2)
    ]
    lines += ["", "## Licenses", "", "| entry | license |", "|---|---|"]
    lines += [f"| {name} | {license} |" for name, license in licenses]
    if gaps:
        lines += ["", "## Without a reference", "", *(f"- {gap}" for gap in gaps)]
    return "\n".join(lines) + "\n"


def bibtex_citations(cited: Cited, registries: Registries) -> str:
    works, gaps, _ = works_and_gaps(cited, registries)
    keys: set[str] = {"celldag"}
    entries = [
        f"% {cited.source}: celldag and the works behind its entries and metrics\n"
        f"@software{{celldag,\n  author = {{{{The celldag developers}}}},\n  title = {{{{{release.TITLE}}}}},\n"
        f"  version = {{{celldag.__version__}}},\n  year = {{{release.RELEASE_DATE[:4]}}},\n"
        f"  url = {{{release.repository_url()}}},\n  note = {{commit {release.package_commit()}}}\n}}"
    ]
    entries += [
        f"% for: {', '.join(work.cited_for)}\n{bibtex(work.reference, bibtex_key(work.reference, keys))}"
        for work in works
    ]
    entries += [f"% without a reference: {gap}" for gap in gaps]
    return "\n\n".join(entries) + "\n"


def citations(cited: Cited, registries: Registries, output_format: str) -> str:
    """The citations as ``output_format`` (one of FORMATS: the parser holds ``--format`` to them)."""
    return (bibtex_citations if output_format == "bibtex" else markdown_citations)(cited, registries)
