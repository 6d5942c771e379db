"""``celldag validate``: check a registry dataset without running anything else, and say what it allows.

The report lists the dataset's size, labels and batches, what each track can do with it, and every
problem found at once: missing or unverified files, and (for the ``h5ad`` / ``lineage_h5ad`` loaders)
every problem of the source file. A dataset without problems is prepared once (seed 0) and held to
the prepared-dataset contract, exactly as the pipeline's first job would.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from celldag import extensions, plan
from celldag.errors import InputError
from celldag.registry import PIN_ON_FIRST_FETCH, SCHEMA_DIR, Registries, read_yaml


@dataclass
class Report:
    dataset_id: str
    track: str
    facts: list[tuple[str, str]] = field(default_factory=list)  # (what, value), in print order
    warnings: list[str] = field(default_factory=list)  # worth a look, but the dataset runs: exit status 0
    problems: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"dataset {self.dataset_id} ({self.track} track)"]
        lines += [f"  {what + ':':<22} {value}" for what, value in self.facts]
        lines += [f"  warning: {warning}" for warning in self.warnings]
        if self.problems:
            lines.append(f"  {len(self.problems)} problem{'s' if len(self.problems) > 1 else ''}:")
            lines += [f"    - {problem}" for problem in self.problems]
        else:
            lines.append("  no problems found")
        return "\n".join(lines)


def validate_dataset(dataset_id: str, registries: Registries) -> Report:
    """The report of one registry dataset; paths are relative to the working directory (the workflow's)."""
    id_pattern = read_yaml(SCHEMA_DIR / "datasets.schema.yaml")["propertyNames"]["pattern"]  # the registry's own rule
    if not re.match(id_pattern, dataset_id):
        raise InputError(
            f"{dataset_id!r} is not a dataset id: ids are lower-case letters, digits and '_', never a path"
        )
    if dataset_id not in registries.datasets:
        raise InputError(f"unknown dataset id {dataset_id!r}; known ids: {', '.join(sorted(registries.datasets))}")
    entry = registries.datasets[dataset_id]
    files = plan.dataset_files(dataset_id, entry)
    report = source_report(dataset_id, entry, files)
    if report.problems:
        return report
    from celldag import contracts
    from celldag.jobs.prepare import prepare_dataset

    track = registries.track(entry["track"])
    try:
        prepared = prepare_dataset(dataset_id, entry, track, 0, files)
        contracts.check_prepared_dataset(prepared, f"{dataset_id} (prepared, seed 0)", entry["track"], track)
    except (InputError, ValueError) as err:
        report.problems.append(str(err))
        return report
    report.facts += track.call("dataset_facts", prepared, entry)
    report.facts += _input_facts(prepared, entry["track"], track, registries)
    report.facts += _gene_table_facts(prepared, dataset_id, registries)
    return report


def source_report(dataset_id: str, entry: dict, files: dict[str, str]) -> Report:
    """The checks of a dataset's files, before anything is prepared from them: present, matching their
    sha256 or pin, and (for loaders with a source check, such as a lab's h5ad) every problem of their content."""
    report = Report(dataset_id, entry["track"])
    report.problems += _file_problems(dataset_id, entry, files)
    if not report.problems:
        _check_source(entry, files, report)
    return report


def write_validation(dataset_id: str, entry: dict, files: dict[str, str], path: str) -> None:
    """The validate_dataset job: the report of the dataset's files to ``path``, or an InputError (one line,
    the first problem; the log lists them all) when they have problems, leaving no report behind."""
    report = source_report(dataset_id, entry, files)
    print(report.render(), file=sys.stderr)  # the job's log
    if report.problems:
        more = len(report.problems) - 1
        extra = f" (and {more} more problem{'s' if more > 1 else ''}: `celldag validate {dataset_id}` lists them all)"
        raise InputError(f"{report.problems[0]}{extra if more else ''}")
    from celldag.artifacts import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(report.render() + "\n")


def _file_problems(dataset_id: str, entry: dict, files: dict[str, str]) -> list[str]:
    """Local files as preparation checks them; downloads present and matching their registry sha256 or pin."""
    from celldag.artifacts import sha256_file
    from celldag.jobs.download import DownloadError, verify_pinned
    from celldag.jobs.prepare import local_file_problems

    problems = [str(problem) for problem in local_file_problems(entry)]
    for spec in entry.get("files", []):
        if "url" not in spec:
            continue
        path = files[spec["name"]]
        if not Path(path).is_file():
            problems.append(f"{path}: file: not found (downloaded by `snakemake {path}`)")
        elif spec["sha256"] != PIN_ON_FIRST_FETCH:
            digest = sha256_file(path)
            if digest != spec["sha256"]:
                problems.append(f"{path}: sha256: the registry gives {spec['sha256']}, the file has {digest}")
        else:
            try:
                verify_pinned(path, plan.DOWNLOAD_PINS.format(source=dataset_id))
            except DownloadError as err:
                problems.append(str(err))
    return problems


def _check_source(entry: dict, files: dict[str, str], report: Report) -> None:
    """A loader's own source check (its ``check_source`` attribute), for loaders that read a lab's files."""
    check = getattr(extensions.load(entry["loader"]), "check_source", None)
    if check is None:  # preparing the dataset (below) finds its problems
        return
    problems, warnings, facts = check(entry["params"], files)
    report.problems += problems
    report.warnings += warnings
    report.facts += facts


def _input_facts(prepared, track_id: str, track, registries: Registries) -> list[tuple[str, str]]:
    """Which optional inputs of its track the dataset provides, and the registry's methods it leaves out."""
    inputs = track.call("method_input", prepared, None, None)
    facts = [
        (f"input {need}", f"{'no' if inputs.unmet(need) else 'yes'} ({what})") for need, what in track.inputs.items()
    ]
    left_out = [
        f"{method}/{variant}"
        for method, entry in sorted(registries.methods.items())
        if entry["track"] == track_id
        for variant in entry["variants"]
        if any(inputs.unmet(need) for need in plan.method_needs(entry, variant))
    ]
    facts.append(("methods", f"not_applicable: {', '.join(left_out)}" if left_out else "all of its track's can run"))
    return facts


def _gene_table_facts(prepared, dataset_id: str, registries: Registries) -> list[tuple[str, str]]:
    """Gene overlap with every gene-embedding table already built for this dataset (built by embed_genes)."""
    from celldag.embeddings import match_genes, read_table

    facts = []
    key = plan.data_key(registries.datasets[dataset_id])
    for embedding in sorted(registries.embeddings):
        path = Path(plan.GENE_TABLE.format(embedding=embedding, dataset=dataset_id, data_key=key))
        if path.is_file():
            _, _, missing = match_genes(list(prepared.var_names), read_table(path))
            facts.append((f"genes in {embedding}", f"{prepared.n_vars - missing} of {prepared.n_vars}"))
    return facts
