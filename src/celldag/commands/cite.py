"""``celldag cite [RESULTS]`` (docs/citing.md): what a paper made with celldag cites — celldag itself, then the works
behind every method, dataset and gene embedding with at least one ``ok`` run in RESULTS (its runs.parquet), or,
without RESULTS, every one the config's plan selects, marked planned; with the license of each. An entry whose
registry holds no ``reference:`` (a lab's own, often) is listed as such rather than left out silently.

Works are formatted by ``celldag.bibliography``: a reference list in Markdown by default, BibTeX with
``--format bibtex``. A work cited by several entries (CellTreeQM's paper: the method, its baselines, the simulated
benchmark) is listed once, naming them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

import celldag
from celldag.bibliography import bibtex, bibtex_key, format_reference, reference_id, references_of
from celldag.errors import InputError
from celldag.plan import Plan, embeddings_needed, method_params
from celldag.registry import Registries
from celldag.results.compare import results_folder

KINDS = {"methods": "method", "datasets": "dataset", "embeddings": "gene embedding"}  # registry kind → its noun


@dataclass(frozen=True)
class Cited:
    """The entries a results folder (or a plan) used, by registry kind, each as an id; ``planned``: from a plan."""

    source: str  # what was read: the results folder, or the config whose plan it is
    entries: dict[str, list[str]]  # registry kind → sorted ids
    planned: bool


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


def cited_by_results(results: str, registries: Registries) -> Cited:
    """The entries with at least one ok run in the results folder's runs.parquet."""
    folder = results_folder(results)
    runs_path = folder / "runs.parquet"
    if not runs_path.is_file():
        raise InputError(f"{runs_path}: not found (the aggregate job writes it beside scores.parquet)")
    runs = pd.read_parquet(runs_path, columns=["dataset", "method", "variant", "status"])
    ok = runs[runs["status"] == "ok"]
    triples = set(zip(ok["dataset"], ok["method"], ok["variant"]))
    return Cited(str(folder), cited_entries(triples, registries), planned=False)


def cited_by_plan(plan: Plan, configfile: str, registries: Registries) -> Cited:
    """The entries the plan's runs and chained runs use."""
    triples = {(run.dataset, run.method, run.variant) for run in plan.runs}
    triples |= {(run.upstream.dataset, run.chained_method, run.label) for run in plan.chained}
    return Cited(f"the plan of {configfile}", cited_entries(triples, registries), planned=True)


@dataclass(frozen=True)
class Work:
    """One work to cite and the entries that cite it, as ``kind id`` (``method celltreeqm``)."""

    reference: dict | str
    cited_for: tuple[str, ...]


def works_and_gaps(cited: Cited, registries: Registries) -> tuple[list[Work], list[str], list[tuple[str, str]]]:
    """The works to cite, each once, in the order first cited (methods, datasets, embeddings); the entries without
    a reference in their registry (``kind id (registry file)``); each entry's license as (``kind id``, license)."""
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
                key = reference_id(reference)
                before = works.get(key, Work(reference, ()))
                works[key] = Work(before.reference, (*before.cited_for, name))
    return list(works.values()), gaps, licenses


def celldag_line() -> str:
    """celldag itself, at the version that runs this command (CITATION.cff at the repository root has its record)."""
    summary = celldag.__doc__.split(": ", 1)[-1].strip().rstrip(".")
    return f"The celldag developers. celldag {celldag.__version__}: {summary}. Software."


def markdown_citations(cited: Cited, registries: Registries) -> str:
    works, gaps, licenses = works_and_gaps(cited, registries)
    counts = ", ".join(f"{len(ids)} {KINDS[kind]}{'s' if len(ids) != 1 else ''}" for kind, ids in cited.entries.items())
    what = "selected by" if cited.planned else "with at least one ok run in"
    lines = [
        f"# Citations: {cited.source}",
        "",
        f"Entries {what} {cited.source}: {counts}. Cite celldag and these works:",
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
        f"% {cited.source}: celldag and the works behind its entries\n"
        f"@software{{celldag,\n  author = {{{{The celldag developers}}}},\n  title = {{celldag}},\n"
        f"  version = {{{celldag.__version__}}}\n}}"
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
